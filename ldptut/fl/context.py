"""What a privatizer and an aggregator see in one round (:class:`RoundContext`: public values and the round's random
streams) and the two protocols they implement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..rng import client_generator, pair_generator
from .layout import ParamLayout


# ------------------------------------------------------------------------------ privatize/aggregate
@dataclass
class RoundContext:
    """What a privatizer or aggregator may look at in one round of one run (all public to the server),
    and the random streams it may draw from."""

    round: int
    client_ids: torch.Tensor
    layout: ParamLayout
    global_vector: torch.Tensor
    generators: list[torch.Generator]  # row i: client client_ids[i]'s "privatize" stream
    send: str
    num_samples: torch.Tensor  # samples per sampled client, float
    server_generator: torch.Generator | None = None
    seed: int = 0
    initial_vector: torch.Tensor | None = None  # the run's global model before round 1 (public: no client data)

    @property
    def device(self) -> torch.device:
        return self.global_vector.device

    def client_generator(self, client: int, purpose: str) -> torch.Generator:
        """Another stream of one client in this round (``purpose`` names it)."""
        return client_generator(self.seed, self.round, client, purpose, device=self.device)

    def pair_generator(self, a: int, b: int, purpose: str = "shared") -> torch.Generator:
        """The common randomness of clients ``a`` and ``b`` in this round (same stream for (a, b) and (b, a))."""
        return pair_generator(self.seed, self.round, a, b, purpose, device=self.device)


class Privatizer(Protocol):
    """Client-side randomizer applied to each sampled client's flattened vector (row i uses generators[i]).

    It returns a tensor of the payloads' shape and dtype. It may also define ``guarantee(context)``: one
    :class:`~ldptut.accounting.Guarantee` per row, per coordinate (None for a client it does not protect),
    which the engine composes and records.
    """

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor: ...


class Aggregator(Protocol):
    """Server rule mapping the (m, d) privatized payloads to one d-vector and a dict of metrics
    (``clients_used``: how many clients it averaged, when not all)."""

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]: ...
