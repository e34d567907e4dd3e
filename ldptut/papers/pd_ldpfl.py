"""PD-LDPFL: parameter decoupling with the Piecewise Mechanism (Wang, Yang, Wei, Computer Science 51(11): 379-388, 2024).

Source: ``../shared/papers/pd-ldpfl_wang2024_zh.txt`` (in Chinese; sections cited as in the paper) and NOTES.md
section 5. Each client trains T_out(base(T_in(x))) (Sec. 3.2, Eq. 3) and uploads only the base, every weight
perturbed with the Piecewise Mechanism (PM, Wang et al. ICDE 2019) after Algorithm 2's scaling: t = max(θ), θ / t,
PM, times t.

Generic parts: the transforms and their trainer (:mod:`ldptut.personal`), PM (:class:`ldptut.mechanisms.Piecewise`),
the round engine (:mod:`ldptut.fl`). This module holds Algorithm 2 as a privatizer (:class:`LayerScaledPiecewise`)
beside the LDP-correct alternative (a public bound), the paper's settings and numbers (Tables 1-2), the run kind
(:class:`PdLdpflConfig`), the claim checks' closed forms and the paper-vs-ours table.

Units: ε is **per weight per round** (the paper's ε = 8); a client's report of d weights composes to d ε per round
by basic composition (:func:`composed_epsilon`), and the scaled variant is not ε-LDP at all (its scale t is
private and the reports reveal it: :func:`ldptut.attacks` check in the chapter).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch

from .._validate import epsilon as _epsilon, one_of
from ..experiments import FedAvgConfig
from ..fl import SCALINGS, FixedRange, LayerScaledPiecewise, RoundContext
from ..mechanisms import Piecewise
from ..params import ChapterParams, P, chapter_params, param
from ..personal import TRANSFORMS, PersonalizedLocalSGD
from ..training import OptimizerSpec
from . import Paper, Reported, number_text, finite_accuracy, interval_cell, mean_std, paired_cell, t_interval

__all__ = ["PAPER", "EPSILON_UNIT", "SETTINGS", "REPORTED", "TABLE1", "SCALINGS", "LayerScaledPiecewise",
           "scaled_variance", "composed_epsilon", "outside_unit_share", "PdLdpflConfig", "METHODS", "method_config",
           "table1_config", "init_sweep", "fig8_runs", "configs", "VARIANTS", "variant_config", "without_noise",
           "epsilon_sweep", "noise_cost", "sweep_table", "sweep_lead_text", "sweep_gain_text", "sweep_words",
           "plot_epsilon_sweep", "train_without_noise", "later_round_dlg",
           "LaterRoundDLG", "dlg_after_pm", "plot_dlg_after_pm", "table2_text", "dlg_after_pm_summary",
           "Params", "grid", "compare", "theorem1_check", "scale_leak_table", "clipped_table", "smooth_mlp",
           "dlg_at_start", "table1_frame", "table1_grid", "init_frame", "plot_init_sweep", "table2_frame", "plot_rounds",
           "fig8_frame", "plot_fig8", "PaperScale", "paper_scale"]

PAPER = Paper(
    key="pd_ldpfl",
    citation="Wang, Yang, Wei. Federated learning with local differential privacy based on parameter decoupling "
             "(PD-LDPFL). Computer Science 51(11): 379-388, 2024 (in Chinese).",
    chapter="book/pd_ldpfl",
    intro="**PD-LDPFL**: personal input and output transforms kept on the client around a shared base perturbed "
          "with the Piecewise Mechanism; what the decoupling buys, and the scaling that leaks.",
)

EPSILON_UNIT = "per weight per round"

#: Table 2's setting (Sec. 5.4) and what the paper leaves to the authors' code (NOTES.md section 5).
SETTINGS = {
    "table2": {"datasets": ("mnist", "fashion_mnist"), "epsilon": 8.0, "lr": 0.05, "rounds": 50,
               "dirichlet_alpha": 1.0, "clients": (5, 10, 25, 50),
               "model": "mlp_600_100_nobias",     # the authors' code: 784-600-100-10 without bias (not in the paper)
               "batch_size": 64, "local_epochs": 1,  # the authors' code (not in the paper)
               "optimizer": "sgd", "transforms": ("affine", "affine")},
    "table1": {"dataset": "mnist", "dirichlet_alpha": 0.05, "clients": 10, "epsilon": 8.0, "rounds": 50, "lr": 0.1},
    "dlg": {"dirichlet_alpha": 5.0, "clients": 10, "rounds": 50, "lr": 0.1},
    # Fig. 8 (Sec. 5.3): l_sum on CIFAR-10 with ResNet18 for four Dirichlet α "under several privacy budgets" (the
    # text names only ε = 8; the others are read off a figure we cannot see: ours are a choice); the batch and
    # local epochs are not stated (Table 2's, the authors' code, assumed).
    "fig8": {"dataset": "cifar10", "model": "resnet18", "clients": 10, "lr": 0.05, "rounds": 50,
             "dirichlet_alphas": (0.5, 1.0, 5.0, 100.0), "epsilons": (1.0, 2.0, 4.0, 8.0)},
}

_T2 = "test accuracy (%) of the global model, Table 2 (ε = 8 per weight, lr 0.05, 50 rounds, Dirichlet α = 1)"

#: Table 2: clients -> (MNIST FedAvg, PrivateFL, PD-LDPFL, FMNIST FedAvg, PrivateFL, PD-LDPFL).
_TABLE2 = {5: (92.77, 94.80, 96.57, 80.16, 81.26, 82.27), 10: (92.50, 95.11, 96.40, 75.05, 75.84, 76.32),
           25: (90.29, 93.7, 95.15, 76.68, 78.21, 79.85), 50: (89.69, 92.97, 94.87, 74.50, 77.31, 78.53)}

REPORTED = [
    Reported(claim=f"{ds} {method} {n} clients", value=vals[3 * j + i], metric=_T2, source="Table 2", epsilon=8.0,
             epsilon_unit=EPSILON_UNIT, setting=(("dataset", ds), ("method", method), ("n_clients", n)))
    for n, vals in _TABLE2.items()
    for j, ds in enumerate(("mnist", "fashion_mnist"))
    for i, method in enumerate(("fedavg", "privatefl", "pd_ldpfl"))
]

#: Table 1 (Sec. 4.3.1): heterogeneity l_sum on non-IID MNIST (Dirichlet 0.05, 10 clients, ε = 8, 50 rounds),
#: input transform (rows) x output transform (columns); NaN: "NAN", the model did not converge.
TABLE1 = pd.DataFrame(
    [[0.580, 0.416, math.nan, 0.191, 0.126], [0.464, 0.396, math.nan, 0.199, 0.098],
     [0.524, 0.510, math.nan, 0.165, 0.143], [0.549, 0.526, math.nan, 0.184, 0.124],
     [4.114, 4.47, math.nan, 1.86, 0.503]],
    index=pd.Index(["none", "affine", "log", "tanh", "sigmoid"], name="input"),
    columns=pd.Index(["none", "affine", "log", "tanh", "sigmoid"], name="output"))


# ------------------------------------------------------------------------------------ Algorithm 2
def scaled_variance(w: Any, *, epsilon: float, scale: float) -> torch.Tensor:
    """Theorem 1 / Eq. 6: the variance of t * PM(w / t), w^2 / (e^{ε/2} - 1) + t^2 (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)^2),
    = t^2 Var_PM(w / t) of the ideal (real-valued) PM (float64). The package's PM reports on a grid whose variance is
    :meth:`~ldptut.mechanisms.Piecewise.variance` (0.2 % above this at ε = 8)."""
    return Piecewise(epsilon=epsilon, radius=float(scale)).ideal_variance(torch.as_tensor(w, dtype=torch.float64))


def composed_epsilon(*, d: int, epsilon: float, rounds: int = 1) -> float:
    """Basic composition of ε per weight over d weights and ``rounds`` rounds: d ε rounds."""
    return float(d) * _epsilon(epsilon) * rounds


def outside_unit_share(weights: Iterable[torch.Tensor]) -> pd.DataFrame:
    """Claim check 4: per tensor, how many of w / max(w) lie outside [-1, 1] (the weights below -max(w)), which
    PM then clips (``outside [-1, 1]``, an exact count, and its share in %); with max|w| there are none."""
    rows = []
    for i, w in enumerate(weights):
        w = w.detach().flatten().double()
        t = w.max()
        n = int((w / t < -1).sum()) if t > 0 else math.nan
        rows.append({"tensor": i, "weights": w.numel(), "max(w)": float(t), "max|w|": float(w.abs().max()),
                     "outside [-1, 1]": n, "outside [-1, 1] (%)": 100 * n / w.numel()})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ DLG at a later round
def train_without_noise(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, partition: Sequence[torch.Tensor], *,
                        rounds: int, lr: float, batch_size: int = 64, seed: int = 0) -> tuple[Any, torch.Tensor]:
    """``rounds`` rounds of PD-LDPFL (affine input and output transforms, Algorithm 1) without noise, mean weighted
    by n_k / n, from ``model``'s weights: the trainer session (each client's trained transforms) and the global
    base after the last round: the state in which a server attacks a later round's upload."""
    from ..fl import ParamLayout, Run

    trainer = PersonalizedLocalSGD(batch_size=batch_size, optimizer=OptimizerSpec(name="sgd", lr=lr))
    layout = ParamLayout.from_model(model)
    session = trainer.start(model=model, layout=layout, runs=[Run(seed=seed, partition=list(partition))],
                            x_train=x, y_train=y)
    glob = layout.flatten(dict(model.named_parameters())).detach()
    n = torch.tensor([float(len(p)) for p in partition], dtype=glob.dtype, device=glob.device)
    for r in range(1, rounds + 1):
        up = session.train(round=r, global_vectors=glob[None], client_ids=[torch.arange(len(partition))])[0]
        glob = (up * (n / n.sum())[:, None]).sum(0)
    return session, glob


@dataclass
class LaterRoundDLG:
    """:func:`later_round_dlg`'s result: ``table`` (one row per attack: MSE to the true image, label right) and
    ``images`` (label -> the (1, C, H, W) image shown for it: the true one, the trivial guess, each reconstruction)."""

    table: pd.DataFrame
    images: dict[str, torch.Tensor]


def later_round_dlg(session: Any, glob: torch.Tensor, x0: torch.Tensor, y0: torch.Tensor, *, client: int,
                    pool: torch.Tensor, lr: float, epsilon: float, steps: int, seed: int = 0) -> LaterRoundDLG:
    """DLG (:func:`ldptut.attacks.dlg_attack`) against client ``client``'s upload at a later round: one local SGD
    step of learning rate ``lr`` on the image ``x0`` through the client's **trained** transforms, the base's update
    divided by ``lr`` as the observed gradient. Rows: the same base without transforms (what FedAvg would send
    with these weights); PD-LDPFL's upload attacked with the base alone (the oblivious attacker) and with the
    output transform's a, b as unknowns (the adaptive attacker); PD-LDPFL's upload after Algorithm 2's PM at
    ``epsilon`` per weight (t over the whole model), adaptive attacker; and the trivial guess every attack must
    beat, the mean image of ``pool`` (:func:`ldptut.attacks.mean_image_mse`)."""
    from .. import attacks
    from ..rng import generator

    ext = session.client_model(0, client, glob)
    base = ext.base
    pd_grad = _base_gradient(ext, session.layout, x0, y0)
    plain = session.layout.flatten(attacks.observed_gradient(base, x0, y0))
    noisy = _pm_gradient(pd_grad, glob, session.layout, lr=lr, epsilon=epsilon,
                         generator=generator(seed, "later-round-dlg-pm"))
    with torch.no_grad():
        seen = ext.t_in(x0)   # what the base saw: DLG's dummy input stands for it
    rows, images = [], {"true image": x0, "trivial guess: mean training image": pool.mean(0, keepdim=True)}
    for label, target, adaptive in (
            ("FedAvg (the same base, no transforms), in clear", plain, False),
            ("PD-LDPFL, in clear, oblivious attacker (the base alone)", pd_grad, False),
            ("PD-LDPFL, in clear, adaptive attacker (output a, b unknown)", pd_grad, True),
            (f"PD-LDPFL after PM, ε = {epsilon:g} per weight, adaptive attacker", noisy, True)):
        res = attacks.dlg_attack(base, target, input_shape=tuple(x0.shape[1:]), num_classes=ext.t_out.b.shape[-1],
                                 steps=steps, generator=generator(seed, "dlg"), line_search_fn="strong_wolfe",
                                 output_transform="affine" if adaptive else None)
        rows.append(_scores(label, res.inputs, x0, seen, bool((res.labels == y0).all())))
        images[label] = res.inputs
    rows.append(_scores("trivial guess: the mean training image (no gradient)", images[
        "trivial guess: mean training image"], x0, seen, None))
    return LaterRoundDLG(table=pd.DataFrame(rows), images=images)


def _base_gradient(ext: Any, layout: Any, x0: torch.Tensor, y0: torch.Tensor) -> torch.Tensor:
    """The flat gradient of the extended model's loss on (x0, y0) with respect to its base's weights: what one SGD
    step of the client changes in its upload, divided by the learning rate."""
    from .. import attacks

    return layout.flatten({k[len("base."):]: v for k, v in attacks.observed_gradient(ext, x0, y0).items()
                           if k.startswith("base.")})


def _pm_gradient(grad: torch.Tensor, glob: torch.Tensor, layout: Any, *, lr: float, epsilon: float,
                 generator: torch.Generator) -> torch.Tensor:
    """What the server reads as the gradient after Algorithm 2: the upload glob - lr * grad perturbed by PM at
    ``epsilon`` per weight with t over the whole model (Sec. 3.3), then (glob - upload) / lr."""
    ctx = RoundContext(round=1, client_ids=torch.arange(1), layout=layout, global_vector=glob,
                       generators=[generator], send="weights", num_samples=torch.ones(1))
    sent = LayerScaledPiecewise(epsilon=epsilon, scope="model")((glob - lr * grad)[None], context=ctx)[0]
    return (glob - sent) / lr


def dlg_after_pm(session: Any, glob: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 partition: Sequence[torch.Tensor], *, clients: Sequence[int], per_client: int, pool: torch.Tensor,
                 lr: float, epsilon: float, steps: int, noise_seeds: Sequence[int]) -> pd.DataFrame:
    """:func:`later_round_dlg`'s PM row repeated: the adaptive attacker (output transform's a, b unknown) against
    the first ``per_client`` images of each client in ``clients`` (their images in ``partition``), each upload
    perturbed by PM at ``epsilon`` per weight per round (t over the whole model) with every seed of
    ``noise_seeds``; also the same attack in clear. One row per (client, image, noise seed): the pixel correlation
    of the reconstruction with the true image (scale-free), the same in clear, and the trivial guess's (the mean
    image of ``pool``), so every attack is compared with the guess it must beat."""
    from .. import attacks
    from ..rng import generator

    mean_image = pool.mean(0, keepdim=True)
    rows = []
    for c in clients:
        ext = session.client_model(0, c, glob)
        for i in [int(j) for j in partition[c][:per_client]]:
            x0, y0 = x[i:i + 1], y[i:i + 1]
            grad = _base_gradient(ext, session.layout, x0, y0)

            def attack(target: torch.Tensor) -> torch.Tensor:
                return attacks.dlg_attack(ext.base, target, input_shape=tuple(x0.shape[1:]),
                                          num_classes=ext.t_out.b.shape[-1], steps=steps,
                                          generator=generator(i, "dlg"), line_search_fn="strong_wolfe",
                                          output_transform="affine").inputs

            clear = _correlation(attack(grad), x0)
            trivial = _correlation(mean_image, x0)
            for s in noise_seeds:
                noisy = _pm_gradient(grad, glob, session.layout, lr=lr, epsilon=epsilon,
                                     generator=generator(s, "dlg-after-pm", c, i))
                rows.append({"client": c, "image": i, "noise seed": s,
                             "after PM": _correlation(attack(noisy), x0),
                             "in clear": clear, "trivial guess": trivial})
    return pd.DataFrame(rows)


def dlg_after_pm_summary(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`dlg_after_pm`'s table as mean [95 % t interval] over images (each image's correlation after PM
    averaged over its noise seeds first, so an interval is over independent images): the reconstruction's
    correlation with the true image after PM, in clear and for the trivial guess, and after PM minus the trivial
    guess, paired by image (above 0: the attack beats the guess)."""

    per = table.groupby("image")[["after PM", "in clear", "trivial guess"]].mean()
    rows = [{"correlation with the true image": k, "mean [95 % CI] over images": interval_cell(per[k], ".2f")}
            for k in ("after PM", "in clear", "trivial guess")]
    rows.append({"correlation with the true image": "after PM − trivial guess (paired by image)",
                 "mean [95 % CI] over images": interval_cell(per["after PM"] - per["trivial guess"], "+.2f")})
    rows.append({"correlation with the true image": "images beating the guess after PM",
                 "mean [95 % CI] over images": f"{int((per['after PM'] > per['trivial guess']).sum())} of {len(per)}"})
    return pd.DataFrame(rows)


def plot_dlg_after_pm(table: pd.DataFrame, *, ax: Any = None) -> Any:
    """:func:`dlg_after_pm`'s attacks as points: the trivial guess's correlation with the true image (x) against the
    reconstruction's after PM (y), one point per image and noise draw, and each image's attack in clear; above the
    diagonal the attack beats the guess."""
    if ax is None:
        from ..display import figure

        _, ax = figure(1, height=4.2)
    ax.plot([-0.2, 1], [-0.2, 1], color="grey", lw=1, ls="--", label="as good as the mean image")
    clear = table.drop_duplicates("image")
    ax.scatter(clear["trivial guess"], clear["in clear"], marker="s", s=22, color="tab:green", label="in clear")
    for s, g in table.groupby("noise seed"):
        ax.scatter(g["trivial guess"], g["after PM"], s=22, alpha=0.8, label=f"after PM, noise draw {s}")
    ax.set(xlabel="trivial guess (mean image): correlation with the true image",
           ylabel="reconstruction: correlation", xlim=(-0.2, 1.02), ylim=(-0.2, 1.02),
           title="Adaptive DLG per image, ε = 8 per weight per round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def _scores(label: str, guess: torch.Tensor, x0: torch.Tensor, seen: torch.Tensor, label_right: Any) -> dict:
    """One row of :func:`later_round_dlg`: MSE of ``guess`` to the true image and to T_in(x) (the image the base
    saw), and the pixel correlation with the true image (scale-free: an affine copy of the image scores 1)."""
    from .. import attacks

    return {"attack": label, "MSE to the true image": float(attacks.dlg_mse(guess, x0).mean()),
            "MSE to T_in(x)": float(attacks.dlg_mse(guess, seen).mean()),
            "correlation with the true image": _correlation(guess, x0), "label right": label_right}


def _correlation(guess: torch.Tensor, x0: torch.Tensor) -> float:
    """Pearson correlation of ``guess``'s pixels with the true image ``x0``'s (in float64): scale-free, an affine
    copy of the image scores 1."""
    g = guess.detach().double().flatten()
    return float(torch.corrcoef(torch.stack([g, x0.detach().double().flatten()]))[0, 1])


# ------------------------------------------------------------------------------------ runs
#: Where the paper's text and the authors' code differ (Algorithm 2, lines 1 and 6): the scale t over the whole
#: model and aggregation weighted by n_k / n ("paper", the chapter's default), or t per layer and a plain mean
#: ("authors_code", the reading of the stored Table 2 runs before the paper's was added).
VARIANTS = {"paper": {"scope": "model", "aggregator": "weighted_mean"},
            "authors_code": {"scope": "tensor", "aggregator": "mean"}}

#: The chapter's methods: (input transform, output transform). PrivateFL here is its input transform under the
#: same PM noise (NOTES.md section 5), not PrivateFL's DP-SGD.
METHODS = {"fedavg": ("none", "none"), "privatefl": ("affine", "none"), "output_only": ("none", "affine"),
           "pd_ldpfl": ("affine", "affine")}


@dataclass(frozen=True, kw_only=True)
class PdLdpflConfig(FedAvgConfig):
    """A FedAvg run whose clients keep personal transforms (:class:`ldptut.personal.PersonalizedLocalSGD`) and
    perturb the base with PM, ε per weight per round. ``scaling``: Algorithm 2's per-client scale ("max", the
    paper's; "max_abs"; ``range`` is then that of the scaled weights, FixedRange(0, 1)) or None: the public bound
    ``range`` (the LDP-correct variant). ``n_train``: use the first
    n of a fixed shuffle (seed 0) of the training set (None: all)."""

    kind: ClassVar[str] = "pd_ldpfl"

    input_transform: str = "affine"
    output_transform: str = "affine"
    a_init: float = 1.0
    b_init: float = 0.0
    scaling: Optional[str] = "max"
    scope: str = "tensor"
    n_train: Optional[int] = None
    #: score the global model (and the extended models) on n test images of a fixed shuffle (None: all); the chapter's
    #: fast defaults use a part, the paper-scale runs all of them
    n_test: Optional[int] = None
    #: record ``personal_accuracy`` (the clients' extended models on the test set) every round
    eval_personal: bool = False

    def __post_init__(self) -> None:
        for name in ("n_train", "n_test"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {v!r}")
        one_of(self.input_transform, "input_transform", TRANSFORMS)
        one_of(self.output_transform, "output_transform", TRANSFORMS)
        if self.scaling is not None:
            one_of(self.scaling, "scaling", SCALINGS)
            if self.mechanism != "piecewise":
                raise ValueError(f"scaling (Algorithm 2) applies to mechanism='piecewise', got {self.mechanism!r}")
        super().__post_init__()

    @property
    def variant(self) -> str:
        """The :data:`VARIANTS` key of ``scope`` and ``aggregator`` (or both spelled out)."""
        return next((k for k, v in VARIANTS.items() if v == {"scope": self.scope, "aggregator": self.aggregator}),
                    f"t per {self.scope}, {self.aggregator}")

    @property
    def method(self) -> str:
        return next((k for k, v in METHODS.items() if v == (self.input_transform, self.output_transform)),
                    f"{self.input_transform}+{self.output_transform}")

    def trainer(self, *, vectorize: bool | str = "auto", client_chunk: Optional[int] = None) -> PersonalizedLocalSGD:
        opt = OptimizerSpec(name=self.optimizer, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        return PersonalizedLocalSGD(local_epochs=self.local_epochs, batch_size=self.batch_size, optimizer=opt,
                                    input_transform=self.input_transform, output_transform=self.output_transform,
                                    a_init=self.a_init, b_init=self.b_init, eval_personal=self.eval_personal)

    def privatizer(self):
        if self.mechanism is not None and self.scaling is not None:
            return LayerScaledPiecewise(epsilon=self.epsilon, scaling=self.scaling, scope=self.scope)
        return super().privatizer()

    def data(self, ds):
        ds = self.check_dataset(ds)  # its own subsets and shuffles, not the base's
        import dataclasses

        from ..rng import generator

        if self.n_train is not None:
            if self.n_train > ds.x_train.shape[0]:
                raise ValueError(f"n_train = {self.n_train} exceeds the {ds.x_train.shape[0]} training examples")
            keep = torch.randperm(ds.x_train.shape[0], generator=generator(0, "pd-ldpfl-train-shuffle"))[: self.n_train]
            keep = keep.to(ds.x_train.device)
            ds = dataclasses.replace(ds, x_train=ds.x_train[keep], y_train=ds.y_train[keep])
        if self.n_test is not None:
            if self.n_test > ds.x_test.shape[0]:
                raise ValueError(f"n_test = {self.n_test} exceeds the {ds.x_test.shape[0]} test examples")
            keep = torch.randperm(ds.x_test.shape[0], generator=generator(0, "pd-ldpfl-test-shuffle"))[: self.n_test]
            keep = keep.to(ds.x_test.device)
            ds = dataclasses.replace(ds, x_test=ds.x_test[keep], y_test=ds.y_test[keep])
        return ds

    def label(self) -> str:
        noise = "in clear" if self.mechanism is None else (
            f"PM ε={self.epsilon:g}, " + (f"scaled by {self.scaling}" if self.scaling else "public bound"))
        return f"{self.method} ({noise}, {self.variant}), {self.n_clients} clients, seed {self.seed}"


def method_config(method: str, *, base: PdLdpflConfig) -> PdLdpflConfig:
    """``base`` with the transforms of ``method`` (:data:`METHODS`)."""
    t_in, t_out = METHODS[one_of(method, "method", list(METHODS))]
    return base.replace(input_transform=t_in, output_transform=t_out)


def variant_config(variant: str, *, base: PdLdpflConfig) -> PdLdpflConfig:
    """``base`` with the scale scope and the aggregator of ``variant`` (:data:`VARIANTS`)."""
    return base.replace(**VARIANTS[one_of(variant, "variant", list(VARIANTS))])


def without_noise(run: PdLdpflConfig) -> PdLdpflConfig:
    """The control: ``run`` with no perturbation at all (the same data, transforms, seed and aggregation)."""
    return run.replace(mechanism=None, epsilon=None, range=None, scaling=None)


def table2_config(dataset: str, n_clients: int, *, rounds: Optional[int] = None, n_train: Optional[int] = None,
               seed: int = 0, scaling: Optional[str] = "max", public_bound: float = 0.1,
               variant: str = "paper", n_test: Optional[int] = None) -> PdLdpflConfig:
    """PD-LDPFL at Table 2's settings (:data:`SETTINGS`), ``rounds`` / ``n_train`` overridable; ``scaling`` None
    uses the public bound [-public_bound, public_bound] instead of Algorithm 2's scale; ``variant``
    (:data:`VARIANTS`): the paper's whole-model t and weighted mean, or the authors' code's per-layer t and mean."""
    one_of(dataset, "dataset", SETTINGS["table2"]["datasets"])
    return variant_config(variant, base=_table2_like(dataset, n_clients, rounds=rounds, n_train=n_train, seed=seed,
                                                  scaling=scaling, public_bound=public_bound, n_test=n_test))


def _table2_like(dataset: str, n_clients: int, *, rounds: Optional[int], n_train: Optional[int], seed: int,
                 scaling: Optional[str], public_bound: float = 0.1, n_test: Optional[int] = None) -> PdLdpflConfig:
    """Table 2's run on any data set (the other experiments start from it and change what they change)."""
    s = SETTINGS["table2"]
    return PdLdpflConfig(paper="pd_ldpfl", dataset=dataset, model=s["model"], n_clients=n_clients,
                      rounds=rounds or s["rounds"], seed=seed, partition="dirichlet", dirichlet_alpha=s["dirichlet_alpha"],
                      local_epochs=s["local_epochs"], batch_size=s["batch_size"], optimizer=s["optimizer"], lr=s["lr"],
                      mechanism="piecewise", epsilon=s["epsilon"], scaling=scaling,
                      range=FixedRange(0.0, 1.0) if scaling else FixedRange(0.0, public_bound), n_train=n_train,
                      n_test=n_test)


def table1_config(*, n_clients: Optional[int] = None, rounds: Optional[int] = None, n_train: Optional[int] = None,
               seed: int = 0, input_transform: str = "affine", output_transform: str = "affine",
               variant: str = "paper", n_test: Optional[int] = None) -> PdLdpflConfig:
    """Table 1's setting (Sec. 4.3.1, :data:`SETTINGS` "table1"): non-IID MNIST (Dirichlet 0.05), 10 clients, ε = 8
    per weight per round, lr 0.1, 50 rounds (``n_clients`` / ``rounds`` / ``n_train`` overridable), the rest as
    Table 2 (the authors' MLP, batch 64, one local epoch, Algorithm 2's scale)."""
    s1 = SETTINGS["table1"]
    return table2_config(s1["dataset"], n_clients or s1["clients"], rounds=rounds or s1["rounds"], n_train=n_train,
                      seed=seed, variant=variant, n_test=n_test).replace(dirichlet_alpha=s1["dirichlet_alpha"], lr=s1["lr"],
                                         input_transform=input_transform, output_transform=output_transform)


def init_sweep(a_values: Sequence[float], b_values: Sequence[float], *, base: PdLdpflConfig) -> list[tuple[str, PdLdpflConfig]]:
    """Fig. 6 (Sec. 4.3.2): PD-LDPFL (affine input and output transforms, both started at the same a and b) for
    every a in ``a_values`` (the paper: in [0, 2]) and b in ``b_values`` (in [-1, 1]), on ``base`` (the paper:
    Table 1's setting, :func:`table1_config`), recording the extended models' accuracy too."""
    return [("fig. 6", base.replace(input_transform="affine", output_transform="affine", a_init=float(a),
                                    b_init=float(b), eval_personal=True)) for a in a_values for b in b_values]


def fig8_runs(*, alphas: Sequence[float], epsilons: Sequence[float], methods: Sequence[str] = ("fedavg", "privatefl",
              "pd_ldpfl"), model: Optional[str] = None, n_clients: Optional[int] = None, rounds: Optional[int] = None,
              n_train: Optional[int] = None, seed: int = 0, variant: str = "paper",
              n_test: Optional[int] = None) -> list[tuple[str, PdLdpflConfig]]:
    """Fig. 8 (Sec. 5.3): every method at every Dirichlet α and ε (per weight per round) on CIFAR-10, the rest
    from :data:`SETTINGS` "fig8" (ResNet18, 10 clients, lr 0.05, 50 rounds; ``model`` etc. overridable), batch 64
    and one local epoch as Table 2, the aggregator of ``variant``. The scale is Algorithm 2's t = max(θ) over the
    **whole model** (scope "model", the paper's text) in either variant: the per-layer reading of the authors' MLP
    code divides by zero on ResNet18, whose normalisation shifts start at 0."""
    s = SETTINGS["fig8"]
    start = _table2_like(s["dataset"], n_clients or s["clients"], rounds=rounds or s["rounds"], n_train=n_train,
                         seed=seed, scaling="max", n_test=n_test).replace(model=model or s["model"], lr=s["lr"])
    start = variant_config(variant, base=start).replace(scope="model")
    return [("fig. 8", method_config(m, base=start.replace(dirichlet_alpha=float(alpha), epsilon=float(eps))))
            for alpha in alphas for eps in epsilons for m in methods]


def configs(*, datasets: Sequence[str] = ("mnist", "fashion_mnist"), clients: Sequence[int] = (5, 10, 25, 50),
            methods: Sequence[str] = ("fedavg", "privatefl", "pd_ldpfl"), seeds: Sequence[int] = (0,),
            variants: Sequence[str] = ("paper",), no_noise_clients: Sequence[int] = (),
            **kw: Any) -> list[tuple[str, PdLdpflConfig]]:
    """Table 2's grid: every method, data set, number of clients, seed and variant (``kw`` to :func:`table2_config`),
    with PM; for the numbers of clients in ``no_noise_clients``, each run's twin without noise too (experiment
    "table 2, no noise")."""
    runs = [method_config(m, base=table2_config(ds, n, seed=s, variant=v, **kw))
            for v in variants for ds in datasets for n in clients for m in methods for s in seeds]
    return [("table 2", r) for r in runs] + [("table 2, no noise", without_noise(r)) for r in runs
                                             if r.n_clients in no_noise_clients]


def epsilon_sweep(dataset: str, n_clients: int, *, epsilons: Sequence[float], seeds: Sequence[int],
                  methods: Sequence[str] = ("fedavg", "privatefl", "pd_ldpfl"), variant: str = "paper",
                  **kw: Any) -> list[tuple[str, PdLdpflConfig]]:
    """The control Table 2 lacks: every method at every ε (per weight per round) and without noise, over
    ``seeds``, at Table 2's setting otherwise (``kw`` to :func:`table2_config`). Where PM costs accuracy is where the
    paper's claim (the decoupling absorbs LDP-induced heterogeneity) can show; at ε = 8 it does not (the no-noise
    runs reach the same accuracy)."""
    base = [method_config(m, base=table2_config(dataset, n_clients, seed=s, variant=variant, **kw))
            for m in methods for s in seeds]
    return ([("ε sweep", r.replace(epsilon=float(e))) for e in epsilons for r in base]
            + [("ε sweep", without_noise(r)) for r in base])


#: The chapter's parameters and their checks (:func:`ldptut.notebooks.setup` checks them; the notebook's parameters
#: cell holds the defaults, ``book/params/pd_ldpfl*-paper.yaml`` the paper-scale values).
@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (``book/pd_ldpfl.ipynb``'s parameters cell: the same names, defaults and order),
    each with its check; a parameter file gives other values for some."""

    dataset: str = param(P.choice("mnist", "fashion_mnist"), "mnist")
    clients: list[int] = param(P.list_of(P.pos_int), [10])
    public_bound_clients: list[int] = param(P.list_of(P.pos_int), [10])
    rounds: int = param(P.pos_int, 3)
    n_train: Optional[int] = param(P.optional(P.pos_int), 6000)
    n_test: Optional[int] = param(P.optional(P.pos_int), 2000)
    seeds: list[int] = param(P.list_of(P.nonneg_int), [0])
    variant: str = param(P.choice(*VARIANTS), "paper")
    table2_variants: list[str] = param(P.list_of(P.choice(*VARIANTS), nonempty=True), ["paper"])
    no_noise_clients: list[int] = param(P.list_of(P.pos_int), [10])
    sweep_clients: Optional[int] = param(P.optional(P.pos_int), 10)
    sweep_epsilons: list[float] = param(P.list_of(P.pos_float), [4.0, 8.0])
    sweep_seeds: list[int] = param(P.list_of(P.nonneg_int), [0])
    sweep_rounds: int = param(P.pos_int, 3)
    sweep_n_train: Optional[int] = param(P.optional(P.pos_int), 6000)
    table1_clients: int = param(P.pos_int, 10)
    table1_rounds: int = param(P.pos_int, 2)
    table1_n_train: Optional[int] = param(P.optional(P.pos_int), 6000)
    table1_transforms: list[str] = param(P.list_of(P.choice(*TRANSFORMS)), ["none", "affine", "sigmoid"])
    init_a: list[float] = param(P.list_of(P.real), [1.0, 2.0])
    init_b: list[float] = param(P.list_of(P.real), [0.0, 1.0])
    cifar_model: str = param(P.choice("cnn_pool", "small_vgg", "resnet18"), "cnn_pool")
    cifar_alphas: list[float] = param(P.list_of(P.pos_float), [])
    cifar_epsilons: list[float] = param(P.list_of(P.pos_float), [8.0])
    cifar_rounds: int = param(P.pos_int, 3)
    cifar_n_train: Optional[int] = param(P.optional(P.pos_int), 5000)
    dlg_steps: int = param(P.pos_int, 100)
    dlg_round: int = param(P.pos_int, 5)
    dlg_per_client: int = param(P.pos_int, 1)
    dlg_noise_seeds: list[int] = param(P.list_of(P.nonneg_int, nonempty=True), [0])
    device: str = param(P.device, "auto")
    run_cache: Optional[str] = param(P.optional(P.string), None)
    paper_runs_dir: Optional[str] = param(P.optional(P.string), "runs/cache/pd_ldpfl")




def grid(p: Mapping[str, Any]) -> list[tuple[str, PdLdpflConfig]]:
    """The chapter's whole experiment grid from its parameters ``p`` (the notebook's parameter names, e.g. a
    parameter file over the defaults): "table 2" (every method at ``clients`` in each of ``table2_variants``, and
    PD-LDPFL with the public bound 0.1 at ``public_bound_clients``), "table 2, no noise" (with ``no_noise``: each
    Table 2 run without PM), "ε sweep" (every method at ``sweep_epsilons`` and without noise, ``sweep_seeds``, at
    ``sweep_clients``; None: none), "table 1" (``table1_transforms`` squared at Table 1's setting), "fig. 6"
    (``init_a`` x ``init_b``) and "fig. 8" (``cifar_alphas`` x ``cifar_epsilons``); all but Table 2 in ``variant``;
    every run scored on ``n_test`` test images (None: all).
    Table 1's run with affine transforms on both sides is Fig. 6's start a = 1, b = 0 when Fig. 6 has it: one run,
    trained once, recording the extended models' accuracy for Fig. 6 (the training is the same either way).
    The chapter and ``python -m ldptut.sweep pd_ldpfl`` both build their runs here."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    seeds, n_test = list(p["seeds"]), p["n_test"]
    out = configs(datasets=[p["dataset"]], clients=p["clients"], seeds=seeds, rounds=p["rounds"], n_train=p["n_train"],
                  variants=p["table2_variants"], no_noise_clients=p["no_noise_clients"], n_test=n_test)
    out += [("table 2", method_config("pd_ldpfl", base=table2_config(p["dataset"], n, seed=s, rounds=p["rounds"],
                                                              n_train=p["n_train"], scaling=None, variant=p["variant"],
                                                              n_test=n_test)))
            for n in p["public_bound_clients"] for s in seeds]
    if p["sweep_clients"] is not None:
        out += epsilon_sweep(p["dataset"], p["sweep_clients"], epsilons=p["sweep_epsilons"], seeds=p["sweep_seeds"],
                             variant=p["variant"], rounds=p["sweep_rounds"], n_train=p["sweep_n_train"], n_test=n_test)
    t1 = table1_config(n_clients=p["table1_clients"], rounds=p["table1_rounds"], n_train=p["table1_n_train"],
                    variant=p["variant"], n_test=n_test)
    fig6 = init_sweep(p["init_a"], p["init_b"], base=t1)
    shared = {(c.input_transform, c.output_transform, c.a_init, c.b_init): c for _, c in fig6}
    out += [("table 1", shared.get((a, b, t1.a_init, t1.b_init), t1.replace(input_transform=a, output_transform=b)))
            for a in p["table1_transforms"] for b in p["table1_transforms"]]
    out += fig6
    out += fig8_runs(alphas=p["cifar_alphas"], epsilons=p["cifar_epsilons"], model=p["cifar_model"],
                     rounds=p["cifar_rounds"], n_train=p["cifar_n_train"], seed=seeds[0], variant=p["variant"],
                     n_test=n_test)
    return out


def compare(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 2 beside ours (final test accuracy of the global model, mean ± std over seeds), per data set, method
    and number of clients, from the runs at Table 2's setting (Dirichlet α = 1, lr 0.05, ε = 8); "not run" where we
    have none. Runs of other rounds, training-set sizes or with a public bound get rows of their own."""
    rows = []
    t2 = SETTINGS["table2"]
    if len(runs):  # Table 2's setting only (a cache may hold other experiments, e.g. Table 1's transform grid)
        runs = runs[runs["config"].map(lambda c: c.partition == "dirichlet" and c.dirichlet_alpha == t2["dirichlet_alpha"]
                                       and c.lr == t2["lr"] and c.epsilon == t2["epsilon"])]
    for claim in REPORTED:
        w = claim.where
        sel = runs
        if len(sel):
            sel = sel[(sel["dataset"] == w["dataset"]) & (sel["n_clients"] == w["n_clients"])]
            sel = sel[sel["config"].map(lambda c: getattr(c, "method", None) == w["method"])]
        def setting(c: PdLdpflConfig) -> str:
            return (f"{c.rounds} rounds, {c.n_train or 'all'} train images, "
                    + (f"Algorithm 2 scale ({c.scaling}), {c.variant}" if c.scaling else "public bound"))

        groups = list(sel.groupby(sel["config"].map(setting), sort=True)) if len(sel) else []
        for settings, g in groups or [("", sel)]:
            rows.append({"data set": w["dataset"], "clients": w["n_clients"], "method": w["method"],
                         "paper (%)": claim.value, "ours (%)": mean_std(g["accuracy"]) if len(g) else "not run",
                         "settings": settings})
    return pd.DataFrame(rows)


def table2_text(runs: pd.DataFrame) -> dict[str, str]:
    """Phrases for a summary of Table 2 from runs with PM at one setting (:func:`ldptut.runcache.records_table`
    rows, one run per data set, number of clients and method, e.g. the stored paper-scale runs), for each data set
    ``ds`` of the runs and the numbers of clients where all three methods ran: ``{ds}_ours`` ("a / b / c % with n
    clients, ...", FedAvg / PrivateFL / PD-LDPFL), ``{ds}_paper`` (Table 2's numbers of the same cells),
    ``{ds}_fedavg_above`` (our FedAvg minus the paper's, points, "lo to hi"), ``{ds}_lead`` and ``{ds}_paper_lead``
    (PD-LDPFL − FedAvg per number of clients, points) and ``{ds}_clients``. Raises on two runs of one cell."""
    paper = {(dict(r.setting)["dataset"], dict(r.setting)["n_clients"], dict(r.setting)["method"]): r.value
             for r in REPORTED}
    order = ("fedavg", "privatefl", "pd_ldpfl")
    out: dict[str, str] = {}
    for ds, g in runs.groupby("dataset", sort=False):
        cells = [(c.n_clients, c.method) for c in g["config"]]
        if len(set(cells)) < len(cells):
            raise ValueError(f"two runs of one Table 2 cell on {ds}: give one run per number of clients and method")
        acc = dict(zip(cells, g["accuracy"]))
        ns = sorted({n for n, _ in acc if all((n, m) in acc and (ds, n, m) in paper for m in order)})
        if not ns:
            continue
        out[f"{ds}_ours"] = ", ".join(" / ".join(f"{acc[(n, m)]:.1f}" for m in order) + f" % with {n} clients"
                                      for n in ns)
        out[f"{ds}_paper"] = ", ".join(" / ".join(f"{paper[(ds, n, m)]:g}" for m in order) for n in ns)
        above = [acc[(n, "fedavg")] - paper[(ds, n, "fedavg")] for n in ns]
        out[f"{ds}_fedavg_above"] = f"{min(above):.1f} to {max(above):.1f}"
        out[f"{ds}_lead"] = ", ".join(f"{acc[(n, 'pd_ldpfl')] - acc[(n, 'fedavg')]:+.1f}" for n in ns)
        out[f"{ds}_paper_lead"] = ", ".join(f"{paper[(ds, n, 'pd_ldpfl')] - paper[(ds, n, 'fedavg')]:+.1f}" for n in ns)
        out[f"{ds}_clients"] = ", ".join(map(str, ns))
    return out


# ------------------------------------------------------------------------------------ the controls' tables
_SHORT = {"fedavg": "FedAvg", "privatefl": "PrivateFL", "pd_ldpfl": "PD-LDPFL", "output_only": "output only"}


def noise_cost(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 2 beside its control: for every run with PM in ``runs`` (rows of :func:`ldptut.runcache.records_table`)
    whose twin without noise (:func:`without_noise`) is there too, the final test accuracy (%) with PM, without
    noise and the difference (what PM costs, in points; NaN where the PM run diverged). One row per data set,
    rounds, training images, variant, number of clients, seed, method and ε; runs of other settings are matched
    the same way."""
    cols = ["dataset", "rounds", "images", "variant", "clients", "seed", "method", "ε"]
    if not len(runs):
        return pd.DataFrame(columns=cols + ["with PM (%)", "no noise (%)", "PM costs (points)"])
    acc = dict(zip(runs["key"], runs["accuracy"]))
    rows = []
    for c, a in zip(runs["config"], runs["accuracy"]):
        if c.mechanism is None or c.scaling is None:
            continue
        twin = without_noise(c).key()
        if twin not in acc:
            continue
        rows.append({"dataset": c.dataset, "rounds": c.rounds, "images": c.n_train or "all", "variant": c.variant,
                     "clients": c.n_clients, "seed": c.seed, "method": c.method, "ε": c.epsilon, "with PM (%)": a,
                     "no noise (%)": acc[twin], "PM costs (points)": acc[twin] - a})
    return pd.DataFrame(rows, columns=cols + ["with PM (%)", "no noise (%)", "PM costs (points)"]).drop_duplicates(cols)


_cell, _paired, _finite_accuracy = interval_cell, paired_cell, finite_accuracy


def sweep_table(runs: pd.DataFrame, *, methods: Sequence[str] = ("fedavg", "privatefl", "pd_ldpfl")) -> pd.DataFrame:
    """The ε sweep (rows of :func:`ldptut.runcache.records_table`, one setting): per ε (per weight per round; "none":
    without noise) each method's final test accuracy (%) as mean [95 % t interval] over seeds, diverged runs counted
    apart; "PD-LDPFL − FedAvg", the paired difference per seed; and "gain beyond no noise", that difference minus the
    same seed's difference without noise, the quantity the paper's claim is about: if decoupling absorbs
    LDP-induced heterogeneity, it is positive and grows as ε falls. Seeds where a run diverged drop out of the
    paired columns."""
    if not len(runs):
        return pd.DataFrame()
    runs = runs.assign(method=runs["config"].map(lambda c: c.method),
                       eps=runs["config"].map(lambda c: math.inf if c.mechanism is None else float(c.epsilon)))
    runs = runs[runs["method"].isin(methods)]

    def acc(eps: float, method: str) -> pd.Series:   # by seed, NaN where the run diverged; absent if not run
        sel = runs[(runs["eps"] == eps) & (runs["method"] == method)]
        return pd.Series(_finite_accuracy(sel).to_numpy(dtype=float), index=sel["seed"].to_numpy())

    clear = acc(math.inf, "pd_ldpfl") - acc(math.inf, "fedavg") if math.inf in set(runs["eps"]) else None
    rows = []
    for eps in sorted(set(runs["eps"]), reverse=True):
        row = {"ε per weight per round": "none" if eps == math.inf else f"{eps:g}"}
        for m in methods:
            row[f"{_SHORT.get(m, m)} (%)"] = _cell(acc(eps, m))
        if {"pd_ldpfl", "fedavg"} <= set(methods):
            row["PD-LDPFL − FedAvg (points)"] = _paired(acc(eps, "pd_ldpfl"), acc(eps, "fedavg"))
            if clear is not None:
                row["gain beyond no noise (points)"] = ("" if eps == math.inf else
                                                        _paired(acc(eps, "pd_ldpfl") - acc(eps, "fedavg"), clear))
        rows.append(row)
    return pd.DataFrame(rows)


def sweep_gain_text(table: pd.DataFrame, n_seeds: int) -> str:
    """One sentence for the prose: :func:`sweep_table`'s "gain beyond no noise" per ε, in accuracy points, with the
    unit and the interval said once in front so that a cell without a number ("no seed with both runs finite")
    reads as a phrase. Empty when the table has no such column (no run without noise)."""
    col = "gain beyond no noise (points)"
    if col not in table:
        return ""
    cells = [f"ε = {e}: {v.removesuffix(' (1 seed)') if n_seeds == 1 else v}"
             for e, v in zip(table["ε per weight per round"], table[col]) if v]
    how = (f"paired by seed over {n_seeds} seeds, 95 % t intervals" if n_seeds != 1 else
           "one seed, no interval")
    return f"Its change from the no-noise lead (accuracy points, {how}; section 4): " + "; ".join(cells) + "."


def sweep_lead_text(runs: pd.DataFrame) -> str:
    """One sentence on the ε sweep's test of the paper's claim (rows of :func:`ldptut.runcache.records_table`, one
    setting): PD-LDPFL's lead over FedAvg (accuracy points, paired by seed, :func:`sweep_table`) without noise and at
    each ε per weight per round, and whether it is larger at some ε than without noise (the claim predicts that it
    grows as ε falls): said as shown only where the gain over the no-noise lead, paired by seed, has a 95 % t interval
    above 0. Empty without FedAvg and PD-LDPFL runs."""
    table = sweep_table(runs)
    col = "PD-LDPFL − FedAvg (points)"
    if not len(table) or col not in table:
        return ""
    runs = runs.assign(method=runs["config"].map(lambda c: c.method),
                       eps=runs["config"].map(lambda c: math.inf if c.mechanism is None else float(c.epsilon)))

    def lead(eps: float) -> pd.Series:
        sel = runs[runs["eps"] == eps]
        by = {m: pd.Series(_finite_accuracy(g).to_numpy(dtype=float), index=g["seed"].to_numpy())
              for m, g in sel.groupby("method")}
        if "pd_ldpfl" not in by or "fedavg" not in by:
            return pd.Series(dtype=float)
        return (by["pd_ldpfl"] - by["fedavg"]).dropna()

    seeds = len(set(runs["seed"]))
    one = " (1 seed)"   # said once at the end when the sweep has one seed
    cells = [f"{v.removesuffix(one) if seeds == 1 else v} {'without noise' if e == 'none' else f'at ε = {e}'}"
             for e, v in zip(table["ε per weight per round"], table[col])]
    out = (f"PD-LDPFL's lead over FedAvg is {', '.join(cells)} per weight per round (accuracy points, "
           f"{seeds} seed{'s' if seeds != 1 else ''})")
    clear = lead(math.inf)
    if not len(clear):
        return out + "."
    larger, shown = [], []
    for e in sorted(set(runs["eps"]) - {math.inf}):
        gain = (lead(e) - clear).dropna()
        if len(gain) and gain.mean() > 0:
            larger.append(f"{e:g}")
            ci = t_interval(gain)
            if ci is not None and ci[0] > 0:
                shown.append(f"{e:g}")
    if shown:
        return out + f": larger than without noise at ε = {', '.join(shown)} (95 % interval over seeds above 0)."
    if larger:
        return (out + f": larger than without noise only at ε = {', '.join(larger)}, where the gain's 95 % interval "
                "over seeds does not exclude 0 (or, with one seed, there is none).")
    return out + ": the claim predicts that it grows as ε falls, and it does not."


def sweep_words(runs: pd.DataFrame) -> dict[str, str]:
    """Phrases for the prose about one ε sweep (rows of :func:`ldptut.runcache.records_table`, one setting; empty
    when there are none): "setting" (clients, rounds, training images, seeds), "lead_<ε>" (PD-LDPFL − FedAvg in
    points, paired by seed, :func:`sweep_table`; "lead_none" without noise), "cost_<ε>" (what PM costs a run, in
    points, smallest to largest over methods and seeds, :func:`noise_cost`) and "accuracy_<ε>" (each method's final
    test accuracy, %, or its count of diverged runs)."""
    if not len(runs):
        return {}
    cfgs = list(runs["config"])
    if len({(c.dataset, c.n_clients, c.rounds, c.n_train, c.variant) for c in cfgs}) != 1:
        raise ValueError("runs: sweep_words takes the runs of one setting (data set, clients, rounds, images, "
                         "variant)")
    c0, seeds = cfgs[0], sorted(set(runs["seed"]))
    images = "all" if c0.n_train is None else f"{c0.n_train:,}"
    words = {"setting": f"{c0.n_clients} clients, {c0.rounds} rounds on {images} training images, "
                        f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}"}
    table = sweep_table(runs)
    cols = [c for c in table if c.endswith(" (%)")]
    for _, row in table.iterrows():
        e = row["ε per weight per round"]
        if "PD-LDPFL − FedAvg (points)" in table:
            words[f"lead_{e}"] = row["PD-LDPFL − FedAvg (points)"]
        words[f"accuracy_{e}"] = ", ".join(f"{c.removesuffix(' (%)')} {row[c]}" for c in cols)
    cost = noise_cost(runs).dropna(subset=["PM costs (points)"])
    for e, part in cost.groupby("ε"):
        lo, hi = part["PM costs (points)"].min(), part["PM costs (points)"].max()
        words[f"cost_{e:g}"] = f"{number_text(lo, '+.1f')} to {number_text(hi, '+.1f')}"   # no signed zero
    return words


def plot_epsilon_sweep(runs: pd.DataFrame, *, methods: Sequence[str] = ("fedavg", "privatefl", "pd_ldpfl"),
                       title: str = ""):
    """Final test accuracy (%) against ε per weight per round, one line per method of ``methods`` ("none", no noise,
    at the right; :func:`ldptut.plotting.plot_accuracy_vs_epsilon`). Returns the figure."""
    from ..plotting import plot_accuracy_vs_epsilon

    runs = runs.assign(series=runs["config"].map(lambda c: c.method),
                       eps=runs["config"].map(lambda c: math.inf if c.mechanism is None else float(c.epsilon)),
                       accuracy=_finite_accuracy(runs))
    return plot_accuracy_vs_epsilon(runs, series={m: _SHORT.get(m, m) for m in methods}, title=title)


# ------------------------------------------------------------------------------------ the chapter's checks and tables
def theorem1_check(w: Any, *, scale: float, epsilon: float, n: int,
                   generator: torch.Generator) -> tuple[pd.DataFrame, bool]:
    """Theorem 1 / Eq. 6 by sampling: ``n`` reports t * PM(w / t) of each weight of ``w`` (float64) at ``epsilon`` per
    weight, t = ``scale``. Returns the table (per weight: Eq. 6's variance, the variance of the law the package
    samples, both x 1e-6, and that law's kurtosis) and whether the draws' mean and variance lie within 5 standard
    errors of w and of the sampled law's variance (the exact standard error of a sample variance, from the law's 4th
    central moment: PM's reports are heavy-tailed at large ε)."""
    w = torch.as_tensor(w, dtype=torch.float64)
    draws = Piecewise(epsilon=epsilon).privatize((w / scale).expand(n, -1).contiguous(), generator=generator) * scale
    eq6 = scaled_variance(w, epsilon=epsilon, scale=scale)           # the paper's Eq. 6 (the real-valued PM)
    law = Piecewise(epsilon=epsilon, radius=scale)                   # the law the package samples (a grid law)
    values, probs = law.output_distribution(w)
    var = law.variance(w)
    m4 = (probs * (values - w[:, None]) ** 4).sum(-1)
    se = ((m4 - var ** 2) / n).sqrt()
    ok = bool(((draws.var(0) - var).abs() < 5 * se).all()) and bool(((draws.mean(0) - w).abs()
                                                                      < 5 * (var / n).sqrt()).all())
    table = pd.DataFrame({"w": w.tolist(), "Eq. 6 variance (x 1e-6)": (1e6 * eq6).round(decimals=4).tolist(),
                          "sampled law's variance (x 1e-6)": (1e6 * var).round(decimals=4).tolist(),
                          "kurtosis": (m4 / var ** 2).round(decimals=0).tolist()})
    return table, ok


def scale_leak_table(uploads: torch.Tensor, layout: Any, *, epsilon: float, public_bound: float = 0.1,
                     seed: int = 1) -> pd.DataFrame:
    """Claim check 1: what the server reads off Algorithm 2's reports (:func:`ldptut.attacks.piecewise_scale_leak`),
    per tensor of ``layout`` and for the whole model, with the client's own max as the scale and with a public bound:
    the largest relative error of the server's t̂ against the scale used, and the smallest and largest against each
    client's own largest weight (%). ``uploads``: (clients, d) weights before PM."""
    from .. import attacks
    from ..rng import generator

    rows = []
    d = uploads.shape[-1]
    for name, s in list(zip(layout.names, layout.slices)) + [("whole model", slice(0, d))]:
        for bound, label in ((None, "client's max (Algorithm 2)"), (public_bound, f"public bound {public_bound:g}")):
            leak = attacks.piecewise_scale_leak(uploads[:, s], epsilon=epsilon, public_bound=bound,
                                                generator=generator(seed, "leak", name, label))
            rows.append({"layer": name, "weights": s.stop - s.start, "scale": label,
                         "t̂ vs scale used, max (%)": round(100 * leak["rel_error"].max(), 3),
                         "t̂ vs own max, min (%)": round(100 * leak["max_error"].min(), 3),
                         "t̂ vs own max, max (%)": round(100 * leak["max_error"].max(), 3)})
    return pd.DataFrame(rows)


def clipped_table(uploads: torch.Tensor, layout: Any) -> tuple[pd.DataFrame, int, int]:
    """Claim check 4 on the clients' uploads (clients, d): per tensor of ``layout`` and for the whole model (the
    paper's t), the weights below -max(θ), which PM clips (:func:`outside_unit_share`): how many clients have any,
    how many in all, the largest share (%). Also the number of clients with any such weight of a layer (t per layer,
    the authors' code) and the total over the layers."""
    n = uploads.shape[0]
    share = pd.concat([outside_unit_share([uploads[i, s] for s in layout.slices]).assign(client=i) for i in range(n)])
    share["layer"] = share["tensor"].map(dict(enumerate(layout.names)))
    out = share.groupby("layer", sort=False).agg(
        **{"weights": ("weights", "first"), "clients with any": ("outside [-1, 1]", lambda v: int((v > 0).sum())),
           "clipped, all clients": ("outside [-1, 1]", "sum"), "largest share (%)": ("outside [-1, 1] (%)", "max")})
    whole = outside_unit_share([uploads[i] for i in range(n)])
    out.loc["whole model"] = [uploads.shape[-1], int((whole["outside [-1, 1]"] > 0).sum()),
                              int(whole["outside [-1, 1]"].sum()), float(whole["outside [-1, 1] (%)"].max())]
    out = out.astype({"weights": int, "clients with any": int, "clipped, all clients": int})
    n_any = int(share.groupby("client")["outside [-1, 1]"].sum().gt(0).sum())
    return out, n_any, int(out["clipped, all clients"].iloc[:-1].sum())


def smooth_mlp(input_shape: Sequence[int], num_classes: int, *, seed: int = 0) -> torch.nn.Module:
    """The model DLG attacks: a sigmoid MLP 784-64-10 without bias (DLG needs a smooth network; its own experiments
    use sigmoid activations)."""
    from ..models import build_model

    return build_model("mlp", input_shape=tuple(input_shape), num_classes=num_classes, hidden=(64,), bias=False,
                       activation="sigmoid", seed=seed)


def dlg_at_start(relu_model: torch.nn.Module, x0: torch.Tensor, y0: torch.Tensor, pool: torch.Tensor, *, lr: float,
                 steps: int, num_classes: int, epsilon: float = 8.0) -> tuple[bool, pd.DataFrame]:
    """Claim check 3 at the start of training: DLG (:func:`ldptut.attacks.dlg_attack`, LBFGS with a strong Wolfe
    line search) against one image's gradient of the sigmoid MLP (:func:`smooth_mlp`, seed 0) for FedAvg; for
    PD-LDPFL's base through identity transforms; for that base after Algorithm 2's PM at ``epsilon`` per weight (t
    per layer; the upload after one SGD step of learning rate ``lr``); with a differently initialised model (seed 1);
    and on ``relu_model`` (the chapter's ReLU base) in clear; then the trivial guess, the mean image of ``pool``.
    Returns whether FedAvg's and PD-LDPFL's base gradients are equal at the identity start, and one row per attack
    (MSE to the true image, "< 1e-6" below that; label right)."""
    from .. import attacks
    from ..fl import ParamLayout
    from ..personal import Extended, PersonalTransform
    from ..rng import generator

    shape = tuple(x0.shape[1:])
    smooth = smooth_mlp(shape, num_classes, seed=0)
    ext = Extended(smooth, PersonalTransform(kind="affine", a_shape=(1,) * len(shape), b_shape=shape),
                   PersonalTransform(kind="affine", a_shape=(1,), b_shape=(num_classes,)))
    fedavg_grad = attacks.observed_gradient(smooth, x0, y0)
    pd_grad = {k[len("base."):]: v for k, v in attacks.observed_gradient(ext, x0, y0).items() if k.startswith("base.")}
    lay = ParamLayout.from_model(smooth)
    flat_pd = lay.flatten(pd_grad)
    w0 = lay.flatten({k: v.detach() for k, v in smooth.named_parameters()})
    ctx = RoundContext(round=1, client_ids=torch.arange(1), layout=lay, global_vector=w0,
                       generators=[generator(2, "dlg-pm")], send="weights", num_samples=torch.ones(1))
    uploaded = LayerScaledPiecewise(epsilon=epsilon)((w0 - lr * flat_pd)[None], context=ctx)[0]
    noisy = (w0 - uploaded) / lr
    other = smooth_mlp(shape, num_classes, seed=1)
    relu_grad = attacks.observed_gradient(relu_model, x0, y0)
    rows = []
    for label, mdl, tgt in (("FedAvg, in clear", smooth, fedavg_grad),
                            ("PD-LDPFL base (identity transforms), in clear", smooth, flat_pd),
                            (f"PD-LDPFL base after Algorithm 2's PM (t per layer), ε = {epsilon:g} per weight", smooth,
                             noisy),
                            ("in clear, attacked with a differently initialised model", other, fedavg_grad),
                            ("the chapter's ReLU base (784-600-100-10), in clear", relu_model, relu_grad)):
        res = attacks.dlg_attack(mdl, tgt, input_shape=shape, num_classes=num_classes, steps=steps,
                                 generator=generator(3, "dlg"), line_search_fn="strong_wolfe")
        err = attacks.dlg_mse(res.inputs, x0).item()
        rows.append({"attack": label, "MSE to the true image": "< 1e-6" if err < 1e-6 else f"{err:.2g}",
                     "label right": bool((res.labels == y0).all())})
    rows.append({"attack": "trivial guess: the mean training image (no gradient)",
                 "MSE to the true image": f"{attacks.mean_image_mse(x0, pool).item():.2g}", "label right": None})
    same = all(torch.allclose(fedavg_grad[k], pd_grad[k]) for k in fedavg_grad)
    return same, pd.DataFrame(rows)


def table1_frame(records: Iterable[Any]) -> pd.DataFrame:
    """Table 1's runs (run records) as rows: input and output transform, l_sum (Sec. 2.4: the sum over rounds of the
    variance across clients of each client's loss on its own data after local training), the same with the loss read
    during training (the mean over the round's mini-batches), and the final test accuracy (%); NaN l_sum for a run
    that did not converge (the paper's "NAN")."""
    rows = []
    for rec in records:
        h = rec.history
        ok = bool(h["accuracy"].notna().all())
        rows.append({"input": rec.config.input_transform, "output": rec.config.output_transform,
                     "l_sum": float(h["loss_variance_after"].sum()) if ok else math.nan,
                     "l_sum (during training)": float(h["loss_variance"].sum()) if ok else math.nan,
                     "accuracy (%)": 100 * rec.final_accuracy})
    return pd.DataFrame(rows)


def table1_grid(frame: pd.DataFrame, value: str, transforms: Sequence[str]) -> pd.DataFrame:
    """One quantity of :func:`table1_frame` as the paper's grid: input transforms (rows) x output transforms."""
    return frame.pivot(index="input", columns="output", values=value).loc[list(transforms), list(transforms)]


def init_frame(records: Iterable[Any]) -> pd.DataFrame:
    """Fig. 6's runs as rows: the start a and b of both transforms, the final test accuracy (%) of the global base
    and the mean over the last round's clients of their extended models' (``personal_accuracy``)."""
    return pd.DataFrame([{"a": r.config.a_init, "b": r.config.b_init, "global (%)": 100 * r.final_accuracy,
                          "extended (%)": 100 * float(r.history["personal_accuracy"].iloc[-1])} for r in records])


def plot_init_sweep(frame: pd.DataFrame, *, title: str = ""):
    """:func:`init_frame` as two heat maps (global base, extended models: test accuracy, %), start a (rows) against
    start b, each cell labelled. Returns the figure."""
    from ..display import figure

    fig, axes = figure(2, sharey=True)
    im = None
    for ax, col in zip(axes, ("global (%)", "extended (%)")):
        g = frame.pivot(index="a", columns="b", values=col)
        im = ax.imshow(g.values, origin="lower", cmap="viridis", vmin=0, vmax=100, aspect="auto")
        ax.set(xticks=range(len(g.columns)), xticklabels=[f"{v:g}" for v in g.columns],
               yticks=range(len(g.index)), yticklabels=[f"{v:g}" for v in g.index], xlabel="b at the start",
               title=f"{col[:-4]} model")
        for (i, j), v in pd.DataFrame(g.values).stack().items():
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", color="w" if v < 60 else "k", fontsize=9)
    axes[0].set_ylabel("a at the start")
    fig.colorbar(im, ax=axes, label="test accuracy (%)")
    if title:
        fig.suptitle(title)
    return fig


def table2_frame(records: Iterable[Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 2's runs (run records, with PM and their twins without noise): all of them
    (:func:`ldptut.runcache.records_table`) and those with PM, with ``method`` ("pd_ldpfl (public bound)" for the
    public bound) and ``variant``."""
    from ..runcache import records_table

    every = records_table(records)
    pm = every[every["config"].map(lambda c: c.mechanism is not None)].copy()
    pm["method"] = pm["config"].map(lambda c: c.method + ("" if c.scaling else " (public bound)"))
    pm["variant"] = pm["config"].map(lambda c: c.variant)
    return every, pm


def plot_rounds(records: Iterable[Any], *, n_clients: int, variant: str, title: str = ""):
    """Test accuracy of the global model (%) per round of the runs with PM at ``n_clients`` clients in ``variant``
    (one line per method; the public bound apart). Returns the figure."""
    from ..display import figure, integer_rounds

    fig, ax = figure(1, height=3.4)
    for rec in records:
        c = rec.config
        if c.n_clients == n_clients and c.mechanism and c.variant == variant:
            label = _SHORT.get(c.method, c.method) + ("" if c.scaling else " (public bound 0.1)")
            ax.plot(rec.history["round"], 100 * rec.history["accuracy"], marker="o", label=label)
    ax.set(xlabel="communication round", ylabel="global model test accuracy (%)", title=title)
    integer_rounds(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def fig8_frame(records: Iterable[Any]) -> pd.DataFrame:
    """Fig. 8's runs as rows: Dirichlet α, ε (per weight per round), method, l_sum (NaN if the run diverged) and the
    final test accuracy (%)."""
    return pd.DataFrame([{"alpha": r.config.dirichlet_alpha, "ε": r.config.epsilon, "method": r.config.method,
                          "l_sum": float(r.history["loss_variance_after"].sum())
                          if r.history["accuracy"].notna().all() else math.nan,
                          "accuracy (%)": 100 * r.final_accuracy} for r in records],
                        columns=["alpha", "ε", "method", "l_sum", "accuracy (%)"])


def plot_fig8(frame: pd.DataFrame, *, title: str = ""):
    """:func:`fig8_frame` as bars: l_sum (top) and test accuracy (bottom) per method at each (α, ε). Returns the
    figure."""
    from ..display import figure

    fig, axes = figure(1, 2, height=5.6)
    methods = list(dict.fromkeys(frame["method"]))
    cells = list(dict.fromkeys(zip(frame["alpha"], frame["ε"])))
    width = 0.8 / max(len(methods), 1)
    for ax, col, ylabel in zip(axes, ("l_sum", "accuracy (%)"), ("l_sum", "test accuracy (%)")):
        for k, m in enumerate(methods):
            vals = [frame[(frame["alpha"] == a) & (frame["ε"] == e) & (frame["method"] == m)][col].iloc[0]
                    for a, e in cells]
            ax.bar([i + k * width for i in range(len(cells))], vals, width, label=_SHORT.get(m, m))
        ax.set(xticks=[i + 0.4 - width / 2 for i in range(len(cells))],
               xticklabels=[f"α = {a:g}, ε = {e:g}" for a, e in cells], ylabel=ylabel)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


@dataclass
class PaperScale:
    """:func:`paper_scale`'s result: ``compare`` (:func:`compare`'s rows that ran), ``cells`` (Table 2 at paper
    scale, "with PM / without noise" in %, per data set, variant and number of clients; empty without twins) and
    ``words`` (phrases for the prose: :func:`table2_text`'s, "control" (PD-LDPFL's lead over FedAvg with PM and
    without, per data set and number of clients) and "cost" (what PM moves a run, smallest to largest))."""

    compare: pd.DataFrame
    cells: pd.DataFrame
    words: dict[str, str]


def paper_scale(stored: pd.DataFrame) -> PaperScale:
    """Table 2 at paper scale from the stored runs (:func:`ldptut.runcache.load_runs`): the paper-vs-ours rows, each
    cell with PM at ε = 8 per weight per round beside its twin without noise (50 rounds, all training images, Table
    2's partition and learning rate), and the phrases the chapter's prose glues (seed 0, the authors' code's reading,
    Algorithm 2's scale)."""
    table = compare(stored)
    t2 = stored[stored["config"].map(lambda c: c.rounds == 50 and c.n_train is None and c.partition == "dirichlet"
                                     and c.dirichlet_alpha == 1.0 and c.lr == 0.05)] if len(stored) else stored
    cost = noise_cost(t2)
    with_pm = t2[t2["config"].map(lambda c: c.mechanism is not None and c.scaling == "max"
                                  and c.variant == "authors_code" and c.seed == 0)] if len(t2) else t2
    words = table2_text(with_pm) if len(with_pm) else {}
    cells = pd.DataFrame()
    if len(cost):
        cost = cost.assign(cell=[f"{a:.1f} / {b:.1f}" for a, b in zip(cost["with PM (%)"], cost["no noise (%)"])])
        cells = cost.pivot_table(index=["dataset", "variant", "clients"], columns="method", values="cell",
                                 aggfunc="first").reindex(columns=["fedavg", "privatefl", "pd_ldpfl"])
        acc = cost.pivot_table(index=["dataset", "clients"], columns="method", values=["with PM (%)", "no noise (%)"])
        lead_pm = acc[("with PM (%)", "pd_ldpfl")] - acc[("with PM (%)", "fedavg")]
        lead_clear = acc[("no noise (%)", "pd_ldpfl")] - acc[("no noise (%)", "fedavg")]
        names = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
        words["control"] = "; ".join(f"{names.get(ds, ds)}, {n} clients: {number_text(lead_pm[(ds, n)], '+.1f')} with PM, "
                                     f"{number_text(lead_clear[(ds, n)], '+.1f')} without" for ds, n in lead_pm.index
                                     if pd.notna(lead_pm[(ds, n)]) and pd.notna(lead_clear[(ds, n)]))
        words["cost"] = (f"{number_text(cost['PM costs (points)'].min(), '+.1f')} to "
                         f"{number_text(cost['PM costs (points)'].max(), '+.1f')}")
        gap = (lead_pm.round(1) - lead_clear.round(1)).abs().dropna()   # as the rounded leads read
        if len(gap):
            words["control_gap"] = f"{gap.max():.1f}"
            words["control_cells"] = str(len(gap))
    return PaperScale(compare=table[table["ours (%)"] != "not run"].reset_index(drop=True), cells=cells, words=words)
