"""LDP federated learning under personalized privacy budgets (Wu, Xu, Zhu, Appl. Sci. 13:4168, 2023).

Client side (Section 3.1, Algorithms 1 and 2): each client trains a logistic regression from the
global model with scikit-learn's per-sample SGD and its "optimal" learning-rate schedule
(:func:`optimal_learning_rate`), on a sample of its data drawn with probability ``q`` (IID case),
clips every weight to [-c, c] and perturbs it: Gaussian noise with the paper's σ_i
(:func:`paper_gaussian_sigma`, IID) or the stochastic sign ``ldpsign`` (non-IID), both in
:mod:`ldptut.mechanisms` (:class:`~ldptut.mechanisms.Gaussian`, :class:`~ldptut.mechanisms.LdpSign`).

Server side (Section 4): aggregation A (arithmetic mean), B (:class:`WeightedBySigma`, α_i ∝ 1/σ_i)
and C (:class:`ProbabilitySelection`, keep the clients with P_i > ω, ω ~ U(0, 1) per round); in the
non-IID protocol the server takes the sign of the aggregate (:class:`SignOf`). All are
:class:`ldptut.fl.Aggregator` callables, so :func:`ldptut.fl.run_fedavg` accepts them too.

:func:`simulate` runs many such trainings at once: every (run, client) pair is one row of a stacked
tensor, so a whole grid of privacy profiles, aggregations and seeds costs about as much as one run
(the per-sample SGD loop is over sample positions, vectorised over runs, clients and weights).

Model: one-vs-rest logistic regression, as scikit-learn's ``SGDClassifier(loss="log_loss")`` fits
for more than two classes: K independent binary classifiers (class k vs the rest), prediction
argmax_k (w_k · x + b_k). The flattened model is (W row by row, then b): d = K (D + 1).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pandas as pd
import torch

from ._validate import pos_int, real
from .fl import ParamLayout, RoundContext, mean_aggregator  # A: the arithmetic mean (Wu et al. Sec. 5.2)
from .mechanisms import Gaussian, LdpSign, Mechanism
from .rng import generator

__all__ = ["SIGMA_READINGS", "paper_gaussian_sigma", "optimal_eta0", "optimal_learning_rate", "inverse_sigma_weights",
           "selection_probabilities", "WeightedBySigma", "ProbabilitySelection", "SignOf", "mean_aggregator",
           "PersonalizedPerturbation", "RunSpec", "simulate", "SimulationResult", "final_rounds", "linear_layout",
           "Experiment", "load_experiment", "client_mechanisms", "grid_scenarios", "grid_runs", "grid_config", "run_grid",
           "load_grid_runs"]

#: Readings of the IID noise formula of Section 3.1, whose operators were lost in the text we have
#: ("σ i = 4 q 2 R 1 q ( 2 ϵ i 2 l o g 1 δ i + 1 ϵ i )"); see :func:`paper_gaussian_sigma`.
SIGMA_READINGS = ("sqrt_all", "bracket_outside")


def paper_gaussian_sigma(epsilon: float, *, delta: float, q: float, rounds: int, reading: str = "sqrt_all") -> float:
    """σ_i of Wu et al. (2023), Section 3.1 (after Abadi et al., CCS 2016), in one of two readings.

    ``"sqrt_all"`` (adopted):  σ = 4 q sqrt( 2R / (1 - q) · (2 ln(1/δ) / ε² + 1/ε) ).
    ``"bracket_outside"``:     σ = 4 q sqrt( 2R / (1 - q) ) · (2 ln(1/δ) / ε² + 1/ε).

    Why the first: Abadi et al.'s moment bound for the sampled Gaussian mechanism (Lemma 3,
    α(λ) <= q² λ(λ+1) / ((1 - q) σ²) per step), summed over R steps and combined with the tail bound
    at λ = 2 ln(1/δ)/ε, requires σ² >= (2 R q² / (1 - q)) (2 ln(1/δ)/ε² + 1/ε): exactly the tokens of
    the formula under one square root, up to the leading constant 4, which we keep as printed. The
    second reading keeps the same tokens with the bracket outside the root (σ grows like 1/ε²).
    Note that neither contains the clipping bound c: the formula is for unit sensitivity.
    """
    eps = real(epsilon, "epsilon", positive=True)
    dl = real(delta, "delta", positive=True)
    qq = real(q, "q", positive=True)
    if not (0 < dl < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not (0 < qq < 1):
        raise ValueError(f"q must be in (0, 1) for this formula (it divides by 1 - q), got {q}")
    r = pos_int(rounds, "rounds")
    bracket = 2.0 * math.log(1.0 / dl) / eps ** 2 + 1.0 / eps
    if reading == "sqrt_all":
        return 4.0 * qq * math.sqrt(2.0 * r / (1.0 - qq) * bracket)
    if reading == "bracket_outside":
        return 4.0 * qq * math.sqrt(2.0 * r / (1.0 - qq)) * bracket
    raise ValueError(f"unknown reading {reading!r}; known: {SIGMA_READINGS}")


# ------------------------------------------------------------------------- scikit-learn's "optimal"
def optimal_eta0(alpha: float) -> float:
    """Initial rate of scikit-learn's "optimal" schedule for the log loss: typw / max(1, |g|) = alpha^(-1/4).

    ``sklearn/linear_model/_sgd_fast.pyx.tp`` (``_plain_sgd``, after L. Bottou's sgd): typw =
    sqrt(1 / sqrt(alpha)); eta0 = typw / max(1, dloss(y=1, p=-typw)); for the (half) binomial loss
    dloss = sigmoid(p) - y lies in (-1, 0), so eta0 = typw.
    """
    a = real(alpha, "alpha", positive=True)
    typw = math.sqrt(1.0 / math.sqrt(a))
    dloss = 1.0 / (1.0 + math.exp(typw)) - 1.0  # sigmoid(-typw) - 1
    return typw / max(1.0, dloss)


def optimal_learning_rate(t: Any, *, alpha: float) -> Any:
    """η_t = 1 / (alpha (t0 + t - 1)), t0 = 1 / (alpha eta0): scikit-learn's ``learning_rate="optimal"``.

    ``t`` counts the samples seen (1 for the first); η_1 = :func:`optimal_eta0` (alpha). Accepts a
    float or a tensor of counts.
    """
    a = real(alpha, "alpha", positive=True)
    t0 = 1.0 / (a * optimal_eta0(a))
    return 1.0 / (a * (t0 + t - 1.0))


# ------------------------------------------------------------------------------------ aggregation
def _rho(sigmas: Sequence[float]) -> torch.Tensor:
    s = torch.as_tensor([real(v, "sigma", positive=True) for v in sigmas], dtype=torch.float64)
    if s.numel() == 0:
        raise ValueError("sigmas must hold one value per client")
    return 1.0 / s


def inverse_sigma_weights(sigmas: Sequence[float]) -> torch.Tensor:
    """α_i = ρ_i / Σ_j ρ_j with ρ_i = 1/σ_i (Wu et al. Section 4.1); sums to one."""
    rho = _rho(sigmas)
    return rho / rho.sum()


def selection_probabilities(sigmas: Sequence[float]) -> torch.Tensor:
    """P_i = ρ_i / Σ_j ρ_j (Wu et al. Section 4.2): the same numbers as the weights of B."""
    return inverse_sigma_weights(sigmas)


class WeightedBySigma:
    """B: weighted mean Σ α_i G̃_i / Σ α_i, α_i ∝ 1/σ_i (Wu et al. Section 4.1), over the clients of the round.

    ``sigmas`` holds σ_i for every client id (public: derived from the public ε_i).
    """

    def __init__(self, sigmas: Sequence[float]):
        self.rho = _rho(sigmas)

    def weights(self, client_ids: torch.Tensor) -> torch.Tensor:
        r = self.rho[client_ids.cpu()]
        return r / r.sum()

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        return self.weights(context.client_ids).to(payloads) @ payloads

    def __repr__(self) -> str:
        return f"WeightedBySigma(n={self.rho.numel()})"


class ProbabilitySelection:
    """C: probability-based selection (Wu et al. Section 4.2).

    P_i = ρ_i / Σ_j ρ_j over all N clients (computed once, before training). Each round the server
    draws ω ~ U(0, 1) from ``context.server_generator`` and averages the clients with P_i > ω.
    Because the P_i sum to one, every P_i <= 1 and often **no client passes** (probability
    1 - max_i P_i per round). The paper does not say what happens then; ``on_empty`` decides:
    ``"keep"`` (default) keeps the previous global model (the round is skipped), ``"all"`` averages
    all clients (falls back to A). :attr:`selected` records how many clients were kept each call.
    """

    def __init__(self, sigmas: Sequence[float], *, on_empty: str = "keep"):
        if on_empty not in ("keep", "all"):
            raise ValueError(f"on_empty must be 'keep' or 'all', got {on_empty!r}")
        self.probabilities = selection_probabilities(sigmas)
        self.on_empty = on_empty
        self.selected: list[int] = []

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        if context.server_generator is None:
            raise ValueError("ProbabilitySelection needs context.server_generator (the server's ω draw)")
        omega = torch.rand((), generator=context.server_generator, dtype=torch.float64).item()
        keep = self.probabilities[context.client_ids.cpu()] > omega
        self.selected.append(int(keep.sum()))
        if not bool(keep.any()):
            if self.on_empty == "keep":
                return context.global_vector.to(payloads).clone()
            return payloads.mean(dim=0)
        return payloads[keep.to(payloads.device)].mean(dim=0)

    def __repr__(self) -> str:
        return f"ProbabilitySelection(n={self.probabilities.numel()}, on_empty={self.on_empty!r})"


class SignOf:
    """Non-IID server rule: W = sign(f(G̃_1, ..., G̃_N)) (Wu et al. Section 3.2, Algorithm 2 line 7); sign(0) = 0."""

    def __init__(self, aggregator: Any):
        self.aggregator = aggregator

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        return torch.sign(self.aggregator(payloads, context=context))

    def __repr__(self) -> str:
        return f"SignOf({self.aggregator!r})"


class PersonalizedPerturbation:
    """Client-side privatizer with one mechanism per client id (personalized ε_i); ``None`` = no noise.

    Row i of the payloads (client ``context.client_ids[i]``) goes through ``mechanisms[id]`` with
    ``context.generators[i]``. Usable as a :class:`ldptut.fl.Privatizer`.
    """

    def __init__(self, mechanisms: Sequence[Optional[Mechanism]]):
        self.mechanisms = list(mechanisms)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        out = payloads.clone()
        for row, (cid, g) in enumerate(zip(context.client_ids.tolist(), context.generators)):
            mech = self.mechanisms[cid]
            if mech is not None:
                out[row] = mech.privatize(payloads[row], generator=g)
        return out


# ------------------------------------------------------------------------------------- simulation
def linear_layout(num_features: int, num_classes: int) -> ParamLayout:
    """Flattened one-vs-rest linear model: W (K, D) row by row, then b (K): d = K (D + 1)."""
    k, dim = num_classes, num_features
    return ParamLayout(names=("weight", "bias"), shapes=(torch.Size([k, dim]), torch.Size([k])),
                       slices=(slice(0, k * dim), slice(k * dim, k * dim + k)))


@dataclass
class RunSpec:
    """One training run of :func:`simulate`.

    ``partition``: one index tensor into ``x_train`` per client. ``mechanisms``: one per client
    (``None`` = no noise); they clip to their own range. ``aggregator``: an :class:`ldptut.fl.Aggregator`
    (A, B, C above). ``sign``: the non-IID protocol of Algorithm 2 (a client without a mechanism sends
    sign(G), the server should use :class:`SignOf`). ``q``: per-round sampling probability of each
    local sample (1 = all). ``info``: free labels copied into the history (e.g. profile, aggregation).
    """

    seed: int
    partition: Sequence[torch.Tensor]
    mechanisms: Sequence[Optional[Mechanism]]
    aggregator: Any
    clip: float
    q: float = 1.0
    sign: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)


def _local_order(part: torch.Tensor, *, q: float, passes: int, g: torch.Generator) -> torch.Tensor:
    """The sample sequence of one client in one round: keep each sample with probability q, then
    ``passes`` shuffled passes over the kept ones (scikit-learn's shuffle=True)."""
    keep = part[torch.rand(len(part), generator=g, dtype=torch.float64) < q] if q < 1 else part
    return torch.cat([keep[torch.randperm(len(keep), generator=g)] for _ in range(passes)])


def simulate(runs: Sequence[RunSpec], *, x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor,
             y_test: torch.Tensor, num_classes: int, rounds: int, local_passes: int = 1, alpha: float = 1e-4,
             dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu", progress: bool = True,
             desc: str = "rounds") -> "SimulationResult":
    """Train every run of ``runs`` (Wu et al. Algorithms 1 / 2) and return one row per (run, round).

    Per round r and client i of every run: the sample sequence (``q``-sampling with
    ``generator(seed, "round", r, "client", i, "sample")``), ``local_passes`` passes of per-sample
    SGD from the global model — scikit-learn's update for the log loss with L2 penalty ``alpha``:
    η_t from :func:`optimal_learning_rate` with t counting the client's samples since the start
    (``partial_fit`` semantics), w <- max(0, 1 - η α) w - η (σ(p) - y) x, b <- b - η (σ(p) - y) —
    then clip to [-c, c], privatize (``generator(seed, "round", r, "client", i, "privatize")``) and
    aggregate (server draws from ``generator(seed, "round", r, "server")``). The global model starts
    at 0 (Section 3). Columns: run, round, accuracy (in [0, 1]), clients_used (clients averaged by
    the aggregator when it reports it, else all), seconds, and the run's ``info``; the final global
    models are in :attr:`SimulationResult.weights`.
    """
    from tqdm import tqdm

    if not runs:
        raise ValueError("runs must hold at least one RunSpec")
    rounds = pos_int(rounds, "rounds")
    local_passes = pos_int(local_passes, "local_passes")
    alpha = real(alpha, "alpha", positive=True)
    n_clients = len(runs[0].partition)
    for k, run in enumerate(runs):
        if len(run.partition) != n_clients or len(run.mechanisms) != n_clients:
            raise ValueError(f"run {k}: every run needs the same number of clients ({n_clients}) in partition and mechanisms")
        if not (0 < run.q <= 1):
            raise ValueError(f"run {k}: q must be in (0, 1], got {run.q}")
        real(run.clip, "clip", positive=True)
    device = torch.device(device)
    xtr = x_train.reshape(len(x_train), -1).to(device=device, dtype=dtype)
    xte = x_test.reshape(len(x_test), -1).to(device=device, dtype=dtype)
    ytr = torch.nn.functional.one_hot(y_train.to(device).long(), num_classes).to(dtype)  # OvR targets in {0, 1}
    yte = y_test.to(device)
    n_runs, dim, k = len(runs), xtr.shape[1], num_classes
    layout = linear_layout(dim, k)
    t0 = 1.0 / (alpha * optimal_eta0(alpha))
    glob = torch.zeros(n_runs, layout.numel, dtype=dtype, device=device)
    t_seen = torch.ones(n_runs, n_clients, dtype=dtype, device=device)  # sklearn's t_ starts at 1
    sizes = torch.tensor([[len(p) for p in run.partition] for run in runs], dtype=torch.float32)
    rows = []
    for r in tqdm(range(1, rounds + 1), desc=desc, disable=not progress, leave=False, mininterval=2.0):
        start = time.perf_counter()
        orders = [[_local_order(p.to("cpu"), q=run.q, passes=local_passes,
                                g=generator(run.seed, "round", r, "client", i, "sample"))
                   for i, p in enumerate(run.partition)] for run in runs]
        length = max(len(o) for per_run in orders for o in per_run)
        idx = torch.full((n_runs, n_clients, max(length, 1)), -1, dtype=torch.long)
        for a, per_run in enumerate(orders):
            for i, o in enumerate(per_run):
                idx[a, i, :len(o)] = o
        idx = idx.to(device)
        w = glob[:, :k * dim].reshape(n_runs, 1, k, dim).expand(n_runs, n_clients, k, dim).clone()
        b = glob[:, k * dim:].reshape(n_runs, 1, k).expand(n_runs, n_clients, k).clone()
        for s in range(length):
            col = idx[:, :, s]
            active = (col >= 0).to(dtype)  # (runs, clients)
            safe = col.clamp(min=0)
            xs, ys = xtr[safe], ytr[safe]  # (runs, clients, D), (runs, clients, K)
            g = torch.sigmoid(torch.einsum("ackd,acd->ack", w, xs) + b) - ys
            eta = 1.0 / (alpha * (t0 + t_seen - 1.0)) * active  # 0 where the client has no sample left
            shrink = torch.clamp(1.0 - eta * alpha, min=0.0)
            eg = eta.unsqueeze(-1) * g
            w.mul_(shrink[..., None, None])
            w.view(-1, k, dim).baddbmm_(eg.reshape(-1, k, 1), xs.reshape(-1, 1, dim), alpha=-1.0)  # w -= eg ⊗ x
            b.sub_(eg)
            t_seen += active
        local = torch.cat([w.reshape(n_runs, n_clients, -1), b], dim=-1)  # (runs, clients, d)
        new_glob = torch.empty_like(glob)
        used = []
        for a, run in enumerate(runs):
            clipped = local[a].clamp(-run.clip, run.clip)
            gens = [generator(run.seed, "round", r, "client", i, "privatize", device=device) for i in range(n_clients)]
            ctx = RoundContext(round=r, client_ids=torch.arange(n_clients), layout=layout, global_vector=glob[a],
                               generators=gens, send="weights", num_samples=sizes[a],
                               server_generator=generator(run.seed, "round", r, "server"))
            payload = PersonalizedPerturbation(run.mechanisms)(clipped, context=ctx)
            if run.sign:
                no_mech = torch.tensor([m is None for m in run.mechanisms], device=device)
                payload = torch.where(no_mech[:, None], torch.sign(payload), payload)
            agg = run.aggregator
            inner = agg.aggregator if isinstance(agg, SignOf) else agg
            n_before = len(getattr(inner, "selected", []))
            new_glob[a] = agg(payload, context=ctx)
            sel = getattr(inner, "selected", None)
            used.append(sel[-1] if sel is not None and len(sel) > n_before else n_clients)
        glob = new_glob
        logits = torch.einsum("nd,akd->ank", xte, glob[:, :k * dim].reshape(n_runs, k, dim)) + glob[:, None, k * dim:]
        acc = (logits.argmax(-1) == yte).to(torch.float64).mean(-1)
        secs = (time.perf_counter() - start) / n_runs
        for a, run in enumerate(runs):
            rows.append({"run": a, "round": r, "accuracy": float(acc[a]), "clients_used": used[a],
                         "seconds": secs, **dict(run.info)})
    return SimulationResult(history=pd.DataFrame(rows), weights=glob, layout=layout)


@dataclass
class SimulationResult:
    """History (one row per run and round) and the final global models, (runs, d) in :func:`linear_layout`."""

    history: pd.DataFrame
    weights: torch.Tensor
    layout: ParamLayout

    def final(self) -> pd.DataFrame:
        """The last round of every run."""
        return final_rounds(self.history)


def final_rounds(history: pd.DataFrame) -> pd.DataFrame:
    """The last round of every run of a history (:func:`simulate`, :func:`run_grid`, :func:`load_grid_runs`):
    the rows whose round is the largest of their experiment (of the whole history without that column)."""
    if "experiment" in history:
        last = history.groupby("experiment")["round"].transform("max")
    else:
        last = history["round"].max()
    return history[history["round"] == last].reset_index(drop=True)


# ------------------------------------------------------------------------------ the paper's grids
@dataclass
class Experiment:
    """Data of one (protocol, dataset) experiment: a fixed train/test split and a partition per seed."""

    name: str
    protocol: str  # "iid" or "noniid"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    setting: Mapping[str, Any]
    dirichlet_alpha: float = 0.5
    notes: list = field(default_factory=list)
    data_seed: int = 0

    def partition(self, seed: int) -> list[torch.Tensor]:
        from . import partition as _p

        n = int(self.setting["n_clients"])
        if self.protocol == "iid":
            return _p.iid(len(self.y_train), n, seed=seed)
        return _p.dirichlet(self.y_train, n, alpha=self.dirichlet_alpha, seed=seed, num_classes=self.num_classes)

    def data(self) -> dict:
        return dict(x_train=self.x_train, y_train=self.y_train, x_test=self.x_test, y_test=self.y_test,
                    num_classes=self.num_classes)


def load_experiment(dataset: str, protocol: str, setting: Mapping[str, Any], *, train_size: Optional[int] = None,
                    test_size: Optional[int] = None, dirichlet_alpha: float = 0.5, data_seed: int = 0) -> Experiment:
    """The data of Wu et al.'s experiment on ``dataset`` ("digits", "fashion_mnist", "covertype", or
    "mnist" = real MNIST under the digits protocol, our extension), split once with ``data_seed``.

    Feature scales (the paper does not state them; c and σ are in weight units, so they matter):
    digits keep scikit-learn's raw pixel values 0..16; Fashion-MNIST uses pixel / 255; MNIST uses
    pixel / 255 * 16 (the digits' range, so the digits protocol means the same thing); Covertype uses
    our loader's standardised numeric columns and 0/1 indicator columns; "covertype_raw" is the same
    split with the 10 numeric columns as UCI ships them (metres, degrees, index values; a check of
    how much the unstated scaling matters). Sizes: IID train = N / δ
    (one client holds 1/δ samples, as δ_i = 1/|D_i|) unless ``train_size``; non-IID train = 4 x test
    (not given by the paper: ours) unless ``train_size``.
    """
    from . import data as _d

    if protocol not in ("iid", "noniid"):
        raise ValueError(f"protocol must be 'iid' or 'noniid', got {protocol!r}")
    s = dict(setting)
    notes = []
    n_test = int(test_size or s["test_size"])
    g = generator(data_seed, "wu", "covertype" if dataset == "covertype_raw" else dataset, protocol, "split")
    if dataset == "digits":
        x, y = _d.load_digits_raw()
        x = x.reshape(len(x), -1) * 16.0
        if n_test >= len(y):
            notes.append(f"the paper's test set of {n_test} exceeds the 1,797 digits; we use 300 (as in the IID runs)")
            n_test = 300
        perm = torch.randperm(len(y), generator=g)
        te, tr = perm[:n_test], perm[n_test:]
        if train_size is not None:
            tr = tr[:train_size]
        xtr, ytr, xte, yte, k = x[tr], y[tr], x[te], y[te], 10
    elif dataset in ("fashion_mnist", "mnist"):
        ds = _d.load_dataset(dataset, normalize=False)
        scale = 16.0 if dataset == "mnist" else 1.0
        n_tr = train_size or (int(s["n_clients"] * round(1 / s["delta"])) if protocol == "iid" else 4 * n_test)
        tr = torch.randperm(len(ds.y_train), generator=g)[:n_tr]
        te = torch.randperm(len(ds.y_test), generator=g)[:n_test]
        xtr, ytr = ds.x_train[tr].reshape(len(tr), -1) * scale, ds.y_train[tr]
        xte, yte = ds.x_test[te].reshape(len(te), -1) * scale, ds.y_test[te]
        k = ds.num_classes
    elif dataset in ("covertype", "covertype_raw"):
        ds = _d.load_dataset("covertype")
        x, y = torch.cat([ds.x_train, ds.x_test]), torch.cat([ds.y_train, ds.y_test])
        if dataset == "covertype_raw":  # undo the loader's standardisation of the 10 numeric columns
            n_num = len(ds.info["num_mean"])
            x = x.clone()
            x[:, :n_num] = (x[:, :n_num].double() * torch.tensor(ds.info["num_std"], dtype=torch.float64)
                            + torch.tensor(ds.info["num_mean"], dtype=torch.float64)).round().to(x.dtype)  # UCI: integers
        n_tr = train_size or int(s.get("train_size", 500_000))
        perm = torch.randperm(len(y), generator=g)
        te, tr = perm[:n_test], perm[n_test:n_test + n_tr]
        xtr, ytr, xte, yte, k = x[tr], y[tr], x[te], y[te], ds.num_classes
    else:
        raise ValueError(f"unknown dataset {dataset!r} for Wu et al.; known: digits, fashion_mnist, covertype, "
                         "covertype_raw, mnist")
    return Experiment(name=dataset, protocol=protocol, x_train=xtr.double(), y_train=ytr, x_test=xte.double(),
                      y_test=yte, num_classes=k, setting=s, dirichlet_alpha=dirichlet_alpha, notes=notes,
                      data_seed=data_seed)


def client_mechanisms(epsilons: Sequence[Optional[float]], protocol: str, setting: Mapping[str, Any], *,
                      reading: str = "sqrt_all") -> list:
    """One mechanism per client: IID Gaussian with the paper's σ_i (``reading``), non-IID LdpSign; None = no noise."""
    out = []
    for e in epsilons:
        if e is None:
            out.append(None)
        elif protocol == "iid":
            sig = paper_gaussian_sigma(e, delta=setting["delta"], q=setting["q"], rounds=setting["rounds"], reading=reading)
            out.append(Gaussian.with_sigma(sigma=sig, delta=setting["delta"], radius=setting["clip"]))
        else:
            out.append(LdpSign(epsilon=e, delta=setting["delta"], l2_sensitivity=setting["l2"], radius=setting["clip"]))
    return out


def grid_scenarios(setting: Mapping[str, Any], *, aggregations: Sequence[str] = ("A", "B", "C")) -> list[tuple]:
    """The paper's grid as (kind, label, ε per client, aggregation): no noise and every client at each ε
    of ``setting["epsilons"]`` with A (non-personalized), then every profile with each aggregation."""
    n = int(setting["n_clients"])
    scenarios = [("non-personalized", "no noise", [None] * n, "A")]
    scenarios += [("non-personalized", f"all ε = {e:g}", [e] * n, "A") for e in setting["epsilons"]]
    scenarios += [("personalized", name, list(prof), a) for name, prof in setting["profiles"].items() for a in aggregations]
    return scenarios


def _run_info(experiment: str, scenario: tuple, seed: int, reading: str) -> dict:
    kind, label, _, agg_name = scenario
    return {"experiment": experiment, "kind": kind, "profile": label, "aggregation": agg_name, "seed": seed,
            "reading": reading}


def grid_runs(exp: Experiment, seeds: Sequence[int], *, reading: str = "sqrt_all", on_empty: str = "keep",
              aggregations: Sequence[str] = ("A", "B", "C")) -> list[RunSpec]:
    """The paper's grid for one experiment (:func:`grid_scenarios`), for every seed."""
    s, proto = exp.setting, exp.protocol
    runs = []
    for seed in seeds:
        part = exp.partition(seed)
        for scenario in grid_scenarios(s, aggregations=aggregations):
            mechs = client_mechanisms(scenario[2], proto, s, reading=reading)
            sig = [m.sigma for m in mechs] if mechs[0] is not None else None
            agg_name = scenario[3]
            if agg_name == "A":
                agg = mean_aggregator
            elif agg_name == "B":
                agg = WeightedBySigma(sig)
            else:
                agg = ProbabilitySelection(sig, on_empty=on_empty)
            if proto == "noniid":
                agg = SignOf(agg)
            runs.append(RunSpec(seed=seed, partition=part, mechanisms=mechs, aggregator=agg, clip=float(s["clip"]),
                                q=float(s.get("q", 1.0)) if proto == "iid" else 1.0, sign=proto == "noniid",
                                info=_run_info(f"{proto} {exp.name}", scenario, seed, reading)))
    return runs


# ------------------------------------------------------------------------------ stored grid runs
_STORED_COLUMNS = ["run", "round", "accuracy", "clients_used", "seconds"]  # the rest is rebuilt from the config


def grid_config(exp: Experiment, seed: int, *, reading: str, on_empty: str, rounds: int, local_passes: int,
                alpha: float) -> dict:
    """Everything that determines one seed's grid of :func:`run_grid`: the key of its stored record."""
    return {"paper": "wu2023", "experiment": f"{exp.protocol} {exp.name}", "setting": dict(exp.setting),
            "n_train": len(exp.y_train), "n_test": len(exp.y_test), "data_seed": exp.data_seed,
            "dirichlet_alpha": exp.dirichlet_alpha if exp.protocol == "noniid" else None, "seed": int(seed),
            "reading": reading, "on_empty": on_empty, "rounds": int(rounds), "local_passes": int(local_passes),
            "alpha": float(alpha), "dtype": "float64"}


def _with_info(history: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """A stored history (``_STORED_COLUMNS``) with the run labels of its grid and its configuration."""
    info = pd.DataFrame([_run_info(config["experiment"], sc, config["seed"], config["reading"])
                         for sc in grid_scenarios(config["setting"])])
    info["run"] = range(len(info))
    out = history[_STORED_COLUMNS].merge(info, on="run", how="left", validate="many_to_one")
    if out["profile"].isna().any():
        raise ValueError(f"stored history of {config['experiment']} seed {config['seed']} has runs outside its grid")
    return out


def run_grid(exp: Experiment, seeds: Sequence[int], *, reading: str = "sqrt_all", on_empty: str = "keep",
             rounds: Optional[int] = None, local_passes: int = 1, alpha: float = 1e-4,
             device: str | torch.device = "cpu", cache: Any = None, progress: bool = True) -> pd.DataFrame:
    """History (one row per run and round) of the paper's grid (:func:`grid_runs`) trained with :func:`simulate`.

    ``cache=None`` (or a RunCache without directory): all seeds are trained together, here. With a
    :class:`ldptut.runcache.RunCache` that has a directory, each seed's grid is one stored record
    (key: :func:`grid_config`), loaded when present and trained and stored otherwise, so a paper-scale
    run can be resumed and seeds added later. ``rounds`` defaults to the experiment's setting.
    """
    rounds = pos_int(rounds if rounds is not None else exp.setting["rounds"], "rounds")
    kw = dict(rounds=rounds, local_passes=local_passes, alpha=alpha, device=device, **exp.data())
    key = f"{exp.protocol} {exp.name}"
    if cache is None or cache.directory is None:  # nothing to store: one simulation, vectorised over seeds too
        return simulate(grid_runs(exp, seeds, reading=reading, on_empty=on_empty), progress=progress, desc=key,
                        **kw).history
    out = []
    for seed in seeds:
        config = grid_config(exp, seed, reading=reading, on_empty=on_empty, rounds=rounds,
                             local_passes=local_passes, alpha=alpha)

        def train(seed=seed):
            runs = grid_runs(exp, [seed], reading=reading, on_empty=on_empty)
            res = simulate(runs, progress=progress, desc=f"{key} seed {seed}", **kw)
            return SimulationResult(history=res.history[_STORED_COLUMNS], weights=res.weights, layout=res.layout)

        out.append(_with_info(cache.run(config, train).history, config))
    return pd.concat(out, ignore_index=True)


def load_grid_runs(directory: Any) -> pd.DataFrame:
    """Every grid stored by :func:`run_grid` in ``directory``: histories with their run labels, plus the
    record's n_train, n_test, rounds, local_passes, on_empty, commit, date and training seconds."""
    from .runcache import load_records

    out = []
    for rec in load_records(directory):
        c, prov = rec.config, rec.provenance
        if c.get("paper") != "wu2023":
            raise ValueError(f"{directory} holds a record that is not a Wu et al. grid ({c.get('experiment')!r})")
        h = _with_info(rec.history, c)
        out.append(h.assign(n_train=c["n_train"], n_test=c["n_test"], rounds=c["rounds"],
                            local_passes=c["local_passes"], on_empty=c["on_empty"], commit=prov.get("commit"),
                            date=prov.get("date"), train_seconds=prov.get("seconds")))
    if not out:
        raise FileNotFoundError(f"no stored grid runs in {directory}; make reproduce CHAPTER=personalized_ldp_fl writes them")
    return pd.concat(out, ignore_index=True)
