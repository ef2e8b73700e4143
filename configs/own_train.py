"""Your own PyTorch script under `deepvm train` (see own-script.yaml): a small CNN on synthetic images.

Copy it and put your model, data and optimizer in its place; keep deepvm's five touch points, marked
`# deepvm:` below. The rest is plain DDP. `deepvm train` exports RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, so `dist.init_process_group()` finds the other trainers as under torchrun.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from training import job


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=16, help="per trainer, with the plan's trainer count")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--width", type=int, default=16, help="channels of the first convolution")
    return p.parse_args()


class SmallCNN(nn.Module):
    def __init__(self, classes: int, width: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class SyntheticImages:
    """Each class is a fixed random pattern; an image is its class's pattern plus noise (learnable).

    A batch is a function of (seed, step, rank) alone, so a run resumed from a checkpoint of step s sees
    the batches after s, with no data position to save.
    """

    def __init__(self, seed: int, classes: int, size: int) -> None:
        self.seed = seed
        self.patterns = torch.randn(classes, 3, size, size, generator=torch.Generator().manual_seed(seed))

    def batch(self, step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 1009 + rank)
        labels = torch.randint(len(self.patterns), (size,), generator=gen)
        images = self.patterns[labels] + torch.randn(size, *self.patterns.shape[1:], generator=gen)
        return images, labels


def main() -> None:
    args = parse_args()
    ctx = job.attach()  # deepvm: this trainer's rank, device, steps, checkpoints and out directory
    dist.init_process_group(ctx.backend)
    torch.manual_seed(ctx.seed)
    net = SmallCNN(args.classes, args.width).to(ctx.device)
    model = DistributedDataParallel(net, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)

    state = ctx.restore()  # deepvm: the newest checkpoint (after an interruption), or None
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    def checkpoint() -> dict:
        return {"model": net.state_dict(), "optimizer": optimizer.state_dict()}

    # survivors of an interruption take larger batches: the global batch stays about the planned one
    batch = max(1, round(args.batch_size * ctx.planned_world_size / ctx.world_size))
    data = SyntheticImages(ctx.seed, args.classes, args.image_size)
    for step in range(ctx.start_step + 1, ctx.total_steps + 1):
        images, labels = data.batch(step, ctx.rank, batch)
        logits = model(images.to(ctx.device))
        loss = F.cross_entropy(logits, labels.to(ctx.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        accuracy = (logits.argmax(1) == labels.to(ctx.device)).float().mean()
        ctx.log(step, loss=loss, accuracy=accuracy)  # deepvm: to TensorBoard and `deepvm watch`, off the step
        if ctx.step(step, checkpoint, loss=loss, samples=batch):  # deepvm: checkpoints, progress, stop
            return  # this step's checkpoint is safe; deepvm continues from it on the nodes it has

    if ctx.rank == 0:  # deepvm: rank 0's ctx.out comes back to `deepvm train --out`
        torch.save(net.state_dict(), ctx.out / "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
