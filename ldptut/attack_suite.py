"""The gradient-inversion attack suite: DLG and iDLG against what one client sends under each LDP mechanism.

One client holds one labelled image (x, c) and the server holds the model θ. The client computes the single-example
gradient ∇W = ∇_θ CE(F(x; θ), c) (:func:`ldptut.attacks.observed_gradient`), privatises it as its report says
(:class:`Report`, :func:`privatize_gradient`), and sends it; the server inverts what it received:

* **DLG** (Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019, Algorithm 1): dummy image x' and dummy
  logits y' from N(0, 1), both optimised with L-BFGS to minimise ‖∇_θ L(F(x'), softmax(y')) - ∇W‖²
  (:func:`ldptut.attacks.dlg_attack`);
* **iDLG** (Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", arXiv:2001.02610, 2020, Sec. 3):
  the label is read off the sign of the last layer's gradient first (:func:`infer_label`), then only the dummy
  image is optimised, with that label fixed (:func:`idlg_attack`).

:func:`attack_table` runs one attack on every report of a mapping, from the same seeded start for every report, and
scores each reconstruction against the trivial guess, the mean image of a public pool
(:func:`ldptut.attacks.mean_image_mse`): a ratio below 1 means the report taught the server more about the image than
the pool did (and a correlation with the original above the mean image's: the shape leaked).
:func:`plot_reconstructions` draws originals and reconstructions side by side.

What is protected, per report: the per-coordinate mechanisms give ε **per coordinate per round** (one scalar report;
the whole gradient of d coordinates composes to d·ε, the table's ``epsilon_report``); FedSel gives ε1 + ε2 per model
per round; "central" (DP-FedAvg) gives nothing to the report: the server sees it in clear.
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from ._validate import boolean as _check_boolean
from ._validate import delta as _check_delta
from ._validate import epsilon as _check_epsilon
from ._validate import integer as _check_integer
from ._validate import one_of as _one_of
from ._validate import pos_int as _check_pos_int
from ._validate import real as _check_real
from .accounting import Guarantee, Unit
from .attacks import DLGResult, _as_target, _trainable, dlg_attack, dlg_mse, mean_image_mse, observed_gradient
from .mechanisms import MECHANISMS, LdpSign, make_mechanism
from .rng import generator as _generator

__all__ = ["Report", "REPORT_METHODS", "VALUE_MECHANISMS", "privatize_gradient", "report_guarantee", "infer_label",
           "idlg_attack", "AttackResult", "attack_table", "plot_reconstructions"]

#: The per-coordinate mechanisms a real gradient coordinate can go through (randomized response takes bits only).
VALUE_MECHANISMS = tuple(k for k in MECHANISMS if k != "randomized_response")
#: Every method a :class:`Report` may name.
REPORT_METHODS = ("none", "central", "fedsel") + VALUE_MECHANISMS

_NEEDS_DELTA = ("gaussian",)


# ==== what the client sends ==========================================================================
@dataclass(frozen=True)
class Report:
    """What one client sends for its single-example gradient: a method and its parameters.

    ``method`` (one of :data:`REPORT_METHODS`):

    * ``"none"``: the clear gradient (no parameter may be set);
    * a per-coordinate mechanism of :data:`ldptut.mechanisms.MECHANISMS` (``"two_point"``, ``"laplace"``,
      ``"piecewise"``, ``"hybrid"``, ``"gaussian"``, ``"ldpsign"``): every coordinate clipped to [-r, r]
      (``radius`` = r, required) and randomised with ε = ``epsilon`` (required) **per coordinate per round**;
      ``delta`` is required by ``"gaussian"``, optional for ``"ldpsign"`` (with it the paper's Gaussian
      calibration, without it the exact one at pure ε) and refused by the others. Randomized response is
      not offered: it randomises bits, not real coordinates;
    * ``"fedsel"``: FedSel's report (Liu, Cao, Yoshikawa, Chen, DASFAA 2020, Algorithm 1, lines 16-18): one
      coordinate chosen with the exponential mechanism at ε1 = ``epsilon_select`` on the ranking of |∇W| (Sec. 4.1,
      Lemma 1), its value clipped to [-r, r] and perturbed with Piecewise at ε2 = ``epsilon``; every other
      coordinate 0. ε1 + ε2 per model per round (FedSel, Theorem 1);
    * ``"central"``: central DP (DP-FedAvg, McMahan et al., ICLR 2018, Algorithm 1). The client sends its update in
      clear (clipped to L2 norm ``radius`` if given, :class:`ldptut.central.ClipUpdate`; not clipped if None) and the
      server adds the noise to the **sum** it releases: central DP protects the released model, not the report, so
      the server sees exactly what an unprotected client sends. ``epsilon`` / ``delta``, if given, are the released
      model's central guarantee, recorded in the table; they do not touch the report.

    Every field is checked on construction; a bad one raises ``ValueError`` naming it.
    """

    method: str
    epsilon: Optional[float] = None
    radius: Optional[float] = None
    delta: Optional[float] = None
    epsilon_select: Optional[float] = None

    def __post_init__(self) -> None:
        if self.method == "randomized_response":
            raise ValueError("method must be one of " + ", ".join(map(repr, REPORT_METHODS)) + ", got "
                             "'randomized_response': it randomises bits, not real gradient coordinates")
        m = _one_of(self.method, "method", REPORT_METHODS)
        set_ = object.__setattr__

        def refuse(*names: str) -> None:
            for n in names:
                if getattr(self, n) is not None:
                    raise ValueError(f"{n} must be None for method {m!r}, got {getattr(self, n)!r}")

        def need(n: str) -> None:
            if getattr(self, n) is None:
                raise ValueError(f"{n} is required for method {m!r}")

        if m == "none":
            refuse("epsilon", "radius", "delta", "epsilon_select")
            return
        if m == "central":
            refuse("epsilon_select")
            if self.epsilon is not None:
                set_(self, "epsilon", _check_epsilon(self.epsilon, "epsilon"))
            if self.delta is not None:
                set_(self, "delta", _check_delta(self.delta, "delta"))
            if self.radius is not None:
                set_(self, "radius", _check_real(self.radius, "radius", positive=True))
            return
        need("epsilon")
        need("radius")
        set_(self, "epsilon", _check_epsilon(self.epsilon, "epsilon"))
        set_(self, "radius", _check_real(self.radius, "radius", positive=True))
        if m == "fedsel":
            refuse("delta")
            need("epsilon_select")
            set_(self, "epsilon_select", _check_epsilon(self.epsilon_select, "epsilon_select"))
            return
        refuse("epsilon_select")
        if m in _NEEDS_DELTA:
            need("delta")
            set_(self, "delta", _check_delta(self.delta, "delta"))
        elif m == "ldpsign":
            if self.delta is not None:
                set_(self, "delta", _check_delta(self.delta, "delta"))
        else:
            refuse("delta")
        self.mechanism()  # the mechanism's own checks (e.g. a Gaussian (ε, δ) its sampler cannot realise)

    def mechanism(self):
        """The per-coordinate mechanism (center 0, radius r; for "fedsel" the value's Piecewise at ε2), or None.

        ``"ldpsign"`` with ``delta``: :class:`~ldptut.mechanisms.LdpSign` calibrated with L2 sensitivity 2r, the
        width of one clipped coordinate's range (as :class:`~ldptut.mechanisms.Gaussian` calibrates); its exact
        guarantee is the pure ε* of its ``guarantee`` (below the nominal ε whenever the calibration holds). Without
        ``delta``: calibrated exactly, ε* = ε."""
        m = self.method
        if m in ("none", "central"):
            return None
        if m == "fedsel":
            return make_mechanism("piecewise", epsilon=self.epsilon, center=0.0, radius=self.radius)
        if m == "ldpsign":
            if self.delta is None:
                return LdpSign(epsilon=self.epsilon, radius=self.radius)
            return LdpSign(epsilon=self.epsilon, delta=self.delta, l2_sensitivity=2.0 * self.radius, radius=self.radius)
        kw = {"delta": self.delta} if m == "gaussian" else {}
        return make_mechanism(m, epsilon=self.epsilon, center=0.0, radius=self.radius, **kw)

    def label(self) -> str:
        """A short description with ε's unit, e.g. "two_point, ε = 0.1 per coordinate per round"."""
        m = self.method
        if m == "none":
            return "none (clear gradient)"
        if m == "central":
            guar = "" if self.epsilon is None else f", ε = {self.epsilon:g} for the released model"
            return f"central (report in clear{guar})"
        if m == "fedsel":
            return f"fedsel, ε1 + ε2 = {self.epsilon_select:g} + {self.epsilon:g} per model per round"
        d = f", δ = {self.delta:g}" if self.delta is not None else ""
        exact = f" (exact ε* = {self.mechanism().epsilon:.3g})" if m == "ldpsign" else ""
        return f"{m}, ε = {self.epsilon:g}{d}{exact} per coordinate per round"


def report_guarantee(report: Report, d: int) -> Optional[Guarantee]:
    """The LDP guarantee of one whole report of a d-coordinate gradient, one round; None when the report has none.

    Per-coordinate mechanisms: the mechanism's own guarantee (per coordinate per round) composed over the d
    coordinates (``Guarantee.compose(d=d)``: d·ε for the pure mechanisms, exact μ-GDP composition for Gaussian).
    FedSel: ε1 + ε2 per model per round (Liu et al. 2020, Theorem 1, sequential composition). "none", "central":
    None (the report is in clear; central DP's guarantee is about the released model)."""
    d = _check_pos_int(d, "d")
    if report.method in ("none", "central"):
        return None
    if report.method == "fedsel":
        return Guarantee(report.epsilon_select + report.epsilon, unit=Unit(coordinates=d, whole_model=True),
                         note="selection + value")
    return report.mechanism().guarantee.compose(d=d)


def _flat(grad: Any) -> tuple[Tensor, Optional[Dict[str, torch.Size]]]:
    if isinstance(grad, Tensor):
        if grad.ndim != 1 or not grad.dtype.is_floating_point:
            raise ValueError(f"grad must be a flat floating-point tensor or a dict of tensors, got shape "
                             f"{tuple(grad.shape)}, dtype {grad.dtype}")
        return grad.detach(), None
    if isinstance(grad, Mapping) and grad and all(isinstance(v, Tensor) for v in grad.values()):
        shapes = {k: v.shape for k, v in grad.items()}
        return torch.cat([v.detach().reshape(-1) for v in grad.values()]), shapes
    raise ValueError(f"grad must be a flat floating-point tensor or a non-empty dict of tensors, got "
                     f"{type(grad).__name__}")


def _unflat(flat: Tensor, shapes: Optional[Dict[str, torch.Size]]) -> Any:
    if shapes is None:
        return flat
    out, i = {}, 0
    for k, s in shapes.items():
        n = math.prod(s)
        out[k] = flat[i:i + n].reshape(s)
        i += n
    return out


def privatize_gradient(grad: Any, report: Report, generator: Optional[torch.Generator]) -> Any:
    """The report a client sends for its gradient ``grad`` (a dict of tensors, or their flat concatenation), under
    ``report``; returned in the structure of ``grad`` (same keys, shapes, dtype). All randomness from ``generator``.

    * "none": ``grad`` itself (a detached copy);
    * "central": ``grad`` in clear, scaled to L2 norm at most C = ``report.radius`` if given (DP-FedAvg's client
      clipping, Δ min(1, C / ‖Δ‖₂), McMahan et al. 2018, Algorithm 1; :class:`ldptut.central.ClipUpdate`). **No
      noise**: in central DP the trusted server adds the noise to the aggregate it releases, after it has seen this
      report; the report's row of an attack table therefore equals the clear gradient's;
    * a per-coordinate mechanism M: y_j = M(clip(g_j, -r, r)) for every coordinate j independently, with ε per
      coordinate (the mechanism clips to [-r, r] itself, :class:`ldptut.mechanisms.Mechanism`). The mechanisms are
      unbiased (E[y_j] = clip(g_j)), except ldpsign, whose ±1 the server reads as σ √(π/2) y_j, the inverse of its
      mean 2Φ(w/σ) - 1 ≈ √(2/π) w/σ linearised at w = 0 (Wu, Xu, Zhu 2023, Sec. 3.1;
      :class:`ldptut.mechanisms.LdpSign`);
    * "fedsel": FedSel's one-coordinate report (Liu et al., DASFAA 2020, Algorithm 1, lines 16-18), the round
      engine's :class:`ldptut.fl.selected.SelectThenPerturb` on this one gradient: j drawn with
      P[j] ∝ exp(ε1 z_j / (d - 1)), z_j the rank of |g_j| (Sec. 4.1, Lemma 1,
      :class:`ldptut.selection.ExponentialSelection`), y_j = Piecewise_ε2(clip(g_j, -r, r)) (Wang et al., ICDE 2019,
      Algorithm 2), y_i = 0 for i ≠ j.
    """
    if not isinstance(report, Report):
        raise ValueError(f"report must be a Report, got {type(report).__name__}")
    flat, shapes = _flat(grad)
    m = report.method
    if m == "none":
        out = flat.clone()
    elif m == "central":
        out = flat.clone()
        if report.radius is not None:
            from .central import ClipUpdate

            # ClipUpdate reads only ``context.send`` (the update is clipped as a row of the round's payloads)
            out = ClipUpdate(clip=report.radius)(flat.unsqueeze(0), context=types.SimpleNamespace(send="updates"))[0]
    elif m == "fedsel":
        from .fl.ranges import FixedRange
        from .fl.selected import SelectThenPerturb

        sel = SelectThenPerturb(epsilon_select=report.epsilon_select, epsilon_value=report.epsilon, selector="exp",
                                range=FixedRange(center=0.0, radius=report.radius))
        # SelectThenPerturb reads ``send`` and the clients' ``generators`` (this client's: the selection's uniform
        # first, then the value's) from its round context
        ctx = types.SimpleNamespace(send="updates", generators=[generator])
        out = sel(flat.unsqueeze(0), context=ctx)[0]
    else:
        mech = report.mechanism()
        out = mech.privatize(flat, generator)
        if m == "ldpsign":
            out = out * (mech.sigma * math.sqrt(math.pi / 2.0))
    return _unflat(out, shapes)


# ==== iDLG ============================================================================================
def _last_linear(model: nn.Module, params: Dict[str, Tensor]) -> tuple[str, Optional[str]]:
    """The parameter names (weight, bias or None) of the model's last ``nn.Linear`` (in ``named_modules`` order)."""
    last = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            last = name
    if last is None:
        raise ValueError("model has no nn.Linear layer: iDLG reads the label off the last linear layer's gradient")
    pre = f"{last}." if last else ""
    w, b = pre + "weight", pre + "bias"
    if w not in params:
        raise ValueError(f"the last linear layer's weight {w!r} does not require grad")
    return w, (b if b in params else None)


def _label_scores(model: nn.Module, target: Any) -> Tensor:
    """iDLG's per-class scores (the true label's is the only negative one in a clear gradient)."""
    params = _trainable(model)
    goal = dict(zip(params, _as_target(target, params)))
    w, b = _last_linear(model, params)
    return goal[b] if b is not None else goal[w].sum(-1)


def infer_label(model: nn.Module, target: Any) -> Tensor:
    """iDLG's label (Zhao, Mopuri, Bilen 2020, Sec. 3.2) from a single-example gradient: a (1,) int64 tensor.

    With softmax cross-entropy, the gradient of the last linear layer's row c is ∂L/∂W_c = (p_c - 1[c = y]) h and
    ∂L/∂b_c = p_c - 1[c = y], p = softmax(F(x)), h the layer's input. Every p_c - 1[c = y] is positive except the
    true label's, p_y - 1 < 0. So ĉ = argmin_c ∂L/∂b_c when the layer has a bias (no assumption on h), else
    ĉ = argmin_c Σ_j ∂L/∂W_{c,j}, the paper's rule, which assumes h ≥ 0 (a ReLU or sigmoid before the layer).
    ``target``: the (possibly privatised) gradient, keyed like the model's trainable parameters or flat.
    """
    return _label_scores(model, target).argmin().reshape(1).to(torch.int64)


def idlg_attack(model: nn.Module, target: Any, *, input_shape: Sequence[int], steps: int = 300, lr: float = 1.0,
                generator: Optional[torch.Generator], device: Union[str, torch.device] = "cpu",
                line_search_fn: Optional[str] = None) -> DLGResult:
    """iDLG (Zhao, Mopuri, Bilen 2020, Algorithm 1): the label ĉ from :func:`infer_label`, then the dummy image
    x' ~ N(0, 1) (1, *input_shape), drawn from ``generator`` as :func:`ldptut.attacks.dlg_attack` draws its dummy
    image (so both attacks start from the same x'), optimised alone with ``torch.optim.LBFGS`` (``lr``, ``steps``
    calls of ``step``, no line search by default, as in DLG's code) to minimise

        D(x') = || ∇_θ CE(F(x'; θ), ĉ) - ∇W ||².

    ``target`` ∇W: a dict keyed like the model's trainable parameters or their flat concatenation. θ is fixed (the
    model is not modified). Stops early when two successive distances are equal. Returns a
    :class:`~ldptut.attacks.DLGResult`: ``labels`` = ĉ, ``soft_labels`` its one-hot, ``converged`` False if the
    distance became NaN / inf (the last finite iterate is returned).
    """
    params = _trainable(model)
    if not isinstance(input_shape, (tuple, list, torch.Size)) or len(input_shape) == 0:
        raise ValueError(f"input_shape must be a non-empty sequence of positive integers, got {input_shape!r}")
    shape = tuple(_check_pos_int(s, "input_shape entries") for s in input_shape)
    steps = _check_pos_int(steps, "steps")
    lr = _check_real(lr, "lr", positive=True)
    if line_search_fn not in (None, "strong_wolfe"):
        raise ValueError(f"line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
    dev = torch.device(device)
    if any(p.device.type != dev.type for p in params.values()):
        raise ValueError(f"device {dev} must be the device of the model's parameters")
    goal = _as_target(target, params)
    scores = _label_scores(model, target)
    label = scores.argmin().reshape(1).to(device=dev, dtype=torch.int64)
    dtype = next(iter(params.values())).dtype
    leaves = {k: p.detach().clone().requires_grad_(True) for k, p in params.items()}
    buffers = dict(model.named_buffers())
    names = list(leaves)
    x = torch.randn((1, *shape), generator=generator, dtype=dtype).to(dev).requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=lr, line_search_fn=line_search_fn)

    def distance() -> Tensor:
        logits = functional_call(model, {**buffers, **leaves}, (x,))
        grads = torch.autograd.grad(F.cross_entropy(logits, label), [leaves[k] for k in names], create_graph=True)
        return sum(((g - t) ** 2).sum() for g, t in zip(grads, goal))

    def closure() -> Tensor:
        d = distance()
        (x.grad,) = torch.autograd.grad(d, [x])
        return d.detach()

    history: List[float] = []
    last, converged = x.detach().clone(), True
    for _ in range(steps):
        opt.step(closure)
        d = float(distance().detach())
        if not math.isfinite(d) or not bool(torch.isfinite(x).all()):
            converged = False
            break
        history.append(d)
        last = x.detach().clone()
        if len(history) >= 2 and history[-1] == history[-2]:
            break
    return DLGResult(inputs=last, labels=label, soft_labels=F.one_hot(label, scores.numel()).to(dtype),
                     loss_history=history, converged=converged)


# ==== the table ========================================================================================
def _pearson(a: Tensor, b: Tensor) -> float:
    """Pearson's correlation of two images' pixels (float64; NaN if one is constant)."""
    u = a.detach().cpu().to(torch.float64).reshape(-1)
    v = b.detach().cpu().to(torch.float64).reshape(-1)
    u, v = u - u.mean(), v - v.mean()
    den = float(u.norm() * v.norm())
    return float(u @ v) / den if den > 0 else math.nan


@dataclass
class AttackResult:
    """What :func:`attack_table` returns: ``table`` (a ``pandas.DataFrame``, one row per report and image),
    ``images`` (report name -> reconstructions, (n, *image_shape), on the CPU), ``originals`` (n, *image_shape),
    ``labels`` (n,), ``reports`` (the mapping attacked), ``attack`` ("idlg" or "dlg") and ``pixel_range`` (the public
    pool's (min, max): the clamp range and the figure's grey scale)."""

    table: Any
    images: Dict[str, Tensor]
    originals: Tensor
    labels: Tensor
    reports: Dict[str, Report]
    attack: str
    pixel_range: tuple = field(default=(0.0, 1.0))


def attack_table(model_name_or_model: Union[str, nn.Module], images: Tensor, labels: Tensor,
                 reports: Mapping[str, Report], *, pool: Tensor, attack: str = "idlg", iterations: int, seed: int,
                 device: Union[str, torch.device] = "cpu", num_classes: int = 10,
                 model_kwargs: Optional[Mapping[str, Any]] = None, lr: float = 1.0,
                 line_search_fn: Optional[str] = "strong_wolfe", clamp: bool = True) -> AttackResult:
    """Attack every report of ``reports`` on every image, each one client's single-example gradient.

    For image i (x_i, c_i): ∇W_i = ∇_θ CE(F(x_i; θ), c_i) (:func:`ldptut.attacks.observed_gradient`, batch of
    one); for each report name k: R = :func:`privatize_gradient` (∇W_i, reports[k]) with the generator
    ``rng.generator(seed, "attack-report", k, i)``; then ``attack`` ("idlg": :func:`idlg_attack`, Zhao et al. 2020;
    "dlg": :func:`ldptut.attacks.dlg_attack`, Zhu et al. 2019, Algorithm 1) with ``iterations`` L-BFGS steps
    (learning rate ``lr``, ``line_search_fn``), from the dummy start drawn from ``rng.generator(seed, "attack-start",
    i)``, the same for every report. The default line search, strong Wolfe, is what makes the clear-gradient attack
    reliable here: without it L-BFGS's first steps often jump to a saturated softmax (p_c -> 1, a flat region of the
    distance) and stay there. With ``clamp`` the attacker projects its reconstruction onto the public pool's pixel
    range [min, max] (a prior any attacker has; an exact reconstruction is unchanged); without it the reconstructions
    from noisy reports run off to huge values and their MSE means little.

    ``model_name_or_model``: a name of :data:`ldptut.models.MODELS`, built with ``build_model(name,
    input_shape=images.shape[1:], num_classes=num_classes, seed=seed, **model_kwargs)`` and cast to float64 (so that
    a clear gradient is inverted to float64 precision), or a module (used as is, in its dtype; put it in eval mode
    first if it has dropout or batch norm). The small-scale setting we suggest: ``"mlp"`` with
    ``model_kwargs={"hidden": (16,), "activation": "sigmoid"}`` (12,730 weights on MNIST; DLG's own models use
    sigmoids, Zhu et al. 2019, Sec. 4.1) and ``iterations=20``: the clear gradient is inverted to an MSE ratio near
    1e-11 within a few steps. ``images``: (n, *shape); ``labels``: (n,) int; ``pool``: public images (m, *shape)
    whose mean is the trivial guess.

    ``table`` columns, one row per (report, image): method (the mapping's key), mechanism (``Report.method``),
    epsilon (per coordinate per round; ε2 for fedsel; the released model's ε for central), epsilon_select, delta,
    radius, epsilon_report (ε of the whole report per round, :func:`report_guarantee`; inf when the report has no
    guarantee or no finite ε is certified), guarantee (that guarantee in words, with its unit), image, true_label,
    label (the attack's), label_recovered, mse (of the reconstruction, :func:`ldptut.attacks.dlg_mse`), trivial_mse
    (:func:`ldptut.attacks.mean_image_mse`), ratio (mse / trivial_mse: below 1, the report told the server more than
    the public pool), corr and trivial_corr (Pearson's correlation of the reconstruction's, and of the pool's mean
    image's, pixels with the original's), distance (the final gradient distance), converged. Same arguments and
    seed, same table and reconstructions.

    Read the two scores together: the MSE penalises every wrong pixel, and the clamped reconstruction from a noisy
    report is salt-and-pepper at the range's ends, so its MSE ratio can exceed 1 while the digit is plainly visible
    (measured: two-point at ε = 10 per coordinate, r = 0.1, DLG, MSE ratio 3.0 and 2.5, correlation 0.56 and 0.55
    against the mean image's 0.47 and 0.38). corr > trivial_corr says the shape leaked even when the MSE says not.
    The attacks run one after another (each an L-BFGS run of its own).
    """
    import pandas as pd

    from .models import build_model

    attack = _one_of(attack, "attack", ("idlg", "dlg"))
    iterations = _check_pos_int(iterations, "iterations")
    seed = _check_integer(seed, "seed", minimum=0)
    clamp = _check_boolean(clamp, "clamp")
    if not isinstance(images, Tensor) or images.ndim < 2 or not images.dtype.is_floating_point or len(images) == 0:
        raise ValueError("images must be a non-empty floating-point tensor (n, *image_shape)")
    if (not isinstance(labels, Tensor) or labels.dtype.is_floating_point or labels.shape != (len(images),)):
        raise ValueError(f"labels must be an integer tensor of shape ({len(images)},)")
    if not isinstance(pool, Tensor) or pool.ndim != images.ndim or pool.shape[1:] != images.shape[1:] or not len(pool):
        raise ValueError(f"pool must be a non-empty batch of images of shape {tuple(images.shape[1:])}")
    if not isinstance(reports, Mapping) or not reports:
        raise ValueError("reports must be a non-empty mapping of names to Report")
    for k, r in reports.items():
        if not isinstance(k, str) or not isinstance(r, Report):
            raise ValueError(f"reports must map names (str) to Report, got {k!r}: {type(r).__name__}")
    dev = torch.device(device)
    shape = tuple(images.shape[1:])
    if isinstance(model_name_or_model, str):
        classes = _check_pos_int(num_classes, "num_classes")
        model = build_model(model_name_or_model, input_shape=shape, num_classes=classes, seed=seed, device=dev,
                            **dict(model_kwargs or {})).double()
    elif isinstance(model_name_or_model, nn.Module):
        if model_kwargs:
            raise ValueError("model_kwargs apply to a model built by name, not to a given module")
        model = model_name_or_model
    else:
        raise ValueError("model_name_or_model must be a model name or an nn.Module, got "
                         f"{type(model_name_or_model).__name__}")
    params = _trainable(model)
    dtype = next(iter(params.values())).dtype
    d = sum(p.numel() for p in params.values())
    x_all = images.detach().to(dev, dtype)
    y_all = labels.detach().to(dev)
    with torch.no_grad():
        n_out = int(model(x_all[:1]).shape[-1])  # the classes DLG's dummy label ranges over
    trivial = mean_image_mse(x_all.cpu(), pool.detach().cpu())
    lo, hi = float(pool.min()), float(pool.max())
    mean_image = pool.detach().cpu().to(torch.float64).mean(0)

    guarantees = {k: report_guarantee(rep, d) for k, rep in reports.items()}
    rows, recon = [], {k: [] for k in reports}
    for i in range(len(x_all)):
        x, c = x_all[i:i + 1], y_all[i:i + 1]
        grad = observed_gradient(model, x, c)
        for k, rep in reports.items():
            # privatised on the CPU (CPU generators: the same reports whatever ``device``), then sent to ``device``
            rng = _generator(seed, "attack-report", k, i)
            sent = privatize_gradient({n: v.cpu() for n, v in grad.items()}, rep, rng)
            sent = {n: v.to(dev) for n, v in sent.items()}
            start = _generator(seed, "attack-start", i)
            if attack == "idlg":
                res = idlg_attack(model, sent, input_shape=shape, steps=iterations, lr=lr, generator=start,
                                  device=dev, line_search_fn=line_search_fn)
            else:
                res = dlg_attack(model, sent, input_shape=shape, num_classes=n_out, steps=iterations, lr=lr,
                                 generator=start, device=dev, line_search_fn=line_search_fn)
            rec = res.inputs.detach().cpu()
            if clamp:
                rec = rec.clamp(lo, hi)
            recon[k].append(rec[0])
            mse = float(dlg_mse(rec, x.cpu())[0])
            corr = _pearson(rec[0], x[0])
            guar = guarantees[k]
            rows.append({
                "method": k, "mechanism": rep.method, "epsilon": rep.epsilon, "epsilon_select": rep.epsilon_select,
                "delta": rep.delta, "radius": rep.radius,
                "epsilon_report": math.inf if guar is None else guar.epsilon,
                "guarantee": "none: the report is sent in clear" if guar is None else str(guar),
                "image": i, "true_label": int(c[0]), "label": int(res.labels[0]),
                "label_recovered": int(res.labels[0]) == int(c[0]),
                "mse": mse, "trivial_mse": float(trivial[i]), "ratio": mse / float(trivial[i]),
                "corr": corr, "trivial_corr": _pearson(mean_image, x[0]),
                "distance": res.loss_history[-1] if res.loss_history else math.nan, "converged": res.converged,
            })
    table = pd.DataFrame(rows)
    pix = images.detach()
    return AttackResult(table=table, images={k: torch.stack(v) for k, v in recon.items()}, originals=pix.cpu(),
                        labels=labels.detach().cpu(), reports=dict(reports), attack=attack,
                        pixel_range=(lo, hi))


# ==== the figure ========================================================================================
def plot_reconstructions(result: AttackResult, *, axes: Any = None, size: float = 1.5, wrap: int = 24,
                         title: str = ""):
    """Originals (first column) and each report's reconstruction (one column per report, one row per image).

    Column titles name the report and its ε with its unit (:meth:`Report.label`: "per coordinate per round" for the
    per-coordinate mechanisms, "per model per round" for FedSel); each panel gives its MSE ratio to the trivial guess
    (the public pool's mean image), its correlation with the original (``corr``) and whether the label was
    recovered. Every panel uses one grey scale, the public pool's pixel range (values beyond it saturate), so an
    image drawn grey-on-grey is a failed reconstruction, not a faint one (unlike :func:`ldptut.plotting.plot_images`,
    which scales each panel to its own range).
    ``axes``: an array of (n_images, 1 + n_reports) matplotlib axes to draw into, or None for a new figure.
    Returns the figure.
    """
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np

    if not isinstance(result, AttackResult):
        raise ValueError(f"result must be an AttackResult, got {type(result).__name__}")
    names = list(result.reports)
    n, ncols = len(result.originals), 1 + len(names)
    if axes is None:
        fig, axes = plt.subplots(n, ncols, figsize=(size * ncols, (size + 0.6) * n + 0.5), squeeze=False)
    else:
        axes = np.asarray(axes, dtype=object).reshape(n, ncols)
        fig = axes[0, 0].figure
    lo, hi = result.pixel_range
    tab = result.table.set_index(["method", "image"])

    def show(ax, img):
        a = img.detach().cpu().double()
        ax.imshow(a.reshape(-1, *a.shape[-2:])[0].numpy(), cmap="gray", vmin=lo, vmax=hi)
        ax.set_xticks([])
        ax.set_yticks([])

    for i in range(n):
        show(axes[i, 0], result.originals[i])
        axes[i, 0].set_title(f"original\nlabel {int(result.labels[i])}" if i == 0 else f"label {int(result.labels[i])}",
                             fontsize=7)
        for j, k in enumerate(names, start=1):
            show(axes[i, j], result.images[k][i])
            row = tab.loc[(k, i)]
            stats = (f"MSE ratio {row['ratio']:.2g}, corr {row['corr']:.2f}\n"
                     f"label {'ok' if row['label_recovered'] else 'wrong'}")
            lab = result.reports[k].label()
            name = lab if lab.split(",")[0].split(" ")[0] == k else f"{k}: {lab}"
            head = textwrap.fill(name, wrap) + "\n" if i == 0 else ""
            axes[i, j].set_title(head + stats, fontsize=6)
    fig.suptitle(title or f"{result.attack.upper()} on one client's single-example gradient "
                 "(ratio: MSE / MSE of the public mean image; corr: correlation with the original)", fontsize=8)
    fig.tight_layout()
    return fig
