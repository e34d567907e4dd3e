"""The book's mechanisms in a Flower federation (optional extra ``flower``: ``pip install -e '.[flower]'``).

:class:`PrivatizerMod` is a Flower client Mod that applies any of the book's privatizers (a mechanism with its range
rule, or central DP-FedAvg's clipping) to a client's fit result, with that client's own random stream, and records the
ε it spent, with its unit, in the fit metrics; :class:`ServerRule` is a FedAvg strategy whose aggregation is one of the
book's server rules (CoQ-FL's smoothing, Wu et al.'s weighted mean and selection, the majority vote); :class:`PairedRule` also pairs the round's clients for CoQ-FL's correlated reports and sends
each pair a seed. The base install does not need Flower: importing this package without
it raises an ``ImportError`` that says how to install it.
"""
from __future__ import annotations

try:
    import flwr  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("ldptut.flower needs Flower: pip install -e '.[flower]' (the optional extra 'flower')") from e

from .mod import PrivatizerMod, fit_config
from .strategy import ServerRule
from .pairing import PairedRule, assign_pairs
from .simulation import simulate

__all__ = ["PrivatizerMod", "fit_config", "ServerRule", "PairedRule", "assign_pairs", "simulate"]
