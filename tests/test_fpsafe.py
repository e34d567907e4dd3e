"""The floating-point-safe samplers (ldptut.fpsafe, the grid laws of Laplace, Piecewise and Hybrid).

The privacy check is exhaustive: every one of the 2^24 uniforms the sampler can draw is run through ``privatize``
(float32 inputs, as the FL engine sends them) for two inputs at the ends of the range, and the two exact output
laws are compared (the method of Mironov, CCS 2012, made exhaustive: ``ldptut.attacks.floating_point_attack``).
The same check fails on the textbook float samplers. The closed forms are checked against a 50-digit computation
(the cumulatives), against brute force (the index search) and against their bounds (the variance)."""
from __future__ import annotations

import functools
import math

import pytest
import torch

from ldptut import fpsafe
from ldptut.attacks import floating_point_attack, textbook_hybrid, textbook_laplace, textbook_piecewise
from ldptut.audits import grid_sampling_cost
from ldptut.mechanisms import Hybrid, Laplace, Piecewise
from ldptut.rng import generator

GRID_MECHANISMS = [Laplace, Piecewise, Hybrid]
C, R = 0.3, 1.7  # a range that is not the unit one: reports are c + r v in float64, rounded to float32


def _through_privatize(mech, monkeypatch):
    """sampler(w, u) = mech.privatize(w) with the uniforms u (the real path: clip, t, index, values, dtype)."""
    def sampler(w, u):
        monkeypatch.setattr(fpsafe, "uniforms", lambda shape, generator, device: u.reshape(shape))
        return mech.privatize(w, generator=None)
    return sampler


@pytest.mark.parametrize("eps", [pytest.param(0.1, marks=pytest.mark.slow), 1.0,
                                 pytest.param(5.0, marks=pytest.mark.slow)])  # 5-13 s each: ε = 1 in make test
@pytest.mark.parametrize("cls", GRID_MECHANISMS)
def test_float32_enumeration_every_report_is_possible_under_both_inputs_and_the_ratio_holds(cls, eps, monkeypatch):
    mech = cls(epsilon=eps, center=C, radius=R)
    res = floating_point_attack(_through_privatize(mech, monkeypatch), C - R, C + R)
    assert res.ruled_out == 0.0, res          # the textbook samplers: 0.3 to 0.9 of the reports (below)
    assert res.ratio_max <= math.exp(eps), res  # exact: counts of uniforms, no tolerance
    assert res.epsilon_observed <= eps and res.epsilon_observed > 0.9 * eps * (eps > 0.5)  # attained at the ends
    assert res.outputs == torch.unique(mech.output_distribution(torch.tensor(C - R))[0].float()).numel()


@pytest.mark.parametrize("cls", GRID_MECHANISMS)
def test_float32_enumeration_counts_equal_the_realised_law(cls, monkeypatch):
    """The sampler realises exactly the law :meth:`realized_distribution` computes (counts of the 2^24 uniforms)."""
    mech = cls(epsilon=1.0, center=C, radius=R)
    x = C + 0.37 * R
    u = torch.arange(1 << 24, dtype=torch.float64).mul_(2.0 ** -24)
    y = _through_privatize(mech, monkeypatch)(torch.full((1 << 24,), x, dtype=torch.float32), u)
    values, counts = torch.unique(y, return_counts=True)
    v, p = mech.realized_distribution(torch.tensor(x, dtype=torch.float32).double())
    uv, inv = torch.unique(v.float(), return_inverse=True)
    expected = torch.zeros(uv.numel(), dtype=torch.float64).scatter_add_(0, inv, p) * (1 << 24)
    assert torch.equal(uv, values) and torch.equal(expected.round().long(), counts)
    assert torch.equal(expected, expected.round())  # whole counts


def test_the_enumeration_catches_the_textbook_samplers():
    """The same check on the textbook float sampler of Laplace fails: 0.795 of the reports of x = 0 are impossible
    under x' = 1 at eps = 1 (measured 2026-11-27, with PM's 0.644 and HM's 0.314: textbook_piecewise and
    textbook_hybrid, 10-15 s each, are left to the foundations chapter)."""
    res = floating_point_attack(functools.partial(textbook_laplace, epsilon=1.0), 0.0, 1.0)
    assert res.ruled_out > 0.5 and math.isinf(res.epsilon_observed), res
    assert callable(textbook_piecewise) and callable(textbook_hybrid)


EPSILONS = [0.02, 0.1, 0.3, 1.0, 3.0, 5.0, 8.0, 10.0, 15.0, 30.0, 1000.0]


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("cls", GRID_MECHANISMS)
def test_every_output_meets_the_floor_at_every_input(cls, eps):
    """On a dense grid of inputs: every designed probability is above the floor, every realised one positive, and
    the realised ratio of every output between any two inputs within e^eps (exact counts)."""
    mech = cls(epsilon=eps)
    t = torch.linspace(-1.0, 1.0, 801, dtype=torch.float64)
    _, p = mech.output_distribution(t)
    assert float(p.min()) >= mech.design.floor
    _, q = mech.realized_distribution(t)
    assert bool((q > 0).all())
    assert float((q.max(0).values / q.min(0).values).max()) <= math.exp(min(eps, 700.0))
    # unbiased up to the realised probabilities' slack
    v = mech.law.values
    mean = (q * v).sum(-1)
    assert bool(((mean - t).abs() <= fpsafe.SLACK * (v - t[:, None]).abs().sum(-1)).all())


def test_the_floor_formula():
    eps, eps_d = 1.0, 0.99
    floor = fpsafe.floor_probability(eps, eps_d)
    assert floor == pytest.approx(fpsafe.SLACK * (math.e + 1) / (math.e - math.exp(eps_d)), rel=1e-12)
    # at the floor, the worst realised ratio is exactly e^eps
    assert (math.exp(eps_d) * floor + fpsafe.SLACK) / (floor - fpsafe.SLACK) == pytest.approx(math.e, rel=1e-12)
    with pytest.raises(ValueError, match="design epsilon"):
        fpsafe.floor_probability(1.0, 1.0)


@pytest.mark.parametrize("cls", GRID_MECHANISMS)
@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0, 20.0])
def test_index_is_the_inverse_cdf_of_the_computed_cumulatives(cls, eps):
    law = cls(epsilon=eps).law
    g = torch.Generator().manual_seed(0)
    n = 3000
    t = torch.cat([torch.tensor([-1.0, 1.0, 0.0]), torch.rand(n - 3, generator=g, dtype=torch.float64) * 2 - 1])
    u = torch.randint(0, 1 << 24, (n,), generator=g).double() * 2.0 ** -24
    u[:6] = torch.tensor([0.0, 0.0, 0.0, 1 - 2.0 ** -24, 1 - 2.0 ** -24, 0.5], dtype=torch.float64)
    F = law.cum_all(t)
    # values of u on the cumulatives themselves (rounded up to the grid): the edges of the inverse CDF
    k = torch.randint(0, law.size, (n // 3,), generator=g)
    u[-(n // 3):] = (torch.ceil(F[-(n // 3):].gather(1, k[:, None])[:, 0] * 2 ** 24) * 2.0 ** -24).clamp(max=1 - 2.0 ** -24)
    brute = torch.searchsorted(F, u[:, None], right=True)[:, 0]
    assert torch.equal(law.index(u, t), brute)


def _mp_cell_mean(cdf, a, b, kinks):
    """The mean of cdf over [a, b], integrated piece by piece between its kinks (at 50 digits)."""
    import mpmath

    points = [a] + sorted(k for k in kinks if a < k < b) + [b]
    return mpmath.quad(cdf, points) / (b - a)


@pytest.mark.parametrize("eps", [0.3, 2.0, 8.0])
def test_cumulatives_match_a_50_digit_computation(eps):
    """Each cumulative is the mean of the continuous CDF over a cell, in float64: checked against mpmath at 50
    digits, far inside the bound fpsafe.CUM_ERROR the guarantee assumes."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    for mech in (Laplace(epsilon=eps), Piecewise(epsilon=eps)):
        law = mech.law
        for t in (-1.0, -0.3, 0.0, 0.71, 1.0):
            tt = mpmath.mpf(t)
            F = law.cum_all(torch.tensor(t, dtype=torch.float64))
            cells = sorted({1, 2, law.size // 3, law.size // 2, law.size - 3})
            for k in cells:
                if isinstance(mech, Laplace):
                    b = mpmath.mpf(2) / mpmath.mpf(law.epsilon_design)
                    g = mpmath.mpf(2) / law.cells
                    cdf = lambda y: mpmath.exp((y - tt) / b) / 2 if y < tt else 1 - mpmath.exp(-(y - tt) / b) / 2  # noqa: E731
                    lo = -1 + (k - 1) * g
                    kinks = [tt]
                else:
                    e2 = mpmath.exp(mpmath.mpf(law.epsilon_design) / 2)
                    Cm = (e2 + 1) / (e2 - 1)
                    p_hi, p_lo = e2 * (e2 - 1) / (2 * (e2 + 1)), (e2 - 1) / (2 * (e2 + 1) * e2)
                    l = (Cm + 1) / 2 * tt - (Cm - 1) / 2
                    cdf = lambda y: (p_lo * (y + Cm) + (p_hi - p_lo) * min(max(y - l, 0), Cm - 1))  # noqa: E731
                    g = 2 * Cm / law.cells
                    lo = -Cm + k * g
                    kinks = [l, l + Cm - 1]
                exact = _mp_cell_mean(cdf, lo, lo + g, kinks)
                assert abs(float(F[k]) - float(exact)) <= 1e-14, (type(mech).__name__, t, k)


@pytest.mark.parametrize("cls", GRID_MECHANISMS)
@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0, 10.0, 30.0])
def test_variance_lies_between_its_closed_form_bounds(cls, eps):
    mech = cls(epsilon=eps, center=C, radius=R)
    x = C + R * torch.linspace(-1.0, 1.0, 101, dtype=torch.float64)
    v = mech.variance(x)
    lo, hi = mech.variance_bounds(x)
    assert bool((v >= lo * (1 - 1e-12)).all() and (v <= hi * (1 + 1e-12)).all())


def test_the_cost_of_sampling_safely():
    """The grid law's variance against the textbook mechanism's (closed forms): PM and HM within 0.5 % up to
    eps = 5 (1.3 % at 8); Laplace below the textbook variance up to eps = 8, because its tails beyond the range
    are collapsed onto their means (an unbiased change that removes b² times their mass); at large eps the floor
    forces a coarse law (Laplace at eps = 20 about twice the textbook variance)."""
    t = grid_sampling_cost([0.1, 1.0, 5.0, 8.0, 20.0]).set_index(["mechanism", "epsilon"])
    ratio = t[["variance ratio (t = 0)", "variance ratio (t = ±1)"]].max(axis=1)
    for mech in ("Piecewise", "Hybrid"):
        assert (ratio[mech].loc[[0.1, 1.0, 5.0]] <= 1.005).all() and ratio[mech].loc[8.0] <= 1.015
        assert (ratio[mech] >= 1.0).all()  # never less noise than the ideal mechanism at eps
    assert (ratio["Laplace"].loc[[0.1, 1.0, 5.0, 8.0]] < 1.0).all() and ratio["Laplace"].loc[20.0] > 1.5
    assert (t["min probability"] >= t["floor"]).all() and (t["epsilon_design"] <= t.index.get_level_values(1)).all()


def test_uniforms_are_on_the_grid_and_seeded():
    u = fpsafe.uniforms((1000, 100), generator(0, "u"), "cpu")
    assert u.dtype == torch.float64 and float(u.min()) >= 0 and float(u.max()) <= 1 - 2.0 ** -24
    assert torch.equal(u * 2 ** 24, torch.floor(u * 2 ** 24))
    assert torch.equal(u, fpsafe.uniforms((1000, 100), generator(0, "u"), "cpu"))
    assert abs(float(u.mean()) - 0.5) < 4 * math.sqrt(1 / 12 / u.numel())


@pytest.mark.parametrize("cls", GRID_MECHANISMS)
def test_float32_and_float64_inputs_draw_the_same_reports(cls):
    """The law and the uniforms do not depend on the input's dtype: for inputs a float32 holds exactly, the float32
    reports are the float64 reports rounded to float32."""
    mech = cls(epsilon=2.0, center=C, radius=R)
    x = torch.linspace(-2.0, 2.5, 10_001).float()
    y32 = mech.privatize(x, generator(1, "dtype"))
    y64 = mech.privatize(x.double(), generator(1, "dtype"))
    assert torch.equal(y32, y64.float())


def test_an_epsilon_too_small_for_the_uniforms_is_refused_with_its_name():
    for cls in GRID_MECHANISMS:
        with pytest.raises(ValueError, match=r"epsilon=1e-09 is too small"):
            cls(epsilon=1e-9)
    assert Laplace(epsilon=0.01).design.epsilon_design <= 0.01  # still possible: a coarse law


def test_the_float_noise_lower_bound_and_the_gaussian_it_measures():
    """unreachable_by_float_noise: a report no float noise value could turn x' into. On the textbook Laplace sampler it
    finds a share below the exhaustive one (0.795 at eps = 1) but far above zero; on the textbook Gaussian (float
    noise added to the input, what the package drew before its grid law) at least 5 % at (eps, delta) = (1, 1e-5),
    where delta = 1e-5 bounds the probability of any such certain distinction."""
    from ldptut.attacks import unreachable_by_float_noise
    from ldptut.mechanisms import Gaussian

    u = torch.arange(0, 1 << 24, 16, dtype=torch.float64) * 2.0 ** -24
    share = float(unreachable_by_float_noise(textbook_laplace(torch.zeros(u.numel()), u, epsilon=1.0), 1.0).double().mean())
    assert 0.2 < share <= 0.7953
    sigma = Gaussian(epsilon=1.0, delta=1e-5).sigma
    y = torch.zeros(1_000_000) + sigma * torch.randn(1_000_000, generator=generator(0, "gauss"))  # the textbook sampler
    assert float(unreachable_by_float_noise(y, 1.0).double().mean()) > 0.05
    exact = torch.tensor([1.0 + 2.0 ** -23, 0.25], dtype=torch.float32)  # 1 + one float32 step: reachable from 1
    assert unreachable_by_float_noise(exact, 1.0).tolist() == [False, False]
    assert unreachable_by_float_noise(torch.tensor([1e-9], dtype=torch.float32), 1.0).tolist() == [True]


# ---- the Gaussian: an (epsilon, delta) grid law with 2^-53-step uniforms ------------------------------------------
def _gaussians():
    from ldptut.mechanisms import Gaussian

    return [Gaussian(epsilon=e, delta=1e-5, center=C, radius=R) for e in (0.1, 1.0, 5.0)] + [
        Gaussian.with_sigma(sigma=117.0, delta=2e-3, radius=200.0)]  # a paper's digits setting (eps_i = 1)


def test_gaussian_cumulatives_match_a_50_digit_computation():
    """F_k and G_k = 1 - F_k of the Gaussian grid law against mpmath, 10 times inside the bound the guarantee uses."""
    mpmath = pytest.importorskip("mpmath")
    from ldptut.mechanisms.gaussian import _GaussianGrid

    mpmath.mp.dps = 50
    psi = lambda z: z * mpmath.ncdf(z) + mpmath.npdf(z)  # noqa: E731
    worst = 0.0
    for s in (0.01, 0.0769, 1.0, 7.46, 500.0):
        law = _GaussianGrid(s, 1 << 16)
        n = law.cells
        ks = sorted(set(range(0, n, max(1, n // 60))) | {0, 1, n // 2, n - 2, n - 1})
        for t in (-1.0, 0.3, 1.0):
            k = torch.tensor(ks)
            F, G = law._lower_upper(k, (torch.full((len(ks),), t, dtype=torch.float64),))
            sm, gm, Lm = mpmath.mpf(law.s), mpmath.mpf(law.g), mpmath.mpf(law.L)
            for i, kk in enumerate(ks):
                a = (kk * gm - Lm - t) / sm
                exact_F = (sm / gm) * (psi(a + gm / sm) - psi(a))
                exact_G = (sm / gm) * (psi(-a) - psi(-a - gm / sm))
                err = max(abs(float(F[i]) - float(exact_F)), abs(float(G[i]) - float(exact_G)))
                assert err <= law.cum_error / 10, (s, t, kk, err, law.cum_error)
                worst = max(worst, err / law.cum_error)
    assert worst > 0  # the comparison saw float error at all


def _boundary_uniforms(law, t):
    """Every J at, just below and just above each realised cell boundary (both halves), plus random J."""
    k = torch.arange(law.size)
    F, G = law._lower_upper(k, (torch.full((law.size,), t, dtype=torch.float64),))
    full = 2.0 ** 53
    b = torch.cat([torch.ceil(F * full), full - torch.floor(G * full)])
    J = torch.cat([b - 1, b, b + 1, torch.randint(0, 1 << 53, (5000,), generator=generator(0, "J"), dtype=torch.int64).double(),
                   torch.tensor([0.0, 2.0 ** 52 - 1, 2.0 ** 52, full - 1])])
    J = torch.unique(J[(J >= 0) & (J < full)])
    u = J * 2.0 ** -53
    # the rule the realised law states: u < 1/2 by F, u >= 1/2 by G
    ref = torch.where(u < 0.5, torch.searchsorted(F, u, right=True), torch.searchsorted(-G, u - 1.0, right=True))
    return u, ref


@pytest.mark.parametrize("which", range(4))
def test_gaussian_sampler_draws_its_realised_law(which, monkeypatch):
    """Through the real privatize path (float32 inputs): the report for each uniform is the value of the index the
    realised law assigns it, at every cell boundary; the realised law is a law (counts of 2^53, summing to one)."""
    mech = _gaussians()[which]
    c, r = mech.center, mech.radius
    for frac in (-1.0, 0.37, 1.0):
        x = torch.tensor(c + frac * r, dtype=torch.float32)
        t = float(((x.double() - c) / r).clamp(-1, 1))
        u, ref = _boundary_uniforms(mech.law, t)
        monkeypatch.setattr(fpsafe, "uniforms", lambda shape, generator, device, bits: u.reshape(shape))
        y = mech.privatize(x.expand(u.numel()).contiguous(), generator=None)
        expected = (mech.law.values[ref] * r + c).float()
        assert torch.equal(y, expected)
        p = mech.law.realized_probs(torch.tensor(t, dtype=torch.float64))
        assert bool((p >= 0).all()) and float(p.sum()) == 1.0
        assert torch.equal(p * 2.0 ** 53, (p * 2.0 ** 53).round())  # whole counts


@pytest.mark.parametrize("which", range(4))
def test_gaussian_realised_law_gives_the_stated_epsilon_delta(which):
    """delta(eps) = sum_k max(0, p̂_k(x) - e^eps p̂_k(x')) of the laws the sampler realises, exactly, for the range's
    ends and an interior pair: within the stated delta at the stated eps."""
    mech = _gaussians()[which]
    g = mech.guarantee
    c, r = mech.center, mech.radius
    for a, b in ((-1.0, 1.0), (1.0, -1.0), (-0.2, 0.9)):
        _, pa = mech.realized_distribution(torch.tensor(c + a * r))
        _, pb = mech.realized_distribution(torch.tensor(c + b * r))
        realised = float(torch.clamp(pa - math.exp(g.epsilon) * pb, min=0.0).sum())
        assert realised <= g.delta, (mech, a, b, realised)
    assert g.tv == mech.tv > 0 and g.mu == pytest.approx(2 * r / mech.sigma)


def test_gaussian_without_a_realisable_guarantee_says_so():
    """A sigma whose ideal epsilon is in the hundreds (the paper's digits at eps_i = 10: mu = 26) has no realised
    guarantee: almost every report of x = c is impossible under x' = -c, so delta is 1 at every finite eps."""
    from ldptut.accounting import gaussian_delta
    from ldptut.mechanisms import Gaussian

    m = Gaussian.with_sigma(sigma=15.2, delta=2e-3, radius=200.0)
    assert math.isinf(m.epsilon) and not m.guarantee.finite
    assert str(m.guarantee) == "no finite ε certified at δ = 0.002 per coordinate per round"
    assert m.ideal_guarantee.epsilon == pytest.approx(421.05, abs=0.1)
    assert gaussian_delta(m.ideal_guarantee.epsilon, m.guarantee.mu) <= 2e-3  # the ideal mechanism's figure
    _, p0 = m.realized_distribution(torch.tensor(-200.0))
    _, p1 = m.realized_distribution(torch.tensor(200.0))
    assert float(p1[p0 == 0].sum()) > 0.999  # reports of 200 that -200 can never give
    assert math.isinf(m.guarantee.compose(d=650).epsilon)
    with pytest.raises(ValueError, match=r"epsilon=12 with delta=1e-05 cannot be realised"):
        Gaussian(epsilon=12, delta=1e-5)


def test_gaussian_cost_against_the_ideal_mechanism():
    """Var = sigma² + at most g² r²/4 (rounding), exact as a finite sum; unbiased for the clipped input."""
    for mech in _gaussians():
        c, r = mech.center, mech.radius
        x = torch.tensor([c - 2 * r, c - r, c, c + 0.4 * r, c + r])
        v, ideal = mech.variance(x), mech.ideal_variance(x)
        lo, hi = mech.variance_bounds(x)
        assert bool((v >= lo * (1 - 1e-12)).all() and (v <= hi * (1 + 1e-12)).all())
        assert bool((v / ideal - 1 <= 1 / 4096 * 1.01).all() and (v / ideal - 1 >= 0).all())
        values, p = mech.output_distribution(x)
        assert torch.allclose((values * p).sum(-1), mech.clip(x), rtol=0, atol=1e-9 * r)


def test_membership_by_binary_search_matches_isin():
    """floating_point_attack's set test (``_in_sorted``, binary search in a sorted unique set) against torch.isin,
    with repeats, values outside the set at both ends, signed zeros and an empty set."""
    from ldptut.attacks import _in_sorted

    g = torch.Generator().manual_seed(3)
    values = torch.cat([torch.randint(-50, 50, (2000,), generator=g).float() / 4,
                        torch.tensor([-0.0, 0.0, -1e30, 1e30, 12.5, -12.5])])
    ref_set = torch.unique(torch.randint(-40, 40, (300,), generator=g).float() / 4)
    for s in (ref_set, torch.tensor([0.0]), torch.tensor([-0.0]), torch.tensor([])):
        assert torch.equal(_in_sorted(values, s), torch.isin(values, s))
