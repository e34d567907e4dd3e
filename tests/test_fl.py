"""The round engine: determinism, vectorised vs sequential equivalence, batches of runs, privatizer /
aggregator plumbing, privacy accounting in the history, and bad input (checked before training)."""
import math

import pandas as pd
import pytest
import torch
from torch import nn

from ldptut import fl, models, rng
from ldptut.accounting import Guarantee, gaussian_epsilon
from ldptut.mechanisms import Gaussian, TwoPoint
from ldptut.rng import derive_seed, generator
from ldptut.training import LocalSGD, OptimizerSpec, batch_schedule


def _toy(n=1200, n_test=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 4, generator=g)
    x = torch.randn(n + n_test, 1, 8, 8, generator=g)
    y = (x.flatten(1) @ w).argmax(1)
    # unequal client sizes exercise the masked (padded) steps of the vectorised path
    sizes = [150, 120, 90, 200, 130, 110, 100, 140]
    starts = torch.tensor([0] + sizes).cumsum(0)
    parts = [torch.arange(int(starts[i]), int(starts[i]) + s) for i, s in enumerate(sizes)]
    return dict(x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:], partition=parts)


def _vec(result):
    return result.layout.flatten({k: v.detach() for k, v in result.model.named_parameters()})


def _run(model_name="mlp", dtype=torch.float32, **kw):
    data = _toy()
    data["x_train"], data["x_test"] = data["x_train"].to(dtype), data["x_test"].to(dtype)
    model = models.build_model(model_name, input_shape=(1, 8, 8), num_classes=4, seed=3).to(dtype)
    args = dict(rounds=3, client_fraction=0.5, local_epochs=2, batch_size=32, lr=0.1, seed=11, progress=False)
    args.update(kw)
    return fl.run_fedavg(model, **data, **args)


def test_derive_seed_depends_on_every_key_part():
    base = derive_seed(0, "round", 1, "client", 2)
    assert base == derive_seed(0, "round", 1, "client", 2)
    others = {derive_seed(1, "round", 1, "client", 2), derive_seed(0, "round", 2, "client", 2),
              derive_seed(0, "round", 1, "client", 3), derive_seed(0, "round", 1, "server", 2)}
    assert base not in others and len(others) == 4
    a = torch.rand(5, generator=generator(0, "x"))
    torch.rand(100)  # global RNG use in between must not matter
    assert torch.equal(a, torch.rand(5, generator=generator(0, "x")))


@pytest.mark.parametrize("bad", [-1, 1.5, "0", True])
def test_derive_seed_rejects_bad_seed(bad):
    with pytest.raises((ValueError, TypeError)):
        derive_seed(bad, "x")


def test_same_seed_same_history_and_weights():
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))
    a, b = _run(privatizer=priv), _run(privatizer=priv)
    cols = ["round", "accuracy", "loss", "clients"]
    assert a.history[cols].equals(b.history[cols])
    assert torch.equal(_vec(a), _vec(b))
    c = _run(privatizer=priv, seed=12)
    assert not torch.equal(_vec(a), _vec(c))


@pytest.mark.parametrize("model_name", ["mlp", "cnn2", "logreg"])
@pytest.mark.parametrize("optimizer,lr,momentum", [("sgd", 0.1, 0.0), ("sgd", 0.05, 0.9), ("adam", 1e-3, 0.0)])
def test_vectorised_matches_sequential(model_name, optimizer, lr, momentum):
    # float64, so that float32 rounding (amplified by later steps, chaotically for Adam) cannot hide a
    # real difference between the two paths: the algorithms must agree to rounding.
    kw = dict(model_name=model_name, optimizer=optimizer, lr=lr, momentum=momentum, rounds=2, dtype=torch.float64)
    v, s = _run(vectorize=True, **kw), _run(vectorize=False, **kw)
    assert (v.history["accuracy"] - s.history["accuracy"]).abs().max() <= 1e-5
    assert (_vec(v) - _vec(s)).abs().max().item() <= 1e-10


def test_vectorised_matches_sequential_float32():
    v, s = _run(vectorize=True, rounds=2), _run(vectorize=False, rounds=2)
    assert (v.history["accuracy"] - s.history["accuracy"]).abs().max() <= 1e-5
    assert (_vec(v) - _vec(s)).abs().max().item() <= 1e-5


def test_vectorised_matches_sequential_with_privatizer_and_updates():
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=2.0, range=fl.FixedRange(0.0, 0.05))
    kw = dict(privatizer=priv, send="updates", aggregator="mean", rounds=2)
    v, s = _run(vectorize=True, **kw), _run(vectorize=False, **kw)
    assert (_vec(v) - _vec(s)).abs().max().item() <= 1e-5


def test_client_chunking_does_not_change_result():
    a, b = _run(client_chunk=None), _run(client_chunk=1)
    assert (_vec(a) - _vec(b)).abs().max().item() <= 1e-6


def test_training_learns_without_privacy():
    r = _run(rounds=5, client_fraction=1.0)
    assert r.history["accuracy"].iloc[-1] > 0.6  # 4 balanced-ish classes: chance is about 0.25
    assert list(r.history.columns[:3]) == ["round", "accuracy", "loss"]


def test_batch_schedule_covers_each_sample_once_per_epoch():
    s = batch_schedule(10, epochs=3, batch_size=4, generator=generator(0, "t"))
    assert s.shape == (9, 4)
    for e in range(3):
        block = s[3 * e:3 * e + 3].flatten()
        assert sorted(block[block >= 0].tolist()) == list(range(10))


def test_sample_clients_fraction_and_determinism():
    ids = fl.sample_clients(100, 0.1, seed=0, round=1)
    assert len(ids) == 10 and len(set(ids.tolist())) == 10
    assert torch.equal(ids, fl.sample_clients(100, 0.1, seed=0, round=1))
    assert not torch.equal(ids, fl.sample_clients(100, 0.1, seed=0, round=2))
    assert len(fl.sample_clients(100, 0.001, seed=0, round=1)) == 1


def test_privatizer_gets_one_generator_per_client_and_layer_slices():
    seen = {}

    def spy(payloads, *, context):
        seen["shape"] = tuple(payloads.shape)
        seen["gens"] = len(context.generators)
        seen["d"] = context.layout.numel
        return payloads

    r = _run(privatizer=spy, rounds=1, client_fraction=1.0)
    assert seen["shape"] == (8, r.layout.numel) and seen["gens"] == 8
    assert seen["d"] == models.count_parameters(r.model)


def test_global_model_range_uses_only_the_global_model():
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=0)
    layout = fl.ParamLayout.from_model(model)
    g = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    ctx = fl.RoundContext(round=1, client_ids=torch.arange(2), layout=layout, global_vector=g,
                          generators=[], send="weights", num_samples=torch.ones(2))
    c, r = fl.GlobalModelRange(margin=1.0)(ctx)
    for s in layout.slices:
        assert torch.allclose(c[s], (g[s].max() + g[s].min()) / 2)
        assert torch.all(g[s] >= c[s] - r[s]) and torch.all(g[s] <= c[s] + r[s])


def test_weighted_mean_uses_sample_counts():
    payloads = torch.tensor([[0.0, 1.0], [1.0, 3.0]])
    ctx = fl.RoundContext(round=1, client_ids=torch.arange(2), layout=None, global_vector=None, generators=[],
                          send="weights", num_samples=torch.tensor([1.0, 3.0]))
    vec, metrics = fl.weighted_mean_aggregator(payloads, context=ctx)
    assert torch.allclose(vec, torch.tensor([0.75, 2.5])) and metrics == {}
    assert torch.allclose(fl.mean_aggregator(payloads, context=ctx)[0], torch.tensor([0.5, 2.0]))


@pytest.mark.parametrize("kw,name", [
    (dict(rounds=0), "rounds"), (dict(local_epochs=0), "local_epochs"), (dict(batch_size=0), "batch_size"),
    (dict(client_fraction=0.0), "client_fraction"), (dict(client_fraction=1.5), "client_fraction"),
    (dict(client_fraction=math.nan), "client_fraction"), (dict(send="grads"), "send"),
    (dict(optimizer="rmsprop"), "optimizer"), (dict(lr=-1.0), "lr"), (dict(aggregator="median"), "aggregator"),
])
def test_bad_parameters_raise_naming_them(kw, name):
    with pytest.raises(ValueError, match=name):
        _run(**kw)


def test_bad_range_and_epsilon_raise():
    with pytest.raises(ValueError, match="radius"):
        fl.FixedRange(0.0, 0.0)
    with pytest.raises(ValueError, match="margin"):
        fl.GlobalModelRange(margin=-1)
    with pytest.raises(ValueError, match="epsilon"):
        fl.LocalPerturbation(mechanism=TwoPoint, epsilon=float("nan"))


def test_models_build_and_count():
    for name, shape in [("logreg", (1, 28, 28)), ("mlp", (1, 28, 28)), ("cnn2", (1, 28, 28)),
                        ("small_vgg", (3, 32, 32)), ("resnet18", (3, 32, 32))]:
        m = models.build_model(name, input_shape=shape, num_classes=10, seed=0)
        assert m(torch.zeros(2, *shape)).shape == (2, 10)
    assert models.count_parameters(models.build_model("logreg", input_shape=(1, 28, 28), num_classes=10)) == 7850
    assert models.count_parameters(models.build_model("cnn2", input_shape=(1, 28, 28), num_classes=10)) == 1199882
    # McMahan et al. 2017's CNN: 5x5x32 + 32, 5x5x32x64 + 64, 3136x512 + 512, 512x10 + 10 weights
    fedavg = models.build_model("cnn_fedavg", input_shape=(1, 28, 28), num_classes=10)
    assert models.count_parameters(fedavg) == 832 + 51264 + 1606144 + 5130 == 1663370
    assert fedavg(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    a = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=5)
    b = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="unknown model"):
        models.build_model("vgg99", input_shape=(1, 8, 8), num_classes=4)


def test_record_payloads_keeps_raw_and_sent():
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))
    rec = fl.RecordPayloads(priv)
    r = _run(privatizer=rec, rounds=1, client_fraction=1.0)
    assert rec.raw.shape == rec.sent.shape == (8, r.layout.numel)
    a = TwoPoint(epsilon=1.0, center=0.0, radius=0.5).a
    assert torch.allclose(rec.sent.abs(), torch.full_like(rec.sent, 0.5 * a))  # two-point outputs only
    assert not torch.equal(rec.raw, rec.sent)


def test_adaptive_range_never_reads_client_payloads():
    """LDP-FL adaptive range: the clip range is a function of the global model only. Two very different
    sets of client payloads must be clipped to the same range (reports take the same two values per layer)."""
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=0)
    layout = fl.ParamLayout.from_model(model)
    g = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.GlobalModelRange(margin=1.0))
    sent = []
    for scale in (1.0, 100.0):
        payloads = scale * torch.randn(3, layout.numel, generator=torch.Generator().manual_seed(1))
        ctx = fl.RoundContext(round=1, client_ids=torch.arange(3), layout=layout, global_vector=g,
                              generators=[generator(0, "t", i) for i in range(3)], send="weights",
                              num_samples=torch.ones(3))
        sent.append(priv(payloads, context=ctx))
    for s in layout.slices:
        assert torch.allclose(sent[0][:, s].abs().max(), sent[1][:, s].abs().max())
        c, r = fl.GlobalModelRange(margin=1.0)(ctx)
        a = TwoPoint(epsilon=1.0).a
        allowed = torch.stack([c[s] - r[s] * a, c[s] + r[s] * a])
        assert torch.isclose(sent[1][:, s].unsqueeze(0), allowed.unsqueeze(1)).any(0).all()


def test_fixed_range_clips_weights_outside_it():
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=2.0, range=fl.FixedRange(0.0, 0.075))
    ctx = fl.RoundContext(round=1, client_ids=torch.arange(1), layout=None, global_vector=None,
                          generators=[generator(0, "clip")], send="weights", num_samples=torch.ones(1))
    big = torch.full((1, 200_000), 10.0, dtype=torch.float64)  # far above c + r
    out = priv(big, context=ctx)
    se = math.sqrt(TwoPoint(epsilon=2.0, center=0.0, radius=0.075).variance(torch.tensor(0.075)).item() / big.numel())
    assert abs(out.mean().item() - 0.075) < 4 * se  # unbiased for the clipped value, not for 10


# ---- batches of runs, streams, accounting ----------------------------------------------------------
def _simulate(runs, rounds=2, **kw):
    data = _toy()
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
    cfg = fl.FLConfig(rounds=rounds, trainer=LocalSGD(batch_size=32, optimizer=OptimizerSpec(lr=0.1)),
                      progress=False, **kw)
    parts = data.pop("partition")
    runs = [fl.Run(partition=parts, **r) for r in runs]
    return fl.simulate(cfg, runs, model=model, **data)


def test_a_batch_of_runs_gives_each_run_its_own_numbers():
    """Runs trained together (one simulate call) equal the same runs trained alone: the batch is bookkeeping."""
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))
    specs = [dict(seed=1, privatizer=priv), dict(seed=2), dict(seed=1, aggregator="mean")]
    together = _simulate(specs, client_fraction=0.5)
    for a, spec in enumerate(specs):
        alone = _simulate([spec], client_fraction=0.5)
        assert torch.equal(together.weights[a], alone.weights[0])
        assert together.history[together.history.run == a]["accuracy"].tolist() == alone.history["accuracy"].tolist()


def test_stepping_through_the_rounds_equals_simulate():
    """start / next_round / finish (the engine's init / apply face) give simulate's numbers, round by round; the state
    between rounds holds each run's global model; a round past the last raises; a session must be a TrainingSession."""
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))
    specs = [dict(seed=1, privatizer=priv), dict(seed=2)]
    whole = _simulate(specs, rounds=3, client_fraction=0.5)
    data = _toy()
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
    cfg = fl.FLConfig(rounds=3, trainer=LocalSGD(batch_size=32, optimizer=OptimizerSpec(lr=0.1)), progress=False,
                      client_fraction=0.5)
    parts = data.pop("partition")
    state = fl.start(cfg, [fl.Run(partition=parts, **r) for r in specs], model=model, **data)
    assert state.round == 0 and not state.done
    before = state.global_vectors.clone()
    seen = []
    while not state.done:
        state, rows = fl.next_round(state)
        assert [row["round"] for row in rows] == [state.round] * 2
        seen.append(state.global_vectors.clone())
    assert state.round == 3 and not torch.equal(before, seen[0]) and not torch.equal(seen[0], seen[1])
    stepped = fl.finish(state)
    assert torch.equal(stepped.weights, whole.weights)
    cols = ["run", "round", "accuracy", "loss", "clients", "epsilon_total"]
    pd.testing.assert_frame_equal(stepped.history[cols], whole.history[cols])
    with pytest.raises(ValueError, match="the simulation is done \\(round 3 of 3"):
        fl.next_round(state)

    class Loose:  # a trainer whose session is not a TrainingSession
        def start(self, **kw):
            return object()
    with pytest.raises(TypeError, match="Loose.start must return a ldptut.training.TrainingSession, got object"):
        fl.start(fl.FLConfig(rounds=1, trainer=Loose(), progress=False), [fl.Run(seed=0, partition=parts)],
                 model=model, **data)


def test_pair_generator_is_shared_by_the_pair_and_distinct_across_pairs_and_rounds():
    draw = lambda g: torch.rand(4, generator=g)  # noqa: E731
    assert torch.equal(draw(rng.pair_generator(0, 3, 5, 2)), draw(rng.pair_generator(0, 3, 2, 5)))
    others = [rng.pair_generator(0, 4, 2, 5), rng.pair_generator(0, 3, 2, 6), rng.pair_generator(1, 3, 2, 5),
              rng.pair_generator(0, 3, 2, 5, "other"), rng.client_generator(0, 3, 2, "shared")]
    base = draw(rng.pair_generator(0, 3, 2, 5))
    assert all(not torch.equal(base, draw(g)) for g in others)
    with pytest.raises(ValueError, match="two different clients"):
        rng.pair_generator(0, 1, 4, 4)
    seen = {}

    def spy(payloads, *, context):
        seen["pair"] = draw(context.pair_generator(int(context.client_ids[1]), int(context.client_ids[0])))
        seen["round"] = context.round
        return payloads

    _simulate([dict(seed=7, privatizer=spy)], rounds=1)
    assert torch.equal(seen["pair"], draw(rng.pair_generator(7, 1, 0, 1)))


def test_history_records_the_epsilon_spent_with_its_unit():
    """Two-point at ε per coordinate: each round a client spends d·ε; with half the clients sampled per
    round, the worst-off client's total is d·ε times the most rounds any client took part in."""
    eps = 0.5
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=eps, range=fl.FixedRange(0.0, 0.5))
    res = _simulate([dict(seed=4, privatizer=priv)], rounds=4, client_fraction=0.5)
    d = res.layout.numel
    h = res.history
    assert (h["epsilon_round"] == d * eps).all() and (h["delta"] == 0).all()
    counts = torch.zeros(8)
    for r in range(1, 5):
        counts[fl.sample_clients(8, 0.5, seed=4, round=r)] += 1
        assert h.loc[h["round"] == r, "epsilon_total"].item() == pytest.approx(d * eps * counts.max().item())
    g = res.guarantees[0]
    assert isinstance(g, Guarantee) and g.epsilon == pytest.approx(d * eps * counts.max().item())
    assert str(g.unit) == f"per model (d = {d:,} coordinates) over {int(counts.max())} rounds"
    assert h["epsilon_unit"].iloc[-1] == str(g.unit) and h["epsilon_unit"].iloc[0].endswith("per round")
    assert res.guarantees == [g] and "epsilon_round" not in _simulate([dict(seed=4)], rounds=1).history


def test_gaussian_guarantees_compose_exactly_in_the_history():
    class GaussianPerturbation:
        def __init__(self):
            # composed eps 2.9 (the certificate stays finite); sigma = 2.2 as at eps = 2, radius 1
            self.mech = Gaussian(epsilon=0.002, delta=1e-3, radius=0.005)

        def __call__(self, payloads, *, context):
            return torch.stack([self.mech.privatize(p, g) for p, g in zip(payloads, context.generators)])

        def guarantee(self, context):
            return [self.mech.guarantee] * len(context.client_ids)

    res = _simulate([dict(seed=0, privatizer=GaussianPerturbation())], rounds=3)
    mu, d = GaussianPerturbation().mech.guarantee.mu, res.layout.numel
    last = res.history.iloc[-1]
    tv = GaussianPerturbation().mech.guarantee.tv
    assert last["epsilon_total"] == pytest.approx(gaussian_epsilon(1e-3, mu * math.sqrt(3 * d), 3 * d * tv), rel=1e-9)
    assert math.isfinite(last["epsilon_total"]) and tv > 0
    assert last["delta"] == 1e-3


# ---- input checked before training (robustness defects of the architecture issue) -----------------
def _bad(**changes):
    data = _toy()
    data.update(changes)
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
    return fl.run_fedavg(model, rounds=1, progress=False, **data)


def test_mismatched_lengths_and_an_empty_test_set_are_named():
    data = _toy()
    with pytest.raises(ValueError, match="x_train has 1200 samples but y_train has 1199"):
        _bad(y_train=data["y_train"][:-1])
    with pytest.raises(ValueError, match="x_test is empty"):
        _bad(x_test=data["x_test"][:0], y_test=data["y_test"][:0])


def test_partition_indices_outside_the_data_are_named():
    parts = _toy()["partition"]
    with pytest.raises(ValueError, match=r"partition\[2\] holds sample index -1.*wrap around"):
        _bad(partition=parts[:2] + [torch.tensor([-1, 3])] + parts[3:])
    with pytest.raises(ValueError, match=r"partition\[0\] holds sample index 1200, outside 0..1199"):
        _bad(partition=[torch.tensor([0, 1200])] + parts[1:])


def test_labels_outside_the_models_classes_are_named():
    y = _toy()["y_train"].clone()
    y[5] = 7
    with pytest.raises(ValueError, match="y_train holds label 7, outside 0..3"):
        _bad(y_train=y)
    with pytest.raises(ValueError, match="y_test must hold integer class labels"):
        _bad(y_test=_toy()["y_test"].float())


def test_a_privatizer_or_aggregator_of_the_wrong_kind_is_named():
    with pytest.raises(ValueError, match="privatizer .*returned shape \\(8, 5\\).*must return the payloads' shape"):
        _bad(privatizer=lambda p, *, context: p[:, :5])
    with pytest.raises(ValueError, match="privatizer .*float64"):
        _bad(privatizer=lambda p, *, context: p.double())
    with pytest.raises(TypeError, match="must return \\(vector, metrics dict\\)"):
        model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
        fl.run_fedavg(model, rounds=1, progress=False, aggregator=lambda p, *, context: p.mean(0), **_toy())


def test_a_diverging_run_stops_with_its_round_and_learning_rate():
    """Logistic regression with lr 10 and weight decay 0.25 (|1 - lr·wd| > 1): the test loss grows by orders
    of magnitude each round; it used to run to the end silently."""
    data = _toy()
    model = models.build_model("logreg", input_shape=(1, 8, 8), num_classes=4, seed=0)
    with pytest.raises(FloatingPointError, match=r"round \d+: training diverges, the test loss rose to .* \(learning rate 10 too large\?\)"):
        fl.run_fedavg(model, rounds=8, lr=10.0, weight_decay=0.25, batch_size=32, progress=False, **data)


def test_the_input_check_leaves_a_batchnorm_model_untouched():
    """The up-front check runs the model on one test sample: in eval mode, so BatchNorm neither fails on a
    batch of one nor learns running statistics from the test set."""
    model = models.build_model("resnet18", input_shape=(3, 8, 8), num_classes=4, seed=0, norm="batch")
    data = _toy()
    x = data["x_train"].expand(-1, 3, -1, -1).contiguous()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fl.checks._check_inputs(model, [fl.Run(seed=0, partition=data["partition"])], x, data["y_train"],
                     x[:10], data["y_train"][:10])
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_diverging_run_can_be_stopped_and_recorded_while_the_others_go_on():
    """on_divergence="stop": the run's history ends with the round its model blew up (marked diverged; its weights
    kept from the round before), the other run of the batch trains on; "raise" (the default) names the round. (A
    privatizer that returns NaN or inf is a broken component, not a diverging run: that raises in either mode.)"""
    def blow_up(payloads, *, context):  # finite, but the model becomes meaningless: a loss beyond HUGE_LOSS
        return payloads * (1e30 if context.round >= 2 else 1.0)

    specs = [dict(seed=1, privatizer=blow_up), dict(seed=2)]
    res = _simulate(specs, rounds=3, on_divergence="stop")
    h = res.history
    bad, good = h[h.run == 0], h[h.run == 1]
    assert bad["round"].tolist() == [1, 2] and bad["diverged"].tolist() == [False, True]
    assert not (bad["loss"].iloc[-1] <= fl.HUGE_LOSS * math.log(4)) and torch.isfinite(res.weights[0]).all()
    assert good["round"].tolist() == [1, 2, 3] and not good["diverged"].any()
    with pytest.raises(FloatingPointError, match="round 2, run 0: (training diverges|the global model has non-finite)"):
        _simulate(specs, rounds=3)
    with pytest.raises(ValueError, match="on_divergence"):
        fl.FLConfig(rounds=1, on_divergence="ignore")


def _bn_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(256, 4))


def test_batchnorm_running_statistics_are_the_clients_average_and_are_used_for_evaluation():
    """Sequential path with buffers: each run's round starts from its buffers, the server keeps the clients'
    average (float buffers by mean, the counter by max), and the engine evaluates with them; a private run
    warns that they travel in clear."""
    data = _toy()
    model = _bn_model()
    layout = fl.ParamLayout.from_model(model)
    glob = layout.flatten({k: v.detach() for k, v in model.named_parameters()})[None]
    trainer = LocalSGD(batch_size=32, vectorize=False, optimizer=OptimizerSpec(lr=0.1))

    def after_round(ids):
        s = trainer.start(model=model, layout=layout, runs=[fl.Run(seed=1, partition=data["partition"])],
                          x_train=data["x_train"], y_train=data["y_train"])
        s.train(round=1, global_vectors=glob, client_ids=[torch.tensor(ids)])
        return s.buffers[0]

    both, one, two = after_round([0, 1]), after_round([0]), after_round([1])
    assert not torch.equal(both["1.running_mean"], torch.zeros(4))
    for k in ("1.running_mean", "1.running_var"):
        torch.testing.assert_close(both[k], (one[k] + two[k]) / 2)
    assert int(both["1.num_batches_tracked"]) == max(int(one["1.num_batches_tracked"]), int(two["1.num_batches_tracked"]))

    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))
    with pytest.warns(UserWarning, match="in clear"):
        res = fl.run_fedavg(model, rounds=1, lr=0.1, batch_size=32, progress=False, privatizer=priv, seed=1, **data)
    s = trainer.start(model=model, layout=layout, runs=[fl.Run(seed=1, partition=data["partition"])],
                      x_train=data["x_train"], y_train=data["y_train"])
    s.train(round=1, global_vectors=glob, client_ids=[torch.arange(8)])
    torch.testing.assert_close(res.model[1].running_mean, s.buffers[0]["1.running_mean"])
    acc, _ = fl.evaluate(res.model, data["x_test"], data["y_test"])
    assert acc == res.history["accuracy"].iloc[-1]


# ---- training accuracy and the clipping-only ablation ---------------------------------------------
def test_train_eval_records_training_accuracy_without_changing_the_run():
    """train_eval adds the global model's accuracy on the whole training set and the clients' local models' on
    their own data; it draws nothing, so the test accuracies and weights are those of the run without it."""
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))
    plain = _simulate([dict(seed=1, privatizer=priv)], client_fraction=0.5)
    both = _simulate([dict(seed=1, privatizer=priv)], client_fraction=0.5, train_eval=True)
    assert torch.equal(plain.weights, both.weights)
    assert plain.history["accuracy"].tolist() == both.history["accuracy"].tolist()
    assert "train_accuracy" not in plain.history
    # recompute the last round by hand: the global model on all 1,200 training points
    data = _toy()
    model = both.model
    acc, loss = fl.evaluate(model, data["x_train"], data["y_train"])
    last = both.history.iloc[-1]
    assert last["train_accuracy"] == pytest.approx(acc) and last["train_loss"] == pytest.approx(loss, rel=1e-5)
    assert 0 <= last["client_train_accuracy"] <= 1


def test_client_train_accuracy_is_the_local_models_on_their_own_data():
    """At lr 1e-12 the local models are the global one (to float rounding), so their sample-weighted accuracy on their
    own data is the global model's accuracy on the union of the round's clients' data."""
    data = _toy()
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
    cfg = fl.FLConfig(rounds=1, trainer=LocalSGD(batch_size=32, optimizer=OptimizerSpec(lr=1e-12)), progress=False,
                      client_fraction=0.5, train_eval=True)
    parts = data.pop("partition")
    res = fl.simulate(cfg, [fl.Run(seed=4, partition=parts)], model=model, **data)
    ids = fl.sample_clients(len(parts), 0.5, seed=4, round=1)
    union = torch.cat([parts[i] for i in ids.tolist()])
    acc, _ = fl.evaluate(model, data["x_train"][union], data["y_train"][union])
    assert res.history["client_train_accuracy"].iloc[0] == pytest.approx(acc)


def test_clip_to_range_clips_without_noise_and_claims_no_privacy():
    clip = fl.ClipToRange(range=fl.FixedRange(0.0, 0.075))
    ctx = fl.RoundContext(round=1, client_ids=torch.arange(2), layout=None, global_vector=None,
                          generators=[generator(0, "a"), generator(0, "b")], send="weights", num_samples=torch.ones(2))
    x = torch.tensor([[-1.0, 0.01, 0.2], [0.0, -0.05, 0.075]])
    assert torch.equal(clip(x, context=ctx), torch.tensor([[-0.075, 0.01, 0.075], [0.0, -0.05, 0.075]]))
    assert clip.guarantee(ctx) == [None, None]
    res = _simulate([dict(seed=1, privatizer=clip)])
    assert "epsilon_total" not in res.history  # the engine records the run as unprotected
    assert res.weights.abs().max() <= 0.075 + 1e-7


def test_train_eval_every_records_only_those_rounds_and_the_last():
    h = _simulate([dict(seed=1)], rounds=5, train_eval=True, train_eval_every=2).history
    assert h["train_accuracy"].notna().tolist() == [False, True, False, True, True]
    with pytest.raises(ValueError, match="train_eval_every"):
        fl.FLConfig(rounds=2, train_eval=True, train_eval_every=0)


def test_local_training_that_diverges_before_the_mechanism_is_a_diverged_run_not_a_mechanism_error():
    """lr 1e30: the clients' weights are non-finite after local training, before perturbation. The two-point
    mechanism (rightly) refuses NaN; the engine must not hand it any, and records the run as diverged ("stop") or
    names the round ("raise"), as for a global model that blows up. (Found with McMahan et al.'s CNN at ε = 0.1.)"""
    data = _toy()
    parts = data.pop("partition")
    priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=fl.FixedRange(0.0, 0.5))

    def run(on_divergence):
        model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
        cfg = fl.FLConfig(rounds=2, trainer=LocalSGD(batch_size=32, optimizer=OptimizerSpec(lr=1e30)), progress=False,
                          on_divergence=on_divergence)
        return fl.simulate(cfg, [fl.Run(partition=parts, seed=1, privatizer=priv)], model=model, **data)

    h = run("stop").history
    assert h["round"].tolist() == [1] and h["diverged"].tolist() == [True] and math.isnan(h["accuracy"].iloc[0])
    assert h["epsilon_round"].iloc[0] > 0  # the round is still accounted (its reports were due)
    with pytest.raises(FloatingPointError, match="round 1: the global model has non-finite weights"):
        run("raise")


# ---- errors that name their cause -----------------------------------------------------------------------------------
def test_a_loss_huge_from_the_first_round_is_divergence():
    """lr = 1e30: the loss is enormous from round 1 and never 'rises'; it used to run to the end unflagged."""
    model = models.build_model("logreg", input_shape=(1, 8, 8), num_classes=4, seed=0)
    with pytest.raises(FloatingPointError, match=r"round 1: training diverges, the test loss is .*times that of a "
                                                 r"uniform prediction.*\(learning rate 1e\+30 too large\?\)"):
        fl.run_fedavg(model, rounds=5, lr=1e30, batch_size=32, progress=False, **_toy())


def test_a_privatizer_or_aggregator_returning_non_finite_values_is_named():
    with pytest.raises(FloatingPointError, match=r"round 1: privatizer .* returned NaN or inf from finite payloads"):
        _bad(privatizer=lambda p, *, context: p * float("nan"))
    with pytest.raises(FloatingPointError, match=r"round 1: aggregator .* returned NaN or inf from finite payloads"):
        model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
        fl.run_fedavg(model, rounds=1, progress=False, aggregator=lambda p, *, context: (p.mean(0) / 0.0, {}), **_toy())


def test_inputs_that_do_not_fit_the_model_are_named():
    data = _toy()
    x = data["x_train"].clone()
    x[5, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"x_train holds NaN or inf \(in 1 sample\(s\), the first is sample 5\)"):
        _bad(x_train=x)
    xt = data["x_test"].clone()
    xt[0, 0, 1, 1] = float("inf")
    with pytest.raises(ValueError, match=r"x_test holds NaN or inf"):
        _bad(x_test=xt)
    with pytest.raises(ValueError, match=r"x_train is torch.float64 but the model's weights are torch.float32"):
        _bad(x_train=data["x_train"].double())
    with pytest.raises(ValueError, match=r"the model cannot take the samples of x_train"):
        _bad(x_train=data["x_train"][:, :, :7, :])
    with pytest.raises(ValueError, match=r"y_train must be int64 class indices.*torch.uint8"):
        _bad(y_train=data["y_train"].to(torch.uint8))


def test_a_one_sample_batch_joins_the_batch_before_it_with_batchnorm():
    """BatchNorm cannot normalise one sample in training mode: a client whose last batch held one sample crashed the
    round without naming the client. Now that batch joins the one before it, with a warning naming the client."""
    from torch import nn

    class BNMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))

        def forward(self, x):
            return self.net(x)

    data = _toy()
    torch.manual_seed(0)
    parts = [torch.arange(0, 33), torch.arange(33, 66)]  # 33 samples at batch 32: a last batch of one
    with pytest.warns(UserWarning, match=r"client 0: a batch of one sample joins the batch before it"):
        res = fl.run_fedavg(BNMLP(), rounds=1, progress=False, batch_size=32, partition=parts,
                            **{k: v for k, v in data.items() if k != "partition"})
    assert torch.isfinite(res.weights).all()


def test_a_failing_local_batch_names_its_client():
    from ldptut.training import _train_sequential, OptimizerSpec
    from torch import nn

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4))
    bad_x = torch.zeros(10, 1, 8, 7)  # the model wants 64 features
    layout = fl.ParamLayout.from_model(model)
    params = {k: v.detach() for k, v in model.named_parameters()}
    with pytest.raises(RuntimeError, match=r"client 7: local training failed on a batch of 5 sample\(s\)"):
        _train_sequential(model, params, bad_x, torch.zeros(10, dtype=torch.long), [torch.arange(5)[None]],
                          [torch.arange(5)], OptimizerSpec(name="sgd", lr=0.1), layout, client_ids=[7])


def test_all_finite_and_finite_rows_agree_with_isfinite():
    """The engine's fast finiteness checks (one aminmax pass) against torch.isfinite, for NaN and both infinities at
    the ends and inside a row, in every floating dtype, empty and non-floating tensors included."""
    from ldptut._validate import all_finite, finite_rows

    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(4, 7, dtype=torch.float64).to(dtype)
        assert all_finite(x) and finite_rows(x).all()
        for bad in (math.nan, math.inf, -math.inf):
            for pos in ((0, 0), (2, 3), (3, 6)):
                y = x.clone()
                y[pos] = bad
                assert not all_finite(y)
                assert torch.equal(finite_rows(y), torch.isfinite(y).all(-1))
    assert all_finite(torch.zeros(0)) and all_finite(torch.arange(5)) and all_finite(torch.ones(3, dtype=torch.bool))
    assert not all_finite(torch.tensor([1 + 1j, complex(math.nan, 0)]))
    assert finite_rows(torch.zeros(3, 2, 2)).tolist() == [True] * 3
