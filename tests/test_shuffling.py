"""Tests for ldptut.shuffling: LDP-FL's parameter shuffling (Algorithm 3) and the timing attack."""
from __future__ import annotations

import math

import pytest
import torch

from ldptut.rng import generator
from ldptut.shuffling import (
    ShuffledStream,
    aggregate_stream,
    chance_level,
    linking_attack,
    linking_curve,
    linking_success,
    simulate_shuffle,
)


def _payloads(m: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn((m, d), generator=generator(seed, "payloads"), dtype=torch.float64)


def _starts(m: int, spread: float, seed: int = 0) -> torch.Tensor:
    return torch.rand(m, generator=generator(seed, "starts"), dtype=torch.float64) * spread


@pytest.mark.parametrize("correction", [False, True])
def test_aggregate_equals_mean(correction):
    x = _payloads(20, 50)
    s = simulate_shuffle(x, T=1.0, start_times=_starts(20, 5.0), waiting_correction=correction, generator=generator(1))
    assert torch.allclose(aggregate_stream(s, 50), x.mean(0), rtol=0, atol=1e-12)


def test_every_message_delivered_once_and_sorted():
    m, d = 7, 13
    x = _payloads(m, d)
    s = simulate_shuffle(x, T=0.5, start_times=_starts(m, 3.0), generator=generator(2))
    assert len(s) == m * d
    pairs = s.client * d + s.position
    assert torch.equal(torch.sort(pairs).values, torch.arange(m * d))
    assert bool((s.arrival[1:] >= s.arrival[:-1]).all())
    assert torch.equal(s.values, x[s.client, s.position])  # each message carries its own weight
    assert s.position.dtype == torch.int64 and s.client.dtype == torch.int64


def test_arrival_windows():
    m, d, T = 10, 200, 0.3
    start = _starts(m, 4.0)
    s = simulate_shuffle(torch.zeros(m, d), T=T, start_times=start, generator=generator(3))
    own = start[s.client]
    assert bool((s.arrival >= own).all()) and bool((s.arrival <= own + T).all())
    s = simulate_shuffle(torch.zeros(m, d), T=T, start_times=start, waiting_correction=True, generator=generator(3))
    t_s = float(start.max())
    assert bool((s.arrival >= t_s).all()) and bool((s.arrival <= t_s + T).all())


def test_sync_error_leaves_offsets_but_never_arrives_before_start():
    m, d = 10, 100
    start = _starts(m, 4.0)
    s = simulate_shuffle(torch.zeros(m, d), T=0.1, start_times=start, waiting_correction=True, sync_error=1.0,
                         generator=generator(4))
    assert bool((s.arrival >= start[s.client]).all())
    assert float(s.arrival.max() - s.arrival.min()) > 0.5  # residual offsets of order sigma


def test_determinism():
    x = _payloads(5, 30)
    kw = dict(T=1.0, start_times=_starts(5, 2.0), waiting_correction=True, sync_error=0.2)
    a = simulate_shuffle(x, generator=generator(7), **kw)
    b = simulate_shuffle(x, generator=generator(7), **kw)
    c = simulate_shuffle(x, generator=generator(8), **kw)
    for f in ("values", "position", "arrival", "client"):
        assert torch.equal(getattr(a, f), getattr(b, f))
    assert not torch.equal(a.arrival, c.arrival)


def test_linking_attack_succeeds_without_correction():
    m, d = 30, 200
    start = _starts(m, 1000.0)  # spread >> T: min gap between client starts far above T
    s = simulate_shuffle(torch.zeros(m, d), T=0.01, start_times=start, generator=generator(5))
    groups = linking_attack(s, m, d)
    assert linking_success(s, groups) > 0.99


def test_linking_attack_at_chance_with_correction():
    m, d = 30, 300
    s = simulate_shuffle(torch.zeros(m, d), T=0.01, start_times=_starts(m, 1000.0), waiting_correction=True,
                         generator=generator(6))
    success = linking_success(s, linking_attack(s, m, d))
    chance = chance_level(m, d, generator(9), repeats=3)
    assert abs(success - chance) < 0.02
    assert chance < 0.1


def test_linking_attack_does_not_read_client():
    m, d = 8, 40
    s = simulate_shuffle(torch.zeros(m, d), T=0.01, start_times=_starts(m, 100.0), generator=generator(10))
    g1 = linking_attack(s, m, d)
    s.client = torch.zeros_like(s.client)
    assert torch.equal(linking_attack(s, m, d), g1)


def test_linking_attack_unsorted_stream():
    m, d = 6, 25
    s = simulate_shuffle(torch.zeros(m, d), T=0.01, start_times=_starts(m, 100.0), generator=generator(11))
    g = linking_attack(s, m, d)
    p = torch.randperm(m * d, generator=generator(12))
    t = ShuffledStream(values=s.values[p], position=s.position[p], arrival=s.arrival[p], client=s.client[p])
    assert torch.equal(linking_attack(t, m, d), g[p])


def test_linking_success_values():
    m, d = 4, 10
    s = simulate_shuffle(torch.zeros(m, d), T=1.0, generator=generator(13))
    assert linking_success(s, s.client.clone()) == 1.0
    assert linking_success(s, torch.zeros_like(s.client)) == 1.0  # one group: a useless but "complete" guess
    assert linking_success(s, s.position.clone()) == pytest.approx(1 / d)


def test_linking_curve():
    df = linking_curve(m=20, d=100, T_values=[0.001, 10.0], start_spread=10.0, waiting_correction=[False, True],
                       sync_error=[0.0, 5.0], repeats=2, seed=0)
    assert list(df.columns[:5]) == ["T", "waiting_correction", "sync_error", "success_mean", "success_std"]
    assert len(df) == 2 + 4  # no correction: sync_error irrelevant, one row per T
    row = df[(df["T"] == 0.001) & ~df["waiting_correction"]].iloc[0]
    assert row.success_mean > 0.95
    perfect = df[df["waiting_correction"] & (df["sync_error"] == 0.0)]
    assert (perfect.success_mean - perfect.chance).abs().max() < 0.05
    assert df.equals(linking_curve(m=20, d=100, T_values=[0.001, 10.0], start_spread=10.0,
                                   waiting_correction=[False, True], sync_error=[0.0, 5.0], repeats=2, seed=0))


@pytest.mark.parametrize("T", [0.0, -1.0, math.nan, math.inf])
def test_bad_T(T):
    with pytest.raises(ValueError, match="T"):
        simulate_shuffle(torch.zeros(2, 3), T=T, generator=generator(0))


def test_bad_inputs():
    g = generator(0)
    with pytest.raises(ValueError, match="payloads"):
        simulate_shuffle(torch.zeros(3), T=1.0, generator=g)
    with pytest.raises(ValueError, match="payloads"):
        simulate_shuffle(torch.zeros(0, 3), T=1.0, generator=g)
    with pytest.raises(ValueError, match="start_times"):
        simulate_shuffle(torch.zeros(2, 3), T=1.0, start_times=torch.zeros(3), generator=g)
    with pytest.raises(ValueError, match="start_times"):
        simulate_shuffle(torch.zeros(2, 3), T=1.0, start_times=torch.tensor([0.0, math.nan]), generator=g)
    with pytest.raises(ValueError, match="sync_error"):
        simulate_shuffle(torch.zeros(2, 3), T=1.0, sync_error=-1.0, generator=g)
    s = simulate_shuffle(torch.zeros(2, 3), T=1.0, generator=g)
    with pytest.raises(ValueError, match="m \\* d"):
        linking_attack(s, 3, 3)
    with pytest.raises(ValueError, match="position"):
        aggregate_stream(s, 2)
    with pytest.raises(ValueError, match="groups"):
        linking_success(s, torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="m"):
        linking_curve(m=0, d=3, T_values=[1.0], start_spread=1.0)
    with pytest.raises(ValueError, match="T_values"):
        linking_curve(m=2, d=3, T_values=[0.0], start_spread=1.0)
