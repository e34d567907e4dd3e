"""python -m ldptut.sweep: a chapter's grid from its parameters, the runs still to train, and sweeps on local Ray
(two tasks; a sweep interrupted after its first run resumes without training that run again)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ldptut import sweep
from ldptut.devices import resolve_device
from ldptut.experiments import FedAvgRun
from ldptut.notebooks import ParameterError
from ldptut.papers import pd_ldpfl as PD
from ldptut.runcache import RunCache

ROOT = Path(__file__).resolve().parent.parent


def test_chapter_parameters_are_the_notebook_defaults_overridden_by_a_parameter_file(tmp_path):
    nb = sweep.notebook_parameters(ROOT / "book" / "pd_ldpfl.ipynb")
    assert set(nb) == set(PD.PARAMETERS)
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


def test_the_sweep_grid_is_the_chapters_grid():
    """Every experiment of the chapter at its defaults: Table 2 (3 methods x 2 client counts, 2 public-bound runs),
    Table 1 (5 x 5 transforms), Fig. 6 (3 x 3 starts), Fig. 8 (3 methods x 2 alphas x 1 eps)."""
    p = sweep.chapter_parameters("pd_ldpfl")
    g = sweep.chapter_grid("pd_ldpfl", p)
    count = {e: sum(1 for x, _ in g if x == e) for e in ("table 2", "table 1", "fig. 6", "fig. 8")}
    assert count == {"table 2": 8, "table 1": 25, "fig. 6": 9, "fig. 8": 6}
    assert len({c.key() for _, c in g}) == len(g)
    f8 = [c for e, c in g if e == "fig. 8"]
    assert {(c.dataset, c.model, c.scope, c.rounds, c.n_train) for c in f8} == {("cifar10", "cnn_pool", "model", 3, 5000)}
    with pytest.raises(NotImplementedError, match="no grid"):
        sweep.chapter_grid("wu2023", {})


def test_pending_groups_skip_stored_runs(tmp_path):
    import pandas as pd

    a = FedAvgRun(paper="test", dataset="mnist", model="logreg", n_clients=2, rounds=1)
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
    return FedAvgRun(paper="test", dataset="mnist", model=model, n_clients=2, rounds=rounds, seed=seed, lr=0.1)


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
    bad = FedAvgRun(paper="test", dataset="no_such_data", model="logreg", n_clients=2, rounds=1)
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
    script.write_text(textwrap.dedent(f"""
        from ldptut.experiments import FedAvgRun
        from ldptut.sweep import run_sweep
        quick = FedAvgRun(paper="test", dataset="mnist", model="logreg", n_clients=2, rounds=1, seed=3, lr=0.1)
        slow = FedAvgRun(paper="test", dataset="mnist", model="mlp", n_clients=2, rounds=200, seed=4, lr=0.1)
        run_sweep([quick, slow], cache_dir={str(cache)!r}, num_cpus=2, progress=False)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], env=os.environ.copy())
    path = RunCache(cache).path(quick)
    deadline = time.time() + 240
    while not path.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert path.exists(), "the quick run was never stored"
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    assert RunCache(cache).load(slow) is None
    stamp = path.stat().st_mtime_ns
    groups, done = sweep.pending_groups([quick, slow], RunCache(cache))
    assert [c.key() for c in done] == [quick.key()] and [[c.key() for c in g] for g in groups] == [[slow.key()]]
    rep = sweep.run_sweep([quick], cache_dir=cache, num_cpus=1, progress=False)
    assert rep.trained == [] and rep.stored == [quick.key()] and path.stat().st_mtime_ns == stamp
