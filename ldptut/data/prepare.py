"""Generic preparation of loaded data: joining a data set's parts, seeded splits and subsamples, flattening, scaling
and label maps. Each function computes one thing and draws nothing but from the generator it is given, so the caller
(a paper module) keeps its choices: which data set, which sizes, which scale, which generator keys.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from .store import Dataset


def joined(ds: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of ``ds``'s train and test parts concatenated, train rows first."""
    return torch.cat([ds.x_train, ds.x_test]), torch.cat([ds.y_train, ds.y_test])


def split_indices(n: int, n_test: int, generator: torch.Generator, *,
                  n_train: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, test) indices from one permutation of range(n): test its first ``n_test``, train the next ``n_train``
    (all the rest when None, or as many as remain)."""
    if n_test < 0 or (n_train is not None and n_train < 0):
        raise ValueError(f"sizes must be >= 0, got n_test={n_test}, n_train={n_train}")
    perm = torch.randperm(int(n), generator=generator)
    stop = None if n_train is None else n_test + n_train
    return perm[n_test:stop], perm[:n_test]


def subsample(x: torch.Tensor, y: torch.Tensor, n: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows of (x, y) drawn without replacement (the first ``n`` of one permutation; all rows, shuffled, when
    ``n`` >= len(x))."""
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    keep = torch.randperm(len(x), generator=generator)[:n]
    return x[keep], y[keep]


def flattened(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Each sample of ``x`` as one row, times ``scale``: x.reshape(len(x), -1) * scale, in x's dtype."""
    return x.reshape(len(x), -1) * scale


def max_abs_scaled(x: torch.Tensor) -> torch.Tensor:
    """``x`` (n, d) with every column divided by its largest |value|, so it lies in [-1, 1]; columns of zeros unchanged."""
    if x.ndim != 2:
        raise ValueError(f"x must be (n, d), got shape {tuple(x.shape)}")
    scale = x.abs().amax(0)
    return x / torch.where(scale > 0, scale, torch.ones_like(scale))


def signed_labels(y: torch.Tensor) -> torch.Tensor:
    """Labels in {0, 1} as float32 {-1, +1} (2 y - 1)."""
    if not bool(((y == 0) | (y == 1)).all()):
        raise ValueError(f"labels must be 0 or 1, got values {torch.unique(y)[:5].tolist()}...")
    return y.to(torch.float32) * 2 - 1


def unstandardised(x: torch.Tensor, info: Mapping[str, Any], *, integers: bool = True) -> torch.Tensor:
    """A copy of tabular ``x`` whose numeric columns (the first len(info["num_mean"])) are back in the units of the
    source file: x * num_std + num_mean in float64, rounded to integers when ``integers`` (as UCI ships them)."""
    mean = torch.tensor(info["num_mean"], dtype=torch.float64, device=x.device)
    std = torch.tensor(info["num_std"], dtype=torch.float64, device=x.device)
    n_num = len(mean)
    if len(std) != n_num or x.ndim != 2 or x.shape[1] < n_num:
        raise ValueError(f"info has {n_num} means and {len(std)} stds for x of shape {tuple(x.shape)}")
    num = x[:, :n_num].double() * std + mean
    out = x.clone()
    out[:, :n_num] = (num.round() if integers else num).to(x.dtype)
    return out
