"""Tests for ldptut.privacy.shuffle_amplification (Feldman, McMillan, Talwar, FOCS 2021, Thm. 3.1)."""
from __future__ import annotations

import math

import pytest

from ldptut.privacy import shuffle_amplification


def _formula(e0: float, n: int, delta: float) -> float:
    ee = math.exp(e0)
    return math.log(1 + (ee - 1) / (ee + 1) * (8 * math.sqrt(ee * math.log(4 / delta)) / math.sqrt(n) + 8 * ee / n))


def test_known_value():
    assert shuffle_amplification(1.0, 10_000, 1e-5) == pytest.approx(_formula(1.0, 10_000, 1e-5), rel=1e-12)
    assert shuffle_amplification(1.0, 10_000, 1e-5) == pytest.approx(0.19878337685, rel=1e-9)


def test_monotone():
    ns = [10_000, 30_000, 100_000, 1_000_000]
    vals = [shuffle_amplification(1.0, n, 1e-6) for n in ns]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    eps = [0.1, 0.5, 1.0, 2.0, 3.0]
    vals = [shuffle_amplification(e, 100_000, 1e-6) for e in eps]
    assert all(a < b for a, b in zip(vals, vals[1:]))


def test_amplifies_for_large_n():
    for e0 in (0.5, 1.0, 2.0):
        assert shuffle_amplification(e0, 1_000_000, 1e-6) < e0 / 5


def test_outside_range_raises():
    with pytest.raises(ValueError, match="does not apply.*eps0.*n = 100"):
        shuffle_amplification(0.5, 100, 1e-5)  # n too small for any eps0
    limit = math.log(10_000 / (16 * math.log(2 / 1e-5)))
    shuffle_amplification(limit, 10_000, 1e-5)
    with pytest.raises(ValueError, match="does not apply"):
        shuffle_amplification(limit + 1e-9, 10_000, 1e-5)


@pytest.mark.parametrize(
    "args,match",
    [
        ((0.0, 1000, 1e-5), "eps0"),
        ((math.nan, 1000, 1e-5), "eps0"),
        ((1.0, 0, 1e-5), "n"),
        ((1.0, 10.5, 1e-5), "n"),
        ((1.0, 1000, 0.0), "delta"),
        ((1.0, 1000, 1.0), "delta"),
        ((1.0, 1000, math.nan), "delta"),
    ],
)
def test_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        shuffle_amplification(*args)
