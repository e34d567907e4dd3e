"""The privacy scale (per weight per round -> per model per round -> over training) against hand computations."""
import math

import pytest

from ldptut.accounting import Guarantee, Unit, gaussian_epsilon, shuffle_amplification
from ldptut.mechanisms import Gaussian, TwoPoint
from ldptut.scales import advanced_composition, privacy_scales, scales_table


def test_advanced_composition_by_hand():
    # k = 1000 releases at ε = 0.01, δ' = 1e-5: sqrt(2000 ln 1e5) 0.01 + 1000 0.01 (e^0.01 - 1)
    by_hand = math.sqrt(2000 * math.log(1e5)) * 0.01 + 10 * (math.exp(0.01) - 1)
    assert advanced_composition(0.01, 1000, 1e-5) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(1.6179, abs=1e-4)
    for bad in (dict(epsilon=0.0, k=1, delta_slack=1e-5), dict(epsilon=1.0, k=0, delta_slack=1e-5),
                dict(epsilon=1.0, k=1, delta_slack=1.0)):
        with pytest.raises(ValueError):
            advanced_composition(**bad)
    # e^ε beyond float64 (a whole model's ε, e.g. FedSel's d ε_w): infinite, basic composition is kept
    assert advanced_composition(2670.0, 10, 1e-5) == math.inf
    s = privacy_scales(Guarantee(2670.0, unit=Unit(coordinates=26698, whole_model=True)), d=26698, rounds=10)
    assert (s["over_training"], s["over_training_how"]) == (26700.0, "basic")


def test_pure_guarantee_at_the_three_levels_by_hand():
    """ε = 1 per weight per round, d = 100, T = 10: 100 per model per round, 1,000 over training by basic composition;
    advanced composition (k = 1,000) gives sqrt(2000 ln 1e5) + 1000 (e - 1) = 1,870 > 1,000, so basic is kept. At
    ε = 0.01 advanced gives 1.618 < 10 and is kept, with δ = 1e-5."""
    s = privacy_scales(Guarantee(1.0), d=100, rounds=10)
    assert (s["per_weight_round"], s["per_model_round"], s["over_training_basic"]) == (1.0, 100.0, 1000.0)
    assert s["over_training_advanced"] == pytest.approx(math.sqrt(2000 * math.log(1e5)) + 1000 * (math.e - 1))
    assert (s["over_training"], s["over_training_delta"], s["over_training_how"]) == (1000.0, 0.0, "basic")
    small = privacy_scales(Guarantee(0.01), d=100, rounds=10)
    assert small["over_training_basic"] == pytest.approx(10.0)
    assert small["over_training"] == pytest.approx(1.6179, abs=1e-4)
    assert (small["over_training_delta"], small["over_training_how"]) == (1e-5, "advanced")


def test_gaussian_composes_exactly():
    """A Gaussian with μ per weight per round: per model per round μ √d, over training μ √(d T), ε at its δ exact."""
    g = Guarantee(epsilon=gaussian_epsilon(1e-5, 0.05), delta=1e-5, mu=0.05)
    s = privacy_scales(g, d=400, rounds=9)
    assert s["per_model_round"] == pytest.approx(gaussian_epsilon(1e-5, 0.05 * 20))
    assert s["over_training"] == pytest.approx(gaussian_epsilon(1e-5, 0.05 * 60))
    assert s["over_training_how"] == "exact μ-GDP" and s["over_training_advanced"] is None
    # the package's Gaussian mechanism states such a guarantee
    real = Gaussian(epsilon=1.0, delta=1e-5, center=0.0, radius=1.0).guarantee
    assert privacy_scales(real, d=1, rounds=1)["per_model_round"] == pytest.approx(real.epsilon, rel=1e-6)


def test_a_whole_model_guarantee_enters_at_the_second_level():
    """FedSel's ε1 + ε2 = 3 per model per round (d = 50): no per-weight figure, 3 per round, 3 T over T rounds (not
    3 d T: the client does not report each coordinate)."""
    g = Guarantee(3.0, unit=Unit(coordinates=50, whole_model=True))
    s = privacy_scales(g, d=50, rounds=4)
    assert s["per_weight_round"] is None and s["per_model_round"] == 3.0 and s["over_training_basic"] == 12.0


def test_shuffling_is_reported_beside_where_it_applies():
    tp = TwoPoint(epsilon=1.0).guarantee
    s = privacy_scales(tp, d=10, rounds=2, clients=100_000)
    assert s["shuffled_per_weight_round"] == pytest.approx(shuffle_amplification(1.0, 100_000, 1e-5))
    assert s["per_weight_round"] == 1.0                     # the local guarantee is not replaced
    assert privacy_scales(tp, d=10, rounds=2, clients=100)["shuffled_per_weight_round"] is None  # n too small
    table = scales_table({"two-point": tp, "fedsel": Guarantee(2.0, unit=Unit(coordinates=10, whole_model=True))},
                         d=10, rounds=2)
    assert list(table.index) == ["two-point", "fedsel"]
    assert table.loc["two-point", "over_training_basic"] == 20.0 and table.loc["fedsel", "over_training_basic"] == 4.0
