"""Warner's randomized response on one bit (1965).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .base import Mechanism, _as64, _check_finite, _check_tensor, _fused_usable


# ---- 1. Randomized response -----------------------------------------------------------------------
class RandomizedResponse(Mechanism):
    """Warner's randomized response on one bit (Warner, "Randomized Response", JASA 60, 1965), with
    the ε-LDP choice p = e^ε / (1 + e^ε).

    Report the true bit with probability p = e^ε / (1 + e^ε), the flipped bit otherwise, so
    P[y | x] / P[y | x'] <= p / (1 - p) = e^ε. The raw report is biased (E[y] = 1 - p + (2p - 1) x);
    :meth:`estimate` de-biases it: x̂ = (y - (1 - p)) / (2p - 1), unbiased with variance
    p (1 - p) / (2p - 1)^2 (:meth:`variance`). Inputs must be exactly 0 or 1 (bool / integer /
    floating tensors); anything else raises ``ValueError``.
    """

    name = "randomized_response"
    discrete = True

    def __init__(self, *, epsilon: float) -> None:
        super().__init__(epsilon=epsilon)
        self.p = 1.0 / (1.0 + math.exp(-self._epsilon))  # e^ε / (1 + e^ε), overflow-safe

    def __repr__(self) -> str:
        return f"RandomizedResponse(epsilon={self._epsilon:g})"

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Randomized bits, same shape/dtype/device as ``x`` (x in {0, 1}; no clipping)."""
        x = _check_tensor(x)
        if x.dtype.is_complex:
            raise TypeError("x must be a real tensor")
        if x.dtype.is_floating_point:
            _check_finite(x)
        if x.is_cuda and _fused_usable(self, x):
            from .. import kernels

            return kernels.privatize(self, x, generator)
        not_bit = (x != 0) & (x != 1)
        if bool(not_bit.any()):
            raise ValueError(f"x must contain only 0 and 1 for RandomizedResponse, got {x[not_bit][0].item()}")
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32  # bool/int: as float32
        u = torch.rand(x.shape, generator=generator, dtype=dtype, device=x.device)
        flip = u >= self.p  # probability 1 - p
        return ((x != 0) ^ flip).to(x.dtype)

    def estimate(self, y: Tensor) -> Tensor:
        """Unbiased estimate of x from a report y: (y - (1 - p)) / (2p - 1) (float tensor)."""
        y = _check_tensor(y, "y")
        if not y.dtype.is_floating_point:
            y = y.to(torch.float32)
        return (y - (1.0 - self.p)) / (2.0 * self.p - 1.0)

    def clip(self, x: Any) -> Tensor:
        return _as64(x)

    def mean(self, x: Any) -> Tensor:
        """E[y | x] of the raw report: 1 - p + (2p - 1) x. (E[estimate(y) | x] = x.)"""
        return (1.0 - self.p) + (2.0 * self.p - 1.0) * _as64(x)

    def bias(self, x: Any) -> Tensor:
        """Bias of :meth:`estimate`: 0 (the raw report's bias is ``mean(x) - x``)."""
        return torch.zeros_like(_as64(x))

    def variance(self, x: Any) -> Tensor:
        """Var[estimate(y) | x] = p (1 - p) / (2p - 1)^2, for every x (float64)."""
        p = self.p
        return torch.full_like(_as64(x), p * (1.0 - p) / (2.0 * p - 1.0) ** 2)

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (0, 1), P[y=1|x] = p if x = 1 else 1 - p."""
        x = _as64(x)
        if not bool(((x == 0) | (x == 1)).all()):
            raise ValueError("x must contain only 0 and 1 for RandomizedResponse")
        p1 = self.mean(x)
        values = torch.stack([torch.zeros_like(x), torch.ones_like(x)], dim=-1)
        return values, torch.stack([1.0 - p1, p1], dim=-1)
