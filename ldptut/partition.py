"""Splitting a data set among federated clients: IID shards, Dirichlet label skew, k classes per client.

Every function returns a list with one 1-D ``torch.int64`` tensor of sample indices per client
(sorted ascending, on the CPU). The parts are disjoint: every index is used at most once.
All randomness comes from :func:`ldptut.rng.generator` with the key ``(seed, "partition", <scheme>)``,
so a partition depends only on the labels, the parameters and the seed.

``labels`` may be a tensor (any device), a NumPy array or a list of non-negative integers.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import numpy as np
import torch

from ._validate import integer
from .rng import generator

__all__ = ["iid", "dirichlet", "k_classes", "label_counts", "plot_label_counts"]

LabelsLike = Union[torch.Tensor, np.ndarray, Sequence[int]]


# ----------------------------------------------------------------------------- validation helpers
def _as_labels(labels: LabelsLike, name: str = "labels") -> torch.Tensor:
    t = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
    t = t.detach().to("cpu")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        if t.is_floating_point() and t.numel() and bool((t == t.round()).all()):
            t = t.long()
        else:
            raise ValueError(f"{name} must hold integer class labels, got dtype {t.dtype}")
    t = t.long()
    if t.numel() and int(t.min()) < 0:
        raise ValueError(f"{name} must be non-negative class indices, got minimum {int(t.min())}")
    return t


def _check_n_clients(n_clients: int, n_samples: int) -> int:
    n_clients = integer(n_clients, "n_clients", minimum=1)
    if n_clients > n_samples:
        raise ValueError(f"n_clients={n_clients} is larger than the number of samples ({n_samples})")
    return n_clients


def _num_classes(labels: torch.Tensor, num_classes: Optional[int]) -> int:
    present = int(labels.max()) + 1 if labels.numel() else 0
    if present > labels.numel():
        distinct = int(torch.unique(labels).numel())
        raise ValueError(
            f"labels must be class indices 0..C-1: the largest label is {present - 1} but there are only "
            f"{labels.numel()} samples ({distinct} distinct labels), so most of the {present} classes would be "
            "empty; remap them first, e.g. labels = torch.unique(labels, return_inverse=True)[1]")
    if num_classes is None:
        return present
    integer(num_classes, "num_classes", minimum=1)
    if present > num_classes:
        raise ValueError(f"num_classes={num_classes} but labels contain class {present - 1}")
    return int(num_classes)


def _finish(parts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.sort(p.long())[0] for p in parts]


# ----------------------------------------------------------------------------- IID
def iid(n_samples_or_labels: Union[int, LabelsLike], n_clients: int, *, seed: int) -> list[torch.Tensor]:
    """Equal IID shards of a seeded random permutation.

    ``n_samples_or_labels`` is either the number of samples ``n`` or the label vector (only its length
    is used). Each of the ``n_clients`` clients gets ``n // n_clients`` indices; the remaining
    ``n % n_clients`` indices (the tail of the permutation) are **dropped**, so every client has
    exactly the same number of samples.

    Randomness: ``ldptut.rng.generator(seed, "partition", "iid")``.
    """
    if isinstance(n_samples_or_labels, (int, np.integer)) and not isinstance(n_samples_or_labels, bool):
        n = int(n_samples_or_labels)
        if n < 1:
            raise ValueError(f"n_samples_or_labels must be a positive number of samples, got {n}")
    else:
        n = int(_as_labels(n_samples_or_labels, "n_samples_or_labels").numel())
    n_clients = _check_n_clients(n_clients, n)
    g = generator(seed, "partition", "iid")
    perm = torch.randperm(n, generator=g)
    size = n // n_clients
    return _finish([perm[i * size:(i + 1) * size] for i in range(n_clients)])


# ----------------------------------------------------------------------------- Dirichlet label skew
def _log_gamma_sample(alpha: float, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """log of Gamma(alpha, 1) variates drawn with ``g`` (Marsaglia & Tsang 2000, float64).

    For alpha < 1 the boost ``G(a) = G(a + 1) * U**(1/a)`` is applied in log space, so tiny alphas
    (0.01) do not underflow to zero.
    """
    a = alpha + 1.0 if alpha < 1.0 else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    n = int(np.prod(shape)) if shape else 1
    out = torch.empty(n, dtype=torch.float64)
    todo = torch.arange(n)
    while todo.numel():
        m = todo.numel()
        x = torch.randn(m, generator=g, dtype=torch.float64)
        u = torch.rand(m, generator=g, dtype=torch.float64)
        v = (1.0 + c * x) ** 3
        ok = v > 0
        vs = torch.where(ok, v, torch.ones_like(v))
        ok &= torch.log(u) < 0.5 * x * x + d - d * vs + d * torch.log(vs)
        out[todo[ok]] = math.log(d) + torch.log(vs[ok])
        todo = todo[~ok]
    if alpha < 1.0:
        u = torch.rand(n, generator=g, dtype=torch.float64).clamp_min(torch.finfo(torch.float64).tiny)
        out = out + torch.log(u) / alpha
    return out.reshape(shape)


def _dirichlet_sample(alpha: float, n_rows: int, k: int, g: torch.Generator) -> torch.Tensor:
    """``n_rows`` draws from the symmetric Dirichlet(alpha, ..., alpha) on ``k`` categories (float64)."""
    return torch.softmax(_log_gamma_sample(alpha, (n_rows, k), g), dim=1)


def dirichlet(labels: LabelsLike, n_clients: int, *, alpha: float, seed: int, min_size: int = 1,
              num_classes: Optional[int] = None, max_tries: int = 1000) -> list[torch.Tensor]:
    """Label-skewed partition (Hsu, Qi & Brown 2019; Yurochkin et al. 2019).

    For every class ``c`` the class's samples are shuffled and split among the clients in proportions
    ``p_c ~ Dirichlet(alpha, ..., alpha)`` (``n_clients`` entries): client ``j`` receives the indices
    between ``floor(n_c * cumsum(p_c)[j-1])`` and ``floor(n_c * cumsum(p_c)[j])``. Every sample is
    assigned to exactly one client (full coverage). Small ``alpha`` (0.1) gives each client few classes;
    large ``alpha`` (100) is close to IID.

    If some client ends up with fewer than ``min_size`` samples, all proportions are drawn again (the
    generator continues, so the result stays deterministic); after ``max_tries`` draws a
    ``RuntimeError`` is raised (lower ``min_size`` or raise ``alpha``).

    Randomness: ``ldptut.rng.generator(seed, "partition", "dirichlet")``.
    """
    y = _as_labels(labels)
    n = int(y.numel())
    n_clients = _check_n_clients(n_clients, n)
    try:
        alpha_f = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a positive number, got {alpha!r}") from None
    if not math.isfinite(alpha_f) or alpha_f <= 0:
        raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
    min_size = integer(min_size, "min_size", minimum=0)
    if min_size * n_clients > n:
        raise ValueError(f"min_size={min_size} is impossible: {n_clients} clients x {min_size} > {n} samples")
    max_tries = integer(max_tries, "max_tries", minimum=1)
    C = _num_classes(y, num_classes)

    g = generator(seed, "partition", "dirichlet")
    by_class = []
    for c in range(C):
        idx = torch.nonzero(y == c, as_tuple=False).flatten()
        by_class.append(idx[torch.randperm(idx.numel(), generator=g)])
    sizes = torch.tensor([b.numel() for b in by_class], dtype=torch.float64)

    for _ in range(int(max_tries)):
        p = _dirichlet_sample(alpha_f, C, n_clients, g)                     # (C, n_clients)
        cuts = torch.floor(torch.cumsum(p, dim=1) * sizes[:, None]).long()  # (C, n_clients)
        cuts[:, -1] = sizes.long()                                          # no rounding loss at the end
        cuts = torch.cummax(cuts, dim=1)[0]
        starts = torch.cat([torch.zeros(C, 1, dtype=torch.long), cuts[:, :-1]], dim=1)
        counts = (cuts - starts).sum(dim=0)
        if int(counts.min()) >= min_size:
            parts = []
            for j in range(n_clients):
                parts.append(torch.cat([by_class[c][int(starts[c, j]):int(cuts[c, j])] for c in range(C)]
                                       or [torch.empty(0, dtype=torch.long)]))
            return _finish(parts)
    raise RuntimeError(
        f"dirichlet: no partition with every client holding >= min_size={min_size} samples after "
        f"max_tries={max_tries} draws (alpha={alpha_f}, n_clients={n_clients}, n={n}); "
        "lower min_size, raise alpha or use fewer clients")


# ----------------------------------------------------------------------------- k classes per client
def k_classes(labels: LabelsLike, n_clients: int, *, k: int, seed: int,
              num_classes: Optional[int] = None) -> list[torch.Tensor]:
    """Pathological non-IID split: each client holds samples of exactly ``k`` distinct classes.

    This is the idea of McMahan et al. (2017, "2 shards per client"), but with the classes assigned
    **explicitly** instead of by sorted shards (a sorted shard can straddle two classes, so the shard
    version sometimes gives a client ``k + 1`` classes or fewer than ``k``). The assignment:

    1. the classes are relabelled by a random permutation and the clients by another;
    2. client ``i`` gets the classes ``(i*k + j) mod C`` for ``j = 0..k-1`` — ``k`` consecutive slots
       modulo ``C``, hence distinct, and every class is held by ``floor`` or ``ceil`` of
       ``n_clients * k / C`` clients (balanced);
    3. each class's samples are shuffled and divided as evenly as possible (sizes differ by at most one)
       among the clients holding that class.

    So every client has at most ``k`` classes, and exactly ``k`` unless a class has fewer samples than
    clients sharing it. Every sample of a class that some client holds is used once; if
    ``n_clients * k < C`` the classes nobody holds are left out. Client sizes differ with the class sizes.

    Randomness: ``ldptut.rng.generator(seed, "partition", "k_classes")``.
    """
    y = _as_labels(labels)
    n = int(y.numel())
    n_clients = _check_n_clients(n_clients, n)
    C = _num_classes(y, num_classes)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= C:
        raise ValueError(f"k must be an integer in 1..num_classes={C}, got {k!r}")
    k = int(k)
    g = generator(seed, "partition", "k_classes")
    class_perm = torch.randperm(C, generator=g)
    client_perm = torch.randperm(n_clients, generator=g)
    holders: list[list[int]] = [[] for _ in range(C)]
    for slot_client in range(n_clients):
        client = int(client_perm[slot_client])
        for j in range(k):
            holders[int(class_perm[(slot_client * k + j) % C])].append(client)
    parts: list[list[torch.Tensor]] = [[] for _ in range(n_clients)]
    for c in range(C):
        idx = torch.nonzero(y == c, as_tuple=False).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        if not holders[c]:
            continue
        for client, chunk in zip(holders[c], torch.tensor_split(idx, len(holders[c]))):
            parts[client].append(chunk)
    return _finish([torch.cat(p) if p else torch.empty(0, dtype=torch.long) for p in parts])


# ----------------------------------------------------------------------------- inspection
def label_counts(labels: LabelsLike, parts: Sequence[torch.Tensor], num_classes: Optional[int] = None
                 ) -> torch.Tensor:
    """``(n_clients, num_classes)`` int64 matrix: how many samples of each class every client holds."""
    y = _as_labels(labels)
    C = _num_classes(y, num_classes)
    rows = []
    for i, p in enumerate(parts):
        p = torch.as_tensor(p).long().cpu()
        if p.numel() and (int(p.min()) < 0 or int(p.max()) >= y.numel()):
            raise ValueError(f"parts[{i}] holds indices outside 0..{y.numel() - 1}")
        rows.append(torch.bincount(y[p], minlength=C))
    if not rows:
        return torch.zeros(0, C, dtype=torch.long)
    return torch.stack(rows)


def plot_label_counts(labels: LabelsLike, parts: Sequence[torch.Tensor], *, num_classes: Optional[int] = None,
                      ax=None, title: Optional[str] = None, class_names: Optional[Sequence[str]] = None):
    """Stacked bar chart of :func:`label_counts`: one bar per client, one colour per class.

    The x axis is labelled "client", the y axis "samples", with a legend of the classes
    (``class_names`` if given). Returns the matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    counts = label_counts(labels, parts, num_classes).numpy()
    n_clients, C = counts.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, min(0.25 * n_clients + 2, 14.0)), 3.5))
    cmap = plt.get_cmap("tab10" if C <= 10 else "tab20")
    x = np.arange(n_clients)
    bottom = np.zeros(n_clients)
    names = list(class_names) if class_names is not None else [str(c) for c in range(C)]
    if len(names) != C:
        raise ValueError(f"class_names has {len(names)} entries, expected num_classes={C}")
    for c in range(C):
        ax.bar(x, counts[:, c], bottom=bottom, width=0.85, color=cmap(c % cmap.N), label=names[c])
        bottom += counts[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("samples")
    if n_clients <= 30:
        ax.set_xticks(x)
    ax.set_xlim(-0.6, n_clients - 0.4)
    ax.legend(title="class", fontsize="small", ncol=1 if C <= 10 else 2,
              bbox_to_anchor=(1.01, 1), loc="upper left", borderaxespad=0.0)
    if title:
        ax.set_title(title)
    return ax
