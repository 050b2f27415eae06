"""Data-parallel off-policy learners (FlashSAC's, SAC's): K learners, each with its own rollout
actors and replay buffer, make every update together, as one learner would on their K batches
concatenated.

- **Gradients**: the optimiser steps first average their gradients over the learners: one
  all-reduce for the actor (with its aux losses) and the temperature, one for the critic.
- **BatchNorm** (FlashSAC's networks): a FlashSAC BatchNorm layer in training mode normalises
  with the statistics of all K batches: the sums it needs are all-reduced inside the forward
  pass (one all-reduce per layer), differentiably, so the gradients of the statistics reach
  every learner's inputs. The running statistics, updated from the same numbers everywhere,
  stay identical.
- **When updates start**: the learners agree (all must be ready), so each one calls the same
  collectives in the same order.

The group is ``torch.distributed``'s (gloo on CPU, NCCL on CUDA), created inside the learners'
Ray processes: learner 0 opens a ``TCPStore`` on a free port of its node, the others connect.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as differentiable
from torch import nn

from drlcli.errors import TrainingError, first_line

JOIN_TIMEOUT_S = 120.0
"""How long learners wait for each other while the group forms."""
COLLECTIVE_TIMEOUT_S = 1800.0
"""How long one collective waits for the slowest learner before the run fails."""


def open_store(host: str) -> dist.TCPStore:
    """Learner 0's rendezvous store on a free port of ``host`` (``store.port`` tells which)."""
    return dist.TCPStore(
        host,
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=JOIN_TIMEOUT_S),
    )


class DataParallelGroup:
    """This learner's place in the group of ``world_size`` data-parallel learners.

    Args:
        rank: this learner's index, ``0 .. world_size - 1``.
        world_size: learners in the group.
    """

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    @classmethod
    def join(
        cls,
        rank: int,
        world_size: int,
        host: str,
        port: int,
        device: torch.device,
        store: dist.TCPStore | None = None,
    ) -> DataParallelGroup:
        """Join the process group whose store learner 0 opened at ``host:port`` (learner 0
        passes the ``store`` itself). Blocks until all ``world_size`` learners joined.

        Raises:
            TrainingError: the learners did not all meet within ``JOIN_TIMEOUT_S``.
        """
        backend = "nccl" if device.type == "cuda" else "gloo"
        try:
            if store is None:
                store = dist.TCPStore(
                    host,
                    port,
                    is_master=False,
                    timeout=datetime.timedelta(seconds=JOIN_TIMEOUT_S),
                )
            dist.init_process_group(
                backend,
                store=store,
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
                device_id=device if device.type == "cuda" else None,
            )
            # The first collective is where gloo and NCCL connect the learners to each other.
            dist.barrier()
        except (RuntimeError, dist.DistStoreError) as error:
            raise TrainingError(
                f"learner {rank} could not join the {world_size} data-parallel learners at "
                f"{host}:{port} ({backend}: {first_line(str(error))}); the nodes must reach "
                "each other on any TCP port, and where a node's host name resolves to a loopback "
                "address set GLOO_SOCKET_IFNAME (CPU) or NCCL_SOCKET_IFNAME (GPU) to its network "
                "interface"
            ) from None
        return cls(rank, world_size)

    def average_gradients(self, parameters: Iterable[nn.Parameter]) -> None:
        """Replace every gradient by its mean over the learners: one all-reduce of all of
        them flattened together. Parameters without a gradient are left out; the learners run
        the same graph, so they leave out the same ones."""
        parameters = [p for p in parameters if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])  # type: ignore[union-attr]
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for parameter in parameters:
            size = parameter.numel()
            parameter.grad = flat[offset : offset + size].view_as(parameter)
            offset += size

    def batch_moments(
        self, x: torch.Tensor, shift: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Mean and (biased) variance over axis 1 of ``x [E, B, F]`` and every learner's own
        ``x``, each ``[E, 1, F]``, with the total count. One all-reduce, differentiable, of the
        sums of ``x - shift`` and of its square; ``shift [E, 1, F]``, the same on every learner
        (the running mean), keeps the difference of the squares well conditioned."""
        count = x.shape[1] * self.world_size  # every learner normalises a batch of this size
        centred = x - shift
        sums = differentiable.all_reduce(
            torch.cat(
                [centred.sum(dim=1, keepdim=True), centred.square().sum(dim=1, keepdim=True)],
                dim=-1,
            )
        )
        first, second = (sums / count).split(x.shape[-1], dim=-1)
        return shift + first, (second - first.square()).clamp_min(0.0), count

    def all_agree(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` holds on every learner (a collective: all learners must call)."""
        value = torch.tensor([1.0 if flag else 0.0], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        return bool(value.item())
