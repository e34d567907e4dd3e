"""The Laplace mechanism on [c - r, c + r], as a grid law.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from .. import fpsafe
from .base import Param, _as64, _broadcast_shape, _full, _like
from .grid import GridMechanism


class _LaplaceGrid(fpsafe.GridLaw):
    """Laplace(t, β = 2/ε_d) on t units, with the tails collapsed and the middle rounded onto a grid of [-1, 1].

    Outputs: -(1 + β) (for Y < -1), the grid -1, -1 + g, ..., 1 (g = 2 / cells; Y in [-1, 1] randomly rounded to
    its two neighbours), 1 + β (for Y > 1). The tails are memoryless: given Y > 1 >= t, Y - 1 is exponential with
    mean β, so collapsing the tail onto its mean 1 + β keeps the report unbiased and lowers the variance. P[index
    <= grid point j] is the mean of the Laplace CDF G over [y_j, y_{j+1}]: for a cell below t,
    (β / 2g) e^{(y_j - t)/β} (e^{g/β} - 1); above t, 1 - (β / 2g) e^{-(y_j - t)/β} (1 - e^{-g/β}); around t,
    ((y_{j+1} - t) + (β/2)(e^{-(y_{j+1} - t)/β} - e^{(y_j - t)/β})) / g, the difference of exponentials as one of
    expm1's (no cancellation in any case)."""

    def __init__(self, epsilon_design: float, cells: int) -> None:
        self.epsilon_design, self.cells = float(epsilon_design), int(cells)
        self.b = 2.0 / self.epsilon_design
        self.g = 2.0 / self.cells
        grid = torch.arange(self.cells + 1, dtype=torch.float64) * self.g - 1.0
        grid[-1] = 1.0
        self.values = torch.cat([grid.new_tensor([-1.0 - self.b]), grid, grid.new_tensor([1.0 + self.b])])
        self._below = (self.b / (2.0 * self.g)) * math.expm1(self.g / self.b)
        self._above = (self.b / (2.0 * self.g)) * -math.expm1(-self.g / self.b)

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        (t,) = state
        n, b, g = self.cells, self.b, self.g
        lo = (k - 1).clamp(0, n - 1).to(torch.float64).mul_(g).sub_(1.0)
        z = (lo - t).div_(b)                                                   # (y_j - t) / β
        e_lo = torch.exp(z.clamp(max=0.0))
        below = e_lo * self._below
        above = torch.exp(z.neg().clamp_(max=0.0)).mul_(-self._above).add_(1.0)
        # around t: e^{-A} - e^{-B} as expm1(-A) - expm1(-B), A = (y_{j+1} - t)/β, B = (t - y_j)/β, both in [0, g/β]
        around = torch.expm1((z + g / b).neg_().clamp_(max=0.0)).sub_(torch.expm1(z.clamp(max=0.0)))
        around = around.mul_(b / 2.0).add_(lo + g - t).div_(g)
        avg = torch.where(z + g / b <= 0.0, below, torch.where(z >= 0.0, above, around))
        first = torch.exp((1.0 + t) / -b).mul_(0.5)                          # P[Y < -1]
        top = torch.exp((1.0 - t) / -b).mul_(-0.5).add_(1.0)                 # P[Y <= 1]
        return torch.where(k <= 0, first, torch.where(k <= n, avg, torch.where(k == n + 1, top, 1.0)))

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """Laplace at ε_d with collapsed tails: 2β² - β² (P[Y < -1] + P[Y > 1]) (the tail beyond a point is
        exponential: replacing it by its mean removes β² times its mass), t units."""
        b = self.b
        return b * b * (2.0 - 0.5 * torch.exp(-(1.0 - t) / b) - 0.5 * torch.exp(-(1.0 + t) / b))

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        (t,) = state
        y = torch.where(u < 0.5, torch.log(2.0 * u), -torch.log(2.0 * (1.0 - u))).mul_(self.b).add_(t)
        pos = y.add_(1.0).div_(self.g)                  # y* in cells from -1; below 0: the lower atom's region
        # index 0: the lower atom (y* < -1), 1 + j: grid point j (y* in cell j), n + 1: the point 1 (y* >= 1)
        c, near = fpsafe.cell_of(pos.add_(1.0), 0, self.cells + 1)
        return c, near


_laplace_grid = functools.lru_cache(maxsize=512)(_LaplaceGrid)
# ---- 3. Laplace -----------------------------------------------------------------------------------
class Laplace(GridMechanism):
    """The Laplace mechanism on [c - r, c + r], as a grid law.

    Ideal: clip to [c - r, c + r] and add Laplace noise of scale b = 2r / ε (Dwork, McSherry, Nissim, Smith,
    "Calibrating Noise to Sensitivity", TCC 2006: Lap(Δ/ε) for sensitivity Δ = 2r, the width of the range);
    unbiased, variance 2 b² (:meth:`ideal_variance`).

    Sampled (:class:`GridMechanism`): Laplace at the design ε_d, b_d = 2r / ε_d, with reports below c - r collapsed
    onto c - r - b_d and above c + r onto c + r + b_d (the tail of a Laplace beyond a point past its centre is
    exponential, so its mean is that point plus b_d: still unbiased) and the reports in between rounded without
    bias onto a grid of [c - r, c + r]. The cost against the ideal, ``variance / ideal_variance`` (measured in
    ``tests/test_fpsafe.py``): about 1.00 at ε = 1, below 1 at small ε (the collapsed tails) and above 1 at large
    ε, where the floor forces a coarse grid.
    """

    name = "laplace"

    _build = staticmethod(_laplace_grid)

    @property
    def scale(self) -> Param:
        """b = 2 r / ε of the ideal mechanism."""
        return 2.0 * self._radius / self._epsilon

    def ideal_variance(self, x: Any) -> Tensor:
        """2 b², b = 2r / ε (float64, elementwise)."""
        x = _as64(x)
        b = _like(self.scale, x)
        return _full(2.0 * b * b, _broadcast_shape(x, self._center, self._radius), x).clone()

    def ideal_density(self, y: Any, x: Any) -> Tensor:
        """f(y | x) = exp(-|y - clip(x)| / b) / (2b) of the ideal mechanism (float64)."""
        y, w = _as64(y), self.clip(x)
        b = _like(self.scale, w)
        return torch.exp(-(y - w).abs() / b) / (2.0 * b)
