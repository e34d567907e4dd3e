"""Wang et al.'s Piecewise mechanism (ICDE 2019), as a grid law.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Tuple

import torch
from torch import Tensor

from .. import fpsafe
from .base import Param
from .grid import GridMechanism


class _PiecewiseGrid(fpsafe.GridLaw):
    """The Piecewise Mechanism at ε_d on t units, randomly rounded onto the grid -C, -C + g, ..., C (g = 2C/cells).

    PM's CDF is G(y) = p_low (y + C) + (p_high - p_low) ramp(y), ramp(y) = clamp(y - l(t), 0, C - 1), so the mean
    of G over a cell [a, a + g] (P[index <= cell]) is p_low (a + g/2 + C) plus (p_high - p_low) times the mean of
    the ramp, ((β' - α)(β' + α)/2 + (C - 1) clamp(a + g - l - (C - 1), 0, g)) / g with α, β' the cell's ends
    relative to l clamped to [0, C - 1]: exact, and without cancellation."""

    def __init__(self, epsilon_design: float, cells: int) -> None:
        self.epsilon_design, self.cells = float(epsilon_design), int(cells)
        half = self.epsilon_design / 2.0
        self.C = 1.0 / math.tanh(half / 2.0)
        self.q = 1.0 / (1.0 + math.exp(-half))
        self.q_out = 1.0 / (1.0 + math.exp(half))
        self.p_high = self.q * math.expm1(half) / 2.0
        self.p_low = self.q_out / (self.C + 1.0)
        self.width = self.C - 1.0
        self.g = 2.0 * self.C / self.cells
        grid = torch.arange(self.cells + 1, dtype=torch.float64) * self.g - self.C
        grid[-1] = self.C
        self.values = grid

    def prepare(self, t: Tensor) -> tuple:
        return t, t * ((self.C + 1.0) / 2.0) - (self.C - 1.0) / 2.0  # t, l(t)

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """PM at ε_d: t² / (e^{ε_d/2} - 1) + (e^{ε_d/2} + 3) / (3 (e^{ε_d/2} - 1)²) (Wang et al., Sec. III-B)."""
        inv = 1.0 / math.expm1(self.epsilon_design / 2.0)
        return t * t * inv + (inv + 4.0 * inv * inv) / 3.0

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        t, l = state
        C, g, W = self.C, self.g, self.width
        rel = k.clamp(0, self.cells - 1).to(torch.float64).mul_(g).sub_(C).sub_(l)   # a - l
        alpha = rel.clamp(0.0, W)
        beta = (rel + g).clamp_(0.0, W)
        flat = (rel + (g - W)).clamp_(0.0, g)
        ramp = beta.sub(alpha).mul_(beta.add_(alpha)).mul_(0.5).add_(flat.mul_(W)).div_(g)
        avg = rel.add_(l).add_(g / 2.0 + C).mul_(self.p_low).add_(ramp.mul_(self.p_high - self.p_low))
        return torch.where(k >= self.cells, 1.0, avg)

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        t, l = state
        C = self.C
        d = u - (t + 1.0) * (self.q_out / 2.0)
        inner = d.clamp(0.0, self.q)
        outer = d.clamp(max=0.0).add_((d - self.q).clamp_(min=0.0))
        y = inner.div_(self.p_high).add_(l).add_(outer.div_(self.p_low)).clamp_(-C, C)
        return fpsafe.cell_of(y.add_(C).div_(self.g), 0, self.cells - 1)


_piecewise_grid = functools.lru_cache(maxsize=512)(_PiecewiseGrid)
# ---- 4. Piecewise mechanism -----------------------------------------------------------------------
class Piecewise(GridMechanism):
    """Piecewise Mechanism (PM), Wang et al., "Collecting and Analyzing Multidimensional Data with Local
    Differential Privacy", ICDE 2019, Sec. III-B, Algorithm 2, as a grid law.

    Ideal, on t = (w - c) / r in [-1, 1] (w the clipped input), with C = (e^{ε/2} + 1) / (e^{ε/2} - 1),
    l(t) = (C + 1) t / 2 - (C - 1) / 2 and r(t) = l(t) + C - 1: with probability e^{ε/2} / (e^{ε/2} + 1) output
    uniform on [l(t), r(t)], otherwise uniform on [-C, l(t)) ∪ (r(t), C]; the report is c + r · t*. Density of t*:
    p_high = e^{ε/2}(e^{ε/2} - 1) / (2(e^{ε/2} + 1)) on [l, r], p_low = p_high / e^ε elsewhere on [-C, C].
    Unbiased; Var[t* | t] = t² / (e^{ε/2} - 1) + (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)²) (Wang et al., Sec. III-B),
    times r² (:meth:`ideal_variance`).

    Sampled (:class:`GridMechanism`): PM at the design ε_d rounded without bias onto a grid of [-C_d, C_d]; the
    reports stay inside [c - r C_d, c + r C_d] (:meth:`support`). ``C``, ``q``, ``p_high``, ``p_low`` are the ideal
    mechanism's at the claimed ε; the grid law's are on :attr:`law`.
    """

    name = "piecewise"
    max_cells = 2048

    _build = staticmethod(_piecewise_grid)

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon, center=center, radius=radius)
        half = self._epsilon / 2.0
        self.C = 1.0 / math.tanh(half / 2.0)  # (e^{ε/2} + 1) / (e^{ε/2} - 1), no overflow
        self.q = 1.0 / (1.0 + math.exp(-half))  # e^{ε/2} / (e^{ε/2} + 1)
        self.q_out = 1.0 / (1.0 + math.exp(half)) if half < 700.0 else 0.0
        self.p_high = self.q * math.expm1(half) / 2.0 if half < 700.0 else math.inf
        self.p_low = self.q_out / (self.C + 1.0)

    def interval(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The ideal mechanism's high-density interval [c + r l(t), c + r r(t)] in output units (float64)."""
        t, c, r = self._t(x)
        l = (self.C + 1.0) / 2.0 * t - (self.C - 1.0) / 2.0
        return c + r * l, c + r * (l + self.C - 1.0)

    def ideal_variance(self, x: Any) -> Tensor:
        """r² (t² / (e^{ε/2} - 1) + (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)²)) (Wang et al., Sec. III-B)."""
        t, c, r = self._t(x)
        inv = 1.0 / math.expm1(self._epsilon / 2.0) if self._epsilon < 1400.0 else 0.0  # 1 / (e^{ε/2} - 1)
        return (t * t * inv + (inv + 4.0 * inv * inv) / 3.0) * r * r
