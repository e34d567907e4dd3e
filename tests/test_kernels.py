"""The fused mechanism kernel (ldptut.kernels): its formula against each mechanism's ``_sample``, its reports against
the closed-form law, its seeds against the per-client generator contract, its errors against the torch path's.

On a machine without a GPU (CI) the kernel runs in Triton's interpreter on CPU tensors (``conftest.py`` sets
``TRITON_INTERPRET=1``); with a GPU the same tests run the compiled kernel on CUDA tensors. The statistical checks
are the ones of ``test_mechanisms.py`` (mean within 4 standard errors, variance within 10 %, binned frequencies
with a Bonferroni z-test at family level 1e-6)."""
from __future__ import annotations

import math

import pytest
import torch

from ldptut import kernels
from ldptut.mechanisms import Hybrid, Laplace, Piecewise, RandomizedResponse, TwoPoint
from ldptut.rng import generator
from test_mechanisms import GRID, frequencies_match, mean_within_se, variance_within

pytestmark = pytest.mark.skipif(not kernels.available(), reason="Triton is not installed")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
N = 40_000  # reports per input value (the interpreter draws about 1e6 per second)

MECHS = [
    pytest.param(TwoPoint(epsilon=1.0, center=0.1, radius=0.8), id="two_point"),
    pytest.param(TwoPoint(epsilon=0.2, center=-1.0, radius=2.0), id="two_point-eps0.2"),
    pytest.param(TwoPoint(epsilon=3.0), id="two_point-eps3"),
]


def _seeds(*values):
    return torch.tensor(values, dtype=torch.int64, device=DEVICE)


@pytest.mark.parametrize("mech", MECHS)
def test_the_kernel_formula_is_the_mechanisms_sample(mech):
    """Given the same uniforms, the kernel's report equals ``_sample(clip(x), u)`` up to float32 rounding
    (a few ulps of the output's scale; discrete reports exactly)."""
    g = torch.Generator().manual_seed(0)
    x = mech.center + mech.radius * 1.3 * (2 * torch.rand(3, 20_000, generator=g) - 1)  # 23 % clipped
    u = torch.rand(3, 20_000, generator=g)
    ours = kernels.privatize_rows(mech, x.to(DEVICE), _seeds(1, 2, 3), uniforms=u.to(DEVICE)).cpu()
    ref = mech._sample(mech._clipped_input(x), u.clone())
    scale = float(mech.radius) * max(mech.a, 2.0)
    assert (ours - ref).abs().max().item() <= 8 * torch.finfo(torch.float32).eps * (scale + abs(float(mech.center)))


@pytest.mark.parametrize("mech", MECHS)
def test_kernel_reports_follow_the_closed_form(mech):
    xs = mech.center + mech.radius * GRID.double()
    x = xs.float().expand(N, -1).T.contiguous().to(DEVICE)  # one row per input value
    y = kernels.privatize_rows(mech, x, _seeds(*range(11, 11 + len(xs)))).cpu().double().T  # (N, values)
    ok, z = mean_within_se(y, mech.mean(xs), mech.variance(xs))
    assert ok, f"mean off: z = {z}"
    ok, rel = variance_within(y, mech.variance(xs))
    assert ok, f"variance off: rel = {rel}"
    v, p = mech.output_distribution(xs)  # the two values, within float32 rounding
    near = [((y - v[:, k]).abs() <= 1e-6 * v.abs().max()).sum(0) for k in (0, 1)]
    counts = torch.stack(near, -1)
    for j in range(len(xs)):
        assert counts[j].sum() == N  # every report is one of the two values
        ok, z = frequencies_match(counts[j], p[j])
        assert ok, (float(xs[j]), z)


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_kernel_randomized_response_law(eps):
    mech = RandomizedResponse(epsilon=eps)
    x = torch.tensor([[0.0], [1.0]]).expand(2, 100_000).contiguous().to(DEVICE)
    y = kernels.privatize_rows(mech, x, _seeds(5, 6)).cpu()
    assert set(y.unique().tolist()) <= {0.0, 1.0}
    for row, p1 in ((0, 1 - mech.p), (1, mech.p)):
        counts = torch.stack([(y[row] == 0).sum(), (y[row] == 1).sum()]).double()
        ok, z = frequencies_match(counts, torch.tensor([1 - p1, p1], dtype=torch.float64))
        assert ok, (row, z)


def test_rows_are_keyed_by_their_seeds_alone():
    """Row i depends only on seeds[i]: the batched call equals one call per row, the same seed repeats the
    same reports in any row, and different seeds give different ones."""
    mech = TwoPoint(epsilon=1.0, center=torch.linspace(-1, 1, 5000), radius=0.5)
    x = torch.randn(4, 5000, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    seeds = _seeds(7, 8, 7, 2 ** 62 - 1)
    batch = kernels.privatize_rows(mech, x, seeds)
    for i in range(4):
        assert torch.equal(batch[i:i + 1], kernels.privatize_rows(mech, x[i:i + 1], seeds[i:i + 1]))
    same_x = x[:1].expand(4, -1).contiguous()
    y = kernels.privatize_rows(mech, same_x, seeds)
    assert torch.equal(y[0], y[2]) and not torch.equal(y[0], y[1]) and not torch.equal(y[0], y[3])


def test_uniforms_are_on_the_float32_grid_and_uniform():
    """Philox uniforms: multiples of 2^-24 in [0, 1) (as float32 torch.rand; Laplace's inverse CDF needs it), with
    the mean and variance of U[0, 1) and a flat histogram."""
    u = kernels.uniforms(_seeds(3, 4), 100_000).cpu().double()
    assert u.shape == (2, 100_000) and u.min() >= 0 and u.max() < 1
    assert torch.equal(u * 2 ** 24, (u * 2 ** 24).round())
    flat = u.reshape(-1, 1)
    assert mean_within_se(flat, 0.5, 1 / 12)[0] and variance_within(flat, 1 / 12, rel_tol=0.02)[0]
    counts = torch.histc(flat, bins=50, min=0, max=1)
    ok, z = frequencies_match(counts, torch.full((50,), 1 / 50, dtype=torch.float64))
    assert ok, z


@pytest.mark.parametrize("mech", MECHS)
def test_the_random_path_is_the_formula_on_those_uniforms(mech):
    x = mech.center + mech.radius * torch.linspace(-1.2, 1.2, 3000).expand(2, -1).to(DEVICE)
    seeds = _seeds(9, 10)
    drawn = kernels.privatize_rows(mech, x, seeds)
    assert torch.equal(drawn, kernels.privatize_rows(mech, x, seeds, uniforms=kernels.uniforms(seeds, 3000)))


def test_seeds_come_from_the_generators():
    g1, g2 = generator(0, "a", device=DEVICE), generator(0, "b", device=DEVICE)
    s = kernels.seeds_from([g1, g2], DEVICE)
    assert s.dtype == torch.int64 and s.shape == (2,) and s[0] != s[1] and (s >= 0).all()
    assert torch.equal(s, kernels.seeds_from([generator(0, "a", device=DEVICE), generator(0, "b", device=DEVICE)], DEVICE))
    assert not torch.equal(s, kernels.seeds_from([g1, g2], DEVICE))  # each call advances the streams


def test_kernel_errors_match_the_torch_path():
    nan = torch.tensor([[0.5, math.nan]], device=DEVICE)
    with pytest.raises(ValueError, match="NaN or inf"):
        kernels.privatize_rows(TwoPoint(epsilon=1.0), nan, _seeds(1))
    with pytest.raises(ValueError, match="only 0 and 1"):
        kernels.privatize_rows(RandomizedResponse(epsilon=1.0), torch.tensor([[0.0, 0.5]], device=DEVICE), _seeds(1))
    with pytest.raises(ValueError, match="cannot represent"):  # two-point reports of ±2e5 in float16
        kernels.privatize_rows(TwoPoint(epsilon=0.01, radius=1000.0), torch.zeros(1, 4096, dtype=torch.float16,
                                                                                 device=DEVICE), _seeds(1))
    with pytest.raises(TypeError, match="grid law"):  # the continuous mechanisms never take the kernel
        kernels.privatize_rows(Piecewise(epsilon=1.0), torch.zeros(1, 3, device=DEVICE), _seeds(1))
    with pytest.raises(ValueError, match="seeds must be"):
        kernels.privatize_rows(TwoPoint(epsilon=1.0), torch.zeros(2, 3, device=DEVICE), _seeds(1))
    with pytest.raises(TypeError, match="float32"):
        kernels.privatize_rows(TwoPoint(epsilon=1.0), torch.zeros(1, 3, dtype=torch.float64, device=DEVICE), _seeds(1))


def test_half_precision_reports_are_computed_in_float32():
    """Half-precision reports that the dtype would round are refused (a bias), as on the torch path; reports it holds
    exactly (here ±3: a = 3 at eps = ln 2) are computed in float32."""
    with pytest.raises(ValueError, match=r"reports -2.16395, which torch.bfloat16 rounds to -2.15625"):
        kernels.privatize_rows(TwoPoint(epsilon=1.0), torch.zeros(1, 8, dtype=torch.bfloat16, device=DEVICE), _seeds(4))
    mech = TwoPoint(epsilon=math.log(2.0))
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.full((1, 4096), 0.25, dtype=dtype, device=DEVICE)
        y = kernels.privatize_rows(mech, x, _seeds(4))
        assert y.dtype == dtype
        lo, hi = (float(v) for v in mech.output_values(torch.tensor(0.25)))
        assert set(y.float().unique().tolist()) <= {float(torch.tensor(lo).to(dtype)), float(torch.tensor(hi).to(dtype))}


def test_dispatch(monkeypatch):
    """privatize() takes the kernel only for CUDA float32 / 16 / bf16 tensors of the listed classes."""
    x = torch.zeros(10)
    assert not kernels.usable(TwoPoint(epsilon=1.0), x)  # CPU tensors keep the torch path (and its streams)

    class Cuda:  # what usable() looks at, without a GPU
        is_cuda, dtype = True, torch.float32

        def numel(self):
            return 10

    assert kernels.usable(TwoPoint(epsilon=1.0), Cuda())
    for grid_law in (Laplace(epsilon=1.0), Piecewise(epsilon=1.0), Hybrid(epsilon=2.0)):
        assert not kernels.usable(grid_law, Cuda())  # their grid sampler runs on every device
    assert not kernels.usable(type("MyTwoPoint", (TwoPoint,), {})(epsilon=1.0), Cuda())  # subclasses may differ
    monkeypatch.setenv("LDPTUT_FUSED", "0")
    assert not kernels.usable(TwoPoint(epsilon=1.0), Cuda())


def test_more_rows_than_one_grid_axis_holds_are_launched_in_chunks(monkeypatch):
    """CUDA grids allow 65,535 blocks on the rows' axis: rows beyond it go in further launches, same reports."""
    mech = TwoPoint(epsilon=1.0, center=torch.linspace(-1, 1, 50), radius=0.5)
    x = torch.randn(7, 50, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    seeds = _seeds(*range(100, 107))
    whole = kernels.privatize_rows(mech, x, seeds)
    monkeypatch.setattr(kernels, "_MAX_ROWS", 3)
    assert torch.equal(kernels.privatize_rows(mech, x, seeds), whole)
