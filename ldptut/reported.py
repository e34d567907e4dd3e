"""Numbers the papers report, with where they come from, for "paper vs ours" tables.

These are the papers' published figures (test accuracy in %), never our results; every chapter prints
them next to numbers computed by code that ran.
"""
from __future__ import annotations

__all__ = ["LDP_FL_HEADLINE", "LDP_FL_TABLE1"]

#: LDP-FL (Sun, Qian, Chen, IJCAI 2021), Section 5 text: accuracy (%) at the stated setting.
#: eps is per weight per round; n = number of clients.
LDP_FL_HEADLINE = [
    {"dataset": "mnist", "epsilon": 1.0, "n_clients": 100, "range": "fixed (0, 0.075)", "accuracy": 96.24},
    {"dataset": "fashion_mnist", "epsilon": 4.0, "n_clients": 200, "range": "fixed (0, 0.015)", "accuracy": 86.26},
    {"dataset": "cifar10", "epsilon": 10.0, "n_clients": 500, "range": "adaptive", "accuracy": 61.46},
]

#: LDP-FL Table 1: fixed vs adaptive range, accuracy (%), eps per weight per round.
LDP_FL_TABLE1 = [
    {"dataset": "mnist", "epsilon": 5.0, "fixed": 96.34, "adaptive": 96.06},
    {"dataset": "mnist", "epsilon": 10.0, "fixed": 96.39, "adaptive": 96.11},
    {"dataset": "fashion_mnist", "epsilon": 5.0, "fixed": 85.95, "adaptive": 87.54},
    {"dataset": "fashion_mnist", "epsilon": 10.0, "fixed": 86.10, "adaptive": 87.57},
    {"dataset": "cifar10", "epsilon": 5.0, "fixed": 13.54, "adaptive": 58.89},
    {"dataset": "cifar10", "epsilon": 10.0, "fixed": 14.28, "adaptive": 60.37},
]
