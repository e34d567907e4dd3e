"""Tests for ldptut.audits: the exact and Monte-Carlo audits of the privacy loss."""
from __future__ import annotations

import math

import pytest
import torch

from ldptut.audits import (
    AuditResult,
    binomial_confidence_bounds,
    exact_ldp_audit,
    histogram_ratio_exact,
    monte_carlo_audit,
)
from ldptut.mechanisms import Gaussian, Hybrid, Laplace, Piecewise, RandomizedResponse, TwoPoint
from ldptut.rng import generator


# ---- exact audit --------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.05, 0.7, 1.0, 2.5, 10.0])
def test_exact_audit_rr_and_two_point(eps):
    res = exact_ldp_audit(RandomizedResponse(epsilon=eps), [0, 1])
    assert isinstance(res, AuditResult)
    assert res.passed and res.epsilon_claimed == eps
    assert abs(res.epsilon_observed - eps) <= 1e-9
    assert res.ratio_max == pytest.approx(math.exp(eps), rel=1e-12)
    res = exact_ldp_audit(TwoPoint(epsilon=eps, center=-3.0, radius=0.25), torch.linspace(-3.5, -2.5, 41))
    assert res.passed
    assert abs(res.epsilon_observed - eps) <= 1e-9
    lo, hi = sorted(res.worst_inputs[:2])
    assert lo <= -3.25 and hi >= -2.75  # the worst pair sits at (or beyond) the two range ends
    assert res.details["row_sums_max_error"] < 1e-12


def test_exact_audit_interior_grid_is_smaller():
    """Without the range ends the grid does not reach ε — the audit reports what the grid shows."""
    res = exact_ldp_audit(TwoPoint(epsilon=1.0), [-0.5, 0.5])
    assert res.passed and res.epsilon_observed < 1.0 - 0.1


class _OffTwoPoint(TwoPoint):
    def output_distribution(self, x):
        v, p = super().output_distribution(x)
        pp = (p[..., 1] * 1.05).clamp(max=1.0)
        return v, torch.stack([1 - pp, pp], -1)


class _Identity:
    """A 'mechanism' that reports its input: infinite privacy loss (0 vs non-zero probability)."""

    epsilon = 1.0

    def output_distribution(self, x):
        x = torch.as_tensor(x, dtype=torch.float64)
        return x.unsqueeze(-1), torch.ones_like(x).unsqueeze(-1)


def test_exact_audit_catches_wrong_mechanisms():
    res = exact_ldp_audit(_OffTwoPoint(epsilon=1.0), torch.linspace(-1, 1, 11))
    assert not res.passed and res.epsilon_observed > 1.05
    res = exact_ldp_audit(_Identity(), [0.0, 1.0])
    assert not res.passed and math.isinf(res.epsilon_observed) and math.isinf(res.ratio_max)
    # a claimed ε slightly below the truth fails
    rr = RandomizedResponse(epsilon=1.0)
    rr._epsilon = 1.0 - 1e-6
    assert not exact_ldp_audit(rr, [0, 1]).passed


def test_exact_audit_validation():
    with pytest.raises(ValueError, match="exact_delta_audit"):  # an (eps, delta) law bounds no single ratio
        exact_ldp_audit(Gaussian(epsilon=1.0, delta=1e-5), [0.0, 1.0])
    with pytest.raises(ValueError, match="inputs"):
        exact_ldp_audit(TwoPoint(epsilon=1.0), [0.0])
    with pytest.raises(ValueError, match="scalar"):
        exact_ldp_audit(TwoPoint(epsilon=1.0, center=torch.zeros(3)), [0.0, 1.0])


# ---- Monte-Carlo audit --------------------------------------------------------------------------
class _NarrowLaplace(Laplace):
    """Claims ε but adds Laplace noise of half the required scale (true loss 2ε)."""

    def privatize(self, x, generator=None):
        return Laplace(epsilon=2 * self.epsilon, center=self.center, radius=self.radius).privatize(x, generator)


@pytest.mark.parametrize(
    "mech", [Laplace(epsilon=1.0), Piecewise(epsilon=1.0), Piecewise(epsilon=4.0, center=2.0, radius=3.0), Hybrid(epsilon=3.0)],
    ids=["laplace", "pm", "pm-eps4", "hybrid"],
)
def test_monte_carlo_audit_passes(mech):
    c, r = mech.center, mech.radius
    res = monte_carlo_audit(mech, c - r, c + r, n_samples=200_000, bins=30, generator=generator(1, "mc"))
    assert res.passed, res
    assert 0 <= res.epsilon_observed <= mech.epsilon
    assert res.epsilon_observed > 0.5 * mech.epsilon  # it does see most of the loss
    assert res.ratio_max == pytest.approx(math.exp(res.epsilon_observed))
    assert res.details["counts_x0"].sum() == 200_000
    exact = res.details["exact"]
    assert exact.passed and exact.epsilon_observed <= mech.epsilon + 1e-9
    assert "Clopper-Pearson" in res.method or "Wilson" in res.method


def test_monte_carlo_audit_fails_for_too_small_scale():
    res = monte_carlo_audit(_NarrowLaplace(epsilon=1.0), -1.0, 1.0, n_samples=200_000, bins=30, generator=generator(2, "mc"))
    assert not res.passed
    assert res.epsilon_observed > 1.5  # true loss is 2
    assert res.details["epsilon_point_estimate"] > res.epsilon_observed


def test_monte_carlo_audit_explicit_edges_and_determinism():
    lap = Laplace(epsilon=2.0)
    edges = torch.linspace(-6, 6, 25)
    a = monte_carlo_audit(lap, -1.0, 1.0, n_samples=50_000, bins=edges, generator=generator(3))
    b = monte_carlo_audit(lap, -1.0, 1.0, n_samples=50_000, bins=edges, generator=generator(3))
    assert a.epsilon_observed == b.epsilon_observed and a.passed
    assert a.details["edges"][0] == -math.inf and a.details["edges"][-1] == math.inf
    assert a.details["counts_x0"].numel() == 26
    with pytest.raises(ValueError, match="bins"):
        monte_carlo_audit(lap, -1.0, 1.0, n_samples=1000, bins=1, generator=generator(3))
    with pytest.raises(ValueError, match="confidence"):
        monte_carlo_audit(lap, -1.0, 1.0, n_samples=1000, bins=10, generator=generator(3), confidence=1.0)
    with pytest.raises(ValueError, match="n_samples"):
        monte_carlo_audit(lap, -1.0, 1.0, n_samples=0, bins=10, generator=generator(3))


def test_histogram_ratio_exact():
    lap = Laplace(epsilon=1.0)
    # the tail bins beyond the range ends hold the collapsed tails, whose ratio is exactly e^{ε_d} (the design ε)
    res = histogram_ratio_exact(lap, -1.0, 1.0, [-math.inf, -5.0, -1.0, 0.0, 1.0, 5.0, math.inf])
    assert res.passed and res.epsilon_observed == pytest.approx(lap.design.epsilon_design, abs=1e-9)
    # the density path (Simpson) agrees with the cdf path on finite bins (a continuous law: the Gaussian)
    gauss = Gaussian(epsilon=2.0, delta=1e-5)

    class DensityOnly:
        epsilon = 2.0
        density = staticmethod(gauss.ideal_density)

    class CdfOnly:
        epsilon = 2.0
        cdf = staticmethod(gauss.ideal_cdf)

    edges = torch.linspace(-3.0, 3.0, 17)
    pm = CdfOnly()
    a = histogram_ratio_exact(pm, -1.0, 1.0, edges)
    b = histogram_ratio_exact(DensityOnly(), -1.0, 1.0, edges, n_sub=4000)
    assert torch.allclose(a.details["p_x0"], b.details["p_x0"], atol=1e-4)
    assert a.epsilon_observed == pytest.approx(b.epsilon_observed, abs=1e-2)
    with pytest.raises(ValueError, match="finite edges"):
        histogram_ratio_exact(DensityOnly(), -1.0, 1.0, [-math.inf, 0.0, 1.0])


def test_binomial_bounds():
    k = torch.tensor([0.0, 5.0, 50.0, 100.0])
    lo, hi, name = binomial_confidence_bounds(k, 100, 0.025)
    assert lo[0] == 0 and hi[-1] == 1
    assert torch.all(lo <= k / 100) and torch.all(hi >= k / 100)
    # Clopper-Pearson 95% two-sided interval for 50/100 is about (0.398, 0.602)
    assert float(lo[2]) == pytest.approx(0.398, abs=0.002) and float(hi[2]) == pytest.approx(0.602, abs=0.002)


def test_exact_delta_audit_of_the_gaussian():
    """The realised laws' hockey-stick divergence at the claimed eps: within delta for the calibrated Gaussian; the
    paper-style sigma whose ideal eps is 421 (mu = 26) has almost all its mass unreachable under the other end, and a
    claimed delta too small fails."""
    from ldptut.audits import exact_delta_audit

    res = exact_delta_audit(Gaussian(epsilon=1.0, delta=1e-5), [-1.0, 0.0, 1.0])
    assert res.passed and 0.9e-5 < res.details["delta"] <= 1e-5 and res.details["unreachable"] < 1e-14  # tails beyond 8 sigma
    sharp = Gaussian.with_sigma(sigma=15.2, delta=2e-3, radius=200.0)
    res = exact_delta_audit(sharp, [-200.0, 200.0])
    assert res.details["unreachable"] > 0.999 and res.details["delta"] > 0.999 and not sharp.guarantee.finite
    wrong = Gaussian(epsilon=1.0, delta=1e-5)
    wrong._delta = 1e-6  # claims less than it gives
    assert not exact_delta_audit(wrong, [-1.0, 1.0]).passed
