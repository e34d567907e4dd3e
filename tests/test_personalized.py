"""Wu et al. (2023) pieces: Gaussian and ldpsign mechanisms against their closed forms, exact Gaussian
accounting, the paper's σ formula, scikit-learn's "optimal" schedule, aggregations A/B/C, the simulator."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from ldptut import accounting, audits, fl, models, partition
from ldptut import personalized as P
from ldptut.mechanisms import Gaussian, LdpSign
from ldptut.rng import generator

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
        eta0 = P.optimal_eta0(alpha)
        assert eta0 == pytest.approx(alpha ** -0.25)
        assert P.optimal_learning_rate(1, alpha=alpha) == pytest.approx(eta0)
        t0 = 1 / (alpha * eta0)
        assert P.optimal_learning_rate(101, alpha=alpha) == pytest.approx(1 / (alpha * (t0 + 100)))


def test_local_training_equals_scikit_learn():
    """Two rounds of one client without noise = SGDClassifier(log_loss, 'optimal').partial_fit twice
    on the same sample order: the schedule, the L2 shrinkage and the one-vs-rest updates agree."""
    from sklearn.linear_model import SGDClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 6)) * 3
    y = rng.integers(0, 3, 150)
    part = [torch.arange(150)]
    run = P.RunSpec(seed=4, partition=part, mechanisms=[None], aggregator=P.mean_aggregator, clip=1e9)
    res = P.simulate([run], x_train=torch.tensor(X), y_train=torch.tensor(y), x_test=torch.tensor(X),
                     y_test=torch.tensor(y), num_classes=3, rounds=2, alpha=1e-3, progress=False)
    clf = SGDClassifier(loss="log_loss", learning_rate="optimal", alpha=1e-3, shuffle=False, max_iter=1, tol=None)
    for r in (1, 2):
        order = P._local_order(part[0], q=1.0, passes=1, g=generator(4, "round", r, "client", 0, "sample")).numpy()
        clf.partial_fit(X[order], y[order], classes=[0, 1, 2])
    w = res.weights[0]
    # scikit-learn stores w as wscale * v, so float64 rounding differs at ~1e-8 relative; an off-by-one
    # in t (t0 ~ 178 here) or a missing shrinkage would be off by ~1e-3 relative
    np.testing.assert_allclose(w[:18].reshape(3, 6).numpy(), clf.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(w[18:].numpy(), clf.intercept_, rtol=1e-6, atol=1e-9)
    assert res.history["accuracy"].iloc[-1] == pytest.approx(clf.score(X, y))


# ------------------------------------------------------------------------------ aggregation
def _ctx(m, d=4, *, seed=0, r=1, glob=None):
    layout = P.linear_layout(d - 1, 1)
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
    out = P.WeightedBySigma(sig)(pay, context=_ctx(3))
    assert torch.allclose(out, (w[:, None] * pay).sum(0))
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
        out = agg(pay, context=ctx)
        keep = agg.probabilities > omega
        counts += keep
        if keep.any():
            assert torch.allclose(out, pay[keep].mean(0))
        else:
            empty += 1
            assert torch.equal(out, glob)  # on_empty="keep": the previous global model
        assert agg.selected[-1] == int(keep.sum())
    # each client is kept with probability P_i (ω uniform): 5 binomial standard errors
    p = agg.probabilities.float()
    assert bool(((counts / 4000 - p).abs() <= 5 * torch.sqrt(p * (1 - p) / 4000)).all())
    assert abs(empty / 4000 - (1 - 10 / 12)) <= 5 * math.sqrt((1 / 6) * (5 / 6) / 4000)
    # fallback to the mean of all clients
    allagg = P.ProbabilitySelection([1.0, 1.0, 1.0], on_empty="all")  # P = 1/3 each
    for r in range(1, 200):
        omega = torch.rand((), generator=generator(0, "round", r, "server"), dtype=torch.float64).item()
        if omega >= 1 / 3:
            assert torch.allclose(allagg(pay, context=_ctx(3, r=r)), pay.mean(0))
            break
    with pytest.raises(ValueError, match="on_empty"):
        P.ProbabilitySelection(sig, on_empty="skip")
    ctx = _ctx(3)
    ctx.server_generator = None
    with pytest.raises(ValueError, match="server_generator"):
        agg(pay, context=ctx)


def test_sign_aggregation():
    pay = torch.tensor([[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    out = P.SignOf(P.mean_aggregator)(pay, context=_ctx(2))
    assert out.tolist() == [1.0, 0.0, 0.0, -1.0]
    out = P.SignOf(P.WeightedBySigma([1.0, 2.0]))(pay, context=_ctx(2))  # client 0 weighs twice
    assert out.tolist() == [1.0, -1.0, 1.0, -1.0]


def test_aggregators_plug_into_run_fedavg():
    from ldptut.data import load_digits

    ds = load_digits()
    parts = partition.iid(ds.y_train, 3, seed=0)
    model = models.build_model("logreg", input_shape=ds.input_shape, num_classes=10, seed=0)
    mechs = [Gaussian(epsilon=e, delta=1e-3, radius=1.0) for e in (1.0, 5.0, 10.0)]
    sel = P.ProbabilitySelection([m.sigma for m in mechs])
    res = fl.run_fedavg(model, x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test,
                        partition=parts, rounds=3, lr=0.1, privatizer=P.PersonalizedPerturbation(mechs),
                        aggregator=sel, progress=False)
    assert len(sel.selected) == 3 and len(res.history) == 3


# ------------------------------------------------------------------------------ simulator
def _digits_runs(seed=0):
    from ldptut.data import load_digits_raw

    x, y = load_digits_raw()
    x = x.reshape(len(x), -1) * 16
    parts = [torch.arange(i * 400, (i + 1) * 400) for i in range(3)]
    mechs = [Gaussian.with_sigma(sigma=s, delta=1 / 400, radius=200.0) for s in (100.0, 20.0, 10.0)]
    sig = [m.sigma for m in mechs]
    runs = [P.RunSpec(seed=seed, partition=parts, mechanisms=mechs, aggregator=agg, clip=200.0, q=0.8)
            for agg in (P.mean_aggregator, P.WeightedBySigma(sig), P.ProbabilitySelection(sig))]
    return runs, dict(x_train=x[:1200], y_train=y[:1200], x_test=x[1200:], y_test=y[1200:], num_classes=10)


def test_simulate_is_seeded_and_independent_of_batching():
    runs, data = _digits_runs()
    together = P.simulate(runs, rounds=3, progress=False, **data)
    runs2, _ = _digits_runs()
    alone = P.simulate([runs2[2]], rounds=3, progress=False, **data)
    h1 = together.history[together.history.run == 2].reset_index(drop=True)
    assert h1["accuracy"].tolist() == alone.history["accuracy"].tolist()
    assert h1["clients_used"].tolist() == alone.history["clients_used"].tolist()
    torch.testing.assert_close(together.weights[2], alone.weights[0], rtol=1e-10, atol=1e-8)
    runs3, _ = _digits_runs(seed=1)
    other = P.simulate([runs3[2]], rounds=3, progress=False, **data)
    assert not torch.equal(other.weights[0], alone.weights[0])


def test_simulate_rejects_bad_runs():
    runs, data = _digits_runs()
    bad = P.RunSpec(seed=0, partition=runs[0].partition[:2], mechanisms=runs[0].mechanisms[:2],
                    aggregator=P.mean_aggregator, clip=1.0)
    with pytest.raises(ValueError, match="same number of clients"):
        P.simulate([runs[0], bad], rounds=1, progress=False, **data)
    with pytest.raises(ValueError, match="q must be"):
        P.simulate([P.RunSpec(seed=0, partition=runs[0].partition, mechanisms=runs[0].mechanisms,
                              aggregator=P.mean_aggregator, clip=1.0, q=1.5)], rounds=1, progress=False, **data)
    with pytest.raises(ValueError, match="runs"):
        P.simulate([], rounds=1, progress=False, **data)


def _small_digits_experiment():
    from ldptut.reported import WU_SETTINGS

    setting = {**WU_SETTINGS["iid"]["digits"], "rounds": 2, "epsilons": [1.0],
               "profiles": {"{1,5,10}": [1, 5, 10]}}
    return P.load_experiment("digits", "iid", setting, train_size=600)


def test_run_grid_stores_one_record_per_seed_and_loads_the_same_history(tmp_path):
    from ldptut.runcache import RunCache

    exp = _small_digits_experiment()
    cache = RunCache(tmp_path)
    trained = P.run_grid(exp, [0, 1], cache=cache, progress=False)
    assert len(list(tmp_path.glob("*.json"))) == 2  # one record per seed
    assert len(trained) == 2 * 5 * 2  # seeds x (no noise, ε = 1, profile with A/B/C) x rounds
    loaded = P.run_grid(exp, [0, 1], cache=cache, progress=False)
    pd.testing.assert_frame_equal(trained, loaded)
    together = P.run_grid(exp, [0, 1], progress=False)  # no cache: both seeds in one simulation
    key = ["seed", "profile", "aggregation", "round"]
    a, b = (df.sort_values(key).reset_index(drop=True) for df in (trained, together))
    assert a[key].equals(b[key])
    assert a["accuracy"].tolist() == b["accuracy"].tolist()
    stored = P.load_grid_runs(tmp_path)
    assert set(stored["seed"]) == {0, 1} and set(stored["n_train"]) == {600}
    s = stored.sort_values(key).reset_index(drop=True)
    assert s["accuracy"].tolist() == a["accuracy"].tolist() and s["profile"].tolist() == a["profile"].tolist()
    # another setting is another record, never the stored one
    P.run_grid(exp, [0], cache=cache, progress=False, on_empty="all")
    assert len(list(tmp_path.glob("*.json"))) == 3


def test_load_grid_runs_rejects_empty_and_foreign_directories(tmp_path):
    from ldptut.runcache import RunCache

    with pytest.raises(FileNotFoundError, match="no stored grid runs"):
        P.load_grid_runs(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        P.load_grid_runs(tmp_path / "missing")
    RunCache(tmp_path).run({"dataset": "mnist"}, lambda: P.SimulationResult(
        history=pd.DataFrame({"accuracy": [0.5]}), weights=torch.zeros(1), layout=None))
    with pytest.raises(ValueError, match="not a Wu et al. grid"):
        P.load_grid_runs(tmp_path)


def test_covertype_raw_is_the_same_split_with_unscaled_numeric_columns():
    from ldptut.reported import WU_SETTINGS

    s = WU_SETTINGS["iid"]["covertype"]
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
