"""The image sets: MNIST, Fashion-MNIST and CIFAR-10 (the converted cache in torchvision's layout, the mirror, or
torchvision's download), and scikit-learn's 8x8 digits.
"""
from __future__ import annotations

import gzip
import hashlib
import math
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..rng import derive_seed

#: (input shape, classes) of each image data set, known without loading it (a model's size, d, from a run's
#: configuration); ``tests/test_data.py`` checks each loader against it.
IMAGE_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "mnist": ((1, 28, 28), 10), "fashion_mnist": ((1, 28, 28), 10), "cifar10": ((3, 32, 32), 10), "digits": ((1, 8, 8), 10),
}
from .store import DataError, Dataset, DeviceLike, PathLike, _CACHE_VERSION, _atomic_write, _cache_file_ok, _obtain, _resolve_root, log


_CIFAR_ARRAY_SHA256 = {
    "x_train": "47af8b02cfcfb6cdf3dbbd1969ad7f1b70f4413f6f80f437b020ee4e5bc8304a",
    "y_train": "2b7cd2f24487317614016b72ffd53071c3062f592f0eb300c18a770d41ae1253",
    "x_test": "f9b1e2130bab680db56eb06d886f7f1ad0f1183907ceff4659d1735c890f5b04",
    "y_test": "cec8a24a1e92aa2ecaa0bbd3dbfa86bf6cd8759fbd209a832824c8cf0afca9d5",
}

# ============================================================================ images
_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_MNIST_CLASSES = [str(i) for i in range(10)]
_FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                    "Bag", "Ankle boot"]
_CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _channel_stats(x_u8: torch.Tensor) -> tuple[list[float], list[float]]:
    """Exact per-channel mean and population std of uint8 (N, C, H, W) pixels scaled to [0, 1],
    computed from the per-channel histograms."""
    means, stds = [], []
    levels = torch.arange(256, dtype=torch.float64) / 255.0
    for c in range(x_u8.shape[1]):
        hist = torch.bincount(x_u8[:, c].reshape(-1).to(torch.int32), minlength=256).to(torch.float64)
        n = hist.sum()
        m = float((hist * levels).sum() / n)
        means.append(m)
        stds.append(math.sqrt(float((hist * (levels - m) ** 2).sum() / n)))
    return means, stds


def _standardise_images(x_train_u8: torch.Tensor, x_test_u8: torch.Tensor, normalize: bool,
                        stats: Optional[tuple[list[float], list[float]]] = None
                        ) -> tuple[torch.Tensor, torch.Tensor, list[float], list[float]]:
    """uint8 (N, C, H, W) -> float32 ``(x / 255 - mean) / std`` with the training set's per-channel
    mean/std (``stats``, or computed by :func:`_channel_stats`); ``normalize=False``: just ``x / 255``."""
    C = x_train_u8.shape[1]
    means, stds = stats if stats is not None else _channel_stats(x_train_u8)
    if normalize:  # one fused pass: x * (1 / (255 std)) - mean / std
        scale = torch.tensor([1.0 / (255.0 * s) for s in stds], dtype=torch.float32).view(1, C, 1, 1)
        shift = torch.tensor([-m / s for m, s in zip(means, stds)], dtype=torch.float32).view(1, C, 1, 1)
    else:
        scale = torch.full((1, C, 1, 1), 1.0 / 255.0)
        shift = torch.zeros(1, C, 1, 1)
    out = [x.to(torch.float32).mul_(scale).add_(shift) for x in (x_train_u8, x_test_u8)]
    return out[0], out[1], list(means), list(stds)


def _image_dataset(name: str, xtr: torch.Tensor, ytr: torch.Tensor, xte: torch.Tensor, yte: torch.Tensor,
                   classes: list[str], source: str, root: Path, normalize: bool, device: DeviceLike,
                   what: str, stats: Optional[tuple[list[float], list[float]]] = None) -> Dataset:
    xtr_f, xte_f, means, stds = _standardise_images(xtr, xte, normalize, stats)
    fmt = lambda v: "(" + ", ".join(f"{a:.4f}" for a in v) + ")"  # noqa: E731
    desc = (f"{what}: {xtr.shape[0]} train / {xte.shape[0]} test images, shape {tuple(xtr.shape[1:])} "
            f"(N, C, H, W); pixels scaled to [0, 1]"
            + (f", then standardised per channel with the training set's mean {fmt(means)} and std {fmt(stds)}"
               if normalize else " (not standardised)") + ".")
    return Dataset(
        name=name, x_train=xtr_f.to(device), y_train=ytr.to(torch.int64).to(device),
        x_test=xte_f.to(device), y_test=yte.to(torch.int64).to(device),
        classes=list(classes), num_classes=len(classes), input_shape=tuple(xtr.shape[1:]),
        description=desc, source=source, feature_names=None,
        info={"mean": means, "std": stds, "normalized": normalize, "root": str(root)})


def _read_idx(path: Path, ndim: int) -> Optional[torch.Tensor]:
    """Read an uncompressed uint8 IDX file (the format of MNIST's files) into a tensor.

    Returns ``None`` if the file is missing or malformed (then the cache is rebuilt).
    """
    if not _cache_file_ok(path):
        return None
    with open(path, "rb") as f:
        head = f.read(4 + 4 * ndim)
    if len(head) != 4 + 4 * ndim or head[:2] != b"\x00\x00" or head[2] != 0x08 or head[3] != ndim:
        return None
    dims = [int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    if path.stat().st_size != len(head) + int(np.prod(dims)):
        return None
    arr = np.fromfile(path, dtype=np.uint8, offset=len(head))
    return torch.from_numpy(arr).reshape(dims)


def _load_idx_set(name: str, tv_class: str, mirror_dir: str, classes: list[str], what: str, *,
                  root: Optional[PathLike], device: DeviceLike, download: bool, normalize: bool) -> Dataset:
    root_p = _resolve_root(root)
    raw = root_p / tv_class / "raw"

    def read_cache():
        # torchvision's layout (<root>/<Class>/raw/<file>, uncompressed); read directly, which is
        # faster than importing torchvision
        parts = [_read_idx(raw / f[:-3], 3 if "images" in f else 1) for f in _MNIST_FILES]
        if any(p is None for p in parts):
            return None
        xtr, ytr, xte, yte = parts
        if xtr.shape[0] != ytr.shape[0] or xte.shape[0] != yte.shape[0]:
            return None
        return xtr, ytr.long(), xte, yte.long()

    def from_mirror(files: dict[str, Path]) -> None:
        # torchvision's own layout: the verified .gz plus its extracted file, as download() leaves them
        for f in _MNIST_FILES:
            src = files[f"{mirror_dir}/{f}"]
            _atomic_write(raw / f, lambda tmp, src=src: shutil.copyfile(src, tmp))

            def extract(tmp, src=src):
                with gzip.open(src, "rb") as fi, open(tmp, "wb") as fo:
                    shutil.copyfileobj(fi, fo, 1 << 20)
            _atomic_write(raw / f[:-3], extract)

    def from_download() -> None:
        import torchvision.datasets as tvd

        cls = getattr(tvd, tv_class)
        root_p.mkdir(parents=True, exist_ok=True)
        cls(str(root_p), train=True, download=True)
        cls(str(root_p), train=False, download=True)

    (xtr, ytr, xte, yte), source = _obtain(
        name, root_p, download, read_cache=read_cache,
        mirror_rels=[f"{mirror_dir}/{f}" for f in _MNIST_FILES],
        from_mirror=from_mirror, from_download=from_download, cache_where=str(raw))
    return _image_dataset(name, xtr.unsqueeze(1), ytr, xte.unsqueeze(1), yte, classes, source, root_p,
                          normalize, device, what)


def load_mnist(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
               normalize: bool = True) -> Dataset:
    """MNIST: 60,000 train / 10,000 test handwritten digits, 10 classes.

    ``x``: float32 ``(N, 1, 28, 28)``, pixels scaled to [0, 1] and then standardised with the training
    set's mean 0.1307 and std 0.3081 (exact: 0.130660, 0.308108; ``normalize=False`` keeps [0, 1]).
    Cache: ``<root>/MNIST/raw`` (torchvision's layout, so ``torchvision.datasets.MNIST(root)`` reads it too).
    """
    return _load_idx_set("mnist", "MNIST", "mnist", _MNIST_CLASSES, "MNIST", root=root, device=device,
                         download=download, normalize=normalize)


def load_fashion_mnist(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
                       normalize: bool = True) -> Dataset:
    """Fashion-MNIST: 60,000 train / 10,000 test 28x28 grey clothing images, 10 classes.

    ``x``: float32 ``(N, 1, 28, 28)``, [0, 1] then standardised with the training set's mean 0.2860 and
    std 0.3530 (exact: 0.286041, 0.353024). Cache: ``<root>/FashionMNIST/raw`` (torchvision's layout).
    """
    return _load_idx_set("fashion_mnist", "FashionMNIST", "fashion-mnist", _FASHION_CLASSES, "Fashion-MNIST",
                         root=root, device=device, download=download, normalize=normalize)


def _decode_cifar_grid(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        g = np.asarray(im.convert("RGB"))
    if g.shape != (3200, 3200, 3):
        raise DataError(f"{path}: expected a 3200x3200 RGB grid, got {g.shape}")
    return g.reshape(100, 32, 100, 32, 3).transpose(0, 2, 1, 3, 4).reshape(10000, 32, 32, 3)


def _check_cifar_arrays(arrays: dict[str, np.ndarray], where: str) -> None:
    for key, expected in _CIFAR_ARRAY_SHA256.items():
        actual = hashlib.sha256(np.ascontiguousarray(arrays[key]).tobytes()).hexdigest()
        if actual != expected:
            raise DataError(f"{where}: decoded CIFAR-10 {key} has sha256 {actual}, expected {expected}; "
                            "the files are not the original data (or the PNG decoder is broken)")


def load_cifar10(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
                 normalize: bool = True) -> Dataset:
    """CIFAR-10: 50,000 train / 10,000 test 32x32 RGB images, 10 classes, official order.

    ``x``: float32 ``(N, 3, 32, 32)``, [0, 1] then standardised per channel with the training set's
    mean (0.4914, 0.4822, 0.4465) and std (0.2470, 0.2435, 0.2616) (population std of the training
    pixels). Cache: ``<root>/cifar10/cifar10_uint8_v1.pt`` (uint8 NCHW tensors, int64 labels and
    the channel statistics), made
    once from the mirror's PNG grids (whose decoded arrays are checked against the mirror README's
    sha256) or from torchvision's ``<root>/cifar-10-batches-py`` after ``CIFAR10(root, download=True)``.
    """
    root_p = _resolve_root(root)
    cache = root_p / "cifar10" / f"cifar10_uint8_{_CACHE_VERSION}.pt"

    def save(arrays: dict[str, np.ndarray]) -> None:
        t = {"x_train": torch.from_numpy(np.ascontiguousarray(arrays["x_train"].transpose(0, 3, 1, 2))),
             "x_test": torch.from_numpy(np.ascontiguousarray(arrays["x_test"].transpose(0, 3, 1, 2))),
             "y_train": torch.from_numpy(arrays["y_train"].astype(np.int64)),
             "y_test": torch.from_numpy(arrays["y_test"].astype(np.int64))}
        mean, std = _channel_stats(t["x_train"])
        t["mean"], t["std"] = torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64)
        _atomic_write(cache, lambda tmp: torch.save(t, tmp))

    def from_torchvision(download_: bool) -> bool:
        import torchvision.datasets as tvd
        try:
            tr = tvd.CIFAR10(str(root_p), train=True, download=download_)
            te = tvd.CIFAR10(str(root_p), train=False, download=download_)
        except RuntimeError:
            if download_:
                raise
            return False
        save({"x_train": tr.data, "y_train": np.asarray(tr.targets), "x_test": te.data,
              "y_test": np.asarray(te.targets)})
        return True

    def read_cache():
        if not _cache_file_ok(cache):
            # a user who ran torchvision's CIFAR10(root, download=True) already has the data
            if not (root_p / "cifar-10-batches-py").is_dir() or not from_torchvision(False):
                return None
        try:
            t = torch.load(cache, weights_only=True)
            return t["x_train"], t["y_train"], t["x_test"], t["y_test"], (t["mean"].tolist(), t["std"].tolist())
        except Exception as e:  # truncated (killed while copying) or foreign file: rebuild it
            log.warning("ignoring unreadable cache file %s (%s: %s); it is rebuilt", cache, type(e).__name__, e)
            return None

    def from_mirror(files: dict[str, Path]) -> None:
        xtr = np.concatenate([_decode_cifar_grid(files[f"cifar10/data_batch_{k}.png"]) for k in range(1, 6)])
        xte = _decode_cifar_grid(files["cifar10/test_batch.png"])
        with np.load(files["cifar10/labels.npz"]) as lab:
            arrays = {"x_train": xtr, "x_test": xte, "y_train": lab["y_train"], "y_test": lab["y_test"]}
        _check_cifar_arrays(arrays, str(files["cifar10/labels.npz"].parent))
        save(arrays)

    rels = [f"cifar10/data_batch_{k}.png" for k in range(1, 6)] + ["cifar10/test_batch.png", "cifar10/labels.npz"]
    (xtr, ytr, xte, yte, stats), source = _obtain(
        "cifar10", root_p, download, read_cache=read_cache, mirror_rels=rels, from_mirror=from_mirror,
        from_download=lambda: from_torchvision(True), cache_where=str(cache))
    return _image_dataset("cifar10", xtr, ytr, xte, yte, _CIFAR_CLASSES, source, root_p, normalize, device,
                          "CIFAR-10", stats)


# ============================================================================ sklearn digits
def load_digits_raw(*, device: DeviceLike = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 sklearn digits, unsplit: ``x`` float32 ``(1797, 1, 8, 8)`` = pixel/16 in [0, 1], ``y`` int64.

    For chapters that make their own split (e.g. the Wu et al. reproduction).
    """
    from sklearn.datasets import load_digits as _sk_load_digits

    d = _sk_load_digits()
    x = torch.from_numpy(d.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(d.target.astype(np.int64))
    return x.to(device), y.to(device)


def load_digits(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
                test_size: float = 0.2, seed: int = 0) -> Dataset:
    """sklearn's 8x8 digits (UCI optdigits test part), 1,797 images, 10 classes; ships with scikit-learn.

    ``x``: float32 ``(N, 1, 8, 8)`` = pixel / 16, in [0, 1], not standardised. Seeded **stratified**
    split with ``ceil(test_size * N)`` test images: the defaults (``test_size=0.2, seed=0``) give
    1,437 train / 360 test. ``root`` and ``download`` are accepted for a uniform API and ignored.
    Use :func:`load_digits_raw` for the unsplit data.
    """
    from sklearn.model_selection import train_test_split

    x, y = load_digits_raw()
    if not (isinstance(test_size, (float, int)) and not isinstance(test_size, bool) and 0 < test_size < 1):
        raise ValueError(f"test_size must be a fraction in (0, 1), got {test_size!r}")
    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=test_size, stratify=y.numpy(),
                              random_state=derive_seed(seed, "data", "digits", "split") % (2 ** 32))
    tr_t, te_t = torch.from_numpy(tr), torch.from_numpy(te)
    desc = (f"sklearn digits: {len(tr)} train / {len(te)} test (seeded stratified split, test_size={test_size}, "
            f"seed={seed}); 8x8 grey images as (N, 1, 8, 8), pixel values 0..16 divided by 16.")
    return Dataset(name="digits", x_train=x[tr_t].to(device), y_train=y[tr_t].to(device),
                   x_test=x[te_t].to(device), y_test=y[te_t].to(device),
                   classes=[str(i) for i in range(10)], num_classes=10, input_shape=(1, 8, 8),
                   description=desc, source="bundled", feature_names=None,
                   info={"test_size": test_size, "seed": seed, "root": "scikit-learn"})
