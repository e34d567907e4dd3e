"""One privacy scale for every mechanism: a per-weight-per-round guarantee, what it composes to for a client's whole
model in one round and over the training, and the tighter bounds where they apply.

The papers state ε in different units (per weight per round: LDP-FL, CoQ-FL, PD-LDPFL; per user over the training:
FedSel; per client per coordinate: Wu et al.). To compare mechanisms at equal privacy, every guarantee is carried to
the same three levels (:func:`privacy_scales`):

* **per weight per round**: the mechanism's own guarantee (:class:`~ldptut.accounting.Guarantee`);
* **per model per round**: over the d coordinates a client reports in a round, by basic composition (k ε, k δ; Dwork
  and Roth 2014, Thm. 3.16), or exactly for a Gaussian (μ √k-GDP; Dong, Roth, Su 2022);
* **per model over training**: over d coordinates and T rounds (k = d T releases), by basic composition, and by the
  advanced composition theorem (Dwork, Rothblum, Vadhan 2010; Dwork and Roth 2014, Thm. 3.20) at a slack δ' where
  that is smaller: ε' = √(2 k ln(1/δ')) ε + k ε (e^ε - 1), δ_total = k δ + δ'.

A mechanism that releases a whole model at once (FedSel's one coordinate, stated per model per round) enters at the
second level. Shuffling (Feldman, McMillan, Talwar 2021) amplifies the per-weight guarantee only when each coordinate's
reports are unlinkable; :func:`privacy_scales` reports it beside, never instead of, the local guarantee.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

from ._validate import delta as _delta, epsilon as _epsilon, pos_int
from .accounting import Guarantee, shuffle_amplification

__all__ = ["advanced_composition", "privacy_scales", "scales_table"]


def advanced_composition(epsilon: float, k: int, delta_slack: float) -> float:
    """ε' of k ε-DP releases at slack δ' (Dwork, Rothblum, Vadhan 2010; Dwork and Roth 2014, Thm. 3.20):
    √(2 k ln(1/δ')) ε + k ε (e^ε - 1); the k releases are (ε', k δ + δ')-DP."""
    e, k, dl = _epsilon(epsilon), pos_int(k, "k"), _delta(delta_slack, "delta_slack")
    if e > 700.0:  # e^ε overflows float64; the bound is then far above basic composition's k ε anyway
        return math.inf
    return math.sqrt(2.0 * k * math.log(1.0 / dl)) * e + k * e * math.expm1(e)


def privacy_scales(guarantee: Guarantee, *, d: int, rounds: int, delta_slack: float = 1e-5,
                   clients: Optional[int] = None) -> dict:
    """``guarantee`` (per coordinate per round, or per model per round when its unit says so) at the three levels.

    Keys: ``per_weight_round`` (ε, or None for a per-model guarantee), ``per_model_round``, ``over_training_basic``
    (each an ε; ``*_delta`` the δ beside it), ``over_training_advanced`` (advanced composition at ``delta_slack``, pure
    guarantees only; None for a Gaussian, whose basic column is already exact), ``over_training`` (the smaller of the
    two, with its δ and how it was obtained), and ``shuffled_per_weight_round`` (Feldman et al.'s bound for ``clients``
    reports of one coordinate, when given and where it applies; None otherwise)."""
    d, rounds = pos_int(d, "d"), pos_int(rounds, "rounds")
    whole = guarantee.unit.whole_model
    per_model = guarantee if whole else guarantee.compose(d=d)
    total = per_model.compose(rounds=rounds)
    out = {"per_weight_round": None if whole else guarantee.epsilon,
           "per_weight_round_delta": None if whole else guarantee.delta,
           "per_model_round": per_model.epsilon, "per_model_round_delta": per_model.delta,
           "over_training_basic": total.epsilon, "over_training_basic_delta": total.delta,
           "over_training_advanced": None, "over_training_advanced_delta": None}
    best, best_delta, how = total.epsilon, total.delta, "exact μ-GDP" if guarantee.mu is not None else "basic"
    if guarantee.mu is None and guarantee.epsilon > 0:
        k = rounds if whole else d * rounds
        adv = advanced_composition(guarantee.epsilon, k, delta_slack)
        adv_delta = min(1.0, k * guarantee.delta + delta_slack)
        out.update(over_training_advanced=adv, over_training_advanced_delta=adv_delta)
        if adv < best:
            best, best_delta, how = adv, adv_delta, "advanced"
    out.update(over_training=best, over_training_delta=best_delta, over_training_how=how)
    shuffled = None
    if clients is not None and not whole and guarantee.delta == 0:
        try:
            shuffled = shuffle_amplification(guarantee.epsilon, clients, delta_slack)
        except ValueError:
            shuffled = None  # the bound's condition on ε0 and n fails: no amplification claimed
    out["shuffled_per_weight_round"] = shuffled
    return out


def scales_table(guarantees: Mapping[str, Guarantee], *, d: int, rounds: int, delta_slack: float = 1e-5,
                 clients: Optional[int] = None):
    """:func:`privacy_scales` of each named guarantee, one row per mechanism (a ``pandas.DataFrame``)."""
    import pandas as pd

    rows = {name: privacy_scales(g, d=d, rounds=rounds, delta_slack=delta_slack, clients=clients)
            for name, g in guarantees.items()}
    return pd.DataFrame.from_dict(rows, orient="index")
