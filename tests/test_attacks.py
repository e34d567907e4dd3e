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


# ==== PD-LDPFL's Algorithm 2: the private scale t = max(θ) leaks through PM's support ============
from ldptut.attacks import (  # noqa: E402
    dlg_attack,
    dlg_mse,
    mean_image_mse,
    observed_gradient,
    piecewise_scale_leak,
    piecewise_scale_tolerance,
    recover_piecewise_scale,
)
from ldptut.mechanisms import Piecewise  # noqa: E402

# Tolerance: 1 - t̂/|t| <= a_δ = e^{ε/2}(1 - δ^{1/n}) with probability >= 1 - δ for any inputs
# (PM's density is >= e^{-ε/2} / (2C) on [-C, C]); δ = 1e-6 per client. For n = 10,000:
# a_δ ≈ 0.0018 (ε = 0.5), 0.0038 (ε = 2), 0.075 (ε = 8).
DELTA = 1e-6


def test_piecewise_scale_tolerance_formula():
    law = Piecewise(epsilon=2.0).law  # the grid law: design eps_d <= 2, step g, support [-C_d, C_d]
    assert law.epsilon_design <= 2.0
    step = law.g / law.C
    assert piecewise_scale_tolerance(n=10_000, epsilon=2.0, delta=DELTA) == pytest.approx(
        math.exp(law.epsilon_design / 2) * (1 - DELTA ** 1e-4) + step, rel=1e-12)
    assert piecewise_scale_tolerance(n=10_000, epsilon=2.0, delta=DELTA) <= math.e * math.log(1 / DELTA) / 10_000 + step
    assert piecewise_scale_tolerance(n=1, epsilon=50.0, delta=0.5) == 1.0  # capped
    for bad in [dict(n=0, epsilon=1.0, delta=0.1), dict(n=10, epsilon=1.0, delta=1.0)]:
        with pytest.raises(ValueError, match="n|delta"):
            piecewise_scale_tolerance(**bad)


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
def test_own_scale_recovered(eps):
    w = _weights(8, 10_000)
    df = piecewise_scale_leak(w, epsilon=eps, public_bound=None, generator=generator(10))
    assert df.true_scale.tolist() == w.amax(1).tolist()
    tol = piecewise_scale_tolerance(n=10_000, epsilon=eps, delta=DELTA)
    assert (df.rel_error >= -1e-12).all()  # t̂ <= t: reports never leave [-C t, C t] (up to float64 rounding)
    assert (df.rel_error <= tol).all(), (df.rel_error.max(), tol)
    assert (df.max_error <= tol + 1e-12).all()  # the server's t̂ is the client's own max, to within the tolerance


@pytest.mark.parametrize("eps", [0.5, 8.0])
def test_public_bound_recovered_is_public(eps):
    w = _weights(8, 10_000) * torch.logspace(-2, 0, 8, dtype=torch.float64).unsqueeze(1)  # scales 0.01..1
    df = piecewise_scale_leak(w, epsilon=eps, public_bound=0.5, generator=generator(11))
    tol = piecewise_scale_tolerance(n=10_000, epsilon=eps, delta=DELTA)
    assert (df.true_scale == 0.5).all()
    assert ((df.recovered_scale <= 0.5) & (df.recovered_scale >= 0.5 * (1 - tol))).all()
    # measured: t̂ is as far from each client's own max as the public bound is (a client whose max is below 0.1
    # is off by a factor above 5)
    own = w.amax(1).double()
    assert df.max_error.tolist() == pytest.approx(((torch.tensor(df.recovered_scale.tolist()) - own).abs() / own.abs()).tolist())
    assert (df.max_error[(own < 0.1).numpy()] > 4.0).all() and (own < 0.1).sum() >= 3
    # whatever the weights: the clients' true maxima span two decades, the recovered scales do not
    assert df.recovered_scale.max() / df.recovered_scale.min() < 1 / (1 - tol)


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
def test_recovered_scale_exact_law(eps):
    # v = 0 for every report: the grid law's reports are c + r v_k, so x = 1 - t̂/t takes the values 1 - |v_k| / C_d;
    # P(x >= 1 - |v| / C_d) = 1 - P(every report below |v|) = 1 - (1 - M(|v|))^n, M(s) = P(|report| >= s) (exact),
    # E[x] = sum over the distinct |v| (descending) of the gap to the next times P(max|report| < that |v|)
    n, k, t = 1000, 2000, 0.37
    pm = Piecewise(epsilon=eps, radius=t)
    y = pm.privatize(torch.zeros(k, n, dtype=torch.float64), generator(12))
    x = 1 - recover_piecewise_scale(y, eps) / t
    values, probs = pm.law.values, pm.law.probs(torch.tensor(0.0, dtype=torch.float64))
    mags = values.abs().unique().flip(0)                                      # |v|, largest first
    at_least = torch.stack([probs[values.abs() >= m].sum() for m in mags])    # M(|v|)
    below = (1 - at_least).clamp(min=0) ** n                                  # P(max |report| < |v|)
    gaps = (mags[:-1] - mags[1:]) / pm.law.C
    expected = float((gaps * below[:-1]).sum())                               # E[x] = sum of P(x > level) over steps
    assert abs(float(x.mean()) - expected) < 4 * float(x.std()) / math.sqrt(k) + 1e-12
    # the δ-tolerance is a one-sided (1 - δ) bound: at most about δ of the rows exceed it
    frac = float((x > piecewise_scale_tolerance(n=n, epsilon=eps, delta=0.05)).double().mean())
    assert frac <= 0.05 + 4 * math.sqrt(0.05 * 0.95 / k)


def test_recover_piecewise_scale_dims():
    y = Piecewise(epsilon=1.0, radius=2.0).privatize(torch.zeros(3, 500, dtype=torch.float64), generator(13))
    per_row = recover_piecewise_scale(y, 1.0)
    assert per_row.shape == (3,) and (per_row <= 2.0).all() and (per_row > 1.9).all()
    assert torch.equal(recover_piecewise_scale(y.T, 1.0, dim=0), per_row)
    assert float(recover_piecewise_scale(y, 1.0, dim=None)) == float(per_row.max())
    with pytest.raises(ValueError, match="dim"):
        recover_piecewise_scale(y, 1.0, dim=2)


def test_paper_max_not_max_abs_clips():
    # t = max(θ) as in Algorithm 2: weights below -t give θ/t < -1, clipped by PM to -1
    g = generator(14)
    w = torch.randn(2000, generator=g, dtype=torch.float64) * 0.1
    w[0] = -1.0  # the largest |w| is negative
    neg = -(torch.rand(300, generator=g, dtype=torch.float64) + 0.1)  # all negative: θ/t >= 1
    df = piecewise_scale_leak([w, neg], epsilon=2.0, public_bound=None, generator=generator(15))
    t = float(w.max())
    assert df.clipped[0] == int((w / t < -1).sum()) >= 1
    assert df.true_scale[1] == float(neg.max()) < 0 and df.clipped[1] == 299  # all but the max itself
    assert df.true_max_abs[0] == 1.0
    assert (df.rel_error <= piecewise_scale_tolerance(n=300, epsilon=2.0, delta=DELTA)).all()  # t̂ -> |t|
    assert df.n.tolist() == [2000, 300]
    with pytest.raises(ValueError, match="max"):
        piecewise_scale_leak([-neg.abs() * 0.0], epsilon=1.0, public_bound=None, generator=None)


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf, True])
def test_piecewise_scale_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        recover_piecewise_scale(torch.ones(5), eps)
    with pytest.raises(ValueError, match="epsilon"):
        piecewise_scale_leak(_weights(2, 5), epsilon=eps, public_bound=None, generator=None)


def test_piecewise_scale_bad_inputs():
    with pytest.raises(ValueError, match="reports"):
        recover_piecewise_scale([1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="reports"):
        recover_piecewise_scale(torch.tensor([1.0, math.nan]), 1.0)
    with pytest.raises(ValueError, match="public_bound"):
        piecewise_scale_leak(_weights(2, 5), epsilon=1.0, public_bound=0.0, generator=None)
    with pytest.raises(ValueError, match="weights_per_client"):
        piecewise_scale_leak(torch.zeros(5), epsilon=1.0, public_bound=None, generator=None)
    with pytest.raises(ValueError, match="weights_per_client"):
        piecewise_scale_leak([], epsilon=1.0, public_bound=None, generator=None)


def test_piecewise_scale_leak_determinism():
    w = _weights(3, 100)
    a = piecewise_scale_leak(w, epsilon=2.0, public_bound=None, generator=generator(16))
    b = piecewise_scale_leak(w, epsilon=2.0, public_bound=None, generator=generator(16))
    assert a.equals(b)


# ==== DLG (Zhu, Liu, Han, NeurIPS 2019) on a tiny sigmoid MLP ====================================
def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # the test's own model initialisation (torch's global RNG, restored below)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.Sigmoid(), torch.nn.Linear(16, 3)).double()


@pytest.fixture(scope="module")
def dlg_setup():
    state = torch.get_rng_state()
    try:
        model, other = _mlp(0), _mlp(1)
    finally:
        torch.set_rng_state(state)
    x = torch.randn(1, 20, generator=generator(20, "x"), dtype=torch.float64)
    y = torch.tensor([2])
    return model, other, x, y, observed_gradient(model, x, y)


def _rel_mse(r, x) -> float:
    return float(dlg_mse(r.inputs, x).mean()) / float((x ** 2).mean())


def _attack(model, target, seed=21, **kw):
    return dlg_attack(model, target, input_shape=(20,), num_classes=3, generator=generator(seed), **kw)


def test_observed_gradient_matches_autograd(dlg_setup):
    model, _, x, y, grad = dlg_setup
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert list(grad) == [k for k, _ in model.named_parameters()]
    for k, p in model.named_parameters():
        assert torch.allclose(grad[k], p.grad, rtol=1e-12, atol=1e-15)
    model.zero_grad()
    soft = observed_gradient(model, x, torch.nn.functional.one_hot(y, 3).double())
    assert all(torch.allclose(soft[k], grad[k], rtol=1e-12, atol=1e-15) for k in grad)


def test_dlg_exact_gradient_reconstructs(dlg_setup):
    model, _, x, y, grad = dlg_setup
    before = {k: p.detach().clone() for k, p in model.state_dict().items()}
    r = _attack(model, grad)
    assert r.converged and r.loss_history[-1] < 1e-6
    assert _rel_mse(r, x) < 1e-3
    assert r.labels.tolist() == y.tolist() and float(r.soft_labels[0, 2]) > 0.9
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # model untouched
    # the flat gradient (named_parameters order) is the same target
    flat = torch.cat([v.reshape(-1) for v in grad.values()])
    r2 = _attack(model, flat)
    assert torch.equal(r.inputs, r2.inputs)


def test_dlg_noisy_gradient_fails(dlg_setup):
    model, _, x, _, grad = dlg_setup
    exact = _rel_mse(_attack(model, grad), x)
    g = generator(22, "noise")
    noisy = {k: v + 0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in grad.items()}
    bad = _rel_mse(_attack(model, noisy), x)
    assert bad > 0.05 and bad > 1e3 * exact
    # PD-LDPFL's upload at ε = 8: θ' = θ - lr ∇, Algorithm 2 (t = max θ' per layer, PM, × t), the
    # server's gradient estimate (θ - θ'*) / lr
    lr, pm = 0.1, Piecewise(epsilon=8.0)
    target = {}
    for k, p in model.named_parameters():
        new = p.detach() - lr * grad[k]
        t = float(new.max())
        target[k] = (p.detach() - pm.privatize(new / t, g) * t) / lr
    assert _rel_mse(_attack(model, target), x) > 0.05


def test_dlg_with_a_differently_initialised_model_fails(dlg_setup):
    # PD-LDPFL's "natural resistance" (NOTES.md section 5): the authors attacked with a model other
    # than the one that produced the gradient. With the right model DLG succeeds (test above).
    _, other, x, _, grad = dlg_setup
    assert _rel_mse(_attack(other, grad), x) > 0.05


def test_dlg_determinism(dlg_setup):
    model, _, _, _, grad = dlg_setup
    a, b = _attack(model, grad, seed=23, steps=5), _attack(model, grad, seed=23, steps=5)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.soft_labels, b.soft_labels)
    assert a.loss_history == b.loss_history
    c = _attack(model, grad, seed=24, steps=1)
    assert not torch.equal(a.inputs, c.inputs)


def test_dlg_batch_of_two_up_to_permutation(dlg_setup):
    model, _, _, _, _ = dlg_setup
    x = torch.randn(2, 20, generator=generator(25), dtype=torch.float64)
    y = torch.tensor([2, 0])
    r = dlg_attack(model, observed_gradient(model, x, y), input_shape=(20,), num_classes=3, batch_size=2,
                   generator=generator(26))
    assert float(dlg_mse(r.inputs, x).max()) / float((x ** 2).mean()) < 1e-3
    assert sorted(r.labels.tolist()) == [0, 2]


def test_dlg_mse_matches_permutation():
    a = torch.tensor([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
    assert dlg_mse(a[[2, 0, 1]], a).tolist() == [0.0, 0.0, 0.0]
    assert dlg_mse(a[:1] + 1.0, a[:1]).tolist() == [1.0]
    with pytest.raises(ValueError, match="shape"):
        dlg_mse(a, a[:2])


def test_dlg_bad_arguments(dlg_setup):
    model, _, _, _, grad = dlg_setup
    with pytest.raises(ValueError, match="target"):
        _attack(model, {k: v for k, v in list(grad.items())[:2]})
    with pytest.raises(ValueError, match="target"):
        _attack(model, torch.zeros(7, dtype=torch.float64))
    with pytest.raises(ValueError, match="target"):
        _attack(model, {k: v * math.nan for k, v in grad.items()})
    with pytest.raises(ValueError, match="steps"):
        _attack(model, grad, steps=0)
    with pytest.raises(ValueError, match="lr"):
        _attack(model, grad, lr=-1.0)
    with pytest.raises(ValueError, match="input_shape"):
        dlg_attack(model, grad, input_shape=(), num_classes=3, generator=None)
    with pytest.raises(ValueError, match="num_classes"):
        dlg_attack(model, grad, input_shape=(20,), num_classes=0, generator=None)
    with pytest.raises(ValueError, match="model"):
        dlg_attack(lambda z: z, grad, input_shape=(20,), num_classes=3, generator=None)


def test_the_adaptive_attacker_recovers_the_input_behind_a_personal_output_transform(dlg_setup):
    """PD-LDPFL's base gradient through an output transform a F(x) + b the server does not know: DLG with the base
    alone (the oblivious attacker) misses the image, the adaptive attacker (a, b as unknowns) recovers it (a and b
    themselves are not identified: the dummy soft label absorbs part of them); mean_image_mse is the trivial
    guess's error."""
    model, _, x, y, _ = dlg_setup
    a, b = 2.5, torch.tensor([0.3, -0.4, 0.2], dtype=torch.float64)

    class OutputAffine(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base

        def forward(self, z):
            return a * self.base(z) + b

    target = observed_gradient(OutputAffine(model), x, y)   # keyed "base.*"
    target = {k[len("base."):]: v for k, v in target.items()}
    oblivious = _rel_mse(_attack(model, target), x)
    adaptive = _attack(model, target, output_transform="affine")
    assert _rel_mse(adaptive, x) < 1e-3 < oblivious
    assert adaptive.output_scale.shape == (1,) and adaptive.output_shift.shape == (3,)
    assert _attack(model, target).output_scale is None
    with pytest.raises(ValueError, match="output_transform"):
        _attack(model, target, output_transform="tanh")
    pool = torch.stack([x[0] + 1.0, x[0] - 1.0, x[0] + 3.0])   # its mean is x + 1: every pixel off by 1
    assert float(mean_image_mse(x, pool)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        mean_image_mse(x, torch.zeros(3, 5))
