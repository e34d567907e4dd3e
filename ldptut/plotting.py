"""Plotting helpers for the chapters (kept here so notebooks stay short)."""
from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import pandas as pd

__all__ = ["plot_moments", "plot_accuracy", "plot_images"]


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
