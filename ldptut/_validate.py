"""Shared argument checks: raise ValueError naming the parameter (the only home of these checks)."""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import torch


def real(v: Any, name: str, *, positive: bool = False, nonneg: bool = False) -> float:
    """``v`` as a finite float (a one-element real tensor is accepted); optionally > 0 or >= 0."""
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.dtype.is_complex and v.dtype != torch.bool:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {v!r} of type {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and f <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {v}")
    if nonneg and f < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {v}")
    return f


def epsilon(v: Any, name: str = "epsilon") -> float:
    """A privacy parameter ε: a finite real number > 0 (NaN, inf, 0, negatives, bools and strings raise)."""
    return real(v, name, positive=True)


def delta(v: Any, name: str = "delta") -> float:
    """A privacy parameter δ in the open interval (0, 1)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (0 < float(v) < 1):
        raise ValueError(f"{name} must be a real number in (0, 1), got {v!r}")
    return float(v)


def fraction(v: Any, name: str) -> float:
    """A real number in (0, 1] (a fraction of clients, a sampling probability)."""
    f = real(v, name)
    if not 0 < f <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {v!r}")
    return f


def pos_int(v: Any, name: str) -> int:
    """``v`` as an int >= 1 (bools rejected)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def one_of(v: Any, name: str, choices: Iterable[Any]) -> Any:
    """``v`` if it is one of ``choices``, else ValueError listing them."""
    options = list(choices)
    if v not in options:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in options)}; got {v!r}")
    return v


def all_finite(x: torch.Tensor) -> bool:
    """Whether every element of ``x`` is finite (no NaN, no inf); an empty or non-floating tensor is.

    Reads ``x`` once with ``torch.aminmax`` (a min or max is NaN when any element is NaN, and +-inf when any is):
    on the CPU about 20x faster than ``torch.isfinite(x).all()``, which materialises a boolean tensor (16 M float32
    weights: 4.8 ms against 108 ms on 2 cores)."""
    if x.numel() == 0 or not (x.dtype.is_floating_point or x.dtype.is_complex):
        return True
    if x.dtype.is_complex:
        return all_finite(torch.view_as_real(x))
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


def finite_rows(x: torch.Tensor) -> torch.Tensor:
    """Boolean per row of ``x`` (first dimension): every element of the row is finite. One fast pass when all are."""
    if all_finite(x):
        return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    return torch.isfinite(x.reshape(x.shape[0], -1)).all(-1)
