"""FedSel (Liu, Cao, Yoshikawa, Chen, DASFAA 2020): the linear models' closed-form gradients (ldptut.linear),
the one-record-user simulator and its reporters (ldptut.fedsgd) and the paper module (ldptut.papers.fedsel).

Statistical tolerances: an empirical mean of N independent draws is compared with its exact value within
5 standard errors sqrt(Var / N), Var the closed form (Piecewise's variance, the sampling of one coordinate);
a frequency p̂ with its exact p within 5 sqrt(p (1 - p) / N); an empirical variance with its closed form
within 5 standard errors estimated from the fourth central moment. A false alarm has probability < 1e-6
per comparison; every draw comes from a seeded generator, so each test gives the same numbers every time.
"""
import math

import pandas as pd
import pytest
import torch

from ldptut import data as D
from ldptut import fedsgd, linear
from ldptut.experiments import Runner
from ldptut.mechanisms import Hybrid, Piecewise, TwoPoint
from ldptut.papers import fedsel as fs
from ldptut.rng import generator
from ldptut.runcache import RunCache
from ldptut.selection import EMPTY, ExponentialSelection, PerturbedEncoding, PerturbedSampling, top_k_status

N_DRAWS = 100_000


def _gen(seed, *keys):
    return generator(seed, "test-fedsel", *keys)


def _within(est, exact, se, k=5.0):
    return bool(((est - exact).abs() <= k * se).all())


def _emp_var_check(samples, var_exact):
    """Sample variance (over dim 0) within 5 s.e. of ``var_exact``; s.e. from the fourth central moment."""
    n = samples.shape[0]
    c = samples - samples.mean(0)
    var = (c * c).mean(0)
    m4 = (c ** 4).mean(0)
    se = ((m4 - var * var).clamp(min=0) / n).sqrt().clamp(min=1e-12)
    return _within(var, var_exact, se), (var, var_exact, se)


def _small_data(n=2000, d=20, seed=0):
    x, y = D.sparse_synthetic(n, d, c1=0.01, c2=0.9, seed=seed)
    return x.double(), y.double()


# ============================================================================================ linear models
@pytest.mark.parametrize("model", linear.MODELS)
@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_closed_form_gradients_equal_autograd_per_example(model, l2):
    R, m, d = 3, 7, 5
    g = _gen(0, "linear")
    w = torch.randn(R, d, generator=g, dtype=torch.float64)
    x = torch.randn(R, m, d, generator=g, dtype=torch.float64)
    y = torch.where(torch.rand(R, m, generator=g) < 0.5, 1.0, -1.0).double()
    z = linear.margins(w, x, y)
    assert bool(((z - 1).abs() > 1e-3).all()), "a margin is at the hinge's kink: pick another seed"
    assert bool((z < 1).any()) and bool((z > 1).any())  # both branches of the hinge occur
    closed = linear.per_example_gradients(w, x, y, model=model, l2=l2)
    assert closed.shape == (R, m, d)
    for r in range(R):
        jac = torch.autograd.functional.jacobian(
            lambda wr: linear.losses(wr.unsqueeze(0), x[r:r + 1], y[r:r + 1], model=model, l2=l2)[0], w[r])
        assert torch.allclose(closed[r], jac, atol=1e-12, rtol=1e-10), (r, closed[r], jac)
    # the loss itself at one point, by hand
    z00 = float((w[0] * x[0, 0]).sum() * y[0, 0])
    data = math.log1p(math.exp(-z00)) if model == "logistic" else max(0.0, 1 - z00)
    want = data + 0.5 * l2 * float((w[0] ** 2).sum())
    assert linear.losses(w, x, y, model=model, l2=l2)[0, 0].item() == pytest.approx(want, rel=1e-12)


def test_hinge_subgradient_is_zero_at_the_kink_and_predict_accuracy_by_hand():
    w = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    x = torch.tensor([[[1.0, 3.0], [0.5, 1.0]]], dtype=torch.float64)
    y = torch.tensor([[1.0, 1.0]], dtype=torch.float64)  # margins 1 (kink) and 0.5
    g = linear.per_example_gradients(w, x, y, model="svm", l2=0.0)
    assert torch.equal(g[0, 0], torch.zeros(2, dtype=torch.float64))
    assert torch.equal(g[0, 1], -x[0, 1])
    xs = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [-2.0, 5.0]])
    ws = torch.tensor([[1.0, 0.0], [-1.0, 1.0]])
    assert linear.predict(ws, xs).tolist() == [[1, -1, 1, -1], [-1, 1, 1, 1]]  # 0 counts as +1
    ys = torch.tensor([1.0, -1.0, -1.0, -1.0])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    assert linear.accuracy(ws, xs, ys, mask).tolist() == pytest.approx([2 / 3, 0.0])


def test_linear_rejects_bad_model_and_l2():
    w, x, y = torch.zeros(1, 2), torch.zeros(1, 1, 2), torch.ones(1, 1)
    with pytest.raises(ValueError, match="model"):
        linear.per_example_gradients(w, x, y, model="ridge", l2=0.0)
    with pytest.raises(ValueError, match="l2"):
        linear.per_example_gradients(w, x, y, model="svm", l2=-1.0)
    with pytest.raises(ValueError, match="l2"):
        linear.losses(w, x, y, model="logistic", l2=float("nan"))


# ============================================================================================ reporters
S_USERS = torch.tensor([[0.9, -0.5, 0.1, 0.0],
                        [-1.0, 0.3, 0.7, -0.2],
                        [0.4, 0.4, -0.8, 0.6]], dtype=torch.float64)  # m = 3 users, d = 4, inside [-1, 1]


@pytest.mark.parametrize("perturbation", [None, Piecewise(epsilon=1.0), Hybrid(epsilon=1.0), TwoPoint(epsilon=1.0)],
                         ids=["NP-RS", "PM", "HM", "Duchi"])
def test_random_coordinate_is_unbiased_with_the_closed_form_variance(perturbation):
    """N runs of the same m users: each run's mean vector is one draw of the estimator. Per coordinate j and
    user i the report is X = d M(s_ij) 1[J_i = j]: E X = s_ij, Var X = d (Var_M(s_ij) + s_ij^2) - s_ij^2."""
    m, d = S_USERS.shape
    s = S_USERS.expand(N_DRAWS, m, d).contiguous()
    rep = fedsgd.RandomCoordinate(perturbation)
    mean, j = rep.report(s, s, _gen(1, "rc"))
    assert mean.shape == (N_DRAWS, d) and j.shape == (N_DRAWS, m) and j.dtype == torch.int64
    assert int(j.min()) >= 0 and int(j.max()) < d
    freq = torch.nn.functional.one_hot(j.flatten(), d).double().mean(0)
    assert _within(freq, torch.full((d,), 1 / d, dtype=torch.float64), math.sqrt((1 / d) * (1 - 1 / d) / j.numel()))
    v_mech = torch.zeros_like(S_USERS) if perturbation is None else perturbation.variance(S_USERS)
    var = (d * (v_mech + S_USERS ** 2) - S_USERS ** 2).sum(0) / m ** 2  # Var of one run's mean, per coordinate
    assert _within(mean.mean(0), S_USERS.mean(0), (var / N_DRAWS).sqrt()), (mean.mean(0), S_USERS.mean(0))
    ok, info = _emp_var_check(mean, var)
    assert ok, info
    # the same generator gives the same reports; another seed others
    a, b, c = (rep.report(s[:1000], s[:1000], _gen(seed, "rc"))[0] for seed in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_selected_coordinate_top_one_sends_s_at_the_top_index_of_r():
    g = _gen(3, "top")
    r = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    prev = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    s = r + 0.5 * prev  # the value differs from the selection input
    mean, j = fedsgd.SelectedCoordinate(fedsgd.TopOne()).report(r, s, None)
    assert torch.equal(j, r.abs().argmax(-1))  # no ties in Gaussian draws
    want = torch.zeros(2, 6, dtype=torch.float64)
    for a in range(2):
        for i in range(3):
            want[a, j[a, i]] += s[a, i, j[a, i]] / 3  # not rescaled by d
    assert torch.allclose(mean, want, atol=1e-15, rtol=0)
    # ties as in the private selectors' top-k (selection.top_k_status): of equal |r_j| the last index
    ties = torch.tensor([[1.0, -1.0, 0.5], [0.0, -2.0, 2.0], [3.0, 0.0, 3.0]])
    assert fedsgd.TopOne().select(ties).tolist() == [1, 2, 2]
    assert torch.equal(fedsgd.TopOne().select(ties), top_k_status(ties, 1).long().argmax(-1))


def test_selected_coordinate_with_ps_follows_the_selection_law_and_is_not_rescaled():
    """Users' r = V's two rows; indices by PS (eps1 = 1, k = 2), values s perturbed by PM (eps2 = 1). Frequencies
    against PS's exact law; per coordinate c the mean's expectation is (1/m) sum_i P_ic s_ic (no factor d)."""
    V = torch.tensor([[0.1, -3.0, 0.5, 2.0, -0.7], [1.0, 1.0, 0.0, -0.2, 4.0]], dtype=torch.float64)
    s_users = torch.tensor([[0.3, -0.9, 0.2, 0.8, -0.1], [0.5, -0.6, 0.0, 0.4, 1.0]], dtype=torch.float64)
    m, d = V.shape
    sel, pm = PerturbedSampling(epsilon=1.0, k=2), Piecewise(epsilon=1.0)
    r = V.expand(N_DRAWS, m, d).contiguous()
    s = s_users.expand(N_DRAWS, m, d).contiguous()
    mean, j = fedsgd.SelectedCoordinate(sel, pm).report(r, s, _gen(4, "ps"))
    probs = sel.output_distribution(V)  # (m, d)
    freq = torch.nn.functional.one_hot(j, d).double().mean(0)  # (m, d)
    se = (probs * (1 - probs) / N_DRAWS).sqrt()
    assert _within(freq, probs, se), (freq, probs)
    e = (probs * s_users).sum(0) / m
    var = (probs * (pm.variance(s_users) + s_users ** 2) - probs ** 2 * s_users ** 2).sum(0) / m ** 2
    assert _within(mean.mean(0), e, (var / N_DRAWS).sqrt()), (mean.mean(0), e)
    ok, info = _emp_var_check(mean, var)
    assert ok, info


def test_selected_coordinate_with_pe_empty_reports_contribute_nothing():
    """PE at a small eps1 often reports EMPTY (-1): those users add zero to the mean."""
    r = torch.randn(4000, 3, 4, generator=_gen(5, "pe"), dtype=torch.float64)
    mean, j = fedsgd.SelectedCoordinate(PerturbedEncoding(epsilon=0.1, k=1)).report(r, r, _gen(5, "pe-draw"))
    assert bool((j == EMPTY).any()) and bool((j != EMPTY).any())
    want = torch.where(j.unsqueeze(-1) == torch.arange(4), r, torch.zeros_like(r)).sum(1) / 3
    assert torch.allclose(mean, want, atol=1e-15, rtol=0)


def test_sparse_mean_by_hand():
    index = torch.tensor([[0, 2, EMPTY, 2], [1, 1, 1, 1]])
    value = torch.tensor([[1.0, 2.0, 100.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    assert fedsgd.sparse_mean(index, value, 3).tolist() == [[0.25, 0.0, 1.5], [0.0, 2.5, 0.0]]


@pytest.mark.parametrize("q", [4, 2])
def test_projected_coordinate_is_unbiased_for_the_projection(q):
    """No noise: one run's estimate is (1/m) sum_i q y_iJ e_J pinv(Phi) with y_i = s_i Phi, so its expectation
    is mean(s) Phi pinv(Phi) -- mean(s) itself when q = d (Phi square, invertible) -- and its covariance
    pinv^T [(1/m^2) sum_i (q diag(y_i^2) - y_i y_i^T)] pinv."""
    m, d = S_USERS.shape
    phi = fedsgd.projection_matrix(d, q, _gen(6, "phi"), dtype=torch.float64)
    assert phi.shape == (d, q)
    rep = fedsgd.ProjectedCoordinate(phi)
    s = S_USERS.expand(N_DRAWS, m, d).contiguous()
    mean, sent = rep.report(s, s, _gen(6, "proj"))
    assert sent is None and mean.shape == (N_DRAWS, d)
    target = S_USERS.mean(0) @ phi @ rep.pinv
    if q == d:
        assert torch.allclose(phi @ rep.pinv, torch.eye(d, dtype=torch.float64), atol=1e-10)
        assert torch.allclose(target, S_USERS.mean(0), atol=1e-10)
    else:
        assert float((target - S_USERS.mean(0)).abs().max()) > 0.05  # a real projection: not the mean itself
    y = S_USERS @ phi
    cov_y = sum(q * torch.diag(yi ** 2) - torch.outer(yi, yi) for yi in y) / m ** 2
    var = torch.diagonal(rep.pinv.T @ cov_y @ rep.pinv)
    assert _within(mean.mean(0), target, (var / N_DRAWS).sqrt()), (mean.mean(0), target)


def test_reporters_reject_bad_arguments():
    with pytest.raises(ValueError, match="phi"):
        fedsgd.ProjectedCoordinate(torch.randn(3, 5))
    with pytest.raises(ValueError, match="phi"):
        fedsgd.ProjectedCoordinate(torch.randn(3))
    with pytest.raises(TypeError, match="perturbation"):
        fedsgd.RandomCoordinate("pm")
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        fedsgd.RandomCoordinate(Piecewise(epsilon=1.0, center=0.5, radius=1.0))
    with pytest.raises(TypeError, match="selector"):
        fedsgd.SelectedCoordinate(object())
    with pytest.raises(ValueError, match="q"):
        fedsgd.projection_matrix(4, 0)


# ============================================================================================ cross-validation
def test_cross_validation_splits():
    n, folds, repeats = 103, 5, 3
    train, test = fedsgd.cross_validation(n, folds=folds, repeats=repeats, seed_generator=_gen(7, "cv"))
    size = n // folds
    assert train.shape == (repeats * folds, size * (folds - 1)) and test.shape == (repeats * folds, n)
    assert test.dtype == torch.bool and bool((test.sum(1) == size).all())
    for run in range(repeats * folds):
        rows = train[run]
        assert rows.unique().numel() == rows.numel()                      # each user once
        assert not bool(test[run, rows].any())                            # train and test disjoint
    for i in range(repeats):
        block = test[i * folds:(i + 1) * folds]
        assert int(block.sum(0).max()) == 1                               # the test folds are disjoint
        used = block.any(0)
        assert int(used.sum()) == size * folds                            # and cover the used rows
        for f in range(folds):
            in_train = torch.zeros(n, dtype=torch.bool)
            in_train[train[i * folds + f]] = True
            assert torch.equal(in_train | block[f], used)                 # train + test = the used rows
    assert not torch.equal(test[0], test[folds])                          # repetitions reshuffle
    again = fedsgd.cross_validation(n, folds=folds, repeats=repeats, seed_generator=_gen(7, "cv"))
    assert torch.equal(again[0], train) and torch.equal(again[1], test)
    with pytest.raises(ValueError, match="folds"):
        fedsgd.cross_validation(10, folds=1, repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        fedsgd.cross_validation(10, folds=2, repeats=0)


def test_cross_validation_with_a_validation_part_never_touches_the_test_part():
    """holdout="validation": run (i, f) validates on part f + 1 and trains on the other folds - 2 parts, so the
    test part f of the same run (and of its twin in the test setting) is neither trained nor evaluated on."""
    n, folds, repeats = 103, 5, 2
    tr, te = fedsgd.cross_validation(n, folds=folds, repeats=repeats, seed_generator=_gen(7, "cv"))
    vtr, va = fedsgd.cross_validation(n, folds=folds, repeats=repeats, seed_generator=_gen(7, "cv"), holdout="validation")
    size = n // folds
    assert vtr.shape == (repeats * folds, size * (folds - 2)) and va.shape == te.shape
    assert bool((va.sum(1) == size).all())
    for run in range(repeats * folds):
        i, f = divmod(run, folds)
        seen = torch.zeros(n, dtype=torch.bool)
        seen[vtr[run]] = True
        assert not bool((seen & va[run]).any())                              # train and validation disjoint
        assert not bool(((seen | va[run]) & te[run]).any())                  # the test part stays unseen
        assert torch.equal(va[run], te[i * folds + (f + 1) % folds])         # validation = the next test part
        in_train = torch.zeros(n, dtype=torch.bool)
        in_train[tr[run]] = True
        assert torch.equal(seen | va[run], in_train)                         # both come from the test run's training
    with pytest.raises(ValueError, match="folds must be >= 3"):
        fedsgd.cross_validation(10, folds=2, repeats=1, holdout="validation")
    with pytest.raises(ValueError, match="holdout"):
        fedsgd.cross_validation(10, folds=3, repeats=1, holdout="train")


def test_cv_interval_is_the_corrected_resampled_t():
    from scipy.stats import t as student

    from ldptut.papers import cv_interval

    d = pd.Series([1.0, 2.0, 0.5, 1.5, 3.0, -0.5, 1.0, 2.5, 0.0, 1.0])   # 2 x 5-fold
    m, lo, hi = cv_interval(d, folds=5)
    half = student.ppf(0.975, 9) * math.sqrt((1 / 10 + 1 / 4) * d.var(ddof=1))
    assert m == pytest.approx(d.mean()) and (lo, hi) == pytest.approx((d.mean() - half, d.mean() + half))
    naive = student.ppf(0.975, 9) * d.std(ddof=1) / math.sqrt(10)
    assert hi - m == pytest.approx(naive * math.sqrt(1 + 10 / 4))              # wider than the naive t by sqrt(1 + J/(k-1))
    assert cv_interval([1.0], folds=5) is None
    with pytest.raises(ValueError, match="level"):
        cv_interval(d, folds=5, level=1.0)


def _fake_runs(rows):
    """runs_table-like rows: (method, lr, holdout, accuracy) on BANK / logistic at eps 2 (private methods)."""
    base = fs.base_config("bank", "logistic", folds=5, repeats=1)
    out = []
    for method, lr, holdout, acc in rows:
        c = fs.method_config(method, base=base, epsilon=2.0).replace(lr=lr, holdout=holdout)
        out.append({"config": c, "dataset": c.dataset, "model": c.model, "accuracy": acc, "method": c.method})
    return pd.DataFrame(out)


def test_tuned_lrs_picks_each_methods_best_on_validation_and_ignores_test():
    runs = _fake_runs([("PM", 0.01, "validation", 80.0), ("PM", 0.1, "validation", 85.0), ("PM", 1.0, "validation", 70.0),
                       ("PM", 1.0, "test", 99.0),                                          # a test run: never used
                       ("PS-PM", 0.01, "validation", 88.0), ("PS-PM", 0.1, "validation", 88.0),
                       ("PS-PM", 1.0, "validation", 89.0)])
    t = fs.tuned_lrs(runs).set_index("method")
    assert t.loc["PM", "lr"] == 0.1 and t.loc["PM", "validation accuracy"] == 85.0 and not t.loc["PM", "at grid edge"]
    assert t.loc["PS-PM", "lr"] == 1.0 and t.loc["PS-PM", "at grid edge"]
    assert t.loc["PM", "tried"] == [0.01, 0.1, 1.0]
    ties = fs.tuned_lrs(_fake_runs([("PM", 1.0, "validation", 88.0), ("PM", 0.1, "validation", 88.0)]))
    assert list(ties["lr"]) == [0.1]                                                       # ties: the smallest α
    chosen = dict((c.method, c) for _, c in fs.tuned_configs(fs.tuned_lrs(runs), repeats=10))
    assert chosen["PM"].lr == 0.1 and chosen["PS-PM"].lr == 1.0
    assert all(c.holdout == "test" and c.repeats == 10 for c in chosen.values())
    assert chosen["PM"] == t.loc["PM", "config"].replace(holdout="test", repeats=10)       # nothing else changes
    with pytest.raises(ValueError, match="two validation runs"):
        fs.tuned_lrs(_fake_runs([("PM", 0.1, "validation", 80.0), ("PM", 0.1, "validation", 81.0)]))
    assert fs.tuned_lrs(pd.DataFrame()).empty


def test_dim_replaces_the_synthetic_data_sets_d_and_tuning_keeps_each_d_apart():
    x, y = fs.prepare("syn_l", dim=7)
    x0, y0 = fs.prepare("syn_l")
    assert x.shape == (60000, 7) and x0.shape == (60000, 100) and y.shape == y0.shape
    assert torch.equal(x, D.sparse_synthetic(60000, 7, c1=0.01, c2=0.9, seed=0)[0])
    with pytest.raises(ValueError, match="synthetic"):
        fs.prepare("bank", dim=7)
    runs = _fake_runs([("PM", 0.01, "validation", 80.0), ("PM", 0.1, "validation", 70.0)])
    runs = pd.concat([runs, runs.assign(config=[c.replace(dataset="syn_l", dim=50) for c in runs["config"]],
                                        dataset="syn_l", accuracy=[60.0, 65.0])], ignore_index=True)
    runs = pd.concat([runs, runs.iloc[2:].assign(config=[c.replace(dim=25) for c in runs["config"].iloc[2:]],
                                                 accuracy=[66.0, 61.0])], ignore_index=True)
    t = fs.tuned_lrs(runs)
    assert sorted(zip(t["config"].map(lambda c: str(c.dim)), t["lr"])) == [("25", 0.01), ("50", 0.1), ("None", 0.01)]
    assert {c.dim for _, c in fs.tuned_configs(t, repeats=3, experiment="d sweep")} == {None, 25, 50}


def test_compare_says_a_sign_is_reproduced_only_where_the_interval_excludes_zero():
    assert fs._verdict(2.0, 0.5, 3.0) == "yes" and fs._verdict(2.0, -0.5, 3.0) == "unclear"
    assert fs._verdict(2.0, -3.0, -0.5) == "opposite" and fs._verdict(-0.16, -1.0, -0.2) == "yes"
    assert fs._verdict(2.0, None, None) == ""


# ============================================================================================ train
class FixedCoordinates:
    """A stub reporter: the c-th call sends coordinate coords[c] of s, unscaled, for every user; it records
    the sums over users of the r and s it was given (order-free, so the per-epoch shuffle does not matter)."""

    def __init__(self, coords):
        self.coords = list(coords)
        self.calls = []

    def report(self, r, s, generator):
        c = self.coords[len(self.calls)]
        self.calls.append((r.sum(1).clone(), s.sum(1).clone()))
        j = torch.full(r.shape[:-1], c, dtype=torch.int64)
        return fedsgd.sparse_mean(j, s[..., c], r.shape[-1]), j


def _hand_loop(x, y, train_idx, coords, *, model, lr, l2, eta, accumulate):
    """Algorithm 1 with one batch per epoch (m = n_train), coordinate coords[t] sent in epoch t, per user by
    hand: r <- r + g (or alpha g), s = r + eta r(prev), w <- w - alpha mean(s_c) e_c (or without alpha),
    r_c <- 0. Returns the final weights and the per-epoch (sum_i r_i, sum_i s_i)."""
    R, n_train = train_idx.shape
    d = x.shape[1]
    w = torch.zeros(R, d, dtype=x.dtype)
    state = torch.zeros(R, n_train, d, dtype=x.dtype)
    sums = []
    for c in coords:
        g = linear.per_example_gradients(w, x[train_idx], y[train_idx], model=model, l2=l2)
        if accumulate == "alpha_g":
            g = lr * g
        prev = state
        r = prev + g
        s = r + eta * prev
        sums.append((r.sum(1), s.sum(1)))
        step = s[..., c].mean(1)
        w = w.clone()
        w[:, c] -= step if accumulate == "alpha_g" else lr * step
        state = r.clone()
        state[..., c] = 0.0
    return w, sums


@pytest.mark.parametrize("accumulate", ["g", "alpha_g"])
def test_train_accumulation_momentum_and_reset_match_a_hand_loop(accumulate):
    x, y = _small_data(60, 4, seed=1)
    x = x * 20  # make the coordinates large so that every step matters
    train_idx, test_mask = fedsgd.cross_validation(60, folds=2, repeats=1, seed_generator=_gen(8, "cv"))
    coords = [0, 0, 1, 3]   # coordinate 0 twice (reset between), then 1 and 3 after 3 and 4 epochs of accumulation
    kw = dict(model="logistic", lr=0.7, l2=0.01, eta=0.5, accumulate=accumulate)
    stub = FixedCoordinates(coords)
    res = fedsgd.train(x, y, train_idx, test_mask, reporter=stub, batch_size=30, epochs=len(coords),
                       generator=_gen(8, "train"), progress=False, **kw)
    w, sums = _hand_loop(x, y, train_idx, coords, **kw)
    assert len(stub.calls) == len(coords)
    for t, ((r_got, s_got), (r_want, s_want)) in enumerate(zip(stub.calls, sums)):
        assert torch.allclose(r_got, r_want, atol=1e-10), t
        assert torch.allclose(s_got, s_want, atol=1e-10), t
    # the momentum is there: in epoch 3 coordinate 1 carries 1.5 times the two earlier gradients
    assert not torch.allclose(sums[2][0], sums[2][1])
    assert torch.allclose(res.weights, w, atol=1e-10), (res.weights, w)
    assert bool((w[:, [0, 1, 3]].abs() > 1e-3).all()) and bool((w[:, 2] == 0).all())  # 2 is never sent
    assert list(res.history.columns[:3]) == ["iteration", "epoch", "accuracy"]
    assert res.final.shape == (2,) and bool(((res.final >= 0) & (res.final <= 1)).all())


def test_train_one_epoch_reports_the_plain_gradient():
    """epochs = 1: no accumulators, r = s = g whatever eta."""
    x, y = _small_data(40, 3, seed=2)
    train_idx, test_mask = fedsgd.cross_validation(40, folds=2, repeats=1, seed_generator=_gen(9, "cv"))
    stub = FixedCoordinates([2])
    fedsgd.train(x, y, train_idx, test_mask, reporter=stub, model="svm", lr=1.0, l2=0.0, batch_size=20,
                 epochs=1, eta=0.9, progress=False)
    g = linear.per_example_gradients(torch.zeros(2, 3, dtype=x.dtype), x[train_idx], y[train_idx], model="svm", l2=0.0)
    assert torch.allclose(stub.calls[0][0], g.sum(1)) and torch.allclose(stub.calls[0][1], g.sum(1))


@pytest.mark.parametrize("reporter,epochs", [(fedsgd.FullGradient(), 1),
                                             (fedsgd.SelectedCoordinate(fedsgd.TopOne()), 2)],
                         ids=["NP-1-epoch", "NP-K-2-epochs"])
def test_alpha_g_and_g_give_the_same_weights_without_noise(reporter, epochs):
    """Without perturbation the learning rate multiplies either the accumulated gradient or the server's step:
    the same weights (top-1 selection is invariant to scaling r by alpha)."""
    x, y = _small_data(400, 10, seed=3)
    train_idx, test_mask = fedsgd.cross_validation(400, folds=2, repeats=1, seed_generator=_gen(10, "cv"))
    out = {}
    for acc in ("g", "alpha_g"):
        out[acc] = fedsgd.train(x, y, train_idx, test_mask, reporter=reporter, model="logistic", lr=0.3,
                                batch_size=20, epochs=epochs, eta=0.5, accumulate=acc,
                                generator=_gen(10, "train"), progress=False).weights
    assert float(out["g"].abs().max()) > 1e-3
    assert torch.allclose(out["g"], out["alpha_g"], atol=1e-12, rtol=1e-9)


def test_two_epochs_with_a_reporter_that_sends_everything():
    """A reporter returning sent = None (FullGradient = NP, ProjectedCoordinate = PM-RP) resets every
    coordinate, so NP with m = n_train over several epochs is plain full-batch gradient descent (a former
    bug: the reset raised TypeError with epochs > 1)."""
    x, y = _small_data(40, 3, seed=4)
    train_idx, test_mask = fedsgd.cross_validation(40, folds=2, repeats=1, seed_generator=_gen(11, "cv"))
    res = fedsgd.train(x, y, train_idx, test_mask, reporter=fedsgd.FullGradient(), model="logistic", lr=0.5,
                       l2=0.0, batch_size=20, epochs=3, eta=0.5, progress=False)
    w = torch.zeros(2, 3, dtype=x.dtype)
    for _ in range(3):
        w = w - 0.5 * linear.per_example_gradients(w, x[train_idx], y[train_idx], model="logistic", l2=0.0).mean(1)
    assert torch.allclose(res.weights, w, atol=1e-12)


def test_train_rejects_bad_input():
    x, y = _small_data(40, 3)
    tr, te = fedsgd.cross_validation(40, folds=2, repeats=1, seed_generator=_gen(12, "cv"))
    kw = dict(reporter=fedsgd.FullGradient(), model="logistic", lr=1.0, batch_size=5, progress=False)
    with pytest.raises(ValueError, match="labels"):
        fedsgd.train(x, (y + 1) / 2, tr, te, **kw)
    with pytest.raises(ValueError, match="batch_size"):
        fedsgd.train(x, y, tr, te, **{**kw, "batch_size": 21})
    with pytest.raises(ValueError, match="accumulate"):
        fedsgd.train(x, y, tr, te, accumulate="g2", **kw)
    with pytest.raises(ValueError, match="lr"):
        fedsgd.train(x, y, tr, te, **{**kw, "lr": 0.0})
    with pytest.raises(ValueError, match="eta"):
        fedsgd.train(x, y, tr, te, eta=-0.1, **kw)
    with pytest.raises(ValueError, match="model"):
        fedsgd.train(x, y, tr, te, **{**kw, "model": "ridge"})
    with pytest.raises(ValueError, match="test_mask"):
        fedsgd.train(x, y, tr, te[:, :10], **kw)


# ============================================================================================ FedSelConfig
def _run(**kw):
    base = dict(paper="fedsel", dataset="syn_l", model="logistic", n_clients=2000, rounds=10, folds=2, repeats=1)
    return fs.FedSelConfig(**{**base, **kw})


def test_same_seed_same_history_and_another_seed_differs():
    x, y = D.sparse_synthetic(2000, 20, c1=0.01, c2=0.9)
    run = _run(selection="ps", perturbation="pm", epsilon=2.0, epochs=2, eval_every=5)
    a, b = (run.simulate(x, y, progress=False) for _ in range(2))
    c = run.replace(seed=1).simulate(x, y, progress=False)
    assert len(a.history) == 4  # iterations 5, 10, 15 and the end (20)
    pd.testing.assert_frame_equal(a.history, b.history)
    assert torch.equal(a.weights, b.weights)
    assert not torch.equal(a.weights, c.weights) and not a.history.equals(c.history)
    with pytest.raises(ValueError, match="n_clients"):
        run.simulate(x[:1000], y[:1000], progress=False)


@pytest.mark.parametrize("kw,match", [
    (dict(dataset="mnist"), "dataset"),
    (dict(model="mlp"), "model"),
    (dict(selection="top2"), "selection"),
    (dict(selection="random", perturbation="laplace", epsilon=1.0), "perturbation"),
    (dict(selection="ps"), "epsilon"),
    (dict(selection="random", perturbation="pm"), "epsilon"),
    (dict(selection="ps", epsilon=0.0), "epsilon"),
    (dict(selection="ps", epsilon=-1.0), "epsilon"),
    (dict(selection="ps", epsilon=float("nan")), "epsilon"),
    (dict(selection="ps", epsilon=float("inf")), "epsilon"),
    (dict(selection="ps", epsilon=1.0, mu=0.0), "mu"),
    (dict(selection="ps", epsilon=1.0, mu=1.0), "mu"),
    (dict(selection="ps", epsilon=1.0, mu=-0.2), "mu"),
    (dict(selection="ps", epsilon=1.0, mu=float("nan")), "mu"),
    (dict(selection="random", perturbation="pm", epsilon=1.0, control=True), "control"),
    (dict(selection="ps", epsilon=1.0, control=True), "control"),   # -C needs a value perturbation
    (dict(epsilon=1.0), "epsilon"),                                  # NP is not private
    (dict(selection="top", epsilon=1.0), "epsilon"),
    (dict(selection="projection"), "perturbation"),
    (dict(selection="ps", epsilon=1.0, k_fraction=1.0), "k_fraction"),
    (dict(accumulate="alpha"), "accumulate"),
    (dict(epochs=0), "epochs"),
    (dict(holdout="train"), "holdout"),
    (dict(holdout="validation", folds=2), "folds"),
    (dict(dim=1), "dim"),
    (dict(dim=0), "dim"),
    (dict(dataset="bank", n_clients=45211, dim=20), "synthetic"),
])
def test_fedsel_run_rejects_bad_settings(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _run(**kw)


def test_full_or_top_selection_with_a_value_perturbation_is_rejected():
    """Selection "full" or "top" with a perturbation is rejected (a former bug): "full" + "pm" trained in clear
    under the name "NP" yet was credited with epsilon; "top" + "pm" took the flat solution's name "PM" while
    its top-1 index is a deterministic function of the data (no LDP at all)."""
    for sel in ("full", "top"):
        with pytest.raises(ValueError, match="perturbation"):
            _run(selection=sel, perturbation="pm", epsilon=2.0)


def test_budgets_and_reporters():
    e, E = 2.0, 2
    ps_pm = _run(selection="ps", perturbation="pm", epsilon=e, epochs=E, mu=0.1)
    assert ps_pm.epsilon_report == pytest.approx(1.0)
    e1, e2 = ps_pm.budgets
    assert e1 == pytest.approx(0.1 * e / E) and e2 == pytest.approx(e / E - 0.1 * e / E)
    assert ps_pm.replace(control=True).budgets == pytest.approx((0.1, 1.0))      # -C: all of ε' on the value
    assert _run(selection="random", perturbation="pm", epsilon=e, epochs=E).budgets == (None, pytest.approx(1.0))
    assert _run(selection="ps", epsilon=e, epochs=E).budgets == (pytest.approx(1.0), None)
    assert _run().budgets == (None, None) and _run().epsilon_report is None
    # the reporter is built with those budgets
    d = 50
    rep = ps_pm.reporter(d)
    assert isinstance(rep, fedsgd.SelectedCoordinate) and isinstance(rep.selector, PerturbedSampling)
    assert rep.selector.epsilon == pytest.approx(e1) and rep.selector.k == 5
    assert isinstance(rep.perturbation, Piecewise) and rep.perturbation.epsilon == pytest.approx(e2)
    exp_hm = _run(selection="exp", perturbation="hm", epsilon=e, control=True).reporter(d)
    assert isinstance(exp_hm.selector, ExponentialSelection) and exp_hm.selector.epsilon == pytest.approx(0.2)
    assert isinstance(exp_hm.perturbation, Hybrid) and exp_hm.perturbation.epsilon == pytest.approx(2.0)
    flat = _run(selection="random", perturbation="duchi", epsilon=e).reporter(d)
    assert isinstance(flat, fedsgd.RandomCoordinate) and isinstance(flat.perturbation, TwoPoint)
    assert flat.perturbation.epsilon == pytest.approx(e)
    proj = _run(selection="projection", perturbation="pm", epsilon=e, compression_ratio=0.1).reporter(d)
    assert isinstance(proj, fedsgd.ProjectedCoordinate) and proj.phi.shape == (d, 5)
    assert isinstance(_run(selection="full").reporter(d), fedsgd.FullGradient)
    assert isinstance(_run(selection="top").reporter(d).selector, fedsgd.TopOne)


def test_every_method_name_round_trips_through_method_run():
    base = _run()
    names = set()
    for name in fs.METHODS:
        run = fs.method_config(name, base=base, epsilon=1.5)
        assert run.method == name
        private = run.perturbation is not None or run.selection in ("exp", "pe", "ps")
        assert run.epsilon == (1.5 if private else None)
        names.add(run.label())
    assert len(names) == len(fs.METHODS)
    with pytest.raises(ValueError, match="method"):
        fs.method_config("PS-LAPLACE", base=base, epsilon=1.0)
    grid = fs.configs(datasets=["syn_l"], models=["logistic", "svm"], epsilons=[1.0, 2.0], methods=["NP", "PM", "PS-PM"],
                     folds=2, repeats=1)
    assert len(grid) == 2 * (1 + 2 + 2) and {c.n_clients for _, c in grid} == {60000}


def test_two_stage_epsilon_pe_exceeds_its_claim_ps_and_exp_do_not():
    d = 100
    for sel in ("exp", "pe", "ps"):
        for control in (False, True):
            run = _run(selection=sel, perturbation="pm", epsilon=2.0, epochs=2, control=control)
            t = fs.two_stage_epsilon(run, d)
            e1, e2 = run.budgets
            assert t["ε1"] == pytest.approx(e1) and t["ε2"] == pytest.approx(e2)
            assert t["per report, claimed"] == pytest.approx(e1 + e2, abs=1e-9)
            assert t["per user (E reports), claimed"] == pytest.approx(2 * t["per report, claimed"], abs=1e-9)
            assert t["per user (E reports), true"] == pytest.approx(2 * t["per report, true"], abs=1e-9)
            if sel == "pe":
                assert t["per report, true"] > t["per report, claimed"] + 1e-6
            else:
                assert t["per report, true"] == pytest.approx(t["per report, claimed"], abs=1e-9)
    flat = fs.two_stage_epsilon(_run(selection="random", perturbation="pm", epsilon=2.0), d)
    assert flat["per report, true"] == pytest.approx(2.0) and flat["ε1"] == 0.0 and flat["private"]


@pytest.mark.parametrize("sel", ["exp", "pe", "ps"])
def test_selection_only_runs_send_the_value_in_clear_so_their_loss_is_unbounded(sel):
    # Fig. 2's selection-only runs: all of ε' selects, the selected raw value is sent unperturbed
    run = _run(selection=sel, perturbation=None, epsilon=2.0, epochs=2)
    t = fs.two_stage_epsilon(run, 100)
    assert t["ε1"] == pytest.approx(1.0) and t["ε2"] == 0.0 and t["per report, claimed"] == pytest.approx(1.0)  # ε / E
    assert t["per report, true"] == math.inf and t["per user (E reports), true"] == math.inf and not t["private"]
    table = fs.pe_privacy_table(ds=[20, 100], k_fractions=[0.1], epsilons=[0.5, 1.0])
    assert len(table) == 4 and bool((table["PE / ε1"] > 1).all())
    assert (table["PS true loss"] - table["ε1 (claimed)"]).abs().max() < 1e-9
    assert (table["EXP true loss"] - table["ε1 (claimed)"]).abs().max() < 1e-9


def test_hyper_parameter_free_mu():
    theta = 0.2
    d, e = 100, 0.75
    ms = (1, 10, 100, 300, 1000, 10**4, 10**6)
    mus = [fs.hyper_parameter_free_mu(m=m, epsilon_report=e, d=d, theta=theta) for m in ms]
    assert all(0.0 <= mu <= theta for mu in mus)
    assert all(a <= b for a, b in zip(mus, mus[1:])) and mus[0] == 0.0 and mus[-1] == theta
    # by hand: need = sqrt(d ln d / m), mu = clip(1 - need / eps', 0, theta)
    assert fs.hyper_parameter_free_mu(m=1000, epsilon_report=e, d=d) == pytest.approx(
        1 - math.sqrt(d * math.log(d) / 1000) / e)
    assert fs.hyper_parameter_free_mu(m=1000, epsilon_report=4.0, d=d, theta=0.3) == 0.3
    with pytest.raises(ValueError, match="epsilon"):
        fs.hyper_parameter_free_mu(m=10, epsilon_report=0.0, d=d)
    with pytest.raises(ValueError, match="m"):
        fs.hyper_parameter_free_mu(m=0, epsilon_report=1.0, d=d)


def test_selection_seconds_times_every_selector():
    t = fs.selection_seconds(20, users=50, repeats=1)
    assert set(t) == {"EXP", "PE", "PS", "top-1", "random"} and all(0 < v < 1 for v in t.values())


# ============================================================================================ Table 3
_PAPER_TABLE3 = """
syn_l logistic 8.6074 0.3517 5.410 1.192 5.975 0.4970
syn_l svm 7.1950 2.1593 3.7704 0.8533 5.065 2.0816
bank logistic 2.4197 -0.157 3.2338 0.0464 2.5525 0.1463
bank svm 4.3823 0.4436 3.4369 0.2530 4.0244 0.0164
kdd99 logistic 2.0471 0.5091 2.5148 0.2322 2.0171 0.3428
kdd99 svm 1.85629 -0.1625 2.2168 0.2288 1.8291 0.4465
adult logistic 5.5745 0.2935 5.6445 1.3096 6.0535 0.8091
adult svm 5.5361 0.1949 5.6057 0.9550 5.1442 0.3852
"""  # typed from the paper's Table 3 (../shared/papers/fedsel_liu2020.txt)


def test_reported_is_table_3_and_compare_without_runs_says_not_run():
    want = {}
    for line in _PAPER_TABLE3.strip().splitlines():
        ds, model, *vals = line.split()
        for (sel, what), v in zip([(s, w) for s in ("exp", "pe", "ps") for w in ("gain", "loss")], vals):
            want[(ds, model, sel, what)] = float(v)
    assert len(fs.REPORTED) == 48
    got = {tuple(dict(r.setting)[k] for k in ("dataset", "model", "selection", "what")): r.value for r in fs.REPORTED}
    assert got == want
    assert all(r.epsilon == 2.0 and r.source == "Table 3" for r in fs.REPORTED)
    out = fs.compare(pd.DataFrame())
    assert len(out) == 24  # one row per (data set, model, selection): its gain and loss, 48 numbers
    assert set(out["gain, ours [95 % CI]"]) == {"not run"} and set(out["loss, ours [95 % CI]"]) == {"not run"}
    assert set(out["gain: sign reproduced"]) == {""}
    assert set(out["ours: runs"]) == {""}
    for _, row in out.iterrows():
        ds = next(k for k, v in fs.DATASETS.items() if v["label"] == row["data set"])
        assert row["gain, paper"] == want[(ds, row["model"], row["selection"].lower(), "gain")]
        assert row["loss, paper"] == want[(ds, row["model"], row["selection"].lower(), "loss")]


def test_gains_losses_and_compare_from_real_runs():
    """Tiny syn-L runs (3-fold, one repetition, 60,000 one-record users, 100 iterations): PM, U-PM, PS-PM and
    PS-PM-C at eps = 2; gain and loss are the differences of their final accuracies in points, and each interval is
    the corrected resampled t of the fold-by-fold differences."""
    from ldptut.papers import cv_interval

    grid = fs.configs(datasets=["syn_l"], models=["logistic"], epsilons=[2.0],
                     methods=["PM", "U-PM", "PS-PM", "PS-PM-C"], folds=3, repeats=1)
    runner = Runner(None, train=True, progress=False)
    table = fs.runs_table(runner.record_all([("table 3", c) for _, c in grid]))
    assert len(table) == 4 and table["accuracy"].between(0, 100).all()
    acc = {c.method: a for c, a in zip(table["config"], table["accuracy"])}
    folds = {c.method: r for c, r in zip(table["config"], table["accuracy_runs"])}
    assert all(len(r) == 3 for r in folds.values())
    assert all(100 * sum(folds[m]) / 3 == pytest.approx(acc[m], abs=1e-9) for m in acc)   # the mean of the folds
    gl = fs.gains_losses(table)
    assert len(gl) == 3 and list(gl["selection"]) == ["EXP", "PE", "PS"]
    ps = gl[gl["selection"] == "PS"].iloc[0]
    for name, other in (("gain", "PM"), ("loss", "PS-PM"), ("gain over control", "U-PM")):
        assert ps[name] == pytest.approx(acc["PS-PM-C"] - acc[other], abs=1e-9)
        m, lo, hi = cv_interval([100 * (x - y) for x, y in zip(folds["PS-PM-C"], folds[other])], folds=3)
        assert (ps[f"{name} lo"], ps[f"{name} hi"]) == pytest.approx((lo, hi)) and lo < ps[name] < hi
    assert gl[gl["selection"] != "PS"][["gain", "loss", "gain over control"]].isna().all().all()  # EXP / PE: not run
    assert fs.gains_losses(table, epsilon=1.0)[["gain", "loss"]].isna().all().all()  # other eps: nothing
    old = table.assign(accuracy_runs=[None] * len(table))                      # records stored without the folds
    assert fs.gains_losses(old)[["gain lo", "gain hi"]].isna().all().all()
    cmp = fs.compare(table)
    assert len(cmp) == 24
    row = cmp[(cmp["data set"] == "syn-L-0.01-0.9") & (cmp["model"] == "logistic") & (cmp["selection"] == "PS")].iloc[0]
    assert row["gain, ours [95 % CI]"] == f"{ps['gain']:+.2f} [{ps['gain lo']:+.1f}, {ps['gain hi']:+.1f}]"
    assert row["loss, ours [95 % CI]"].startswith(f"{ps['loss']:+.2f} [")
    assert row["gain: sign reproduced"] == fs._verdict(5.975, ps["gain lo"], ps["gain hi"])
    assert row["ours: runs"] == "1 x 3-fold"
    others = cmp.drop(index=row.name)
    assert set(others["gain, ours [95 % CI]"]) == {"not run"} and set(others["loss, ours [95 % CI]"]) == {"not run"}


def _fig2_runs(cells):
    """runs_table-like test rows on ADULT: (model, method, eps, per-fold accuracies in [0, 1]) at 2 x 5-fold."""
    out = []
    for model, method, eps, folds in cells:
        c = fs.method_config(method, base=fs.base_config("adult", model, folds=5, repeats=2), epsilon=eps)
        out.append({"config": c, "dataset": "adult", "model": model, "method": method, "epsilon": eps,
                    "accuracy": 100 * sum(folds) / len(folds), "accuracy_runs": list(folds)})
    return pd.DataFrame(out)


def test_fig2_differences_pair_each_method_with_its_reference_fold_by_fold():
    from ldptut.papers import cv_interval

    g = torch.Generator().manual_seed(0)
    folds = {k: (0.7 + 0.05 * torch.rand(10, generator=g)).tolist() for k in range(6)}
    runs = _fig2_runs([("logistic", "PM", 0.5, folds[0]), ("logistic", "PS-PM", 0.5, folds[1]),
                       ("logistic", "U-PM", 0.5, folds[2]), ("logistic", "PM", 2.0, folds[3]),
                       ("logistic", "PS-PM", 2.0, folds[4]), ("svm", "PM", 0.5, folds[5])])
    d = fs.fig2_differences(runs, pairs=[("PS-PM", "PM"), ("PS-PM", "U-PM"), ("PS-HM", "HM")])
    assert set(d["pair"]) == {"PS-PM − PM", "PS-PM − U-PM"}                 # HM was not run: no column
    row = d[(d["model"] == "logistic") & (d["epsilon"] == 0.5) & (d["pair"] == "PS-PM − U-PM")].iloc[0]
    m, lo, hi = cv_interval([100 * (a - b) for a, b in zip(folds[1], folds[2])], folds=5)
    assert row["difference"] == pytest.approx(m) and (row["lo"], row["hi"]) == pytest.approx((lo, hi))
    at2 = d[(d["model"] == "logistic") & (d["epsilon"] == 2.0)].set_index("pair")
    assert at2.loc["PS-PM − PM", "difference"] == pytest.approx(100 * (sum(folds[4]) - sum(folds[3])) / 10)
    assert pd.isna(at2.loc["PS-PM − U-PM", "difference"])                   # U-PM missing at eps 2
    assert d[d["model"] == "svm"]["difference"].isna().all()
    wide = fs.fig2_gains(runs, pairs=[("PS-PM", "PM"), ("PS-PM", "U-PM")])
    assert list(wide.columns) == ["a − b (points)", "model", "ε = 0.5", "ε = 2"] and len(wide) == 4
    assert list(wide["a − b (points)"]) == ["PS-PM − PM"] * 2 + ["PS-PM − U-PM"] * 2      # the pairs' order
    at = wide.set_index(["a − b (points)", "model"])
    assert at.loc[("PS-PM − U-PM", "logistic"), "ε = 0.5"] == f"{m:+.2f} [{lo:+.1f}, {hi:+.1f}]"
    assert at.loc[("PS-PM − U-PM", "logistic"), "ε = 2"] == "not run"
    assert fs.difference_cell(runs.iloc[1], runs.iloc[2]) == f"{m:+.2f} [{lo:+.1f}, {hi:+.1f}]"
    assert fs.difference_cell(runs.iloc[1], runs.iloc[2].drop("accuracy_runs")) == f"{m:+.2f}"   # no folds: no interval
    ordered = fs.in_method_order(runs.iloc[::-1])
    assert list(zip(ordered["model"], ordered["method"])) == [("logistic", "PM"), ("logistic", "PM"), ("logistic", "U-PM"),
                                                              ("logistic", "PS-PM"), ("logistic", "PS-PM"), ("svm", "PM")]
    two = pd.concat([runs, runs.assign(dataset="bank")])
    with pytest.raises(ValueError, match="one data set"):
        fs.fig2_differences(two)
    assert fs.fig2_differences(runs.iloc[:0]).empty


def test_followup_gives_each_tuned_method_its_test_run():
    runs = _fake_runs([("PM", 0.01, "validation", 80.0), ("PM", 0.1, "validation", 85.0),
                       ("PS-PM", 0.01, "validation", 88.0), ("PS-PM", 0.1, "validation", 86.0)])
    table = pd.concat([runs.assign(experiment="tuning"),
                       runs.iloc[:2].assign(experiment="fig 2 tuning", accuracy=[90.0, 70.0]),
                       runs.iloc[2:].assign(experiment="convergence tuning", accuracy=[60.0, 61.0])],
                      ignore_index=True)
    out = fs.followup(fs.Params(repeats=10), table)
    got = sorted((e, c.method, c.lr, c.holdout, c.repeats, c.eval_every) for e, c in out)
    every = fs.base_config("bank", "logistic").eval_every
    assert got == [("convergence tuned", "PS-PM", 0.1, "test", 10, 5), ("fig 2 tuned", "PM", 0.01, "test", 10, every),
                   ("table 3 tuned", "PM", 0.1, "test", 10, every), ("table 3 tuned", "PS-PM", 0.01, "test", 10, every)]
    assert fs.followup(fs.Params(repeats=10), table.iloc[:0]) == []


# ============================================================================================ real data


def test_prepare_bank(monkeypatch, data_mirror):
    """The only test on real data: BANK as FedSel's users hold it (skipped without the mirror or a cache)."""
    mirror = data_mirror
    if mirror is not None:
        monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(mirror))
    elif not (D.data_root() / "bank").is_dir():
        pytest.skip("no data mirror and no cached BANK: set LDPTUT_DATA_MIRROR (e.g. to ../shared/datasets)")
    try:
        x, y = fs.prepare("bank")
    except D.DatasetUnavailable as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"BANK unavailable: {e}")
    assert x.shape == (45211, 51) and y.shape == (45211,)
    assert set(y.unique().tolist()) == {-1.0, 1.0}
    assert 0.05 < float((y == 1).double().mean()) < 0.2  # "yes" is the minority (about 11.7 %)
    assert float(x.abs().max()) <= 1.0
    scale = x.abs().amax(0)
    assert bool(((scale == 1.0) | (scale == 0.0)).all())  # each column divided by its largest |value|
    with pytest.raises(ValueError, match="dataset"):
        fs.prepare("bank2")


def test_the_uniform_index_control_is_the_two_stage_report_with_a_random_index():
    run = fs.method_config("U-PM", base=_run(), epsilon=2.0)
    assert run.method == "U-PM" and run.budgets == (None, 2.0)            # no selection budget: all of ε' on the value
    t = fs.two_stage_epsilon(run, 100)
    assert t["per report, true"] == pytest.approx(2.0) and t["private"]
    rep = run.reporter(100)
    assert isinstance(rep, fedsgd.SelectedCoordinate) and isinstance(rep.selector, fedsgd.UniformIndex)
    assert rep.keeps_residual                                              # like FedSel's selections, unlike PM
    # the index ignores the data and is uniform; the value is the selected coordinate's, not rescaled by d
    v = torch.zeros(200_000, 5)
    v[:, 0] = 100.0
    j = fedsgd.UniformIndex().select(v, generator(0, "u"))
    counts = torch.bincount(j, minlength=5).double() / j.numel()
    assert (counts - 0.2).abs().max() < 0.005
    s = torch.full((4, 3, 10), 0.5)
    mean, jj = fedsgd.SelectedCoordinate(fedsgd.UniformIndex()).report(s, s, generator(1, "u"))
    assert float(mean.sum(-1).max()) == pytest.approx(0.5)                 # one unscaled value per user, averaged
    assert float(fedsgd.RandomCoordinate().report(s, s, generator(1, "u"))[0].sum(-1).max()) == pytest.approx(5.0)


def test_the_uniform_control_at_alpha_is_flat_pm_at_alpha_over_d_with_one_report_per_user():
    """With one epoch (one report per user, no accumulator), U-PM's unscaled report at learning rate α moves the
    model exactly as flat PM's report, d times larger, at α / d: same index, same noise, same steps. So a gain of a
    two-stage method over flat PM at one shared α can be the step size alone; the control takes it out."""
    x, y = D.sparse_synthetic(2000, 20, c1=0.01, c2=0.9)
    u = _run(selection="uniform", perturbation="pm", epsilon=2.0, lr=1.0).simulate(x, y, progress=False)
    pm = _run(selection="random", perturbation="pm", epsilon=2.0, lr=1.0 / 20).simulate(x, y, progress=False)
    assert torch.allclose(u.weights, pm.weights, rtol=1e-5, atol=1e-6)
    assert torch.equal(u.final, pm.final)
    other = _run(selection="random", perturbation="pm", epsilon=2.0, lr=1.0).simulate(x, y, progress=False)
    assert not torch.allclose(u.weights, other.weights, rtol=1e-2)   # at the same α they differ


# ============================================================================================ the chapter's tables and figures
def _curve_rows(cells, *, model="logistic", dataset="adult"):
    """runs_table-like test rows: (method, eps or None, misclassification %, std) at one α, on test."""
    base = fs.base_config(dataset, model, folds=3, repeats=1)
    out = []
    for method, eps, mis, sd in cells:
        c = fs.method_config(method, base=base, epsilon=eps)
        out.append({"config": c, "dataset": dataset, "model": model, "method": c.method, "epsilon": c.epsilon,
                    "accuracy": 100.0 - mis, "misclassification": mis, "accuracy_std": sd})
    return pd.DataFrame(out)


def test_wide_pivots_in_order_with_labels_and_epsilon_columns():
    runs = _curve_rows([("PM", 2.0, 30.0, 1.0), ("PS-PM", 2.0, 24.0, 0.5), ("PM", 0.5, 40.0, 2.0), ("NP", None, 16.0, 0.1)])
    w = fs.wide(runs, index=["dataset", "model"], columns="method", values="accuracy", order=["NP", "PS-PM", "PM", "HM"])
    assert list(w.columns) == ["data set", "model", "NP", "PS-PM", "PM"]           # order kept, absent methods left out
    assert w.iloc[0]["data set"] == "ADULT" and w.iloc[0]["PS-PM"] == 76.0
    e = fs.wide(runs[runs["epsilon"].notna()], index=["model", "method"], columns="epsilon", values="misclassification")
    assert list(e.columns) == ["model", "method", "ε = 0.5", "ε = 2"]             # ε ascending, named
    assert list(e["method"]) == ["PM", "PS-PM"] and pd.isna(e.set_index("method").loc["PS-PM", "ε = 0.5"])
    assert e.columns.name is None


def test_alpha_text_marks_the_grids_edge():
    tuned = pd.DataFrame({"lr": [0.01, 0.3, 10.0], "at grid edge": [True, False, True]})
    assert fs.alpha_text(tuned) == ["0.01*", "0.3", "10*"]


def test_compare_view_keeps_our_rows_under_short_headers():
    cmp = fs.compare(pd.DataFrame())
    assert fs.compare_view(cmp).empty                                               # nothing run: no rows
    cmp.loc[0, ["gain, ours [95 % CI]", "loss, ours [95 % CI]", "gain over U-PM, ours [95 % CI]"]] = [
        "+1.00 [-0.5, +2.5]", "+0.10 [-0.1, +0.3]", "+0.20 [-1.0, +1.4]"]
    cmp.loc[0, "gain: sign reproduced"] = "unclear"
    v = fs.compare_view(cmp)
    assert list(v.columns) == list(fs.COMPARE_VIEW.values()) and len(v) == 1
    assert v.loc[0, "gain: paper"] == round(cmp.loc[0, "gain, paper"], 2) == 8.61   # syn-L logistic EXP: 8.6074
    assert v.loc[0, "X"] == "EXP" and v.loc[0, "sign reproduced"] == "unclear"


class _Memo:
    """A stand-in for ldptut.experiments.Runner's memo: the chapter's tables read data through it."""

    def __init__(self, data):
        self.data = data

    def memo(self, key, make):
        return self.data[key]


def test_data_and_budget_tables_and_the_majority_rate_from_memoised_data():
    x, y = D.sparse_synthetic(1000, 20, c1=0.01, c2=0.9, seed=0)
    y = torch.where(torch.arange(1000) < 700, 1.0, -1.0)                           # 70 % positives
    runner = _Memo({("fedsel-data", "syn_l", None): (x, y)})
    assert fs.data(runner, "syn_l")[0] is x
    assert fs.majority_rate(y) == pytest.approx(70.0) and fs.majority_rate(-y) == pytest.approx(70.0)
    t = fs.data_table(["syn_l"], folds=5, runner=runner).iloc[0]
    assert (t["records (users)"], t["d (ours)"], t["d (paper)"]) == (1000, 20, 100)
    assert (t["positives (%)"], t["majority class (%)"], t["users per fold"], t["batch m = 0.01 N"], t["k = 0.1 d"]) == (
        70.0, 70.0, 800, 8, 2)
    b = fs.budget_table(["syn_l"], epsilon=2.0, mu=0.1, runner=runner).set_index("method")
    assert list(b.index) == ["EXP-PM", "PE-PM", "PS-PM", "PE-PM-C", "PE"] and set(b["d"]) == {20}
    assert b.loc["PS-PM", "true"] == "2.0000" and b.loc["PE", "true"] == "unbounded"
    assert float(b.loc["PE-PM", "true"]) > 2.0 and b.loc["PE-PM-C", "per report: claimed"] == pytest.approx(2.2)


def test_selection_check_finds_every_sampler_on_its_law():
    t = fs.selection_check(20_000)
    assert list(t["mechanism"]) == ["EXP", "PE", "PS"] and set(t["max |freq - exact| / s.e."]) == {"< 5"}
    assert t["P[top-1 index] exact"].between(0.1, 0.5).all()


def test_the_chapters_figures_fit_the_column_two_panels_per_row():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ldptut.display import COLUMN_IN

    def check(fig, panels):
        w, _ = fig.get_size_inches()
        shown = [ax for ax in fig.axes if ax.get_visible()]
        assert w == pytest.approx(COLUMN_IN) and len(shown) == panels
        rows = {round(ax.get_position().y0, 3) for ax in shown}
        assert all(sum(round(ax.get_position().y0, 3) == r for ax in shown) <= 2 for r in rows)
        plt.close(fig)

    cells = [(m, e, 30.0 - e, 1.0) for m in fs.CURVE_METHODS if m not in fs.IN_CLEAR for e in (0.5, 2.0)]
    runs = _curve_rows(cells + [(m, None, 20.0, 0.5) for m in fs.IN_CLEAR])
    check(fs.plot_fig2(runs, majority=76.0), 4)
    two = pd.concat([runs, _curve_rows(cells, model="svm")])
    check(fs.plot_fig2(two, majority=76.0), 8)
    check(fs.plot_fig2_tuned(runs[runs["method"].isin(["PM", "PS-PM", "HM", "PS-HM"])], majority=76.0), 2)
    f3b = runs[runs["method"].isin(["PM", "PS-PM"])].assign(label=lambda t: t["method"])
    check(fs.plot_fig3(runs[runs["method"].isin(["PM", "PS-PM"])], f3b, majority=76.0), 2)
    times = pd.DataFrame({"EXP": [1e-6, 1e-5], "PS": [5e-7, 4e-6]}, index=pd.Index([10, 100], name="d"))
    check(fs.plot_selection_cost(times), 1)
    val = _fake_runs([("PM", a, "validation", 80.0 + a) for a in (0.01, 0.1)]
                     + [("PS-PM", a, "validation", 85.0 - a) for a in (0.01, 0.1)])
    three = pd.concat([val] + [val.assign(dataset=ds, config=[c.replace(dataset=ds) for c in val["config"]])
                               for ds in ("adult", "kdd99")], ignore_index=True)
    check(fs.plot_tuning(three, model="logistic", majority={"bank": 88.3}), 3)   # three panels: two rows


def test_difference_is_the_paired_difference_of_two_rows():
    runs = _fig2_runs([("logistic", "PM", 2.0, [0.70, 0.72, 0.74, 0.71, 0.73] * 2),
                       ("logistic", "PS-PM", 2.0, [0.75, 0.76, 0.74, 0.77, 0.75] * 2)])
    a, b = runs.iloc[1], runs.iloc[0]
    diff, lo, hi = fs.difference(a, b)
    want = fs.fig2_differences(runs, pairs=[("PS-PM", "PM")]).iloc[0]
    assert (diff, lo, hi) == pytest.approx((want["difference"], want["lo"], want["hi"]))
    assert fs.difference_cell(a, b) == f"{diff:+.2f} [{lo:+.1f}, {hi:+.1f}]"
    assert fs.difference(a, None) == (None, None, None)
