"""Distributed set-up: one process per device under ``torchrun``, or just this process.

Data parallelism the simple way: every rank builds the *same* global batch (same ``(seed, step)``
generator), keeps its slice, and DDP averages the gradients.  The loss is normalised by the global
token count, so N processes compute the same update as one.  Only rank 0 (``Dist.main``) writes files.

Ctrl-C under ``torchrun``: the terminal's SIGINT reaches every worker, and each stops at the next
step boundary with the checkpoint of that step saved (rank 0 prints ``interrupted at step ...``).
torchrun's own launcher process gets the same SIGINT, and it always answers with a
``SignalException`` traceback, after the workers have saved: nothing zoo runs inside a worker can
change the launcher.  ``python -m zoo.train.torchrun`` (:mod:`zoo.train.torchrun`) is torchrun with
the same arguments, which says that in one line instead and exits 130 (128 + SIGINT; 143 for
SIGTERM)::

    python -m zoo.train.torchrun --nproc_per_node=2 -m zoo.cli train gpt_tiny --data data/poems.txt --out runs/ddp
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist

from ..model.build import resolve_device


@dataclass
class Dist:
    """Where this process stands: its rank, the world size and its device."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    started_here: bool = False  # this process created the group, so it destroys it at the end

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.world > 1:
            torch_dist.barrier()

    def sum(self, x: float) -> float:
        """``x`` summed over all ranks (every rank must call it)."""
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64)
        if self.device.type == "cuda":
            t = t.to(self.device)
        torch_dist.all_reduce(t)
        return float(t.item())

    def close(self):
        """Wait for every rank, and leave the process group if this run joined it."""
        if self.world > 1:
            self.barrier()
            if self.started_here:
                torch_dist.destroy_process_group()


def setup_dist(device: Any = None) -> Dist:
    """Join the process group when launched by torchrun (``WORLD_SIZE > 1``); pick the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        dev = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    else:
        dev = resolve_device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device(f"cuda:{local}")
    if world == 1:
        return Dist(device=dev)
    started = False
    if not torch_dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        torch_dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
        started = True
    return Dist(rank=torch_dist.get_rank(), world=torch_dist.get_world_size(), local_rank=local,
                device=dev, started_here=started)

