"""The Foundations chapter's parameters (``book/foundations.ipynb``): the chapter re-runs no paper, so it has no
module under :mod:`ldptut.papers`; its mechanisms, audits and plots live in the generic modules it imports."""
from __future__ import annotations

from .params import ChapterParams, P, chapter_params, param

__all__ = ["Params"]


@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (its parameters cell: the same names, defaults and order), each with its check."""

    seed: int = param(P.nonneg_int, 0)
    dataset: str = param(P.choice("mnist", "fashion_mnist", "cifar10"), "mnist")
    model_name: str = param(P.choice("mlp", "logreg", "cnn2"), "mlp")
    n_clients: int = param(P.pos_int, 100)
    rounds: int = param(P.pos_int, 5)
    client_fraction: float = param(P.fraction, 1.0)
    local_epochs: int = param(P.pos_int, 1)
    batch_size: int = param(P.pos_int, 32)
    lr: float = param(P.pos_float, 0.05)
    epsilons: list[float] = param(P.list_of(P.pos_float, nonempty=True), [0.5, 1.0, 2.0, 5.0])
    range_center: float = param(P.real, 0.0)
    range_radius: float = param(P.pos_float, 0.075)
    n_mc: int = param(P.pos_int, 200_000)
    fp_epsilon: float = param(P.pos_float, 1.0)
    device: str = param(P.device, "auto")
