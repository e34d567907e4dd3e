"""Typed run configurations (ldptut.runconfig), the run cache keyed by them (ldptut.runcache), and the runner that
loads or trains them (ldptut.experiments.Runner)."""
import dataclasses
import json
import math
import multiprocessing as mp
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch

from ldptut.experiments import FedAvgConfig, Runner
from ldptut.fl import FixedRange, GlobalModelRange
from ldptut.runcache import RunCache, RunCacheError, load_records, load_runs
from ldptut.runconfig import RunConfig, TrainingEnv, config_from_dict


def _cfg(**kw):
    base = dict(paper="ldp_fl", dataset="mnist", model="cnn2", n_clients=100, rounds=10, lr=0.03, seed=0)
    return FedAvgConfig(**{**base, **kw})


def _history(acc):
    return pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc], "loss": [2.3, 1 / 3]})


def _run(where, config, make, **kw):
    """The record of ``config``: loaded from ``where`` (a runner, a run cache or its directory) or trained by
    ``make()`` (its history) through :meth:`Runner.load_or_train`, the one place that trains and stores; ``kw`` goes
    to the :class:`Runner`."""
    runner = where if isinstance(where, Runner) else Runner(where, progress=False, **kw)
    return runner.load_or_train([config], lambda todo: [make()])[0]


# ---- the typed configuration --------------------------------------------------------------------
def test_values_are_normalised_before_hashing():
    """lr=1 and lr=1.0 are one run; so are a list and a tuple, numpy and Python numbers."""
    assert _cfg(lr=1) == _cfg(lr=1.0) and _cfg(lr=1).key() == _cfg(lr=1.0).key()
    assert isinstance(_cfg(lr=1).lr, float)
    assert _cfg(n_clients=np.int64(100), lr=np.float32(0.5)).key() == _cfg(n_clients=100, lr=0.5).key()
    assert _cfg(n_clients=100.0).n_clients == 100 and isinstance(_cfg(n_clients=100.0).n_clients, int)
    a = _cfg(mechanism="two_point", epsilon=1, range=FixedRange(0, 0.075))
    assert a.key() == _cfg(mechanism="two_point", epsilon=1.0, range=FixedRange(0.0, 0.075)).key()
    assert a.key() != _cfg(mechanism="two_point", epsilon=1.0, range=FixedRange(0.0, 0.0750001)).key()
    assert a.key() != a.replace(seed=1).key() != a.replace(range=GlobalModelRange()).key()


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="FedAvgConfig.lr must be a finite real number, got nan .*a key must equal itself"):
        _cfg(lr=math.nan)
    with pytest.raises(ValueError, match="FedAvgConfig.n_clients must be an integer"):
        _cfg(n_clients=True)
    with pytest.raises(ValueError, match="FedAvgConfig.n_clients must be an integer"):
        _cfg(n_clients=10.5)
    with pytest.raises(ValueError, match="partition must be one of"):
        _cfg(partition="shards")
    with pytest.raises(ValueError, match="mechanism must be one of"):
        _cfg(mechanism="exponential", epsilon=1.0, range=FixedRange())
    with pytest.raises(ValueError, match="needs epsilon and range"):
        _cfg(mechanism="two_point")
    with pytest.raises(ValueError, match="epsilon must be a finite real number > 0, got -1.0"):
        _cfg(mechanism="two_point", epsilon=-1.0, range=FixedRange())


def test_round_trip_through_json_keeps_types_and_key():
    a = _cfg(mechanism="two_point", epsilon=4.0, range=GlobalModelRange(margin=1.5), client_fraction=0.5)
    doc = json.loads(json.dumps(a.to_dict()))
    b = config_from_dict(doc)
    assert b == a and b.key() == a.key() and isinstance(b.range, GlobalModelRange)
    with pytest.raises(ValueError, match="unknown run configuration kind"):
        config_from_dict({**doc, "kind": "nope"})
    with pytest.raises(ValueError, match="no field"):
        config_from_dict({**doc, "colour": "red"})


def test_fields_at_their_default_are_not_part_of_the_key():
    """A field added later with a default keeps every stored key: the key omits defaults."""
    a = _cfg()
    assert "momentum" not in a.to_dict(defaults=False) and "momentum" in a.to_dict()
    assert a.key() == _cfg(momentum=0.0, weight_decay=0).key()


# ---- the cache ----------------------------------------------------------------------------------
def test_run_trains_once_then_loads_identical_history(tmp_path):
    cache = RunCache(tmp_path)
    calls = []

    def train():
        calls.append(1)
        return _history(0.9624)

    first = _run(cache, _cfg(), train)
    second = _run(tmp_path, _cfg(), train)
    assert len(calls) == 1 and not first.loaded and second.loaded
    pd.testing.assert_frame_equal(first.history, second.history, check_exact=True)
    assert second.final_accuracy == 0.9624 and second.config == _cfg()
    prov = second.provenance
    assert prov["commit"] and prov["device"].startswith("cpu: ") and prov["torch"] and prov["seconds"] >= 0
    _run(cache, _cfg(seed=1), train)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.json"))) == 2


def test_without_directory_a_run_is_trained_once_per_session():
    cache = RunCache(None)
    calls = []
    for _ in range(2):
        _run(cache, _cfg(), lambda: calls.append(1) or _history(0.5))
    assert len(calls) == 1


def test_load_only_mode_refuses_to_train(tmp_path, monkeypatch):
    with pytest.raises(RunCacheError, match="not stored .*training is off"):
        _run(tmp_path, _cfg(), lambda: _history(0.5), train=False)
    monkeypatch.setenv("LDPTUT_RUNS_LOAD_ONLY", "1")
    with pytest.raises(RunCacheError, match="LDPTUT_RUNS_LOAD_ONLY"):
        _run(tmp_path, _cfg(), lambda: _history(0.5))
    # the cache itself never trains: it only loads and stores
    assert not hasattr(RunCache, "run") and not hasattr(RunCache, "run_many")


def _write_many(directory, seed, n):
    cache = RunCache(directory)
    for _ in range(n):
        cache.store(_cfg(seed=seed), _history(0.5), {"commit": "x"})


def test_two_writers_of_one_key_both_finish_with_a_valid_record(tmp_path):
    """Every record used to go through the same <key>.tmp: two processes writing one key lost writes
    (FileNotFoundError) and corrupted records. Now each writer has its own temporary file."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_write_many, args=(tmp_path, 0, 60)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0]
    records = load_records(tmp_path)
    assert len(records) == 1 and records[0].config == _cfg(seed=0)
    assert not list(tmp_path.glob(".*.tmp"))


def test_corrupted_and_old_records_are_named(tmp_path):
    cache = RunCache(tmp_path)
    rec = _run(cache, _cfg(), lambda: _history(0.5))
    text = rec.path.read_text()
    rec.path.write_text(text[: len(text) // 2])  # an interrupted copy
    with pytest.raises(RunCacheError, match=f"{rec.path.name} is not a readable run record.*corrupted"):
        RunCache(tmp_path).load(_cfg())
    rec.path.write_text(json.dumps({"format": 1, "key": rec.path.stem, "config": {}, "history": [{}]}))
    with pytest.raises(RunCacheError, match="format 1, not 2.*python -m ldptut.migrate"):
        load_runs(tmp_path)
    doc = json.loads(text)
    doc["config"]["seed"] = 5  # edited by hand: no longer the file's key
    rec.path.write_text(json.dumps(doc))
    with pytest.raises(RunCacheError, match="renamed or edited by hand"):
        load_records(tmp_path)


def test_load_runs_lists_every_stored_run_with_its_final_accuracy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    priv = dict(mechanism="two_point", epsilon=1.0, range=FixedRange(0.0, 0.075))
    _run(a, _cfg(**priv), lambda: _history(0.9))
    _run(a, _cfg(), lambda: _history(0.95))
    _run(b, _cfg(seed=1, **priv), lambda: _history(0.8))
    runs = load_runs(a, b)
    assert len(runs) == 3 and set(runs["cache"]) == {a.as_posix(), b.as_posix()}
    got = runs.sort_values(["seed", "accuracy"])[["seed", "accuracy"]].to_numpy().tolist()
    assert got == [[0, 90.0], [0, 95.0], [1, 80.0]]
    assert runs["epsilon"].isna().sum() == 1 and runs["commit"].notna().all()
    assert set(runs["range"].dropna()) == {"fixed"} and runs["config"].map(lambda c: c.range).iloc[0] is not None


def test_load_runs_rejects_a_missing_directory_and_a_foreign_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_runs(tmp_path / "missing")
    (tmp_path / "x.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(RunCacheError, match="x.json is a run record of format 99"):
        load_runs(tmp_path)


# ---- migration of format-1 records ----------------------------------------------------------------
def test_format_1_records_migrate_to_typed_runs_without_retraining(tmp_path):
    from ldptut.migrate import migrate_v1
    from ldptut.papers import personalized_ldp_fl

    machine = "x86_64 with 2 CPU cores, torch 2.14.1+cu130, no GPU"
    ldp = {"dataset": "mnist", "model": "cnn2", "n_clients": 100, "partition": "iid", "rounds": 2,
           "client_fraction": 1.0, "local_epochs": 1, "batch_size": 32, "lr": 0.03, "send": "weights",
           "aggregator": "mean", "mechanism": "TwoPoint", "epsilon": 1.0,
           "range": "FixedRange(center=0.0, radius=0.075)", "seed": 0}
    (tmp_path / "aaaa.json").write_text(json.dumps({
        "format": 1, "key": "aaaa", "config": ldp,
        "provenance": {"commit": "abc", "date": "2026-11-22", "machine": machine, "seconds": 12.0},
        "history": [{"round": 1, "accuracy": 0.5, "loss": 1.0}, {"round": 2, "accuracy": 0.6, "loss": 0.9}]}))
    setting = {**personalized_ldp_fl.SETTINGS["iid"]["digits"], "epsilons": [1.0], "profiles": {"p": [1, 5, 10]}}
    wu = {"paper": "wu2023", "experiment": "iid digits", "setting": setting, "n_train": 1497, "n_test": 300,
          "data_seed": 0, "dirichlet_alpha": None, "seed": 3, "reading": "sqrt_all", "on_empty": "keep", "rounds": 1,
          "local_passes": 1, "alpha": 0.0001, "dtype": "float64"}
    rows = [{"run": i, "round": 1, "accuracy": 0.1 * i, "clients_used": 3, "seconds": 0.1} for i in range(5)]
    (tmp_path / "bbbb.json").write_text(json.dumps({
        "format": 1, "key": "bbbb", "config": wu,
        "provenance": {"commit": "def", "date": "2026-11-22", "machine": machine, "seconds": 5.0}, "history": rows}))
    assert migrate_v1(tmp_path) == (2, 1 + 5)
    assert not (tmp_path / "aaaa.json").exists() and not (tmp_path / "bbbb.json").exists()
    records = {r.config.key(): r for r in load_records(tmp_path)}
    fed = next(r for r in records.values() if isinstance(r.config, FedAvgConfig))
    assert fed.config.range == FixedRange(0.0, 0.075) and fed.config.mechanism == "two_point"
    assert fed.history["accuracy"].tolist() == [0.5, 0.6]
    assert fed.provenance["torch"] == "2.14.1+cu130" and fed.provenance["migrated_from"] == "aaaa.json (format 1)"
    wus = sorted((r for r in records.values() if isinstance(r.config, personalized_ldp_fl.WuConfig)), key=lambda r: r.final_accuracy)
    assert [(r.config.profile, r.config.aggregation) for r in wus] == [
        ("no noise", "A"), ("all ε = 1", "A"), ("p", "A"), ("p", "B"), ("p", "C")]
    assert wus[0].provenance["seconds"] == 1.0 and wus[0].provenance["trained_together"] == 5
    assert migrate_v1(tmp_path) == (0, 0)  # format 2 already: nothing to do


def test_a_diverged_run_with_non_finite_values_is_stored_and_read_back_as_nan(tmp_path):
    """JSON has no NaN: a blown-up run's accuracy NaN and loss inf are stored as null and read back as NaN."""
    import math

    import pandas as pd

    from ldptut.experiments import FedAvgConfig
    from ldptut.runcache import RunCache

    cfg = FedAvgConfig(paper="test", dataset="mnist", model="mlp", n_clients=2, rounds=2)
    hist = pd.DataFrame({"round": [1, 2], "accuracy": [0.5, math.nan], "loss": [1.0, math.inf], "diverged": [False, True]})
    cache = RunCache(tmp_path)
    cache.store(cfg, hist, {"commit": "x"})
    rec = RunCache(tmp_path).load(cfg)
    assert rec.history["accuracy"].iloc[0] == 0.5 and math.isnan(rec.history["accuracy"].iloc[1])
    assert math.isnan(rec.history["loss"].iloc[1]) and bool(rec.history["diverged"].iloc[1])
    # a run that blew up in its first round: every value of the column was null
    one = FedAvgConfig(paper="test", dataset="mnist", model="mlp", n_clients=2, rounds=1)
    cache.store(one, pd.DataFrame({"round": [1], "accuracy": [math.nan], "diverged": [True]}), {"commit": "x"})
    assert math.isnan(RunCache(tmp_path).load(one).final_accuracy)


def test_records_keep_their_numerics_version_and_pages_flag_older_ones(tmp_path, monkeypatch):
    """A record keeps the numerics version it was trained with (records without one are version 1); after a bump,
    the runner still loads it (same key) and its provenance table marks it "older code"."""
    from ldptut import provenance
    from ldptut.experiments import Runner

    cache = RunCache(tmp_path)
    rec = _run(cache, _cfg(), lambda: _history(0.9))
    assert rec.provenance["numerics"] == provenance.NUMERICS
    assert load_runs(tmp_path)["numerics"].tolist() == [provenance.NUMERICS]
    runner = Runner(tmp_path, progress=False)
    runner.record("grid", _cfg())
    assert runner.provenance()["code"].tolist() == ["current"]
    monkeypatch.setattr(provenance, "NUMERICS", provenance.NUMERICS + 1)
    later = Runner(tmp_path, progress=False)
    later.record("grid", _cfg())  # loaded, not re-trained (its key is the configuration)
    assert later.table()["source"].tolist() == ["stored"]
    assert later.provenance()["code"].tolist() == [f"older code (numerics v{provenance.NUMERICS - 1}, "
                                                   f"now v{provenance.NUMERICS})"]
    assert provenance.numerics_flag(None) == provenance.numerics_flag(1)  # records from before the field: v1


def test_a_numerics_change_flags_only_the_runs_of_the_mechanisms_it_changed():
    """Numerics v2 changed the samplers of Laplace, Piecewise and Hybrid: a v1 run of those is "older code", a v1 run of
    the two-point mechanism (or a non-private one) would be trained to the same numbers now and stays "current"."""
    from ldptut import provenance
    from ldptut.experiments import FedAvgConfig
    from ldptut.fl import FixedRange
    from ldptut.papers.fedsel import FedSelConfig
    from ldptut.papers.personalized_ldp_fl import WuConfig

    assert provenance.NUMERICS >= 2 and provenance.NUMERICS_CHANGES[2][0] == {"laplace", "piecewise", "hybrid"}
    base = dict(paper="p", dataset="mnist", model="mlp", n_clients=2, rounds=1)
    private = dict(epsilon=1.0, range=FixedRange(0.0, 1.0))
    flag = lambda cfg: provenance.numerics_flag(1, provenance.run_mechanisms(cfg))  # noqa: E731
    assert flag(FedAvgConfig(**base, mechanism="two_point", **private)) == "current"
    assert flag(FedAvgConfig(**base)) == "current"
    for m in ("piecewise", "laplace", "hybrid"):
        assert flag(FedAvgConfig(**base, mechanism=m, **private)) == f"older code (numerics v1, now v{provenance.NUMERICS})"
    assert provenance.run_mechanisms(FedSelConfig(paper="fedsel", dataset="adult", model="logistic", n_clients=10, rounds=1,
                                               selection="random", perturbation="hm", epsilon=1.0)) == {"hybrid"}
    assert provenance.numerics_flag(1) == f"older code (numerics v1, now v{provenance.NUMERICS})"  # nothing said: flagged
    assert provenance.numerics_changes(1, ["two_point"]) == [] and provenance.numerics_changes(1, ["hybrid"])[0].startswith("v2: ")
    assert [c[:4] for c in provenance.numerics_changes(1, ["ldpsign"])] == ["v4: "]  # its tail-safe sampler
    assert provenance.numerics_changes(3, ["gaussian"]) == [] and provenance.numerics_changes(4, ["ldpsign"]) == []
    assert [c[:4] for c in provenance.numerics_changes(1, ["gaussian"])] == ["v3: "]  # the Gaussian's grid law
    assert provenance.numerics_changes(2, ["hybrid"]) == [] and provenance.numerics_changes(2, ["gaussian"])
    # Wu et al.'s runs: IID clients use the Gaussian, non-IID ldpsign, a run without noise neither
    wu = dict(paper="wu2023", dataset="digits", model="ovr_logreg", n_clients=2, rounds=1, scenario="personalized",
              profile="p", aggregation="A", delta=1e-3, clip=1.0, n_train=10, n_test=10, q=0.5)
    assert WuConfig(**wu, protocol="iid", epsilons=(1.0, None)).mechanism_names() == ["gaussian"]
    assert WuConfig(**wu, protocol="iid", epsilons=(None, None)).mechanism_names() == []
    assert WuConfig(**wu, protocol="noniid", epsilons=(1.0, 5.0), l2=1.0, dirichlet_alpha=0.5).mechanism_names() == ["ldpsign"]


def test_a_record_names_the_commit_its_process_imported_not_the_head_when_stored(tmp_path, monkeypatch):
    """Training can outlast a commit: the record must name the code that ran (the commit at import)."""
    from ldptut import provenance

    assert provenance.IMPORTED_COMMIT and provenance.IMPORTED_COMMIT == provenance.provenance()["commit"]

    def later_head():
        raise AssertionError("the stored commit must not be looked up when the record is stored")

    monkeypatch.setattr(provenance, "package_commit", later_head)
    rec = _run(tmp_path, _cfg(), lambda: _history(0.5))
    assert rec.provenance["commit"] == provenance.IMPORTED_COMMIT


# ---- nothing lost: an unwritable folder before training, values JSON cannot hold, a record that cannot be written
def test_an_unwritable_cache_directory_is_refused_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = RunCache(blocker / "cache")  # its parent is a file: no record can ever be written there
    trained = []
    with pytest.raises(RunCacheError, match=r"a-file/cache is not writable.*1 run\(s\) would be trained and then lost"):
        _run(cache, _cfg(), lambda: trained.append(1) or _history(0.9))
    assert trained == []  # refused before any training


def test_history_values_json_cannot_hold_are_stored_as_numbers_or_text(tmp_path):
    import numpy as np

    h = _history(0.9)
    h["count"] = pd.Series([np.int64(3), np.int64(4)], dtype=object)
    h["note"] = pd.Series([{"a"}, torch.tensor(2.5)], dtype=object)
    with pytest.warns(RuntimeWarning, match=r"\['count', 'note'\].*stored as numbers or text"):
        rec = _run(tmp_path, _cfg(), lambda: h)
    back = load_records(tmp_path)[0]
    assert back.history["count"].tolist() == [3.0, 4.0] and back.history["note"].tolist() == ["{'a'}", 2.5]
    assert back.history["accuracy"].tolist() == rec.history["accuracy"].tolist()


def test_a_run_that_cannot_be_written_is_pickled_and_the_others_are_stored(tmp_path, monkeypatch):
    import pickle

    from ldptut import runcache as rc

    bad = _cfg(seed=1)
    real = rc._write_record

    def flaky(path, record):
        if path.stem == bad.key():
            raise OSError("disk full")
        real(path, record)

    monkeypatch.setattr(rc, "_write_record", flaky)
    cache = RunCache(tmp_path)
    with pytest.raises(RunCacheError, match=r"1 finished run\(s\) could not be stored.*disk full.*\.pkl") as err:
        Runner(cache, progress=False).load_or_train([_cfg(seed=0), bad], lambda todo: [_history(0.5), _history(0.6)])
    assert [r.config.seed for r in load_records(tmp_path)] == [0]  # the other run is stored
    fallback = str(err.value).rsplit("-> ", 1)[1]
    with open(fallback, "rb") as fh:
        saved = pickle.load(fh)
    assert saved["config"]["seed"] == 1 and saved["history"]["accuracy"].tolist() == [0.1, 0.6]


def test_stored_table_keeps_the_experiment_of_each_stored_run_and_lists_the_missing(tmp_path):
    from ldptut.runcache import stored_table

    cache = RunCache(tmp_path)
    cache.store(_cfg(seed=1), _history(0.5), {"commit": "x"})
    cache.store(_cfg(seed=2), _history(0.7), {"commit": "x"})
    t = stored_table([("a", _cfg(seed=1)), ("b", _cfg(seed=3)), ("c", _cfg(seed=2))], cache)
    assert t["experiment"].tolist() == ["a", "c"] and t["seed"].tolist() == [1, 2]
    assert t.attrs["missing"] == [_cfg(seed=3).key()]
    assert len(stored_table([("b", _cfg(seed=3))], RunCache(tmp_path))) == 0


# ---- the runner trains, a kind's training is given an environment, not the runner ----------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class _EnvProbe(RunConfig):
    """A run kind whose training records what it was given and returns a fixed history."""
    kind: ClassVar[str] = "test-env-probe"
    seen: ClassVar[list] = []

    @classmethod
    def train_group(cls, configs, *, env):
        cls.seen.append(env)
        env.memo(("probe-data",), lambda: cls.seen.append("made") or 1)
        return [_history(0.5 + 0.1 * c.seed) for c in configs]


def test_a_kind_trains_in_a_training_env_with_the_runners_device_memo_and_per_call_progress(tmp_path):
    _EnvProbe.seen.clear()
    runner = Runner(tmp_path, device="cpu", progress=True)
    base = dict(paper="test", dataset="none", model="none", n_clients=1, rounds=2)
    recs = runner.run_all([_EnvProbe(**base, seed=0), _EnvProbe(**base, seed=1)], progress=False)
    assert [r.final_accuracy for r in recs] == [0.5, 0.6]
    runner.run(_EnvProbe(**base, seed=2))
    envs = [e for e in _EnvProbe.seen if isinstance(e, TrainingEnv)]
    assert len(envs) == 3 and all(e.device == "cpu" for e in envs)   # each config alone (group_key: itself)
    assert [e.progress for e in envs] == [False, False, True]       # per call; the runner's default otherwise
    assert _EnvProbe.seen.count("made") == 1                          # one memo, the runner's, shared
    assert not hasattr(envs[0], "run_all") and not hasattr(envs[0], "cache")
    # stored: a second runner loads them and trains nothing
    _EnvProbe.seen.clear()
    again = Runner(tmp_path, progress=False).run_all([_EnvProbe(**base, seed=s) for s in range(3)])
    assert _EnvProbe.seen == [] and [r.loaded for r in again] == [True] * 3
