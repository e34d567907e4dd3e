"""Central DP-FedAvg (the trusted-server reference): clipping, the server's grid and exactly sampled discrete Gaussian
noise against their closed forms, the server's re-clip bounding the sensitivity, the zCDP accountant against
dp-accounting's RDP accountant and by hand, and the two pieces in the round engine."""
import math

import numpy as np
import pytest
import torch

from ldptut import fl, models
from ldptut.accounting import gaussian_epsilon
from ldptut.central import (SIGMA_INT, ClipUpdate, NoisyMean, central_epsilon, central_rho, central_sensitivity,
                            clip_slack, zcdp_epsilon)
from ldptut.discrete_gaussian import discrete_gaussian_variance
from ldptut.fl.layout import ParamLayout
from ldptut.rng import round_generator
from ldptut.training import LocalSGD, OptimizerSpec


def _ctx(m: int, d: int, *, send: str = "updates", seed: int = 0, round: int = 1) -> fl.RoundContext:
    layout = ParamLayout.from_model(torch.nn.Linear(d, 1, bias=False))
    return fl.RoundContext(round=round, client_ids=torch.arange(m), layout=layout, global_vector=torch.zeros(d),
                           generators=[], send=send, num_samples=torch.ones(m),
                           server_generator=round_generator(seed, round, "server"), seed=seed)


def test_clip_update_bounds_the_norm_and_keeps_direction_and_small_updates():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 30, generator=g) * torch.logspace(-2, 1, 50).unsqueeze(1)  # norms from about 0.05 to 55
    x[3] = 0.0
    out = ClipUpdate(clip=1.0)(x, context=_ctx(50, 30))
    norms_in, norms_out = x.norm(dim=1), out.norm(dim=1)
    assert torch.all(norms_out <= 1.0 + 1e-6)
    small = norms_in <= 1.0
    assert small.any() and (~small).any()
    assert torch.equal(out[small], x[small])                                  # under the bound: unchanged
    assert torch.allclose(norms_out[~small], torch.ones(int((~small).sum())), atol=1e-6)  # over: exactly on it
    cos = torch.nn.functional.cosine_similarity(out[~small], x[~small], dim=1)
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-6)               # same direction
    assert torch.equal(out[3], torch.zeros(30))
    assert ClipUpdate(clip=1.0).guarantee(_ctx(50, 30)) == [None] * 50
    with pytest.raises(ValueError, match="send='updates'"):
        ClipUpdate(clip=1.0)(x, context=_ctx(50, 30, send="weights"))
    for bad in (0.0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(ValueError, match="clip must be"):
            ClipUpdate(clip=bad)


def test_noisy_mean_lies_on_the_grid_with_discrete_gaussian_noise_of_the_closed_form():
    """The release is g (Σ_k q_k + Z) / m with q_k = round(clip(x_k) / g), g = z C / 2^16: m out / g is an integer
    vector, and m out / g - Σ_k q_k = Z has mean 0 and the discrete Gaussian's variance (within 5 standard errors over
    d = 200,000 coordinates); the noise on the mean has standard deviation z C / m; z = 0 is the plain mean."""
    m, d, clip, z = 8, 200_000, 0.5, 1.3
    g = torch.Generator().manual_seed(1)
    x = torch.rand(m, d, generator=g, dtype=torch.float64) - 0.5      # norms about 129: all clipped
    agg = NoisyMean(clip=clip, noise_multiplier=z)
    out, metrics = agg(x, context=_ctx(m, d))
    assert out.dtype == torch.float64 and metrics == {}
    assert agg.grid == z * clip / 2 ** 16
    units = out * m / agg.grid
    assert float((units - units.round()).abs().max()) < 1e-6           # on the grid g Z / m
    noise = units.round().to(torch.int64) - agg.quantized(x).sum(dim=0)
    var = discrete_gaussian_variance(float(SIGMA_INT))
    assert abs(float(noise.double().mean())) < 5 * math.sqrt(var / d)
    assert abs(float(noise.double().var()) / var - 1) < 5 * math.sqrt(2 / (d - 1))
    sd = agg.std(m)
    assert sd == pytest.approx(z * clip / m, rel=1e-12)
    on_mean = out - agg.clipped(x).mean(0)                              # plus the rounding, at most g / 2 per row
    assert abs(float(on_mean.mean())) < 5 * sd / math.sqrt(d) + agg.grid / 2
    assert abs(float(on_mean.var()) / sd ** 2 - 1) < 5 * math.sqrt(2 / (d - 1)) + 1e-4
    again, _ = agg(x, context=_ctx(m, d))
    assert torch.equal(out, again)                                     # the server's stream: reproducible
    other, _ = agg(x, context=_ctx(m, d, round=2))
    assert not torch.equal(out, other)                                 # and a new draw every round
    out32, _ = agg(x.float(), context=_ctx(m, d))
    assert out32.dtype == torch.float32                                # the payloads' dtype
    plain, _ = NoisyMean(clip=1e6, noise_multiplier=0.0)(x, context=_ctx(m, d))
    assert torch.allclose(plain, x.mean(0)) and NoisyMean(clip=1.0, noise_multiplier=0.0).std(m) == 0.0
    for kw, name in ((dict(clip=0.0, noise_multiplier=1.0), "clip"), (dict(clip=1e-200, noise_multiplier=1.0), "clip"),
                     (dict(clip=1.0, noise_multiplier=-1.0), "noise_multiplier")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            NoisyMean(**kw)
    with pytest.raises(ValueError, match="noise_multiplier=.* too small"):
        NoisyMean(clip=1.0, noise_multiplier=1e-14)(x, context=_ctx(m, d))   # 8 * 2^16 / z > 2^62


def test_the_servers_reclip_bounds_the_sensitivity_whatever_the_clients_send():
    """Rows no client-side clip produced (huge, tiny, NaN, inf, squares that overflow, float32 rows clipped to C,
    rows at exactly C): each row's integer vector q = round(clip(x) / g) has ‖q‖₂ <= Δ = σ_int (1 + η)/z + √d / 2,
    checked exactly in integers, and removing a client changes the integer sum by exactly its q."""
    d, clip, z = 1000, 0.7, 0.9
    agg = NoisyMean(clip=clip, noise_multiplier=z)
    g = torch.Generator().manual_seed(4)
    direction = torch.randn(d, generator=g, dtype=torch.float64)
    direction /= direction.norm()
    rows = [direction * 1e6, direction * clip, direction * clip * (1 + 1e-15), direction * 1e-300,
            torch.full((d,), 1e200, dtype=torch.float64), torch.full((d,), math.nan, dtype=torch.float64),
            torch.cat([direction[:-1], torch.tensor([math.inf], dtype=torch.float64)]),
            ClipUpdate(clip=clip)((direction * 3).float().unsqueeze(0), context=_ctx(1, d))[0].double(),
            torch.full((d,), clip / math.sqrt(d), dtype=torch.float64)]
    x = torch.stack(rows)
    q = agg.quantized(x)
    bound = central_sensitivity(noise_multiplier=z, dimension=d)
    assert bound == pytest.approx(SIGMA_INT / z + math.sqrt(d) / 2, rel=1e-12)
    squared = (q * q).sum(dim=1)                                        # exact: int64
    assert bool((squared.double() <= bound ** 2).all())
    assert int(squared[0]) >= (SIGMA_INT / z - math.sqrt(d) / 2) ** 2   # the huge row: on the sphere of radius C
    assert int(squared[3]) == 0 and int(squared[4]) == 0 and int(squared[5]) == 0   # tiny, overflowing, NaN
    for k in range(len(rows)):
        rest = torch.cat([x[:k], x[k + 1:]])
        assert torch.equal(agg.quantized(x).sum(0) - agg.quantized(rest).sum(0), q[k])
    assert clip_slack(d) == (d + 16) * 2.0 ** -53


def test_noisy_mean_on_a_model_of_1e5_coordinates():
    """Not a timing test: a d = 100,000 release with 4 clients works and its noise is the discrete Gaussian's."""
    m, d = 4, 100_000
    x = torch.randn(m, d, generator=torch.Generator().manual_seed(2))
    agg = NoisyMean(clip=1.0, noise_multiplier=1.0)
    out, _ = agg(x, context=_ctx(m, d))
    noise = (out.double() * m / agg.grid).round() - agg.quantized(x).sum(0).double()
    assert out.shape == (d,) and abs(float(noise.std()) / SIGMA_INT - 1) < 0.02


def _rdp_epsilon(z_eff: float, rounds: int, delta: float, orders=None) -> float:
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant(orders=orders)
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=z_eff), rounds)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("z, rounds, delta, d", [(1.0, 1, 1e-5, 10), (1.1, 50, 1e-5, 100_000),
                                                 (4.0, 200, 1e-6, 1_000_000), (0.7, 10, 1e-3, 1000),
                                                 (1.0, 50, 1e-5, 100_000)])
def test_central_epsilon_against_dp_accountings_rdp_accountant(z, rounds, delta, d):
    """T rounds of the discrete Gaussian at sensitivity Δ: dp-accounting's RDP accountant with
    GaussianDpEvent(σ_int / Δ) composed T times, on a fine grid of orders, within 1e-3 (ours minimises over α
    continuously: never above it beyond rounding); on its default orders it is never below ours. Our ε is above the ideal continuous Gaussian's (its exact
    GDP ε, and its RDP ε through the same conversion)."""
    z_eff = SIGMA_INT / central_sensitivity(noise_multiplier=z, dimension=d)
    ours = central_epsilon(noise_multiplier=z, rounds=rounds, delta=delta, dimension=d)
    fine = _rdp_epsilon(z_eff, rounds, delta, orders=list(1 + np.geomspace(0.011, 1e4, 6000)))
    assert abs(ours - fine) < 1e-3 * fine and ours <= fine * (1 + 1e-9)
    assert _rdp_epsilon(z_eff, rounds, delta) >= ours * (1 - 1e-9)
    ideal_rdp = zcdp_epsilon(rho=rounds / (2 * z * z), delta=delta)
    assert ours > ideal_rdp > gaussian_epsilon(delta, math.sqrt(rounds) / z)
    if (z, rounds, delta, d) == (1.0, 50, 1e-5, 100_000):                # the module docstring's figures
        assert ours == pytest.approx(57.45, abs=0.01) and ideal_rdp == pytest.approx(57.25, abs=0.01)
        assert 0.003 < ours / ideal_rdp - 1 < 0.004


def test_central_rho_and_zcdp_epsilon_by_hand():
    """ρ_T = T ((1 + η)/z + √d / (2 σ_int))² / 2; ε = min over α of α ρ + log(1 - 1/α) + (log(1/δ) - log α)/(α - 1),
    against a brute-force grid of a million orders, below the Bun-Steinke bound ρ + 2 sqrt(ρ log(1/δ)), 0 under the
    KL bound."""
    eta = 17 * 2.0 ** -53
    assert central_rho(noise_multiplier=2.0, rounds=10, dimension=1) == pytest.approx(
        10 * ((1 + eta) / 2 + 0.5 / 2 ** 16) ** 2 / 2, rel=1e-14)
    assert central_rho(noise_multiplier=1.0, rounds=1, dimension=100_000) == pytest.approx(
        (1 + math.sqrt(1e5) / 2 ** 17) ** 2 / 2, rel=1e-9)
    for rho, delta in ((0.5, 1e-5), (25.0, 1e-5), (0.01, 1e-6), (3.0, 0.1)):
        alpha = 1 + np.geomspace(1e-4, 1e5, 1_000_000)
        brute = float(np.min(alpha * rho + np.log1p(-1 / alpha) + (math.log(1 / delta) - np.log(alpha)) / (alpha - 1)))
        ours = zcdp_epsilon(rho=rho, delta=delta)
        assert ours <= brute + 1e-12 and ours == pytest.approx(brute, rel=1e-9)
        assert ours < rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert zcdp_epsilon(rho=1e-12, delta=1e-3) == 0.0                  # δ >= sqrt(1 - e^{-ρ})


def test_central_accountant_refuses_bad_input():
    with pytest.raises(ValueError, match="noise_multiplier must be"):
        central_rho(noise_multiplier=0.0, rounds=1, dimension=1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="rounds must be"):
            central_rho(noise_multiplier=1.0, rounds=bad, dimension=1)
        with pytest.raises(ValueError, match="dimension must be"):
            central_epsilon(noise_multiplier=1.0, rounds=1, delta=1e-5, dimension=bad)
    with pytest.raises(ValueError, match="delta"):
        central_epsilon(noise_multiplier=1.0, rounds=1, delta=0.0, dimension=1)
    with pytest.raises(ValueError, match="rho must be"):
        zcdp_epsilon(rho=0.0, delta=1e-5)


def _toy(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 4, generator=g)
    x = torch.randn(1500, 1, 8, 8, generator=g)
    y = (x.flatten(1) @ w).argmax(1)
    parts = list(torch.arange(1200).chunk(12))
    return dict(x_train=x[:1200], y_train=y[:1200], x_test=x[1200:], y_test=y[1200:]), parts


def _train(privatizer, aggregator, *, rounds=4):
    data, parts = _toy()
    model = models.build_model("logreg", input_shape=(1, 8, 8), num_classes=4, seed=3)
    cfg = fl.FLConfig(rounds=rounds, trainer=LocalSGD(batch_size=20, optimizer=OptimizerSpec(lr=0.2)),
                      send="updates", progress=False)
    return fl.simulate(cfg, [fl.Run(seed=5, partition=parts, privatizer=privatizer, aggregator=aggregator)],
                       model=model, **data)


def test_dp_fedavg_in_the_round_engine():
    """Without noise and with a clip no update reaches, DP-FedAvg is FedAvg with the plain mean of the updates; the
    clipping and the server's noise change the result; much noise costs accuracy; no local ε is recorded."""
    plain = _train(None, "mean")
    loose = _train(ClipUpdate(clip=1e6), NoisyMean(clip=1e6, noise_multiplier=0.0))
    assert torch.allclose(plain.weights, loose.weights, atol=1e-6)
    clipped = _train(ClipUpdate(clip=0.05), NoisyMean(clip=0.05, noise_multiplier=0.0))
    assert not torch.allclose(plain.weights, clipped.weights, atol=1e-3)
    noisy = _train(ClipUpdate(clip=0.05), NoisyMean(clip=0.05, noise_multiplier=1.0))
    assert not torch.equal(noisy.weights, clipped.weights)
    drowned = _train(ClipUpdate(clip=0.05), NoisyMean(clip=0.05, noise_multiplier=200.0))
    assert drowned.final_accuracy < plain.final_accuracy - 0.2
    assert "epsilon_total" not in noisy.history.columns


def test_replace_one_neighbours_quadruple_rho_and_the_calibration_inverts_central_epsilon():
    from ldptut.central import central_noise_multiplier, central_rho

    kw = dict(noise_multiplier=1.3, rounds=20, dimension=218)
    assert central_rho(**kw, neighbours="replace") == pytest.approx(4 * central_rho(**kw), rel=1e-12)
    with pytest.raises(ValueError, match="neighbours"):
        central_rho(**kw, neighbours="swap")
    for eps, nb in ((1.0, "add_remove"), (8.0, "replace"), (300.0, "replace")):
        z = central_noise_multiplier(epsilon=eps, rounds=20, delta=1e-5, dimension=218, neighbours=nb)
        assert central_epsilon(noise_multiplier=z, rounds=20, delta=1e-5, dimension=218, neighbours=nb) <= eps
        assert central_epsilon(noise_multiplier=z * (1 - 1e-6), rounds=20, delta=1e-5, dimension=218,
                               neighbours=nb) > eps
    with pytest.raises(ValueError, match="negligible"):
        central_noise_multiplier(epsilon=1e12, rounds=1, delta=1e-5, dimension=10)
