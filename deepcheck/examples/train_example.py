"""Train a small model with DeepCheck under mpirun; rerun the same command to resume.

    mpirun -n 3 python deepcheck/examples/train_example.py --dir /tmp/ckpt --steps 40

The last rank is a holder (the on-demand tier: it keeps checkpoints in RAM and on disk); the others are
data-parallel trainers that average gradients with MPI. `--notice-at N` simulates a Spot interruption
notice reaching trainer 0 at step N: all trainers flush a checkpoint to the holder and stop cleanly.
"""

from __future__ import annotations

import argparse

import torch
from mpi4py import MPI

import deepcheck


def allreduce_mean(comm: MPI.Comm, model: torch.nn.Module) -> None:
    """Average gradients over trainers in place (what DDP does), with a buffer-protocol Allreduce."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    comm.Allreduce(MPI.IN_PLACE, [MPI.buffer.fromaddress(flat.data_ptr(), flat.numel() * 4), MPI.FLOAT])
    flat /= comm.Get_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="holder's checkpoint directory (L2)")
    ap.add_argument("--steps", type=int, default=40, help="train until this step")
    ap.add_argument("--every", type=int, default=4, help="checkpoint every N steps")
    ap.add_argument("--notice-at", type=int, default=-1, help="simulate an interruption notice at this step")
    args = ap.parse_args()

    world = MPI.COMM_WORLD
    role = "holder" if world.rank == world.size - 1 else "trainer"
    trainers = world.Split(0 if role == "trainer" else MPI.UNDEFINED, world.rank)  # collective: before init
    ck = deepcheck.init(world, role, directory=args.dir, keep=2)
    if role == "holder":
        ck.serve()
        return
    rank = trainers.Get_rank()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.7)
    target = torch.randn(20, 1)
    step = 0

    restored = ck.restore()  # None on a fresh start
    if restored is not None:
        model.load_state_dict(restored.state["model"])
        opt.load_state_dict(restored.state["optimizer"])
        sched.load_state_dict(restored.state["scheduler"])
        step = restored.state["data"]["step"]
        if rank == 0:
            print(f"resumed from step {step} ({restored.info.ckpt.name})", flush=True)
    else:
        torch.manual_seed(1000 + rank)  # each trainer draws its own batches

    loss = torch.tensor(0.0)
    while step < args.steps:
        x = torch.randn(32, 20)
        loss = (model(x) - x @ target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        allreduce_mean(trainers, model)
        opt.step()
        sched.step()
        step += 1
        state = {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "data": {"step": step},
        }
        if rank == 0 and step == args.notice_at:
            ck.request_flush()  # in deepvm this comes from the instance-metadata watcher
        if ck.should_flush():
            report = ck.flush_now(state, step)
            if rank == 0:
                print(
                    f"interruption: step {step} safe at {report.level.name} in {report.seconds:.3f}s",
                    flush=True,
                )
            break
        if step % args.every == 0:
            handle = ck.save(state, step)
            if rank == 0:
                print(
                    f"step {step} loss {loss.item():.4f} checkpoint stall {handle.stall_s * 1e3:.2f} ms",
                    flush=True,
                )
    if ck.last_step < step:
        ck.save(state, step)
    done = ck.wait(deepcheck.Level.L2)
    if rank == 0:
        print(f"final loss {loss.item():.4f}; step {done.step} is durable on disk", flush=True)
    ck.close()


if __name__ == "__main__":
    main()
