"""Empirical checks of a mechanism against its closed forms, for chapters (tests use the same function)."""
from __future__ import annotations

import pandas as pd
import torch

from .rng import generator

__all__ = ["empirical_moments"]


def empirical_moments(mechanism, inputs: torch.Tensor, *, n_samples: int, seed: int,
                      dtype: torch.dtype = torch.float64) -> pd.DataFrame:
    """Privatize each input ``n_samples`` times (one vectorised call) and compare with the closed forms.

    Columns: ``input``, ``mean`` (empirical), ``z`` = (mean - input) / (sqrt(variance / n)), the bias in
    standard errors, ``var`` (empirical, unbiased), ``var_closed`` (``mechanism.variance``) and
    ``var_rel_err`` = var / var_closed - 1. For an unbiased mechanism |z| < 4 except with probability ~6e-5.
    """
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2, got {n_samples}")
    x = inputs.to(dtype).reshape(-1, 1).expand(-1, n_samples).contiguous()
    y = mechanism.privatize(x, generator=generator(seed, "empirical-moments"))
    mean, var = y.mean(dim=1), y.var(dim=1)
    closed = mechanism.variance(x[:, 0]).to(dtype)
    return pd.DataFrame({
        "input": inputs.double().cpu().numpy(),
        "mean": mean.double().cpu().numpy(),
        "z": ((mean - x[:, 0]) / torch.sqrt(closed / n_samples)).double().cpu().numpy(),
        "var": var.double().cpu().numpy(),
        "var_closed": closed.double().cpu().numpy(),
        "var_rel_err": (var / closed - 1).double().cpu().numpy(),
    })
