"""What :func:`~ldptut.fl.simulate` is given and returns: a :class:`Run` (one run's seed, partition, privatizer and
server rule), the :class:`FLConfig` the runs of one call share, and the :class:`FLResult`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pandas as pd
import torch
from torch import nn

from .._validate import boolean, fraction, one_of, pos_int, real
from ..accounting import Guarantee
from ..training import LocalSGD, Trainer
from .layout import ParamLayout
from .context import Aggregator, Privatizer


@dataclass
class Run:
    """One run of a batch trained by :func:`simulate`: what differs between runs trained together.

    ``partition``: one index tensor into ``x_train`` per client. ``initial``: the starting global vector
    (default: the model's weights). ``info``: labels copied into every history row of the run.
    """

    seed: int
    partition: Sequence[torch.Tensor]
    privatizer: Optional[Privatizer] = None
    aggregator: str | Aggregator = "weighted_mean"
    initial: Optional[torch.Tensor] = None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FLConfig:
    """The round loop's settings (shared by every run of a batch).

    ``train_eval``: also record training accuracy each round (papers such as LDP-FL plot it): ``train_accuracy`` /
    ``train_loss``, the new global model on the whole training set (``x_train``), and ``client_train_accuracy``, the
    round's clients' local models (after local training, before any perturbation) each on its own data, averaged
    with weights the clients' sample counts; after every ``train_eval_every``-th round and the last (NaN in the
    other rounds: on the whole training set this evaluation can cost as much as a round of local training).

    ``divergence_factor``: a run diverges when its test loss has risen three rounds in a row to more than
    this factor times its smallest value so far (``None``: never), when it exceeds :data:`HUGE_LOSS` times the loss
    of a uniform prediction, or when the loss or the weights stop being finite. ``on_divergence``: "raise" (``FloatingPointError`` naming the round) or "stop": the run's
    history ends with the diverging round, marked ``diverged`` (accuracy NaN when its weights were no
    longer finite), and the other runs of the batch go on. A diverged run is a result (e.g. a noise
    feedback the method cannot absorb), not only an error.
    """

    rounds: int
    trainer: Trainer = LocalSGD()
    client_fraction: float = 1.0
    send: str = "weights"
    device: str | torch.device = "cpu"
    eval_batch_size: int = 4096
    divergence_factor: Optional[float] = 1e3
    on_divergence: str = "raise"
    progress: bool = True
    desc: str = "FL rounds"
    train_eval: bool = False
    train_eval_every: int = 1

    def __post_init__(self) -> None:
        pos_int(self.rounds, "rounds")
        boolean(self.train_eval, "train_eval")
        pos_int(self.train_eval_every, "train_eval_every")
        fraction(self.client_fraction, "client_fraction")
        one_of(self.send, "send", ("weights", "updates"))
        pos_int(self.eval_batch_size, "eval_batch_size")
        one_of(self.on_divergence, "on_divergence", ("raise", "stop"))
        if self.divergence_factor is not None and real(self.divergence_factor, "divergence_factor") <= 1:
            raise ValueError(f"divergence_factor must be > 1 or None, got {self.divergence_factor}")

    def train_eval_at(self, round: int) -> bool:
        """Whether training accuracy is recorded after ``round``: every ``train_eval_every`` rounds and the last."""
        return self.train_eval and (round % self.train_eval_every == 0 or round == self.rounds)


@dataclass
class FLResult:
    """History (one row per run and round: accuracy in [0, 1], loss, clients, seconds, ε spent) and the
    final global models (``weights``: (runs, d)). ``model``: the final global model of the first run.
    ``guarantees``: per run, the total guarantee of the client that spent the most (None: no privatizer
    or one that states none)."""

    history: pd.DataFrame
    weights: torch.Tensor
    layout: ParamLayout
    model: nn.Module
    guarantees: list[Optional[Guarantee]] = field(default_factory=list)

    @property
    def final_accuracy(self) -> float:
        return float(self.history["accuracy"].iloc[-1])
