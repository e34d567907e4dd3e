"""Parameter decoupling: personal input and output transforms kept by each client around a shared base model.

PD-LDPFL (Wang, Yang, Wei, Computer Science 51(11), 2024, Sec. 3.1-3.3, Fig. 1, Eq. 3, Table 1) and, for the input
side alone, PrivateFL (Yang et al., USENIX Security 2023): client k trains the extended model
``T_out^k(base(T_in^k(x)))`` and sends only the base; its transforms stay on the device and carry over to its next
round (Algorithm 1, line 9: "initialised as the personal models after the last round of learning").

* input transform: T_in(x) = f(a * x + b), ``a`` one value per channel, ``b`` one per input element;
* output transform: T_out(z) = f(a * z + b), ``a`` one scalar, ``b`` one per class;
* f (Table 1): "none" (no transform: x), "affine" (ax + b), "log" (log(1 + ax + b)), "tanh", "sigmoid" of
  ax + b. ``log`` of a value <= -1 is NaN or -inf; the paper's Table 1 reports "NAN" (no convergence) for it.

The session records each client's mean local training loss per round; :meth:`_PersonalSession.metrics` gives
the engine the round's variance across clients, and its sum over rounds is the paper's heterogeneity
l_sum ("the cumulative variance of the clients' losses", Sec. 4.3.1, Table 1; the paper does not say which
loss: ours is the mean cross-entropy of the client's local batches in that round).

Both start as the identity (a = 1, b = 0; the paper's Sec. 4.3.2 and Fig. 6 sweep other starts). The trainer,
:class:`PersonalizedLocalSGD`, is a drop-in for :class:`ldptut.training.LocalSGD` in :func:`ldptut.fl.simulate`:
the engine's layout, privatizer and server see the base model only, and the session keeps every client's
transforms from round to round (clients train one after the other, with ``torch.optim``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import boolean, one_of, pos_int, real
from .rng import client_generator
from .training import OptimizerSpec, TrainingSession, batch_schedule

__all__ = ["TRANSFORMS", "PersonalTransform", "Extended", "PersonalizedLocalSGD"]

#: The transform families of Table 1 ("none": the client has no transform on that side).
TRANSFORMS = ("none", "affine", "log", "tanh", "sigmoid")
_F = {"affine": lambda z: z, "log": torch.log1p, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


class PersonalTransform(nn.Module):
    """f(a * x + b) with ``a`` of shape ``a_shape`` and ``b`` of shape ``b_shape`` (broadcast against x's sample
    shape), started at a = ``a_init``, b = ``b_init``; ``kind`` "none" is the identity with no parameters."""

    def __init__(self, *, kind: str, a_shape: Sequence[int], b_shape: Sequence[int], a_init: float = 1.0,
                 b_init: float = 0.0) -> None:
        super().__init__()
        self.kind = one_of(kind, "transform", TRANSFORMS)
        if kind != "none":
            self.a = nn.Parameter(torch.full(tuple(a_shape), real(a_init, "a_init")))
            self.b = nn.Parameter(torch.full(tuple(b_shape), real(b_init, "b_init")))

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "none":
            return x
        return _F[self.kind](self.a * x + self.b)


class Extended(nn.Module):
    """The extended model T_out(base(T_in(x))) of Eq. 3; ``base`` is the shared part."""

    def __init__(self, base: nn.Module, t_in: PersonalTransform, t_out: PersonalTransform) -> None:
        super().__init__()
        self.t_in, self.base, self.t_out = t_in, base, t_out

    def forward(self, x: Tensor) -> Tensor:
        return self.t_out(self.base(self.t_in(x)))

    def personal_state(self) -> dict[str, Tensor]:
        """The client's own parameters (the transforms), detached copies."""
        return {f"{side}.{k}": v.detach().clone() for side in ("t_in", "t_out")
                for k, v in getattr(self, side).named_parameters()}


@dataclass(frozen=True)
class PersonalizedLocalSGD:
    """Local training of the extended model (base and both transforms, end to end, Algorithm 1 lines 10-13):
    ``local_epochs`` passes of mini-batches of ``batch_size`` with ``optimizer``. The clients' transforms
    persist in the session across rounds; only the base weights are returned to the engine."""

    local_epochs: int = 1
    batch_size: int = 32
    optimizer: OptimizerSpec = OptimizerSpec()
    input_transform: str = "affine"
    output_transform: str = "affine"
    a_init: float = 1.0
    b_init: float = 0.0
    #: also report ``personal_accuracy`` every round (each trained client's extended model on the test set)
    eval_personal: bool = False

    def __post_init__(self) -> None:
        boolean(self.eval_personal, "eval_personal")
        pos_int(self.local_epochs, "local_epochs")
        pos_int(self.batch_size, "batch_size")
        one_of(self.input_transform, "input_transform", TRANSFORMS)
        one_of(self.output_transform, "output_transform", TRANSFORMS)
        real(self.a_init, "a_init")
        real(self.b_init, "b_init")

    @property
    def lr(self) -> float:
        return self.optimizer.lr

    def start(self, *, model: nn.Module, layout: Any, runs: Sequence[Any], x_train: Tensor,
              y_train: Tensor) -> "_PersonalSession":
        if any(b.numel() for b in model.buffers()):
            raise ValueError("PersonalizedLocalSGD does not handle models with buffers (BatchNorm); use GroupNorm")
        return _PersonalSession(self, model, layout, runs, x_train, y_train)


class _PersonalSession(TrainingSession):
    def __init__(self, spec: PersonalizedLocalSGD, model: nn.Module, layout: Any, runs: Sequence[Any], x: Tensor,
                 y: Tensor) -> None:
        self.spec, self.model, self.layout, self.runs, self.x, self.y = spec, model, layout, runs, x, y
        sample = x.shape[1:]
        with torch.no_grad():
            self.num_classes = int(model(x[:1]).shape[-1])
        self.in_shapes = ((sample[0],) + (1,) * (len(sample) - 1) if len(sample) > 1 else (1,), tuple(sample))
        self.out_shapes = ((1,), (self.num_classes,))
        #: per run: client id -> its transforms' parameters (made at its first round)
        self.personal: list[dict[int, dict[str, Tensor]]] = [{} for _ in runs]
        #: per run: the last round's mean local training loss of each sampled client (over its mini-batches)
        self.losses: list[list[float]] = [[] for _ in runs]
        #: per run: the last round's loss of each sampled client on its whole local set after local training
        self.losses_after: list[list[float]] = [[] for _ in runs]
        #: per run: the clients that trained in the last round
        self.trained: list[list[int]] = [[] for _ in runs]

    def metrics(self, run: int, *, global_vector: Optional[Tensor] = None, x_test: Optional[Tensor] = None,
                y_test: Optional[Tensor] = None) -> dict[str, float]:
        """For the engine's history: ``loss_variance_after``, the variance across the round's clients of the loss
        of each client's trained extended model on its own local set (population variance; its sum over rounds is
        the paper's l_sum, Sec. 2.4: "the loss after training on its local data set");
        ``loss_variance``, the same of their mean loss over the round's mini-batches (during training); with
        ``eval_personal``,
        ``personal_accuracy`` (in [0, 1]): the mean over the round's clients of the test accuracy of the client's
        extended model T_out(base(T_in(x))) with the new global base ``global_vector`` and the client's transforms
        (what the client would use after downloading it; Eq. 3)."""
        v = torch.tensor(self.losses[run], dtype=torch.float64)
        after = torch.tensor(self.losses_after[run], dtype=torch.float64)
        out = {"loss_variance": float(v.var(unbiased=False)) if len(v) > 1 else 0.0,
               "loss_variance_after": float(after.var(unbiased=False)) if len(after) > 1 else 0.0}
        if self.spec.eval_personal:
            if global_vector is None or x_test is None or y_test is None:
                raise ValueError("eval_personal needs the engine's global_vector, x_test and y_test")
            out["personal_accuracy"] = self.personal_accuracy(run, global_vector, x_test, y_test)
        return out

    @torch.no_grad()
    def personal_accuracy(self, run: int, global_vector: Tensor, x_test: Tensor, y_test: Tensor) -> float:
        """Mean test accuracy (in [0, 1]) of the extended models of the clients that trained in the last round,
        on the base ``global_vector`` (NaN if the base is not finite)."""
        from .fl import evaluate

        if not torch.isfinite(global_vector).all() or not self.trained[run]:
            return float("nan")
        accs = [evaluate(self.client_model(run, i, global_vector), x_test, y_test)[0] for i in self.trained[run]]
        return float(sum(accs) / len(accs))

    def extended(self, base_params: dict[str, Tensor], personal: Optional[dict[str, Tensor]] = None) -> Extended:
        """A fresh extended model: the base with ``base_params``, the transforms at ``personal`` (or their start)."""
        s = self.spec
        base = copy.deepcopy(self.model)
        t_in = PersonalTransform(kind=s.input_transform, a_shape=self.in_shapes[0], b_shape=self.in_shapes[1],
                                 a_init=s.a_init, b_init=s.b_init)
        t_out = PersonalTransform(kind=s.output_transform, a_shape=self.out_shapes[0], b_shape=self.out_shapes[1],
                                  a_init=s.a_init, b_init=s.b_init)
        ext = Extended(base, t_in, t_out).to(self.x.device)
        with torch.no_grad():
            for k, p in ext.base.named_parameters():
                p.copy_(base_params[k])
            for k, p in ext.named_parameters():
                if personal is not None and k in personal:
                    p.copy_(personal[k])
        return ext

    def client_model(self, run: int, client: int, base_vector: Tensor) -> Extended:
        """Client ``client``'s extended model of run ``run`` with the base at ``base_vector`` (its personal
        transforms as it last left them; the starting ones if it has not trained yet)."""
        return self.extended(self.layout.unflatten(base_vector), self.personal[run].get(client))

    @torch.no_grad()
    def _local_loss(self, ext: Extended, idx: Tensor, chunk: int = 4096) -> float:
        """Mean cross-entropy of the trained extended model ``ext`` over the client's examples ``idx``."""
        if len(idx) == 0:
            return float("nan")
        total = sum(float(F.cross_entropy(ext(self.x[b]), self.y[b], reduction="sum")) for b in idx.split(chunk))
        return total / len(idx)

    def train(self, *, round: int, global_vectors: Tensor, client_ids: Sequence[Tensor]) -> list[Tensor]:
        out = []
        for a, (run, glob, ids) in enumerate(zip(self.runs, global_vectors, client_ids)):
            params = self.layout.unflatten(glob)
            rows, self.losses[a], self.losses_after[a], self.trained[a] = [], [], [], ids.tolist()
            for i in ids.tolist():
                ext = self.extended(params, self.personal[a].get(i))
                optim = self.spec.optimizer.torch_optimizer(ext.parameters())
                idx = run.partition[i].to(self.x.device)
                sched = batch_schedule(len(idx), epochs=self.spec.local_epochs, batch_size=self.spec.batch_size,
                                       generator=client_generator(run.seed, round, i, "batches"))
                total, steps = 0.0, 0
                for batch in sched:
                    b = idx[batch[batch >= 0].to(self.x.device)]
                    optim.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(ext(self.x[b]), self.y[b])
                    loss.backward()
                    optim.step()
                    total, steps = total + float(loss.detach()), steps + 1
                self.losses[a].append(total / max(steps, 1))
                self.losses_after[a].append(self._local_loss(ext, idx))
                self.personal[a][i] = ext.personal_state()
                rows.append(self.layout.flatten(dict(ext.base.named_parameters())).detach())
            out.append(torch.stack(rows))
        return out
