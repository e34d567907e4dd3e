"""Duchi et al.'s two-point mechanism (LDP-FL's perturbation, Sun et al. 2021, Eq. 3).
"""
from __future__ import annotations

import math
from typing import Any, Tuple

import torch
from torch import Tensor

from .._validate import real
from .base import Mechanism, Param, _as64, _broadcast_shape, _full


# ---- 2. Duchi's two-point mechanism (LDP-FL) ------------------------------------------------------
def two_point_a(epsilon: float) -> float:
    """a = (e^ε + 1) / (e^ε - 1) = coth(ε/2) of LDP-FL Eq. (2), for any ε > 0 (float64).

    Beyond ε = 700, e^ε overflows a double while a - 1 = 2 / (e^ε - 1) < 1e-303 is far below the
    spacing of doubles near 1, so a is exactly 1.0 there.
    """
    eps = real(epsilon, "epsilon", positive=True)
    if eps > 700.0:
        return 1.0
    return (math.exp(eps) + 1.0) / math.expm1(eps)


class TwoPoint(Mechanism):
    """Duchi et al.'s one-dimensional mechanism on [c - r, c + r] = LDP-FL's perturbation.

    Sun, Qian, Chen, "LDP-FL: Practical Private Aggregation in Federated Learning with Local
    Differential Privacy", IJCAI 2021, Eq. (2) / Algorithm 2 (after Duchi, Jordan, Wainwright,
    JASA 2018). With a = (e^ε + 1) / (e^ε - 1) and w the clipped input:

        w* = c + r a   with probability  ((w - c)(e^ε - 1) + r (e^ε + 1)) / (2 r (e^ε + 1)),
        w* = c - r a   otherwise.

    Unbiased (E[w*] = w). Exact variance r² a² - (w - c)²; the paper's Lemma 2 states the bound
    r² a² (:meth:`variance_bound`). ``center`` / ``radius`` may be floats or tensors broadcastable
    to x (per-element or per-layer ranges).
    """

    name = "two_point"
    discrete = True

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        self._set_range(center, radius)
        self.a = two_point_a(self._epsilon)

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:
        """Reports from clipped inputs ``w`` and uniforms ``u`` (``w`` is overwritten)."""
        c, r = self._range(w)
        p_plus = w.sub_(c).div_(2.0 * r * self.a).add_(0.5)  # 1/2 + (w - c) / (2 r a)
        plus = (u < p_plus).to(w.dtype)
        return plus.mul_(2.0 * r * self.a).add_(c - r * self.a)  # (c - r a) + 2 r a · plus

    def prob_plus(self, x: Any) -> Tensor:
        """P[output = c + r a | x] (float64), x clipped first."""
        xc = self.clip(x)
        c, r = self._range(xc)
        return 0.5 + (xc - c) / (2.0 * r * self.a)

    def output_values(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The two outputs (c - r a, c + r a), broadcast to x's shape (float64).

        The upper one is computed as (c - r a) + 2 r a, exactly as the sampler does, so float64
        samples equal these values bit for bit."""
        x = _as64(x)
        c, r = self._range(x)
        shape = _broadcast_shape(x, c, r)
        minus = c - r * self.a
        return _full(minus, shape, x), _full(minus + 2.0 * r * self.a, shape, x)

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (c - r a, c + r a), exact float64 probs."""
        lo, hi = self.output_values(x)
        p = self.prob_plus(x).expand(lo.shape)
        return torch.stack([lo, hi], dim=-1), torch.stack([1.0 - p, p], dim=-1)

    def variance(self, x: Any) -> Tensor:
        """Var[w* | w] = r² a² - (w - c)² (float64, elementwise)."""
        xc = self.clip(x)
        c, r = self._range(xc)
        v = (r * self.a) ** 2 - (xc - c) ** 2
        return v.expand(_broadcast_shape(xc, c, r)).clone()

    def variance_bound(self) -> Param:
        """The bound of LDP-FL's Lemma 2: Var[w*] <= r² a² (float, or tensor for tensor radius)."""
        return (self._radius * self.a) ** 2
