"""The framework scripts of the adapters' tests (tests/training/test_hf_adapter.py, test_lightning_adapter.py) and of
their sandbox scenario (tests/cloud/test_train_e2e.py): written as each framework's own examples are, with the
one line for deepvm, and lines that say where each rank began and ended."""

from __future__ import annotations

HF_STEPS = 150
# written as HF's examples are (run_clm.py and the like): the last checkpoint in output_dir, when there is one,
# is where train() resumes; the one line for deepvm is the callback; BEGIN and DONE are this test's
HF_SCRIPT = f"""\
import os, time
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint
from training.integrations.huggingface import DeepVMCallback

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        time.sleep(0.04)
        return {{"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}}

class Begin(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        print(f"BEGIN {{os.environ['RANK']}} {{state.global_step}}", flush=True)

x = torch.randn(512, 4, generator=torch.Generator().manual_seed(0))
data = [{{"x": row, "labels": row.sum()}} for row in x]
args = TrainingArguments(output_dir="output", max_steps={HF_STEPS}, per_device_train_batch_size=4, learning_rate=0.05,
                         logging_steps=10, report_to=[], use_cpu=True, ddp_backend="gloo",
                         ddp_find_unused_parameters=False, disable_tqdm=True, seed=0)
last_checkpoint = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
trainer = Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[Begin(), DeepVMCallback()])
trainer.train(resume_from_checkpoint=last_checkpoint)
print(f"DONE {{os.environ['RANK']}} {{trainer.state.global_step}}", flush=True)
"""


LIGHTNING_STEPS = 80
LIGHTNING_SCRIPT = f"""\
import os, time
import lightning as L, torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from training.integrations.lightning import DeepVMCallback

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
    def training_step(self, batch, batch_idx):
        time.sleep(0.1)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
    def on_train_start(self):
        env = type(self.trainer.strategy.cluster_environment).__name__
        print(f"RESUMED {{self.global_rank}} {{self.trainer.global_step}} {{env}}", flush=True)

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=int(os.environ["LOCAL_WORLD_SIZE"]),
                    num_nodes=int(os.environ["GROUP_WORLD_SIZE"]), max_steps={LIGHTNING_STEPS},
                    enable_progress_bar=False, enable_model_summary=False,
                    callbacks=[DeepVMCallback(), ModelCheckpoint(dirpath="checkpoints")])
trainer.fit(Tiny(), DataLoader(data, batch_size=4), ckpt_path="last")
print(f"DONE {{trainer.global_rank}} {{trainer.global_step}}", flush=True)
"""


# a torchrun script (str.format it with epochs and pause_s), written as pytorch/examples'
# ddp-tutorial-series/multinode.py is: the environment gives the place, rank 0 saves a snapshot after every
# epoch, every rank loads it at the start when it exists
TORCHRUN_SCRIPT = """\
import json, os, sys, time
preloaded = "torch" in sys.modules  # a fork of the node's warm server has it (training.node.script_main)
import torch, torch.distributed as dist

def say(text):  # one write a line: torchrun's two workers share one pipe in the command's case
    sys.stdout.write(text + "\\n")


dist.init_process_group("gloo")
rank = dist.get_rank()
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
         "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
         "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE")
mpi = sorted(k for k in os.environ if k.startswith(("OMPI_", "PMIX_", "PMI_")))
say("ENV " + json.dumps({{"env": {{n: os.environ.get(n) for n in names}}, "mpi": mpi, "warm": preloaded,
                         "argv": sys.argv, "main": __name__}}))
first = 0
if os.path.exists("snapshot.pt"):
    first = torch.load("snapshot.pt")["epoch"] + 1
say(f"RESUMED {{rank}} {{first}} {{os.environ['TORCHELASTIC_RESTART_COUNT']}}")
w = torch.zeros(4)
for epoch in range(first, {epochs}):
    g = torch.ones(4)
    dist.all_reduce(g)
    w += g
    time.sleep({pause_s})
    if rank == 0:
        torch.save({{"epoch": epoch, "w": w}}, "snapshot.pt")
    say(f"EPOCH {{rank}} {{epoch}}")
dist.destroy_process_group()
"""
