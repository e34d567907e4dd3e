"""ldptut.runcache: finished runs stored by configuration and loaded back unchanged."""
import json
import math

import pandas as pd
import pytest

from ldptut.runcache import RunCache, config_key, load_runs


class _Result:
    def __init__(self, acc):
        self.history = pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc], "loss": [2.3, 1 / 3]})


def test_key_ignores_order_and_sees_every_value():
    a = {"epsilon": 1.0, "seed": 0, "range": "FixedRange(center=0.0, radius=0.075)"}
    assert config_key(a) == config_key(dict(reversed(list(a.items()))))
    assert config_key(a) != config_key({**a, "seed": 1})
    assert config_key(a) != config_key({**a, "epsilon": 1.0000001})
    with pytest.raises(ValueError, match="NaN"):
        config_key({"epsilon": math.nan})
    with pytest.raises(TypeError, match="JSON scalars"):
        config_key({"epsilon": object()})


def test_run_trains_once_then_loads_identical_history(tmp_path):
    cache = RunCache(tmp_path)
    calls = []

    def train():
        calls.append(1)
        return _Result(0.9624)

    cfg = {"epsilon": 1.0, "seed": 0}
    first = cache.run(cfg, train)
    second = cache.run(cfg, train)
    assert len(calls) == 1 and not first.loaded and second.loaded
    pd.testing.assert_frame_equal(first.history, second.history, check_exact=True)
    assert second.final_accuracy == 0.9624 and second.provenance["commit"]
    cache.run({"epsilon": 2.0, "seed": 0}, train)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.json"))) == 2


def test_no_directory_always_trains(tmp_path):
    cache = RunCache(None)
    calls = []
    for _ in range(2):
        cache.run({"seed": 0}, lambda: calls.append(1) or _Result(0.5))
    assert len(calls) == 2


def test_file_with_another_configuration_is_an_error(tmp_path):
    cache = RunCache(tmp_path)
    cfg = {"seed": 0}
    cache.run(cfg, lambda: _Result(0.5))
    path = cache.path(cfg)
    doc = json.loads(path.read_text())
    doc["config"]["seed"] = 1
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="does not hold this configuration"):
        cache.run(cfg, lambda: _Result(0.5))


def test_load_runs_lists_every_stored_run_with_its_final_accuracy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    RunCache(a).run({"epsilon": 1.0, "seed": 0}, lambda: _Result(0.9))
    RunCache(a).run({"epsilon": None, "seed": 0}, lambda: _Result(0.95))
    RunCache(b).run({"epsilon": 1.0, "seed": 1}, lambda: _Result(0.8))
    runs = load_runs(a, b)
    assert len(runs) == 3 and set(runs["cache"]) == {a.as_posix(), b.as_posix()}
    got = runs.sort_values(["seed", "accuracy"])[["seed", "accuracy"]].to_numpy().tolist()
    assert got == [[0, 90.0], [0, 95.0], [1, 80.0]]
    assert runs["epsilon"].isna().sum() == 1 and runs["commit"].notna().all()


def test_load_runs_rejects_a_missing_directory_and_a_foreign_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_runs(tmp_path / "missing")
    (tmp_path / "x.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="not a run record"):
        load_runs(tmp_path)
