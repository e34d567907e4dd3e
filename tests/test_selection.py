"""FedSel's private dimension selection (ldptut.selection): samplers against the exact output distributions,
exact privacy losses (EXP and PS are eps1; PE is not), checked by brute-force enumeration."""
import itertools
import math

import pytest
import torch

from ldptut.rng import generator
from ldptut.selection import (EMPTY, ExponentialSelection, PerturbedEncoding, PerturbedSampling, ranks,
                              top_k_status)

V = torch.tensor([[0.1, -3.0, 0.5, 2.0, -0.7], [1.0, 1.0, 0.0, -0.2, 4.0]])


def test_ranks_and_top_k_break_ties_by_index():
    assert ranks(V).tolist() == [[1, 5, 2, 4, 3], [3, 4, 1, 2, 5]]
    assert top_k_status(V, 2).tolist() == [[False, True, False, True, False], [False, True, False, False, True]]


@pytest.mark.parametrize("mech", [ExponentialSelection(epsilon=1.5), PerturbedEncoding(epsilon=1.5, k=2),
                                  PerturbedSampling(epsilon=1.5, k=2)], ids=["EXP", "PE", "PS"])
def test_sampler_matches_the_exact_distribution(mech):
    """Every output's frequency over 100,000 draws per row within 5 standard errors of its exact probability."""
    n = 100_000
    probs = mech.output_distribution(V)
    assert torch.allclose(probs.sum(-1), torch.ones(2, dtype=torch.float64))
    out = mech.select(V.repeat_interleave(n, 0), generator(0, "select")).view(2, n)
    width = probs.shape[-1]
    idx = torch.where(out == EMPTY, torch.full_like(out, width - 1), out)  # PE: EMPTY is the last column
    freq = torch.nn.functional.one_hot(idx, width).double().mean(1)
    se = torch.sqrt(probs * (1 - probs) / n).clamp(min=1 / n)
    assert bool(((freq - probs).abs() <= 5 * se).all()), (freq, probs)


def test_exp_and_ps_are_exactly_eps1_by_enumeration():
    """Over every ranking of d = 4 (EXP) and every top-2 set (PS): the largest log ratio is eps1."""
    eps, d = 1.0, 4
    exp, ps = ExponentialSelection(epsilon=eps), PerturbedSampling(epsilon=eps, k=2)
    perms = torch.tensor(list(itertools.permutations(range(1, d + 1))), dtype=torch.float32)
    for mech in (exp, ps):
        p = mech.output_distribution(perms)  # |v| = the ranks themselves: every status occurs
        loss = (p.log().max(0).values - p.log().min(0).values).max().item()
        assert loss == pytest.approx(eps, abs=1e-12) and mech.privacy_loss(d) == pytest.approx(eps, abs=1e-12)


def test_pe_exceeds_eps1_and_its_exact_law_matches_enumerating_every_flip():
    """PE at d = 4, k = 1, eps1 = 1: summing over all 2^4 flip patterns gives P[j | v]; its privacy loss is
    about 1.27 eps1, not the eps1 of Lemma 2 (the proof divides by E|S|, not |S|)."""
    eps, d, k = 1.0, 4, 1
    pe = PerturbedEncoding(epsilon=eps, k=k)
    v = torch.tensor([[0.0, 0.0, 0.0, 1.0]])  # top-1 = index 3
    z = top_k_status(v, k)[0].tolist()
    brute = [0.0] * (d + 1)
    for flips in itertools.product([0, 1], repeat=d):
        prob = math.prod(1 - pe.p if f else pe.p for f in flips)
        s = [j for j in range(d) if z[j] != bool(flips[j])]
        if not s:
            brute[d] += prob
        for j in s:
            brute[j] += prob / len(s)
    exact = pe.output_distribution(v)[0]
    assert torch.allclose(exact, torch.tensor(brute, dtype=torch.float64), atol=1e-15)
    loss = pe.privacy_loss(d)
    assert loss == pytest.approx(math.log(brute[3] / brute[0]), abs=1e-12)
    assert 1.2 * eps < loss < 1.27 * eps
    assert pe.privacy_loss(100) < loss and PerturbedEncoding(epsilon=eps, k=10).privacy_loss(100) > eps


def test_same_generator_same_selection_and_other_seeds_differ():
    mech = PerturbedSampling(epsilon=1.0, k=2)
    vv = V.repeat(500, 1)
    a, b, c = (mech.select(vv, generator(s, "sel")) for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf"), "1", None])
def test_bad_epsilon_is_rejected(eps):
    for make in (lambda: ExponentialSelection(epsilon=eps), lambda: PerturbedEncoding(epsilon=eps, k=1),
                 lambda: PerturbedSampling(epsilon=eps, k=1)):
        with pytest.raises((ValueError, TypeError), match="epsilon"):
            make()


def test_bad_k_or_v_is_rejected():
    with pytest.raises(ValueError, match="k"):
        PerturbedSampling(epsilon=1.0, k=0)
    with pytest.raises(ValueError, match="1 <= k < d"):
        PerturbedEncoding(epsilon=1.0, k=5).select(V)
    with pytest.raises(TypeError, match="floating-point"):
        ExponentialSelection(epsilon=1.0).select(torch.tensor([[1, 2, 3]]))


def test_top_k_status_without_a_sort_equals_the_ranks_rule_on_ties():
    """top_k_status (topk threshold, ties counted from the right) is exactly ranks(v) > d - k, also when many
    |v_j| are equal (one-hot features give such gradients)."""
    g = torch.Generator().manual_seed(5)
    for d, k in [(5, 1), (8, 3), (20, 2), (50, 10)]:
        v = torch.randint(-3, 4, (400, d), generator=g).double()   # few distinct values: ties everywhere
        assert torch.equal(top_k_status(v, k), ranks(v) > d - k)
        assert bool((top_k_status(v, k).sum(-1) == k).all())


@pytest.mark.parametrize("make", [lambda: ExponentialSelection(epsilon=1.5), lambda: PerturbedSampling(epsilon=1.5, k=3)])
def test_select_rows_is_select_row_by_row(make):
    """select_rows(v, generators): row i's index is what select(v[i], generators[i]) draws, bit for bit, whatever the
    other rows; a generator per row is required."""
    from ldptut.rng import client_generator

    sel = make()
    v = torch.randn(300, 12, generator=torch.Generator().manual_seed(4))
    rows = sel.select_rows(v, [client_generator(0, 1, i, "s") for i in range(300)])
    one_by_one = torch.cat([sel.select(v[i:i + 1], client_generator(0, 1, i, "s")) for i in range(300)])
    assert torch.equal(rows, one_by_one)
    assert torch.equal(sel.select_rows(v[7:9], [client_generator(0, 1, i, "s") for i in (7, 8)]), rows[7:9])
    with pytest.raises(ValueError, match="one generator per row"):
        sel.select_rows(v, [client_generator(0, 1, 0, "s")])
