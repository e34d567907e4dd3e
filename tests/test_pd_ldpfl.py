"""PD-LDPFL (Wang, Yang, Wei 2024): the personal transforms and their trainer (ldptut.personal), Algorithm 2's
scaled Piecewise Mechanism and the paper module's closed forms (ldptut.papers.pd_ldpfl).

Statistical tolerance: an empirical mean (variance) of N draws against its closed form within 5 standard errors."""
import math

import pandas as pd
import pytest
import torch

from ldptut import fl, models
from ldptut.mechanisms import Piecewise
from ldptut.papers import pd_ldpfl as P
from ldptut.personal import Extended, PersonalizedLocalSGD, PersonalTransform
from ldptut.rng import generator
from ldptut.training import LocalSGD, OptimizerSpec


def _tiny_data(n=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 4, 4, generator=g)
    y = (x.flatten(1)[:, :8].sum(1) > x.flatten(1)[:, 8:].sum(1)).long() + 2 * (x[:, 0, 0, 0] > 0.5).long()
    return x, y


def _tiny_model():
    """The same weights every call (seeded)."""
    return models.build_model("mlp", input_shape=(1, 4, 4), num_classes=4, hidden=(8,), bias=False, seed=0)


@pytest.mark.parametrize("kind", ["affine", "tanh", "sigmoid", "log"])
def test_transform_families_compute_f_of_ax_plus_b(kind):
    t = PersonalTransform(kind=kind, a_shape=(1, 1, 1), b_shape=(1, 4, 4), a_init=0.5, b_init=0.25)
    x = torch.rand(3, 1, 4, 4)
    z = 0.5 * x + 0.25
    want = {"affine": z, "tanh": torch.tanh(z), "sigmoid": torch.sigmoid(z), "log": torch.log(1 + z)}[kind]
    assert torch.allclose(t(x), want)
    assert t.a.shape == (1, 1, 1) and t.b.shape == (1, 4, 4)


def test_identity_start_leaves_the_base_model_unchanged_and_none_has_no_parameters():
    base = _tiny_model()
    t_in = PersonalTransform(kind="affine", a_shape=(1, 1, 1), b_shape=(1, 4, 4))
    t_out = PersonalTransform(kind="affine", a_shape=(1,), b_shape=(4,))
    x = torch.rand(5, 1, 4, 4)
    assert torch.equal(Extended(base, t_in, t_out)(x), base(x))
    assert not list(PersonalTransform(kind="none", a_shape=(1,), b_shape=(1,)).parameters())
    with pytest.raises(ValueError, match="transform"):
        PersonalTransform(kind="exp", a_shape=(1,), b_shape=(1,))
    with pytest.raises(ValueError, match="input_transform"):
        PersonalizedLocalSGD(input_transform="cubic")


def _simulate(trainer, rounds=2, privatizer=None, seed=0):
    x, y = _tiny_data()
    part = [torch.arange(i, 120, 3) for i in range(3)]
    cfg = fl.FLConfig(rounds=rounds, trainer=trainer, progress=False)
    return fl.simulate(cfg, [fl.Run(seed=seed, partition=part, privatizer=privatizer)], model=_tiny_model(),
                       x_train=x, y_train=y, x_test=x, y_test=y)


def test_without_transforms_the_trainer_is_plain_fedavg():
    """No transform on either side: the same batches and the same SGD steps as LocalSGD's sequential path."""
    opt = OptimizerSpec(name="sgd", lr=0.1)
    a = _simulate(PersonalizedLocalSGD(batch_size=8, optimizer=opt, input_transform="none", output_transform="none"))
    b = _simulate(LocalSGD(batch_size=8, optimizer=opt, vectorize=False))
    assert torch.allclose(a.weights, b.weights, atol=1e-6)
    assert "loss_variance" in a.history and (a.history["loss_variance"] >= 0).all()


def _session(trainer):
    """A trainer session on the tiny data, three clients; (session, x, y, model, layout, run, global vector)."""
    x, y = _tiny_data()
    part = [torch.arange(i, 120, 3) for i in range(3)]
    model = _tiny_model()
    layout = fl.ParamLayout.from_model(model)
    run = fl.Run(seed=0, partition=part)
    session = trainer.start(model=model, layout=layout, runs=[run], x_train=x, y_train=y)
    return session, x, y, model, layout, run, layout.flatten(dict(model.named_parameters())).detach()[None]


def test_personal_transforms_persist_across_rounds_and_only_the_base_is_sent():
    trainer = PersonalizedLocalSGD(batch_size=8, optimizer=OptimizerSpec(name="sgd", lr=0.1))
    session, x, y, model, layout, run, glob = _session(trainer)
    out1 = session.train(round=1, global_vectors=glob, client_ids=[torch.arange(3)])
    assert out1[0].shape == (3, layout.numel)            # the base's weights only
    after1 = {i: {k: v.clone() for k, v in s.items()} for i, s in session.personal[0].items()}
    assert sorted(after1) == [0, 1, 2]
    assert not torch.equal(after1[0]["t_in.b"], torch.zeros(1, 4, 4))  # trained away from the start
    session.train(round=2, global_vectors=glob, client_ids=[torch.tensor([0])])
    # client 0 continued from its round-1 transforms (they moved again); client 1 did not train: unchanged
    assert not torch.equal(session.personal[0][0]["t_in.b"], after1[0]["t_in.b"])
    assert torch.equal(session.personal[0][1]["t_in.b"], after1[1]["t_in.b"])
    # continuing from round 1's transforms differs from restarting at the identity
    fresh = trainer.start(model=model, layout=layout, runs=[run], x_train=x, y_train=y)
    restart = fresh.train(round=2, global_vectors=glob, client_ids=[torch.tensor([0])])[0]
    cont = session.train(round=2, global_vectors=glob, client_ids=[torch.tensor([0])])[0]
    assert not torch.allclose(restart, cont)


def _context(payloads, model):
    layout = fl.ParamLayout.from_model(model)
    m = payloads.shape[0]
    return fl.RoundContext(round=1, client_ids=torch.arange(m), layout=layout, global_vector=payloads[0],
                           generators=[generator(0, "pd", i) for i in range(m)], send="weights",
                           num_samples=torch.ones(m))


def test_layer_scaled_piecewise_is_unbiased_with_theorem1_variance():
    """Algorithm 2 with a fixed scale t per tensor: E = w (clipped), Var = Eq. 6 = t^2 Var_PM(w / t)."""
    model = _tiny_model()
    layout = fl.ParamLayout.from_model(model)
    w = layout.flatten(dict(model.named_parameters())).detach()
    reps = 4000
    payloads = w.expand(reps, -1).contiguous()
    mech = P.LayerScaledPiecewise(epsilon=2.0, scaling="max_abs")
    ctx = _context(payloads, model)
    out = mech(payloads, context=ctx).double()
    t = mech.scales(payloads, ctx)[0].double()
    for s in layout.slices:  # the scale is the tensor's max |w|
        assert torch.allclose(t[s], w[s].abs().max().double().expand(s.stop - s.start))
    var = torch.stack([P.scaled_variance(w[i].double(), epsilon=2.0, scale=float(t[i])) for i in range(len(w))])
    se = (var / reps).sqrt()
    z = ((out.mean(0) - w.double()) / se).abs()
    assert float(z.max()) < 5 + 1.0  # max over ~200 coordinates: allow the extreme-value margin
    assert float(z.mean()) < 1.2     # the bulk: mean |z| of a standard normal is 0.80
    emp = out.var(0)
    assert float(((emp - var) / var).abs().mean()) < 0.1
    # Eq. 6 is t^2 times the (real-valued) PM's variance at w / t; the sampled grid law's is within 0.3 % of it
    wt = torch.tensor([0.3, -0.7])
    assert torch.allclose(P.scaled_variance(wt, epsilon=8.0, scale=2.0),
                          4.0 * Piecewise(epsilon=8.0).ideal_variance(wt / 2.0), rtol=1e-12)
    grid = 4.0 * Piecewise(epsilon=8.0).variance(wt / 2.0)
    assert bool(((grid / P.scaled_variance(wt, epsilon=8.0, scale=2.0) - 1).abs() < 3e-3).all())


def test_paper_scaling_divides_by_the_max_and_refuses_a_non_positive_max():
    model = _tiny_model()
    layout = fl.ParamLayout.from_model(model)
    w = layout.flatten(dict(model.named_parameters())).detach()[None]
    ctx = _context(w, model)
    t = P.LayerScaledPiecewise(epsilon=8.0).scales(w, ctx)[0]
    for s in layout.slices:
        assert torch.allclose(t[s], w[0, s].max().expand(s.stop - s.start))
    with pytest.raises(ValueError, match="max"):
        P.LayerScaledPiecewise(epsilon=8.0)(-w.abs(), context=ctx)
    with pytest.raises(ValueError, match="epsilon"):
        P.LayerScaledPiecewise(epsilon=float("nan"))
    with pytest.raises(ValueError, match="scaling"):
        P.LayerScaledPiecewise(epsilon=1.0, scaling="mean")


def test_outside_unit_share_and_composition():
    w = torch.tensor([0.5, -1.0, 0.2, -0.4])    # max 0.5: -1.0 / 0.5 = -2 is outside [-1, 1]
    t = P.outside_unit_share([w])
    assert t["outside [-1, 1] (%)"].iloc[0] == pytest.approx(25.0)
    assert t["outside [-1, 1]"].iloc[0] == 1
    assert P.composed_epsilon(d=531_400, epsilon=8.0) == 4_251_200.0
    assert P.composed_epsilon(d=10, epsilon=1.0, rounds=50) == 500.0


def test_run_config_validation_and_names():
    base = P.table2_config("mnist", 10, rounds=2, n_train=600)
    assert {P.method_config(m, base=base).method for m in P.METHODS} == set(P.METHODS)
    assert isinstance(base.privatizer(), P.LayerScaledPiecewise)
    assert isinstance(P.table2_config("mnist", 10, scaling=None).privatizer(), fl.LocalPerturbation)
    with pytest.raises(ValueError, match="input_transform"):
        base.replace(input_transform="cubic")
    with pytest.raises(ValueError, match="piecewise"):
        base.replace(mechanism="two_point")
    with pytest.raises(ValueError, match="dataset"):
        P.table2_config("cifar10", 10)


def test_table2_numbers_and_compare_without_runs():
    assert len(P.REPORTED) == 24
    got = {(r.where["dataset"], r.where["method"], r.where["n_clients"]): r.value for r in P.REPORTED}
    assert got[("mnist", "pd_ldpfl", 5)] == 96.57 and got[("fashion_mnist", "fedavg", 50)] == 74.50
    table = P.compare(pd.DataFrame())
    assert len(table) == 24 and (table["ours (%)"] == "not run").all()
    assert math.isnan(P.TABLE1.loc["none", "log"]) and P.TABLE1.loc["none", "none"] == 0.580


def test_personal_accuracy_is_each_trained_clients_extended_model_on_the_test_set():
    """eval_personal: the history's personal_accuracy equals the mean over the round's clients of their extended
    models (final global base, their own transforms) evaluated by hand; off by default (no column)."""
    opt = OptimizerSpec(name="sgd", lr=0.5)
    assert "personal_accuracy" not in _simulate(PersonalizedLocalSGD(batch_size=8, optimizer=opt)).history
    trainer = PersonalizedLocalSGD(batch_size=8, optimizer=opt, eval_personal=True)
    session, x, y, model, layout, run, glob = _session(trainer)
    sent = session.train(round=1, global_vectors=glob, client_ids=[torch.tensor([0, 2])])[0]
    new = sent.mean(0)
    got = session.metrics(0, global_vector=new, x_test=x, y_test=y)
    want = []
    for i in (0, 2):           # only the clients that trained this round
        ext = session.client_model(0, i, new)
        with torch.no_grad():
            want.append(float((ext(x).argmax(1) == y).double().mean()))
    assert got["personal_accuracy"] == pytest.approx(sum(want) / 2, abs=1e-12)
    # the extended models are not the global base: their transforms moved during training
    with torch.no_grad():
        base_acc = float((fl.load_vector(_tiny_model(), layout, new)(x).argmax(1) == y).double().mean())
    ext0 = session.client_model(0, 0, new)
    assert not torch.equal(ext0.t_in.b.detach(), torch.zeros(1, 4, 4))
    assert 0.0 <= base_acc <= 1.0
    assert math.isnan(session.metrics(0, global_vector=torch.full_like(new, float("nan")), x_test=x,
                                      y_test=y)["personal_accuracy"])
    with pytest.raises(ValueError, match="eval_personal needs"):
        session.metrics(0)
    with pytest.raises(ValueError, match="eval_personal must be True or False"):
        PersonalizedLocalSGD(eval_personal="yes")
    h = _simulate(trainer).history   # through the engine: one value per round, in [0, 1]
    assert h["personal_accuracy"].between(0, 1).all() and len(h) == 2


def test_table1_run_and_fig6_init_sweep_configs():
    t1 = P.table1_config(n_clients=4, rounds=2, n_train=600)
    assert (t1.dataset, t1.dirichlet_alpha, t1.lr, t1.epsilon, t1.n_clients, t1.rounds) == ("mnist", 0.05, 0.1, 8.0, 4, 2)
    assert P.table1_config().rounds == 50 and P.table1_config().n_clients == 10
    grid = P.init_sweep([0.0, 1.0], [-1.0, 0.0, 1.0], base=t1)
    assert len(grid) == 6 and {e for e, _ in grid} == {"fig. 6"}
    starts = {(c.a_init, c.b_init) for _, c in grid}
    assert starts == {(a, b) for a in (0.0, 1.0) for b in (-1.0, 0.0, 1.0)}
    assert all(c.method == "pd_ldpfl" and c.eval_personal for _, c in grid)
    assert all(c.trainer().a_init == c.a_init and c.trainer().eval_personal for _, c in grid)
    # eval_personal at its default is left out of the cache key: stored runs keep their keys
    assert "eval_personal" not in t1.to_dict(defaults=False)
    assert "eval_personal" in grid[0][1].to_dict(defaults=False)


def test_a_zero_start_cuts_the_input_and_the_output_off():
    """Fig. 6's first finding, exactly: with a = 0 at the start, T_in(x) = b for every x and T_out(z) = b, so the
    extended model outputs the same logits for every input until a moves away from 0."""
    base = _tiny_model()
    ext = Extended(base, PersonalTransform(kind="affine", a_shape=(1, 1, 1), b_shape=(1, 4, 4), a_init=0.0, b_init=0.5),
                   PersonalTransform(kind="affine", a_shape=(1,), b_shape=(4,), a_init=0.0, b_init=0.5))
    out = ext(torch.rand(6, 1, 4, 4))
    assert torch.equal(out, out[:1].expand_as(out))
    loss = torch.nn.functional.cross_entropy(ext(torch.rand(6, 1, 4, 4)), torch.arange(6) % 4)
    loss.backward()
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in base.parameters())  # the base learns nothing
    assert torch.count_nonzero(ext.t_out.a.grad) > 0   # but a itself gets a gradient and can leave 0


def test_whole_model_scope_scales_every_weight_by_the_models_max():
    """Algorithm 2 line 1 as the paper writes it (scope "model"): one t = max(θ) over the whole upload, the same
    report as t * PM(θ / t) drawn by hand from the client's generator; per tensor (the authors' code) differs."""
    model = _tiny_model()
    layout = fl.ParamLayout.from_model(model)
    w = layout.flatten(dict(model.named_parameters())).detach()[None]
    mech = P.LayerScaledPiecewise(epsilon=2.0, scope="model")
    ctx = _context(w, model)
    t = mech.scales(w, ctx)[0]
    assert torch.equal(t, w.max().expand_as(t))
    per_tensor = P.LayerScaledPiecewise(epsilon=2.0).scales(w, ctx)[0]
    assert not torch.equal(t, per_tensor)          # the tiny model's layers have different maxima
    got = mech(w, context=_context(w, model))[0]
    g = generator(0, "pd", 0)                      # the stream _context gives client 0
    want = Piecewise(epsilon=2.0).privatize(w[0] / w.max(), generator=g) * w.max()
    assert torch.allclose(got, want, atol=1e-7)
    # every report lies in [-C t, C t] with the model's t: the server learns the model's max, not each layer's
    c = Piecewise(epsilon=2.0).C
    assert float(got.abs().max()) <= c * float(w.max()) * (1 + 1e-6)
    with pytest.raises(ValueError, match="scope"):
        P.LayerScaledPiecewise(epsilon=2.0, scope="layer")


def test_variants_and_the_no_noise_control_configure_what_they_say():
    paper = P.table2_config("mnist", 10, rounds=2, n_train=600)
    assert (paper.scope, paper.aggregator, paper.variant) == ("model", "weighted_mean", "paper")
    assert paper.privatizer().scope == "model"
    authors = P.table2_config("mnist", 10, rounds=2, n_train=600, variant="authors_code")
    assert (authors.scope, authors.aggregator, authors.variant) == ("tensor", "mean", "authors_code")
    # the authors' reading keeps the keys of the runs stored before the variants existed (defaults are left out)
    assert "scope" not in authors.to_dict(defaults=False) and "aggregator" not in authors.to_dict(defaults=False)
    assert paper.key() != authors.key()
    with pytest.raises(ValueError, match="variant"):
        P.table2_config("mnist", 10, variant="code")
    clear = P.without_noise(paper)
    assert clear.privatizer() is None and clear.epsilon is None and clear.scaling is None
    assert (clear.scope, clear.aggregator, clear.seed, clear.method) == (paper.scope, paper.aggregator, paper.seed,
                                                                        paper.method)
    assert "in clear" in clear.label() and "paper" in clear.label()
    sweep = P.epsilon_sweep("mnist", 10, epsilons=[2.0, 8.0], seeds=[0, 1], rounds=2, n_train=600)
    assert len(sweep) == 3 * 2 * 3                 # methods x seeds x (two ε and no noise)
    assert sorted({c.epsilon for _, c in sweep}, key=lambda e: (e is None, e)) == [2.0, 8.0, None]
    assert all(c.variant == "paper" for _, c in sweep)
    t2 = P.configs(datasets=["mnist"], clients=[5, 10], variants=["paper", "authors_code"], no_noise_clients=[10],
                   rounds=2)
    assert len(t2) == 2 * 3 * 2 + 6 and sum(e == "table 2, no noise" for e, _ in t2) == 6
    assert {c.n_clients for e, c in t2 if e == "table 2, no noise"} == {10}


def test_the_paper_variant_aggregates_weighted_by_client_sizes():
    """Algorithm 2 line 6: θ = Σ n_k / n θ_k. One round without noise on unequal clients: the new global model is
    the sample-weighted mean of the uploads (the authors' code: the plain mean), through the run's own server rule."""
    import unittest.mock as um

    from ldptut.data import Dataset

    _, y = _tiny_data()
    x = torch.rand(120, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    ds = Dataset(name="mnist", x_train=x, y_train=y, x_test=x[:20], y_test=y[:20], classes=[str(i) for i in range(10)],
                 num_classes=10, input_shape=(1, 28, 28), description="tiny stand-in")
    part = [torch.arange(0, 10), torch.arange(10, 40), torch.arange(40, 120)]   # 10, 30, 80 examples
    share = torch.tensor([10.0, 30.0, 80.0]) / 120
    out = {}
    for variant in ("paper", "authors_code"):
        run = P.without_noise(P.table2_config("mnist", 3, rounds=1, variant=variant))
        rec = fl.RecordPayloads()
        with um.patch.object(type(run), "client_partition", lambda self, labels, num_classes=None: part):
            res = run.simulate(ds, progress=False, privatizer=rec)
        out[variant] = (res.weights[0], (rec.sent * share[:, None]).sum(0), rec.sent.mean(0))
    got, weighted, plain = out["paper"]
    assert torch.allclose(got, weighted, atol=1e-6) and not torch.allclose(got, plain, atol=1e-4)
    got, weighted, plain = out["authors_code"]
    assert torch.allclose(got, plain, atol=1e-6) and not torch.allclose(got, weighted, atol=1e-4)


def test_loss_variance_after_is_the_trained_clients_loss_on_their_own_data():
    """The paper's l_sum (Sec. 2.4) reads each client's loss "after training on its local data": the history's
    loss_variance_after is the population variance of those losses, computed here by hand; loss_variance (the mean
    over the round's mini-batches) differs from it."""
    trainer = PersonalizedLocalSGD(batch_size=8, optimizer=OptimizerSpec(name="sgd", lr=0.5))
    session, x, y, model, layout, run, glob = _session(trainer)
    sent = session.train(round=1, global_vectors=glob, client_ids=[torch.arange(3)])[0]
    losses = []
    for i in range(3):
        ext = session.client_model(0, i, sent[i])    # the client's trained base and transforms
        with torch.no_grad():
            losses.append(float(torch.nn.functional.cross_entropy(ext(x[run.partition[i]]), y[run.partition[i]])))
    m = session.metrics(0)
    want = torch.tensor(losses, dtype=torch.float64).var(unbiased=False)
    assert m["loss_variance_after"] == pytest.approx(float(want), rel=1e-5)
    assert m["loss_variance"] != pytest.approx(m["loss_variance_after"], rel=1e-3)
    h = _simulate(trainer).history
    assert "loss_variance_after" in h and (h["loss_variance_after"] >= 0).all()


def _fake_runs(acc):
    """records_table-like rows for the ε sweep's configurations, accuracy from acc(method, ε or None, seed)."""
    cfgs = [c for _, c in P.epsilon_sweep("mnist", 10, epsilons=[2.0, 8.0], seeds=[0, 1, 2], rounds=2, n_train=600)]
    return pd.DataFrame([{"config": c, "key": c.key(), "seed": c.seed, "accuracy": acc(c.method, c.epsilon, c.seed)}
                         for c in cfgs])


def test_sweep_table_pairs_seeds_and_subtracts_the_no_noise_gain():
    """PD-LDPFL leads FedAvg by 5 points without noise and at ε = 8, by 9 at ε = 2: the gain beyond no noise is 0
    at ε = 8 and +4 at ε = 2 (the paper's claim would show there); a diverged run drops out of the pairs."""
    lead = {None: 5.0, 8.0: 5.0, 2.0: 9.0}
    drop = {None: 0.0, 8.0: 0.0, 2.0: 30.0}

    def acc(m, e, s):
        v = 80.0 + s - drop[e] + (lead[e] if m == "pd_ldpfl" else 2.0 if m == "privatefl" else 0.0)
        return math.nan if (m == "fedavg" and e == 2.0 and s == 2) else v
    t = P.sweep_table(_fake_runs(acc)).set_index("ε per weight per round")
    assert list(t.index) == ["none", "8", "2"]
    assert t.loc["none", "FedAvg (%)"] == "81.0 [78.5, 83.5]"          # 80, 81, 82: t_{0.975,2} = 4.30
    assert t.loc["8", "PD-LDPFL − FedAvg (points)"] == "+5.0 [+5.0, +5.0]"  # the same lead at every seed
    assert t.loc["2", "gain beyond no noise (points)"] == "+4.0 [+4.0, +4.0]"   # seeds 0 and 1 (2 diverged)
    assert t.loc["8", "gain beyond no noise (points)"].startswith("+0.0")
    assert "1 of 3 diverged" in t.loc["2", "FedAvg (%)"]
    assert t.loc["none", "gain beyond no noise (points)"] == ""


def test_noise_cost_matches_each_pm_run_with_its_twin_without_noise():
    runs = _fake_runs(lambda m, e, s: 90.0 if e is None else 85.0 if e == 8.0 else 40.0)
    cost = P.noise_cost(runs)
    assert len(cost) == 3 * 3 * 2 and set(cost["ε"]) == {2.0, 8.0}
    assert (cost.loc[cost["ε"] == 8.0, "PM costs (points)"] == 5.0).all()
    assert (cost.loc[cost["ε"] == 2.0, "PM costs (points)"] == 50.0).all()
    assert P.noise_cost(runs[runs["config"].map(lambda c: c.mechanism is not None)]).empty  # no twins, no rows
    other = runs.assign(config=[c.replace(dataset="fashion_mnist") for c in runs["config"]])
    other = other.assign(key=[c.key() for c in other["config"]], accuracy=other["accuracy"] - 10.0)
    both = P.noise_cost(pd.concat([runs, other], ignore_index=True))   # another data set: rows of its own
    assert len(both) == 2 * len(cost) and set(both["dataset"]) == {"mnist", "fashion_mnist"}
    assert both.groupby("dataset")["no noise (%)"].max().to_dict() == {"mnist": 90.0, "fashion_mnist": 80.0}


def test_sweep_table_does_not_count_a_run_not_yet_trained_as_diverged():
    runs = _fake_runs(lambda m, e, s: 90.0 + s if e is None else 85.0 + s)
    part = runs[~((runs["seed"] == 2) & runs["config"].map(lambda c: c.mechanism is None))]   # seed 2 clear not run
    t = P.sweep_table(part).set_index("ε per weight per round")
    assert t.loc["none", "FedAvg (%)"] == "90.5 [84.1, 96.9]"      # seeds 0 and 1 only, none 'diverged'
    assert t.loc["8", "gain beyond no noise (points)"] == "+0.0 [+0.0, +0.0]"
    gone = runs.assign(accuracy=runs["accuracy"].where(runs["config"].map(lambda c: c.epsilon != 2.0 or
                                                                      c.method != "pd_ldpfl")))
    t = P.sweep_table(gone).set_index("ε per weight per round")
    assert t.loc["2", "PD-LDPFL (%)"] == "diverged (3 of 3)"
    assert t.loc["2", "PD-LDPFL − FedAvg (points)"] == "no seed with both runs finite"
    # a run stopped as diverged counts as diverged whatever its last accuracy (that of the broken model)
    flagged = runs.assign(diverged=runs["config"].map(lambda c: c.epsilon == 2.0 and c.method == "fedavg"))
    t = P.sweep_table(flagged).set_index("ε per weight per round")
    assert t.loc["2", "FedAvg (%)"] == "diverged (3 of 3)"


def test_sweep_gain_text_says_the_unit_once_and_reads_where_no_seed_is_finite():
    lead = {None: 5.0, 8.0: 5.0, 2.0: 9.0}
    t = P.sweep_table(_fake_runs(lambda m, e, s: 80.0 + s + (lead[e] if m == "pd_ldpfl" else 0.0)))
    assert P.sweep_gain_text(t, 3) == ("Its change from the no-noise lead (accuracy points, paired by seed over 3 "
                                       "seeds, 95 % t intervals; section 4): ε = 8: +0.0 [+0.0, +0.0]; "
                                       "ε = 2: +4.0 [+4.0, +4.0].")
    runs = _fake_runs(lambda m, e, s: math.nan if (e == 2.0 and m == "pd_ldpfl") else 80.0 + s)
    text = P.sweep_gain_text(P.sweep_table(runs), 3)
    assert text.endswith("ε = 2: no seed with both runs finite.") and "finite points" not in text
    no_clear = _fake_runs(lambda m, e, s: 80.0)
    no_clear = no_clear[no_clear["config"].map(lambda c: c.mechanism is not None)]
    assert P.sweep_gain_text(P.sweep_table(no_clear), 3) == ""


def test_sweep_words_give_the_setting_leads_costs_and_accuracies_of_one_sweep():
    lead = {None: 5.0, 8.0: 4.0, 2.0: 9.0}
    drop = {None: 0.0, 8.0: 1.0, 2.0: 30.0}

    def acc(m, e, s):
        v = 80.0 + s - drop[e] + (lead[e] if m == "pd_ldpfl" else 0.0)
        return math.nan if (m == "privatefl" and e == 2.0) else v
    w = P.sweep_words(_fake_runs(acc))
    assert w["setting"] == "10 clients, 2 rounds on 600 training images, 3 seeds"
    assert w["lead_none"] == "+5.0 [+5.0, +5.0]" and w["lead_8"] == "+4.0 [+4.0, +4.0]"
    assert w["cost_8"] == "+1.0 to +2.0"     # FedAvg and PrivateFL lose 1, PD-LDPFL 2 (its lead falls from 5 to 4)
    assert w["cost_2"] == "+26.0 to +30.0"   # FedAvg 30, PD-LDPFL 26; PrivateFL's diverged runs are left out
    assert w["accuracy_2"].startswith("FedAvg 51.0 [48.5, 53.5], PrivateFL diverged (3 of 3), PD-LDPFL 60.0")
    assert P.sweep_words(_fake_runs(acc).iloc[:0]) == {}
    runs = _fake_runs(acc)
    other = runs.assign(config=[c.replace(n_clients=5) for c in runs["config"]])
    with pytest.raises(ValueError, match="runs: .*one setting"):
        P.sweep_words(pd.concat([runs, other.assign(key=[c.key() for c in other["config"]])], ignore_index=True))


def _trained_toy_session(rounds: int = 3):
    """Two clients of 8x8 'images' (3 classes) after a few rounds of PD-LDPFL without noise."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(40, 1, 8, 8, generator=g)
    y = torch.randint(0, 3, (40,), generator=g)
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=3, hidden=(16,), bias=False,
                               activation="sigmoid", seed=0)
    part = [torch.arange(0, 20), torch.arange(20, 40)]
    session, glob = P.train_without_noise(model, x, y, part, rounds=rounds, lr=0.1, batch_size=8)
    return session, glob, x, y, part


def test_dlg_after_pm_compares_each_attack_with_the_trivial_guess_and_noise_matters():
    """In clear the adaptive attack recovers every image (correlation ~ 1, above the mean image's); PM at a huge
    epsilon changes little (the grid PM still rounds), at a small one it destroys the reconstruction; the summary
    pairs by image after averaging the noise draws."""
    session, glob, x, y, part = _trained_toy_session()
    kw = dict(clients=[0, 1], per_client=2, pool=x, lr=0.1, steps=30, noise_seeds=[0, 1])
    weak = P.dlg_after_pm(session, glob, x, y, part, epsilon=200.0, **kw)
    strong = P.dlg_after_pm(session, glob, x, y, part, epsilon=0.1, **kw)
    assert list(weak["image"].unique()) == [0, 1, 20, 21] and len(weak) == 8
    assert (weak["in clear"] > 0.95).all() and (weak["in clear"] > weak["trivial guess"]).all()
    assert (weak["after PM"] > 0.85).all()   # the grid PM still rounds each report: not exactly the clear attack
    assert strong["after PM"].abs().max() < 0.5
    assert strong.groupby("image")["after PM"].nunique().eq(2).all()   # the two noise draws differ
    s = P.dlg_after_pm_summary(strong).set_index("correlation with the true image")["mean [95 % CI] over images"]
    per = strong.groupby("image")[["after PM", "trivial guess"]].mean()
    paired = (per["after PM"] - per["trivial guess"]).mean()
    assert s["after PM − trivial guess (paired by image)"].startswith(f"{paired:+.2f} [")
    assert s["images beating the guess after PM"] == f"{int((per['after PM'] > per['trivial guess']).sum())} of 4"


def test_table2_text_puts_ours_beside_the_papers_cells():
    cfgs = [c for _, c in P.configs(datasets=["mnist"], clients=[10, 25], variants=["authors_code"])]
    acc = {("fedavg", 10): 97.0, ("privatefl", 10): 97.5, ("pd_ldpfl", 10): 98.0,
           ("fedavg", 25): 95.0, ("privatefl", 25): 96.0, ("pd_ldpfl", 25): 97.25}
    runs = pd.DataFrame([{"config": c, "dataset": c.dataset, "accuracy": acc[(c.method, c.n_clients)]} for c in cfgs])
    t = P.table2_text(runs)
    assert t["mnist_ours"] == "97.0 / 97.5 / 98.0 % with 10 clients, 95.0 / 96.0 / 97.2 % with 25 clients"
    assert t["mnist_paper"] == "92.5 / 95.11 / 96.4, 90.29 / 93.7 / 95.15"       # Table 2's cells
    assert t["mnist_fedavg_above"] == "4.5 to 4.7" and t["mnist_clients"] == "10, 25"
    assert t["mnist_lead"] == "+1.0, +2.2" and t["mnist_paper_lead"] == "+3.9, +4.9"
    with pytest.raises(ValueError, match="two runs of one Table 2 cell"):
        P.table2_text(pd.concat([runs, runs.iloc[:1]]))
    assert P.table2_text(runs[runs["config"].map(lambda c: c.method != "fedavg")]) == {}


def test_n_test_scores_on_a_fixed_part_of_the_test_set_and_keeps_stored_keys():
    from ldptut.data import Dataset

    g = torch.Generator().manual_seed(0)
    ds = Dataset(name="mnist", x_train=torch.rand(50, 1, 4, 4, generator=g), y_train=torch.arange(50) % 10,
                 x_test=torch.rand(30, 1, 4, 4, generator=g), y_test=torch.arange(30) % 10, num_classes=10,
                 input_shape=(1, 4, 4), source="test", classes=tuple(str(i) for i in range(10)), description="toy")
    run = P.table2_config("mnist", 5, rounds=1, n_train=20)
    assert "n_test" not in run.to_dict(defaults=False)          # the stored runs' keys are unchanged
    cut = run.replace(n_test=12)
    assert cut.key() != run.key()
    a, b = cut.data(ds), cut.data(ds)
    assert a.x_test.shape[0] == 12 and torch.equal(a.x_test, b.x_test)   # the same 12 images every time
    assert a.x_train.shape[0] == 20 and run.data(ds).x_test.shape[0] == 30
    rows = {tuple(r.tolist()) for r in ds.x_test.flatten(1)}
    assert all(tuple(r.tolist()) in rows for r in a.x_test.flatten(1))
    with pytest.raises(ValueError, match="n_test = 40 exceeds"):
        run.replace(n_test=40).data(ds)
    with pytest.raises(ValueError, match="n_test must be a positive integer"):
        run.replace(n_test=0)


def _defaults(**kw):
    """The chapter's parameters with Fig. 6's three starts a = 0, 1, 2 (the chapter's defaults have two)."""
    return P.Params(**{"init_a": [0.0, 1.0, 2.0], **kw})


def test_grid_shares_runs_between_experiments_and_passes_n_test():
    g = P.grid(_defaults())
    by = {}
    for e, c in g:
        by.setdefault(e, []).append(c)
    assert len(by["table 2"]) == 4 and len(by["table 2, no noise"]) == 3 and len(by["table 1"]) == 9
    assert len(by["fig. 6"]) == 6 and "fig. 8" not in by                      # cifar_alphas = []: Fig. 8 skipped
    assert all(c.n_test == 2000 for _, c in g)
    # the ε sweep's ε = 8 and no-noise runs are Table 2's: the same keys, trained once
    t2 = {c.key() for c in by["table 2"] + by["table 2, no noise"]}
    assert sum(c.key() in t2 for c in by["ε sweep"]) == 6 and len(by["ε sweep"]) == 9
    # Table 1's affine run is Fig. 6's start a = 1, b = 0 (recording the extended models' accuracy)
    t1_affine = [c for c in by["table 1"] if (c.input_transform, c.output_transform) == ("affine", "affine")]
    assert len(t1_affine) == 1 and t1_affine[0].eval_personal
    assert t1_affine[0].key() in {c.key() for c in by["fig. 6"]}
    assert sum(c.eval_personal for c in by["table 1"]) == 1
    # without that start in Fig. 6's grid, Table 1's run stays plain
    g2 = P.grid(_defaults(init_a=[2.0]))
    assert not any(c.eval_personal for e, c in g2 if e == "table 1")
    assert len({c.key() for _, c in g}) == 4 + 3 + 3 + 8 + 6


def test_theorem1_check_and_the_claim_tables_on_small_inputs():
    t, ok = P.theorem1_check([-0.01, 0.0, 0.02], scale=0.04, epsilon=8.0, n=20_000, generator=generator(0, "t1"))
    assert ok and list(t.columns) == ["w", "Eq. 6 variance (x 1e-6)", "sampled law's variance (x 1e-6)", "kurtosis"]
    assert (t["sampled law's variance (x 1e-6)"] > t["Eq. 6 variance (x 1e-6)"]).all()   # the grid law: 0.2 % above
    model = _tiny_model()
    layout = fl.ParamLayout.from_model(model)
    w = layout.flatten(dict(model.named_parameters())).detach()
    uploads = torch.stack([w, 0.5 * w, w.abs()])
    clipped, n_any, total = P.clipped_table(uploads, layout)
    assert list(clipped.index) == list(layout.names) + ["whole model"]
    by_hand = sum(int((uploads[i, s] / uploads[i, s].max() < -1).sum()) for i in range(3) for s in layout.slices)
    assert total == by_hand and 0 <= n_any <= 2          # |w| has no weight below -max
    leak = P.scale_leak_table(uploads, layout, epsilon=8.0, public_bound=0.1)
    assert len(leak) == 2 * (len(layout.names) + 1)
    assert set(leak["scale"]) == {"client's max (Algorithm 2)", "public bound 0.1"}


class _Rec:
    def __init__(self, config, history, final_accuracy):
        self.config, self.history, self.final_accuracy = config, history, final_accuracy


def test_table1_init_and_fig8_frames_from_records():
    t1 = P.table1_config(n_clients=4, rounds=2, n_train=600)
    h = pd.DataFrame({"round": [1, 2], "accuracy": [0.3, 0.5], "loss_variance_after": [0.1, 0.2],
                      "loss_variance": [0.3, 0.4], "personal_accuracy": [0.2, 0.6]})
    gone = h.assign(accuracy=[0.3, math.nan])
    recs = [_Rec(t1.replace(input_transform=a, output_transform=b), gone if b == "affine" else h, 0.5)
            for a in ("none", "affine") for b in ("none", "affine")]
    f = P.table1_frame(recs)
    assert f.loc[0, "l_sum"] == pytest.approx(0.3) and f.loc[0, "l_sum (during training)"] == pytest.approx(0.7)
    assert math.isnan(f.loc[1, "l_sum"]) and f.loc[0, "accuracy (%)"] == 50.0
    grid = P.table1_grid(f, "l_sum", ["affine", "none"])
    assert list(grid.index) == ["affine", "none"] and list(grid.columns) == ["affine", "none"]
    assert math.isnan(grid.loc["none", "affine"]) and grid.loc["affine", "none"] == pytest.approx(0.3)
    f6 = P.init_frame([_Rec(c, h, 0.5) for _, c in P.init_sweep([0.0, 1.0], [0.0], base=t1)])
    assert f6[["a", "b", "global (%)", "extended (%)"]].values.tolist() == [[0.0, 0.0, 50.0, 60.0], [1.0, 0.0, 50.0, 60.0]]
    f8 = P.fig8_frame([_Rec(c, h, 0.25) for _, c in P.fig8_runs(alphas=[0.5], epsilons=[8.0], model="cnn_pool",
                                                                 rounds=2, n_train=100)])
    assert list(f8["method"]) == ["fedavg", "privatefl", "pd_ldpfl"] and f8["l_sum"].tolist() == pytest.approx([0.3] * 3)
    assert P.fig8_frame([]).empty and list(P.fig8_frame([]).columns)[:3] == ["alpha", "ε", "method"]


def test_sweep_lead_text_states_the_lead_and_whether_it_grows():
    lead = {None: 5.0, 8.0: 5.0, 2.0: 3.0}
    runs = _fake_runs(lambda m, e, s: 80.0 + s + (lead[e] if m == "pd_ldpfl" else 0.0))
    text = P.sweep_lead_text(runs)
    assert text.startswith("PD-LDPFL's lead over FedAvg is +5.0 [+5.0, +5.0] without noise, +5.0 [+5.0, +5.0] at "
                           "ε = 8, +3.0 [+3.0, +3.0] at ε = 2 per weight per round (accuracy points, 3 seeds)")
    assert text.endswith("the claim predicts that it grows as ε falls, and it does not.")
    lead[2.0] = 9.0
    grows = P.sweep_lead_text(_fake_runs(lambda m, e, s: 80.0 + s + (lead[e] if m == "pd_ldpfl" else 0.0)))
    assert grows.endswith(": larger than without noise at ε = 2 (95 % interval over seeds above 0).")
    one = _fake_runs(lambda m, e, s: 80.0 + (lead[e] if m == "pd_ldpfl" else 0.0))
    one = one[one["seed"] == 0]     # one seed: no interval, so no claim that the lead grows
    text = P.sweep_lead_text(one)
    assert "+5.0 without noise, +5.0 at ε = 8, +9.0 at ε = 2 per weight per round (accuracy points, 1 seed)" in text
    assert text.endswith("larger than without noise only at ε = 2, where the gain's 95 % interval over seeds does not "
                         "exclude 0 (or, with one seed, there is none).")
    assert P.sweep_lead_text(runs.iloc[:0]) == ""


def test_paper_scale_pairs_each_cell_with_its_twin_and_says_the_gap():
    cfgs = [c for e, c in P.configs(datasets=["mnist"], clients=[5, 10], variants=["authors_code"],
                                    no_noise_clients=[5, 10])]
    acc = {"fedavg": 95.0, "privatefl": 96.0, "pd_ldpfl": 97.0}

    def a(c):
        return acc[c.method] + (0.5 if c.mechanism is None else 0.0) + (0.25 if c.method == "pd_ldpfl" and
                                                                          c.mechanism is None and c.n_clients == 10 else 0)
    stored = pd.DataFrame([{"config": c, "key": c.key(), "dataset": c.dataset, "n_clients": c.n_clients,
                            "seed": c.seed, "accuracy": a(c)} for c in cfgs])
    ps = P.paper_scale(stored)
    assert ps.cells.loc[("mnist", "authors_code", 5), "fedavg"] == "95.0 / 95.5"
    assert ps.words["control_gap"] == "0.2" and ps.words["control_cells"] == "2"   # 10 clients: +2.0 vs +2.25
    assert ps.words["cost"] == "+0.5 to +0.8" and ps.words["mnist_lead"] == "+2.0, +2.0"
    assert set(ps.compare["clients"]) == {5, 10} and (ps.compare["ours (%)"] != "not run").all()


def test_pd_ldpfl_cuts_its_data_with_its_own_shuffles_only():
    """PD-LDPFL's n_train / n_test take the first n of its own fixed shuffles of the whole sets (its stored runs were
    trained so), not of FedAvgConfig's subsets, which share the field names."""
    import dataclasses

    from ldptut.data import load_dataset
    from ldptut.rng import generator

    ds = load_dataset("digits")
    n, m = ds.x_train.shape[0], ds.x_test.shape[0]
    tag = lambda k: torch.arange(k, dtype=torch.float32)[:, None, None, None].expand(k, *ds.input_shape).contiguous()  # noqa: E731
    tagged = dataclasses.replace(ds, x_train=tag(n), x_test=tag(m))
    c = P.table2_config("mnist", 5, rounds=1, n_train=200, n_test=100).replace(dataset="digits", model="logreg")
    cut = c.data(tagged)
    want_train = torch.randperm(n, generator=generator(0, "pd-ldpfl-train-shuffle"))[:200]
    want_test = torch.randperm(m, generator=generator(0, "pd-ldpfl-test-shuffle"))[:100]
    assert torch.equal(cut.x_train[:, 0, 0, 0].long(), want_train)
    assert torch.equal(cut.x_test[:, 0, 0, 0].long(), want_test)
