"""ldpsign (Jin et al. 2020; Wu et al. 2023's non-IID clients): one private sign per coordinate.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .._validate import delta as _delta, real
from ..accounting import PER_COORDINATE, Guarantee
from .base import Mechanism, _as_param


def _phi(t: Tensor) -> Tensor:
    """Φ(t) = erfc(-t / √2) / 2, accurate to float64 in the tails (``torch.special.ndtr`` loses digits below t = -5
    and returns 0 below t = -8.3)."""
    return 0.5 * torch.special.erfc(-t / math.sqrt(2.0))


#: The exact calibration's margin: σ is set for ε (1 - SIGN_MARGIN), leaving room for float64's rounding of q.
SIGN_MARGIN = 1e-12


def exact_sign_ratio(epsilon: float) -> float:
    """s = r / σ with ln(Φ(s) / Φ(-s)) <= ε (1 - :data:`SIGN_MARGIN`), equal up to float64 rounding: the stochastic
    sign's exact pure ε on [-r, r] (Φ(-s) <= 1/2 makes the left side increasing in s). Bisection over s in
    [0, sqrt(2ε) + 10]."""
    from scipy.special import log_ndtr

    eps = real(epsilon, "epsilon", positive=True) * (1.0 - SIGN_MARGIN)

    def loss(s: float) -> float:
        return float(log_ndtr(s) - log_ndtr(-s))

    lo, hi = 0.0, math.sqrt(2.0 * eps) + 10.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if loss(mid) <= eps:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 4 * math.ulp(hi):
            break
    return lo   # loss(lo) <= eps always (lo only moves to points that satisfy it)


# ---- 7. ldpsign (Wu et al. 2023, non-IID clients; Jin et al. 2020) -------------------------------
class LdpSign(Mechanism):
    """Stochastic sign: report +1 with probability Φ(w / σ), else -1 (w = x clipped to [-r, r]).

    Wu, Xu, Zhu (Appl. Sci. 2023, Section 3.1, after Jin et al., "Stochastic-Sign SGD for Federated
    Learning with Theoretical Guarantees", 2020) with σ = Δ2 sqrt(2 ln(1.25/δ)) / ε, the classical
    Gaussian-mechanism calibration (Dwork & Roth 2014, Thm A.1): the report is the sign of
    w + N(0, σ²), so it inherits the Gaussian mechanism's (ε, δ) **when that calibration is valid**
    (Thm A.1 needs ε < 1 and Δ2 >= 2r). Because the output is binary and w is bounded, the exact
    guarantee is pure: ε* = ln(Φ(r/σ) / Φ(-r/σ)) per coordinate per report (:attr:`guarantee`);
    the paper's (ε, δ) is kept as :attr:`calibration`.

    With neither ``delta`` nor ``l2_sensitivity`` the mechanism is calibrated **exactly** instead: σ = r / s with s
    the root of ln(Φ(s) / Φ(-s)) = ε (1 - 1e-12) (bisection, :func:`exact_sign_ratio`), so the pure guarantee is
    ``epsilon`` up to that margin, the calibration to compare it with other pure mechanisms at equal ε.

    **What the sampler realises.** It draws the less likely report with probability q = Φ(-|w|/σ), computed in
    float64 without cancellation (not 1 - Φ(|w|/σ)), against one uniform u of the input's dtype: u < q flips the
    report to -sign(w). The realised q̃ = P[u < q] is q rounded **up** to the uniforms' grid (2^-24 for float32,
    :meth:`realized_distribution`), never 0: rounding up the small probability and down the large one only lowers the
    largest ratio, so the realised loss is at most ε* up to float64's rounding of q (relative 1e-15, inside the
    margin). A q below the grid's step is sampled as one step: the realised ε is then smaller, not larger.

    E[output | w] = 2Φ(w/σ) - 1 (a biased, monotone estimate of w's sign), Var = 1 - E².
    """

    name = "ldpsign"
    discrete = True

    def __init__(self, *, epsilon: float, delta: Optional[float] = None, l2_sensitivity: Optional[float] = None,
                 radius: float = 1.0, center: float = 0.0) -> None:
        from scipy.special import log_ndtr

        eps = real(epsilon, "epsilon", positive=True)
        rad = _as_param(radius, "radius", positive=True)
        if isinstance(rad, Tensor):
            raise ValueError("LdpSign needs a scalar radius")
        if real(center, "center") != 0.0:
            raise ValueError(f"LdpSign reports a sign about 0: center must be 0, got {center!r}")
        if (delta is None) != (l2_sensitivity is None):
            raise ValueError("LdpSign takes delta and l2_sensitivity together (the paper's Gaussian calibration) or "
                             "neither (exact calibration at pure epsilon)")
        if delta is None:
            s = exact_sign_ratio(eps)
            self.sigma = rad / s
            self.calibration = Guarantee(epsilon=eps, unit=PER_COORDINATE, note="exact: ln(Φ(r/σ)/Φ(-r/σ)) = ε")
            self.l2_sensitivity = None
        else:
            dl = _delta(delta)
            sens = _as_param(l2_sensitivity, "l2_sensitivity", positive=True)
            if isinstance(sens, Tensor):
                raise ValueError("LdpSign needs a scalar l2_sensitivity")
            self.sigma = sens * math.sqrt(2.0 * math.log(1.25 / dl)) / eps
            self.calibration = Guarantee(epsilon=eps, delta=dl, unit=PER_COORDINATE, note="as calibrated by the paper")
            self.l2_sensitivity = sens

        exact = float(log_ndtr(rad / self.sigma) - log_ndtr(-rad / self.sigma))
        super().__init__(epsilon=exact)
        self._set_range(0.0, rad)

    def __repr__(self) -> str:
        if self.l2_sensitivity is None:
            return (f"LdpSign(epsilon={self._epsilon:.4g}, radius={self._radius:g}; exact calibration, "
                    f"sigma={self.sigma:g})")
        return (f"LdpSign(epsilon={self.calibration.epsilon:g}, delta={self.calibration.delta:g}, "
                f"l2_sensitivity={self.l2_sensitivity:g}, radius={self._radius:g}; sigma={self.sigma:g}, "
                f"exact pure epsilon={self._epsilon:.4g})")

    def prob_plus(self, x: Any) -> Tensor:
        """P[output = +1 | x] = Φ(clip(x) / σ) (float64)."""
        return _phi(self.clip(x) / self.sigma)

    def _minority(self, x: Any) -> Tensor:
        """q = Φ(-|clip(x)|/σ) (float64): the probability of the less likely report, -sign(x)."""
        return _phi(-self.clip(x).abs() / self.sigma)

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:
        q = _phi(-w.to(torch.float64).abs() / self.sigma)
        side = torch.where(w < 0, -1.0, 1.0).to(torch.float64)
        return torch.where(u.to(torch.float64) < q, -side, side).to(w.dtype)

    def mean(self, x: Any) -> Tensor:
        """E[output | x] = 2Φ(clip(x)/σ) - 1 (float64): not x, the mechanism is biased by design."""
        return 2.0 * self.prob_plus(x) - 1.0

    def variance(self, x: Any) -> Tensor:
        """1 - (2Φ(clip(x)/σ) - 1)² (float64)."""
        return 1.0 - self.mean(x) ** 2

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (-1, +1), float64 probabilities Φ(∓clip(x)/σ), each
        computed directly (no 1 - p cancellation for large ε)."""
        w = self.clip(x)
        minus, plus = _phi(-w / self.sigma), _phi(w / self.sigma)
        values = torch.stack([-torch.ones_like(plus), torch.ones_like(plus)], dim=-1)
        return values, torch.stack([minus, plus], dim=-1)

    def realized_distribution(self, x: Any, bits: int = 24) -> Tuple[Tensor, Tensor]:
        """The law the sampler realises with uniforms on the grid 2^-``bits`` (24: float32 ``torch.rand``): the less
        likely report's probability ⌈q 2^bits⌉ 2^-bits (u < q for the grid's u = k 2^-bits), the other's the rest."""
        w = self.clip(x)
        q = torch.ceil(self._minority(x) * 2.0 ** bits) / 2.0 ** bits
        minority_plus = w < 0   # w < 0: +1 is the less likely report; w >= 0: -1 is
        plus = torch.where(minority_plus, q, 1.0 - q)
        values = torch.stack([-torch.ones_like(plus), torch.ones_like(plus)], dim=-1)
        return values, torch.stack([1.0 - plus, plus], dim=-1)
