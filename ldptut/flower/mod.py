"""A Flower client Mod that runs one of the book's privatizers on a client's fit result."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from flwr.app import Context, Message, MessageType
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.constant import MessageTypeLegacy
from flwr.compat.common import recorddict_compat as compat

from .._validate import integer, one_of
from ..fl.checks import checked_privatize
from ..fl.context import RoundContext
from ..fl.layout import ParamLayout
from ..rng import client_generator, generator

#: The fit config keys :class:`~ldptut.flower.PairedRule` sends each client of a correlated pair.
PAIR_ROLE, PAIR_SEED = "pair_role", "pair_seed"

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
    """Flower's parameter arrays as one float32 vector (copied: Flower's arrays may be read-only)."""
    return torch.cat([torch.as_tensor(np.array(a, dtype=np.float32, copy=True)).reshape(-1) for a in arrays])


def _arrays(vec: torch.Tensor, layout: ParamLayout) -> list[np.ndarray]:
    """The inverse of :func:`_flatten`: ``vec`` cut into the layout's arrays."""
    return [vec[s].reshape(shape).numpy() for s, shape in zip(layout.slices, layout.shapes)]


class _OneOfPair:
    """A privatizer of correlated pairs as one client of a pair draws it: its role, the stream of its pair's seed."""

    def __init__(self, privatizer: Any, role: str, seed: int):
        self.privatizer, self.role = privatizer, str(role)
        self.shared = generator(integer(seed, PAIR_SEED, minimum=0), "pair-shared")

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        return self.privatizer.privatize_client(payloads[0], context=context, role=self.role, shared=self.shared)[None]

    def __repr__(self) -> str:
        return f"{self.privatizer!r} as the {self.role}"


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
                  num_examples: int, pair: Optional[tuple[str, int]] = None) -> tuple[list[np.ndarray], dict[str, Any]]:
        """The arrays the client sends instead of ``trained`` and the metrics it adds (the Mod without Flower's
        messages: what the tests compare with the engine). ``pair``: (role, the pair's seed) from the fit config, for
        a privatizer of correlated pairs (:class:`ldptut.fl.PairedPerturbation`), which needs it."""
        paired = hasattr(self.privatizer, "privatize_client")
        if paired and pair is None:
            raise ValueError(f"{self.privatizer!r} draws correlated pairs: each client needs its role and its pair's "
                             f"seed in the fit config ({PAIR_ROLE!r}, {PAIR_SEED!r}); use ldptut.flower.PairedRule "
                             "as the server's strategy")
        if pair is not None and not paired:
            raise ValueError(f"the fit config assigns this client a pair, but {self.privatizer!r} does not draw "
                             "correlated pairs (use ldptut.fl.PairedPerturbation, or a strategy that does not pair)")
        if [a.shape for a in trained] != [a.shape for a in received]:
            raise ValueError("the fit result's arrays must have the shapes of the parameters the client received")
        ctx = self.context(round=round, client=client, received=received, num_examples=num_examples)
        vec = _flatten(trained)
        payload = vec - ctx.global_vector if self.send == "updates" else vec
        if not bool(torch.isfinite(payload).all()):
            raise FloatingPointError(f"client {client}, round {round}: the fit result is not finite; nothing to "
                                     "privatize")
        if pair is None:
            out = checked_privatize(self.privatizer, payload[None], ctx)[0]
        else:
            out = checked_privatize(_OneOfPair(self.privatizer, *pair), payload[None], ctx)[0]
        if self.send == "updates":
            out = ctx.global_vector + out
        return _arrays(out, ctx.layout), self._metrics(ctx)

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
        if msg.metadata.message_type == MessageTypeLegacy.GET_PROPERTIES:
            return self._add_client_id(msg, ctxt, call_next)
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
        cfg = fit_ins.config
        pair = (str(cfg[PAIR_ROLE]), int(cfg[PAIR_SEED])) if PAIR_ROLE in cfg else None
        arrays, metrics = self.privatize(parameters_to_ndarrays(res.parameters), received,
                                         round=int(cfg["server_round"]), client=int(ctxt.node_config[self.client_key]),
                                         num_examples=res.num_examples, pair=pair)
        if pair is not None:
            metrics[PAIR_ROLE] = pair[0]
        res.parameters = ndarrays_to_parameters(arrays)
        res.metrics.update(metrics)
        res.metrics["client_id"] = int(ctxt.node_config[self.client_key])   # what ServerRule stacks the clients by
        out.content = compat.fitres_to_recorddict(res, keep_input=True)
        return out

    def _add_client_id(self, msg: Message, ctxt: Context, call_next: Any) -> Message:
        """A properties query: the client's answer gains ``client_id`` (what :class:`~ldptut.flower.PairedRule` orders
        the clients by before the first fit)."""
        out = call_next(msg, ctxt)
        if out.has_error() or self.client_key not in ctxt.node_config:
            return out
        res = compat.recorddict_to_getpropertiesres(out.content)
        res.properties["client_id"] = int(ctxt.node_config[self.client_key])
        out.content = compat.getpropertiesres_to_recorddict(res)
        return out

    def __repr__(self) -> str:
        return f"PrivatizerMod({self.privatizer!r}, seed={self.seed}, send={self.send!r})"
