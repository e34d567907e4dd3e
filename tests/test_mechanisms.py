"""Statistical and contract tests for ldptut.mechanisms.

The statistical checks are shared helper functions (mean_within_se, variance_within,
frequencies_match); the "can fail" tests feed deliberately wrong mechanisms to the very same
functions and assert that they report failure.
"""
from __future__ import annotations

import math

import pytest
import torch

from ldptut.mechanisms import (
    MECHANISMS,
    Guarantee,
    Hybrid,
    Laplace,
    Piecewise,
    RandomizedResponse,
    TwoPoint,
    make_mechanism,
)
from ldptut.audits import exact_ldp_audit, monte_carlo_audit
from ldptut.rng import generator

N = 100_000  # samples per input point
# parameters some mechanisms need besides epsilon (the (ε, δ) ones)
EXTRA = {"gaussian": dict(delta=1e-5), "ldpsign": dict(delta=1e-5, l2_sensitivity=2.0)}


def build(name, epsilon):
    return make_mechanism(name, epsilon=epsilon, **EXTRA.get(name, {}))


# --------------------------------------------------------------------------------------------------
# shared statistical checks
# --------------------------------------------------------------------------------------------------
def mean_within_se(samples: torch.Tensor, expected, variance, n_se: float = 4.0):
    """Column-wise: |mean(samples) - expected| <= n_se * sqrt(variance / n). Returns (ok, z)."""
    s = samples.to(torch.float64)
    n = s.shape[0]
    z = (s.mean(0) - torch.as_tensor(expected, dtype=torch.float64)) / torch.sqrt(
        torch.as_tensor(variance, dtype=torch.float64) / n
    )
    return bool((z.abs() <= n_se).all()), z


def variance_within(samples: torch.Tensor, expected_variance, rel_tol: float = 0.10):
    """Column-wise: |var(samples) / expected - 1| <= rel_tol. Returns (ok, relative error)."""
    v = samples.to(torch.float64).var(0)
    rel = v / torch.as_tensor(expected_variance, dtype=torch.float64) - 1.0
    return bool((rel.abs() <= rel_tol).all()), rel


def frequencies_match(counts: torch.Tensor, probs: torch.Tensor, alpha: float = 1e-6):
    """Per-category binomial z-test with Bonferroni over categories (family level ``alpha``):
    |k_i - n p_i| <= z sqrt(n p_i (1 - p_i)); categories with p_i = 0 must be empty.
    Also returns the chi-square statistic for information. Returns (ok, z-scores)."""
    counts = counts.to(torch.float64)
    probs = probs.to(torch.float64)
    n = counts.sum()
    zc = float(torch.special.ndtri(torch.tensor(1 - alpha / (2 * counts.numel()), dtype=torch.float64)))
    sd = torch.sqrt(n * probs * (1 - probs))
    z = torch.where(sd > 0, (counts - n * probs) / torch.where(sd > 0, sd, 1.0), torch.where(counts > 0, math.inf, 0.0))
    return bool((z.abs() <= zc).all()), z


def simpson_bin_probs(density, x, edges: torch.Tensor, n_sub: int = 2000) -> torch.Tensor:
    """∫ density(y, x) dy over each bin (composite Simpson; used to test `density` itself)."""
    a, b = edges[:-1], edges[1:]
    t = torch.linspace(0, 1, 2 * n_sub + 1, dtype=torch.float64)
    pts = a[:, None] + (b - a)[:, None] * t
    f = density(pts, torch.tensor(x, dtype=torch.float64))
    w = torch.ones_like(t)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return (f * w).sum(1) * (b - a) / (6 * n_sub)


def draw(mech, x_row: torch.Tensor, n: int, seed: int, *keys, dtype=torch.float32) -> torch.Tensor:
    """n independent reports for each element of x_row: shape (n, *x_row.shape)."""
    x = x_row.to(dtype).expand(n, *x_row.shape).contiguous()
    return mech.privatize(x, generator(seed, type(mech).__name__, "draw", *keys))


# --------------------------------------------------------------------------------------------------
# deliberately wrong mechanisms
# --------------------------------------------------------------------------------------------------
class SkewedTwoPoint(TwoPoint):
    """P[plus] inflated by 0.05 in both the sampler and the reported distribution: biased and not
    ε-LDP (the minus outcome's ratio exceeds e^ε)."""

    SKEW = 0.05

    def output_distribution(self, x):
        v, p = super().output_distribution(x)
        pp = (p[..., 1] + self.SKEW).clamp(max=1.0)
        return v, torch.stack([1 - pp, pp], -1)

    def privatize(self, x, generator=None):
        v, p = self.output_distribution(x)
        u = torch.rand(x.shape, generator=generator, dtype=torch.float64)
        return torch.where(u < p[..., 1], v[..., 1], v[..., 0]).to(x.dtype)


class NarrowLaplace(Laplace):
    """Claims Laplace(ε) but samples with scale shrink * 2r / ε (variance off by shrink²)."""

    def __init__(self, *, shrink: float, **kw):
        super().__init__(**kw)
        self._inner = Laplace(epsilon=self.epsilon / shrink, center=self.center, radius=self.radius)

    def privatize(self, x, generator=None):
        return self._inner.privatize(x, generator)


class WrongEpsPiecewise(Piecewise):
    """Samples PM with 2ε but reports the density for ε."""

    def privatize(self, x, generator=None):
        return Piecewise(epsilon=2 * self.epsilon, center=self.center, radius=self.radius).privatize(x, generator)


# --------------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------------
GRID = torch.tensor([-1.7, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5])  # range ends + clipped values
CENTER_T = torch.tensor([0.0, 2.0, -1.5, 10.0])
RADIUS_T = torch.tensor([1.0, 0.5, 3.0, 0.25])
X_T = CENTER_T + RADIUS_T * torch.tensor([-1.0, 1.0, 0.3, 1.7])  # per-element ranges, last one clipped

CONTINUOUS = [Laplace, Piecewise, Hybrid]
RANGED = [TwoPoint, Laplace, Piecewise, Hybrid]

CASES = []
for cls in RANGED:
    for eps in (0.5, 1.0, 4.0):
        CASES.append(pytest.param(cls, dict(epsilon=eps), GRID, id=f"{cls.__name__}-eps{eps}"))
    CASES.append(
        pytest.param(cls, dict(epsilon=2.0, center=3.0, radius=2.0), 3.0 + 2.0 * GRID, id=f"{cls.__name__}-c3r2")
    )
    CASES.append(
        pytest.param(cls, dict(epsilon=1.5, center=CENTER_T, radius=RADIUS_T), X_T, id=f"{cls.__name__}-tensor")
    )


@pytest.mark.parametrize("cls,kw,x_row", CASES)
def test_mean_and_variance(cls, kw, x_row):
    mech = cls(**kw)
    y = draw(mech, x_row, N, 1, str(kw["epsilon"]), str(kw.get("center")))
    assert torch.equal(mech.mean(x_row), mech.clip(x_row).expand(mech.mean(x_row).shape))  # unbiased
    assert torch.count_nonzero(mech.bias(x_row)) == 0
    ok, z = mean_within_se(y, mech.mean(x_row), mech.variance(x_row))
    assert ok, f"mean off: z = {z}"
    ok, rel = variance_within(y, mech.variance(x_row))
    assert ok, f"variance off: rel = {rel}"


@pytest.mark.parametrize("eps", [0.25, 1.0, 3.0])
def test_randomized_response_estimate(eps):
    rr = RandomizedResponse(epsilon=eps)
    x_row = torch.tensor([0.0, 1.0, 1.0, 0.0])
    y = draw(rr, x_row, N, 2)
    assert set(y.unique().tolist()) <= {0.0, 1.0}
    est = rr.estimate(y)
    ok, z = mean_within_se(est, x_row, rr.variance(x_row))
    assert ok, z
    ok, rel = variance_within(est, rr.variance(x_row))
    assert ok, rel
    p = math.exp(eps) / (1 + math.exp(eps))
    assert rr.variance(x_row)[0].item() == pytest.approx(p * (1 - p) / (2 * p - 1) ** 2, rel=1e-12)
    assert torch.allclose(rr.mean(x_row), (1 - p) + (2 * p - 1) * x_row.double())


def test_randomized_response_integer_and_bool_inputs():
    rr = RandomizedResponse(epsilon=1.0)
    xf = (torch.arange(1000) % 2).to(torch.float32)
    y_f = rr.privatize(xf, generator(3))
    y_i = rr.privatize(xf.to(torch.int64), generator(3))
    y_b = rr.privatize(xf.to(torch.bool), generator(3))
    assert y_i.dtype == torch.int64 and y_b.dtype == torch.bool
    assert torch.equal(y_f, y_i.to(torch.float32)) and torch.equal(y_f, y_b.to(torch.float32))


# ---- determinism, dtype, device, shape ---------------------------------------------------------
def _input_for(name, shape, dtype):
    g = torch.Generator().manual_seed(0)
    if name == "randomized_response":
        return (torch.rand(shape, generator=g) > 0.5).to(dtype)
    return (torch.rand(shape, generator=g) * 3 - 1.5).to(dtype)


@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_shape_dtype_device_and_determinism(name, dtype):
    mech = build(name, 1.0)
    if dtype == torch.float16 and name in ("two_point", "laplace", "piecewise", "hybrid"):
        # their fixed report values (e.g. ±2.16395) are not float16 numbers: rounding them would bias every report
        with pytest.raises(ValueError, match="which torch.float16 rounds to .* a bias"):
            mech.privatize(_input_for(name, (7,), dtype), generator(5, name))
        return
    for shape in [(0,), (7,), (3, 5), (300, 700)]:
        x = _input_for(name, shape, dtype)
        y1 = mech.privatize(x, generator(5, name))
        y2 = mech.privatize(x, generator(5, name))
        y3 = mech.privatize(x, generator(6, name))
        assert y1.shape == x.shape and y1.dtype == x.dtype and y1.device == x.device
        assert torch.equal(y1, y2)
        if x.numel() > 100:
            assert not torch.equal(y1, y3)
    # non-contiguous input
    x = _input_for(name, (400, 300), dtype).t()
    y = mech.privatize(x, generator(1))
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.equal(y, mech.privatize(x.contiguous(), generator(1)))


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_privatize_rows_is_privatize_row_by_row_with_each_rows_generator(name):
    """The (clients x d) entry point of the round engine: row i is ``privatize(x[i], generators[i])``, bit for bit."""
    mech = build(name, 1.0)
    x = _input_for(name, (4, 50), torch.float32)
    gens = [generator(7, name, i) for i in range(4)]
    rows = mech.privatize_rows(x, gens)
    assert rows.shape == x.shape and rows.dtype == x.dtype
    for i in range(4):
        assert torch.equal(rows[i], mech.privatize(x[i], generator(7, name, i)))
    with pytest.raises(ValueError, match=r"an \(n, d\) matrix and n generators, got shape \(4, 50\) and 3"):
        mech.privatize_rows(x, gens[:3])
    with pytest.raises(ValueError, match=r"got shape \(50,\) and 1"):
        mech.privatize_rows(x[0], gens[:1])


def test_draws_come_from_the_generator():
    """TwoPoint output equals the textbook formula applied to torch.rand from the same generator."""
    mech = TwoPoint(epsilon=1.0, center=0.5, radius=2.0)
    x = torch.linspace(-3, 4, 200_001, dtype=torch.float64)
    y = mech.privatize(x, generator(4, "gen"))
    u = torch.rand(x.shape, generator=generator(4, "gen"), dtype=torch.float64)
    v, p = mech.output_distribution(x)
    expected = torch.where(u < p[..., 1], v[..., 1], v[..., 0])
    # the sampler folds the threshold into an affine map; allow a rare 1-ulp threshold disagreement
    assert (y != expected).sum().item() <= 2


def test_tensor_parameters_are_moved_and_broadcast():
    mech = Piecewise(epsilon=1.0, center=CENTER_T.double(), radius=RADIUS_T.to(torch.float16))
    x = X_T.expand(10, 4).to(torch.float32)
    y = mech.privatize(x, generator(0))
    assert y.dtype == torch.float32 and y.shape == (10, 4)
    lo, hi = mech.support(X_T)
    assert bool(((y.double() >= lo - 1e-5) & (y.double() <= hi + 1e-5)).all())
    with pytest.raises(ValueError, match="center"):
        mech.privatize(torch.zeros(10, 3), generator(0))
    # per-layer range: one (center, radius) per row
    layer = TwoPoint(epsilon=1.0, center=torch.tensor([[0.0], [5.0]]), radius=torch.tensor([[1.0], [2.0]]))
    y = layer.privatize(torch.zeros(2, 1000), generator(0))
    a = layer.a
    assert y[0].unique().tolist() == pytest.approx([-a, a], rel=1e-6)
    assert y[1].unique().tolist() == pytest.approx([5 - 2 * a, 5 + 2 * a], rel=1e-6)


# ---- exact / Monte-Carlo LDP audits -------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 3.0, 8.0])
def test_exact_ldp_discrete(eps):
    rr = exact_ldp_audit(RandomizedResponse(epsilon=eps), [0.0, 1.0])
    tp = exact_ldp_audit(TwoPoint(epsilon=eps, center=0.2, radius=1.5), torch.linspace(-1.5, 2.0, 29))
    for res in (rr, tp):
        assert res.passed
        assert res.ratio_max <= math.exp(eps) * (1 + 1e-9)
        assert res.epsilon_observed == pytest.approx(eps, abs=1e-9)
    # the grid laws: their designed law is exactly eps_d-LDP (eps_d <= eps), attained at the range ends
    for mech in (Laplace(epsilon=eps, center=0.2, radius=1.5), Piecewise(epsilon=eps), Hybrid(epsilon=eps)):
        res = exact_ldp_audit(mech, mech.center + mech.radius * torch.linspace(-1.2, 1.2, 25))
        assert res.passed and res.epsilon_observed <= mech.design.epsilon_design * (1 + 1e-9)
        assert res.epsilon_observed > 0.5 * eps


@pytest.mark.parametrize(
    "mech",
    [Laplace(epsilon=1.0), Piecewise(epsilon=1.0), Piecewise(epsilon=3.0, center=1.0, radius=0.5), Hybrid(epsilon=2.0)],
    ids=["laplace", "pm", "pm-eps3-c1r0.5", "hybrid"],
)
def test_monte_carlo_ldp_continuous(mech):
    c = mech.center
    r = mech.radius
    res = monte_carlo_audit(mech, c - r, c + r, n_samples=200_000, bins=40, generator=generator(11))
    assert res.passed, res
    exact = res.details["exact"]
    assert exact.passed and exact.epsilon_observed <= mech.epsilon + 1e-9
    # the audit is not vacuous: on these bins the exact binned loss is a sizeable part of ε
    assert exact.epsilon_observed > 0.5 * mech.epsilon


# ---- output distribution vs exact law -----------------------------------------------------------
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_discrete_output_distribution(eps):
    for mech, x_row in [
        (RandomizedResponse(epsilon=eps), torch.tensor([0.0, 1.0])),
        (TwoPoint(epsilon=eps, center=-1.0, radius=3.0), -1.0 + 3.0 * GRID),
    ]:
        y = draw(mech, x_row, N, 21, dtype=torch.float64)
        values, probs = mech.output_distribution(x_row)
        for j in range(x_row.numel()):
            counts = torch.stack([(y[:, j] == values[j, k]).sum() for k in range(2)])
            assert int(counts.sum()) == N  # only the two values occur, bit-exactly (float64)
            ok, z = frequencies_match(counts, probs[j])
            assert ok, (type(mech).__name__, j, z)


GRID_LAWS = [Laplace(epsilon=1.0, center=1.0, radius=2.0), Laplace(epsilon=0.2), Piecewise(epsilon=1.0),
             Piecewise(epsilon=4.0, center=-2.0, radius=0.5), Hybrid(epsilon=2.0, center=0.5, radius=2.0), Hybrid(epsilon=5.0)]


@pytest.mark.parametrize("mech", GRID_LAWS, ids=["laplace", "laplace-eps0.2", "pm", "pm-eps4", "hybrid", "hybrid-eps5"])
def test_grid_law_matches_samples(mech):
    """Every report is one of the law's values (bit for bit in float64), with the law's frequencies."""
    c, r = mech.center, mech.radius
    for x in (c - r, c + 0.3 * r, c + r, c + 1.5 * r):
        values, probs = mech.output_distribution(torch.tensor(x, dtype=torch.float64))
        assert float(probs.sum()) == pytest.approx(1.0, abs=1e-12) and bool((probs > 0).all())
        assert float((values * probs).sum()) == pytest.approx(float(mech.clip(torch.tensor(x, dtype=torch.float64))), abs=1e-12)  # unbiased
        y = mech.privatize(torch.full((N,), x, dtype=torch.float64), generator(31, type(mech).__name__, str(x)))
        uniq, inv = torch.unique(values, return_inverse=True)  # equal values (Hybrid's atoms on the grid) merged
        p = torch.zeros(uniq.numel(), dtype=torch.float64).scatter_add_(0, inv, probs)
        pos = torch.searchsorted(uniq, y)
        assert bool((pos < uniq.numel()).all()) and torch.equal(uniq[pos.clamp(max=uniq.numel() - 1)], y)
        counts = torch.bincount(pos, minlength=uniq.numel())
        ok, z = frequencies_match(counts, p)
        assert ok, (x, z)


def test_piecewise_support():
    pm = Piecewise(epsilon=0.7, center=1.0, radius=3.0)
    x = torch.linspace(-4, 6, 1_000_001)
    y = pm.privatize(x, generator(2)).double()
    lo, hi = pm.support(torch.tensor(0.0))
    tol = 1e-5 * (abs(float(lo)) + abs(float(hi)))
    assert float(y.min()) >= float(lo) - tol and float(y.max()) <= float(hi) + tol


@pytest.mark.parametrize("eps", [2.0, 5.0])
def test_hybrid_mixes_duchi_and_the_grid_piecewise_law(eps):
    h = Hybrid(epsilon=eps, center=0.5, radius=2.0)
    eps_d = h.design.epsilon_design
    assert eps_d <= eps and h.beta == pytest.approx(1 - math.exp(-eps_d / 2))
    x = torch.tensor([-1.5, 0.5, 1.1, 2.5], dtype=torch.float64)
    values, probs = h.output_distribution(x)
    duchi = TwoPoint(epsilon=eps_d, center=0.5, radius=2.0)
    dv, dp = duchi.output_distribution(x)
    assert torch.allclose(values[..., :2], dv) and torch.allclose(probs[..., :2], (1 - h.beta) * dp, atol=1e-15)
    pm = h.law.pm  # the grid Piecewise law of the same design
    assert torch.allclose(probs[..., 2:], h.beta * pm.probs((h.clip(x) - 0.5) / 2.0), atol=1e-15)


def test_hybrid_small_epsilon_is_duchi():
    """Below ε* the hybrid is Duchi's mechanism alone, at the design ε_d: two outputs ±a_d with its probabilities."""
    h = Hybrid(epsilon=0.6)
    t = TwoPoint(epsilon=h.design.epsilon_design)
    assert h.beta == 0.0 and h.law.size == 2
    x = torch.linspace(-1, 1, 11, dtype=torch.float64)
    hv, hp = h.output_distribution(x)
    tv, tp = t.output_distribution(x)
    assert torch.allclose(hv, tv) and torch.allclose(hp, tp, atol=1e-15)
    assert torch.allclose(h.variance(x), t.variance(x))
    y = h.privatize(torch.linspace(-1, 1, 100_000), generator(8))
    assert set(y.unique().tolist()) == {float(torch.tensor(v).float()) for v in tv[0].tolist()}


def test_closed_forms():
    eps = 1.3
    t = TwoPoint(epsilon=eps, center=1.0, radius=2.0)
    a = (math.exp(eps) + 1) / (math.exp(eps) - 1)
    assert t.a == pytest.approx(a)
    assert t.variance_bound() == pytest.approx(4 * a * a)
    x = torch.tensor([-1.0, 0.0, 1.0, 3.0])
    assert torch.all(t.variance(x) <= t.variance_bound() + 1e-12)
    assert torch.allclose(t.prob_plus(x), ((x.double() - 1) * (math.exp(eps) - 1) + 2 * (math.exp(eps) + 1)) / (4 * (math.exp(eps) + 1)))
    lap = Laplace(epsilon=eps, radius=3.0)
    assert lap.scale == pytest.approx(6 / eps)
    assert torch.allclose(lap.ideal_variance(x), torch.full((4,), 2 * (6 / eps) ** 2, dtype=torch.float64))
    pm = Piecewise(epsilon=eps)
    e2 = math.exp(eps / 2)
    assert pm.C == pytest.approx((e2 + 1) / (e2 - 1))
    tt = torch.tensor([0.0, 0.5, 1.0])
    assert torch.allclose(pm.ideal_variance(tt), tt.double() ** 2 / (e2 - 1) + (e2 + 3) / (3 * (e2 - 1) ** 2))
    lo, hi = pm.interval(tt)
    assert torch.allclose(hi - lo, torch.full((3,), pm.C - 1, dtype=torch.float64))
    assert pm.p_high / pm.p_low == pytest.approx(math.exp(eps))


def test_guarantee():
    g = TwoPoint(epsilon=1.0).guarantee
    assert g == Guarantee(epsilon=1.0, delta=0.0)
    assert str(g) == "ε = 1 (δ = 0) per coordinate per round"
    with pytest.raises(Exception):
        g.epsilon = 2.0  # frozen


# ---- the checks can fail ------------------------------------------------------------------------
def test_checks_catch_a_skewed_two_point():
    eps = 1.0
    bad = SkewedTwoPoint(epsilon=eps)
    good = TwoPoint(epsilon=eps)
    x_row = torch.tensor([-1.0, 0.0, 0.5, 1.0])
    y = draw(bad, x_row, N, 51)
    ok, z = mean_within_se(y, good.mean(x_row), good.variance(x_row))
    assert not ok and z.abs().min() > 4
    audit = exact_ldp_audit(bad, torch.linspace(-1, 1, 21))
    assert not audit.passed and audit.epsilon_observed > eps + 0.05
    # its samples do not follow the honest output distribution either
    values, probs = good.output_distribution(x_row)
    counts = torch.stack([(y[:, 1] == values[1, k].float()).sum() for k in range(2)])
    assert not frequencies_match(counts, probs[1])[0]
    # ... while the honest mechanism passes the same checks on the same grid
    y = draw(good, x_row, N, 51)
    assert mean_within_se(y, good.mean(x_row), good.variance(x_row))[0]
    assert exact_ldp_audit(good, torch.linspace(-1, 1, 21)).passed


def test_checks_catch_a_wrong_variance():
    bad = NarrowLaplace(epsilon=1.0, shrink=0.8)
    x_row = torch.tensor([-1.0, 0.0, 1.0])
    y = draw(bad, x_row, N, 52)
    ok, rel = variance_within(y, bad.variance(x_row))
    assert not ok and float(rel.max()) < -0.3  # 0.8² - 1 = -0.36
    assert mean_within_se(y, bad.mean(x_row), bad.variance(x_row))[0]  # the mean alone cannot see it
    res = monte_carlo_audit(NarrowLaplace(epsilon=1.0, shrink=0.5), -1.0, 1.0, n_samples=200_000, bins=40, generator=generator(53))
    assert not res.passed and res.epsilon_observed > 1.5


def test_checks_catch_a_wrong_law():
    """A Piecewise that samples at 2ε while claiming ε: its reports do not follow the claimed law, and the
    Monte-Carlo audit sees a loss above ε."""
    bad = WrongEpsPiecewise(epsilon=1.0)
    x = 0.4
    values, probs = bad.output_distribution(torch.tensor(x, dtype=torch.float64))
    y = bad.privatize(torch.full((N,), x, dtype=torch.float64), generator(54))
    on_law = torch.isin(y, values)
    counts = torch.cat([torch.stack([(y == v).sum() for v in values]), (~on_law).sum()[None]]).double()
    assert not frequencies_match(counts, torch.cat([probs, torch.zeros(1, dtype=torch.float64)]))[0]
    res = monte_carlo_audit(bad, -1.0, 1.0, n_samples=200_000, bins=40, generator=generator(55))
    assert not res.passed


# ---- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize("eps", [0, 0.0, -1, -1.0, float("nan"), float("inf"), -float("inf"), True, "1", None])
def test_bad_epsilon(name, eps):
    with pytest.raises(ValueError, match="epsilon"):
        build(name, eps)


@pytest.mark.parametrize("cls", RANGED)
def test_bad_range(cls):
    for radius in (0, 0.0, -1.0, float("nan"), float("inf"), torch.tensor([1.0, 0.0]), torch.tensor([])):
        with pytest.raises(ValueError, match="radius"):
            cls(epsilon=1.0, radius=radius)
    for center in (float("nan"), float("inf"), torch.tensor([0.0, float("nan")]), "a"):
        with pytest.raises(ValueError, match="center"):
            cls(epsilon=1.0, center=center)
    with pytest.raises(TypeError):
        cls(1.0)  # keyword-only


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_bad_x(name):
    mech = build(name, 1.0)
    for bad in (float("nan"), float("inf"), -float("inf")):
        for n in (5, 100_000):
            x = torch.zeros(n)
            x[n // 2] = bad
            with pytest.raises(ValueError, match="x"):
                mech.privatize(x, generator(0))


def test_the_finite_check_is_exact_when_the_sum_overflows_or_infinities_cancel():
    """The fast path (a finite sum) must not hide +inf and -inf together (their sum is NaN) and must not
    reject finite values whose sum overflows."""
    from ldptut.mechanisms.base import _check_finite

    both = torch.zeros(1000)
    both[3], both[7] = float("inf"), -float("inf")
    with pytest.raises(ValueError, match="NaN or inf"):
        _check_finite(both)
    _check_finite(torch.full((10,), 3e38))                          # float32 sum overflows; all finite
    _check_finite(torch.full((10,), 6e4, dtype=torch.float16))      # summed in float32
    _check_finite(torch.full((10,), 1.7e308, dtype=torch.float64))  # float64 sum overflows
    with pytest.raises(ValueError, match="NaN or inf"):
        _check_finite(torch.tensor([1.0, float("nan")], dtype=torch.bfloat16))


def test_randomized_response_rejects_non_bits():
    rr = RandomizedResponse(epsilon=1.0)
    for v in (0.5, 2.0, -1.0, 1e-30):
        x = torch.zeros(100_000)
        x[-1] = v
        with pytest.raises(ValueError, match="x must contain only 0 and 1"):
            rr.privatize(x)
    with pytest.raises(ValueError, match="x"):
        rr.privatize(torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="x"):
        rr.output_distribution(torch.tensor([0.5]))


def test_unknown_mechanism_name():
    with pytest.raises(ValueError, match="unknown mechanism.*gaussian.*hybrid.*laplace.*ldpsign.*piecewise.*randomized_response.*two_point"):
        make_mechanism("exponential", epsilon=1.0)
    assert isinstance(make_mechanism("Two-Point", epsilon=1.0), TwoPoint)


def test_non_tensor_x():
    with pytest.raises(TypeError):
        TwoPoint(epsilon=1.0).privatize([0.1, 0.2])


# --------------------------------------------------------------------------------------------------
# large epsilon and low-precision dtypes (robustness defects of the architecture issue)
# --------------------------------------------------------------------------------------------------
LARGE_EPS = [20.0, 35.0, 100.0, 700.0, 710.0, 1000.0]


@pytest.mark.parametrize("cls", [TwoPoint, Piecewise, Hybrid])
@pytest.mark.parametrize("eps", LARGE_EPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_epsilon_reports_stay_unbiased_and_inside_the_support(cls, eps, dtype):
    """Before the fix Piecewise(ε=35) on zeros averaged -0.72, pinned to c - rC from ε ≈ 40 and gave NaN
    at ε = 700; TwoPoint(ε=710) raised OverflowError. Tolerance: 4 standard errors (closed-form variance)
    plus 8 ulps of the output scale, for the rounding of the input itself in float32."""
    mech = cls(epsilon=eps, center=0.5, radius=2.0)
    n = 100_000
    for w in (-1.5, 0.0, 0.5, 1.7, 2.5):  # 2.5 is clipped to 2.5
        x = torch.full((n,), w, dtype=dtype)
        y = mech.privatize(x, generator(3, "large-eps", cls.__name__, str(eps), str(w)))
        assert bool(torch.isfinite(y).all())
        w64 = torch.tensor(w, dtype=torch.float64)
        lo, hi = mech.support(w64) if hasattr(mech, "support") else mech.output_values(w64)
        slack = 4 * torch.finfo(dtype).eps * 3.0
        assert float(y.min()) >= float(lo) - slack and float(y.max()) <= float(hi) + slack
        target = float(mech.clip(w64))
        se = math.sqrt(float(mech.variance(w64)) / n)
        assert abs(float(y.double().mean()) - target) <= 4 * se + 8 * torch.finfo(dtype).eps * 3.0, (w, se)


@pytest.mark.parametrize("eps", LARGE_EPS)
def test_large_epsilon_closed_forms_are_finite(eps):
    for mech in (TwoPoint(epsilon=eps), Piecewise(epsilon=eps), Hybrid(epsilon=eps)):
        x = torch.linspace(-1, 1, 5, dtype=torch.float64)
        assert bool(torch.isfinite(mech.variance(x)).all())
        assert bool((mech.variance(x) >= 0).all())
    pm = Piecewise(epsilon=eps)
    y = torch.linspace(-1.5, 1.5, 31, dtype=torch.float64)
    cdf = pm.cdf(y, torch.tensor(0.25, dtype=torch.float64))
    assert bool(torch.isfinite(cdf).all()) and bool((cdf[1:] >= cdf[:-1]).all())
    assert float(cdf[0]) == 0.0 and abs(float(cdf[-1]) - 1.0) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reports_the_input_dtype_cannot_hold_raise(dtype):
    """TwoPoint(ε=0.001, r=100) reports ±2e5: float16 used to return inf silently."""
    mech = TwoPoint(epsilon=0.001, radius=100.0)
    x = torch.zeros(10, dtype=dtype)
    if dtype == torch.float16:
        with pytest.raises(ValueError, match="cannot represent.*float32 or float64"):
            mech.privatize(x, generator(0))
    else:  # bfloat16 has float32's range, but rounds ±2.0003e5 (a bias): refused for that
        with pytest.raises(ValueError, match="rounds to"):
            mech.privatize(x, generator(0))
    with pytest.raises(ValueError, match="cannot represent"):
        Laplace(epsilon=0.01, radius=1000.0).privatize(torch.zeros(1000, dtype=torch.float16), generator(0))


def test_reports_beyond_the_dtypes_range_and_a_tiny_sigma_name_their_cause():
    """eps = 1e-39 makes a = (e^eps + 1)/(e^eps - 1) = 2e39 (float32 reports used to be NaN); radius 1e38 overflows
    the two-point reports; Gaussian.with_sigma(sigma=1e-300) used to say 'epsilon must be finite'."""
    with pytest.raises(ValueError, match=r"beyond the range of torch.float32 \(reports are c ± r a with a = .* = 2e\+39 at "
                                         r"epsilon=1e-39\)"):
        TwoPoint(epsilon=1e-39).privatize(torch.zeros(4), generator(0))
    assert bool(torch.isfinite(TwoPoint(epsilon=1e-39).privatize(torch.zeros(4, dtype=torch.float64), generator(0))).all())
    with pytest.raises(ValueError, match="beyond the range of torch.float32"):
        TwoPoint(epsilon=1.0, radius=1e38).privatize(torch.zeros(4), generator(0))
    with pytest.raises(ValueError, match=r"range \[center - radius, center \+ radius\] = \[-1e\+39, 1e\+39\].*exceeds torch.float32"):
        Laplace(epsilon=1.0, radius=1e39).privatize(torch.zeros(4), generator(0))
    with pytest.raises(ValueError, match="beyond the range of torch.float32"):  # the range fits, its collapsed tails not
        Laplace(epsilon=0.5, radius=1e38).privatize(torch.zeros(4), generator(0))
    from ldptut.mechanisms import Gaussian

    with pytest.raises(ValueError, match=r"sigma=1e-300 is too small for radius=1.0.*give a larger sigma"):
        Gaussian.with_sigma(sigma=1e-300, delta=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_reports_the_dtype_would_round_are_refused(dtype):
    """bfloat16 turned the two-point reports ±2.16395 into ±2.15625: biased (z = -5 at 1e7 draws)."""
    with pytest.raises(ValueError, match=r"reports -?2.16395, which .* rounds to"):
        TwoPoint(epsilon=1.0).privatize(torch.zeros(100, dtype=dtype), generator(0))
    from ldptut.mechanisms import CorrelatedTwoPoint

    with pytest.raises(ValueError, match="rounds to"):
        CorrelatedTwoPoint(epsilon=1.0).privatize_pairs(torch.zeros(4, dtype=dtype), torch.zeros(4, dtype=dtype))
    with pytest.raises(ValueError, match="rounds to"):
        Hybrid(epsilon=2.0).privatize(torch.zeros(100, dtype=dtype), generator(0))
    y = TwoPoint(epsilon=math.log(2.0)).privatize(torch.zeros(1000, dtype=dtype), generator(0))  # a = 3: ±3 exact
    assert set(y.float().unique().tolist()) == {-3.0, 3.0}
