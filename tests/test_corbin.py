"""CoQ-FL / CorBin-FL: the correlated pair sampler (marginals exact, joint law, covariance against Lemma 2,
Eq. 6), the random pairing with the odd client's fallback, determinism, the claim checks, and the runs.

Statistical tolerances: an empirical frequency p̂ of N draws is compared with its exact p within
5 standard errors sqrt(p (1 - p) / N) (a false alarm has probability < 1e-6 per comparison); the
samplers are seeded, so each test gives the same numbers every time."""
import math

import pandas as pd
import pytest
import torch

from ldptut import fl, models
from ldptut.audits import exact_ldp_audit
from ldptut.mechanisms import CorrelatedTwoPoint, TwoPoint, codebook_cdf, two_point_a
from ldptut.papers import corbin
from ldptut.rng import generator
from ldptut.runcache import RunRecord, records_table
from ldptut.runconfig import config_from_dict
from ldptut.training import LocalSGD, OptimizerSpec

XL = torch.tensor([-1.0, -0.9, -0.2, 0.0, 0.3, 0.8, 1.0, 0.05])
XF = torch.tensor([1.0, 0.5, -0.4, 0.0, 0.31, -0.7, 1.0, -0.05])


def _draw(mech, n=200_000, seed=0):
    L, F = XL.repeat(n, 1), XF.repeat(n, 1)
    return mech.privatize_pairs(L, F, shared=generator(seed, "shared"), local=generator(seed, "local"))


def _draw_as(mech, n=200_000, seed=0):
    """Leader and follower drawn apart (a federation): the same shared seed, each its own coin."""
    L, F = XL.repeat(n, 1), XF.repeat(n, 1)
    return (mech.privatize_as(L, role="leader", shared=generator(seed, "pair"), own=generator(seed, "leader")),
            mech.privatize_as(F, role="follower", shared=generator(seed, "pair"), own=generator(seed, "follower")))


def _within(freq, p, n, k=5.0):
    se = torch.sqrt(p * (1 - p) / n).clamp(min=1.0 / n)
    return bool(((freq - p).abs() <= k * se).all())


# ---------------------------------------------------------------------------------------- codebook
@pytest.mark.parametrize("nr,px", [(0, 0.5), (1, 0.5), (3, 0.3), (5, 0.8)])
def test_codebook_cdf_is_the_law_of_numrand_biased_bits_read_as_an_integer(nr, px):
    cdf = codebook_cdf(nr, px)
    assert cdf.shape == (2 ** nr + 1,) and cdf[0] == 0 and cdf[-1] == 1 and bool((cdf.diff() > 0).all())
    for s in range(2 ** nr):
        ones = bin(s).count("1")
        assert (cdf[s + 1] - cdf[s]).item() == pytest.approx(px ** ones * (1 - px) ** (nr - ones), rel=1e-12)


# ---------------------------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("nr,px", [(0, 0.5), (1, 0.5), (3, 0.3), (5, 0.5), (8, 0.5)])
@pytest.mark.parametrize("sampler", ["batched", "apart"])
def test_pair_sampler_matches_the_exact_joint_law(nr, px, sampler):
    """Both samplers: the batched one (privatize_pairs) and each client drawing apart from the pair's seed
    (privatize_as, a federation)."""
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=nr, p_x=px)
    n = 200_000
    ol, of = (_draw if sampler == "batched" else _draw_as)(mech, n)
    lo, hi = mech.output_values(XL)
    assert bool(((ol == lo.float()) | (ol == hi.float())).all()) and ol.dtype == torch.float32
    _, probs = mech.joint_distribution(XL, XF)
    pl, pf = (ol > 0), (of > 0)
    for i, a in enumerate((~pl, pl)):
        for j, b in enumerate((~pf, pf)):
            assert _within((a & b).double().mean(0), probs[:, i, j], n), (i, j)


def test_each_marginal_is_exactly_the_two_point_mechanism_and_passes_the_exact_ldp_audit():
    for nr, px in [(1, 0.5), (4, 0.5), (6, 0.2), (12, 0.5)]:
        mech = CorrelatedTwoPoint(epsilon=0.7, center=0.1, radius=0.3, num_rand=nr, p_x=px)
        tp = TwoPoint(epsilon=0.7, center=0.1, radius=0.3)
        x = torch.linspace(-0.3, 0.5, 41, dtype=torch.float64)
        for partner in (-0.2, 0.1, 0.4):
            _, probs = mech.joint_distribution(x, torch.full_like(x, partner))
            assert torch.allclose(probs[..., 1, :].sum(-1), tp.prob_plus(x), atol=1e-12)   # leader
            assert torch.allclose(probs[..., :, 1].sum(-1), tp.prob_plus(partner).expand_as(x), atol=1e-12)
            assert bool((probs >= -1e-15).all()) and torch.allclose(probs.sum((-1, -2)), torch.ones_like(x))
        audit = exact_ldp_audit(mech, x)  # output_distribution is the marginal (inherited)
        assert audit.passed and audit.epsilon_observed == pytest.approx(0.7, abs=1e-9)


def test_outputs_are_unbiased_and_the_pair_sum_variance_is_the_exact_one():
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=8)
    n = 200_000
    ol, of = (t.double() for t in _draw(mech, n, seed=3))
    for out, x in ((ol, XL), (of, XF)):
        sd = mech.variance(x).sqrt()
        assert bool(((out.mean(0) - x).abs() <= 5 * sd / math.sqrt(n)).all())
    var_sum = (ol + of).var(0)
    exact = mech.pair_sum_variance(XL, XF)
    # the sample variance of a bounded variable: relative error within 5 sd; sd <= sqrt(2/n) times the range
    span = 4 * two_point_a(1.0)
    assert bool(((var_sum - exact).abs() <= 5 * span ** 2 / math.sqrt(n) + 1e-9).all())
    cov = ((ol - ol.mean(0)) * (of - of.mean(0))).mean(0)
    assert bool(((cov - mech.covariance(XL, XF)).abs() <= 5 * span ** 2 / 4 / math.sqrt(n)).all())


def test_sampler_agrees_with_explicit_numrand_bits():
    """The shared index drawn by the inverse CDF has the law of NumRand Bernoulli(p_x) bits read as an
    integer: the leader's report from explicit bits (the cell rule) has the same frequency of +."""
    nr, px, n = 3, 0.3, 200_000
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=nr, p_x=px)
    g = generator(5, "bits")
    bits = (torch.rand(n, nr, generator=g) < px).long()
    k = (bits * (2 ** torch.arange(nr))).sum(1)              # the integer IntCR
    cdf = codebook_cdf(nr, px)
    t = mech.prob_plus(torch.tensor(0.3)).item()
    cell = int(torch.searchsorted(cdf[1:-1], torch.tensor(t, dtype=torch.float64), right=True))
    f = (t - cdf[cell]) / (cdf[cell + 1] - cdf[cell])
    v = torch.rand(n, generator=g, dtype=torch.float64)
    plus = (k < cell) | ((k == cell) & (v < f))
    sampled = _draw(mech, n)[0][:, 4] > 0                    # XL[4] = 0.3
    p = torch.tensor(t, dtype=torch.float64)
    assert _within(plus.double().mean(), p, n) and _within(sampled.double().mean(), p, n)


def test_sampler_draws_two_uniforms_per_pair_and_weight():
    """As many uniforms as two independent clients: one from ``shared`` (the leader's point, whose cell is the
    shared index) and one from ``local`` (the follower's coin) per pair and weight, whatever p_x."""
    for px in (0.5, 0.3):
        mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=4, p_x=px)
        x = torch.zeros(4, 7)
        s, l = generator(0, "s"), generator(0, "l")
        mech.privatize_pairs(x, x, shared=s, local=l)
        s2, l2 = generator(0, "s"), generator(0, "l")
        torch.rand(4, 7, generator=s2), torch.rand(4, 7, generator=l2)
        assert torch.equal(s.get_state(), s2.get_state()) and torch.equal(l.get_state(), l2.get_state())


def test_same_generators_give_the_same_reports_and_other_seeds_differ():
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=8)
    a, b, c = _draw(mech, 1000, seed=1), _draw(mech, 1000, seed=1), _draw(mech, 1000, seed=2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])


def test_reports_keep_dtype_and_shape_and_float64_works():
    mech = CorrelatedTwoPoint(epsilon=2.0, center=0.0, radius=0.5, num_rand=4, p_x=0.4)
    x = torch.zeros(3, 5, dtype=torch.float64)
    ol, of = mech.privatize_pairs(x, x, shared=generator(0), local=generator(1))
    assert ol.dtype == of.dtype == torch.float64 and ol.shape == (3, 5)
    with pytest.raises(ValueError, match="one shape"):
        mech.privatize_pairs(x, x[:2])


@pytest.mark.parametrize("kw,match", [(dict(num_rand=25), "num_rand"), (dict(num_rand=-1), "num_rand"),
                                      (dict(num_rand=2.5), "num_rand"), (dict(p_x=0.0), "p_x"),
                                      (dict(p_x=1.0), "p_x"), (dict(p_x=float("nan")), "p_x"),
                                      (dict(epsilon=0.0), "epsilon"), (dict(epsilon=float("nan")), "epsilon")])
def test_bad_parameters_raise_naming_them(kw, match):
    args = dict(epsilon=1.0)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        CorrelatedTwoPoint(**args)


# ---------------------------------------------------------------------------------------- the paper's forms
def test_lemma2_and_eq6_are_the_exact_law_when_the_cuts_fall_in_different_cells():
    eps = 1.0
    mech = CorrelatedTwoPoint(epsilon=eps, num_rand=16)
    g = generator(0, "grid")
    wl, wf = torch.rand(500, generator=g, dtype=torch.float64) * 2 - 1, torch.rand(500, generator=g, dtype=torch.float64) * 2 - 1
    assert torch.allclose(mech.covariance(wl, wf), corbin.lemma2_covariance(wl, wf, epsilon=eps), atol=1e-4)
    assert torch.allclose(mech.pair_sum_variance(wl, wf), corbin.eq6_pair_variance((wl + wf) / 2, epsilon=eps),
                          atol=1e-4)
    a = two_point_a(eps)
    assert bool((corbin.lemma2_covariance(wl, wf, epsilon=eps) <= 0).all())
    assert corbin.eq6_pair_variance(-a / 2, epsilon=eps).item() == pytest.approx(a * a)  # the draft's maximum
    # NumRand = 0: one cell, the independent pair (covariance 0, variance 2 a^2 r^2 - ...)
    ind = CorrelatedTwoPoint(epsilon=eps, num_rand=0)
    assert torch.allclose(ind.covariance(wl, wf), torch.zeros_like(wl), atol=1e-12)
    assert torch.allclose(ind.pair_sum_variance(wl, wf), corbin.independent_pair_variance(wl, wf, epsilon=eps))


def test_numrand_one_already_correlates_the_pair():
    """The draft says NumRand = 1 is LDP-FL (no correlation); the exact law says otherwise."""
    m1 = CorrelatedTwoPoint(epsilon=1.0, num_rand=1)
    assert m1.covariance(torch.tensor(-0.5), torch.tensor(-0.5)).item() < -0.5


def test_the_draft_algorithm_2_as_printed_misses_the_marginal():
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=4)
    x = torch.linspace(-1, 1, 9, dtype=torch.float64)
    gap = (mech.draft_marginal(x) - mech.prob_plus(x)).abs()
    assert gap.max().item() > 0.05          # the inclusive ProbList shifts the cut by one cell
    with pytest.raises(ValueError, match="num_rand >= 1"):
        CorrelatedTwoPoint(epsilon=1.0, num_rand=0).draft_marginal(x)


def test_half_the_budget_claim_reading_of_the_draft():
    t = corbin.equal_variance_epsilons([0.01, 1.0, 3.0])
    col = "ε/ε' sup over E[w] (draft)"
    assert t[col].iloc[0] == pytest.approx(1 / math.sqrt(2), abs=0.01)   # small ε: a ~ 2/ε, halving a² is ε·√2
    # at the matched ε', the independent pair's worst variance equals the correlated pair's
    e1 = t["ε' sup over E[w] (draft)"].iloc[1]
    assert 2 * two_point_a(e1) ** 2 == pytest.approx(two_point_a(1.0) ** 2)
    assert math.isinf(t["ε' sup over E[w] (draft)"].iloc[2]) and t[col].iloc[2] == 0.0
    assert corbin.epsilon_from_a(two_point_a(0.8)) == pytest.approx(0.8)


def test_joint_view_is_eps_ldp_only_for_the_independent_pair():
    t = corbin.joint_view_table(1.0, partners=(-0.5, 0.0, 0.5), num_rand=(0, 1, 8), grid=41)
    ind, cor = t[t.NumRand == 0], t[t.NumRand > 0]
    assert (ind["max privacy loss"] - 1.0).abs().max() < 1e-9 and (ind["δ at ε"] < 1e-12).all()
    assert cor["max privacy loss"].map(math.isinf).all() and (cor["δ at ε"] > 0.05).all()
    with pytest.raises(ValueError, match="role"):
        corbin.joint_view_loss(CorrelatedTwoPoint(epsilon=1.0), 0.0, role="both")


# ---------------------------------------------------------------------------------------- the round engine
def _toy():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 4, generator=g)
    x = torch.randn(900, 1, 8, 8, generator=g)
    y = (x.flatten(1) @ w).argmax(1)
    parts = [torch.arange(i * 100, (i + 1) * 100) for i in range(7)]
    return dict(x_train=x[:700], y_train=y[:700], x_test=x[700:], y_test=y[700:]), parts


def _context(m=7, d=50, seed=3, round=2):
    layout = fl.ParamLayout(names=("w",), shapes=((d,),), slices=(slice(0, d),))
    ids = torch.arange(m)
    return fl.RoundContext(round=round, client_ids=ids, layout=layout, global_vector=torch.zeros(d),
                           generators=[generator(seed, "c", i) for i in range(m)], send="weights",
                           num_samples=torch.ones(m), seed=seed)


def test_pairing_covers_every_client_once_and_the_odd_one_falls_back_to_two_point():
    priv = fl.PairedPerturbation(epsilon=1.0, range=fl.FixedRange(0.0, 1.0), num_rand=8)
    ctx = _context()
    leaders, followers, odd = priv.pairs(ctx)
    assert sorted(leaders.tolist() + followers.tolist() + [odd]) == list(range(7)) and len(leaders) == 3
    x = torch.rand(7, 50, generator=generator(9)) * 2 - 1
    out = priv(x, context=ctx)
    again = priv(x, context=_context())
    assert torch.equal(out, again)                                   # deterministic
    tp = TwoPoint(epsilon=1.0, center=0.0, radius=1.0)
    assert torch.equal(out[odd], tp.privatize(x[odd], generator=generator(3, "c", odd)))
    assert priv.pairs(_context(round=3))[0].tolist() != leaders.tolist() or \
        priv.pairs(_context(round=3))[1].tolist() != followers.tolist()   # pairs change with the round
    even_l, even_f, none = priv.pairs(_context(m=6))
    assert none is None and len(even_l) == 3


def test_paired_pairs_are_negatively_correlated_in_the_engine():
    priv = fl.PairedPerturbation(epsilon=1.0, range=fl.FixedRange(0.0, 1.0), num_rand=8)
    ctx = _context(m=2, d=100_000)
    x = torch.zeros(2, 100_000)
    out = priv(x, context=ctx)
    a = two_point_a(1.0)
    # at w = c for both, Lemma 2 gives Cov = -a^2 r^2: the reports are opposite (up to the one shared cell)
    assert ((out[0] + out[1]) == 0).double().mean().item() > 0.99
    assert out.mean().abs().item() < 5 * a / math.sqrt(200_000)


def test_a_correlated_run_is_deterministic_and_accounts_each_clients_own_report():
    data, parts = _toy()
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
    cfg = fl.FLConfig(rounds=2, trainer=LocalSGD(batch_size=32, optimizer=OptimizerSpec(lr=0.1)), progress=False)
    priv = fl.PairedPerturbation(epsilon=2.0, range=fl.GlobalModelRange())
    runs = [fl.Run(seed=1, partition=parts, privatizer=priv)]
    a, b = fl.simulate(cfg, runs, model=model, **data), fl.simulate(cfg, runs, model=model, **data)
    assert a.history["accuracy"].tolist() == b.history["accuracy"].tolist() and torch.equal(a.weights, b.weights)
    d = a.layout.numel
    assert (a.history["epsilon_round"] == 2.0 * d).all()
    assert "joint view" in a.guarantees[0].note


def test_smoothed_mean_mixes_the_global_model_and_lambda_is_checked():
    ctx = _context(m=2, d=3)
    ctx.global_vector = torch.ones(3)
    vec, _ = corbin.SmoothedMean(0.25)(torch.zeros(2, 3), context=ctx)
    assert torch.allclose(vec, torch.full((3,), 0.75))
    assert torch.equal(corbin.SmoothedMean(1.0)(torch.eye(2, 3), context=ctx)[0], torch.eye(2, 3).mean(0))
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="smoothing"):
            corbin.SmoothedMean(bad)


# ---------------------------------------------------------------------------------------- runs and tables
BASE = corbin.CorbinConfig(paper="corbin", dataset="mnist", model="cnn_pool", n_clients=50, rounds=3, seed=0, batch_size=64,
                        optimizer="adam", lr=1e-3, weight_decay=3e-3)


def test_methods_build_the_right_privatizer_and_bad_runs_raise():
    assert corbin.method_config("fedavg", base=BASE).privatizer() is None
    assert isinstance(corbin.method_config("ldp_fl", base=BASE, epsilon=1.0).privatizer(), fl.LocalPerturbation)
    coq = corbin.method_config("coq_fl", base=BASE, epsilon=1.0)
    assert isinstance(coq.privatizer(), fl.PairedPerturbation) and coq.method == "coq_fl"
    assert coq.key() != corbin.method_config("ldp_fl", base=BASE, epsilon=1.0).key()
    with pytest.raises(ValueError, match="correlated"):
        BASE.replace(correlated=True)
    with pytest.raises(ValueError, match="needs epsilon"):
        corbin.method_config("coq_fl", base=BASE)
    with pytest.raises(ValueError, match="method"):
        corbin.method_config("corbin", base=BASE, epsilon=1.0)
    with pytest.raises(ValueError, match="smoothing"):
        BASE.replace(smoothing=2.0)
    with pytest.raises(ValueError, match="n_train"):
        BASE.replace(n_train=0)
    grid = corbin.configs(BASE, seeds=[0, 1], epsilons=[0.1, 1.0])
    assert len(grid) == 2 * (1 + 2 + 2) and {c.method for _, c in grid} == {"fedavg", "ldp_fl", "coq_fl"}


def test_subsets_and_validation_split_are_fixed_and_disjoint():
    from ldptut.data import Dataset

    g = generator(0, "toy")
    ds = Dataset(name="mnist", x_train=torch.arange(100.0)[:, None], y_train=torch.arange(100) % 10,
                 x_test=torch.arange(40.0)[:, None], y_test=torch.arange(40) % 10, classes=list("0123456789"),
                 num_classes=10, input_shape=(1,), description="toy")
    small = BASE.replace(n_train=30, n_test=10).data(ds)
    assert small.x_train.shape[0] == 30 and small.x_test.shape[0] == 10
    assert torch.equal(small.x_train, BASE.replace(n_train=30, n_test=10, seed=5).data(ds).x_train)
    val = BASE.replace(n_train=30, validation=20).data(ds)
    assert val.x_test.shape[0] == 20
    assert not set(val.x_train[:, 0].tolist()) & set(val.x_test[:, 0].tolist())
    assert set(val.x_test[:, 0].tolist()) <= set(range(100))        # held out of training, not the test set
    with pytest.raises(ValueError, match="exceeds"):
        BASE.replace(n_train=90, validation=20).data(ds)
    del g


def _row(config, accuracy):
    rec = RunRecord(config=config, history=pd.DataFrame({"round": [1], "accuracy": [accuracy / 100]}))
    return records_table([rec]).iloc[0].to_dict()


def test_compare_matches_method_and_epsilon_and_states_the_composed_figure():
    runs = pd.DataFrame([_row(corbin.method_config("coq_fl", base=BASE, epsilon=1.0), 90.0),
                         _row(corbin.method_config("coq_fl", base=BASE.replace(seed=1), epsilon=1.0), 92.0),
                         _row(corbin.method_config("ldp_fl", base=BASE, epsilon=1.0), 50.0),
                         _row(corbin.method_config("coq_fl", base=BASE, epsilon=3.0), 95.0)])
    t = corbin.compare(runs).set_index("claim")
    assert t.loc["mnist coq_fl ε=1", "ours (%)"] == "91.0 ± 1.4 (2 seeds)"
    assert t.loc["mnist coq_fl ε=3", "ours (%)"] == "95.0 (1 seed)"
    assert t.loc["mnist coq_fl ε=0.3", "ours (%)"] == "not run"
    d = models.count_parameters(models.build_model("cnn_pool", input_shape=(1, 28, 28), num_classes=10))
    assert t.loc["mnist coq_fl ε=1", "ε composed per client (basic)"].startswith(f"{1.0 * d * 3:.3g}")
    assert (t["ε unit"].iloc[:4] == "per weight per round").all()
    assert corbin.compare(pd.DataFrame())["ours (%)"].eq("not run").all()


def test_the_authors_code_top_cell_reports_up_with_certainty_from_eps_ln31():
    x = torch.tensor([-1.0, 0.0, 0.5, 1.0], dtype=torch.float64)
    for eps in (0.1, 1.0, 3.0, 3.43):                           # below ln(2^5 - 1) = 3.434: exactly two-point
        assert torch.allclose(corbin.authors_code_marginal(x, epsilon=eps), TwoPoint(epsilon=eps).prob_plus(x))
    top = corbin.authors_code_marginal(torch.tensor(1.0), epsilon=5.0)
    assert top.item() == 1.0 and TwoPoint(epsilon=5.0).prob_plus(torch.tensor(1.0)).item() < 0.994


def test_diverged_and_validation_runs_are_reported_apart():
    runs = pd.DataFrame([_row(corbin.method_config("ldp_fl", base=BASE, epsilon=1.0), 80.0),
                         _row(corbin.method_config("ldp_fl", base=BASE.replace(seed=1), epsilon=1.0), 10.0),
                         _row(corbin.method_config("ldp_fl", base=BASE.replace(validation=100), epsilon=1.0), 99.0),
                         _row(corbin.method_config("ldp_fl", base=BASE.replace(smoothing=0.2), epsilon=1.0), 85.0)])
    runs.loc[1, ["diverged", "last_round"]] = [True, 7]
    assert corbin.outcome(runs.iloc[:2]) == "80.0 (1 seed); 1 of 2 diverged (round 7)"
    t = corbin.compare(runs)
    rows = t[t["claim"] == "cifar10 ldp_fl ε=1"]
    assert rows["ours (%)"].tolist() == ["not run"]
    runs["dataset"] = "cifar10"
    t = corbin.compare(runs)
    rows = t[t["claim"] == "cifar10 ldp_fl ε=1"]
    # λ = 0.2, then the plain mean
    assert rows["ours (%)"].tolist() == ["85.0 (1 seed)", "80.0 (1 seed); 1 of 2 diverged (round 7)"]
    assert "λ = 0.2" in rows["settings"].iloc[0] and "plain mean" in rows["settings"].iloc[1]


# ---- each client's own report, audited from the pair's joint law and from the sampler (not the inherited law) ----
@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("num_rand", [0, 1, 5, 12])
def test_own_report_epsilon_from_the_joint_law_is_epsilon(eps, num_rand):
    mech = CorrelatedTwoPoint(epsilon=eps, num_rand=num_rand)
    x = torch.linspace(-1, 1, 101, dtype=torch.float64)
    got = corbin.own_report_epsilon(mech, x, [-1.0, -0.3, 0.0, 0.7, 1.0])
    assert got["leader"] == pytest.approx(eps, rel=1e-9) and got["follower"] == pytest.approx(eps, rel=1e-9)


def test_binary_report_epsilon_catches_the_draft_and_the_authors_code():
    x = torch.linspace(-1, 1, 201, dtype=torch.float64)
    assert corbin.binary_report_epsilon(TwoPoint(epsilon=1.0).prob_plus(x)) == pytest.approx(1.0, rel=1e-12)
    draft = CorrelatedTwoPoint(epsilon=1.0, num_rand=5).draft_marginal(x)      # misses the marginal by one cell
    assert corbin.binary_report_epsilon(draft) > 1.05
    assert corbin.binary_report_epsilon(corbin.authors_code_marginal(x, epsilon=5.0, num_rand=5)) == math.inf
    assert corbin.binary_report_epsilon(corbin.authors_code_marginal(x, epsilon=3.0, num_rand=5)) == pytest.approx(3.0)


class _TopCellAlwaysUp(CorrelatedTwoPoint):
    """A faulty sampler: the leader at the top of the range always reports the upper point (as the authors' code)."""

    def privatize_pairs(self, leader, follower, *, shared=None, local=None):
        ol, of = super().privatize_pairs(leader, follower, shared=shared, local=local)
        top = leader >= self.center + self.radius
        return torch.where(top, torch.full_like(ol, self.center + self.radius * self.a), ol), of


def test_sampled_own_report_epsilon_stays_below_epsilon_and_catches_a_faulty_sampler():
    kw = dict(n=100_000, partners=[-1.0, 0.0, 1.0])
    good = corbin.sampled_own_report_epsilon(CorrelatedTwoPoint(epsilon=1.0, num_rand=5),
                                             shared=generator(3, "s"), local=generator(3, "l"), **kw)
    assert good["lower bound"] <= 1.0 and abs(good["estimate"] - 1.0) < 0.05
    bad = corbin.sampled_own_report_epsilon(_TopCellAlwaysUp(epsilon=1.0, num_rand=5),
                                            shared=generator(3, "s"), local=generator(3, "l"), **kw)
    assert bad["lower bound"] > 5.0


def test_a_colluding_partner_who_knows_the_shared_index_sees_more_than_the_joint_reports():
    # NumRand = 0: the index says nothing, the view is the leader's own report: exactly ε, δ = 0 at ε
    free = corbin.colluding_view_loss(CorrelatedTwoPoint(epsilon=1.0, num_rand=0), grid=101)
    assert free["max privacy loss"] == pytest.approx(1.0, rel=1e-9) and free["δ at ε"] == pytest.approx(0.0, abs=1e-12)
    # many bits: K pins the leader's uniform point, so the view nearly tells whether U < P_L: δ -> P_L(1) - P_L(-1)
    fine = corbin.colluding_view_loss(CorrelatedTwoPoint(epsilon=1.0, num_rand=12), grid=101)
    t = TwoPoint(epsilon=1.0)
    gap = float(t.prob_plus(torch.tensor(1.0)) - t.prob_plus(torch.tensor(-1.0)))
    assert fine["max privacy loss"] == math.inf and fine["δ at ε"] == pytest.approx(gap, abs=2e-3)
    # at the chapter's NumRand = 5 it exceeds the joint view's worst δ over partner inputs (the partner knows more)
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=5)
    joint = max(corbin.joint_view_loss(mech, xp, grid=101)["δ at ε"] for xp in (-1.0, -0.5, 0.0, 0.5, 1.0))
    assert corbin.colluding_view_loss(mech, grid=101)["δ at ε"] >= joint - 1e-12


def test_authors_code_rounds_runs_their_main_with_their_mnist_command_and_reads_its_csv(tmp_path):
    """A stand-in for the authors' main.py records its argv and writes a results CSV the way theirs does; the function
    passes their MNIST command (Experiments/MNIST_*.sh, on the CPU) and returns the per-round test accuracy."""
    (tmp_path / "main.py").write_text(
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "name = args[args.index('--method') + 1]\n"
        "rounds = int(args[args.index('--num_rounds') + 1])\n"
        "d = os.path.join('results', name + '_MNIST_1')\n"
        "os.makedirs(d, exist_ok=True)\n"
        "json.dump(args, open('argv.json', 'w'))\n"
        "with open(os.path.join(d, 'r.csv'), 'w') as f:\n"
        "    f.write('Round,Train Accuracy,Train Loss,Val Accuracy,Val Loss,Test Accuracy,Test Loss\\n')\n"
        "    for r in range(1, rounds + 1):\n"
        "        f.write(f'{r},0,0,0,0,{50 + r},0\\n')\n"
        "import torch\n"
        "torch.cuda.reset_peak_memory_stats()\n")   # as theirs ends: raises without a GPU unless patched
    out = corbin.authors_code_rounds(str(tmp_path), method="coq_fl", epsilon=1.0, rounds=3, seed=7, lam=0.2)
    assert list(out["Round"]) == [1, 2, 3] and list(out["Test Accuracy"]) == [51.0, 52.0, 53.0]
    import json
    argv = json.loads((tmp_path / "argv.json").read_text())
    opts = {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}
    assert opts["--method"] == "CorbinFL" and opts["--num_clients"] == "50" and opts["--epsilon"] == "1"
    assert opts["--num_rand"] == "5" and opts["--lambda_param"] == "0.2" and opts["--seed"] == "7"
    assert opts["--lr"] == "0.001" and opts["--weight_decay"] == "0.003" and opts["--device"] == "CPU"
    assert "--iid" in argv
    with pytest.raises(ValueError, match="method"):
        corbin.authors_code_rounds(str(tmp_path), method="fedavg", epsilon=1.0, rounds=1)
    with pytest.raises(FileNotFoundError, match="main.py"):
        corbin.authors_code_rounds(str(tmp_path / "nowhere"), method="ldp_fl", epsilon=1.0, rounds=1)
    (tmp_path / "main.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(RuntimeError, match="failed"):
        corbin.authors_code_rounds(str(tmp_path), method="ldp_fl", epsilon=1.0, rounds=1)


# ---------------------------------------------------------------------------------------- the controls
def test_initial_model_range_is_the_initial_models_layer_range_in_every_round():
    """The fixed-range ablation: the rule reads the run's round-0 model, never the current one (which a copy of
    GlobalModelRange would), and simulate hands every round the same initial vector."""
    data, parts = _toy()
    model = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=4, seed=3)
    seen = []

    class Recorder:  # the two rules' ranges in each round, then the plain two-point privatizer's work is skipped
        def __call__(self, x, *, context):
            seen.append((context.round, fl.InitialModelRange()(context), fl.GlobalModelRange()(context),
                         context.initial_vector.clone(), context.global_vector.clone()))
            return x

    cfg = fl.FLConfig(rounds=3, trainer=LocalSGD(batch_size=32, optimizer=OptimizerSpec(lr=0.5)), progress=False)
    res = fl.simulate(cfg, [fl.Run(seed=1, partition=parts, privatizer=Recorder())], model=model, **data)
    layout = res.layout
    init = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    for r, (c_fix, r_fix), (c_glob, r_glob), initial, glob in seen:
        assert torch.equal(initial, init)
        s = layout.slices[0]
        assert torch.allclose(c_fix[s], (init[s].max() + init[s].min()) / 2 * torch.ones(1))
        assert torch.allclose(r_fix[s], (init[s].max() - init[s].min()) / 2 + 1e-6)
        assert torch.allclose(r_glob[s], (glob[s].max() - glob[s].min()) / 2 + 1e-6)
        if r > 1:  # the model has moved: the adaptive range differs, the fixed one does not
            assert not torch.allclose(r_glob, r_fix)
    assert [s[0] for s in seen] == [1, 2, 3]


def _tune_table(rows):
    """A records table of "tune λ" runs: (method, ε, λ or None, seed, validation accuracy %, diverged)."""
    val = BASE.replace(validation=1000)
    recs = []
    for m, e, lam, seed, acc, gone in rows:
        c = corbin.method_config(m, base=val.replace(seed=seed, smoothing=lam), epsilon=e)
        h = pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc / 100], "loss": [2.0, 1.0], "diverged": [False, gone]})
        recs.append(RunRecord(config=c, history=h, provenance={}))
    return records_table(recs)


def test_lambda_is_chosen_on_validation_per_method_and_epsilon_and_never_one_that_diverged():
    t = _tune_table([
        ("ldp_fl", 1.0, None, 0, 80.0, False), ("ldp_fl", 1.0, 0.3, 0, 90.0, False), ("ldp_fl", 1.0, 0.1, 0, 85.0, False),
        ("coq_fl", 1.0, None, 0, 95.0, True), ("coq_fl", 1.0, 0.3, 0, 60.0, False),      # the best score diverged
        ("ldp_fl", 0.1, None, 0, 10.0, True), ("ldp_fl", 0.1, 0.3, 0, 10.0, True),        # every λ diverged
        ("coq_fl", 3.0, None, 0, 97.0, False), ("coq_fl", 3.0, 0.3, 0, 97.0, False),       # a tie: the plain mean
        ("coq_fl", 3.0, None, 1, 97.0, False), ("coq_fl", 3.0, 0.3, 1, 96.0, False),
    ])
    best = corbin.choose_smoothing(t)
    assert best == {("ldp_fl", 1.0): 0.3, ("coq_fl", 1.0): 0.3, ("ldp_fl", 0.1): None, ("coq_fl", 3.0): 1.0}
    runs = corbin.smoothed_runs(BASE, best, seeds=[0, 1])
    assert sorted((c.method, c.epsilon, c.smoothing or 1.0, c.seed, c.validation) for _, c in runs) == sorted([
        ("ldp_fl", 1.0, 0.3, 0, None), ("ldp_fl", 1.0, 0.3, 1, None), ("coq_fl", 1.0, 0.3, 0, None),
        ("coq_fl", 1.0, 0.3, 1, None), ("coq_fl", 3.0, 1.0, 0, None), ("coq_fl", 3.0, 1.0, 1, None)])
    shown = corbin.tuning_table(t)
    assert shown.set_index(["method", "ε"]).loc[("ldp_fl", 0.1), "λ chosen"] == "none: every λ diverged"
    on_test = RunRecord(config=corbin.method_config("ldp_fl", base=BASE, epsilon=1.0), provenance={},
                        history=pd.DataFrame({"round": [1], "accuracy": [0.5], "loss": [1.0]}))
    with pytest.raises(ValueError, match="validation"):
        corbin.choose_smoothing(records_table([on_test]))


def test_fixed_range_runs_differ_from_the_adaptive_ones_only_in_the_range():
    runs = corbin.fixed_range_runs(BASE, seeds=[0, 1], epsilons=[1.0])
    assert [(c.method, c.seed) for _, c in runs] == [("ldp_fl", 0), ("ldp_fl", 1), ("coq_fl", 0), ("coq_fl", 1)]
    for _, c in runs:
        twin = corbin.method_config(c.method, base=BASE.replace(seed=c.seed), epsilon=1.0)
        assert isinstance(c.range, fl.InitialModelRange) and isinstance(twin.range, fl.GlobalModelRange)
        assert c.replace(range=twin.range) == twin and c.key() != twin.key()
        assert config_from_dict(c.to_dict()) == c                      # the rule survives the run cache
    assert corbin.compare(records_table([RunRecord(config=runs[2][1], history=pd.DataFrame(
        {"round": [1], "accuracy": [0.5], "loss": [1.0]}), provenance={})]))["ours (%)"].eq("not run").all()


def _sweep_table(rows):
    """A Runner-like table: (experiment, method, ε, λ or None, seed, test accuracy %, diverged)."""
    recs, exps = [], []
    for exp, m, e, lam, seed, acc, gone in rows:
        c = corbin.method_config(m, base=BASE.replace(seed=seed, smoothing=lam), epsilon=e)
        if exp == "fixed range":
            c = c.replace(range=fl.InitialModelRange())
        h = pd.DataFrame({"round": [1, 2], "accuracy": [0.1, acc / 100], "loss": [2.0, 1.0], "diverged": [False, gone]})
        recs.append(RunRecord(config=c, history=h, provenance={}))
        exps.append(exp)
    t = records_table(recs)
    t.insert(0, "experiment", exps)
    return t


def test_epsilon_table_and_the_range_ablation_pair_runs_by_seed_and_count_diverged_runs_apart():
    t = _sweep_table([
        ("vs epsilon", "ldp_fl", 1.0, None, 0, 50.0, True), ("vs epsilon", "ldp_fl", 1.0, None, 1, 60.0, False),
        ("vs epsilon", "coq_fl", 1.0, None, 0, 70.0, False), ("vs epsilon", "coq_fl", 1.0, None, 1, 72.0, False),
        ("smoothed", "ldp_fl", 1.0, 0.3, 0, 90.0, False), ("smoothed", "ldp_fl", 1.0, 0.3, 1, 91.0, False),
        ("smoothed", "coq_fl", 1.0, 0.3, 0, 93.0, False), ("smoothed", "coq_fl", 1.0, 0.3, 1, 95.0, False),
        ("fixed range", "ldp_fl", 1.0, None, 0, 80.0, False), ("fixed range", "ldp_fl", 1.0, None, 1, 82.0, False),
    ])
    row = corbin.epsilon_table(t).iloc[0]
    assert row["LDP-FL plain (%)"] == "60.0 (1 seed), 1 of 2 diverged"           # the diverged run is not averaged
    assert row["CoQ-FL plain (%)"].startswith("71.0 [") and row["LDP-FL λ"] == "0.3"
    assert row["CoQ − LDP, tuned (points)"].startswith("+3.5 [")               # (3 + 4) / 2, paired by seed
    assert row["CoQ − LDP, plain (points)"] == "+12.0 (1 seed)"                  # seed 0's LDP-FL run diverged
    abl = corbin.range_ablation_table(t).iloc[0]
    assert abl["method"] == "LDP-FL" and abl["diverged at round"] == "2" and abl["diverged at round "] == "-"
    assert abl["fixed − adaptive (points)"] == "+22.0 (1 seed)"                 # seed 1 only: seed 0 diverged


def test_epsilon_table_says_when_every_lambda_diverged_on_validation():
    val = [("tune λ", m, 0.1, lam, 0, 10.0, True) for m in ("ldp_fl", "coq_fl") for lam in (None, 0.3)]
    t = _sweep_table(val + [("vs epsilon", "ldp_fl", 0.1, None, 0, 10.0, True)])
    t.loc[t["experiment"] == "tune λ", "validation"] = 1000
    row = corbin.epsilon_table(t).iloc[0]
    assert row["LDP-FL tuned (%)"] == row["CoQ-FL tuned (%)"] == "every λ diverged on validation"
    assert corbin.key_numbers(t)["tuned_0_1"].startswith("LDP-FL every λ diverged")
    assert corbin.key_numbers(t)["tuned_3"] == "(not run)" and corbin.key_numbers(t)["ablation"] == "(not run)"


# ---------------------------------------------------------------------------------------- the chapter's tables, figures
def test_own_report_table_is_the_two_point_law_for_every_numrand():
    t = corbin.own_report_table(epsilon=1.0, num_rands=(0, 1, 5), inputs=21, partners=5)
    assert list(t.columns) == ["NumRand", "max |marginal − two-point P|", "leader's ε", "follower's ε"]
    assert t["NumRand"].tolist() == [0, 1, 5]
    assert (t["max |marginal − two-point P|"] < 1e-12).all()
    assert t["leader's ε"].tolist() == pytest.approx([1.0] * 3) and t["follower's ε"].tolist() == pytest.approx([1.0] * 3)


def test_sampler_joint_deviation_is_small_for_the_sampler_and_large_for_a_wrong_law():
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=3)
    kw = dict(n=20_000, shared=generator(0, "t", "shared"), local=generator(0, "t", "local"))
    assert corbin.sampler_joint_deviation(mech, [-1.0, 0.2], [1.0, -0.3], **kw) < 5
    wrong = CorrelatedTwoPoint(epsilon=2.0, num_rand=3)   # samples a law other than the one it is compared with
    wrong.joint_distribution = mech.joint_distribution
    assert corbin.sampler_joint_deviation(wrong, [-1.0, 0.2], [1.0, -0.3], **kw) > 10


def test_marginal_table_rows_and_the_two_corrections():
    t = corbin.marginal_table([-1.0, 0.0, 1.0], num_rand=5)
    assert list(t.columns) == ["rule", "w = -1", "w = 0", "w = 1"] and len(t) == 4
    assert t.iloc[0, 1:].tolist() == pytest.approx(TwoPoint(epsilon=1.0).prob_plus(torch.tensor([-1.0, 0.0, 1.0],
                                                                                             dtype=torch.float64)).tolist())
    assert (t.iloc[1, 1:] < t.iloc[0, 1:]).all()                  # the draft's Algorithm 2 misses P (below it)
    assert t.iloc[3]["w = 1"] == 1.0 and t.iloc[2]["w = 1"] < 1.0   # the authors' top cell at ε = 5


def test_pair_variance_table_halves_the_worst_case_and_is_lower_in_range_at_small_epsilon():
    t = corbin.pair_variance_table([0.1, 3.0])
    a = two_point_a(3.0)
    assert t.loc[1, "independent, max (2a²)"] == pytest.approx(2 * a * a)
    assert t.loc[1, "Eq. 6, max over all means (a²)"] == pytest.approx(a * a)
    assert t.loc[1, "in range / independent"] == pytest.approx(0.5, abs=1e-6)
    assert t.loc[0, "Eq. 6, max in range"] == pytest.approx(4 * (two_point_a(0.1) - 1), rel=1e-6)  # a > 2: at the edge
    assert t.loc[0, "in range / independent"] < 0.1


def test_numrand_variance_runs_from_the_independent_pair_to_the_eq6_limit():
    t = corbin.numrand_variance(epsilon=1.0, num_rands=(0, 1, 12), p_xs=(0.5,), n=2000, seed=3)
    ind, lim = (float(t.loc[t["kind"] == k, "mean variance (r²)"].iloc[0]) for k in ("independent", "Eq. 6 limit"))
    corr = t[t["kind"] == "correlated"].set_index("NumRand")
    assert corr.loc[0, "mean variance (r²)"] == pytest.approx(ind) and corr.loc[0, "missed (%)"] == pytest.approx(100)
    assert corr.loc[12, "missed (%)"] == pytest.approx(0, abs=0.1) and lim < corr.loc[1, "mean variance (r²)"] < ind


def test_the_chapters_figures_fit_the_column_with_two_panels_per_row():
    from types import SimpleNamespace

    from ldptut.display import COLUMN_IN, FIGURE_DPI

    def check(fig, panels):
        shown = [ax for ax in fig.axes if ax.get_visible()]
        assert len(shown) == panels and fig.get_figwidth() == pytest.approx(COLUMN_IN) and fig.dpi == FIGURE_DPI
        cols = {round(ax.get_position().x0, 2) for ax in shown}
        assert len(cols) <= 2

    check(corbin.plot_pair_variance([0.5, 1.0, 2.0, 4.0]), 4)
    check(corbin.plot_pair_variance([1.0, 2.0, 4.0]), 3)
    check(corbin.plot_numrand(corbin.numrand_variance(num_rands=(0, 1), p_xs=(0.5,), n=100)), 1)
    recs = [SimpleNamespace(config=corbin.method_config(m, base=BASE, epsilon=None if m == "fedavg" else e),
                            history=pd.DataFrame({"round": [1, 2], "accuracy": [0.2, 0.3], "loss": [2.0, 1e9],
                                                  "diverged": [False, m == "ldp_fl"]}))
            for m, e in (("fedavg", None), ("ldp_fl", 0.3), ("coq_fl", 0.3), ("ldp_fl", 1.0), ("coq_fl", 1.0))]
    check(corbin.plot_rounds(recs, [0.3, 1.0]), 4)
    t = _sweep_table([("vs epsilon", "ldp_fl", 1.0, None, 0, 50.0, True), ("vs epsilon", "coq_fl", 1.0, None, 0, 70.0, False),
                      ("smoothed", "ldp_fl", 1.0, 0.3, 0, 90.0, False), ("smoothed", "coq_fl", 1.0, 0.3, 0, 93.0, False)])
    check(corbin.plot_vs_epsilon(t), 2)
    check(corbin.plot_vs_epsilon(t, servers=("plain", "tuned", "fixed")), 3)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_epsilon_tables_split_the_sweep_and_runs_sentence_reads_it():
    t = _sweep_table([("vs epsilon", "ldp_fl", 1.0, None, 0, 50.0, False), ("vs epsilon", "coq_fl", 1.0, None, 0, 70.0, False),
                      ("smoothed", "ldp_fl", 1.0, 0.3, 0, 90.0, False), ("smoothed", "coq_fl", 1.0, 0.3, 0, 93.0, False)])
    sweep = corbin.epsilon_table(t)
    plain, tuned = corbin.epsilon_tables(sweep, what="after 2 rounds", first=10)
    assert plain.headers == ("ε", "LDP-FL (%)", "CoQ-FL (%)", "CoQ − LDP (points)")
    assert plain.rows == (("1", "50.0 (1 seed)", "70.0 (1 seed)", "+20.0 (1 seed)"),)
    assert tuned.headers == ("ε", "LDP-FL (%)", "LDP-FL λ", "CoQ-FL (%)", "CoQ-FL λ", "CoQ − LDP (points)")
    assert tuned.rows == (("1", "90.0 (1 seed)", "0.3", "93.0 (1 seed)", "0.3", "+3.0 (1 seed)"),)
    assert plain.caption.startswith("Table 10.") and tuned.caption.startswith("Table 11.")
    p = {"n_train": 2000, "rounds": 2, "seeds": [0]}
    assert corbin.setting_words(p) == "2,000 training images, 2 rounds, seed 0"
    assert corbin.runs_sentence(sweep, p) == ("2,000 training images, 2 rounds, seed 0, ε = 1 per weight per round: "
                                              "LDP-FL 50.0 (1 seed), CoQ-FL 70.0 (1 seed)")
    assert corbin.runs_sentence(sweep.iloc[0:0], p) == "(not run)" and corbin.epsilon_tables(sweep.iloc[0:0], what="",
                                                                                              first=1) == []


def test_authors_side_table_puts_both_codes_side_by_side_with_the_gap():
    side = {"rows": [{"method": m, "round": r, "theirs": 60.0 + r + (m == "coq_fl"), "ours": 61.0 + r}
                     for m in ("ldp_fl", "coq_fl") for r in (1, 2)]}
    t = corbin.authors_side_table(side)
    assert list(t.columns) == ["round", "CoQ-FL, theirs (%)", "CoQ-FL, ours (%)", "CoQ-FL, ours − theirs (points)",
                               "LDP-FL, theirs (%)", "LDP-FL, ours (%)", "LDP-FL, ours − theirs (points)"]
    assert t["round"].tolist() == [1, 2] and t["CoQ-FL, ours − theirs (points)"].tolist() == [0.0, 0.0]
    assert t["LDP-FL, ours − theirs (points)"].tolist() == [1.0, 1.0]


def test_long_run_numbers_read_the_longest_test_runs():
    t = _sweep_table([("vs epsilon", "ldp_fl", 1.0, None, 0, 15.0, True), ("vs epsilon", "coq_fl", 1.0, None, 0, 25.0, True),
                      ("smoothed", "ldp_fl", 1.0, 0.2, 0, 96.1, False), ("smoothed", "coq_fl", 1.0, 0.2, 0, 97.3, False),
                      ("vs epsilon", "fedavg", None, None, 0, 98.6, False),
                      ("fixed range", "coq_fl", 1.0, None, 0, 50.0, False)])
    t["last_round"] = 2
    out = corbin.long_run_numbers(t)
    assert out["tuned"] == "CoQ-FL 97.3 % (λ = 0.2), LDP-FL 96.1 % (λ = 0.2), FedAvg 98.6 %"
    assert out["plain"] == "CoQ-FL diverged at round 2, LDP-FL diverged at round 2"
    assert out["setting"].endswith("1 seed") and corbin.long_run_numbers(t.iloc[0:0])["tuned"] == "(not stored)"


def test_key_numbers_say_the_fixed_range_runs_alone():
    t = _sweep_table([("vs epsilon", "ldp_fl", 1.0, None, 0, 50.0, True), ("fixed range", "ldp_fl", 1.0, None, 0, 80.0, False),
                      ("vs epsilon", "coq_fl", 1.0, None, 0, 70.0, False), ("fixed range", "coq_fl", 1.0, None, 0, 75.0, False)])
    assert corbin.key_numbers(t)["fixed"] == "LDP-FL 80.0 (1 seed), CoQ-FL 75.0 (1 seed)"
    assert corbin.key_numbers(t.iloc[0:0])["fixed"] == "(not run)"


# ---------------------------------------------------------------------------------------- one client at a time
def test_apart_draws_are_negatively_correlated_only_through_the_shared_seed():
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=5)
    x = torch.zeros(100_000, 4)
    ol = mech.privatize_as(x, role="leader", shared=generator(0, "pair"), own=generator(0, "a"))
    same = mech.privatize_as(x, role="follower", shared=generator(0, "pair"), own=generator(0, "b"))
    other = mech.privatize_as(x, role="follower", shared=generator(1, "pair"), own=generator(0, "b"))
    # at x = 0 the exact covariance is negative; a follower with another pair's seed is independent of the leader
    cov = float(mech.covariance(torch.zeros(1), torch.zeros(1)))
    emp = lambda a, b: float(((a - a.mean()) * (b - b.mean())).mean())
    assert cov < -0.5 and abs(emp(ol, same) - cov) < 0.05 and abs(emp(ol, other)) < 0.05


def test_the_odd_client_is_the_plain_two_point_mechanism_and_bad_roles_raise():
    mech = CorrelatedTwoPoint(epsilon=1.0, num_rand=5)
    x = XL.repeat(1000, 1)
    alone = mech.privatize_as(x, role="alone", shared=None, own=generator(0, "own"))
    assert torch.equal(alone, TwoPoint(epsilon=1.0).privatize(x, generator=generator(0, "own")))
    with pytest.raises(ValueError, match="role"):
        mech.privatize_as(x, role="partner", shared=generator(0), own=generator(1))


def test_apart_draws_are_seeded_and_keep_float64():
    mech = CorrelatedTwoPoint(epsilon=2.0, radius=0.5, num_rand=4, p_x=0.4)
    x = torch.zeros(3, 5, dtype=torch.float64)
    a = mech.privatize_as(x, role="leader", shared=generator(0), own=generator(1))
    b = mech.privatize_as(x, role="leader", shared=generator(0), own=generator(1))
    assert a.dtype == torch.float64 and torch.equal(a, b)
