"""Synthetic data: sparse-gradient regression sets (FedSel's synthetic experiments).
"""
from __future__ import annotations

import torch

from .store import DeviceLike


# ---------------------------------------------------------------------------- synthetic (sparse gradients)
def sparse_synthetic(n: int, d: int, *, c1: float, c2: float, seed: int = 0,
                     device: DeviceLike = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Binary classification data whose per-record gradients are skewed: (x (n, d) float32, y (n,) in {-1, +1}).

    Our reading of the procedure FedSel (DASFAA 2020, Section 5.1) takes from Wangni et al. (NeurIPS 2018,
    its reference [26]), which it names only by its two parameters: entries x_ij ~ N(0, 1), each multiplied
    by ``c1`` independently with probability ``c2`` (so a record has about (1 - c2) d large entries; c1 = 0.01,
    c2 = 0.9 is "syn-0.01-0.9"), a true weight vector w* ~ N(0, I_d) and noiseless labels y = sign(x.w*).
    Everything is drawn from ``seed``; the same seed gives the same data.
    """
    from .._validate import pos_int, real

    n, d = pos_int(n, "n"), pos_int(d, "d")
    c1 = real(c1, "c1", positive=True)
    c2 = real(c2, "c2", nonneg=True)
    if c2 > 1:
        raise ValueError(f"c2 is a probability, got {c2}")
    g = torch.Generator().manual_seed(int(seed))
    x = torch.randn(n, d, generator=g)
    x = torch.where(torch.rand(n, d, generator=g) < c2, x * c1, x)
    w_star = torch.randn(d, generator=g)
    y = torch.where(x @ w_star >= 0, 1.0, -1.0)
    return x.to(device), y.to(device)
