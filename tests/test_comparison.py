"""The mechanism comparison: its configurations (every method through the round engine), the calibration of each method
to the grid point's privacy, the privacy scale against hand computations, and the tables."""
import math

import pandas as pd
import pytest
import torch

from ldptut.accounting import Guarantee
from ldptut.central import central_epsilon
from ldptut.fl import FixedRange, GlobalModelRange
from ldptut.papers import comparison as C
from ldptut.runconfig import config_from_dict
from ldptut.scales import privacy_scales

D_ADULT = 218   # logistic regression on Adult's 108 features, 2 classes: 108 * 2 + 2


def test_the_models_have_the_stated_sizes():
    assert C.dimension("adult") == D_ADULT
    assert C.dimension("mnist") == 26_698


@pytest.mark.parametrize("method", list(C.METHODS))
def test_every_method_builds_its_own_configuration_and_round_trips(method):
    base = C.base_config("adult", rounds=5)
    c = C.method_config(method, base=base, task="adult", epsilon=1.0)
    assert c.method == method
    assert config_from_dict(c.to_dict()) == c   # the stored record rebuilds it
    assert (c.scale_epsilon is None) == (method in C.CONTROLS)
    if method in ("fedsel", "central", "clip_updates", "ldpsign", "two_point_sign"):
        assert c.send == "updates"


def test_each_method_is_calibrated_to_the_grid_point():
    base = C.base_config("adult", rounds=10)
    e = 0.5
    two = C.method_config("two_point", base=base, task="adult", epsilon=e)
    assert (two.epsilon, two.range) == (e, FixedRange(0.0, C.SETTINGS["adult"]["radius"]))
    assert isinstance(C.method_config("two_point_adaptive", base=base, task="adult", epsilon=e).range, GlobalModelRange)
    gauss = C.method_config("gaussian", base=base, task="adult", epsilon=e, delta=1e-6)
    assert (gauss.epsilon, gauss.delta) == (e, 1e-6)
    # FedSel: d ε per model per round, μ of it for the selection
    sel = C.method_config("fedsel", base=base, task="adult", epsilon=e, mu=0.2)
    assert sel.epsilon_select == pytest.approx(0.2 * D_ADULT * e)
    assert sel.epsilon_select + sel.epsilon == pytest.approx(D_ADULT * e)
    # central: the per-weight mechanisms' over-training ε (advanced composition here: 2,180 releases at 0.5), replaced
    cen = C.method_config("central", base=base, task="adult", epsilon=e)
    target = privacy_scales(Guarantee(e), d=D_ADULT, rounds=10)["over_training"]
    assert target < D_ADULT * 10 * e   # advanced composition is tighter than basic at this point
    got = central_epsilon(noise_multiplier=cen.noise_multiplier, rounds=10, delta=1e-5, dimension=D_ADULT,
                          neighbours="replace")
    assert got <= target and got == pytest.approx(target, rel=1e-6)
    assert cen.clip == C.SETTINGS["adult"]["clip"]
    # LdpSign: exact pure ε per weight per round (not the paper's Gaussian (ε, δ)), signs of updates, the server's step
    sign = C.method_config("ldpsign", base=base, task="adult", epsilon=e)
    unit = sign.privatizer()._unit
    assert unit.l2_sensitivity is None and unit.guarantee.epsilon <= e
    assert unit.guarantee.epsilon == pytest.approx(e, rel=1e-11)
    assert sign.guarantee(D_ADULT).epsilon == pytest.approx(e, rel=1e-11)
    assert (sign.send, sign.server_step, sign.range.radius) == ("updates", C.SETTINGS["adult"]["sign_step"],
                                                                C.SETTINGS["adult"]["update_radius"])
    vote = C.method_config("two_point_sign", base=base, task="adult", epsilon=e)
    assert vote.replace(mechanism="ldpsign") == sign   # the control differs from LdpSign in its report only


@pytest.mark.parametrize("bad, match", [
    (dict(report="both"), "report"),
    (dict(mechanism="gaussian", epsilon=1.0, range=FixedRange(0, 1)), "delta"),
    (dict(mechanism="laplace", epsilon=1.0, range=FixedRange(0, 1), delta=1e-5), "delta"),
    (dict(mechanism="laplace", epsilon=1.0, range=FixedRange(0, 1), report="pairs"), "two-point"),
    (dict(mechanism="piecewise", epsilon=1.0, range=FixedRange(0, 1), report="select", send="updates"), "epsilon_select"),
    (dict(mechanism="piecewise", epsilon=1.0, range=FixedRange(0, 1), report="select", epsilon_select=0.1), "updates"),
    (dict(report="central", send="updates", clip=1.0), "noise_multiplier"),
    (dict(report="central", clip=1.0, noise_multiplier=1.0), "updates"),
    (dict(scale_epsilon=-1.0), "scale_epsilon"),
    (dict(mechanism="ldpsign", epsilon=1.0, range=FixedRange(0, 1), send="updates"), "server_step"),
    (dict(mechanism="ldpsign", epsilon=1.0, range=FixedRange(0, 1), server_step=0.01), "updates"),
    (dict(server_step=0.01, send="updates"), "mechanism"),
    (dict(mechanism="laplace", epsilon=1.0, range=FixedRange(0, 1), send="updates", server_step=-1.0), "server_step"),
])
def test_bad_configurations_name_what_is_wrong(bad, match):
    base = C.base_config("adult", rounds=2)
    with pytest.raises(ValueError, match=match):
        base.replace(**bad)


def test_the_grid_has_every_method_at_every_point_and_the_controls_once_per_seed():
    p = C.Params(tasks=["adult"], partitions=["iid", "dirichlet"], epsilons=[0.1, 1.0], seeds=[0, 1, 2])
    g = C.grid(p)
    private = len(C.METHODS) - len(C.CONTROLS)
    assert len(g) == 2 * 3 * (len(C.CONTROLS) + private * 2)
    assert {e for e, _ in g} == {"adult iid", "adult dirichlet"}
    assert all(c.dirichlet_alpha == 0.5 for e, c in g if e == "adult dirichlet")
    assert len({c.key() for _, c in g}) == len(g)   # no two runs share a cache key
    with pytest.raises(ValueError, match="tasks"):
        C.grid({**C.Params(), "tasks": ["cifar10"]})


def test_the_privacy_scale_by_hand():
    """ε = 1 per weight per round on Adult (d = 218) over 10 rounds: 218 per model per round, 2,180 over training by
    basic composition (advanced: sqrt(2 * 2180 ln 1e5) + 2180 (e - 1) = 3,893, larger); FedSel spends 218 per model
    per round (pure, basic over the rounds); central is calibrated to 2,180 over training."""
    frame = C.scales_frame("adult", epsilon=1.0, rounds=10)
    two = frame.loc[C.METHODS["two_point"][0]]
    assert (two["ε per weight per round"], two["ε per model per round"], two["ε over training"]) == (1.0, 218.0, 2180.0)
    assert two["how"] == "basic"
    sel = frame.loc[C.METHODS["fedsel"][0]]
    assert math.isnan(sel["ε per weight per round"]) and sel["ε per model per round"] == pytest.approx(218.0)
    assert sel["ε over training"] == pytest.approx(2180.0)
    cen = frame.loc[C.METHODS["central"][0]]
    assert cen["ε over training"] == pytest.approx(2180.0, rel=1e-6) and cen["ε over training"] <= 2180.0
    # at 0.01 per weight advanced composition wins: sqrt(2 * 2180 ln 1e5) 0.01 + 2180 * 0.01 (e^0.01 - 1)
    small = C.scales_frame("adult", epsilon=0.01, rounds=10).loc[C.METHODS["laplace"][0]]
    by_hand = math.sqrt(2 * 2180 * math.log(1e5)) * 0.01 + 2180 * 0.01 * math.expm1(0.01)
    assert small["ε over training"] == pytest.approx(by_hand) and small["how"] == "advanced"


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """One tiny run of every method (Adult, 5 clients, 300 training and 300 test rows, 2 rounds) through the Runner."""
    from ldptut.experiments import Runner

    runner = Runner(tmp_path_factory.mktemp("cache"), progress=False)
    base = C.base_config("adult", rounds=2, n_clients=5).replace(n_train=300, n_test=300)
    pairs = [("tiny", C.method_config(m, base=base, task="adult", epsilon=1.0, d=D_ADULT)) for m in C.METHODS]
    runner.record_all(pairs)
    return runner.table()


def test_every_method_trains_through_the_engine_and_records_its_epsilon(tiny_runs):
    assert len(tiny_runs) == len(C.METHODS)
    assert tiny_runs["accuracy"].between(0, 100).all()
    by = {c.method: r for c, (_, r) in zip(tiny_runs["config"], tiny_runs.iterrows())}
    hist = {c.method: rec.history for c, rec in zip(tiny_runs["config"], tiny_runs["record"])}
    # the engine's per-model-per-round ε is the scale's (pure mechanisms: d ε; FedSel: ε1 + ε2 = d ε)
    for m in ("two_point", "laplace", "piecewise", "hybrid", "pairs", "fedsel", "two_point_adaptive"):
        assert hist[m]["epsilon_round"].iloc[-1] == pytest.approx(D_ADULT * 1.0), m
    for m in ("fedavg", "clip", "central", "clip_updates"):
        assert "epsilon_round" not in hist[m] or hist[m]["epsilon_round"].isna().all(), m
    # the clipping control is central DP-FedAvg without its noise: same clip, z = 0
    assert by["clip_updates"]["config"].replace(noise_multiplier=by["central"]["config"].noise_multiplier,
                                               scale_epsilon=1.0) == by["central"]["config"]
    with pytest.raises(ValueError, match="central DP-FedAvg"):
        by["clip_updates"]["config"].central_epsilon(D_ADULT, 1e-5)


def test_the_accuracy_table_lines_methods_up_by_grid_point(tiny_runs):
    t = C.accuracy_table(tiny_runs)
    assert list(t.columns) == ["no ε", "ε = 1"]
    assert list(t.index) == [C.METHODS[m][0] for m in C.METHODS]
    assert t.loc[C.METHODS["fedavg"][0], "ε = 1"] == "" and t.loc[C.METHODS["laplace"][0], "no ε"] == ""
    assert C.accuracy_table(tiny_runs.iloc[:0]).empty


def test_compare_pairs_each_papers_mnist_number_with_ours():
    empty = C.compare(pd.DataFrame(columns=["config", "accuracy", "diverged"]))
    assert len(empty) == len(C.REPORTED) == 3
    assert (empty["ours on the benchmark (%)"] == "not run").all()
    assert all(r.epsilon_unit == "per weight per round" for r in C.REPORTED)
    assert {r.where["method"] for r in C.REPORTED} == {"two_point", "pairs", "piecewise"}


def test_the_constant_classifier_is_the_majority_share():
    y = torch.tensor([0, 1, 1, 1])
    assert C.constant_accuracy(y) == 75.0


def test_tuning_runs_are_on_validation_and_the_followup_takes_the_best_rate():
    p = C.Params(epsilons=[1.0], seeds=[0, 1], methods=["fedavg", "laplace", "fedsel"], lr_factors=[0.5, 1.0, 2.0],
                 validation=500, tuning_seeds=[0])
    assert C.tuning(p) and not C.tuning(C.Params())
    tune = C.grid(p)
    assert {e for e, _ in tune} == {"tune adult iid"}
    assert len(tune) == 3 * (1 + 2)      # rates x (fedavg, laplace at 1, fedsel at 1), one tuning seed
    assert all(c.validation == 500 and c.n_test is None and c.seed == 0 for _, c in tune)
    assert {c.lr for _, c in tune} == {0.05, 0.1, 0.2}
    # a fake table of their validation accuracies: laplace best at 0.2, fedsel at 0.05 (0.2 diverged), fedavg tie
    acc = {("laplace", 0.2): 80.0, ("laplace", 0.1): 79.0, ("laplace", 0.05): 60.0, ("fedsel", 0.05): 70.0,
           ("fedsel", 0.1): 65.0, ("fedsel", 0.2): 90.0}
    rows = [{"experiment": e, "config": c, "accuracy": acc.get((c.method, c.lr), 84.0),
             "diverged": c.method == "fedsel" and c.lr == 0.2} for e, c in tune]
    table = pd.DataFrame(rows)
    best = C.choose(table)
    r, u = C.SETTINGS["adult"]["radius"], C.SETTINGS["adult"]["update_radius"]
    assert best[("adult", "iid", "laplace", 1.0)] == (0.2, None, r)
    assert best[("adult", "iid", "fedsel", 1.0)] == (0.05, None, u)      # 0.2 scored higher but diverged
    assert best[("adult", "iid", "fedavg", None)] == (0.05, None, None)  # a tie goes to the smaller rate
    runs = C.followup(p, table)
    assert {e for e, _ in runs} == {"adult iid"} and len(runs) == 2 * 3
    assert all(c.validation is None and C.choice(c) == best[(c.dataset, c.partition, c.method, c.scale_epsilon)]
               for _, c in runs)
    # a setting whose every rate diverged on validation runs at the task's rate (its test runs show the outcome)
    every = table.assign(diverged=table["config"].map(lambda c: c.method == "laplace"))
    assert C.choose(every)[("adult", "iid", "laplace", 1.0)] is None
    assert {c.lr for _, c in C.followup(p, every) if c.method == "laplace"} == {C.SETTINGS["adult"]["lr"]}
    assert C.followup(C.Params(), table) == []
    shown = C.tuning_table(table)
    row = shown.loc[("adult iid", C.METHODS["laplace"][0], "1")]
    assert (row["step chosen"], row["range chosen"], row["validation accuracy (%)"]) == ("0.2", f"{r:g}", "80.0")
    assert row["at the task's step and range (%)"] == "79.0" and row["choices diverged"] == "0 of 3"
    assert shown.loc[("adult iid", C.METHODS["fedsel"][0], "1"), "choices diverged"] == "1 of 3"
    # every choice is at an end of the rates tried (laplace 2x, fedsel and fedavg 0.5x); at the middle rate none
    assert C.at_edge(table, p) == (3, 3)
    middle = table.assign(accuracy=table["config"].map(lambda c: 90.0 if c.lr == 0.1 else 50.0))
    assert C.at_edge(middle, p) == (0, 3)
    with pytest.raises(ValueError, match="test set"):
        C.choose(table.assign(config=table["config"].map(lambda c: c.replace(validation=None))))


def test_the_range_is_tuned_with_the_step_and_methods_without_one_run_once_per_step():
    p = C.Params(epsilons=[1.0], seeds=[0], methods=["fedavg", "two_point_adaptive", "piecewise", "central", "ldpsign"],
                 lr_factors=[1.0, 2.0], range_factors=[0.5, 1.0], validation=500)
    tune = [c for _, c in C.grid(p)]
    assert len({c.key() for c in tune}) == len(tune)
    by = {}
    for c in tune:
        by.setdefault(c.method, set()).add(C.choice(c))
    s = C.SETTINGS["adult"]
    assert by["fedavg"] == {(0.1, None, None), (0.2, None, None)}           # no range: once per step
    assert len(by["two_point_adaptive"]) == 2
    assert by["piecewise"] == {(lr, None, r) for lr in (0.1, 0.2) for r in (0.25, 0.5)}
    assert by["central"] == {(lr, None, cl) for lr in (0.1, 0.2) for cl in (0.05, 0.1)}
    # LdpSign: the step factor scales the server's step η (the clients' rate stays the task's), the range its updates'
    assert by["ldpsign"] == {(0.1, st, r) for st in (s["sign_step"], 2 * s["sign_step"]) for r in (0.025, 0.05)}
    # central's noise multiplier (its ε) does not move with C
    assert len({c.noise_multiplier for c in tune if c.method == "central"}) == 1
    # without tuning the single factors apply to the test runs themselves
    once = C.grid(C.Params(epsilons=[1.0], seeds=[0], methods=["laplace"], range_factors=[2.0]))
    assert [C.tuned_range(c) for _, c in once] == [2 * s["radius"]]


def test_the_leak_table_recovers_own_ranges_and_scales_and_nothing_from_public_ones():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 400, generator=g, dtype=torch.float64) * 0.1
    t = C.leak_table(w, epsilon=1.0, radius=0.5)
    own, public = t.iloc[0], t.iloc[1]
    assert own["clients leaked (%)"] == 100.0 and own["median relative error"] < 1e-9
    assert public["clients leaked (%)"] == 0.0
    scaled, bound = t.iloc[2], t.iloc[3]
    assert scaled["median relative error"] < 0.05          # t̂ = max|report| / C is close to the client's max weight
    assert bound["clients leaked (%)"] == 0.0 and bound["median relative error"] > 0.5   # the bound, not the weights


def test_shuffling_is_reported_beside_the_local_guarantee_where_its_condition_holds():
    from ldptut.accounting import shuffle_amplification

    def shuffled(n):
        base = C.base_config("adult", rounds=10, n_clients=n)
        return C.scale_row(C.method_config("laplace", base=base, task="adult", epsilon=0.3), d=D_ADULT)[
            "ε per weight per round if shuffled"]

    assert shuffled(50) is None   # Feldman et al.'s condition ε0 <= log(n / (16 log(2/δ))) fails for 50 clients
    assert shuffled(1000) == pytest.approx(shuffle_amplification(0.3, 1000, 1e-5)) and shuffled(1000) < 0.3


def test_the_decision_table_picks_the_best_local_method_and_says_level_where_intervals_overlap():
    base = C.base_config("adult", rounds=2)
    rows = []
    acc = {("two_point", 0): [60, 61, 62], ("pairs", 0): [70, 71, 72], ("central", 0): [84, 84.5, 85],
           ("two_point", 1): [84, 84.2, 84.4], ("pairs", 1): [83, 83.1, 83.2], ("central", 1): [84.1, 84.3, 84.5],
           ("fedavg", None): [85, 85, 85]}
    for (m, i), values in acc.items():
        e = None if i is None else (0.1, 1.0)[i]
        for seed, a in enumerate(values):
            c = C.method_config(m, base=base.replace(seed=seed), task="adult", epsilon=e, d=D_ADULT)
            rows.append({"experiment": "adult iid", "config": c, "accuracy": a, "diverged": False})
    dec = C.decision_table(pd.DataFrame(rows), constant=76.4, d=D_ADULT)
    assert list(dec["best local method"]) == [C.METHODS["pairs"][0], C.METHODS["two_point"][0]]
    assert list(dec["its accuracy (%)"]) == [71.0, 84.2]
    assert list(dec["above the constant classifier"]) == [False, True]   # 71 ± 2.5 vs 76.4; 84.2 ± 0.5
    assert list(dec["ahead"]) == ["central", "level"]
    assert dec["ε per model per round"].tolist() == [pytest.approx(21.8), pytest.approx(218.0)]
