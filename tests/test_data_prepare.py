"""The generic data preparation of :mod:`ldptut.data.prepare`: exact checks on small tensors, and one on the real
Covertype (its numeric columns back in UCI's units)."""
from __future__ import annotations

import pytest
import torch

from ldptut import data as D
from ldptut.rng import generator


def _ds(n_train: int = 5, n_test: int = 3, d: int = 4) -> D.Dataset:
    x = torch.arange((n_train + n_test) * d, dtype=torch.float32).reshape(-1, d)
    y = torch.arange(n_train + n_test) % 2
    return D.Dataset(name="toy", x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:],
                     classes=["a", "b"], num_classes=2, input_shape=(d,), description="toy")


def test_joined_is_train_then_test():
    ds = _ds()
    x, y = D.joined(ds)
    assert torch.equal(x, torch.cat([ds.x_train, ds.x_test])) and torch.equal(y, torch.cat([ds.y_train, ds.y_test]))
    assert x.dtype == ds.x_train.dtype and y.dtype == ds.y_train.dtype


@pytest.mark.parametrize("n, n_test, n_train", [(100, 30, None), (100, 30, 50), (100, 30, 500), (10, 0, None)])
def test_split_indices_is_a_seeded_partition(n, n_test, n_train):
    tr, te = D.split_indices(n, n_test, generator(0, "t", "split"), n_train=n_train)
    assert len(te) == n_test and len(tr) == (n - n_test if n_train is None else min(n_train, n - n_test))
    both = torch.cat([tr, te])
    assert len(both.unique()) == len(both) and int(both.min()) >= 0 and int(both.max()) < n   # disjoint, in range
    if n_train is None or n_train >= n - n_test:
        assert torch.equal(both.sort().values, torch.arange(n))                              # a partition
    tr2, te2 = D.split_indices(n, n_test, generator(0, "t", "split"), n_train=n_train)
    assert torch.equal(tr, tr2) and torch.equal(te, te2)                                     # deterministic
    tr3, _ = D.split_indices(n, n_test, generator(1, "t", "split"), n_train=n_train)
    assert n - n_test < 2 or not torch.equal(tr, tr3)                                         # the seed matters
    # a smaller train part is a prefix of the full one (the same permutation)
    full, _ = D.split_indices(n, n_test, generator(0, "t", "split"))
    assert torch.equal(tr, full[:len(tr)])
    with pytest.raises(ValueError):
        D.split_indices(n, -1, generator(0, "t"))


def test_subsample_draws_distinct_rows_deterministically():
    x = torch.arange(50, dtype=torch.float32).reshape(25, 2)
    y = torch.arange(25)
    xs, ys = D.subsample(x, y, 10, generator(0, "t", "sub"))
    assert len(xs) == len(ys) == 10 and len(ys.unique()) == 10
    assert torch.equal(xs, x[ys])                                                  # rows stay paired
    xs2, ys2 = D.subsample(x, y, 10, generator(0, "t", "sub"))
    assert torch.equal(xs, xs2) and torch.equal(ys, ys2)
    _, y_all = D.subsample(x, y, 100, generator(0, "t", "sub"))                     # more than there are: all rows
    assert torch.equal(y_all.sort().values, y)
    assert torch.equal(y_all[:10], ys)                                             # the same permutation's prefix
    with pytest.raises(ValueError):
        D.subsample(x, y[:-1], 3, generator(0, "t"))


def test_flattened_scales_each_sample_into_one_row():
    x = torch.rand(6, 1, 4, 3)
    f = D.flattened(x, 16.0)
    assert f.shape == (6, 12) and f.dtype == x.dtype
    assert torch.equal(f, x.reshape(6, 12) * 16.0) and torch.equal(D.flattened(x), x.reshape(6, 12))


def test_max_abs_scaled_gives_unit_columns_and_keeps_zero_columns():
    x = torch.randn(200, 5) * torch.tensor([1.0, 10.0, 0.0, 0.01, 3.0])
    x[:, 3] = -x[:, 3].abs()                                            # a column whose largest |value| is negative
    s = D.max_abs_scaled(x)
    m = s.abs().amax(0)
    assert torch.equal(m[[0, 1, 3, 4]], torch.ones(4)) and torch.equal(s[:, 2], torch.zeros(200))
    assert float(s[:, 3].min()) == -1.0
    assert torch.equal(s, x / x.abs().amax(0).where(x.abs().amax(0) > 0, torch.ones(1)))
    onehot = torch.eye(3)[torch.tensor([0, 2, 2])]                      # 0/1 columns stay 0/1
    assert torch.equal(D.max_abs_scaled(onehot), onehot)
    with pytest.raises(ValueError):
        D.max_abs_scaled(torch.ones(3))


def test_signed_labels_maps_exactly():
    y = torch.tensor([0, 1, 1, 0, 1])
    s = D.signed_labels(y)
    assert s.dtype == torch.float32 and s.tolist() == [-1.0, 1.0, 1.0, -1.0, 1.0]
    f = y.float()
    assert D.signed_labels(f).tolist() == s.tolist() and f.tolist() == [0.0, 1.0, 1.0, 0.0, 1.0]   # input untouched
    with pytest.raises(ValueError):
        D.signed_labels(torch.tensor([0, 2]))


def test_unstandardised_undoes_a_standardisation_exactly():
    raw = torch.tensor([[1859, 0, 1], [3858, 360, 0], [2900, 17, 1], [2500, 200, 0]], dtype=torch.float64)
    mean, std = raw[:, :2].mean(0), raw[:, :2].std(0, unbiased=False)
    x = torch.cat([((raw[:, :2] - mean) / std), raw[:, 2:]], 1).float()
    info = {"num_mean": mean.tolist(), "num_std": std.tolist()}
    back = D.unstandardised(x, info)
    assert back.dtype == x.dtype and torch.equal(back, raw.float())                  # integers, indicator kept
    assert torch.equal(x[:, 2], raw[:, 2].float())                                  # the input is not modified
    near = D.unstandardised(x, info, integers=False)
    assert float((near.double() - raw).abs().max()) < 1e-3                         # not rounded, but close
    with pytest.raises(ValueError):
        D.unstandardised(x[:, :1], info)


def test_unstandardised_covertype_is_uci_units():
    """The loader's Covertype, its 10 numeric columns back in UCI's units: integers, elevation 1,859..3,858 m,
    aspect 0..360 degrees, hillshade indices 0..254/255; the 44 indicator columns unchanged."""
    try:
        ds = D.load_dataset("covertype", download=False)
    except D.DatasetUnavailable as e:
        pytest.skip(str(e))
    x, _ = D.joined(ds)
    raw = D.unstandardised(x, ds.info)
    num = raw[:, :10]
    assert torch.equal(num, num.round()) and torch.equal(raw[:, 10:], x[:, 10:])
    assert (num[:, 0].min().item(), num[:, 0].max().item()) == (1859.0, 3858.0)
    assert (num[:, 1].min().item(), num[:, 1].max().item()) == (0.0, 360.0)
    assert num[:, 6:9].min().item() == 0.0 and num[:, 6:9].max().item() in (254.0, 255.0)
