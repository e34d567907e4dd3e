"""ldpsign (Jin et al. 2020; Wu et al. 2023's non-IID clients): one private sign per coordinate.
"""
from __future__ import annotations

import math
from typing import Any, Tuple

import torch
from torch import Tensor

from .._validate import delta as _delta, real
from ..accounting import PER_COORDINATE, Guarantee
from .base import Mechanism, _as_param


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

    E[output | w] = 2Φ(w/σ) - 1 (a biased, monotone estimate of w's sign), Var = 1 - E².
    """

    name = "ldpsign"
    discrete = True

    def __init__(self, *, epsilon: float, delta: float, l2_sensitivity: float, radius: float = 1.0) -> None:
        eps = real(epsilon, "epsilon", positive=True)
        dl = _delta(delta)
        sens = _as_param(l2_sensitivity, "l2_sensitivity", positive=True)
        rad = _as_param(radius, "radius", positive=True)
        if isinstance(sens, Tensor) or isinstance(rad, Tensor):
            raise ValueError("LdpSign needs scalar l2_sensitivity and radius")
        self.sigma = sens * math.sqrt(2.0 * math.log(1.25 / dl)) / eps
        self.calibration = Guarantee(epsilon=eps, delta=dl, unit=PER_COORDINATE, note="as calibrated by the paper")
        self.l2_sensitivity = sens
        from scipy.special import log_ndtr

        exact = float(log_ndtr(rad / self.sigma) - log_ndtr(-rad / self.sigma))
        super().__init__(epsilon=exact)
        self._set_range(0.0, rad)

    def __repr__(self) -> str:
        return (f"LdpSign(epsilon={self.calibration.epsilon:g}, delta={self.calibration.delta:g}, "
                f"l2_sensitivity={self.l2_sensitivity:g}, radius={self._radius:g}; sigma={self.sigma:g}, "
                f"exact pure epsilon={self._epsilon:.4g})")

    def prob_plus(self, x: Any) -> Tensor:
        """P[output = +1 | x] = Φ(clip(x) / σ) (float64)."""
        return torch.special.ndtr(self.clip(x) / self.sigma)

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:
        p = torch.special.ndtr(w / self.sigma)
        return torch.where(u < p, 1.0, -1.0).to(w.dtype)

    def mean(self, x: Any) -> Tensor:
        """E[output | x] = 2Φ(clip(x)/σ) - 1 (float64): not x, the mechanism is biased by design."""
        return 2.0 * self.prob_plus(x) - 1.0

    def variance(self, x: Any) -> Tensor:
        """1 - (2Φ(clip(x)/σ) - 1)² (float64)."""
        return 1.0 - self.mean(x) ** 2

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (-1, +1), exact float64 probabilities."""
        p = self.prob_plus(x)
        values = torch.stack([-torch.ones_like(p), torch.ones_like(p)], dim=-1)
        return values, torch.stack([1.0 - p, p], dim=-1)
