"""The Gaussian mechanism ((ε, δ); Wu et al. 2023's IID clients), as a grid law with 2^-53-step uniforms.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .. import accounting, fpsafe
from .._validate import delta as _delta
from ..accounting import Guarantee, gaussian_epsilon, gaussian_sigma
from .base import Mechanism, Param, _as64, _as_param, _broadcast_shape, _to_input_dtype
from .grid import GridMechanism


# ---- 6. Gaussian (Wu et al. 2023, IID clients) ------------------------------------------------------
#: Grid cells per noise standard deviation of the Gaussian's grid law (rounding adds at most g²/4 = σ²/4096).
GAUSSIAN_CELLS_PER_SIGMA = 32
#: The Gaussian's report is clamped to [c - r - Bσ, c + r + Bσ] (B = 9: P[|Z| > 9] = 2.3e-19, below the 2^-53 step).
GAUSSIAN_CLAMP_SIGMAS = 9.0
_SQRT_2PI_INV = 1.0 / math.sqrt(2.0 * math.pi)


def _psi_neg(z: Tensor) -> Tensor:
    """ψ(z) = ∫_{-inf}^z Φ = z Φ(z) + φ(z) for z <= 0, as e^{-z²/2} (1/sqrt(2π) + (z/2) erfcx(-z/sqrt 2)): no
    underflow of Φ on the way, and the small bracket's relative error grows only like z² ε_mach."""
    return torch.exp(-0.5 * z * z) * (_SQRT_2PI_INV + 0.5 * z * torch.special.erfcx(-z / math.sqrt(2.0)))


class _GaussianGrid(fpsafe.GridLaw):
    """N(t, s²) on t units (s = σ / r), clamped to [-L, L] (L = 1 + B s) and rounded without bias onto the grid
    -L, -L + g, ..., L (n cells, g = 2L / n, about s / 32).

    P[index <= j] is the mean of the clamped CDF over the cell [y_j, y_{j+1}]: (s/g) (ψ(b) - ψ(a)),
    a = (y_j - t)/s, b = (y_{j+1} - t)/s, ψ(z) = z Φ(z) + φ(z). Below t it is computed so; above t as
    1 - (s/g) (ψ(-a) - ψ(-b)) (the mean of 1 - Φ); across t as (s/g) (b + ψ(-b) - ψ(a)) (ψ(b) = b + ψ(-b)): every ψ
    at a non-positive argument (:func:`_psi_neg`), no cancellation beyond the cell's own width. Sampled with
    2^-53-step uniforms (:data:`ldptut.fpsafe.GAUSSIAN_BITS`)."""

    bits = fpsafe.GAUSSIAN_BITS

    def __init__(self, s: float, max_cells: int) -> None:
        self.s = float(s)
        self.L = 1.0 + GAUSSIAN_CLAMP_SIGMAS * self.s
        want = math.ceil(2.0 * self.L * GAUSSIAN_CELLS_PER_SIGMA / self.s) if self.s > 0 else max_cells
        self.cells = int(min(max(want, 2), max_cells))
        self.g = 2.0 * self.L / self.cells
        grid = torch.arange(self.cells + 1, dtype=torch.float64) * self.g - self.L
        grid[-1] = self.L
        self.values = grid
        self.epsilon_design = math.nan  # an (ε, δ) law: no design ε

    @property
    def tv_bound(self) -> float:
        """Total variation between the realised and the designed law: each of the K = n + 1 cumulatives is off by
        less than 2^-53 (the ceil onto the uniforms' grid) plus its float error (:attr:`cum_error`), and
        TV = (1/2) Σ_k |p̂_k - p_k| <= K max_k |F̂_k - F_k|."""
        return (self.cells + 1) * (2.0 ** -fpsafe.GAUSSIAN_BITS + self.cum_error)

    @property
    def cum_error(self) -> float:
        """Bound on the float64 error of a cumulative: :data:`ldptut.fpsafe.GAUSSIAN_CUM_ERROR` (1 + 1/s)."""
        return fpsafe.GAUSSIAN_CUM_ERROR * (1.0 + 1.0 / self.s)

    def _lower_upper(self, k: Tensor, state: tuple) -> Tuple[Tensor, Tensor]:
        """(F_k, G_k = 1 - F_k), each computed directly: the mean of Φ over the cell for F, of 1 - Φ for G, so the
        small one of the two is accurate to its own size (float64 holds 1 - G only to 2^-53)."""
        (t,) = state
        n, s, g = self.cells, self.s, self.g
        lo = (k.clamp(0, n - 1).to(torch.float64) * g).sub_(self.L)
        a = (lo - t) / s
        b = (lo + g - t) / s
        # every case needs ψ at -|a| and -|b| only: ψ(a), ψ(b) below t; ψ(-a), ψ(-b) above; ψ(a), ψ(-b) across
        pa, pb = _psi_neg(-a.abs()), _psi_neg(-b.abs())
        w = s / g
        lower_below = (pb - pa) * w          # cell below t: the mean of Φ, small
        upper_above = (pa - pb) * w          # cell above t: the mean of 1 - Φ, small
        across = (b + pb - pa) * w           # cell around t: ψ(b) = b + ψ(-b)
        is_below, is_above = b <= 0.0, a >= 0.0
        F = torch.where(is_below, lower_below, torch.where(is_above, 1.0 - upper_above, across))
        G = torch.where(is_below, 1.0 - lower_below, torch.where(is_above, upper_above, 1.0 - across))
        last = k >= n
        return torch.where(last, torch.ones_like(F), F), torch.where(last, torch.zeros_like(G), G)

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        return self._lower_upper(k, state)[0]

    def upper_at(self, k: Tensor, state: tuple) -> Tensor:
        """G_k = 1 - F_k = P[index > k | t], computed directly (:meth:`_lower_upper`)."""
        return self._lower_upper(k, state)[1]

    def passed(self, k: Tensor, state: tuple, u: Tensor) -> Tensor:
        """F_k <= u, decided on F_k for u < 1/2 and on G_k >= 1 - u for u >= 1/2 (1 - u is exact for a multiple of
        2^-53): in the upper tail the cell probabilities are far below float64's step at 1."""
        F, G = self._lower_upper(k, state)
        return torch.where(u >= 0.5, G >= 1.0 - u, F <= u).to(torch.int64)

    def realized_probs(self, t: Tensor) -> Tensor:
        """What the sampler realises: J < 2^52 (u < 1/2) goes to the k with F_{k-1} <= J 2^-53 < F_k, J >= 2^52 to
        the k with G_k < 1 - J 2^-53 <= G_{k-1}; each probability a count of J times 2^-53 (float64, exact)."""
        t = torch.as_tensor(t, dtype=torch.float64)
        k = torch.arange(self.size, dtype=torch.int64, device=t.device).expand(*t.shape, -1)
        state = (t.unsqueeze(-1).expand(*t.shape, self.size),)
        full, half = float(1 << self.bits), float(1 << (self.bits - 1))
        F, G = self._lower_upper(k, state)
        low = torch.ceil(F * full).clamp_(0.0, half)
        low[..., -1] = half
        high = torch.floor(G * full).clamp_(0.0, half)
        high[..., -1] = 0.0
        n_low = torch.diff(low, dim=-1, prepend=torch.zeros_like(low[..., :1]))
        n_high = -torch.diff(high, dim=-1, prepend=torch.full_like(high[..., :1], half))
        return (n_low + n_high) * 2.0 ** -self.bits

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """s² (the clamp at 9 s beyond the range changes it by less than 1e-30 relative, below float64's step)."""
        return torch.full_like(torch.as_tensor(t, dtype=torch.float64), self.s * self.s)

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        (t,) = state
        # the quantile through the smaller tail (1 - u is exact for u a multiple of 2^-53): relative accuracy
        z = torch.where(u < 0.5, torch.special.ndtri(u), -torch.special.ndtri(1.0 - u))
        pos = (z * self.s + t + self.L) / self.g
        return fpsafe.cell_of(pos, 0, self.cells)


@functools.lru_cache(maxsize=256)
def _gaussian_grid(s: float, max_cells: int) -> _GaussianGrid:
    return _GaussianGrid(s, max_cells)


class Gaussian(GridMechanism):
    """Clip to [c - r, c + r] and add N(0, σ²) noise: the Gaussian mechanism, (ε, δ)-LDP per coordinate, sampled as a
    grid law whose **realised** law gives the stated (ε, δ).

    Ideal: Dwork, Kenthapadi, McSherry, Mironov, Naor, Eurocrypt 2006; used by Wu, Xu, Zhu (Appl. Sci. 2023,
    Section 3.1) for IID clients. The sensitivity of one clipped coordinate is Δ = 2r (any two inputs), μ = 2r/σ, and
    the ideal mechanism's exact δ(ε) is Balle & Wang's (ICML 2018, Thm 8; :func:`ldptut.accounting.gaussian_delta`).

    **Sampled.** Float noise added to the input lets a report rule an input out (Mironov, CCS 2012; at (ε, δ) =
    (1, 1e-5) at least 12 % of float32 reports of 0 cannot occur for 1, far above δ). Instead (:class:`_GaussianGrid`):
    in units t = (w - c)/r, the noisy value is clamped to ±(1 + 9 s) (s = σ/r; post-processing), rounded without bias
    onto a fixed grid of step about s/32 (post-processing), and drawn by the inverse CDF of float64 cumulatives with
    one 2^-53-step uniform (:data:`ldptut.fpsafe.GAUSSIAN_BITS`). The designed law is a post-processing of the
    Gaussian, so it is μ-GDP exactly; the realised one is within total variation tv = K (2^-53 + float error) of it
    (K grid values, :attr:`_GaussianGrid.tv_bound`), so one report is (ε, δ_μ(ε) + (1 + e^ε) tv)-DP
    (:func:`ldptut.accounting.gaussian_epsilon`), and k reports add k tv (:class:`ldptut.accounting.Guarantee`).
    A pure grid law with a floor (the other continuous mechanisms) cannot work here: the Gaussian's privacy loss is
    unbounded, its tails must go into δ, and 2^-24 steps would leave tv about 1e-5, as large as δ itself.

    ``Gaussian(epsilon=, delta=)`` calibrates σ so that the **realised** law is (ε, δ)-DP: σ for the ideal mechanism
    at δ - (1 + e^ε) tv (tv of the grid at the ideal σ; a larger σ has fewer cells, so tv only falls); ``ValueError``
    when that leaves less than δ/2 (ε too large for 53-bit uniforms). :meth:`with_sigma` takes a given σ (e.g. a
    paper's formula) and states the smallest ε that holds for ``delta``, which is ``math.inf`` when none does: a
    one-uniform sampler realises no probability ratio above 2^53 = e^36.7 and no output below 2^-53, so a σ whose ideal
    ε runs into the hundreds (μ = 2r/σ above about 5 at δ = 1e-3) has **no** realised guarantee; its reports tell the
    ends of the range apart almost surely. Cost: Var = σ² + at most g² r²/4 (:meth:`variance`, exact;
    :meth:`ideal_variance` is σ²), unbiased up to the clamp (|bias| < 1e-20 σ).
    """

    name = "gaussian"
    #: Most cells of the grid (a σ below 2r/1000 or so reaches it; the grid is then coarser than s/32).
    max_cells = 1 << 16

    def __init__(self, *, epsilon: float, delta: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        Mechanism.__init__(self, epsilon=epsilon)
        self._delta = _delta(delta)
        self._set_range(center, radius)
        if isinstance(self._radius, Tensor):
            raise ValueError("Gaussian needs a scalar radius (σ is calibrated for one sensitivity 2r)")
        sens = 2.0 * self._radius
        tv0 = _gaussian_grid(gaussian_sigma(self._epsilon, self._delta, sens) / self._radius, self.max_cells).tv_bound
        room = self._delta - (math.inf if self._epsilon > 700 else (1.0 + math.exp(self._epsilon)) * tv0)
        if not room >= self._delta / 2.0:
            raise ValueError(
                f"epsilon={epsilon!r} with delta={delta!r} cannot be realised by a sampler of 2^-{fpsafe.GAUSSIAN_BITS}-step "
                f"uniforms: its total variation {tv0:.3g} from the ideal law, times (1 + e^epsilon), exceeds delta/2; "
                f"use a smaller epsilon or a larger delta")
        self.sigma = gaussian_sigma(self._epsilon, room, sens)
        self._init_law()
        if not accounting.gaussian_delta(self._epsilon, sens / self.sigma) + (1.0 + math.exp(self._epsilon)) * self.tv \
                <= self._delta:  # pragma: no cover - guarded by the calibration above
            raise AssertionError("Gaussian calibration: the realised delta exceeds delta")

    def _init_law(self) -> None:
        self.law = _gaussian_grid(self.sigma / self._radius, self.max_cells)
        self.design = None
        self.tv = self.law.tv_bound

    @classmethod
    def with_sigma(cls, *, sigma: float, delta: float, center: float = 0.0, radius: float = 1.0) -> "Gaussian":
        """The mechanism with noise std ``sigma``; its ε is the smallest that the realised law gives for ``delta``
        and Δ = 2r (``math.inf`` when none: see the class docstring)."""
        sig = _as_param(sigma, "sigma", positive=True)
        rad = _as_param(radius, "radius", positive=True)
        if isinstance(sig, Tensor) or isinstance(rad, Tensor):
            raise ValueError("Gaussian.with_sigma needs scalar sigma and radius")
        mu = 2.0 * rad / sig
        try:
            ideal = gaussian_epsilon(_delta(delta), mu) if math.isfinite(mu) else math.inf
        except ValueError:
            ideal = math.inf
        if not math.isfinite(ideal):
            raise ValueError(f"sigma={sigma!r} is too small for radius={radius!r} (sensitivity over sigma 2r/σ = {mu:.3g}): "
                             f"no finite epsilon holds for delta={delta!r}; give a larger sigma")
        self = cls.__new__(cls)
        self._delta = float(delta)
        self._set_range(center, rad)
        self.sigma = float(sig)
        self._init_law()
        self.ideal_epsilon = ideal
        # may be 0 (δ(0) <= delta: σ much larger than 2r) or inf (no finite ε holds for the realised law)
        self._epsilon = gaussian_epsilon(self._delta, mu, self.tv)
        return self

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def guarantee(self) -> Guarantee:
        """(ε, δ) for one report of one clipped coordinate, for the law the code samples: μ = 2r/σ of the designed
        law and its distance ``tv`` (composition adds it up; ε may be ``math.inf``: no finite ε at this δ)."""
        return Guarantee(epsilon=self._epsilon, delta=self._delta, mu=2.0 * self._radius / self.sigma, tv=self.tv)

    @property
    def ideal_guarantee(self) -> Guarantee:
        """The real-valued mechanism's exact (ε, δ) at this σ (no sampler realises it where ε is large)."""
        mu = 2.0 * self._radius / self.sigma
        return Guarantee(epsilon=gaussian_epsilon(self._delta, mu), delta=self._delta, mu=mu,
                         note="ideal real-valued mechanism")

    def __repr__(self) -> str:
        center = f"{self._center:g}" if isinstance(self._center, float) else f"tensor{tuple(self._center.shape)}"
        return (f"Gaussian(epsilon={self._epsilon:g}, delta={self._delta:g}, sigma={self.sigma:g}, "
                f"center={center}, radius={self._radius:g})")

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Reports of the grid law for every element of ``x`` (same shape, dtype, device): ``x`` clipped, one
        integer uniform J in [0, 2^53) per element from ``generator``, the report c + r v_k with v_k the grid value
        whose cumulative interval holds J 2^-53 (float64, then the input's dtype)."""
        w = self._clipped_input(x)
        u = fpsafe.uniforms(w.shape, generator, w.device, bits=fpsafe.GAUSSIAN_BITS)
        return _to_input_dtype(self._sample(w, u), x.dtype, self)

    def ideal_variance(self, x: Any) -> Tensor:
        """σ² for every x (float64): the real-valued mechanism's."""
        x = _as64(x)
        return torch.full(_broadcast_shape(x, self._center, self._radius), self.sigma ** 2, dtype=torch.float64)

    def ideal_density(self, y: Any, x: Any) -> Tensor:
        """f(y | x) = exp(-(y - clip(x))² / (2σ²)) / (σ sqrt(2π)) of the real-valued mechanism (float64)."""
        z = (_as64(y) - self.clip(x)) / self.sigma
        return torch.exp(-0.5 * z * z) / (self.sigma * math.sqrt(2.0 * math.pi))

    def ideal_cdf(self, y: Any, x: Any) -> Tensor:
        """P[Y <= y | x] = Φ((y - clip(x)) / σ) of the real-valued mechanism (float64)."""
        return torch.special.ndtr((_as64(y) - self.clip(x)) / self.sigma)
