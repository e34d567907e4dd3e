"""Plotting helpers for the chapters (kept here so notebooks stay short)."""
from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import pandas as pd

__all__ = ["plot_moments", "plot_accuracy", "plot_images", "plot_accuracy_vs_epsilon"]


def plot_moments(tables: Mapping[str, pd.DataFrame], *, bound: Mapping[str, float] | None = None,
                 xlabel: str = "input w", unit: str = ""):
    """Two panels per mechanism table: empirical mean vs input (ideal: the diagonal) and empirical
    variance vs the closed form (and the paper's bound if given). ``tables`` maps a label
    (e.g. "ε = 1 per coordinate") to the output of :func:`ldptut.audits.empirical_moments`."""
    fig, (ax_m, ax_v) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (label, df) in enumerate(tables.items()):
        color = f"C{i}"
        ax_m.plot(df["input"], df["mean"], "o", ms=4, color=color, label=f"{label}: empirical mean")
        ax_v.plot(df["input"], df["var"], "o", ms=4, color=color, label=f"{label}: empirical")
        ax_v.plot(df["input"], df["var_closed"], "-", color=color, lw=1, label=f"{label}: closed form")
        if bound and label in bound:
            ax_v.axhline(bound[label], color=color, ls=":", lw=1, label=f"{label}: paper's bound")
    lo, hi = min(df["input"].min() for df in tables.values()), max(df["input"].max() for df in tables.values())
    ax_m.plot([lo, hi], [lo, hi], "k--", lw=1, label="E[output] = input")
    ax_m.set(xlabel=xlabel + unit, ylabel="mean of the outputs" + unit, title="Unbiasedness")
    ax_v.set(xlabel=xlabel + unit, ylabel="variance of one output" + (f" ({unit.strip(' ()')})²" if unit else ""),
             title="Variance: empirical vs closed form", yscale="log")
    ax_m.legend(fontsize=7)
    ax_v.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_accuracy(histories: Mapping[str, pd.DataFrame], *, title: str = "", reference: str | None = None):
    """Test accuracy (%) of the global model per communication round, one line per run."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, h) in enumerate(histories.items()):
        style = dict(color="k", ls="--") if label == reference else dict(color=f"C{i}", marker="o", ms=3)
        ax.plot(h["round"], 100 * h["accuracy"], label=label, **style)
    ax.set(xlabel="communication round", ylabel="test accuracy (%)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_images(images: Mapping[str, "torch.Tensor"], *, ncols: int = 6, size: float = 1.6, wrap: int = 22,
                title: str = ""):
    """One grey-scale panel per image (a (1, C, H, W) or (C, H, W) tensor; the first channel is shown), titled by
    its label (wrapped at ``wrap`` characters), under the figure's ``title``. Each panel is scaled to its own range (min to max), so a scaled
    or shifted copy of an image looks like the image: compare shapes, and read errors from the table."""
    import textwrap

    items = list(images.items())
    ncols = max(1, min(ncols, len(items)))
    nrows = -(-len(items) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, (size + 0.7) * nrows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (label, img) in zip(axes.flat, items):
        a = img.detach().cpu().double()
        a = a.reshape(-1, *a.shape[-2:])[0]
        ax.imshow(a.numpy(), cmap="gray")
        ax.set_title(textwrap.fill(label, wrap), fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (nrows * (size + 0.7))))
    else:
        fig.tight_layout()
    return fig


def plot_accuracy_vs_epsilon(runs: pd.DataFrame, *, series: Mapping[str, str], title: str = "",
                             styles: Mapping[str, Mapping] | None = None, ylim: tuple[float, float] = (0, 100)):
    """Final test accuracy (%) against ε per weight per round (log axis; ``eps`` = inf, "none", no noise, at the
    right), one line per key of ``series`` (the values of the column ``series``; ``series`` maps each to its legend
    label): the mean over seeds with its 95 % Student t interval as error bars, each seed's run as a dot, a run whose
    ``accuracy`` is NaN (diverged) as an x at the bottom. Columns used: ``series``, ``eps``, ``accuracy`` (%).
    Series side by side (small x shifts) so the error bars do not hide each other. Returns the figure."""
    from .intervals import t_interval

    inf = float("inf")
    finite = sorted(e for e in set(runs["eps"]) if e != inf)
    none_x = (finite[-1] * 2.5) if finite else 1.0
    has_none = bool((runs["eps"] == inf).any())
    fig, ax = plt.subplots(figsize=(7, 4))
    for j, (key, label) in enumerate(series.items()):
        sel = runs[runs["series"] == key]
        if not len(sel):
            continue
        style = {"color": f"C{j}", "marker": "o", **dict((styles or {}).get(key, {}))}
        shift = 1 + 0.04 * (j - (len(series) - 1) / 2)
        xs, means, lo, hi = [], [], [], []
        for e, g in sorted(sel.groupby("eps"), key=lambda t: t[0]):
            x = (none_x if e == inf else e) * shift
            ok = g["accuracy"].dropna()
            ax.scatter([x] * len(ok), ok, s=10, alpha=0.4, color=style["color"])
            if len(g) > len(ok):
                ax.scatter([x], [ylim[0]], marker="x", s=40, color=style["color"], clip_on=False, zorder=3)
            if len(ok):
                ci = t_interval(ok) or (ok.mean(), ok.mean())
                xs.append(x)
                means.append(ok.mean())
                lo.append(ok.mean() - ci[0])
                hi.append(ci[1] - ok.mean())
        ax.errorbar(xs, means, yerr=[lo, hi], capsize=3, label=label, **style)
    ax.set_xscale("log")
    ax.set_ylim(*ylim)
    ticks = finite + ([none_x] if has_none else [])
    ax.set_xticks(ticks, [f"{e:g}" for e in finite] + (["none"] if has_none else []))
    ax.minorticks_off()
    ax.set(xlabel="ε per weight per round (log scale" + ("; none: no noise)" if has_none else ")"),
           ylabel="global model test accuracy (%)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="mean, 95 % CI over seeds; x: diverged", title_fontsize=8)
    fig.tight_layout()
    return fig
