"""ldptut.reported.ldp_fl_comparison: the paper's claims matched to stored runs by their settings."""
import pandas as pd
import pytest

from ldptut.reported import LDP_FL_HEADLINE, LDP_FL_TABLE1, ldp_fl_comparison

FIXED_MNIST = "FixedRange(center=0.0, radius=0.075)"
ADAPTIVE = "GlobalModelRange(margin=1.0, min_radius=1e-06)"


def _run(**kw):
    base = {"dataset": "mnist", "model": "cnn2", "n_clients": 100, "rounds": 10, "lr": 0.03, "client_fraction": 1.0,
            "local_epochs": 1, "batch_size": 32, "mechanism": "TwoPoint", "epsilon": 1.0, "range": FIXED_MNIST,
            "seed": 0, "accuracy": 85.0}
    return {**base, **kw}


def test_claims_match_runs_of_the_same_setting_only():
    runs = pd.DataFrame([
        _run(seed=0, accuracy=85.0), _run(seed=1, accuracy=87.0),
        _run(seed=2, accuracy=99.0, batch_size=10),            # other local computation: not matched
        _run(seed=3, accuracy=99.0, n_clients=50),             # other n: not matched
        _run(seed=4, accuracy=99.0, client_fraction=0.5),      # other fraction: not matched
        _run(seed=0, epsilon=None, mechanism=None, range=None, accuracy=92.0),
        _run(seed=1, epsilon=None, mechanism=None, range=None, accuracy=94.0),
        _run(seed=0, epsilon=5.0, range=ADAPTIVE, accuracy=91.0),
        _run(seed=0, epsilon=5.0, accuracy=90.0),
    ])
    table = ldp_fl_comparison(runs).set_index("claim")
    assert len(table) == len(LDP_FL_HEADLINE) + 2 * len(LDP_FL_TABLE1)
    head = table.loc["mnist ε=1 n=100 fixed (0, 0.075)"]
    assert head["paper (%)"] == 96.24
    assert head["ours (%)"] == "86.0 ± 1.4 (2 seeds)"           # mean 86, sample std sqrt(2)
    assert head["ours non-private (%)"] == "93.0 ± 1.4 (2 seeds)"
    assert "cnn2, 10 rounds, lr 0.03, batch 32" in head["settings"]
    assert table.loc["Table 1 mnist ε=5 adaptive", "ours (%)"] == "91.0 (1 seed)"
    assert table.loc["Table 1 mnist ε=5 fixed", "ours (%)"] == "90.0 (1 seed)"
    assert table.loc["Table 1 mnist ε=10 fixed", "ours (%)"] == "not run"
    assert table.loc["fashion_mnist ε=4 n=200 fixed (0, 0.015)", "ours (%)"] == "not run"


def test_a_fixed_range_of_another_radius_is_not_the_papers_claim():
    runs = pd.DataFrame([_run(range="FixedRange(center=0.0, radius=0.5)"), _run(range="FixedRange(center=0.0, radius=0.0751)")])
    assert ldp_fl_comparison(runs).iloc[0]["ours (%)"] == "not run"


def test_other_local_computation_is_selectable_and_empty_runs_give_not_run():
    runs = pd.DataFrame([_run(batch_size=10, accuracy=92.1)])
    assert ldp_fl_comparison(runs, batch_size=10).iloc[0]["ours (%)"] == "92.1 (1 seed)"
    assert (ldp_fl_comparison(pd.DataFrame())["ours (%)"] == "not run").all()
    with pytest.raises(ValueError, match="lacks the columns"):
        ldp_fl_comparison(pd.DataFrame([{"dataset": "mnist"}]))


def test_a_fixed_range_the_paper_does_not_give_is_named_as_ours():
    runs = pd.DataFrame([_run(dataset="cifar10", model="small_vgg", n_clients=500, rounds=15, lr=0.015, epsilon=5.0,
                              range="FixedRange(center=0.0, radius=1.0)", accuracy=20.0),
                         _run(epsilon=5.0)])
    table = ldp_fl_comparison(runs).set_index("claim")
    row = table.loc["Table 1 cifar10 ε=5 fixed"]
    assert row["ours (%)"] == "20.0 (1 seed)"
    assert row["settings"].endswith("ours (not the paper's) FixedRange(center=0.0, radius=1.0)")
    mnist = table.loc["Table 1 mnist ε=5 fixed"]
    assert mnist["ours (%)"] == "85.0 (1 seed)" and "ours" not in mnist["settings"]  # the paper's own range


# ------------------------------------------------------------------------------ Wu et al. (2023)
def _wu_final(gains_b, gains_c, experiment="iid digits"):
    """Final rows of a toy grid: A at 0.50 on two profiles, B and C at A + the given gain (points) per seed."""
    rows = []
    for seed, (gb, gc) in enumerate(zip(gains_b, gains_c)):
        rows.append({"experiment": experiment, "kind": "non-personalized", "profile": "no noise", "aggregation": "A",
                     "seed": seed, "accuracy": 0.80 + 0.01 * seed})
        for prof in ("p1", "p2"):
            for agg, acc in (("A", 0.50), ("B", 0.50 + gb / 100), ("C", 0.50 + gc / 100)):
                rows.append({"experiment": experiment, "kind": "personalized", "profile": prof, "aggregation": agg,
                             "seed": seed, "accuracy": acc})
    return pd.DataFrame(rows)


def test_wu_gains_are_paired_per_seed_and_compared_with_their_spread():
    from ldptut.reported import WU_REPORTED, wu_comparison

    t = wu_comparison(_wu_final(gains_b=[4.0, 6.0, 5.0], gains_c=[10.0, -10.0, 3.0])).set_index("quantity")
    assert t.loc["no-noise accuracy (%)", "ours"] == "81.0 ± 1.0"
    assert t.loc["no-noise accuracy (%)", "paper"] == WU_REPORTED[("iid", "digits")]["no_noise"]
    assert t.loc["gain of B over A (points)", "ours"] == "+5.0 ± 1.0"
    assert t.loc["gain of B over A (points)", "exceeds spread"] == "yes"
    assert t.loc["gain of C over A (points)", "ours"] == "+1.0 ± 10.1"  # std of (10, -10, 3) = sqrt(103)
    assert t.loc["gain of C over A (points)", "exceeds spread"] == "no"
    one = wu_comparison(_wu_final([2.0], [3.0], experiment="noniid covertype")).set_index("quantity")
    assert one.loc["gain of B over A (points)", "paper"] == "not reported"
    assert one.loc["gain of C over A (points)", "paper"] == "none (no gain)"
    assert one.loc["gain of C over A (points)", "exceeds spread"] == "1 seed"
    with pytest.raises(ValueError, match="no reported numbers"):
        wu_comparison(_wu_final([1.0], [1.0], experiment="iid mnist"))
    with pytest.raises(ValueError, match="lacks the columns"):
        wu_comparison(pd.DataFrame({"experiment": ["iid digits"]}))


def test_wu_rows_follow_the_papers_order_whatever_the_run_order():
    from ldptut.reported import wu_comparison

    both = pd.concat([_wu_final([1.0], [1.0], experiment="noniid digits"), _wu_final([2.0], [2.0])])
    t = wu_comparison(both)
    assert t["experiment"].drop_duplicates().tolist() == ["iid digits", "noniid digits"]
