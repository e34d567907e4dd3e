"""Tests for ldptut.attacks: the server recovers a client-chosen two-point range exactly."""
from __future__ import annotations

import math

import pytest
import torch

from ldptut.attacks import client_range, range_leak, recover_two_point_range
from ldptut.mechanisms import TwoPoint
from ldptut.rng import generator


def _weights(m: int, k: int, dtype=torch.float64) -> torch.Tensor:
    g = generator(0, "weights")
    scale = torch.rand((m, 1), generator=g, dtype=torch.float64) * 0.2 + 0.01
    shift = torch.randn((m, 1), generator=g, dtype=torch.float64) * 0.05
    return (torch.randn((m, k), generator=g, dtype=torch.float64) * scale + shift).to(dtype)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_recover_exact(eps):
    mech = TwoPoint(epsilon=eps, center=0.3, radius=0.05)
    y = mech.privatize(torch.linspace(0.25, 0.35, 100, dtype=torch.float64), generator(1))
    c, r = recover_two_point_range(y, eps)
    assert float(c) == pytest.approx(0.3, rel=1e-12) and float(r) == pytest.approx(0.05, rel=1e-12)


def test_client_range():
    c, r = client_range(torch.tensor([-0.2, 0.1, 0.4], dtype=torch.float64))
    assert float(c) == pytest.approx(0.1) and float(r) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="weights"):
        client_range(torch.ones(4))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_own_range_leaks_private_min_max(dtype):
    w = _weights(12, 200, dtype)
    df = range_leak(w, epsilon=1.0, public_range=None, generator=generator(2))
    w64 = w.double()
    assert df.true_min.tolist() == w64.amin(1).tolist() and df.true_max.tolist() == w64.amax(1).tolist()
    # recovered endpoints = private min / max, to 1e-6 of the client's range width (float32: rounding)
    assert (df.rel_error < 1e-6).all()
    if dtype == torch.float64:
        assert df.recovered_min.tolist() == pytest.approx(df.true_min.tolist(), rel=1e-6, abs=1e-12)
        assert df.recovered_max.tolist() == pytest.approx(df.true_max.tolist(), rel=1e-6, abs=1e-12)
    assert df.leaked.all()
    assert list(df.columns[:6]) == ["client", "true_min", "true_max", "recovered_min", "recovered_max", "leaked"]


def test_public_range_does_not_leak():
    w = _weights(12, 200)
    df = range_leak(w, epsilon=1.0, public_range=(0.0, 0.5), generator=generator(3))
    assert (df.recovered_min - (-0.5)).abs().max() < 1e-12
    assert (df.recovered_max - 0.5).abs().max() < 1e-12
    assert not df.leaked.any()


def test_determinism():
    w = _weights(4, 50)
    a = range_leak(w, epsilon=2.0, public_range=None, generator=generator(4))
    b = range_leak(w, epsilon=2.0, public_range=None, generator=generator(4))
    assert a.equals(b)


def test_recover_raises_on_single_value():
    y = torch.full((10,), 0.7, dtype=torch.float64)
    with pytest.raises(ValueError, match="one endpoint"):
        recover_two_point_range(y, 1.0)
    with pytest.raises(ValueError, match="2 distinct"):
        recover_two_point_range(torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64), 1.0)


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf])
def test_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        recover_two_point_range(torch.tensor([0.0, 1.0]), eps)


def test_bad_inputs():
    with pytest.raises(ValueError, match="reports"):
        recover_two_point_range(torch.tensor([1.0]), 1.0)
    with pytest.raises(ValueError, match="weights_per_client"):
        range_leak(torch.zeros(5), epsilon=1.0, public_range=None, generator=None)
    with pytest.raises(ValueError, match="public_range"):
        range_leak(_weights(2, 5), epsilon=1.0, public_range=(0.0,), generator=None)
    with pytest.raises(ValueError, match="radius"):
        range_leak(_weights(2, 5), epsilon=1.0, public_range=(0.0, -1.0), generator=None)
