"""python -m ldptut.sweep: a chapter's grid from its parameters, the runs still to train, and sweeps on local Ray
(two tasks; a sweep interrupted after its first run resumes without training that run again)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from ldptut import sweep
from ldptut.devices import resolve_device
from ldptut.experiments import FedAvgConfig
from ldptut.notebooks import ParameterError
from ldptut.papers import pd_ldpfl as PD
from ldptut.runcache import RunCache

ROOT = Path(__file__).resolve().parent.parent


def test_chapter_parameters_are_the_notebook_defaults_overridden_by_a_parameter_file(tmp_path):
    nb = sweep.notebook_parameters(ROOT / "book" / "pd_ldpfl.ipynb")
    assert set(nb) == set(PD.Params.spec())
    assert sweep.chapter_parameters("pd_ldpfl") == nb
    f = tmp_path / "p.yaml"
    f.write_text("clients: [25]\nrounds: 7\n")
    p = sweep.chapter_parameters("pd_ldpfl", f)
    assert p["clients"] == [25] and p["rounds"] == 7 and p["dataset"] == nb["dataset"]
    f.write_text("rounds: 0\n")
    with pytest.raises(ParameterError, match="rounds"):
        sweep.chapter_parameters("pd_ldpfl", f)
    f.write_text("round: 3\n")
    with pytest.raises(ParameterError, match="did you mean 'rounds'"):
        sweep.chapter_parameters("pd_ldpfl", f)
    with pytest.raises(FileNotFoundError, match="no parameter file"):
        sweep.chapter_parameters("pd_ldpfl", tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="unknown chapter 'pd_ldfl'.*pd_ldpfl"):
        sweep.chapter_parameters("pd_ldfl")


@pytest.mark.parametrize("params, count, shared", [
    # defaults: Table 2 (3 methods at 10 clients in the paper's reading + 1 public-bound run), its 3 no-noise twins,
    # the ε sweep (3 methods x 1 seed x (ε 4, 8 and no noise)), Table 1 (3 x 3 transforms), Fig. 6 (2 x 2 starts),
    # no Fig. 8. Shared: the sweep's 6 runs at ε = 8 and without noise are Table 2's, Table 1's affine run is Fig. 6's
    # start (1, 0)
    (None, {"table 2": 4, "table 2, no noise": 3, "ε sweep": 9, "table 1": 9, "fig. 6": 4, "fig. 8": 0}, 7),
    # the MNIST page: 3 methods x 4 client counts in the authors' reading and their twins, the sweep (3 x 3 seeds x
    # (3 ε + no noise)) at its own rounds (nothing shared with Table 2), Table 1 (5 x 5), Fig. 6 (3 x 3)
    ("pd_ldpfl-paper.yaml",
     {"table 2": 12, "table 2, no noise": 12, "ε sweep": 36, "table 1": 25, "fig. 6": 9, "fig. 8": 0}, 1),
    # the CIFAR-10 page: Fig. 8 (3 methods x 4 alphas x 4 ε) beside Table 1 and Fig. 6
    ("pd_ldpfl-cifar10-paper.yaml",
     {"table 2": 0, "table 2, no noise": 0, "ε sweep": 0, "table 1": 25, "fig. 6": 9, "fig. 8": 48}, 1),
])
def test_the_sweep_grid_is_the_chapters_grid(params, count, shared):
    """Every experiment of the chapter at the given parameters, counted per experiment; runs that serve two
    experiments are one key."""
    p = sweep.chapter_parameters("pd_ldpfl", params and ROOT / "book" / "params" / params)
    g = sweep.chapter_grid("pd_ldpfl", p)
    assert {e: sum(1 for x, _ in g if x == e) for e in count} == count
    assert len({c.key() for _, c in g}) == len(g) - shared
    f8 = [c for e, c in g if e == "fig. 8"]
    assert {(c.dataset, c.model, c.rounds) for c in f8} <= {("cifar10", p["cifar_model"], p["cifar_rounds"])}
    assert {c.n_test for _, c in g} == {p["n_test"]}


def test_a_paper_module_without_grid_cannot_be_swept(monkeypatch):
    monkeypatch.delattr(PD, "grid")
    with pytest.raises(NotImplementedError, match="no grid.*chapters that can: ldp_fl, personalized_ldp_fl, corbin, fedsel"):
        sweep.chapter_grid("pd_ldpfl", {})


# ------------------------------------------------------------------ the grids of corbin, fedsel, personalized_ldp_fl
# Each grid against the runs its notebook trained before the notebook built them from grid(): the cells' own code.
def _keys(pairs):
    return [c.key() for _, c in pairs]


def test_corbin_grid_is_the_notebooks_runs_before_lambda_is_chosen():
    """"vs epsilon" (FedAvg, LDP-FL, CoQ-FL at every ε, one seed), "tune λ" (2 methods x λ in {1, 0.2} on the
    validation split, at each ε of smoothing_epsilons) and "fixed range"; the "smoothed" runs need the λ chosen on
    validation: the follow-up stage."""
    from ldptut import fl
    from ldptut.papers import corbin as C

    p = sweep.chapter_parameters("corbin")
    g = sweep.chapter_grid("corbin", p)
    base = C.chapter_config(dataset=p["dataset"], rounds=p["rounds"], n_clients=p["n_clients"], n_train=p["n_train"],
                         n_test=p["n_test"], model=p["model"]).replace(num_rand=p["num_rand"])
    lams = [None] + [l for l in p["smoothing_grid"] if l != 1.0]
    val_base = base.replace(validation=p["validation"], n_test=None)
    notebook = C.configs(base, seeds=p["seeds"], epsilons=p["epsilons"]) + [
        ("tune λ", C.method_config(m, base=val_base.replace(seed=s, smoothing=l), epsilon=e))
        for e in p["smoothing_epsilons"] for m in ("ldp_fl", "coq_fl") for l in lams for s in p["tuning_seeds"]] + [
        ("fixed range", C.method_config(m, base=base.replace(seed=s), epsilon=e).replace(range=fl.InitialModelRange()))
        for e in p["fixed_range_epsilons"] for m in ("ldp_fl", "coq_fl") for s in p["seeds"]]
    assert _keys(g) == _keys(notebook) and [e for e, _ in g] == [e for e, _ in notebook]
    kinds = [e for e, _ in g]
    assert (kinds.count("vs epsilon"), kinds.count("tune λ"), kinds.count("fixed range")) == (1 + 2 * 3, 4, 2)
    assert all(c.validation == p["validation"] and c.n_test is None for e, c in g if e == "tune λ")
    assert not any(c.validation for e, c in g if e != "tune λ")
    # the follow-up: the λ chosen on validation (here λ = 0.2 for CoQ-FL, the plain mean for LDP-FL) on every seed
    from ldptut.runcache import RunRecord, records_table

    acc = {("coq_fl", 0.2): 0.9, ("coq_fl", None): 0.5, ("ldp_fl", 0.2): 0.4, ("ldp_fl", None): 0.6}
    recs = [RunRecord(config=c, provenance={}, history=pd.DataFrame(
        {"round": [1], "accuracy": [acc[(c.method, c.smoothing)]], "loss": [1.0]})) for e, c in g if e == "tune λ"]
    table = records_table(recs)
    table.insert(0, "experiment", "tune λ")
    chosen = C.followup(p, table)
    assert [(c.method, c.smoothing, c.validation, c.epsilon) for _, c in chosen] == [("coq_fl", 0.2, None, 1.0),
                                                                                    ("ldp_fl", None, None, 1.0)]
    assert {c.key() for _, c in chosen} & set(_keys(g)) == {chosen[1][1].key()}  # λ = 1 on test: a "vs epsilon" run
    paper = sweep.chapter_grid("corbin", sweep.chapter_parameters("corbin", ROOT / "book/params/corbin-cifar10-paper.yaml"))
    # 5 seeds, 2 ε; tuning: 2 ε x 2 methods x 10 λ on one seed; fixed range: 2 methods x 5 seeds
    assert len(paper) == len(set(_keys(paper))) == 5 * (1 + 2 * 2) + 2 * 2 * 10 + 2 * 5
    mnist = sweep.chapter_grid("corbin", sweep.chapter_parameters("corbin", ROOT / "book/params/corbin-paper.yaml"))
    assert len(mnist) == len(set(_keys(mnist))) == 3 * (1 + 2 * 4) + 4 * 2 * 3 + 2 * 3


def test_the_followup_stage_needs_the_grid_stored(tmp_path):
    from ldptut.runcache import RunCache

    p = sweep.chapter_parameters("corbin")
    with pytest.raises(ValueError, match="not stored.*run the grid first"):
        sweep.followup_grid("corbin", p, RunCache(tmp_path))
    with pytest.raises(ValueError, match="not stored.*run the grid first"):
        sweep.followup_grid("fedsel", sweep.chapter_parameters("fedsel"), RunCache(tmp_path))
    assert sweep.followup_grid("ldp_fl", sweep.chapter_parameters("ldp_fl"), RunCache(tmp_path)) == []


def _fedsel_notebook_runs(p):
    from ldptut.papers import fedsel as fs

    common = dict(folds=p["folds"], repeats=p["repeats"], eta=p["eta"])
    curve, first = [p["curve_dataset"]], p["models"][:1]
    t3 = ["NP", "PM", "U-PM", "EXP-PM", "PE-PM", "PS-PM", "EXP-PM-C", "PE-PM-C", "PS-PM-C"]
    sel, clear = ["EXP", "PE", "PS"], ["NP", "NP-RS", "NP-K"]
    f2 = sel + clear + ["PM", "PS-PM", "HM", "PS-HM", "Duchi", "PS-Duchi"] + ["EXP-PM", "PE-PM", "PM-RP"]
    acc = ["PM", "EXP-PM", "PE-PM", "PS-PM", "EXP-PM-O", "PE-PM-O", "PS-PM-O"]
    out = [("table 3", c) for _, c in fs.configs(datasets=p["datasets"], models=p["models"], epsilons=[p["epsilon"]],
                                                methods=t3, mu=p["mu"], lr=p["lr"], **common)]
    out += [("tuning", c.replace(lr=a, holdout="validation")) for a in p["lrs"] for _, c in fs.configs(
        datasets=p["datasets"], models=p["models"], epsilons=[p["epsilon"]], methods=t3, mu=p["mu"],
        folds=p["folds"], repeats=p["tune_repeats"], eta=p["eta"])]
    out += [("fig 2", c) for _, c in fs.configs(datasets=curve, models=p["models"], epsilons=p["epsilons"], methods=f2,
                                               mu=p["mu"], lr=p["lr"], **common)]
    out += [("fig 2 tuning", c.replace(lr=a, holdout="validation")) for a in p["lrs"] for _, c in fs.configs(
        datasets=curve, models=p["models"], epsilons=p["epsilons"], methods=p["fig2_tuned_methods"], mu=p["mu"],
        folds=p["folds"], repeats=p["tune_repeats"], eta=p["eta"])]
    out += [("convergence", c.replace(eval_every=5)) for _, c in fs.configs(
        datasets=curve, models=first, epsilons=[4.0], methods=clear + sel, mu=p["mu"], lr=p["lr"], **common)]
    out += [("convergence tuning", c.replace(lr=a, holdout="validation")) for a in p["lrs"] for _, c in fs.configs(
        datasets=curve, models=first, epsilons=[4.0], methods=clear + sel, mu=p["mu"], folds=p["folds"],
        repeats=p["tune_repeats"], eta=p["eta"])]
    out += [("fig 3a", c) for _, c in fs.configs(datasets=curve, models=first, epsilons=p["epsilons"], methods=acc,
                                                mu=p["mu"], lr=p["accumulation_lr"], epochs=p["accumulation_epochs"],
                                                **common)]
    out += [("fig 3b", fs.method_config("PS-PM", base=fs.base_config(curve[0], first[0], mu=m, lr=p["lr"], **common), epsilon=e))
            for m in p["mus"] for e in p["epsilons"]]
    out += [("fig 3b", c) for _, c in fs.configs(datasets=curve, models=first, epsilons=p["epsilons"], methods=["PM"],
                                                lr=p["lr"], **common)]
    out += [("d sweep", c.replace(lr=a, holdout="validation", dim=d)) for d in p["dims"] for a in p["lrs"]
            for _, c in fs.configs(datasets=["syn_l"], models=first, epsilons=[p["epsilon"]],
                                  methods=["NP", "PM", "U-PM", "EXP-PM", "PS-PM"], mu=p["mu"], folds=p["folds"],
                                  repeats=p["tune_repeats"], eta=p["eta"])]
    return out


def test_fedsel_grid_is_the_notebooks_runs(tmp_path):
    from ldptut.papers import fedsel as fs

    for params in (None, ROOT / "book/params/fedsel-paper.yaml"):
        p = sweep.chapter_parameters("fedsel", params)
        g = sweep.chapter_grid("fedsel", p)
        assert _keys(g) == _keys(_fedsel_notebook_runs(p)) and [e for e, _ in g] == [e for e, _ in _fedsel_notebook_runs(p)]
        count = {e: [x for x, _ in g].count(e) for e in fs.GRID_PARTS}
        n_lrs = len(p["lrs"])
        n_dims = len(p["dims"])
        n_f2 = len(p["fig2_tuned_methods"])
        n_data, n_models, n_eps = len(p["datasets"]), len(p["models"]), len(p["epsilons"])
        # Table 3: 9 methods per data set and model; Fig. 2: 12 private methods per ε and 3 without ε per model;
        # Fig. 3a: 7 methods per ε; Fig. 3b: PS-PM at each mu and PM, per ε; the sweep over d: 5 methods per d
        assert count == {"table 3": 9 * n_data * n_models, "tuning": 9 * n_data * n_models * n_lrs,
                         "fig 2": n_models * (12 * n_eps + 3), "fig 2 tuning": n_f2 * n_eps * n_models * n_lrs,
                         "convergence": 6, "convergence tuning": 6 * n_lrs, "fig 3a": 7 * n_eps,
                         "fig 3b": (len(p["mus"]) + 1) * n_eps, "d sweep": 5 * n_lrs * n_dims}
        assert {c.dim for e, c in g if e == "d sweep"} == set(p["dims"])
        assert {c.dim for e, c in g if e != "d sweep"} == {None}
        tuning_parts = ("tuning", "fig 2 tuning", "convergence tuning", "d sweep")
        tuning = [c for e, c in g if e in tuning_parts]
        assert {c.holdout for c in tuning} == {"validation"} and {c.lr for c in tuning} == set(p["lrs"])
        assert {c.holdout for e, c in g if e not in tuning_parts} == {"test"}
        if params is None:   # the defaults (ε 0.5 and 4; Table 3 at ε 2): PM and PS-PM at mu 0.1 at each ε are
            # Fig. 2's runs in Fig. 3b, NP's Table 3 run on ADULT is Fig. 2's, and NP's tuning runs on ADULT are the
            # convergence tuning's
            assert len(set(_keys(g))) == len(g) - 2 * n_eps - 1 - n_lrs
            continue
        # a run may serve two experiments (PM at ε = 2 in table 3 and fig 2; Fig. 2's tuning runs at ε = 2 of
        # Table 3's methods are Table 3's tuning runs on ADULT); the sweep's over d are all distinct (each has its
        # own d, even d = 100, syn-L's own)
        shared = len(set(p["fig2_tuned_methods"]) & {"PM", "U-PM", "EXP-PM", "PE-PM", "PS-PM"}) * 2 * n_lrs
        # the convergence tuning at ε1 = 4 on the first model: NP's runs (no ε) are Table 3's NP tuning runs on ADULT
        assert len(set(_keys(g))) == (214 + 72 * n_lrs + n_f2 * 4 * 2 * n_lrs - shared + 5 * n_lrs * n_dims
                                      + 5 * n_lrs)
    assert n_lrs == 10 and n_dims == 5 and {c.repeats for e, c in g if e not in tuning_parts} == {10}
    assert {c.repeats for e, c in g if e in tuning_parts} == {2} and n_f2 == 10
    assert _keys(fs.grid(p, parts=["tuning"])) == _keys([x for x in g if x[0] == "tuning"])
    with pytest.raises(ValueError, match="unknown parts"):
        fs.grid(p, parts=["fig 9"])
    f = tmp_path / "p.yaml"
    f.write_text("folds: 2\n")
    with pytest.raises(ValueError, match="folds must be >= 3"):   # a type cannot say it: grid() checks it
        sweep.chapter_grid("fedsel", sweep.chapter_parameters("fedsel", f))


def test_personalized_ldp_fl_grid_is_the_notebooks_runs():
    """The paper's grid per experiment, "iid digits" again under the other σ reading, and C's other readings (the
    defaults load digits and Fashion-MNIST: a few seconds; the real-MNIST extension is loaded from the stored runs)."""
    from ldptut.papers import personalized_ldp_fl as W

    p = sweep.chapter_parameters("personalized_ldp_fl")
    g = sweep.chapter_grid("personalized_ldp_fl", p)
    opts = dict(on_empty=p["on_empty"], local_passes=p["local_passes"], alpha=p["alpha"])
    notebook = []
    for key in p["experiments"]:
        proto, name = key.split()
        exp = W.load_experiment(name, proto, W.SETTINGS[proto][name], dirichlet_alpha=p["dirichlet_alpha"])
        notebook += W.configs(exp, p["seeds"], reading=p["sigma_reading"], **opts)
    assert "iid covertype" not in p["experiments"]
    for key in p["compare_reading"]:
        proto, name = key.split()
        exp = W.load_experiment(name, proto, W.SETTINGS[proto][name])
        notebook += W.configs(exp, p["seeds"], reading=W.OTHER_READING[p["sigma_reading"]], **opts)
    assert p["mnist_extension"] == []  # both real-MNIST grids run at paper scale only
    for key in p["compare_c_reading"]:  # C alone, in its three other readings
        proto, name = key.split()
        exp = W.load_experiment(name, proto, W.SETTINGS[proto][name], dirichlet_alpha=p["dirichlet_alpha"])
        notebook += [c for cr in W.C_READINGS[1:] for c in W.configs(exp, p["seeds"], reading=p["sigma_reading"],
                                                                     c_reading=cr, **opts) if c.aggregation == "C"]
    assert [c.key() for _, c in g] == [c.key() for c in notebook] and len(set(_keys(g))) == 177 + 3 * (9 + 6)
    count = {e: [x for x, _ in g].count(e) for e in dict.fromkeys(x for x, _ in g)}
    assert count == {"iid digits": 39, "iid fashion_mnist": 39, "noniid digits": 30, "noniid fashion_mnist": 30,
                     "iid digits (other reading)": 39,
                     **{f"iid digits (C {r})": 9 for r in W.C_READINGS[1:]},
                     **{f"noniid digits (C {r})": 6 for r in W.C_READINGS[1:]}}
    assert {c.reading for e, c in g if e == "iid digits (other reading)"} == {"bracket_outside"}
    # a run's configuration alone trains it: its data split is rebuilt from the configuration
    c = next(c for e, c in g if e == "noniid digits")
    assert (len(c.load_data().y_train), len(c.load_data().y_test)) == (c.n_train, c.n_test)


@pytest.mark.parametrize("chapter, line, name", [
    ("corbin", "num_rand: 2.5", "num_rand"), ("corbin", "epsilons: 1.0", "epsilons"),
    ("fedsel", "epsilons: [0.5, two]", "epsilons"), ("fedsel", "folds: '5'", "folds"),
    ("personalized_ldp_fl", "mnist_extension: 'yes'", "mnist_extension"),
    ("personalized_ldp_fl", "seeds: 3", "seeds")])
def test_a_parameter_of_the_wrong_type_is_rejected(tmp_path, chapter, line, name):
    f = tmp_path / "p.yaml"
    f.write_text(line + "\n")
    with pytest.raises(ValueError, match=f"parameter '{name}' (item 1: )?must be"):
        sweep.chapter_parameters(chapter, f)


def test_pending_groups_skip_stored_runs(tmp_path):
    import pandas as pd

    a = FedAvgConfig(paper="test", dataset="mnist", model="logreg", n_clients=2, rounds=1)
    b = a.replace(seed=1)
    cache = RunCache(tmp_path)
    cache.store(a, pd.DataFrame({"round": [1], "accuracy": [0.5]}), {"commit": "x"})
    groups, done = sweep.pending_groups([a, b, b], cache)
    assert [c.key() for c in done] == [a.key()] and [[c.key() for c in g] for g in groups] == [[b.key()]]


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("gpu")
    if not __import__("torch").cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


ray = pytest.importorskip("ray", reason="the sweep runs on Ray: pip install -e '.[sweep]'")


def _tiny(seed, rounds=1, model="logreg"):
    return FedAvgConfig(paper="test", dataset="mnist", model=model, n_clients=2, rounds=rounds, seed=seed, lr=0.1)


def test_two_task_sweep_on_local_ray_stores_both_and_a_rerun_trains_nothing(tmp_path):
    a, b = _tiny(0), _tiny(1)
    rep = sweep.run_sweep([a, b], cache_dir=tmp_path, num_cpus=2, progress=False)
    assert rep.ok and sorted(rep.trained) == sorted([a.key(), b.key()]) and rep.stored == []
    recs = [RunCache(tmp_path).load(c) for c in (a, b)]
    assert all(r is not None and 0.0 <= r.final_accuracy <= 1.0 for r in recs)
    mtimes = {c.key(): RunCache(tmp_path).path(c).stat().st_mtime_ns for c in (a, b)}
    again = sweep.run_sweep([a, b], cache_dir=tmp_path, num_cpus=2, progress=False)
    assert again.trained == [] and sorted(again.stored) == sorted(mtimes)
    assert {c.key(): RunCache(tmp_path).path(c).stat().st_mtime_ns for c in (a, b)} == mtimes
    # the same run trained in this process gives the same numbers (each device alone is deterministic)
    from ldptut.experiments import Runner

    local = Runner(None, progress=False).run(a)
    assert local.history["accuracy"].tolist() == recs[0].history["accuracy"].tolist()


def test_a_failing_task_is_retried_and_reported_not_dropped(tmp_path):
    bad = FedAvgConfig(paper="test", dataset="no_such_data", model="logreg", n_clients=2, rounds=1)
    good = _tiny(2)
    rep = sweep.run_sweep([bad, good], cache_dir=tmp_path, num_cpus=2, max_retries=1, progress=False)
    assert not rep.ok and rep.trained == [good.key()]
    assert [k for k, _ in rep.failed] == [[bad.key()]] and "no_such_data" in rep.failed[0][1]
    assert "FAILED" in rep.summary()


def test_an_interrupted_sweep_resumes_without_retraining_finished_runs(tmp_path):
    """A sweep of a quick run and a slow one is interrupted (SIGINT) once the quick one is stored; the rerun finds
    it stored and leaves its record untouched; only the slow one is still pending."""
    quick, slow = _tiny(3), _tiny(4, rounds=200, model="mlp")
    cache = tmp_path / "cache"
    script = tmp_path / "go.py"
    # the script restores Python's SIGINT handler: a shell starts a background job (`make test &`) with SIGINT ignored,
    # and its children inherit that, so the sweep could never be interrupted (the cause of this test's past timeouts)
    script.write_text(textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from ldptut.experiments import FedAvgConfig
        from ldptut.sweep import run_sweep
        quick = FedAvgConfig(paper="test", dataset="mnist", model="logreg", n_clients=2, rounds=1, seed=3, lr=0.1)
        slow = FedAvgConfig(paper="test", dataset="mnist", model="mlp", n_clients=2, rounds=200, seed=4, lr=0.1)
        run_sweep([quick, slow], cache_dir={str(cache)!r}, num_cpus=2, progress=False)
    """))
    # its own process group, so that a failing check below can stop it with the local Ray it started
    proc = subprocess.Popen([sys.executable, str(script)], env=os.environ.copy(), start_new_session=True)
    path = RunCache(cache).path(quick)
    try:
        deadline = time.time() + 240
        while not path.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert path.exists(), "the quick run was never stored"
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert RunCache(cache).load(slow) is None
    stamp = path.stat().st_mtime_ns
    groups, done = sweep.pending_groups([quick, slow], RunCache(cache))
    assert [c.key() for c in done] == [quick.key()] and [[c.key() for c in g] for g in groups] == [[slow.key()]]
    rep = sweep.run_sweep([quick], cache_dir=cache, num_cpus=1, progress=False)
    assert rep.trained == [] and rep.stored == [quick.key()] and path.stat().st_mtime_ns == stamp


# ---- the sweep never hangs silently, and bad input is one line -------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["no_such_chapter"], "unknown chapter 'no_such_chapter'"),
    (["fedsel", "--params", "{tmp}/missing.yaml"], "no parameter file"),
    (["fedsel", "--params", "{tmp}/list.yaml"], "must be a mapping of 'name: value' lines, got a YAML list"),
    (["fedsel", "--params", "{tmp}/broken.yaml"], "is not valid YAML at line 2"),
    (["fedsel", "--params", "{tmp}/outside.yaml", "--dry-run"], "lies outside this repository"),
    (["fedsel", "--num-cpus", "0"], "--num-cpus must be >= 1"),
    (["fedsel", "--cpus-per-task", "0"], "--cpus-per-task must be > 0"),
])
def test_bad_arguments_are_one_line_errors_with_exit_code_2(tmp_path, capsys, argv, message):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "broken.yaml").write_text("epsilon: [1,\n")
    (tmp_path / "outside.yaml").write_text(f"run_cache: {tmp_path / 'cache'}\n")
    with pytest.raises(SystemExit) as e:
        sweep.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_cache_outside_the_repository_is_accepted_with_the_flag(tmp_path, capsys):
    (tmp_path / "outside.yaml").write_text(f"run_cache: {tmp_path / 'cache'}\n")
    assert sweep.main(["fedsel", "--params", str(tmp_path / "outside.yaml"), "--dry-run",
                       "--allow-cache-outside-repo"]) == 0
    assert "to train" in capsys.readouterr().out


def test_dry_run_needs_no_ray(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert sweep.main(["pd_ldpfl", "--params", str(ROOT / "book/params/pd_ldpfl-paper.yaml"), "--dry-run"]) == 0
    assert "runs in the grid" in capsys.readouterr().out


def test_unschedulable_tasks_are_refused_before_ray_starts(tmp_path):
    """--cpus-per-task 3 on a 2-CPU local Ray, or a GPU on a machine with none: Ray would queue the tasks forever."""
    ray = pytest.importorskip("ray")
    with pytest.raises(ValueError, match="--cpus-per-task 3 exceeds the largest node's 2 CPUs"):
        sweep.run_sweep([_tiny(0)], cache_dir=tmp_path, num_cpus=2, cpus_per_task=3, progress=False)
    if not sweep._local_gpus():
        with pytest.raises(ValueError, match="--gpus-per-task 1 exceeds .* 0 GPUs"):
            sweep.run_sweep([_tiny(0)], cache_dir=tmp_path, num_cpus=2, gpus_per_task=1, progress=False)
    assert not ray.is_initialized()  # refused before starting it
    with pytest.raises(ValueError, match="num_cpus"):
        sweep.run_sweep([_tiny(0)], cache_dir=tmp_path, num_cpus=0, progress=False)


def test_an_unreachable_cluster_address_fails_within_the_timeout(tmp_path):
    pytest.importorskip("ray")
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match="cannot reach a Ray cluster at 127.0.0.1:1"):
        sweep.run_sweep([_tiny(0)], cache_dir=tmp_path, address="127.0.0.1:1", progress=False)
    assert time.perf_counter() - t0 < sweep.CONNECT_TIMEOUT + 5
    with pytest.raises(ValueError, match="host:port"):
        sweep.check_address("nonsense")
