"""ldptut.papers.ldp_fl: the paper's settings and numbers, its experiment grid as typed runs, and the
paper-vs-ours table matched on the runs' typed configurations."""
import dataclasses
import math

import pandas as pd
import pytest
import torch

from ldptut.experiments import FedAvgConfig, Runner, diverged_note
from ldptut.fl import FixedRange, GlobalModelRange
from ldptut.papers import ldp_fl
from ldptut.runcache import records_table, RunRecord

FIXED_MNIST = FixedRange(0.0, 0.075)
ADAPTIVE = GlobalModelRange()


def _run(accuracy=85.0, **kw):
    """A row as load_runs gives it, built from a real FedAvgConfig (so the matching sees typed ranges)."""
    base = dict(paper="ldp_fl", dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03, seed=0,
                mechanism="two_point", epsilon=1.0, range=FIXED_MNIST)
    base.update(kw)
    if base["mechanism"] is None:
        base.update(epsilon=None, range=None)
    cfg = FedAvgConfig(**base)
    rec = RunRecord(config=cfg, history=pd.DataFrame({"round": [1], "accuracy": [accuracy / 100]}))
    return records_table([rec]).iloc[0].to_dict()


def test_reported_numbers_state_their_unit_and_metric():
    assert all(r.epsilon_unit == "per weight per round" for r in ldp_fl.REPORTED)
    head = ldp_fl.REPORTED[0]
    assert head.value == 96.24 and "training accuracy" in head.metric and head.where["dataset"] == "mnist"
    assert len(ldp_fl.REPORTED) == 3 + 12
    assert ldp_fl.FIXED_RANGE["cifar10"] == (0.0, 1.0)  # Section 5.4: "(c, r) = (0, 1) ... fixed range"


def test_claims_match_runs_of_the_same_setting_only():
    runs = pd.DataFrame([
        _run(seed=0, accuracy=85.0), _run(seed=1, accuracy=87.0),
        _run(seed=2, accuracy=99.0, batch_size=10),            # other local computation: not matched
        _run(seed=3, accuracy=99.0, n_clients=50),             # other n: not matched
        _run(seed=4, accuracy=99.0, client_fraction=0.5),      # other fraction: not matched
        _run(seed=0, mechanism=None, accuracy=92.0),
        _run(seed=1, mechanism=None, accuracy=94.0),
        _run(seed=0, epsilon=5.0, range=ADAPTIVE, accuracy=91.0),
        _run(seed=0, epsilon=5.0, accuracy=90.0),
    ])
    table = ldp_fl.compare(runs).set_index("claim")
    assert len(table) == len(ldp_fl.REPORTED)
    head = table.loc["mnist ε=1 n=100 fixed (0, 0.075)"]
    assert head["paper (%)"] == 96.24
    assert head["ours (%)"] == "86.0 ± 1.4 (2 seeds)"           # mean 86, sample std sqrt(2)
    assert head["95 % CI"] == "[73.3, 98.7]"                  # 86 ± t(0.975, 1) 1.414 / sqrt(2) = 86 ± 12.7
    assert head["ours non-private (%)"] == "93.0 ± 1.4 (2 seeds)"
    assert head["privacy cost (points, paired)"] == "7.0 ± 0.0 (2 seeds) [7.0, 7.0]"  # 92 - 85 and 94 - 87
    assert "cnn2, 10 rounds, sgd lr 0.03, batch 32" in head["settings"]
    assert table.loc["Table 1 mnist ε=5 adaptive", "ours (%)"] == "91.0 (1 seed)"
    assert table.loc["Table 1 mnist ε=5 fixed", "ours (%)"] == "90.0 (1 seed)"
    assert table.loc["Table 1 mnist ε=5 fixed", "95 % CI"] == ""   # one seed: no interval
    assert table.loc["Table 1 mnist ε=10 fixed", "ours (%)"] == "not run"
    assert table.loc["fashion_mnist ε=4 n=200 fixed (0, 0.015)", "ours (%)"] == "not run"
    # two decimals, as the paper prints its numbers: the same statistics, the std and interval at two decimals too
    two = ldp_fl.compare(runs, fmt=".2f").set_index("claim").loc["mnist ε=1 n=100 fixed (0, 0.075)"]
    assert two["ours (%)"] == "86.00 ± 1.41 (2 seeds)"
    assert two["95 % CI"] == "[73.29, 98.71]"                 # 86 ± 12.706
    assert two["ours non-private (%)"] == "93.00 ± 1.41 (2 seeds)"
    assert two["privacy cost (points, paired)"] == "7.00 ± 0.00 (2 seeds) [7.00, 7.00]"
    for bad in ("2f", ".2e", "+.1f", ".f", 2):
        with pytest.raises(ValueError, match="fmt must be a fixed-point format"):
            ldp_fl.compare(runs, fmt=bad)


def test_privacy_cost_pairs_runs_by_seed():
    private = pd.DataFrame({"seed": [0, 1, 2], "accuracy": [85.0, 87.0, 90.0]})
    non_private = pd.DataFrame({"seed": [3, 1, 0], "accuracy": [99.0, 93.0, 92.0]})
    # seeds 0 and 1 run both ways: d = 7, 6; mean 6.5, s = 0.707, t(0.975, 1) = 12.706: 6.5 ± 6.35
    assert ldp_fl.privacy_cost(private, non_private) == "6.5 ± 0.7 (2 seeds) [0.1, 12.9]"
    assert ldp_fl.privacy_cost(private[:1], non_private) == "7.0 (1 seed)"          # no interval from one pair
    assert ldp_fl.privacy_cost(private[2:], non_private) == ""                       # seed 2 never run non-private
    with pytest.raises(ValueError, match="non_private has several runs with the same seed"):
        ldp_fl.privacy_cost(private, pd.concat([non_private, non_private]))
    # runs at two learning rates (compare(lr=None) pools them): paired by seed and lr, never across lrs
    two = pd.DataFrame({"seed": [0, 0], "lr": [0.1, 0.01], "accuracy": [90.0, 50.0]})
    two_np = pd.DataFrame({"seed": [0, 0], "lr": [0.1, 0.01], "accuracy": [95.0, 60.0]})
    # two pairs at one seed: counted as pairs, not seeds
    assert ldp_fl.privacy_cost(two, two_np, by=("seed", "lr")) == "7.5 ± 3.5 (2 pairs) [-24.3, 39.3]"
    with pytest.raises(ValueError, match="pass the setting they differ in"):
        ldp_fl.privacy_cost(two, two_np)
    assert ldp_fl.privacy_cost(private, non_private, fmt=".2f") == "6.50 ± 0.71 (2 seeds) [0.15, 12.85]"


def test_a_fixed_range_of_another_radius_is_not_the_papers_claim():
    runs = pd.DataFrame([_run(range=FixedRange(0.0, 0.5)), _run(range=FixedRange(0.0, 0.0751))])
    assert ldp_fl.compare(runs).iloc[0]["ours (%)"] == "not run"
    cifar = pd.DataFrame([_run(dataset="cifar10", model="small_vgg", n_clients=500, rounds=15, lr=0.015, epsilon=5.0,
                               range=FixedRange(0.0, 1.0), accuracy=20.0)])
    assert ldp_fl.compare(cifar).set_index("claim").loc["Table 1 cifar10 ε=5 fixed", "ours (%)"] == "20.0 (1 seed)"


def test_other_local_computation_is_selectable_and_empty_runs_give_not_run():
    runs = pd.DataFrame([_run(batch_size=10, accuracy=92.1)])
    assert ldp_fl.compare(runs, batch_size=10).iloc[0]["ours (%)"] == "92.1 (1 seed)"
    adam = pd.DataFrame([_run(batch_size=10, optimizer="adam", lr=0.001, accuracy=95.0),
                         _run(batch_size=10, optimizer="adam", lr=0.01, accuracy=50.0)])
    assert ldp_fl.compare(adam, batch_size=10).iloc[0]["ours (%)"] == "not run"   # plain SGD by default
    at = ldp_fl.compare(adam, batch_size=10, optimizer="adam", lr=0.001).iloc[0]
    assert at["ours (%)"] == "95.0 (1 seed)" and "adam lr 0.001" in at["settings"]
    # lr=None pools the two learning rates, both at seed 0: two runs, one seed
    assert ldp_fl.compare(adam, batch_size=10, optimizer="adam").iloc[0]["ours (%)"] == "72.5 ± 31.8 (2 runs)"
    assert ldp_fl.compare(adam, batch_size=10, optimizer="adam").iloc[0]["privacy cost (points, paired)"] == ""
    only = ldp_fl.compare(adam, dataset="fashion_mnist")
    assert len(only) == 5 and only["claim"].str.startswith(("fashion_mnist", "Table 1 fashion_mnist")).all()
    assert (ldp_fl.compare(pd.DataFrame())["ours (%)"] == "not run").all()
    with pytest.raises(ValueError, match="lacks the columns"):
        ldp_fl.compare(pd.DataFrame([{"dataset": "mnist"}]))


def test_configs_build_the_chapters_grid_as_typed_runs():
    base = ldp_fl.chapter_config(dataset="mnist", model="mlp", n_clients=100, rounds=10, lr=0.03)
    grid = ldp_fl.configs(base, seeds=[0], headline_seeds=[1, 2], fixed=FIXED_MNIST, adaptive=ADAPTIVE,
                          epsilons=[0.1, 1.0], table1_epsilons=[5.0], sensitivity_epsilon=1.0,
                          sensitivity_batch_sizes=[10, 32], sensitivity_local_epochs=[1, 2], fraction_grid=[0.5])
    by = {}
    for experiment, cfg in grid:
        by.setdefault(experiment, []).append(cfg)
    assert all(isinstance(c, FedAvgConfig) and c.paper == "ldp_fl" for _, c in grid)
    assert [(c.mechanism, c.epsilon, c.seed) for c in by["vs epsilon"]] == [
        (None, None, 0), (None, None, 1), (None, None, 2), ("two_point", 0.1, 0),
        ("two_point", 1.0, 0), ("two_point", 1.0, 1), ("two_point", 1.0, 2)]
    assert {(c.epsilon, type(c.range).__name__) for c in by["table 1"]} == {(5.0, "FixedRange"),
                                                                         (5.0, "GlobalModelRange")}
    assert {(c.batch_size, c.local_epochs, c.mechanism) for c in by["sensitivity"]} == {
        (10, 1, None), (10, 1, "two_point"), (32, 1, None), (32, 1, "two_point"), (32, 2, None), (32, 2, "two_point")}
    assert {c.client_fraction for c in by["fraction"]} == {0.5}
    assert ldp_fl.configs(base, seeds=[0], fixed=FIXED_MNIST, adaptive=ADAPTIVE, epsilons=[1.0],
                          parts=["table 1"]) == []
    with pytest.raises(ValueError, match="sensitivity_range"):
        ldp_fl.configs(base, seeds=[0], fixed=FIXED_MNIST, adaptive=ADAPTIVE, sensitivity_range="fixd")


def test_runner_records_a_small_grid_and_reuses_shared_runs():
    """Two experiments sharing a run train it once; the summary and provenance tables list both."""
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=2, lr=0.1)
    runner = Runner(None, progress=False)
    grid = ldp_fl.configs(base, seeds=[0], fixed=FixedRange(0.0, 0.5), adaptive=ADAPTIVE, epsilons=[2.0],
                          sensitivity_epsilon=2.0, sensitivity_batch_sizes=[32])
    records = runner.record_all(grid)
    assert len(records) == 4 and records[0] is records[2]  # the non-private run of both experiments
    s = runner.summary("vs epsilon", "epsilon")
    assert s["epsilon"].tolist() == ["2", "non-private"] and (s["count"] == 1).all()
    prov = runner.provenance()
    assert len(prov) == 4 and set(prov["source"]) == {"this execution"}
    assert {"experiment", "mechanism", "epsilon", "seed", "commit", "device"} <= set(prov.columns)
    assert "n_clients" not in prov  # the same for every run: not a column
    h = records[1].history
    assert (h["epsilon_round"] == 2.0 * 650).all()  # logreg on 8x8 digits: d = 10 x 65 weights, 2 per weight


def test_the_diverged_note_counts_diverged_runs_of_all_and_names_their_rounds_in_order():
    runs = pd.DataFrame({"accuracy": [float("nan"), 90.0, float("nan")], "diverged": [True, False, True],
                         "last_round": [8, 10, 3]})
    assert diverged_note(runs) == "2 of 3 diverged (round 3, 8)"
    assert diverged_note(runs.iloc[1:2]) == "" and diverged_note(runs.drop(columns="diverged")) == ""


def test_a_run_whose_weights_blow_up_is_recorded_as_diverged_and_summarised_as_such(tmp_path):
    """A grid point whose training blows up (here an MLP at lr 1e10: within the first local epoch its weights
    overflow) is a result: recorded with its history ending in that round, marked diverged, stored and read back. The
    private run's non-finite local models are not perturbed (no mechanism takes them); its round is lost the same way.
    The summary counts such runs instead of averaging NaN. The run beside them is untouched."""
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=3, lr=0.1)
    blown = base.replace(model="mlp", lr=1e10)
    grid = [("vs epsilon", blown), ("vs epsilon", ldp_fl.private(blown, 2.0, FixedRange(0.0, 0.5))),
            ("vs epsilon", ldp_fl.private(base, 2.0, FixedRange(0.0, 0.5)))]
    runner = Runner(tmp_path, progress=False)
    recs = runner.record_all(grid)
    for rec in recs[:2]:
        assert rec.history["round"].tolist() == [1] and bool(rec.history["diverged"].iloc[-1])
        assert math.isnan(rec.final_accuracy)
    assert recs[2].history["round"].tolist() == [1, 2, 3] and not recs[2].history["diverged"].any()
    s = runner.summary("vs epsilon", ["epsilon", "lr"]).set_index(["epsilon", "lr"])
    assert s.loc[("non-private", 1e10), "diverged"] == "1 of 1 diverged (round 1)"
    assert s.loc[("non-private", 1e10), "count"] == 0  # count is of the runs that did not diverge
    assert s.loc[("2", 1e10), "diverged"] == "1 of 1 diverged (round 1)" and s.loc[("2", 0.1), "diverged"] == ""
    assert s.loc[("2", 0.1), "count"] == 1 and 0 < s.loc[("2", 0.1), "mean"] <= 100
    again = Runner(tmp_path, progress=False).run(grid[1][1])  # stored: read back, not trained again
    assert again.loaded and bool(again.history["diverged"].iloc[-1])


def test_steps_runs_record_training_accuracy_and_clip_without_noise():
    """The "steps" experiment: non-private, private and clipping-only runs with training accuracy; the clip-only run
    is the non-private run with the weights clipped (so at a range wider than every weight it is that run)."""
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=2, lr=0.1)
    grid = ldp_fl.configs(base, seeds=[0], fixed=FixedRange(0.0, 100.0), adaptive=ADAPTIVE, sensitivity_epsilon=2.0,
                          steps_rounds=3, parts=["steps"])
    assert [(c.mechanism, c.rounds, c.train_eval) for _, c in grid] == [
        (None, 3, True), ("two_point", 3, True), ("clip", 3, True)]
    assert "train_eval" not in base.to_dict(defaults=False)  # off by default: stored keys unchanged
    runner = Runner(None, progress=False)
    recs = runner.record_all(grid)
    nonpriv, _, clip = (r.history for r in recs)
    assert nonpriv["accuracy"].tolist() == clip["accuracy"].tolist()  # nothing clipped at r = 100
    t = ldp_fl.steps_table(recs, rounds=2)
    assert t["round"].tolist() == [2, 3] * 3 and (t["seeds"] == 1).all()
    assert t["run"].unique().tolist() == ["non-private", "ε = 2 per weight per round, fixed range (0, 100)",
                                          "clipping to the fixed range (0, 100) only (no noise)"]
    assert t.loc[t["run"] == "non-private", "train (global model, all training data)"].tolist() == [
        round(100 * nonpriv.set_index("round").loc[r, "train_accuracy"], 1) for r in (2, 3)]
    # compare() leaves the steps runs out (they repeat or extend the grid's trainings)
    rows = pd.DataFrame([_run(seed=0, accuracy=85.0), _run(seed=1, accuracy=99.0, train_eval=True)])
    head = ldp_fl.compare(rows).set_index("claim").loc["mnist ε=1 n=100 fixed (0, 0.075)"]
    assert head["ours (%)"] == "85.0 (1 seed)"


def test_clip_only_runs_take_a_range_and_no_epsilon():
    base = ldp_fl.chapter_config(dataset="mnist", model="mlp", n_clients=10, rounds=1, lr=0.1)
    assert base.replace(mechanism="clip", range=FIXED_MNIST).label().startswith("clipped to fixed (0, 0.075), no noise")
    with pytest.raises(ValueError, match="needs a range and no epsilon"):
        base.replace(mechanism="clip", range=FIXED_MNIST, epsilon=1.0)
    with pytest.raises(ValueError, match="needs a range and no epsilon"):
        base.replace(mechanism="clip")
    with pytest.raises(ValueError, match="train_eval"):
        base.replace(train_eval="yes")


# ---- the local-computation search on a validation split (issue 16, CIFAR-10) ------------------------------------
def test_validation_runs_hold_out_training_examples_and_never_touch_the_test_set():
    from ldptut.data import load_dataset

    ds = load_dataset("digits")
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=1, lr=0.1)
    held = ldp_fl.ValidationConfig(**{k: getattr(base, k) for k in ("paper", "dataset", "model", "n_clients",
                                                                  "rounds", "lr")}, validation=300)
    n = ds.x_train.shape[0]
    tags = torch.arange(n, dtype=torch.float32)[:, None, None, None].expand(n, *ds.input_shape)
    tagged = dataclasses.replace(ds, x_train=tags.contiguous())  # every pixel of example i holds i
    cut = held.data(tagged)
    val, train = cut.x_test[:, 0, 0, 0].long(), cut.x_train[:, 0, 0, 0].long()
    assert len(val) == 300 and len(train) == n - 300
    # the validation examples are training examples, disjoint from what the clients train on, with their labels
    assert sorted(torch.cat([val, train]).tolist()) == list(range(n))
    assert torch.equal(cut.y_test, ds.y_train[val]) and torch.equal(cut.y_train, ds.y_train[train])
    # the same split for every run seed, so settings are compared on the same examples
    assert torch.equal(held.replace(seed=3).data(tagged).x_test, cut.x_test)
    assert held.key() != held.replace(validation=301).key() and "validation" in held.to_dict(defaults=False)
    with pytest.raises(ValueError, match="validation"):
        held.replace(validation=0)
    with pytest.raises(ValueError, match="leaves no training data"):
        held.replace(validation=n).data(ds)


def test_search_runs_on_validation_and_the_choice_ignores_test_results():
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=2, lr=0.1)
    grid = ldp_fl.configs(base, seeds=[0], fixed=FixedRange(0.0, 1.0), adaptive=ADAPTIVE, sensitivity_epsilon=2.0,
                          search=[{}, {"batch_size": 10, "momentum": 0.9}], validation=300, parts=["search"])
    assert [(type(c).__name__, c.batch_size, c.momentum, c.mechanism) for _, c in grid] == [
        ("ValidationConfig", 32, 0.0, None), ("ValidationConfig", 32, 0.0, "two_point"),
        ("ValidationConfig", 10, 0.9, None), ("ValidationConfig", 10, 0.9, "two_point")]
    only = ldp_fl.configs(base, seeds=[0], fixed=FixedRange(0.0, 1.0), adaptive=ADAPTIVE, search=[{}],
                          validation=300, search_private=False, parts=["search"])
    assert [c.mechanism for _, c in only] == [None]
    with pytest.raises(ValueError, match="may vary"):
        ldp_fl.configs(base, seeds=[0], fixed=FixedRange(0.0, 1.0), adaptive=ADAPTIVE, search=[{"rounds": 5}])
    recs = Runner(None, progress=False).record_all(grid)
    t = ldp_fl.local_table(recs)
    assert len(t) == 4 and set(t["on"]) == {"validation (300 held out)"} and (t["seeds"] == 1).all()

    def record(config, acc):
        return RunRecord(config=config, history=pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc]}))

    slow, fast = grid[0][1], grid[2][1]
    assert ldp_fl.chosen_local([record(slow, 0.5), record(fast, 0.6)]) == {
        "local_epochs": 1, "batch_size": 10, "optimizer": "sgd", "lr": 0.1, "momentum": 0.9} == ldp_fl.local_of(fast)
    assert ldp_fl.local_of(base) == ldp_fl.local_of(slow) != ldp_fl.local_of(fast)
    # a run on test, however good, and private runs do not enter the choice; a diverged run loses
    test_run = base.replace(batch_size=7)
    assert ldp_fl.chosen_local([record(slow, 0.5), record(fast, float("nan")), record(test_run, 0.99),
                                record(grid[3][1], 0.99)])["batch_size"] == 32
    assert ldp_fl.chosen_local([record(test_run, 0.9)]) is None
    fixed = FixedRange(0.0, 1.0)
    pairs = ldp_fl.chosen_configs(base, {"batch_size": 10}, seeds=[0, 1], epsilon=2.0, fixed=fixed, adaptive=ADAPTIVE)
    assert [(type(c).__name__, c.batch_size, c.seed, c.epsilon) for _, c in pairs] == [
        ("FedAvgConfig", 10, 0, None), ("FedAvgConfig", 10, 0, 2.0), ("FedAvgConfig", 10, 1, None), ("FedAvgConfig", 10, 1, 2.0)]
    # Table 1 at the chosen setting: both range rules per ε, the pair's own private run not repeated
    t1 = ldp_fl.chosen_configs(base, {"batch_size": 10}, seeds=[0], epsilon=2.0, rule="adaptive",
                               table1_epsilons=[2.0, 5.0], fixed=fixed, adaptive=ADAPTIVE)
    assert [(c.epsilon, c.range) for _, c in t1] == [(None, None), (2.0, ADAPTIVE), (2.0, fixed), (5.0, fixed),
                                                     (5.0, ADAPTIVE)]
    assert {e for e, _ in t1} == {"chosen"} and all(c.batch_size == 10 for _, c in t1)
    # the ε grid at the chosen setting: the pair's rule at every ε, a repeat of the pair's ε not run twice
    g = ldp_fl.chosen_configs(base, {"batch_size": 10}, seeds=[0], epsilon=10.0, rule="adaptive",
                              epsilons=[1.0, 10.0, 2.0], table1_epsilons=[10.0], fixed=fixed, adaptive=ADAPTIVE)
    assert [(c.epsilon, c.range) for _, c in g] == [(None, None), (10.0, ADAPTIVE), (1.0, ADAPTIVE), (2.0, ADAPTIVE),
                                                    (10.0, fixed)]
    assert ldp_fl.chosen_configs(base, {}, seeds=[0], epsilon=2.0, rule="fixed", fixed=fixed,
                                 adaptive=ADAPTIVE)[1][1].range == fixed
    with pytest.raises(ValueError, match="rule must be one of"):
        ldp_fl.chosen_configs(base, {}, seeds=[0], epsilon=2.0, rule=ADAPTIVE, fixed=fixed, adaptive=ADAPTIVE)
    # the range is part of a run's label, so fixed and adaptive runs at one ε are never averaged together
    t = ldp_fl.local_table([record(c, 0.5) for _, c in t1])
    assert t["run"].tolist() == ["non-private", "ε = 2 per weight per round, adaptive range",
                                 "ε = 2 per weight per round, fixed range (0, 1)",
                                 "ε = 5 per weight per round, fixed range (0, 1)",
                                 "ε = 5 per weight per round, adaptive range"] and (t["seeds"] == 1).all()
    assert [ldp_fl.range_label(c) for _, c in t1[:3]] == ["", "adaptive range", "fixed range (0, 1)"]


def test_search_settings_are_checked_as_chapter_parameters():
    from ldptut.notebooks import check_parameters

    check_parameters({"search": [{}, {"batch_size": 10}]}, {"search": ldp_fl.Params.spec()["search"]})
    with pytest.raises(ValueError, match="may vary"):
        check_parameters({"search": [{"seed": 1}]}, {"search": ldp_fl.Params.spec()["search"]})
    with pytest.raises(ValueError, match="dict"):
        check_parameters({"search": [10]}, {"search": ldp_fl.Params.spec()["search"]})


def test_compare_leaves_out_validation_runs_and_the_searchs_optimizers():
    """A run scored on the validation split, or trained with momentum, is not the paper's setting (plain SGD at lr)."""
    held = ldp_fl.ValidationConfig(**{f: v for f, v in FedAvgConfig(
        paper="ldp_fl", dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03, mechanism="two_point",
        epsilon=1.0, range=FIXED_MNIST).to_dict(defaults=False).items() if f != "kind"}, validation=5000)
    rows = [_run(seed=0, accuracy=85.0), _run(seed=1, accuracy=99.0, momentum=0.9)]
    rows.append({**_run(seed=2, accuracy=98.0), "config": held})
    head = ldp_fl.compare(pd.DataFrame(rows)).set_index("claim").loc["mnist ε=1 n=100 fixed (0, 0.075)"]
    assert head["ours (%)"] == "85.0 (1 seed)"


def test_sensitivity_settings_add_a_private_and_non_private_pair_per_local_computation():
    """(c) of the issue: batch 10 with 2 or 5 local epochs is one setting, not the batch and epochs grids' product."""
    base = ldp_fl.chapter_config(dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03)
    grid = ldp_fl.configs(base, seeds=[0], fixed=FIXED_MNIST, adaptive=ADAPTIVE, sensitivity_epsilon=1.0,
                          sensitivity_settings=[{"batch_size": 10, "local_epochs": 2},
                                                {"batch_size": 10, "local_epochs": 5}], parts=["sensitivity"])
    assert [(c.batch_size, c.local_epochs, c.epsilon) for _, c in grid] == [
        (10, 2, None), (10, 2, 1.0), (10, 5, None), (10, 5, 1.0)]
    assert all(type(c) is FedAvgConfig and c.range in (None, FIXED_MNIST) for _, c in grid)  # on test, fixed range
    with pytest.raises(ValueError, match="may vary"):
        ldp_fl.configs(base, seeds=[0], fixed=FIXED_MNIST, adaptive=ADAPTIVE, sensitivity_settings=[{"n_clients": 5}])


def test_seeds_add_paired_seeds_to_both_runs_of_a_sensitivity_setting():
    """``seeds`` gives the non-private partner every added seed (a paired privacy cost per seed); ``private_seeds``
    on top adds private runs only; a seed of the chapter's ``seeds`` or named twice is not repeated."""
    base = ldp_fl.chapter_config(dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03)
    grid = ldp_fl.configs(base, seeds=[0], fixed=FIXED_MNIST, adaptive=ADAPTIVE, parts=["sensitivity"],
                          sensitivity_settings=[{"batch_size": 10, "local_epochs": 5, "seeds": [0, 1, 2, 1],
                                                 "private_seeds": [2, 3]}])
    assert [(c.local_epochs, c.epsilon, c.seed) for _, c in grid] == [
        (5, None, 0), (5, None, 1), (5, None, 2), (5, 1.0, 0), (5, 1.0, 1), (5, 1.0, 2), (5, 1.0, 3)]
    for bad in ([-1], "1, 2", [True]):
        with pytest.raises(ValueError, match="seeds must be a list of seeds"):
            ldp_fl.check_sensitivity_setting({"batch_size": 10, "seeds": bad})


def test_private_seeds_add_seeds_to_a_sensitivity_settings_private_run_only():
    base = ldp_fl.chapter_config(dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03)
    grid = ldp_fl.configs(base, seeds=[0], fixed=FIXED_MNIST, adaptive=ADAPTIVE, parts=["sensitivity"],
                          sensitivity_settings=[{"batch_size": 10, "local_epochs": 5, "private_seeds": [0, 1, 2]}])
    assert [(c.local_epochs, c.epsilon, c.seed) for _, c in grid] == [(5, None, 0), (5, 1.0, 0), (5, 1.0, 1),
                                                                       (5, 1.0, 2)]
    for bad in ([-1], [1.5], 2, [True]):
        with pytest.raises(ValueError, match="private_seeds must be a list of seeds"):
            ldp_fl.check_sensitivity_setting({"batch_size": 10, "private_seeds": bad})
    with pytest.raises(ValueError, match="may vary"):
        ldp_fl.check_sensitivity_setting({"rounds": 5, "private_seeds": [1]})


def test_search_summary_lists_the_search_and_the_test_runs_at_the_chosen_setting_only():
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=2, lr=0.1)
    held = ldp_fl.ValidationConfig(**{k: getattr(base, k) for k in ("paper", "dataset", "model", "n_clients", "rounds",
                                                                  "lr")}, validation=300)

    def record(config, acc):
        return RunRecord(config=config, history=pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc]}))

    recs = [record(held, 0.5), record(held.replace(batch_size=10), 0.7), record(base, 0.6),
            record(base.replace(batch_size=10), 0.8), record(base.replace(batch_size=10, rounds=3), 0.9),
            record(base.replace(batch_size=10, train_eval=True), 0.95)]
    t = ldp_fl.search_summary(recs[::-1])  # rows by local computation, whatever order the runs were stored in
    assert t["local computation"].tolist() == [ldp_fl.local_label(c) for c in (held.replace(batch_size=10), held,
                                                                                base.replace(batch_size=10))]
    assert t["on"].tolist() == ["validation (300 held out)"] * 2 + ["test"]
    assert t["accuracy (%)"].tolist() == [70.0, 50.0, 80.0] and set(t["data"]) == {"digits"}
    assert ldp_fl.search_summary([record(base, 0.6)]).empty
    assert ldp_fl.chosen_settings(recs) == {"digits": ldp_fl.local_of(held.replace(batch_size=10))}
    assert ldp_fl.chosen_settings([record(base, 0.6)]) == {}


def test_compare_never_pools_models_and_lists_the_data_sets_model_first():
    # two readings of "two-layer CNN" at the same claim: one row each, never one mean over both
    runs = pd.DataFrame([_run(model="cnn_fedavg", seed=0, accuracy=97.0), _run(model="cnn_fedavg", mechanism=None,
                                                                                accuracy=99.0),
                         _run(seed=0, accuracy=85.0), _run(seed=0, mechanism=None, accuracy=92.0)])
    table = ldp_fl.compare(runs, dataset="mnist")
    head = table[table["claim"] == "mnist ε=1 n=100 fixed (0, 0.075)"]
    assert head["ours (%)"].tolist() == ["85.0 (1 seed)", "97.0 (1 seed)"]          # cnn2 (SETTINGS) first
    assert head["ours non-private (%)"].tolist() == ["92.0 (1 seed)", "99.0 (1 seed)"]
    assert [s.split(",")[0] for s in head["settings"]] == ["cnn2", "cnn_fedavg"]
    assert len(table) == 1 + len([c for c in ldp_fl.REPORTED if c.where["dataset"] == "mnist"])
    only = ldp_fl.compare(runs, dataset="mnist", model="cnn_fedavg").set_index("claim")
    assert only.loc["mnist ε=1 n=100 fixed (0, 0.075)", "ours (%)"] == "97.0 (1 seed)"
    assert only.loc["Table 1 mnist ε=5 fixed", "ours (%)"] == "not run"


def test_cost_gap_compares_two_models_paired_costs_by_welchs_interval():
    # cnn2's costs 7 and 9 (seeds 0, 1), cnn_fedavg's 2, 3 and 4 (seeds 0-2): 8 - 3 = 5 points
    rows = [_run(seed=s, accuracy=a) for s, a in ((0, 85.0), (1, 83.0))]
    rows += [_run(seed=s, mechanism=None, accuracy=92.0) for s in (0, 1)]
    rows += [_run(model="cnn_fedavg", seed=s, accuracy=a) for s, a in ((0, 97.0), (1, 96.0), (2, 95.0))]
    rows += [_run(model="cnn_fedavg", seed=s, mechanism=None, accuracy=99.0) for s in (0, 1, 2)]
    runs = pd.DataFrame(rows)
    from scipy.stats import ttest_ind

    lo, hi = ttest_ind([7.0, 9.0], [2.0, 3.0, 4.0], equal_var=False).confidence_interval(0.95)
    assert ldp_fl.cost_gap(runs, ("cnn2", "cnn_fedavg")) == (f"5.0 points, Welch 95 % interval [{lo:.1f}, {hi:.1f}] "
                                                             "(2 and 3 pairs)")
    assert ldp_fl.cost_gap(runs.iloc[1:], ("cnn2", "cnn_fedavg")) == ""          # one cnn2 pair: no interval
    assert ldp_fl.cost_gap(runs, ("cnn2", "cnn_fedavg"), batch_size=10) == ""   # nothing at that local computation
    with pytest.raises(ValueError, match="dataset='svhn' has no claim"):
        ldp_fl.cost_gap(runs, ("cnn2", "cnn_fedavg"), dataset="svhn")


def test_reported_at_finds_the_papers_number_for_a_setting_or_none():
    assert ldp_fl.reported_at("mnist", epsilon=1.0, rule="fixed", n_clients=100).value == 96.24
    assert ldp_fl.reported_at("mnist", epsilon=5.0, rule="adaptive", n_clients=100).value == 96.06
    cifar = ldp_fl.reported_at("cifar10", epsilon=10.0, rule="adaptive", n_clients=500)
    assert cifar.value == 61.46 and "5.3" in cifar.source                            # the headline before Table 1
    assert ldp_fl.reported_at("mnist", epsilon=1.0, rule="fixed", n_clients=20) is None   # our default n
    assert ldp_fl.reported_at("mnist", epsilon=2.0, rule="fixed", n_clients=100) is None


def test_pick_rule_and_the_sensitivity_setting_split():
    fixed = FixedRange(0.0, 1.0)
    assert ldp_fl.pick_rule("fixed", fixed=fixed, adaptive=ADAPTIVE) is fixed
    assert ldp_fl.pick_rule("adaptive", fixed=fixed, adaptive=ADAPTIVE) is ADAPTIVE
    with pytest.raises(ValueError, match="sensitivity_range must be one of"):
        ldp_fl.pick_rule("clip", fixed=fixed, adaptive=ADAPTIVE, what="sensitivity_range")
    base = ldp_fl.chapter_config(dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03)
    with pytest.raises(ValueError, match="sensitivity_range must be one of"):
        ldp_fl.configs(base, seeds=[0], fixed=fixed, adaptive=ADAPTIVE, sensitivity_range="clip")
    assert ldp_fl.check_sensitivity_setting({"batch_size": 10, "private_seeds": [1, 2]}) == ({"batch_size": 10},
                                                                                             [], [1, 2])
    assert ldp_fl.check_sensitivity_setting({"batch_size": 10, "seeds": [3]}) == ({"batch_size": 10}, [3], [])
    assert ldp_fl.check_sensitivity_setting({"local_epochs": 5}) == ({"local_epochs": 5}, [], [])
    with pytest.raises(ValueError, match="must be a dict"):
        ldp_fl.check_sensitivity_setting([("batch_size", 10)])


def test_local_table_leaves_std_empty_for_one_seed():
    base = ldp_fl.chapter_config(dataset="digits", model="logreg", n_clients=5, rounds=2, lr=0.1)

    def record(config, acc):
        return RunRecord(config=config, history=pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc]}))

    t = ldp_fl.local_table([record(base, 0.5), record(base.replace(seed=1), 0.7), record(base.replace(batch_size=10),
                                                                                        0.6)])
    assert t["std"].tolist() == [14.1, ""] and t["seeds"].tolist() == [2, 1]          # sample std of 50, 70


def test_steps_table_never_pools_models():
    base = ldp_fl.chapter_config(dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03)
    h = pd.DataFrame({"round": [10], "accuracy": [0.9], "train_accuracy": [0.8], "client_train_accuracy": [0.7]})
    recs = [RunRecord(config=base.replace(train_eval=True), history=h),
            RunRecord(config=base.replace(train_eval=True, model="cnn_fedavg"), history=h.assign(accuracy=[0.5]))]
    t = ldp_fl.steps_table(recs)
    assert t["model"].tolist() == ["cnn2", "cnn_fedavg"] and t["test"].tolist() == [90.0, 50.0]
    assert (t["seeds"] == 1).all()


def test_sensitivity_panels_draw_one_curve_per_varied_setting_and_optimizer():
    base = ldp_fl.chapter_config(dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03)
    rows = [("sgd", 0.03, 0.0, b, e) for b, e in ((10, 1), (32, 1), (32, 2), (10, 2), (10, 5))]
    rows += [("adam", 0.001, 0.0, 10, 1), ("adam", 0.001, 0.0, 10, 2), ("adam", 0.001, 0.0, 32, 1)]
    rows += [("sgd", 0.015, 0.9, 10, 1)]  # a single run of a setting draws nothing
    sens = pd.DataFrame(rows, columns=["optimizer", "lr", "momentum", "batch_size", "local_epochs"])
    assert ldp_fl.sensitivity_panels(sens.iloc[::-1], base=base) == [
        (("sgd", 0.03, 0.0), "batch_size", "local_epochs", 1), (("sgd", 0.03, 0.0), "local_epochs", "batch_size", 10),
        (("sgd", 0.03, 0.0), "local_epochs", "batch_size", 32),
        (("adam", 0.001, 0.0), "batch_size", "local_epochs", 1),
        (("adam", 0.001, 0.0), "local_epochs", "batch_size", 10)]
    assert ldp_fl.sensitivity_panels(sens.iloc[-1:], base=base) == []


def test_paper_view_and_compare_view_name_the_model_in_the_claim_and_fit_the_column():
    # the two readings of "two-layer CNN" at the same claim: the shown claim tells them apart
    runs = pd.DataFrame([_run(model="cnn_fedavg", seed=0, accuracy=97.0),
                         _run(model="cnn_fedavg", mechanism=None, accuracy=99.0),
                         _run(seed=0, accuracy=85.04), _run(seed=0, mechanism=None, accuracy=92.0),
                         _run(seed=0, accuracy=96.123, batch_size=10, local_epochs=5),
                         _run(seed=0, mechanism=None, accuracy=98.0, batch_size=10, local_epochs=5)])
    view = ldp_fl.paper_view(runs, [], "mnist", "cnn2")
    assert view["ours (%)"].tolist() == ["85.0 (1 seed)", "96.12 (1 seed)"]   # batch 32 first; 5 epochs: 2 decimals
    t = ldp_fl.compare_view(pd.concat([view, ldp_fl.paper_view(runs, [], "mnist", "cnn_fedavg")]), caption="c")
    claims = [r[0] for r in t.rows]
    assert claims == ["mnist ε=1 n=100 fixed (0, 0.075) (cnn2, 10 rounds)"] * 2 + [
        "mnist ε=1 n=100 fixed (0, 0.075) (cnn_fedavg, 10 rounds)"]
    assert [r[1] for r in t.rows] == ["batch 32, 1 epoch, sgd lr 0.03", "batch 10, 5 epochs, sgd lr 0.03",
                                      "batch 32, 1 epoch, sgd lr 0.03"]
    assert t.headers[2:] == ("paper (%)", "ours (%)", "95 % CI of ours (%)", "non-private (%)", "privacy cost (points)")
    assert t.rows[0][2] == "96.24"
    assert ldp_fl.view_cell(view, "mnist ε=1 n=100 fixed (0, 0.075)", "ours non-private (%)", local="batch 10, 5") \
        == "98.00 (1 seed)"
    assert ldp_fl.view_cell(view, "Table 1 mnist ε=5 fixed", "ours (%)") == "not run"


def test_chapter_figures_are_as_wide_as_the_column_with_at_most_two_panels_per_row():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from ldptut.display import COLUMN_IN

    h = pd.DataFrame({"round": [1, 2], "accuracy": [0.5, 0.6]})
    fig = ldp_fl.plot_curves({"non-private": h, "ε = 1": h}, reference="non-private")
    assert fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
    sens = pd.DataFrame({"optimizer": ["sgd"] * 4, "lr": [0.03] * 4, "momentum": [0.0] * 4,
                         "batch_size": [10, 32, 32, 32], "local_epochs": [1, 1, 2, 5],
                         "run": ["non-private"] * 4, "accuracy": [90.0, 88.0, 89.0, 91.0]})
    base = ldp_fl.chapter_config(dataset="mnist", model="mlp", n_clients=10, rounds=2, lr=0.03)
    panels = ldp_fl.sensitivity_panels(sens, base=base)
    fig = ldp_fl.plot_sensitivity(sens, panels, base=base)
    assert fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
    assert max(len([a for a in fig.axes if a.get_visible() and a.get_subplotspec().rowspan.start == r])
               for r in range(2)) <= 2
    curve = pd.DataFrame({"T": [0.1, 1.0] * 2, "waiting_correction": [False, False, True, True],
                          "sync_error": [0.0] * 4, "success_mean": [0.9, 0.5, 0.1, 0.1],
                          "success_std": [0.01] * 4, "chance": [0.02] * 4})
    assert ldp_fl.plot_linking(curve).get_size_inches()[0] == pytest.approx(COLUMN_IN)
    plt.close("all")
