"""The book's server rules as a Flower strategy: any :mod:`ldptut.fl` aggregator in place of FedAvg's weighted mean."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from flwr.common import Parameters, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg

from .._validate import integer, one_of
from ..fl.aggregators import make_aggregator
from ..fl.checks import checked_aggregate
from ..fl.context import RoundContext
from ..rng import round_generator
from .mod import SENDS, _arrays, _flatten, _layout

#: The fit metric :class:`~ldptut.flower.PrivatizerMod` writes each client's id to (what the rules index by).
CLIENT_ID = "client_id"


class ServerRule(FedAvg):
    """FedAvg whose aggregation is one of the book's server rules (:mod:`ldptut.fl.aggregators`): CoQ-FL's
    smoothing (``SmoothedMean``), Wu et al.'s weighted mean (``WeightedBySigma``) and probability-based selection
    (``ProbabilitySelection``), the majority vote (``SignOf``), or any callable ``(payloads, context=...) ->
    (vector, metrics)``, applied as :func:`ldptut.fl.simulate` applies it: the clients' vectors stacked by client id,
    the global model of the round, the server's stream ``round_generator(seed, round, "server")``. With
    ``send="updates"`` the clients' vectors are their updates and the new model is the old one plus the rule's output.

    Each client's id is read from its fit metrics (``"client_id"``, which :class:`~ldptut.flower.PrivatizerMod`
    writes); every other FedAvg option (fractions, minimum clients, ``on_fit_config_fn``, evaluation) is FedAvg's."""

    def __init__(self, rule: Any, *, seed: int, send: str = "weights", **fedavg: Any):
        super().__init__(**fedavg)
        self.rule = make_aggregator(rule)
        self.seed = integer(seed, "seed", minimum=0)
        self.send = one_of(send, "send", SENDS)
        self._current: Optional[list[np.ndarray]] = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list:
        self._current = parameters_to_ndarrays(parameters)   # the global model this round's clients receive
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple[Optional[Parameters], dict]:
        if not results or (failures and not self.accept_failures):
            return None, {}
        if self._current is None:
            raise ValueError("ServerRule.aggregate_fit needs the round's global model: configure_fit was not called")
        rows = []
        for _, res in results:
            if CLIENT_ID not in res.metrics:
                raise ValueError(f"a fit result has no {CLIENT_ID!r} metric: put ldptut.flower.PrivatizerMod on the "
                                 "clients (it writes the client's id)")
            rows.append((int(res.metrics[CLIENT_ID]), _flatten(parameters_to_ndarrays(res.parameters)),
                         float(res.num_examples)))
        rows.sort(key=lambda r: r[0])
        glob = _flatten(self._current)
        payloads = torch.stack([v for _, v, _ in rows])
        if self.send == "updates":
            payloads = payloads - glob
        layout = _layout(self._current)
        ctx = RoundContext(round=server_round, client_ids=torch.tensor([c for c, _, _ in rows]), layout=layout,
                           global_vector=glob, generators=[], send=self.send,
                           num_samples=torch.tensor([n for _, _, n in rows]),
                           server_generator=round_generator(self.seed, server_round, "server"), seed=self.seed)
        vec, metrics = checked_aggregate(self.rule, payloads, ctx)
        if self.send == "updates":
            vec = glob + vec
        arrays = _arrays(vec, layout)
        out = {k: v for k, v in metrics.items() if isinstance(v, (bool, int, float, str, bytes))}
        if self.fit_metrics_aggregation_fn is not None:
            out.update(self.fit_metrics_aggregation_fn([(res.num_examples, res.metrics) for _, res in results]))
        return ndarrays_to_parameters(arrays), out

    def __repr__(self) -> str:
        return f"ServerRule({self.rule!r}, seed={self.seed}, send={self.send!r})"
