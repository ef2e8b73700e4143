"""Torch job for the round-trip tests. argv: MODE ROLES DIR OUT [S3_ENDPOINT BUCKET]

ROLES is one letter per rank: T trainer, H holder, B both (Single Anchor).
save:    train a small model, save at step 5, corrupt-proof check: mutate the weights right after save();
         also exercise request_flush/should_flush/flush_now at step 6; write the reference state to OUT.
restore: restore (possibly with another number of trainers) and compare with OUT bit for bit.
"""

import json
import sys
from pathlib import Path

from leave import leave_now
from mpi4py import MPI

import deepcheck

comm = MPI.COMM_WORLD
mode, roles, directory, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
s3 = deepcheck.S3Config(bucket=sys.argv[6], endpoint_url=sys.argv[5]) if len(sys.argv) > 5 else None
role = {"T": "trainer", "H": "holder", "B": "both"}[roles[comm.rank]]
ck = deepcheck.init(  # small chunks: every shard crosses MPI as several messages
    comm, role, directory=directory if "HB".count(roles[comm.rank]) else None, s3=s3, chunk_bytes=4096, timeout=60
)
result: dict = {"rank": comm.rank}

if role == "holder":
    ck.serve()
else:
    import torch  # trainers only: holders never load torch

    t = ck.world.trainer_index
    if mode == "save":
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3)
        torch.manual_seed(100 + t)  # per-rank data order
        for step in range(1, 7):
            opt.zero_grad()
            model(torch.randn(8, 32)).pow(2).mean().backward()
            opt.step()
            sched.step()
            state = {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "data": {"epoch": 0, "batch": step},
            }
            if step == 5:
                reference = {k: v.clone() for k, v in model.state_dict().items()}
                handle = ck.save(state, step, epoch=0, rank_state={"rank": t, "cursor": 1000 + t})
                with torch.no_grad():  # the next optimizer step, right after save() returned
                    for p in model.parameters():
                        p.add_(1.0)
                result["after_save_rand"] = torch.rand(3).tolist()
                result["stall_s"] = handle.stall_s
                if t == 0:
                    torch.save(
                        {"model": reference, "optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
                        out,
                    )
                ck.wait(deepcheck.Level.L2)
                result["levels"] = [lv.name for lv in deepcheck.Level if ck.completed(lv) is not None]
            if step == 6:
                if t == ck.world.trainers.index(ck.world.trainers[-1]):
                    ck.request_flush()  # an interruption notice reaches one trainer only
                if ck.should_flush():
                    report = ck.flush_now(state, step, epoch=0)
                    result["flush"] = {
                        "step": report.step,
                        "level": report.level.name,
                        "seconds": report.seconds,
                    }
        if s3 is not None:
            ck.wait(deepcheck.Level.L3, step=6)
            result["l3"] = ck.completed(deepcheck.Level.L3).step
    else:
        latest = ck.latest()
        restored = ck.restore(rng=True)
        ref = torch.load(out, weights_only=True)
        got = restored.state
        result["latest"] = latest.step
        result["step"] = restored.info.step
        result["levels"] = [lv.name for lv in restored.info.levels]
        result["bitwise"] = all(
            torch.equal(ref["model"][k].view(torch.uint8), got["model"][k].view(torch.uint8)) for k in ref["model"]
        ) and list(ref["model"]) == list(got["model"])
        result["scheduler"] = got["scheduler"] == ref["scheduler"]
        result["data"] = got["data"]
        result["rank_state"] = restored.rank_state
        result["after_restore_rand"] = torch.rand(3).tolist()
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        model.load_state_dict(got["model"])
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt.load_state_dict(got["optimizer"])
        result["loads"] = True
    ck.close()
    (out.parent / f"{mode}-{comm.rank}.json").write_text(json.dumps(result))
leave_now()
