"""Tests for ldptut.accounting: units of epsilon, composition, exact Gaussian calibration, shuffling bound."""
from __future__ import annotations

import math

import pytest
import torch

from ldptut import accounting
from ldptut.accounting import PER_COORDINATE, Guarantee, Unit, compose_sequential, epsilon_table, shuffle_amplification
from ldptut.mechanisms import Gaussian, LdpSign, TwoPoint


# ---- composition --------------------------------------------------------------------------------
def test_compose_sequential():
    assert compose_sequential([0.5, 1.0, 1.5]) == (3.0, 0.0)
    eps, delta = compose_sequential([0.1] * 10, [1e-6] * 10)
    assert eps == pytest.approx(1.0, abs=1e-15) and delta == pytest.approx(1e-5, abs=1e-20)
    assert compose_sequential(torch.tensor([1.0, 2.0])) == (3.0, 0.0)
    assert compose_sequential([0.0, 2.0]) == (2.0, 0.0)  # a 0-DP step is allowed


@pytest.mark.parametrize(
    "args,match",
    [
        (([],), "epsilons"),
        (([1.0, -0.1],), r"epsilons\[1\]"),
        (([1.0, float("nan")],), r"epsilons\[1\]"),
        (([float("inf")],), r"epsilons\[0\]"),
        (([True],), r"epsilons\[0\]"),
        ((1.0,), "epsilons"),
        (([1.0, 1.0], [0.0]), "deltas"),
        (([1.0], [1.5]), r"deltas\[0\]"),
        (([1.0], [-1e-9]), r"deltas\[0\]"),
    ],
)
def test_compose_sequential_validation(args, match):
    with pytest.raises(ValueError, match=match):
        compose_sequential(*args)


def test_epsilon_table():
    t = epsilon_table(0.5, d=1000, rounds=20)
    assert list(t.index) == ["per coordinate", "per model per round", "per model over training"]
    assert list(t["epsilon"]) == [0.5, 500.0, 10_000.0]
    assert list(t["delta"]) == [0.0, 0.0, 0.0]
    assert "unit" in t.columns and "composition" in t.columns
    assert t.loc["per model per round", "unit"] == "per model (d = 1,000 coordinates) per round"
    assert t.loc["per model over training", "unit"] == "per model (d = 1,000 coordinates) over 20 rounds"
    with pytest.raises(ValueError, match="d"):
        epsilon_table(0.5, d=0, rounds=20)
    with pytest.raises(ValueError, match="rounds"):
        epsilon_table(0.5, d=10, rounds=0)
    with pytest.raises(ValueError, match="epsilon"):
        epsilon_table(-0.5, d=10, rounds=1)


# ---- units of epsilon -----------------------------------------------------------------------------
def test_unit_strings_and_composition():
    assert str(PER_COORDINATE) == "per coordinate per round"
    assert str(Unit(coordinates=7)) == "per 7 coordinates per round"
    u = PER_COORDINATE.compose(d=1_199_882)
    assert u == Unit(coordinates=1_199_882, rounds=1, whole_model=True)
    assert str(u.compose(rounds=10)) == "per model (d = 1,199,882 coordinates) over 10 rounds"
    assert str(PER_COORDINATE.compose(rounds=3)) == "per coordinate over 3 rounds"
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="coordinates"):
            Unit(coordinates=bad)


def test_guarantee_compose_is_basic_for_pure_and_exact_for_gaussian():
    g = TwoPoint(epsilon=0.5).guarantee
    assert g == Guarantee(epsilon=0.5) and g.unit == PER_COORDINATE
    assert g.compose(d=1000, rounds=20).epsilon == 10_000.0
    assert str(g.compose(d=1000)) == "ε = 500 (δ = 0) per model (d = 1,000 coordinates) per round"
    # Gaussian: d coordinates of sensitivity Δ and noise σ are one Gaussian mechanism with μ sqrt(d)
    gm = Gaussian(epsilon=1.0, delta=1e-5, radius=1.0).guarantee
    composed = gm.compose(d=5, rounds=2)
    assert composed.mu == pytest.approx(gm.mu * math.sqrt(10))
    assert composed.epsilon == pytest.approx(accounting.gaussian_epsilon(1e-5, gm.mu * math.sqrt(10), gm.tv * 10), rel=1e-12)
    assert composed.tv == pytest.approx(gm.tv * 10) and gm.tv > 0  # the sampler's distance adds up
    assert composed.epsilon < 10 * gm.epsilon  # far below basic composition
    assert composed.epsilon == pytest.approx(accounting.gaussian_epsilon(1e-5, gm.mu * math.sqrt(10)), rel=1e-3)  # the sampler costs little here
    assert composed.delta == 1e-5
    # the limit of the total-variation certificate: 400 reports need eps near 37 ideally, where (1 + e^eps) 400 tv > delta
    assert accounting.gaussian_epsilon(1e-5, gm.mu * 20) < 40 and math.isinf(gm.compose(d=100, rounds=4).epsilon)


def test_guarantee_addition_is_sequential_composition():
    per_round = TwoPoint(epsilon=1.0).guarantee.compose(d=10)
    total = per_round + per_round + per_round
    assert total == per_round.compose(rounds=3)
    gm = Gaussian(epsilon=1.0, delta=1e-5, radius=1.0).guarantee
    assert (gm + gm).mu == pytest.approx(math.sqrt(2) * gm.mu)
    mixed = gm + Guarantee(epsilon=0.5, delta=1e-6)
    assert mixed.mu is None and mixed.epsilon == pytest.approx(gm.epsilon + 0.5) and mixed.delta == pytest.approx(1.1e-5)
    with pytest.raises(ValueError, match="different units"):
        per_round + TwoPoint(epsilon=1.0).guarantee


def test_guarantee_validation_and_calibration_note():
    with pytest.raises(ValueError, match="epsilon"):
        Guarantee(epsilon=-1.0)
    with pytest.raises(ValueError, match="delta"):
        Guarantee(epsilon=1.0, delta=1.5)
    sign = LdpSign(epsilon=1.0, delta=1e-5, l2_sensitivity=2.0, radius=1.0)
    assert str(sign.calibration) == "ε = 1 (δ = 1e-05) per coordinate per round, as calibrated by the paper"
    assert sign.guarantee.delta == 0 and sign.guarantee.unit == PER_COORDINATE


# ---- Gaussian accounting --------------------------------------------------------------------------
def test_gaussian_delta_matches_numerical_privacy_loss():
    """δ(ε) = ∫ max(0, f_0(y) - e^ε f_Δ(y)) dy, integrated numerically, for two inputs Δ apart."""
    for sigma, delta_in, eps in [(1.0, 1.0, 0.5), (3.0, 2.0, 1.0), (0.7, 1.0, 2.0)]:
        y = torch.linspace(-12 * sigma - 5, 12 * sigma + 5, 400_001, dtype=torch.float64)
        f0 = torch.exp(-0.5 * (y / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        f1 = torch.exp(-0.5 * ((y - delta_in) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        numeric = torch.trapezoid(torch.clamp(f0 - math.exp(eps) * f1, min=0), y).item()
        assert accounting.gaussian_delta(eps, delta_in / sigma) == pytest.approx(numeric, rel=1e-6, abs=1e-12)


def test_gaussian_calibration_round_trip():
    # Balle & Wang (2018), Table/Fig.: ε = 1, δ = 1e-5, Δ = 1 -> σ ≈ 3.73 (classical bound: 4.84)
    s = accounting.gaussian_sigma(1.0, 1e-5, 1.0)
    assert s == pytest.approx(3.7306, abs=1e-3)
    assert accounting.gaussian_epsilon(1e-5, 1.0 / s) == pytest.approx(1.0, rel=1e-8)
    assert accounting.gaussian_delta(1.0, 1.0 / s) == pytest.approx(1e-5, rel=1e-6)
    assert accounting.compose_gaussian([3.0, 4.0]) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="delta"):
        accounting.gaussian_sigma(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        accounting.gaussian_sigma(float("nan"), 1e-5, 1.0)


# ---- amplification by shuffling (Feldman, McMillan, Talwar, FOCS 2021, Thm. 3.1) --------------------
def _formula(e0: float, n: int, delta: float) -> float:
    ee = math.exp(e0)
    return math.log(1 + (ee - 1) / (ee + 1) * (8 * math.sqrt(ee * math.log(4 / delta)) / math.sqrt(n) + 8 * ee / n))


def test_known_value():
    assert shuffle_amplification(1.0, 10_000, 1e-5) == pytest.approx(_formula(1.0, 10_000, 1e-5), rel=1e-12)
    assert shuffle_amplification(1.0, 10_000, 1e-5) == pytest.approx(0.19878337685, rel=1e-9)


def test_monotone():
    ns = [10_000, 30_000, 100_000, 1_000_000]
    vals = [shuffle_amplification(1.0, n, 1e-6) for n in ns]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    eps = [0.1, 0.5, 1.0, 2.0, 3.0]
    vals = [shuffle_amplification(e, 100_000, 1e-6) for e in eps]
    assert all(a < b for a, b in zip(vals, vals[1:]))


def test_amplifies_for_large_n():
    for e0 in (0.5, 1.0, 2.0):
        assert shuffle_amplification(e0, 1_000_000, 1e-6) < e0 / 5


def test_outside_range_raises():
    with pytest.raises(ValueError, match="does not apply.*eps0.*n = 100"):
        shuffle_amplification(0.5, 100, 1e-5)  # n too small for any eps0
    limit = math.log(10_000 / (16 * math.log(2 / 1e-5)))
    shuffle_amplification(limit, 10_000, 1e-5)
    with pytest.raises(ValueError, match="does not apply"):
        shuffle_amplification(limit + 1e-9, 10_000, 1e-5)


@pytest.mark.parametrize(
    "args,match",
    [
        ((0.0, 1000, 1e-5), "eps0"),
        ((math.nan, 1000, 1e-5), "eps0"),
        ((1.0, 0, 1e-5), "n"),
        ((1.0, 10.5, 1e-5), "n"),
        ((1.0, 1000, 0.0), "delta"),
        ((1.0, 1000, 1.0), "delta"),
        ((1.0, 1000, math.nan), "delta"),
    ],
)
def test_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        shuffle_amplification(*args)


def test_gaussian_epsilon_with_a_total_variation_term():
    """The smallest eps with delta_mu(eps) + (1 + e^eps) tv <= delta, against a dense scan; inf when none; tv adds up
    under composition and addition."""
    for mu, tv, dl in [(1.0, 1e-10, 1e-5), (3.4, 1e-10, 2e-3), (0.3, 1e-12, 1e-6), (6.0, 1e-9, 1e-3)]:
        eps = accounting.gaussian_epsilon(dl, mu, tv)
        grid = [i * 1e-3 for i in range(60_000)]
        ok = [e for e in grid if accounting.gaussian_delta(e, mu) + (1 + math.exp(e)) * tv <= dl]
        if ok:
            assert eps == pytest.approx(ok[0], abs=1.1e-3) and eps >= accounting.gaussian_epsilon(dl, mu)
        else:
            assert math.isinf(eps)
    assert math.isinf(accounting.gaussian_epsilon(2e-3, 26.3, 1e-9))  # mu = 26: no eps at all
    # a tv below float64's step at 1 (1 - tv == 1) used to reach inv_cdf(1.0) and raise
    assert accounting.gaussian_epsilon(1e-5, 1.0, 1e-20) == pytest.approx(accounting.gaussian_epsilon(1e-5, 1.0), rel=1e-9)
    assert accounting.gaussian_epsilon(1e-5, 1.0, 0.0) == accounting.gaussian_epsilon(1e-5, 1.0)
    with pytest.raises(ValueError, match="tv"):
        accounting.gaussian_epsilon(1e-5, 1.0, -1e-3)
    g = Guarantee(epsilon=accounting.gaussian_epsilon(1e-5, 0.2, 1e-11), delta=1e-5, mu=0.2, tv=1e-11)
    c = g.compose(d=100, rounds=10)
    assert c.tv == pytest.approx(1e-8) and c.epsilon == accounting.gaussian_epsilon(1e-5, 0.2 * math.sqrt(1000), 1e-8)
    assert (g + g).tv == pytest.approx(2e-11)
    assert str(Guarantee(epsilon=math.inf, delta=1e-3, mu=30.0, tv=1e-9)) == "no finite ε certified at δ = 0.001 per coordinate per round"
    with pytest.raises(ValueError, match="needs mu"):
        Guarantee(epsilon=1.0, delta=1e-5, tv=1e-9)


# ---- the per-client accountant the round engine uses ------------------------------------------------
def test_client_accountant_composes_over_coordinates_and_the_rounds_each_client_took_part_in():
    from ldptut.accounting import ClientAccountant, Guarantee

    acc = ClientAccountant(d=3)
    g = Guarantee(epsilon=0.5)                      # per coordinate
    assert acc.spent() is None                      # nothing accounted yet
    r1 = acc.step([0, 1], [g, g])
    assert r1.epsilon == pytest.approx(1.5) and r1.delta == 0       # 3 coordinates x 0.5, per model per round
    acc.step(torch.tensor([0]), [Guarantee(epsilon=0.25, delta=1e-6)])
    # client 0: 1.5 + 0.75 over two rounds, delta 3e-6; client 1: 1.5 after one
    assert acc.totals[0].epsilon == pytest.approx(2.25) and acc.totals[0].delta == pytest.approx(3e-6)
    assert acc.totals[1].epsilon == pytest.approx(1.5)
    assert acc.spent().epsilon == pytest.approx(2.25)
    with pytest.raises(ValueError, match="2 guarantees for 1 clients"):
        acc.step([0], [g, g])
    # a round without a stated guarantee (clipping alone): unprotected from then on, never a number
    assert acc.step([1], None) is None and acc.spent() is None
    assert acc.step([1], [g]) is not None and acc.spent() is None
    with pytest.raises(ValueError, match="d"):
        ClientAccountant(d=0)


# ---- an independent oracle: Google's dp-accounting (its privacy-loss-distribution accountant) ------------------
@pytest.mark.parametrize("sigma, k, delta", [(1.0, 1, 1e-5), (2.0, 10, 1e-5), (5.0, 100, 1e-6), (0.8, 3, 1e-3)])
def test_gaussian_composition_matches_dp_accountings_pld_accountant(sigma, k, delta):
    """k Gaussian releases of sensitivity 1 and noise sigma: our exact μ-GDP composition (μ = sqrt(k)/σ) and its ε at
    δ against dp-accounting's PLD accountant, a numerical upper bound: ours is not above it, and within 1e-6."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    from ldptut.accounting import compose_gaussian, gaussian_epsilon

    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma), k)
    theirs = pld.get_epsilon(delta)
    ours = gaussian_epsilon(delta, compose_gaussian([1.0 / sigma] * k))
    assert ours <= theirs + 1e-12 and theirs - ours < 1e-6 * theirs


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_randomized_response_epsilon_matches_dp_accountings_pld(epsilon):
    """One randomized-response bit (p = e^ε / (1 + e^ε)) is dp-accounting's RandomizedResponseDpEvent with two buckets
    and noise parameter q = 2 (1 - p) (replace-one neighbours, as local DP's); its PLD accountant's ε at δ = 0 is our
    guarantee's ε, to its discretisation (1e-5)."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    from ldptut.mechanisms import RandomizedResponse

    rr = RandomizedResponse(epsilon=epsilon)
    pld = pld_privacy_accountant.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
                                               value_discretization_interval=1e-5)
    pld.compose(dp_accounting.RandomizedResponseDpEvent(noise_parameter=2 * (1 - rr.p), num_buckets=2))
    assert rr.guarantee.epsilon == pytest.approx(pld.get_epsilon(0.0), abs=2e-5)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_laplace_calibration_matches_dp_accountings_pld(epsilon):
    """Our Laplace on [c - r, c + r] has scale b = 2r / ε for its stated ε: as dp-accounting's LaplaceDpEvent of
    noise multiplier b / Δ with Δ = 2r (its sensitivity-1 Laplace, for the neighbours x, x' of the range), its PLD
    accountant gives at δ = 1e-5 the closed form of one pure ε Laplace, ε(δ) = ε + 2 ln(1 - δ), and our ε is the limit
    δ -> 0 of it (the PLD answers inf at δ = 0 exactly: its tails are truncated)."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    from ldptut.mechanisms import Laplace

    radius, delta = 0.5, 1e-5
    mech = Laplace(epsilon=epsilon, center=0.0, radius=radius)
    pld = pld_privacy_accountant.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=1e-5)
    pld.compose(dp_accounting.LaplaceDpEvent(noise_multiplier=float(mech.scale) / (2 * radius)))
    theirs = pld.get_epsilon(delta)
    assert theirs == pytest.approx(epsilon + 2 * math.log1p(-delta), abs=1e-9)
    assert mech.guarantee.epsilon == epsilon and theirs < epsilon


@pytest.mark.parametrize("epsilon, d, rounds", [(1.0, 4, 5), (0.1, 10, 20)])
def test_the_client_accountants_basic_composition_bounds_the_pld_of_its_laplace_releases(epsilon, d, rounds):
    """k = d x rounds Laplace releases at ε each: the accountant's basic composition k ε (per model over training) is
    above dp-accounting's PLD ε at δ = 1e-5 for the same releases, which is itself below the advanced composition
    bound of Dwork, Rothblum and Vadhan (2010), sqrt(2 k ln(1/δ)) ε + k ε (e^ε - 1), wherever that is the smaller
    (many releases at small ε: there basic composition is loose)."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    from ldptut.accounting import ClientAccountant
    from ldptut.scales import advanced_composition
    from ldptut.mechanisms import Laplace

    g = Laplace(epsilon=epsilon, center=0.0, radius=1.0).guarantee
    acc = ClientAccountant(d=d)
    for _ in range(rounds):
        acc.step([0], [g])
    ours, k, delta = acc.spent().epsilon, d * rounds, 1e-5
    assert ours == pytest.approx(k * epsilon)
    pld = pld_privacy_accountant.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=1e-4)
    pld.compose(dp_accounting.LaplaceDpEvent(noise_multiplier=1.0 / epsilon), k)
    theirs = pld.get_epsilon(delta)
    advanced = advanced_composition(epsilon, k, delta)
    assert theirs < ours and theirs <= advanced
    assert (advanced < ours) == (epsilon == 0.1)   # the two settings: advanced composition wins only at small ε
