"""A Flower client Mod that runs one of the book's privatizers on a client's fit result."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from flwr.app import Context, Message, MessageType
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

from .._validate import integer, one_of
from ..fl.checks import _privatize
from ..fl.context import RoundContext
from ..fl.layout import ParamLayout
from ..rng import client_generator

#: What a client sends: its trained weights, or its update (trained minus the global model it received).
SENDS = ("weights", "updates")


def fit_config(server_round: int) -> dict[str, int]:
    """A strategy's ``on_fit_config_fn`` that tells each client the round (what :class:`PrivatizerMod` keys the
    client's random stream and its ε accounting with): ``{"server_round": server_round}``."""
    return {"server_round": int(server_round)}


def _layout(arrays: list[np.ndarray]) -> ParamLayout:
    shapes, slices, start = [], [], 0
    for a in arrays:
        shapes.append(torch.Size(a.shape))
        slices.append(slice(start, start + a.size))
        start += a.size
    return ParamLayout(tuple(f"param{i}" for i in range(len(arrays))), tuple(shapes), tuple(slices))


def _flatten(arrays: list[np.ndarray]) -> torch.Tensor:
    return torch.cat([torch.as_tensor(np.array(a, dtype=np.float32, copy=True)).reshape(-1) for a in arrays])


class PrivatizerMod:
    """Flower client Mod: the client's fit result goes through ``privatizer`` (any of the book's privatizers, e.g.
    :class:`ldptut.fl.LocalPerturbation` with a range rule), exactly as :func:`ldptut.fl.simulate` applies it to one
    sampled client: the same :class:`~ldptut.fl.RoundContext` (the round, the client's id, the global model received,
    the layout of its parameter arrays) and the same random stream, ``client_generator(seed, round, client,
    "privatize")``. ``send="updates"`` privatizes the update (trained minus received) and sends received + the
    privatized update, as the engine does.

    The round comes from the fit config's ``server_round`` (:func:`fit_config` as the strategy's
    ``on_fit_config_fn``), the client's id from the node config's ``client_key`` (Flower's simulation sets
    ``"partition-id"``). The fit metrics gain ``epsilon_per_coordinate`` (the privatizer's stated guarantee per
    coordinate per round, when it states one), ``epsilon_round`` (that guarantee composed over the d coordinates: ε per
    model per round), ``epsilon_unit`` and ``client_id`` (what :class:`~ldptut.flower.ServerRule` orders the clients
    by).

    Parameters are float32 on the CPU, as Flower's NumPy arrays are; a privatizer's output is checked as the engine
    checks it (shape, dtype, finite)."""

    def __init__(self, privatizer: Any, *, seed: int, send: str = "weights", client_key: str = "partition-id"):
        if not callable(privatizer):
            raise ValueError(f"privatizer must be callable (payloads, context=...) -> payloads, got {privatizer!r}")
        self.privatizer = privatizer
        self.seed = integer(seed, "seed", minimum=0)
        self.send = one_of(send, "send", SENDS)
        self.client_key = str(client_key)

    def context(self, *, round: int, client: int, received: list[np.ndarray], num_examples: int) -> RoundContext:
        """The round context the engine would give this client (public values and its random stream)."""
        glob = _flatten(received)
        return RoundContext(round=round, client_ids=torch.tensor([client]), layout=_layout(received),
                            global_vector=glob, generators=[client_generator(self.seed, round, client, "privatize")],
                            send=self.send, num_samples=torch.tensor([float(num_examples)]), seed=self.seed)

    def privatize(self, trained: list[np.ndarray], received: list[np.ndarray], *, round: int, client: int,
                  num_examples: int) -> tuple[list[np.ndarray], dict[str, Any]]:
        """The arrays the client sends instead of ``trained`` and the metrics it adds (the Mod without Flower's
        messages: what the tests compare with the engine)."""
        if [a.shape for a in trained] != [a.shape for a in received]:
            raise ValueError("the fit result's arrays must have the shapes of the parameters the client received")
        ctx = self.context(round=round, client=client, received=received, num_examples=num_examples)
        vec = _flatten(trained)
        payload = vec - ctx.global_vector if self.send == "updates" else vec
        if not bool(torch.isfinite(payload).all()):
            raise FloatingPointError(f"client {client}, round {round}: the fit result is not finite; nothing to "
                                     "privatize")
        out = _privatize(self.privatizer, payload[None], ctx)[0]
        if self.send == "updates":
            out = ctx.global_vector + out
        arrays = [out[s].reshape(shape).numpy() for s, shape in zip(ctx.layout.slices, ctx.layout.shapes)]
        return arrays, self._metrics(ctx)

    def _metrics(self, ctx: RoundContext) -> dict[str, Any]:
        stated = getattr(self.privatizer, "guarantee", None)
        guarantees = None if stated is None else stated(ctx)
        g: Optional[Any] = guarantees[0] if guarantees else None
        if g is None:
            return {"epsilon_unit": "no privacy stated"}
        whole = g.compose(d=ctx.layout.numel)
        return {"epsilon_per_coordinate": float(g.epsilon), "epsilon_round": float(whole.epsilon),
                "delta_round": float(whole.delta), "epsilon_unit": str(whole.unit)}

    def __call__(self, msg: Message, ctxt: Context, call_next: Any) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        fit_ins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        if "server_round" not in fit_ins.config:
            raise ValueError("PrivatizerMod needs the round in the fit config: give the strategy "
                             "on_fit_config_fn=ldptut.flower.fit_config")
        if self.client_key not in ctxt.node_config:
            raise ValueError(f"PrivatizerMod reads the client's id from node_config[{self.client_key!r}], which this "
                             f"node does not have (it has {sorted(ctxt.node_config)})")
        received = parameters_to_ndarrays(fit_ins.parameters)
        out = call_next(msg, ctxt)
        if out.has_error():
            return out
        res = compat.recorddict_to_fitres(out.content, keep_input=True)
        arrays, metrics = self.privatize(parameters_to_ndarrays(res.parameters), received,
                                         round=int(fit_ins.config["server_round"]),
                                         client=int(ctxt.node_config[self.client_key]), num_examples=res.num_examples)
        res.parameters = ndarrays_to_parameters(arrays)
        res.metrics.update(metrics)
        res.metrics["client_id"] = int(ctxt.node_config[self.client_key])   # what ServerRule stacks the clients by
        out.content = compat.fitres_to_recorddict(res, keep_input=True)
        return out

    def __repr__(self) -> str:
        return f"PrivatizerMod({self.privatizer!r}, seed={self.seed}, send={self.send!r})"
