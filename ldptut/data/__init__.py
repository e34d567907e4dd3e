"""Data sets for the book: loading, caching, checksum verification and preprocessing.

Every loader returns a :class:`Dataset` whose tensors are already preprocessed and kept in memory on
the requested device. The files come from, in this order (``Dataset.source`` says which one was used):

1. ``"cache"`` — the converted copy under the data root (see :func:`data_root`): ``<root>/MNIST/raw``
   and ``<root>/FashionMNIST/raw`` in torchvision's own layout, ``<root>/cifar10/*.pt`` (uint8
   tensors), ``<root>/<name>/<name>_v1.npz`` for the tabular sets (parsed, not yet standardised); each file
   converted by ldptut has its sha256 beside it (``<file>.sha256``), checked on every read: a file that does not
   match (corrupted, even at the same size) is rebuilt, a folder where a file should be is an error naming it;
2. ``"mirror"`` — a local folder named by the environment variable ``LDPTUT_DATA_MIRROR``, laid out
   like ``shared/datasets`` (``mnist/``, ``fashion-mnist/``, ``cifar10/``, ``adult/``,
   ``bank-marketing/``, ``kddcup99/``, ``covertype/`` and a ``SHA256SUMS`` file). Every file used is
   checked against the mirror's ``SHA256SUMS`` *and* against the sums hard-coded below; a mismatch
   raises :class:`DataError`. The verified files are converted once into the cache;
3. ``"download"`` (only with ``download=True``) — what a user with internet gets:
   ``torchvision.datasets.MNIST/FashionMNIST/CIFAR10(root, download=True)``,
   ``sklearn.datasets.fetch_covtype`` / ``fetch_kddcup99(percent10=True)`` with
   ``data_home=<root>/sklearn``, and the original UCI files for Adult and Bank Marketing
   (``archive.ics.uci.edu``, checked against the official md5 / sha256). The result goes into the
   same cache as a mirror copy, so both kinds of users share one layout.

If none of these works, :class:`DatasetUnavailable` names the data set and both ways to provide it.
"sklearn digits" ships with scikit-learn (``source == "bundled"``).

One module per idea (every public name importable from ``ldptut.data``): :mod:`.store` (roots, mirror, checksums,
atomic writes, downloads, the :class:`Dataset` record), :mod:`.images`, :mod:`.tabular`, :mod:`.synthetic`,
:mod:`.prepare` (generic preparation of loaded data: joins, seeded splits and subsamples, flattening, scaling, label
maps); this module dispatches by name.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from .images import IMAGE_SHAPES, load_cifar10, load_digits, load_digits_raw, load_fashion_mnist, load_mnist
from .prepare import flattened, joined, max_abs_scaled, signed_labels, split_indices, subsample, unstandardised
from .store import (ENV_MIRROR, ENV_ROOT, MIRROR_SHA256, DataError, Dataset, DatasetUnavailable, DeviceLike,  # noqa: F401
                    PathLike, data_root, mirror_path)
from .synthetic import sparse_synthetic
from .tabular import load_adult, load_bank, load_covertype, load_kddcup99

__all__ = [
    "Dataset", "DataError", "DatasetUnavailable", "DATASETS", "IMAGE_SHAPES",
    "load_dataset", "load_mnist", "load_fashion_mnist", "load_cifar10", "load_digits", "load_digits_raw",
    "load_adult", "load_bank", "load_kddcup99", "load_covertype", "sparse_synthetic",
    "data_root", "mirror_path",
    "joined", "split_indices", "subsample", "flattened", "max_abs_scaled", "signed_labels", "unstandardised",
]

# ============================================================================ dispatch
DATASETS: dict[str, Callable[..., Dataset]] = {
    "mnist": load_mnist,
    "fashion_mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "digits": load_digits,
    "adult": load_adult,
    "bank": load_bank,
    "kddcup99": load_kddcup99,
    "covertype": load_covertype,
}
_ALIASES = {"fashionmnist": "fashion_mnist", "fmnist": "fashion_mnist", "cifar_10": "cifar10",
            "bank_marketing": "bank", "kdd99": "kddcup99", "kddcup": "kddcup99", "kdd_cup_99": "kddcup99",
            "covtype": "covertype"}


def load_dataset(name: str, *, root: Optional[PathLike] = None, device: DeviceLike = "cpu",
                 download: bool = True, **kwargs) -> Dataset:
    """Load a data set by name (one of :data:`DATASETS`; ``-`` and ``_`` are interchangeable).

    Extra keyword arguments go to the loader (``test_size``, ``seed``, ``binary``, ``normalize``).
    """
    key = str(name).strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known names: {', '.join(DATASETS)}")
    return DATASETS[key](root=root, device=device, download=download, **kwargs)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m ldptut.data NAME...``: make each dataset available in the cache (``make data``)."""
    import sys

    names = list(sys.argv[1:] if argv is None else argv)
    if not names:
        sys.exit(f"usage: python -m ldptut.data NAME... (known: {', '.join(DATASETS)})")
    for name in names:
        ds = load_dataset(name)
        print(f"{ds.name}: {ds.x_train.shape[0]:,} train / {ds.x_test.shape[0]:,} test, from {ds.source} "
              f"(cache: {data_root()})")

