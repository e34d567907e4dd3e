"""FedSel's two-stage report in the round engine (ldptut.fl.SelectThenPerturb): one coordinate per client, drawn with
the selector's exact law, its value unbiased within the range, ε1 + ε2 per model per round in the engine's accounting."""
import math

import pytest
import torch

from ldptut import fl, models
from ldptut.accounting import Unit
from ldptut.fl.layout import ParamLayout
from ldptut.mechanisms import Piecewise, TwoPoint
from ldptut.rng import client_generator, round_generator
from ldptut.selection import ExponentialSelection, PerturbedSampling
from ldptut.training import LocalSGD, OptimizerSpec


def _ctx(m: int, d: int, *, seed: int = 0, round: int = 1, send: str = "updates") -> fl.RoundContext:
    layout = ParamLayout.from_model(torch.nn.Linear(d, 1, bias=False))
    return fl.RoundContext(round=round, client_ids=torch.arange(m), layout=layout, global_vector=torch.zeros(d),
                           generators=[client_generator(seed, round, i, "privatize") for i in range(m)], send=send,
                           num_samples=torch.ones(m), server_generator=round_generator(seed, round, "server"),
                           seed=seed)


def test_one_coordinate_per_client_drawn_with_the_selectors_law():
    """m = 4,000 clients holding the same update: the chosen indices' histogram against the selector's exact
    output distribution (chi-square, 5 bins merged from d = 6), for EXP and PS; every other coordinate is 0."""
    d, m = 6, 4000
    v = torch.tensor([0.05, -0.2, 0.01, 0.3, -0.02, 0.1])
    for selector, law in (("exp", ExponentialSelection(epsilon=2.0)), ("ps", PerturbedSampling(epsilon=2.0, k=2))):
        priv = fl.SelectThenPerturb(epsilon_select=2.0, epsilon_value=1.0, selector=selector, k=2,
                                    range=fl.FixedRange(0.0, 0.5))
        out = priv(v.expand(m, d).clone(), context=_ctx(m, d))
        nonzero = (out != 0).sum(1)
        assert int(nonzero.max()) == 1 and int(nonzero.min()) >= 0
        picked = out.abs().argmax(1)[nonzero == 1]
        counts = torch.bincount(picked, minlength=d).double()
        expected = law.output_distribution(v.unsqueeze(0)).squeeze(0) * counts.sum()
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 20.5, (selector, counts.tolist(), expected.tolist())  # chi-square(5) 0.999 quantile: 20.5


def test_the_value_is_the_mechanisms_unbiased_report_of_the_clipped_coordinate():
    """Both coordinates hold the same value, so whichever is selected the report is of that value: the reports' mean
    is the clipped value (within 5 standard errors of Piecewise's closed-form variance), and a value outside the range
    is reported as the clipped one."""
    m, eps2 = 10_000, 1.0
    for x, clipped in ((0.2, 0.2), (2.0, 0.5)):
        priv = fl.SelectThenPerturb(epsilon_select=1.0, epsilon_value=eps2, range=fl.FixedRange(0.0, 0.5))
        out = priv(torch.full((m, 2), x), context=_ctx(m, 2)).sum(1)  # one non-zero coordinate per row
        var = Piecewise(epsilon=eps2, center=0.0, radius=0.5).variance(torch.tensor(clipped)).item()
        assert abs(out.double().mean().item() - clipped) < 5 * math.sqrt(var / m)
    two = fl.SelectThenPerturb(epsilon_select=1.0, epsilon_value=eps2, mechanism=TwoPoint, range=fl.FixedRange(0, 0.5))
    out = two(torch.full((1000, 2), 0.1), context=_ctx(1000, 2)).sum(1)
    lo, hi = (v.float() for v in TwoPoint(epsilon=eps2, center=0.0, radius=0.5).output_values(torch.tensor(0.1)))
    assert len(out.unique()) == 2 and all(torch.isclose(v, lo) or torch.isclose(v, hi) for v in out.unique())


def test_reproducible_and_checked():
    x = torch.randn(8, 30, generator=torch.Generator().manual_seed(0))
    priv = fl.SelectThenPerturb(epsilon_select=1.0, epsilon_value=1.0, range=fl.FixedRange(0.0, 1.0))
    assert torch.equal(priv(x, context=_ctx(8, 30)), priv(x, context=_ctx(8, 30)))
    assert not torch.equal(priv(x, context=_ctx(8, 30)), priv(x, context=_ctx(8, 30, round=2)))
    g = priv.guarantee(_ctx(8, 30))
    assert len(g) == 8 and g[0].epsilon == 2.0 and g[0].unit == Unit(coordinates=30, whole_model=True)
    with pytest.raises(ValueError, match="send='updates'"):
        priv(x, context=_ctx(8, 30, send="weights"))
    with pytest.raises(ValueError, match="selector must be one of"):
        fl.SelectThenPerturb(epsilon_select=1.0, epsilon_value=1.0, selector="pe")
    for kw in (dict(epsilon_select=0.0, epsilon_value=1.0), dict(epsilon_select=1.0, epsilon_value=math.nan)):
        with pytest.raises(ValueError, match="epsilon_(select|value) must be"):
            fl.SelectThenPerturb(**kw)
    with pytest.raises(ValueError, match="k must be below"):
        fl.SelectThenPerturb(epsilon_select=1.0, epsilon_value=1.0, selector="ps", k=30)(x, context=_ctx(8, 30))


def test_in_the_round_engine_the_accountant_records_epsilon_per_model_per_round():
    """ε1 + ε2 per model per round, composed over the rounds only (not over the d coordinates, which the client
    does not each report), and the run trains (the selected coordinates move the model)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 1, 4, 4, generator=g)
    y = (x.flatten(1) @ torch.randn(16, 3, generator=g)).argmax(1)
    parts = list(torch.arange(500).chunk(10))
    model = models.build_model("logreg", input_shape=(1, 4, 4), num_classes=3, seed=1)
    priv = fl.SelectThenPerturb(epsilon_select=1.0, epsilon_value=2.0, range=fl.FixedRange(0.0, 0.5))
    cfg = fl.FLConfig(rounds=3, trainer=LocalSGD(batch_size=25, optimizer=OptimizerSpec(lr=0.5)), send="updates",
                      progress=False)
    res = fl.simulate(cfg, [fl.Run(seed=2, partition=parts, privatizer=priv, aggregator="mean")], model=model,
                      x_train=x[:500], y_train=y[:500], x_test=x[500:], y_test=y[500:])
    h = res.history
    assert h["epsilon_round"].tolist() == [3.0, 3.0, 3.0]
    assert h["epsilon_total"].tolist() == [3.0, 6.0, 9.0]
    assert h["epsilon_unit"].iloc[-1] == f"per model (d = {res.layout.numel} coordinates) over 3 rounds"
    start = res.layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    moved = (res.weights[0] != start).sum().item()
    assert 0 < moved <= 3 * 10  # at most one coordinate per client per round
