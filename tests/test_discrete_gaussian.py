"""The exact integer samplers (Canonne, Kamath, Steinke 2020, Algorithms 1-3) against their laws: seeded statistical
tests (chi-square and binomial z-tests at a false-alarm level of about 1e-6 each), reproducibility, and the guards
that raise instead of overflowing int64."""
import math

import pytest
import torch

from ldptut import discrete_gaussian as dg
from ldptut.discrete_gaussian import (bernoulli_exp, bernoulli_ratio, discrete_gaussian, discrete_gaussian_pmf,
                                      discrete_gaussian_variance, discrete_laplace, discrete_laplace_pmf,
                                      uniform_below)

Z_TOL = 5.0                                                   # two-sided normal tail 5.7e-7


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _chi2_quantile(df: int, z: float = 4.753) -> float:
    """The chi-square(df) quantile at 1 - 1e-6 (z = Φ^{-1}(1 - 1e-6)), Wilson-Hilferty's approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2_against(samples: torch.Tensor, pmf, *, min_expected: float = 20.0) -> tuple[float, int]:
    """Chi-square of the integer ``samples`` against ``pmf`` (a function of an integer tensor), over the integers
    with expected count >= ``min_expected`` and one bin each for the two tails beyond them. (statistic, df)."""
    n = samples.numel()
    lo, hi = int(samples.min()), int(samples.max())
    ks = torch.arange(lo - 1, hi + 2)
    p = pmf(ks)
    keep = ks[n * p >= min_expected]
    a, b = int(keep.min()), int(keep.max())
    inner = torch.arange(a, b + 1)
    counts = torch.bincount(samples[(samples >= a) & (samples <= b)] - a, minlength=b - a + 1).double()
    expected = n * pmf(inner)
    p_left = float(pmf(torch.arange(lo - 1, a)).sum()) if a > lo - 1 else 0.0
    p_right = 1.0 - float(pmf(inner).sum()) - p_left
    obs = torch.cat([counts, torch.tensor([float((samples < a).sum()), float((samples > b).sum())])])
    exp = torch.cat([expected, torch.tensor([n * p_left, n * p_right])])
    used = exp > 0
    stat = float((((obs - exp) ** 2)[used] / exp[used]).sum())
    assert float(obs[~used].sum()) == 0
    return stat, int(used.sum()) - 1


def _binomial_z(hits: float, n: int, p: float) -> float:
    return (hits - n * p) / math.sqrt(n * p * (1 - p))


def test_uniform_below_is_uniform_per_element_and_exact_where_rejection_is_frequent():
    g = _gen(0)
    n = torch.tensor([7, 3] * 35_000)
    u = uniform_below(n, g)
    assert u.dtype == torch.int64 and u.shape == n.shape and bool((u >= 0).all()) and bool((u < n).all())
    for size in (7, 3):
        counts = torch.bincount(u[n == size], minlength=size).double()
        expected = counts.sum() / size
        stat = float(((counts - expected) ** 2 / expected).sum())
        assert stat < _chi2_quantile(size - 1), (size, counts.tolist())
    # n = 2^61 + 1: floor(2^62 / n) = 1, so about half of the raw draws are rejected and drawn again
    big = 2 ** 61 + 1
    v = uniform_below(torch.full((40_000,), big), g)
    assert bool((v >= 0).all()) and bool((v < big).all())
    assert abs(_binomial_z(float((v < 2 ** 60).sum()), 40_000, 2 ** 60 / big)) < Z_TOL
    assert uniform_below(torch.ones(5, dtype=torch.int64), g).tolist() == [0] * 5


def test_bernoulli_ratio_frequencies():
    g = _gen(1)
    num = torch.tensor([0, 1, 2, 5, 3])
    den = torch.tensor([4, 3, 7, 5, 2 ** 61 + 1])
    reps = 40_000
    b = bernoulli_ratio(num.repeat(reps), den.repeat(reps), g).view(reps, -1)
    for i in range(len(num)):
        p = int(num[i]) / int(den[i])
        hits = float(b[:, i].sum())
        if p in (0.0, 1.0):
            assert hits == p * reps
        else:
            assert abs(_binomial_z(hits, reps, p)) < Z_TOL, (i, hits / reps, p)


def test_bernoulli_exp_frequencies_for_gamma_below_and_above_one():
    """exp(-γ) for γ = 0, 1/4, 2/3, 1, 3/2, 7/3, 5 and 12.5 in one vectorised call (tensor den), and again with a
    scalar den."""
    g = _gen(2)
    num = torch.tensor([0, 1, 2, 1, 3, 7, 5, 25])
    den = torch.tensor([1, 4, 3, 1, 2, 3, 1, 2])
    reps = 60_000
    b = bernoulli_exp(num.repeat(reps), den.repeat(reps), g).view(reps, -1)
    for i in range(len(num)):
        p = math.exp(-int(num[i]) / int(den[i]))
        hits = float(b[:, i].sum())
        if p == 1.0:
            assert hits == reps
        else:
            assert abs(_binomial_z(hits, reps, p)) < Z_TOL, (int(num[i]), int(den[i]), hits / reps, p)
    for n_, d_ in ((5, 6), (11, 4)):
        hits = float(bernoulli_exp(torch.full((reps,), n_), d_, g).sum())
        assert abs(_binomial_z(hits, reps, math.exp(-n_ / d_))) < Z_TOL


@pytest.mark.parametrize("t", [1, 3])
def test_discrete_laplace_against_its_pmf(t):
    y = discrete_laplace(t=t, shape=(200_000,), generator=_gen(3 + t))
    assert y.dtype == torch.int64
    stat, df = _chi2_against(y, lambda k: discrete_laplace_pmf(k, t))
    assert stat < _chi2_quantile(df), (stat, df)
    assert float(discrete_laplace_pmf(torch.arange(-60 * t, 60 * t + 1), t).sum()) == pytest.approx(1, abs=1e-12)


@pytest.mark.parametrize("t, c", [(1, 1), (2, 3), (3, 1), (1, 5)])
def test_discrete_gaussian_against_its_pmf(t, c):
    """σ² = t c; t = 1 or 3 with c = 1 (t far from CKS's floor(σ) + 1) checks that any t gives the exact law."""
    y = discrete_gaussian(shape=(200_000,), generator=_gen(10 * t + c), t=t, c=c)
    sigma = math.sqrt(t * c)
    stat, df = _chi2_against(y, lambda k: discrete_gaussian_pmf(k, sigma))
    assert stat < _chi2_quantile(df), (stat, df)


def test_discrete_gaussian_at_the_default_scale_has_mean_zero_and_variance_sigma_squared():
    n, sigma2 = 200_000, 2.0 ** 32
    y = discrete_gaussian(shape=(400, 500), generator=_gen(7)).double()
    assert y.shape == (400, 500)
    assert abs(float(y.mean())) < Z_TOL * math.sqrt(sigma2 / n)
    assert abs(float(y.var()) / sigma2 - 1) < Z_TOL * math.sqrt(2 / (n - 1))     # Gaussian fourth moment


def test_the_pmf_and_variance_helpers():
    for sigma in (0.5, 1.0, 3.7, 65536.0):
        half = math.ceil(25 * sigma) + 25
        assert float(discrete_gaussian_pmf(torch.arange(-half, half + 1), sigma).sum()) == pytest.approx(1, abs=1e-12)
    assert discrete_gaussian_variance(65536.0) == pytest.approx(2.0 ** 32, rel=1e-12)
    assert discrete_gaussian_variance(3.0) == pytest.approx(9.0, rel=1e-12)
    assert discrete_gaussian_variance(0.5) < 0.25 * 0.95                        # below σ² for small σ
    assert float(discrete_gaussian_pmf(0, 1.0)) == pytest.approx(1 / sum(math.exp(-k * k / 2) for k in range(-40, 41)))


def test_same_seed_same_samples_and_another_seed_others():
    a = discrete_gaussian(shape=1000, generator=_gen(5))
    assert torch.equal(a, discrete_gaussian(shape=1000, generator=_gen(5)))
    assert not torch.equal(a, discrete_gaussian(shape=1000, generator=_gen(6)))
    assert torch.equal(discrete_laplace(t=4, shape=500, generator=_gen(5)),
                       discrete_laplace(t=4, shape=500, generator=_gen(5)))
    assert discrete_gaussian(shape=(0, 3), generator=_gen(5)).shape == (0, 3)


def test_overflow_guards_raise_instead_of_wrapping(monkeypatch):
    g = _gen(8)
    big = 2 ** 62 - 1
    with pytest.raises(ValueError, match=r"den \* K"):   # γ = 1 - 2^-62: K reaches 2 (but with probability 2^-62)
        bernoulli_exp(torch.tensor([big - 1]), torch.tensor([big]), g)              # and 2 (2^62 - 1) > 2^62
    with pytest.raises(ValueError, match=r"exceeds 2\^62"):      # t = 2^61: den K or U + t V passes 2^62
        discrete_laplace(t=2 ** 61, shape=1000, generator=g)
    with pytest.raises(ValueError, match=r"2 \* t \* c"):
        discrete_gaussian(shape=1, generator=g, t=2 ** 31, c=2 ** 30)
    with pytest.raises(ValueError, match="c must be"):
        discrete_gaussian(shape=1, generator=g, t=1, c=2 ** 31)
    # a draw with | |Y| - c | >= 2^31 (probability e^{-32768} at the default): forced here
    monkeypatch.setattr(dg, "_laplace_attempt",
                        lambda n, t, gen, dev: (torch.full((n,), 2 ** 40), torch.ones(n, dtype=torch.bool)))
    with pytest.raises(ValueError, match=r"exceeds 2\^31 - 1"):
        discrete_gaussian(shape=3, generator=g)


def test_bad_arguments_are_named():
    g = _gen(9)
    with pytest.raises(ValueError, match="n must be"):
        uniform_below(torch.tensor([3, 0]), g)
    with pytest.raises(ValueError, match="n must be"):
        uniform_below(torch.tensor([2 ** 62]), g)
    with pytest.raises(ValueError, match="int64"):
        uniform_below(torch.tensor([3.0]), g)
    with pytest.raises(ValueError, match="num must"):
        bernoulli_ratio(torch.tensor([4]), torch.tensor([3]), g)
    with pytest.raises(ValueError, match="num must"):
        bernoulli_exp(torch.tensor([-1]), torch.tensor([3]), g)
    with pytest.raises(ValueError, match="den must"):
        bernoulli_exp(torch.tensor([1]), 0, g)
    with pytest.raises(ValueError, match="t must be"):
        discrete_laplace(t=0, shape=1, generator=g)
    with pytest.raises(ValueError, match="t must be"):
        discrete_gaussian(shape=1, generator=g, t=1.5, c=1)
    with pytest.raises(ValueError, match="shape must be"):
        discrete_gaussian(shape=(-1,), generator=g)
    with pytest.raises(ValueError, match="sigma must be"):
        discrete_gaussian_pmf(0, 0.0)
