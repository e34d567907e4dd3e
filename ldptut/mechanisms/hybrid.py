"""Wang et al.'s Hybrid mechanism (ICDE 2019): the two-point mechanism or Piecewise by a coin, as a grid law.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from .. import fpsafe
from .two_point import TwoPoint, two_point_a
from .grid import GridMechanism
from .piecewise import Piecewise, _piecewise_grid


#: Threshold of the Hybrid Mechanism (Wang et al., ICDE 2019, Sec. III-C): for ε <= ε* ≈ 0.61 HM is
#: Duchi's mechanism alone.
HYBRID_EPSILON_STAR = 0.61
class _HybridGrid(fpsafe.GridLaw):
    """HM at ε_d: with probability 1 - β Duchi's two outputs ±a (indices 0, 1), with probability β the grid
    Piecewise law (indices 2, ...); β = 1 - e^{-ε_d/2} above ε* ≈ 0.61, else 0 (Duchi alone)."""

    def __init__(self, epsilon_design: float, cells: int) -> None:
        self.epsilon_design, self.cells = float(epsilon_design), int(cells)
        e = self.epsilon_design
        self.beta = -math.expm1(-e / 2.0) if e > HYBRID_EPSILON_STAR else 0.0
        self.one_minus_beta = math.exp(-e / 2.0) if e > HYBRID_EPSILON_STAR else 1.0
        self.a = two_point_a(e)
        self.pm = _piecewise_grid(e, cells) if self.beta > 0.0 else None
        duchi = torch.tensor([-self.a, self.a], dtype=torch.float64)
        self.values = duchi if self.pm is None else torch.cat([duchi, self.pm.values])
        self.rounded_weight = self.beta
        self.g = self.pm.g if self.pm is not None else 0.0

    def prepare(self, t: Tensor) -> tuple:
        return (t,) if self.pm is None else self.pm.prepare(t)

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """β Var_PM(ε_d) + (1 - β)(a_d² - t²)."""
        duchi = self.a * self.a - t * t
        return duchi if self.pm is None else self.beta * self.pm.unrounded_variance(t) + self.one_minus_beta * duchi

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        t = state[0]
        first = (t / (-2.0 * self.a)).add_(0.5).mul_(self.one_minus_beta)  # (1 - β)(1 - P_plus)
        if self.pm is None:
            return torch.where(k <= 0, first, 1.0)
        pm = self.pm.cum_at((k - 2).clamp(min=0), state).mul_(self.beta).add_(self.one_minus_beta)
        return torch.where(k <= 0, first, torch.where(k == 1, self.one_minus_beta,
                                                      torch.where(k >= self.size - 1, 1.0, pm)))

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        duchi = u < self.one_minus_beta                  # index 0 or 1, decided by cum_at(0) alone
        if self.pm is None:
            return torch.zeros(u.shape, dtype=torch.int64, device=u.device), torch.zeros_like(duchi)
        v = ((u - self.one_minus_beta) / self.beta).clamp_(0.0, 1.0)
        c, near = self.pm.candidate(v, state)
        return torch.where(duchi, 0, c.add_(2)), near & ~duchi


_hybrid_grid = functools.lru_cache(maxsize=512)(_HybridGrid)
# ---- 5. Hybrid mechanism --------------------------------------------------------------------------
class Hybrid(GridMechanism):
    """Hybrid Mechanism (HM), Wang et al., ICDE 2019, Sec. III-C, as a grid law.

    Ideal: with β = 1 - e^{-ε/2} if ε > ε* ≈ 0.61 and β = 0 otherwise, apply the Piecewise mechanism with
    probability β, otherwise Duchi's two-point mechanism (:class:`TwoPoint`), both with the same ε, center and
    radius. A mixture (input-independent weights) of two ε-LDP mechanisms is ε-LDP; both parts are unbiased, so
    Var = β Var_PM + (1 - β) Var_Duchi (:meth:`ideal_variance`).

    Sampled (:class:`GridMechanism`): HM at the design ε_d, its PM part on a grid; outputs c ∓ r a_d (Duchi's,
    a_d = (e^{ε_d} + 1) / (e^{ε_d} - 1)) and the grid of [c - r C_d, c + r C_d]; :attr:`beta` is the design's β.
    """

    name = "hybrid"

    _build = staticmethod(_hybrid_grid)

    @property
    def beta(self) -> float:
        """β of the design ε_d: the probability of the Piecewise part (0 at ε_d <= ε*)."""
        return self.law.beta

    def ideal_variance(self, x: Any) -> Tensor:
        """β Var_PM(x) + (1 - β) Var_Duchi(x) of the ideal HM at the claimed ε (float64)."""
        e = self._epsilon
        beta = -math.expm1(-e / 2.0) if e > HYBRID_EPSILON_STAR else 0.0
        pm = Piecewise(epsilon=e, center=self._center, radius=self._radius) if beta > 0.0 else None
        duchi = TwoPoint(epsilon=e, center=self._center, radius=self._radius).variance(x)
        return duchi if pm is None else beta * pm.ideal_variance(x) + (1.0 - beta) * duchi
