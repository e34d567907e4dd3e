"""Central DP-FedAvg (the trusted-server reference): clipping, the server's noise against its closed form, the
accountant against dp-accounting, and the two pieces in the round engine."""
import math

import pytest
import torch

from ldptut import fl, models
from ldptut.central import ClipUpdate, NoisyMean, central_epsilon, central_mu
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


def test_noisy_mean_is_unbiased_with_the_closed_form_noise_std():
    """Noise on each coordinate of the released mean: N(0, (z C / m)²). Over d = 400,000 coordinates the sample mean
    and standard deviation are within 5 standard errors of 0 and z C / m; z = 0 is the plain mean."""
    m, d, clip, z = 8, 400_000, 0.5, 1.3
    g = torch.Generator().manual_seed(1)
    x = torch.rand(m, d, generator=g, dtype=torch.float64) - 0.5
    agg = NoisyMean(clip=clip, noise_multiplier=z)
    out, metrics = agg(x, context=_ctx(m, d))
    noise = out - x.mean(0)
    sd = agg.std(m)
    assert sd == pytest.approx(z * clip / m)
    assert abs(noise.mean().item()) < 5 * sd / math.sqrt(d)
    # the sample variance's standard error: sd² sqrt(2 / (d - 1)) for a Gaussian
    assert abs(noise.var().item() - sd ** 2) < 5 * sd ** 2 * math.sqrt(2 / (d - 1))
    assert metrics == {}
    again, _ = agg(x, context=_ctx(m, d))
    assert torch.equal(out, again)                                 # the server's stream: reproducible
    other, _ = agg(x, context=_ctx(m, d, round=2))
    assert not torch.equal(out, other)                             # and a new draw every round
    plain, _ = NoisyMean(clip=clip, noise_multiplier=0.0)(x, context=_ctx(m, d))
    assert torch.allclose(plain, x.mean(0))
    for kw, name in ((dict(clip=0.0, noise_multiplier=1.0), "clip"), (dict(clip=1.0, noise_multiplier=-1.0),
                                                                      "noise_multiplier")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            NoisyMean(**kw)


@pytest.mark.parametrize("z, rounds, delta", [(1.0, 1, 1e-5), (1.1, 50, 1e-5), (4.0, 200, 1e-6), (0.7, 10, 1e-3)])
def test_central_epsilon_against_dp_accountings_pld(z, rounds, delta):
    """T rounds at noise multiplier z: our exact √T / z-GDP ε against dp-accounting's PLD accountant (add/remove
    neighbours, its GaussianDpEvent composed T times), a numerical upper bound: ours not above it (to our root finder's
    relative tolerance), within 1e-5."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(noise_multiplier=z), rounds)
    theirs = pld.get_epsilon(delta)
    ours = central_epsilon(noise_multiplier=z, rounds=rounds, delta=delta)
    assert central_mu(noise_multiplier=z, rounds=rounds) == pytest.approx(math.sqrt(rounds) / z)
    assert ours <= theirs * (1 + 1e-9) and theirs - ours < 1e-5 * theirs   # 1e-9: our root finder's tolerance
    # dp-accounting's RDP accountant is looser (its conversion to (ε, δ) is an upper bound): never below ours
    from dp_accounting.rdp import rdp_privacy_accountant

    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(dp_accounting.GaussianDpEvent(noise_multiplier=z), rounds)
    assert rdp.get_epsilon(delta) >= ours


def test_central_accountant_refuses_bad_input():
    with pytest.raises(ValueError, match="noise_multiplier must be"):
        central_mu(noise_multiplier=0.0, rounds=1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="rounds must be"):
            central_mu(noise_multiplier=1.0, rounds=bad)
    with pytest.raises(ValueError, match="delta"):
        central_epsilon(noise_multiplier=1.0, rounds=1, delta=0.0)


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
