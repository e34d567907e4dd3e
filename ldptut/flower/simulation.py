"""One run of the book's round engine as a Flower federation: Flower's simulation engine (Ray), each client its own
ClientApp, the privatizer as a client Mod and the server rule as a strategy, beside :func:`ldptut.fl.simulate`."""
from __future__ import annotations

import copy
import logging
import math
import os
import sys
import time
import warnings
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
import torch
from flwr.client import ClientApp, NumPyClient
from flwr.common import ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.simulation import run_simulation
from torch import nn

from ..fl.engine import evaluate
from ..fl.layout import ParamLayout, load_vector
from ..fl.spec import FLConfig, FLResult, Run
from ..rng import derive_seed
from .mod import PrivatizerMod, _arrays, _flatten, fit_config
from .pairing import PairedRule
from .strategy import CLIENT_ID, ServerRule


class _Client(NumPyClient):
    """A client that trains as the engine's trainer trains it (its batches from its own "batches" stream of the
    round): the run's trainer session over this client alone. Its fit metrics carry its id (what the server rules
    order the clients by), with or without :class:`~ldptut.flower.PrivatizerMod`."""

    def __init__(self, cid: int, config: FLConfig, run: Run, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                 threads: Optional[int]):
        if threads is not None:
            torch.set_num_threads(threads)
        self.cid, self.run, self.layout = cid, run, ParamLayout.from_model(model)
        self.session = config.trainer.start(model=model, layout=self.layout, runs=[run], x_train=x, y_train=y)

    def fit(self, parameters: list[np.ndarray], config: dict) -> tuple[list[np.ndarray], int, dict]:
        glob = _flatten(parameters)
        # NumPy's global generator, seeded from this client's stream of the round: a Mod that draws from it (Flower's
        # LocalDpMod) is then reproducible too
        np.random.seed(derive_seed(self.run.seed, "round", int(config["server_round"]), "client", self.cid,
                                   "numpy-global") % 2 ** 32)
        trained = self.session.train(round=int(config["server_round"]), global_vectors=glob[None],
                                     client_ids=[torch.tensor([self.cid])])[0][0]
        return _arrays(trained.detach(), self.layout), len(self.run.partition[self.cid]), {CLIENT_ID: self.cid}


def _max_metric(key: str):
    def agg(metrics: list[tuple[int, dict]]) -> dict:
        vals = [float(m[key]) for _, m in metrics if key in m]
        return {key: max(vals)} if vals else {}
    return agg


def simulate(config: FLConfig, run: Run, *, model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor,
             x_test: torch.Tensor, y_test: torch.Tensor, mods: Optional[Sequence[Any]] = None,
             num_cpus: int = 2, threads_per_client: Optional[int] = 1, verbose: bool = False) -> FLResult:
    """``run`` under ``config`` as a Flower federation (Flower's simulation engine on Ray, one ClientApp per client):
    the counterpart of ``ldptut.fl.simulate(config, [run], ...)`` with the same streams.

    Each client trains with ``config.trainer`` on its partition (the engine's batches), the privatizer runs in the
    client's :class:`~ldptut.flower.PrivatizerMod` (or in ``mods``, e.g. Flower's own ``LocalDpMod``, instead), the
    server aggregates with ``run.aggregator`` as a :class:`~ldptut.flower.ServerRule` (:class:`PairedRule` for a
    privatizer of correlated pairs) and evaluates the global model on the test set after every round, as the engine.
    Every client takes part in every round (``config.client_fraction`` must be 1: Flower samples clients with Python's
    unseeded ``random``). Ray gets ``num_cpus`` CPUs, one per client at a time, each client ``threads_per_client``
    torch threads.

    Returns an :class:`~ldptut.fl.FLResult`: per round the test accuracy and loss, ``seconds`` (wall time since the
    previous evaluation: the clients' training and privatizing, the messages and the aggregation), ``epsilon_round``
    (the largest ε per model per round a client's Mod reported) and ``epsilon_total`` (their sum over the rounds, the
    sequential composition of pure guarantees; NaN once a round reports δ > 0); ``guarantees`` is empty (the engine's
    accountant is :func:`ldptut.fl.simulate`'s)."""
    if config.client_fraction != 1.0:
        raise ValueError(f"client_fraction must be 1 in a Flower simulation here (Flower samples clients with Python's "
                         f"unseeded random), got {config.client_fraction!r}")
    if any(b.numel() for b in model.buffers()):
        raise ValueError("the model has buffers (e.g. BatchNorm running statistics), which the Flower client does not "
                         "send; use a model without buffers (GroupNorm)")
    if str(config.device) != "cpu":
        raise ValueError(f"device must be 'cpu' in the Flower simulation (Ray actors on the CPU), got {config.device!r}")
    n = len(run.partition)
    layout = ParamLayout.from_model(model)
    init = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    if run.initial is not None:
        init = run.initial.to(init.dtype)
    if mods is None:
        mods = [] if run.privatizer is None else [PrivatizerMod(run.privatizer, seed=run.seed, send=config.send)]
    paired = hasattr(run.privatizer, "privatize_client") and any(isinstance(m, PrivatizerMod) for m in mods)
    rows: list[dict] = []
    spent: list[dict] = []
    eval_model = copy.deepcopy(model)
    clock = [time.perf_counter()]

    def evaluate_fn(server_round: int, parameters: list[np.ndarray], cfg: dict) -> tuple[float, dict]:
        vec = _flatten(parameters)
        acc, loss = evaluate(load_vector(eval_model, layout, vec), x_test, y_test, batch_size=config.eval_batch_size)
        now = time.perf_counter()
        if server_round > 0:
            rows.append({"round": server_round, "accuracy": acc, "loss": loss, "clients": n,
                         "seconds": now - clock[0], "_weights": vec})
        clock[0] = now
        return loss, {"accuracy": acc}

    def fit_metrics(metrics: list[tuple[int, dict]]) -> dict:
        out = _max_metric("epsilon_round")(metrics)
        out.update(_max_metric("delta_round")(metrics))
        spent.append(out)   # once per round (ServerRule.aggregate_fit)
        return out

    def server_fn(ctx: Any) -> ServerAppComponents:
        rule_cls = PairedRule if paired else ServerRule
        strategy = rule_cls(run.aggregator, seed=run.seed, send=config.send, fraction_fit=1.0, fraction_evaluate=0.0,
                            min_fit_clients=n, min_evaluate_clients=0, min_available_clients=n,
                            initial_parameters=ndarrays_to_parameters(_arrays(init, layout)),
                            on_fit_config_fn=fit_config, evaluate_fn=evaluate_fn,
                            fit_metrics_aggregation_fn=fit_metrics)
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=config.rounds))

    def client_fn(ctx: Any) -> Any:
        if not verbose:   # in the Ray worker: Flower's Mods (LocalDpMod) log every call at INFO
            logging.getLogger("flwr").setLevel(logging.WARNING)
        cid = int(ctx.node_config["partition-id"])
        return _Client(cid, config, run, model, x_train, y_train, threads_per_client).to_client()

    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    # Ray and Flower set variables in this process's environment for their workers and leave them set (PYTHONPATH to
    # this interpreter's sys.path, RAY_CLIENT_MODE, PYTHONBREAKPOINT, ...): a later subprocess would import from that
    # PYTHONPATH (pip then took an editable install for the wheel it was asked to install). The environment and
    # sys.path are restored after the run
    environ, path = dict(os.environ), list(sys.path)
    if not verbose:   # Flower logs every round at INFO and warns that run_simulation is deprecated (for `flwr run`)
        flwr_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():   # Ray's notice about a future default for accelerator env vars (CPU only)
            warnings.filterwarnings("ignore", category=FutureWarning, module="ray")
            run_simulation(server_app=ServerApp(server_fn=server_fn),
                           client_app=ClientApp(client_fn=client_fn, mods=list(mods)), num_supernodes=n,
                           backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                           "init_args": {"num_cpus": int(num_cpus)}},
                           verbose_logging=verbose)
    finally:
        flwr_logger.setLevel(level)
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
    if not len(rows) == len(spent) == config.rounds:
        raise RuntimeError(f"the Flower simulation finished {len(rows)} of {config.rounds} rounds and aggregated "
                           f"{len(spent)} (run with verbose=True to see Flower's log)")
    weights = rows[-1]["_weights"]
    total = 0.0
    for row, eps in zip(rows, spent):
        row.pop("_weights")
        if "epsilon_round" in eps:
            pure = eps.get("delta_round", 0.0) == 0.0
            total = total + eps["epsilon_round"] if pure else math.nan
            row.update(epsilon_round=eps["epsilon_round"], epsilon_total=total)
    hist = pd.DataFrame(rows)
    hist.insert(0, "run", 0)
    return FLResult(history=hist, weights=weights[None], layout=layout, model=load_vector(copy.deepcopy(model), layout, weights),
                    guarantees=[])
