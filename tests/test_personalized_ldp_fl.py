"""ldptut.papers.personalized_ldp_fl (Wu et al. 2023): Gaussian and ldpsign mechanisms against their closed forms, the
paper's σ formula, scikit-learn's per-sample SGD (ldptut.training.PerSampleSGD), aggregations A/B/C, the
grid as typed runs trained together by the round engine, stored runs, and paper vs ours."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from ldptut import accounting, audits, fl, models, partition, provenance
from ldptut.experiments import Runner
from ldptut.mechanisms import Gaussian, LdpSign
from ldptut.papers import personalized_ldp_fl as P
from ldptut.rng import generator
from ldptut.training import PerSampleSGD, _local_order, optimal_eta0, optimal_learning_rate

N = 200_000


# ------------------------------------------------------------------------------ mechanisms
@pytest.mark.parametrize("eps,delta,radius", [(1.0, 1e-5, 1.0), (4.0, 1e-3, 0.5)])
def test_gaussian_mechanism_moments_and_law(eps, delta, radius):
    mech = Gaussian(epsilon=eps, delta=delta, radius=radius)
    assert mech.sigma == pytest.approx(accounting.gaussian_sigma(eps, delta, 2 * radius))
    assert mech.guarantee.epsilon == eps and mech.guarantee.delta == delta
    x = torch.tensor([-2 * radius, -radius / 2, 0.0, radius])  # the first is clipped
    y = mech.privatize(x.expand(N, 4).contiguous().double(), generator(1, "gauss"))
    se = torch.sqrt(mech.variance(x) / N)
    assert bool(((y.mean(0) - mech.mean(x)).abs() <= 4 * se).all())  # unbiased for clip(x), 4 standard errors
    assert bool(((y.var(0) / mech.variance(x) - 1).abs() < 0.02).all())  # variance σ² within 2 %
    # empirical CDF at 5 points against the closed form, binomial 5 standard errors
    for q in (-1.5, -0.5, 0.0, 0.7, 1.9):
        pt = mech.mean(x) + q * mech.sigma
        emp = (y <= pt).double().mean(0)
        exact = mech.cdf(pt, x)
        assert bool(((emp - exact).abs() <= 5 * torch.sqrt(exact * (1 - exact) / N)).all())


def test_gaussian_with_sigma_gives_the_exact_epsilon():
    base = Gaussian(epsilon=2.0, delta=1e-4, radius=3.0)
    again = Gaussian.with_sigma(sigma=base.sigma, delta=1e-4, radius=3.0)
    assert again.epsilon == pytest.approx(2.0, rel=1e-8)
    big = Gaussian.with_sigma(sigma=117.0, delta=1 / 500, radius=200.0)  # the paper's digits, ε_i = 1
    assert big.epsilon > 10  # far from the budget of 1 the paper attaches to it
    with pytest.raises(ValueError, match="sigma"):
        Gaussian.with_sigma(sigma=0.0, delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        Gaussian(epsilon=1.0, delta=1.5)


@pytest.mark.parametrize("eps,delta,sens,radius", [(5.0, 1e-5, 8.0, 4.0), (1.0, 1e-3, 4.0, 2.0), (15.0, 1e-5, 8.0, 4.0)])
def test_ldpsign_law_and_exact_epsilon(eps, delta, sens, radius):
    mech = LdpSign(epsilon=eps, delta=delta, l2_sensitivity=sens, radius=radius)
    assert mech.sigma == pytest.approx(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps)
    assert mech.calibration.epsilon == eps and mech.calibration.delta == delta
    x = torch.tensor([-radius * 2, -radius, -0.3 * radius, 0.0, 0.8 * radius])
    p = mech.prob_plus(x)
    assert torch.allclose(p, torch.special.ndtr(mech.clip(x) / mech.sigma))
    y = mech.privatize(x.expand(N, 5).contiguous().double(), generator(2, "sign"))
    assert set(y.unique().tolist()) <= {-1.0, 1.0}
    freq = (y > 0).double().mean(0)
    assert bool(((freq - p).abs() <= 5 * torch.sqrt(p * (1 - p) / N)).all())
    assert bool(((y.mean(0) - mech.mean(x)).abs() <= 5 * torch.sqrt(mech.variance(x) / N)).all())
    assert torch.allclose(mech.variance(x), 1 - mech.mean(x) ** 2)
    # exact LDP: the output is binary, so the loss is pure and maximal between the range ends
    audit = audits.exact_ldp_audit(mech, torch.linspace(-radius, radius, 41))
    assert audit.passed
    assert audit.epsilon_observed == pytest.approx(mech.guarantee.epsilon, rel=1e-9)
    expected = math.log(0.5 * math.erfc(-radius / mech.sigma / math.sqrt(2)) / (0.5 * math.erfc(radius / mech.sigma / math.sqrt(2))))
    assert mech.guarantee.epsilon == pytest.approx(expected, rel=1e-9)
    assert mech.guarantee.delta == 0


@pytest.mark.parametrize("eps,radius", [(0.01, 0.05), (1.0, 1.0), (4.0, 0.05), (30.0, 2.0)])
def test_ldpsign_exact_calibration_gives_the_pure_epsilon_asked_for(eps, radius):
    """Without (δ, Δ2) σ solves ln(Φ(r/σ) / Φ(-r/σ)) = ε: the exact audit of the binary law finds ε, never more."""
    mech = LdpSign(epsilon=eps, radius=radius)
    assert mech.l2_sensitivity is None and mech.calibration.delta == 0
    assert mech.guarantee.epsilon <= eps and mech.guarantee.epsilon == pytest.approx(eps, rel=1e-11)
    s = radius / mech.sigma
    by_hand = math.log(0.5 * math.erfc(-s / math.sqrt(2))) - math.log(0.5 * math.erfc(s / math.sqrt(2)))
    assert by_hand == pytest.approx(eps, rel=1e-9)
    xs = torch.linspace(-radius, radius, 41, dtype=torch.float64)
    audit = audits.exact_ldp_audit(mech, xs)
    assert audit.passed and audit.epsilon_observed == pytest.approx(eps, rel=1e-9)

    class Realised:   # the law float32 uniforms realise: the small probability rounded up to 2^-24
        guarantee, center, radius = mech.guarantee, mech.center, mech.radius
        output_distribution = staticmethod(mech.realized_distribution)

    real = audits.exact_ldp_audit(Realised(), xs)
    assert real.passed and real.epsilon_observed <= mech.guarantee.epsilon
    x = torch.tensor([-radius, 0.0, 0.5 * radius], dtype=torch.float64)
    y = mech.privatize(x.expand(N, 3).contiguous(), generator(3, f"exact sign {eps}"))
    assert bool(((y.mean(0) - mech.mean(x)).abs() <= 5 * torch.sqrt(mech.variance(x) / N)).all())


def test_ldpsign_float32_reports_follow_the_realised_law():
    """float32 inputs draw float32 uniforms: the report frequencies match realized_distribution (binomial 5 s.e.), and
    far in the tail (q < 2^-24) the less likely report keeps probability 2^-24 instead of vanishing."""
    mech = LdpSign(epsilon=4.0, radius=1.0)
    x = torch.tensor([-1.0, -0.2, 0.0, 0.6, 1.0])
    y = mech.privatize(x.expand(N, 5).contiguous(), generator(4, "float32 sign"))
    assert y.dtype == torch.float32
    _, probs = mech.realized_distribution(x)
    p = probs[:, 1]
    freq = (y > 0).double().mean(0)
    assert bool(((freq - p).abs() <= 5 * torch.sqrt(p * (1 - p) / N)).all())
    tail = LdpSign(epsilon=40.0, radius=1.0)
    _, probs = tail.realized_distribution(torch.tensor([1.0]))
    assert probs[0, 0].item() == 2.0 ** -24 and tail.output_distribution(torch.tensor([1.0]))[1][0, 0] < 2.0 ** -24


def test_ldpsign_refuses_half_a_calibration_and_a_shifted_center():
    with pytest.raises(ValueError, match="delta and l2_sensitivity"):
        LdpSign(epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="center"):
        LdpSign(epsilon=1.0, radius=1.0, center=0.5)
    with pytest.raises(ValueError, match="epsilon"):
        LdpSign(epsilon=0.0)


def test_ldpsign_audit_catches_a_wrong_claim():
    mech = LdpSign(epsilon=5.0, delta=1e-5, l2_sensitivity=8.0, radius=4.0)
    mech._epsilon = 0.5 * mech.guarantee.epsilon  # claim half the true loss
    assert not audits.exact_ldp_audit(mech, torch.linspace(-4, 4, 11)).passed


# ------------------------------------------------------------------------------ paper's σ_i
def test_paper_sigma_readings():
    eps, delta, q, rounds = 1.0, 1 / 500, 0.8, 10
    bracket = 2 * math.log(500) / eps ** 2 + 1 / eps
    a = P.paper_gaussian_sigma(eps, delta=delta, q=q, rounds=rounds)
    assert a == pytest.approx(4 * q * math.sqrt(2 * rounds / (1 - q) * bracket))
    b = P.paper_gaussian_sigma(eps, delta=delta, q=q, rounds=rounds, reading="bracket_outside")
    assert b == pytest.approx(4 * q * math.sqrt(2 * rounds / (1 - q)) * bracket)
    # σ falls with ε under both readings
    assert P.paper_gaussian_sigma(10.0, delta=delta, q=q, rounds=rounds) < a
    with pytest.raises(ValueError, match="q"):
        P.paper_gaussian_sigma(1.0, delta=delta, q=1.0, rounds=10)
    with pytest.raises(ValueError, match="reading"):
        P.paper_gaussian_sigma(1.0, delta=delta, q=0.5, rounds=10, reading="other")
    with pytest.raises(ValueError, match="epsilon"):
        P.paper_gaussian_sigma(0.0, delta=delta, q=0.5, rounds=10)


# ------------------------------------------------------------------------------ sklearn schedule
def test_optimal_schedule_formula():
    for alpha in (1e-4, 1e-3, 0.05):
        eta0 = optimal_eta0(alpha)
        assert eta0 == pytest.approx(alpha ** -0.25)
        assert optimal_learning_rate(1, alpha=alpha) == pytest.approx(eta0)
        t0 = 1 / (alpha * eta0)
        assert optimal_learning_rate(101, alpha=alpha) == pytest.approx(1 / (alpha * (t0 + 100)))


def _one_run_simulation(x, y, *, partition, privatizer=None, aggregator=fl.mean_aggregator, rounds=2, alpha=1e-3,
                        seed=4, q=1.0):
    k, dim = int(y.max()) + 1, x.shape[1]
    model = models.LogisticRegression(input_shape=(dim,), num_classes=k).double()
    run = fl.Run(seed=seed, partition=partition, privatizer=privatizer, aggregator=aggregator,
                 initial=torch.zeros(k * (dim + 1), dtype=torch.float64))
    cfg = fl.FLConfig(rounds=rounds, trainer=PerSampleSGD(alpha=alpha, q=q), progress=False, divergence_factor=None)
    return fl.simulate(cfg, [run], model=model, x_train=x, y_train=y, x_test=x, y_test=y)


def test_local_training_equals_scikit_learn():
    """Two rounds of one client without noise = SGDClassifier(log_loss, 'optimal').partial_fit twice
    on the same sample order: the schedule, the L2 shrinkage, the one-vs-rest updates and the sample
    counter carried from round to round (the trainer's persistent client state) agree."""
    from sklearn.linear_model import SGDClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 6)) * 3
    y = rng.integers(0, 3, 150)
    part = [torch.arange(150)]
    res = _one_run_simulation(torch.tensor(X), torch.tensor(y), partition=part)
    clf = SGDClassifier(loss="log_loss", learning_rate="optimal", alpha=1e-3, shuffle=False, max_iter=1, tol=None)
    for r in (1, 2):
        order = _local_order(part[0], q=1.0, passes=1, g=generator(4, "round", r, "client", 0, "sample")).numpy()
        clf.partial_fit(X[order], y[order], classes=[0, 1, 2])
    w = res.weights[0]
    # scikit-learn stores w as wscale * v, so float64 rounding differs at ~1e-8 relative; an off-by-one
    # in t (t0 ~ 178 here) or a missing shrinkage would be off by ~1e-3 relative
    np.testing.assert_allclose(w[:18].reshape(3, 6).numpy(), clf.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(w[18:].numpy(), clf.intercept_, rtol=1e-6, atol=1e-9)
    assert res.history["accuracy"].iloc[-1] == pytest.approx(clf.score(X, y))


def test_per_sample_sgd_needs_a_linear_model_and_every_client():
    x, y = torch.randn(40, 5, dtype=torch.float64), torch.arange(40) % 2
    model = models.build_model("mlp", input_shape=(5,), num_classes=2).double()
    cfg = fl.FLConfig(rounds=1, trainer=PerSampleSGD(), progress=False)
    with pytest.raises(ValueError, match="linear model"):
        fl.simulate(cfg, [fl.Run(seed=0, partition=[torch.arange(40)])], model=model, x_train=x, y_train=y,
                    x_test=x, y_test=y)
    with pytest.raises(ValueError, match="every client every round"):
        fl.simulate(fl.FLConfig(rounds=1, trainer=PerSampleSGD(), client_fraction=0.5, progress=False),
                    [fl.Run(seed=0, partition=[torch.arange(20), torch.arange(20, 40)])],
                    model=models.LogisticRegression(input_shape=(5,), num_classes=2).double(),
                    x_train=x, y_train=y, x_test=x, y_test=y)
    with pytest.raises(ValueError, match=r"q must be a real number in \(0, 1\]"):
        PerSampleSGD(q=1.5)


# ------------------------------------------------------------------------------ aggregation
def _ctx(m, d=4, *, seed=0, r=1, glob=None):
    layout = fl.ParamLayout.from_model(models.LogisticRegression(input_shape=(d - 1,), num_classes=1))
    return fl.RoundContext(round=r, client_ids=torch.arange(m), layout=layout,
                           global_vector=torch.zeros(d, dtype=torch.float64) if glob is None else glob,
                           generators=[generator(seed, i) for i in range(m)], send="weights",
                           num_samples=torch.ones(m), server_generator=generator(seed, "round", r, "server"))


def test_weighted_mean_b():
    sig = [1.0, 2.0, 4.0]
    w = P.inverse_sigma_weights(sig)
    assert w.sum().item() == pytest.approx(1.0)
    assert torch.allclose(w, torch.tensor([4 / 7, 2 / 7, 1 / 7], dtype=torch.float64))
    pay = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    out, metrics = P.WeightedBySigma(sig)(pay, context=_ctx(3))
    assert torch.allclose(out, (w[:, None] * pay).sum(0)) and metrics == {}
    with pytest.raises(ValueError, match="sigma"):
        P.WeightedBySigma([1.0, 0.0])


def test_probability_selection_c():
    sig = [1.0, 1.0, 0.1]  # P = (1/12, 1/12, 10/12)
    agg = P.ProbabilitySelection(sig)
    assert agg.probabilities.sum().item() == pytest.approx(1.0)
    assert torch.allclose(agg.probabilities, torch.tensor([1, 1, 10], dtype=torch.float64) / 12)
    pay = torch.tensor([[1.0, 1, 1, 1], [3.0, 3, 3, 3], [10.0, 10, 10, 10]], dtype=torch.float64)
    glob = torch.full((4,), -7.0, dtype=torch.float64)
    counts = torch.zeros(3)
    empty = 0
    for r in range(1, 4001):
        ctx = _ctx(3, r=r, glob=glob)
        omega = torch.rand((), generator=generator(0, "round", r, "server"), dtype=torch.float64).item()
        out, metrics = agg(pay, context=ctx)
        keep = agg.probabilities > omega
        counts += keep
        if keep.any():
            assert torch.allclose(out, pay[keep].mean(0))
        else:
            empty += 1
            assert torch.equal(out, glob)  # on_empty="keep": the previous global model
        assert metrics == {"clients_used": int(keep.sum())}
    # each client is kept with probability P_i (ω uniform): 5 binomial standard errors
    p = agg.probabilities.float()
    assert bool(((counts / 4000 - p).abs() <= 5 * torch.sqrt(p * (1 - p) / 4000)).all())
    assert abs(empty / 4000 - (1 - 10 / 12)) <= 5 * math.sqrt((1 / 6) * (5 / 6) / 4000)
    # fallback to the mean of all clients
    allagg = P.ProbabilitySelection([1.0, 1.0, 1.0], on_empty="all")  # P = 1/3 each
    for r in range(1, 200):
        omega = torch.rand((), generator=generator(0, "round", r, "server"), dtype=torch.float64).item()
        if omega >= 1 / 3:
            assert torch.allclose(allagg(pay, context=_ctx(3, r=r))[0], pay.mean(0))
            break
    with pytest.raises(ValueError, match="on_empty"):
        P.ProbabilitySelection(sig, on_empty="skip")
    ctx = _ctx(3)
    ctx.server_generator = None
    with pytest.raises(ValueError, match="server_generator"):
        agg(pay, context=ctx)


def test_probability_selection_c_readings():
    """max: P_i = rho_i / max rho (the least noisy client always passes); client: each client kept on its own draw,
    independently, with probability P_i (counts within 5 binomial standard errors, and pairs as often as the product
    of their P_i); the default reading is the adopted sum/round and stays out of a run's key."""
    sig = [1.0, 2.0, 0.5]  # rho = 1, 0.5, 2
    mx = P.ProbabilitySelection(sig, reading="max/round")
    assert torch.allclose(mx.probabilities, torch.tensor([0.5, 0.25, 1.0], dtype=torch.float64))
    pay = torch.tensor([[1.0, 1, 1, 1], [3.0, 3, 3, 3], [10.0, 10, 10, 10]], dtype=torch.float64)
    n = 4000
    counts, both01 = torch.zeros(3), 0
    per_client = P.ProbabilitySelection(sig, reading="max/client")
    for r in range(1, n + 1):
        out, m = mx(pay, context=_ctx(3, r=r))
        assert m["clients_used"] >= 1  # client 2 always passes: never an empty round
        out, m = per_client(pay, context=_ctx(3, r=r))
        g = generator(0, "round", r, "server")
        keep = torch.rand(3, generator=g, dtype=torch.float64) < per_client.probabilities
        counts += keep
        both01 += int(keep[0] and keep[1])
        assert m == {"clients_used": int(keep.sum())}
        if keep.any():
            assert torch.allclose(out, pay[keep].mean(0))
    p = per_client.probabilities.float()
    assert bool(((counts / n - p).abs() <= 5 * torch.sqrt(p * (1 - p) / n)).all())
    q = 0.5 * 0.25  # independent draws: the pair (0, 1) is kept together with probability P_0 P_1
    assert abs(both01 / n - q) <= 5 * math.sqrt(q * (1 - q) / n)
    assert torch.allclose(P.ProbabilitySelection(sig, reading="sum/client").probabilities,
                          P.selection_probabilities(sig))
    with pytest.raises(ValueError, match="reading"):
        P.ProbabilitySelection(sig, reading="max")


def test_sign_aggregation():
    pay = torch.tensor([[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    out, _ = P.SignOf(fl.mean_aggregator)(pay, context=_ctx(2))
    assert out.tolist() == [1.0, 0.0, 0.0, -1.0]
    out, _ = P.SignOf(P.WeightedBySigma([1.0, 2.0]))(pay, context=_ctx(2))  # client 0 weighs twice
    assert out.tolist() == [1.0, -1.0, 1.0, -1.0]
    out, metrics = P.SignOf(P.ProbabilitySelection([1.0, 1e-9]))(pay, context=_ctx(2))  # keeps client 1 only
    assert out.tolist() == [1.0, 1.0, -1.0, -1.0] and metrics == {"clients_used": 1}
    # with a step (signSGD's majority vote on updates): η times the sign of the mean
    out, _ = P.SignOf(fl.mean_aggregator, step=0.25)(pay, context=_ctx(2))
    assert out.tolist() == [0.25, 0.0, 0.0, -0.25]
    with pytest.raises(ValueError, match="step"):
        P.SignOf(fl.mean_aggregator, step=0.0)


def test_aggregators_plug_into_run_fedavg():
    from ldptut.data import load_digits

    ds = load_digits()
    parts = partition.iid(ds.y_train, 3, seed=0)
    model = models.build_model("logreg", input_shape=ds.input_shape, num_classes=10, seed=0)
    mechs = [Gaussian(epsilon=e, delta=1e-3, radius=1.0) for e in (1.0, 5.0, 10.0)]
    sel = P.ProbabilitySelection([m.sigma for m in mechs])
    res = fl.run_fedavg(model, x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test,
                        partition=parts, rounds=3, lr=0.1, privatizer=P.PersonalizedPerturbation(mechs, clip=1.0),
                        aggregator=sel, progress=False)
    assert len(res.history) == 3 and (res.history["clients_used"] <= 3).all()
    # each client's own Gaussian guarantee, composed exactly over d coordinates and the rounds
    d = res.layout.numel
    worst = max(mechs, key=lambda m: m.guarantee.mu).guarantee
    assert res.guarantees[0].epsilon == pytest.approx(worst.compose(d=d, rounds=3).epsilon, rel=1e-9)


# ------------------------------------------------------------------------------ the grid as typed runs
def _small_digits_experiment(**changes):
    setting = {**P.SETTINGS["iid"]["digits"], "rounds": 2, "epsilons": [1.0],
               "profiles": {"{1,5,10}": [1, 5, 10]}, **changes}
    return P.load_experiment("digits", "iid", setting, train_size=600)


def test_grid_runs_are_typed_and_trained_together_with_the_same_numbers_as_alone(tmp_path):
    exp = _small_digits_experiment()
    configs = P.configs(exp, [0, 1])
    assert len(configs) == 2 * 5 and all(isinstance(c, P.WuConfig) for c in configs)
    assert len({c.group_key() for c in configs}) == 1  # one experiment: trained in one simulation
    together = P.run_experiment(Runner(None, progress=False), exp, [0, 1])
    assert len(together) == 2 * 5 * 2  # seeds x (no noise, ε = 1, profile with A/B/C) x rounds
    alone = P.histories(Runner(None, progress=False).run_all([configs[9]]))  # seed 1, profile C
    key = ["seed", "profile", "aggregation", "round"]
    mine = together.merge(alone[key], on=key)
    assert mine["accuracy"].tolist() == alone["accuracy"].tolist()
    assert mine["clients_used"].tolist() == alone["clients_used"].tolist()
    with pytest.raises(ValueError, match="epsilons must hold one ε per client"):
        configs[0].replace(epsilons=(1.0,))
    with pytest.raises(ValueError, match="aggregation must be one of"):
        configs[0].replace(aggregation="D")


def test_stored_runs_load_back_with_their_labels(tmp_path, monkeypatch):
    exp = _small_digits_experiment()
    trained = P.run_experiment(Runner(tmp_path, progress=False), exp, [0, 1])
    assert len(list(tmp_path.glob("*.json"))) == 10  # one record per run
    loaded = P.run_experiment(Runner(tmp_path, train=False, progress=False), exp, [0, 1])
    cols = ["experiment", "kind", "profile", "aggregation", "seed", "round", "accuracy", "clients_used"]
    pd.testing.assert_frame_equal(trained[cols], loaded[cols])
    stored = P.load_runs(tmp_path)
    assert set(stored["seed"]) == {0, 1} and set(stored["n_train"]) == {600}
    key = ["seed", "profile", "aggregation", "round"]
    s, t = (df.sort_values(key).reset_index(drop=True) for df in (stored, trained))
    assert s["accuracy"].tolist() == t["accuracy"].tolist()
    assert set(stored["code"]) == {"current"}  # trained by this code
    # a later change of the numerics (ldptut.provenance.NUMERICS bumped) flags every stored run as older code
    monkeypatch.setattr(provenance, "NUMERICS", provenance.NUMERICS + 1)
    flagged = set(P.load_runs(tmp_path)["code"])
    assert flagged == {f"older code (numerics v{provenance.NUMERICS - 1}, now v{provenance.NUMERICS})"}, flagged
    monkeypatch.undo()
    # another setting is another record, never the stored one
    P.run_experiment(Runner(tmp_path, progress=False), exp, [0], on_empty="all")
    assert len(list(tmp_path.glob("*.json"))) == 15  # on_empty is part of every run's key


def test_covertype_raw_is_the_same_split_with_unscaled_numeric_columns():
    s = P.SETTINGS["iid"]["covertype"]
    std = P.load_experiment("covertype", "iid", s, train_size=2000, test_size=500)
    raw = P.load_experiment("covertype_raw", "iid", s, train_size=2000, test_size=500)
    assert torch.equal(std.y_train, raw.y_train) and torch.equal(std.y_test, raw.y_test)
    assert torch.equal(std.x_train[:, 10:], raw.x_train[:, 10:])  # the 0/1 columns are untouched
    elevation = raw.x_train[:, 0]
    assert bool(((elevation - elevation.round()).abs() < 1e-6).all()) and 1800 < float(elevation.mean()) < 3900  # metres
    assert float(elevation.std()) > 100  # unscaled: elevation varies by hundreds of metres
    from ldptut import data as D

    info = D.load_dataset("covertype").info
    mean, sd = (torch.tensor(info[k], dtype=torch.float64) for k in ("num_mean", "num_std"))
    torch.testing.assert_close((raw.x_train[:, :10] - mean) / sd, std.x_train[:, :10])
    with pytest.raises(ValueError, match="covertype_raw"):
        P.load_experiment("covtype_scaled", "iid", s)


def test_final_rounds_takes_the_last_round_of_each_experiment():
    h = pd.DataFrame({"experiment": ["a"] * 4 + ["b"] * 2, "round": [1, 2, 1, 2, 1, 1], "run": [0, 0, 1, 1, 2, 3],
                      "accuracy": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]})
    assert P.final_rounds(h)["accuracy"].tolist() == [0.2, 0.4, 0.5, 0.6]  # b has one round only
    assert P.final_rounds(h.drop(columns="experiment"))["accuracy"].tolist() == [0.2, 0.4]


# ------------------------------------------------------------------------------ paper vs ours
def _wu_final(gains_b, gains_c, experiment="iid digits"):
    """Final rows of a toy grid: A at 0.50 on two profiles, B and C at A + the given gain (points) per seed."""
    rows = []
    for seed, (gb, gc) in enumerate(zip(gains_b, gains_c)):
        rows.append({"experiment": experiment, "kind": "non-personalized", "profile": "no noise", "aggregation": "A",
                     "seed": seed, "accuracy": 0.80 + 0.01 * seed})
        for prof in ("p1", "p2"):
            for agg, acc in (("A", 0.50), ("B", 0.50 + gb / 100), ("C", 0.50 + gc / 100)):
                rows.append({"experiment": experiment, "kind": "personalized", "profile": prof, "aggregation": agg,
                             "seed": seed, "accuracy": acc})
    return pd.DataFrame(rows)


def test_wu_gains_are_paired_per_seed_with_a_t_interval():
    t = P.compare(_wu_final(gains_b=[4.0, 6.0, 5.0], gains_c=[10.0, -10.0, 3.0])).set_index("quantity")
    assert t.loc["no-noise accuracy (%)", "ours"] == "81.0 ± 1.0"
    assert t.loc["no-noise accuracy (%)", "paper"] == 88.7
    assert t.loc["gain of B over A (points)", "ours"] == "+5.0 ± 1.0"
    # paired t interval over 3 seeds: 5.0 ± t(0.975, 2) * 1.0 / sqrt(3) = 5.0 ± 2.48
    assert t.loc["gain of B over A (points)", "paired 95 % CI"] == "[+2.5, +7.5]"
    assert t.loc["gain of B over A (points)", "test"] == "gain"
    assert t.loc["gain of C over A (points)", "ours"] == "+1.0 ± 10.1"  # std of (10, -10, 3) = sqrt(103)
    assert t.loc["gain of C over A (points)", "test"] == "no evidence"
    one = P.compare(_wu_final([2.0], [3.0], experiment="noniid covertype")).set_index("quantity")
    assert one.loc["gain of B over A (points)", "paper"] == "none (no gain)"  # "does not obtain accuracy gains from
    # the weighted average method and the probability-based selection method" (Section 5.3.2)
    nd = P.compare(_wu_final([2.0], [3.0], experiment="noniid digits")).set_index("quantity")
    assert nd.loc["gain of B over A (points)", "paper"] == "not reported"
    assert one.loc["gain of C over A (points)", "paper"] == "none (no gain)"
    assert one.loc["gain of C over A (points)", "paired 95 % CI"] == "1 seed"
    assert one.loc["gain of C over A (points)", "test"] == ""
    lo, hi = P.paired_t_interval(pd.Series([-4.0, -6.0, -5.0]))
    assert hi < 0 and lo == pytest.approx(-5.0 - 4.302653 / 3 ** 0.5, abs=1e-5)   # t(0.975, 2) = 4.302653
    assert P.compare(_wu_final(gains_b=[-4.0, -6.0, -5.0], gains_c=[0.0, 0.0, 0.0])).set_index("quantity").loc[
        "gain of B over A (points)", "test"] == "loss"
    with pytest.raises(ValueError, match="no reported numbers"):
        P.compare(_wu_final([1.0], [1.0], experiment="iid mnist"))
    with pytest.raises(ValueError, match="lacks the columns"):
        P.compare(pd.DataFrame({"experiment": ["iid digits"]}))


def test_wu_gains_of_noise_dominated_models_are_not_testable():
    # A at 0.50 on both profiles; B and C differ from it by the same gains in every seed: intervals exclude 0
    final = _wu_final(gains_b=[4.0, 6.0, 5.0], gains_c=[-3.0, -4.0, -5.0])
    plain = P.compare(final).set_index("quantity")["test"]
    assert plain["gain of B over A (points)"] == "gain" and plain["gain of C over A (points)"] == "loss"
    # no-skill rate 0.60 is above every profile mean of A (0.50), B (0.55 at best) and C: both rows not testable
    t = P.compare(final, no_skill={"iid digits": 0.60}).set_index("quantity")
    assert t.loc["gain of B over A (points)", "test"] == "not testable"
    assert t.loc["gain of C over A (points)", "test"] == "not testable"
    assert t.loc["gain of B over A (points)", "paired 95 % CI"] == "[+2.5, +7.5]"  # the interval is still printed
    # at 0.52, B's best profile mean (0.55) is above it: B is tested; C (at most 0.47) and A (0.50) are not
    t = P.compare(final, no_skill={"iid digits": 0.52}).set_index("quantity")["test"]
    assert t["gain of B over A (points)"] == "gain" and t["gain of C over A (points)"] == "not testable"
    # a rate equal to the best mean counts as no skill ("at or below"); another experiment's rate is not used
    assert P.compare(final, no_skill={"iid digits": 0.55}).set_index("quantity").loc[
        "gain of B over A (points)", "test"] == "not testable"
    assert P.compare(final, no_skill={"noniid digits": 0.99}).set_index("quantity")["test"].equals(plain)
    # one profile that learns makes the row testable, even if the other is noise
    lifted = final.copy()
    lifted.loc[(lifted["profile"] == "p1") & (lifted["aggregation"] == "A"), "accuracy"] = 0.70
    assert P.compare(lifted, no_skill={"iid digits": 0.60}).set_index("quantity").loc[
        "gain of C over A (points)", "test"] != "not testable"
    for bad in (60.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"no_skill\['iid digits'\]"):
            P.compare(final, no_skill={"iid digits": bad})


def test_majority_rate_is_the_share_of_the_most_frequent_class():
    assert P.majority_rate(torch.tensor([0, 2, 2, 1, 2, 0])) == pytest.approx(0.5)
    assert P.majority_rate(torch.tensor([3])) == 1.0
    with pytest.raises(ValueError, match="empty"):
        P.majority_rate(torch.tensor([], dtype=torch.long))
    rates = P.no_skill_rates(["iid digits"], {"dirichlet_alpha": 0.5, "covertype_train_size": 1000})
    y = P.chapter_experiment("iid digits", {"dirichlet_alpha": 0.5, "covertype_train_size": 1000}).y_test
    assert rates == {"iid digits": pytest.approx(torch.bincount(y).max().item() / len(y))}
    assert 0.1 <= rates["iid digits"] < 0.2  # 300 test digits of 10 near-balanced classes


def test_wu_rows_follow_the_papers_order_whatever_the_run_order():
    both = pd.concat([_wu_final([1.0], [1.0], experiment="noniid digits"), _wu_final([2.0], [2.0])])
    t = P.compare(both)
    assert t["experiment"].drop_duplicates().tolist() == ["iid digits", "noniid digits"]


def test_wu_compare_leaves_out_c_in_its_other_readings():
    """Stored records of the chapter's C-readings runs carry experiment "iid digits" too: the paper's C is the adopted
    reading (sum/round), so a C run in another reading must not enter the gain of C (it used to be averaged in)."""
    final = _wu_final(gains_b=[4.0, 6.0, 5.0], gains_c=[1.0, 2.0, 3.0]).assign(c_reading=None)
    final.loc[final["aggregation"] == "C", "c_reading"] = "sum/round"
    other = final[final["aggregation"] == "C"].assign(c_reading="max/round", accuracy=0.99)
    t = P.compare(pd.concat([final, other], ignore_index=True)).set_index("quantity")
    assert t.loc["gain of C over A (points)", "ours"] == "+2.0 ± 1.0"  # as without the other reading's runs
    assert t.equals(P.compare(final).set_index("quantity"))


# ------------------------------------------------------------------------------ the chapter's tables and figures
def test_client_mechanisms_are_built_once_per_setting():
    s = P.SETTINGS["iid"]["digits"]
    a, b = P.client_mechanisms([1, 1, 10], "iid", s), P.client_mechanisms([1.0, None, 10.0], "iid", s)
    assert a[0] is a[1] is b[0] and a[2] is b[2] and b[1] is None  # same ε and setting: one mechanism object
    assert a[0].sigma == pytest.approx(P.paper_gaussian_sigma(1, delta=s["delta"], q=s["q"], rounds=s["rounds"]))
    other = P.client_mechanisms([1], "iid", s, reading="bracket_outside")[0]
    assert other is not a[0] and other.sigma != a[0].sigma  # the reading is part of the setting
    n = P.SETTINGS["noniid"]["digits"]
    sign = P.client_mechanisms([5, 5], "noniid", n)
    assert sign[0] is sign[1] and isinstance(sign[0], LdpSign) and sign[0].sigma == pytest.approx(
        n["l2"] * math.sqrt(2 * math.log(1.25 / n["delta"])) / 5)
    with pytest.raises(ValueError, match="epsilon"):
        P.client_mechanisms([-1.0], "iid", s)


def test_privacy_tables_give_the_exact_guarantee_of_the_papers_noise():
    t = P.privacy_tables("sqrt_all")
    g = t["gaussian"].set_index(["data", "ε_i (paper)"])
    assert len(g) == 9 and len(t["sampled"]) == 9 and len(t["ldpsign"]) == 9  # 3 data sets x 3 budgets, both protocols
    row = g.loc[("digits", 1.0)]
    s = P.SETTINGS["iid"]["digits"]
    sigma = P.paper_gaussian_sigma(1.0, delta=s["delta"], q=s["q"], rounds=s["rounds"])
    assert row["σ_i (adopted)"] == round(sigma, 1) and row["d"] == P.model_size("digits") == 650
    exact = Gaussian.with_sigma(sigma=sigma, delta=s["delta"], radius=s["clip"]).ideal_guarantee
    assert row["ε per coord per round"] == round(exact.epsilon, 2) > 10  # far from the chosen budget of 1
    assert row["σ_i (other)"] == round(P.paper_gaussian_sigma(1.0, delta=s["delta"], q=s["q"], rounds=s["rounds"],
                                                              reading="bracket_outside"), 1)
    flipped = P.privacy_tables("bracket_outside")["gaussian"].set_index(["data", "ε_i (paper)"])
    assert flipped.loc[("digits", 1.0), "σ_i (adopted)"] == row["σ_i (other)"]
    sampled = t["sampled"].set_index(["data", "ε_i (paper)"])
    assert sampled.loc[("digits", 10.0), "per coord per round"] == "none"  # nothing certified at μ in the tens
    assert 0 <= t["reachable"][("digits", 10.0)] < 1e-9 and t["mu"][("digits", 10.0)] > t["mu"][("digits", 1.0)]
    sign = t["ldpsign"].set_index(["data", "ε_i (paper, δ=1e-5)"])
    assert bool((sign["exact pure ε per coord per round"] < sign.index.get_level_values(1)).all())  # ε* < ε_i


def test_selection_and_lemma_tables():
    sel = P.selection_table()
    assert len(sel) == sum(len(s["profiles"]) for proto in P.SETTINGS.values() for s in proto.values())
    assert (sel["E[clients selected]"] == 1.0).all()  # the P_i sum to one
    first = sel.iloc[0]
    assert first["P_i (C) = α_i (B)"] == "0.103 0.103 0.795" and first["P(no client selected)"] == 0.205
    lemma = P.lemma_table()
    assert len(lemma) == 6 and not lemma["q < 1 / (16 sigma)"].any()


def test_accuracy_table_blank_repeats_and_ranges():
    final = _wu_final(gains_b=[4.0, 6.0], gains_c=[1.0, 3.0])
    t = P.accuracy_table(final)
    assert t.columns.tolist() == ["experiment", "profile", "A", "B", "C"]
    assert t["profile"].tolist() == ["no noise", "p1", "p2"]  # run order
    assert t.loc[0, "A"] == "80.5 ± 0.7" and t.loc[0, "B"] == "" and t.loc[1, "B"] == "55.0 ± 1.4"
    shown = P.blank_repeats(t, ["experiment"])
    assert shown["experiment"].tolist() == ["iid digits", "", ""] and t["experiment"].tolist() == ["iid digits"] * 3
    assert P.accuracy_range(final, "iid digits") == "50.0 to 55.0"
    assert P.accuracy_range(final, "iid covertype") == "(not run)"
    assert P.noise_versus_no_noise(final, "iid digits") == (
        "the noisy runs aggregated with A or B end at 50.0 to 55.0 % (every one below the no-noise run's 80.5 %), "
        "with C at 52.0 to 52.0 % (means over 2 seeds; standard deviations 0 to 1 points)")
    assert P.noise_versus_no_noise(final, "iid covertype") == "(not run)"
    table = P.compare(_wu_final(gains_b=[4.0, 6.0, 5.0], gains_c=[10.0, -10.0, 3.0]))
    assert P.gains_text(table) == "gain of B over A on iid digits (+5.0 points, [+2.5, +7.5]; the paper: 5.57)"
    assert P.gains_text(P.compare(_wu_final([1.0, -1.0], [1.0, -1.0]))) == "none"


def test_sigma_readings_tables_rank_the_aggregations_per_reading():
    adopted = _wu_final(gains_b=[4.0, 6.0], gains_c=[1.0, 3.0]).assign(reading="sqrt_all")
    other = _wu_final(gains_b=[1.0, 1.0], gains_c=[5.0, 5.0]).assign(reading="bracket_outside")
    r = P.sigma_readings_tables(pd.concat([adopted, other]), "sqrt_all")
    acc = r["accuracy"]
    assert acc.columns.tolist() == ["experiment", "profile", "aggregation", "sqrt_all", "bracket_outside"]
    assert "no noise" not in set(acc["profile"]) and len(acc) == 6
    rank = r["ranking"].set_index("reading")["ranking"]
    assert rank["sqrt_all"] == "B > C > A" and rank["bracket_outside"] == "C > B > A"
    assert r["c_beats_b"] == ["iid digits p1", "iid digits p2"]


def test_covertype_check_rows():
    final = pd.DataFrame({"experiment": ["iid covertype"] * 3, "profile": ["no noise", "no noise", "all ε = 1"],
                          "accuracy": [0.70, 0.72, 0.20]})
    raw = pd.DataFrame({"experiment": ["iid covertype_raw", "iid digits"], "accuracy": [0.38, 0.90]})
    t = P.covertype_check(final, raw, majority=0.485)
    assert t["accuracy (%)"].tolist() == ["71.0 ± 1.4", "38.0", "48.5", "49.0"] and t["seeds"].tolist()[:2] == [2, 1]
    assert P.covertype_check(final, raw.iloc[1:], majority=0.485) is None  # no raw-column run: nothing to compare


def test_shown_tables_fit_their_headers_and_keep_the_checked_text():
    t = P.privacy_tables("sqrt_all")
    shown = P.privacy_shown(t, "gaussian")
    assert shown.rows[0][:3] == ("digits", "1", "1/500") and "4,030.7" in shown.rows[0]
    acc = P.accuracy_table(_wu_final([4.0, 6.0], [1.0, 3.0]))
    assert [r[0] for r in P.accuracy_shown(acc, "x").rows] == ["iid digits", "", ""]
    cmp = P.compare_shown(P.compare(_wu_final([4.0, 6.0, 5.0], [1.0, 2.0, 3.0])), {"iid digits": 0.133}, "c")
    assert cmp.caption == "c. No-skill rate (%): iid digits 13.3" and "paired 95 % CI (points)" in cmp.headers
    assert P.selection_shown(P.selection_table()).rows[2][4] == "0.530"


def test_plot_experiment_has_at_most_two_panels_per_row():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ldptut.display import COLUMN_IN

    final = pd.concat([_wu_final([4.0, 6.0], [1.0, 3.0]).assign(round=r) for r in (1, 2)], ignore_index=True)
    fig = P.plot_experiment(final, "iid digits")  # non-personalized + 2 profiles: 3 panels on 2 rows
    axes = fig.get_axes()
    assert len(axes) == 3 and fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
    assert {ax.get_subplotspec().get_geometry()[:2] for ax in axes} == {(2, 2)}
    assert axes[0].get_ylabel() == "test accuracy (%)" and axes[0].get_xlabel() == "communication round"
    assert [t.get_text() for t in axes[1].get_legend().get_texts()] == ["A", "B", "C"]
    plt.close(fig)


def test_mnist_extension_is_a_list_of_its_experiments():
    P.Params.spec()["mnist_extension"](["iid mnist", "noniid mnist"])
    P.Params.spec()["mnist_extension"]([])
    for bad in (True, "iid mnist", ["noniid fashion"]):
        with pytest.raises(ValueError, match="must be"):
            P.Params.spec()["mnist_extension"](bad)
    assert P.MNIST_EXTENSION == ("iid mnist", "noniid mnist")
