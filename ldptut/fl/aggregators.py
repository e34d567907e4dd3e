"""Server rules: the plain and the sample-weighted mean of the privatized vectors, by name."""
from __future__ import annotations

import torch

from .context import Aggregator, RoundContext


def mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
    """Arithmetic mean of the clients' vectors (LDP-FL Algorithm 1, line "average")."""
    return payloads.mean(dim=0), {}


def weighted_mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
    """FedAvg's mean weighted by the clients' sample counts n_i / sum n_j (McMahan et al. 2017)."""
    w = context.num_samples.to(payloads.dtype)
    return (w / w.sum()) @ payloads, {}


AGGREGATORS: dict[str, Aggregator] = {"mean": mean_aggregator, "weighted_mean": weighted_mean_aggregator}


def make_aggregator(agg: str | Aggregator) -> Aggregator:
    if callable(agg):
        return agg
    if agg not in AGGREGATORS:
        raise ValueError(f"unknown aggregator {agg!r}; known: {sorted(AGGREGATORS)} or pass a callable")
    return AGGREGATORS[agg]
