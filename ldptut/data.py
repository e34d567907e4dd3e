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
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import logging
import math
import os
import shutil
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch

from .rng import derive_seed, generator

__all__ = [
    "Dataset", "DataError", "DatasetUnavailable", "DATASETS",
    "load_dataset", "load_mnist", "load_fashion_mnist", "load_cifar10", "load_digits", "load_digits_raw",
    "load_adult", "load_bank", "load_kddcup99", "load_covertype", "sparse_synthetic",
    "data_root", "mirror_path",
]

log = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]
DeviceLike = Union[str, torch.device]

ENV_ROOT = "LDPTUT_DATA_DIR"
ENV_MIRROR = "LDPTUT_DATA_MIRROR"

#: sha256 of every mirror file the loaders read (same values as the mirror's SHA256SUMS), so that a
#: corrupted mirror without a SHA256SUMS is still caught.
MIRROR_SHA256 = {
    "mnist/train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "mnist/train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "mnist/t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "mnist/t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    "fashion-mnist/train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "fashion-mnist/train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "fashion-mnist/t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "fashion-mnist/t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    "cifar10/data_batch_1.png": "ee3c0cd76509228a3c5866f01be7462f2ba0f750bad0587641e76322e1c5563d",
    "cifar10/data_batch_2.png": "53c89e7975cc4c051cf2de9dbb0a33d875685a831b0b4d5ed3f7a619008242ff",
    "cifar10/data_batch_3.png": "5ecbb08a6a29c39fc9c35e67f0b43774ba340536785730139b4440f104c7d81b",
    "cifar10/data_batch_4.png": "ec94f4bed89ef3d81caf044635599990f84683eabd534de33298b219a3359111",
    "cifar10/data_batch_5.png": "45be8b140d56d3d900de4699149481d84d2ebebea4250b6ad534698b1237df22",
    "cifar10/test_batch.png": "19da11909002589de9d684a8c2fdca90a4f81fc041fe0d360cbf32b220e8b92b",
    "cifar10/labels.npz": "2adcb621b226054b45ea498e5151b50747ee667e75829c059844e7b78f6b5196",
    "adult/adult.data.gz": "c7a2b4716a97f930123e0baf879188d701e798172631a654fc703d4b082907f3",
    "adult/adult.test.gz": "8a2c1bffa6e7ce5abfa43881ae5e87c4311ebc2b3cd526c9c40a43f19f06f799",
    "bank-marketing/bank-full.csv.gz": "a33820520e31d26b498e31003e99eb0e477690b699a38eade375acf3b3004dcd",
    "kddcup99/kddcup.data_10_percent.gz": "8045aca0d84e70e622d1148d7df782496f6333bf6eb979a1b0837c42a9fd9561",
    "covertype/covtype.data.gz": "d9ee0a9505e98890bdc1a4b458340bb5d059698ff98b721e87160a4b565db877",
}

#: sha256 of the decoded CIFAR-10 arrays (HWC uint8 bytes), from the mirror's README.
_CIFAR_ARRAY_SHA256 = {
    "x_train": "47af8b02cfcfb6cdf3dbbd1969ad7f1b70f4413f6f80f437b020ee4e5bc8304a",
    "y_train": "2b7cd2f24487317614016b72ffd53071c3062f592f0eb300c18a770d41ae1253",
    "x_test": "f9b1e2130bab680db56eb06d886f7f1ad0f1183907ceff4659d1735c890f5b04",
    "y_test": "cec8a24a1e92aa2ecaa0bbd3dbfa86bf6cd8759fbd209a832824c8cf0afca9d5",
}

# Original UCI files (downloaded as a user with internet would), with their official digests.
_ADULT_URLS = {
    "adult.data": ("https://archive.ics.uci.edu/ml/machine-learning-databases/adult/adult.data",
                   "md5", "5d7c39d7b8804f071cdd1f2a7c460872"),
    "adult.test": ("https://archive.ics.uci.edu/ml/machine-learning-databases/adult/adult.test",
                   "md5", "35238206dfdf7f1fe215bbb874adecdc"),
}
_BANK_URLS = (
    "https://archive.ics.uci.edu/static/public/222/bank+marketing.zip",
    "https://archive.ics.uci.edu/ml/machine-learning-databases/00222/bank.zip",
)
_BANK_FULL_SHA256 = "d1513ec63b385506f7cfce9f2c5caa9fe99e7ba4e8c3fa264b3aaf0f849ed32d"

_CACHE_VERSION = "v1"


# ============================================================================ errors and paths
class DataError(ValueError):
    """A data file failed verification (wrong sha256) or could not be parsed."""


class DatasetUnavailable(RuntimeError):
    """The data set is in neither the cache nor a mirror, and could not be downloaded."""


def _repo_root() -> Optional[Path]:
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").is_file() else None


def data_root() -> Path:
    """The default data root (cache folder).

    ``$LDPTUT_DATA_DIR`` if set; else the repository's ``data/`` folder when the package runs from a
    checkout (the folder above ``ldptut/`` has ``pyproject.toml``); else ``~/.cache/ldptut``.
    """
    env = os.environ.get(ENV_ROOT)
    if env:
        return Path(env).expanduser().resolve()
    repo = _repo_root()
    if repo is not None:
        return repo / "data"
    return Path.home() / ".cache" / "ldptut"


def mirror_path() -> Optional[Path]:
    """The mirror folder named by ``$LDPTUT_DATA_MIRROR``, or ``None`` when the variable is unset or empty."""
    env = os.environ.get(ENV_MIRROR)
    if not env:
        return None
    return Path(env).expanduser().resolve()


def _sha256(path: PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in ``chunk_size`` chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def _digest(path: PathLike, algo: str, chunk_size: int = 1 << 20) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def _read_sums(mirror: Path) -> dict[str, str]:
    sums_file = mirror / "SHA256SUMS"
    out: dict[str, str] = {}
    if not sums_file.is_file():
        return out
    for line in sums_file.read_text().splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2:
            continue
        digest, name = parts
        name = name.lstrip("*")
        if name.startswith("./"):
            name = name[2:]
        out[name] = digest.lower()
    return out


class _MirrorIncomplete(Exception):
    def __init__(self, missing: list[str]):
        super().__init__(", ".join(missing))
        self.missing = missing


def _mirror_files(mirror: Path, rels: Sequence[str]) -> dict[str, Path]:
    """Check that the mirror holds ``rels`` and that each matches its sha256; return their paths.

    Raises :class:`_MirrorIncomplete` when files are missing and :class:`DataError` on a mismatch.
    """
    missing = [r for r in rels if not (mirror / r).is_file()]
    if missing:
        raise _MirrorIncomplete(missing)
    sums = _read_sums(mirror)
    out = {}
    for rel in rels:
        path = mirror / rel
        actual = _sha256(path)
        for expected, where in ((sums.get(rel), f"{mirror / 'SHA256SUMS'}"),
                                (MIRROR_SHA256.get(rel), "the sums built into ldptut/data.py")):
            if expected is not None and actual != expected:
                raise DataError(
                    f"checksum mismatch for mirror file {path}: expected sha256 {expected} "
                    f"(from {where}), got {actual}. The file is corrupted or not the original. "
                    f"Fix: replace it with an intact copy (check the whole mirror with "
                    f"`cd {mirror} && sha256sum -c SHA256SUMS`), or unset {ENV_MIRROR} so that "
                    f"ldptut downloads the data set instead.")
        out[rel] = path
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: A temporary file of a cache write older than this is left over by a killed process (a conversion
#: takes seconds to a minute), and is removed before the next write.
STALE_TEMP_SECONDS = 15 * 60


def _remove_stale_temps(dest: Path) -> None:
    """Delete ``.<name>.*.tmp`` files next to ``dest`` left by a killed write (older than STALE_TEMP_SECONDS)."""
    now = time.time()
    for tmp in dest.parent.glob(f".{dest.name}.*.tmp"):
        try:
            if now - tmp.stat().st_mtime > STALE_TEMP_SECONDS:
                tmp.unlink()
                log.warning("removed %s, left over by an interrupted cache write", tmp)
        except OSError:  # gone already (another process), or not ours to remove
            pass


def _sidecar(path: Path) -> Path:
    """``<file>.sha256``: the checksum of a converted cache file, written with it."""
    return path.with_name(path.name + ".sha256")


_VERIFIED: dict[tuple[str, int, int], bool] = {}


def _cache_file_ok(path: Path) -> bool:
    """Whether the cache file ``path`` can be read: False if it is missing or does not match the sha256 written with
    it (corrupted, even at the same size: it is then rebuilt, with a warning); True for a file without a checksum
    (written by torchvision, or by an older ldptut). A folder where the file should be is an error naming it. Each
    (file, size, modification time) is hashed once per process."""
    if path.is_dir():
        raise DataError(f"{path} is a folder, where the data cache expects a file: remove it (the file is rebuilt)")
    if not path.is_file():
        return False
    side = _sidecar(path)
    if not side.is_file():
        return True
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        expected = side.read_text().split()[0] if side.read_text().split() else ""
        _VERIFIED[key] = _sha256(path) == expected
        if not _VERIFIED[key]:
            log.warning("data cache file %s does not match its checksum %s (corrupted?); it is rebuilt", path, side)
    return _VERIFIED[key]


def _atomic_write(dest: Path, write: Callable[[Path], None], *, checksum: bool = True) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``dest``, then rename it to ``dest``, and (``checksum``) write
    its sha256 beside it (:func:`_sidecar`), which :func:`_cache_file_ok` checks on every read.

    Stale temporary files of earlier, killed writes are removed first; a cache folder that cannot be
    written raises :class:`DataError` saying which folder and how to choose another one; a folder where the
    file should be raises naming it.
    """
    if dest.is_dir():
        raise DataError(f"{dest} is a folder, where the data cache expects a file: remove it (the file is rebuilt)")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(dest)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as e:
        raise DataError(f"cannot write the data cache file {dest} ({type(e).__name__}: {e}). Make "
                        f"{dest.parent} writable, or set {ENV_ROOT} to a writable folder (the cache then lives "
                        "there).") from e
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        digest = _sha256(tmp_path) if checksum else None
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
    if digest is not None:  # a crash before this line leaves an old checksum: the next read rebuilds the file
        _atomic_write(_sidecar(dest), lambda t: t.write_text(f"{digest}  {dest.name}\n"), checksum=False)


def _download(url: str, dest: Path, timeout: float = 60.0) -> Path:
    """Fetch ``url`` into ``dest`` (atomically) with ``urllib.request.urlopen``."""
    def write(tmp: Path) -> None:
        req = urllib.request.Request(url, headers={"User-Agent": "ldptut"})
        with urllib.request.urlopen(req, timeout=timeout) as resp, open(tmp, "wb") as fh:
            shutil.copyfileobj(resp, fh, 1 << 20)
    log.info("downloading %s -> %s", url, dest)
    _atomic_write(dest, write)
    return dest


def _resolve_root(root: Optional[PathLike]) -> Path:
    return Path(root).expanduser().resolve() if root is not None else data_root()


# ============================================================================ the Dataset record
@dataclass(frozen=True, eq=False)
class Dataset:
    """A preprocessed data set held in memory.

    ``x_*`` are float32 and ``y_*`` int64 tensors on the same device. ``input_shape`` is the shape of
    one sample (``(C, H, W)`` for images, ``(d,)`` for tabular data). ``source`` is where the files
    came from: ``"cache"``, ``"mirror"``, ``"download"`` or ``"bundled"`` (shipped with a package).
    ``feature_names`` lists the tabular columns after encoding (``None`` for images). ``info`` holds
    the preprocessing constants (image mean/std, split sizes, seed, cache path...).
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: list[str]
    num_classes: int
    input_shape: tuple[int, ...]
    description: str
    source: str = "cache"
    feature_names: Optional[list[str]] = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.shape[0] != y.shape[0]:
                raise ValueError(f"{self.name}: x_{split} has {x.shape[0]} rows but y_{split} has {y.shape[0]}")
            if tuple(x.shape[1:]) != tuple(self.input_shape):
                raise ValueError(f"{self.name}: x_{split} sample shape {tuple(x.shape[1:])} != {self.input_shape}")
        if len(self.classes) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.classes)} class names for num_classes={self.num_classes}")

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def device(self) -> torch.device:
        return self.x_train.device

    def to(self, device: DeviceLike) -> "Dataset":
        """A copy with all tensors moved to ``device``."""
        return dataclasses.replace(self, x_train=self.x_train.to(device), y_train=self.y_train.to(device),
                                   x_test=self.x_test.to(device), y_test=self.y_test.to(device))

    def __repr__(self) -> str:
        return (f"Dataset(name={self.name!r}, train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
                f"num_classes={self.num_classes}, device={self.device}, source={self.source!r})")

    def summary(self) -> str:
        """A few human-readable lines: sizes, classes, source and preprocessing."""
        return (f"{self.name}: {self.n_train} train / {self.n_test} test, input {self.input_shape}, "
                f"{self.num_classes} classes, from {self.source} ({self.info.get('root', '')})\n"
                f"{self.description}")


# ============================================================================ fetching machinery
def _obtain(name: str, root: Path, download: bool, *, read_cache: Callable[[], Any],
            mirror_rels: Sequence[str], from_mirror: Callable[[dict[str, Path]], None],
            from_download: Callable[[], None], cache_where: str) -> tuple[Any, str]:
    """Cache -> mirror -> download. ``from_mirror``/``from_download`` fill the cache, which is then read."""
    payload = read_cache()
    if payload is not None:
        log.info("%s: loaded from cache %s", name, cache_where)
        return payload, "cache"
    notes = [f"it is not in the cache ({cache_where})"]
    mirror = mirror_path()
    if mirror is None:
        notes.append(f"{ENV_MIRROR} is not set")
    elif not mirror.is_dir():
        notes.append(f"{ENV_MIRROR}={mirror} is not a folder")
    else:
        try:
            files = _mirror_files(mirror, mirror_rels)
        except _MirrorIncomplete as e:
            notes.append(f"the mirror {mirror} lacks {', '.join(e.missing)}")
        else:
            from_mirror(files)
            payload = read_cache()
            if payload is None:  # pragma: no cover - converter bug
                raise DataError(f"{name}: converting the mirror files into {cache_where} left no readable cache")
            log.info("%s: converted from mirror %s into %s", name, mirror, cache_where)
            return payload, "mirror"

    sub = ", ".join(sorted({r.split("/")[0] + "/" for r in mirror_rels}))
    how = (f"Provide it in one of two ways: (1) set {ENV_MIRROR} to a folder laid out like "
           f"../shared/datasets (with {sub} and SHA256SUMS), or (2) connect to the "
           f"internet and call with download=True so that the download into {root} works.")
    if not download:
        raise DatasetUnavailable(f"data set {name!r} is unavailable: {'; '.join(notes)}; "
                                 f"and download=False. {how}")
    try:
        from_download()
        payload = read_cache()
        if payload is None:
            raise DataError(f"the download finished but {cache_where} is still unreadable")
    except DataError:
        raise
    except Exception as e:  # offline, HTTP error, ...
        raise DatasetUnavailable(f"data set {name!r} is unavailable: {'; '.join(notes)}; and the download "
                                 f"failed ({type(e).__name__}: {e}). {how}") from e
    log.info("%s: downloaded into %s", name, cache_where)
    return payload, "download"


def _split_perm(n: int, test_size: float, seed: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random split: ``ceil(test_size * n)`` test rows; both parts in shuffled order."""
    if not (isinstance(test_size, (float, int)) and not isinstance(test_size, bool) and 0 < test_size < 1):
        raise ValueError(f"test_size must be a fraction in (0, 1), got {test_size!r}")
    n_test = int(math.ceil(test_size * n))
    perm = torch.randperm(n, generator=generator(seed, "data", name, "split"))
    return perm[n_test:], perm[:n_test]


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


# ============================================================================ tabular sets
# A parsed table, cached as an .npz: ``num`` float64 (N, n_num); ``bin`` uint8 (N, n_bin) (0/1 columns
# kept as they are); ``cat`` int32 (N, n_cat) codes into ``vocab`` (-1 = unseen); ``y`` int64 labels;
# ``meta`` a JSON string with the column names, vocabularies and class names.
# Adult keeps two tables (prefix ``train_`` / ``test_``) because it has an official test file.

def _save_npz(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
    _atomic_write(path, write)


def _load_npz(path: Path) -> Optional[tuple[dict[str, np.ndarray], dict]]:
    if not _cache_file_ok(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != "meta"}
            meta = json.loads(str(z["meta"]))
    except Exception as e:  # truncated or foreign file: rebuild it
        log.warning("ignoring unreadable cache file %s (%s)", path, e)
        return None
    return arrays, meta


def _str_series(values):
    import pandas as pd

    return pd.Series(values).astype(str)


def _codes(values, vocab: list[str]) -> np.ndarray:
    """Integer codes of ``values`` in ``vocab`` (-1 for a value not in it)."""
    import pandas as pd

    return np.asarray(pd.Categorical(_str_series(values), categories=vocab).codes, dtype=np.int32)


def _vocab(values) -> list[str]:
    """The sorted distinct values, as strings."""
    return sorted(str(v) for v in _str_series(values).unique())


def _encode(num: np.ndarray, bin_: Optional[np.ndarray], cat: Optional[np.ndarray], vocab: list[list[str]],
            mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    blocks = [((num - mean) / std).astype(np.float32)]
    if bin_ is not None and bin_.shape[1]:
        blocks.append(bin_.astype(np.float32))
    if cat is not None:
        for j, v in enumerate(vocab):
            oh = np.zeros((cat.shape[0], len(v)), dtype=np.float32)
            ok = cat[:, j] >= 0
            oh[np.nonzero(ok)[0], cat[ok, j]] = 1.0
            blocks.append(oh)
    return np.concatenate(blocks, axis=1)


def _tabular_dataset(name: str, tr: dict[str, np.ndarray], te: dict[str, np.ndarray], meta: dict,
                     classes: list[str], source: str, root: Path, device: DeviceLike, what: str,
                     extra_info: dict, y_map: Optional[np.ndarray] = None) -> Dataset:
    """Standardise numeric columns with the training rows' mean/std (population std; a constant column
    gets std 1), keep 0/1 columns, one-hot the categorical codes; build the Dataset."""
    mean = tr["num"].mean(axis=0)
    std = tr["num"].std(axis=0)
    std = np.where(std > 0, std, 1.0)
    vocab = meta.get("vocab", [])
    xs = [_encode(p["num"], p.get("bin"), p.get("cat"), vocab, mean, std) for p in (tr, te)]
    ys = [p["y"] if y_map is None else y_map[p["y"]] for p in (tr, te)]
    feat = list(meta["num_names"]) + list(meta.get("bin_names", []))
    for col, v in zip(meta.get("cat_names", []), vocab):
        feat += [f"{col}={c}" for c in v]
    d = xs[0].shape[1]
    assert len(feat) == d, (len(feat), d)
    n_num, n_bin, n_cat = len(meta["num_names"]), len(meta.get("bin_names", [])), len(meta.get("cat_names", []))
    desc = (f"{what}: {len(ys[0])} train / {len(ys[1])} test rows, {d} features = {n_num} numeric columns "
            f"standardised with the training rows' mean/std"
            + (f" + {n_bin} 0/1 columns kept as they are" if n_bin else "")
            + (f" + {n_cat} categorical columns one-hot encoded ({d - n_num - n_bin} dims)" if n_cat else "")
            + f"; {extra_info.pop('label_doc')}.")
    info = {"root": str(root), "num_mean": mean.tolist(), "num_std": std.tolist(), **extra_info}
    return Dataset(name=name, x_train=torch.from_numpy(xs[0]).to(device),
                   y_train=torch.from_numpy(np.asarray(ys[0], dtype=np.int64)).to(device),
                   x_test=torch.from_numpy(xs[1]).to(device),
                   y_test=torch.from_numpy(np.asarray(ys[1], dtype=np.int64)).to(device),
                   classes=list(classes), num_classes=len(classes), input_shape=(d,), description=desc,
                   source=source, feature_names=feat, info=info)


def _take(arrays: dict[str, np.ndarray], idx: torch.Tensor) -> dict[str, np.ndarray]:
    i = idx.numpy()
    return {k: v[i] for k, v in arrays.items()}


def _tabular(name: str, root: Optional[PathLike], download: bool, mirror_rels: Sequence[str],
             parse_mirror: Callable[[dict[str, Path]], tuple[dict, dict]],
             fetch: Callable[[Path], tuple[dict, dict]]) -> tuple[dict, dict, str, Path]:
    root_p = _resolve_root(root)
    cache = root_p / name / f"{name}_{_CACHE_VERSION}.npz"
    (arrays, meta), source = _obtain(
        name, root_p, download, read_cache=lambda: _load_npz(cache), mirror_rels=mirror_rels,
        from_mirror=lambda files: _save_npz(cache, *parse_mirror(files)),
        from_download=lambda: _save_npz(cache, *fetch(root_p)), cache_where=str(cache))
    return arrays, meta, source, root_p


# ---------------------------------------------------------------------------- Adult
_ADULT_COLS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
               "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
               "native-country", "income"]
_ADULT_NUM = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
_ADULT_CAT = ["workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
              "native-country"]


def _parse_adult(train_src, test_src) -> tuple[dict, dict]:
    import pandas as pd

    kw = dict(header=None, names=_ADULT_COLS, skipinitialspace=True, keep_default_na=False, na_values=[])
    tr = pd.read_csv(train_src, **kw)
    te = pd.read_csv(test_src, skiprows=1, **kw)       # first line: "|1x3 Cross validator"
    vocab = [_vocab(tr[c]) for c in _ADULT_CAT]          # from the training file; '?' is a category
    arrays = {}
    for prefix, df in (("train_", tr), ("test_", te)):
        lab = df["income"].astype(str).str.rstrip(".")
        if not set(lab.unique()) <= {"<=50K", ">50K"}:
            raise DataError(f"Adult: unexpected income labels {sorted(set(lab.unique()))}")
        arrays[prefix + "num"] = df[_ADULT_NUM].to_numpy(np.float64)
        arrays[prefix + "cat"] = np.stack([_codes(df[c], v) for c, v in zip(_ADULT_CAT, vocab)], axis=1)
        arrays[prefix + "y"] = (lab == ">50K").to_numpy(np.int64)
    if len(arrays["train_y"]) != 32561 or len(arrays["test_y"]) != 16281:
        raise DataError(f"Adult: expected 32561/16281 rows, got {len(arrays['train_y'])}/{len(arrays['test_y'])}")
    meta = {"num_names": _ADULT_NUM, "cat_names": _ADULT_CAT, "vocab": vocab}
    return arrays, meta


def _fetch_adult(root: Path) -> tuple[dict, dict]:
    raw = root / "adult" / "raw"
    paths = {}
    for fname, (url, algo, expected) in _ADULT_URLS.items():
        p = raw / fname
        if not (p.is_file() and _digest(p, algo) == expected):
            _download(url, p)
        actual = _digest(p, algo)
        if actual != expected:
            raise DataError(f"downloaded {url} into {p}: {algo} {actual}, expected {expected}; delete it and retry")
        paths[fname] = p
    return _parse_adult(paths["adult.data"], paths["adult.test"])


def load_adult(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True) -> Dataset:
    """UCI Adult (census income): official split, 32,561 train / 16,281 test rows, 2 classes.

    Label: income ``>50K`` = 1, ``<=50K`` = 0 (the trailing dot of the test file is stripped).
    Features: the 6 numeric columns (age, fnlwgt, education-num, capital-gain, capital-loss,
    hours-per-week) standardised with training mean/std, and the 8 categorical columns one-hot with the
    categories of the training file, the missing value ``?`` counting as its own category
    (workclass 9, education 16, marital-status 7, occupation 15, relationship 6, race 5, sex 2,
    native-country 42) -> **108 features** (105 if '?' were dropped). Test categories absent from
    the training file would encode as all zeros (none occur). Rows with missing values are kept.
    Download: the UCI files ``adult.data``/``adult.test`` (official md5s checked), into ``<root>/adult/raw``.
    """
    arrays, meta, source, root_p = _tabular(
        "adult", root, download, ["adult/adult.data.gz", "adult/adult.test.gz"],
        lambda f: _parse_adult(f["adult/adult.data.gz"], f["adult/adult.test.gz"]), _fetch_adult)
    tr = {k[6:]: v for k, v in arrays.items() if k.startswith("train_")}
    te = {k[5:]: v for k, v in arrays.items() if k.startswith("test_")}
    return _tabular_dataset("adult", tr, te, meta, ["<=50K", ">50K"], source, root_p, device,
                            "UCI Adult (official split)",
                            {"label_doc": "label income >50K = 1", "split": "official"})


# ---------------------------------------------------------------------------- Bank Marketing
_BANK_NUM = ["age", "balance", "day", "duration", "campaign", "pdays", "previous"]
_BANK_CAT = ["job", "marital", "education", "default", "housing", "loan", "contact", "month", "poutcome"]


def _parse_bank(src) -> tuple[dict, dict]:
    import pandas as pd

    df = pd.read_csv(src, sep=";", keep_default_na=False, na_values=[])
    if list(df.columns) != _BANK_NUM[:1] + ["job", "marital", "education", "default", "balance", "housing",
                                            "loan", "contact", "day", "month", "duration", "campaign",
                                            "pdays", "previous", "poutcome", "y"]:
        raise DataError(f"Bank Marketing: unexpected header {list(df.columns)}")
    vocab = [_vocab(df[c]) for c in _BANK_CAT]   # from the whole file; 'unknown' is a category
    y = df["y"].astype(str)
    if not set(y.unique()) <= {"no", "yes"}:
        raise DataError(f"Bank Marketing: unexpected labels {sorted(set(y.unique()))}")
    arrays = {"num": df[_BANK_NUM].to_numpy(np.float64),
              "cat": np.stack([_codes(df[c], v) for c, v in zip(_BANK_CAT, vocab)], axis=1),
              "y": (y == "yes").to_numpy(np.int64)}
    return arrays, {"num_names": _BANK_NUM, "cat_names": _BANK_CAT, "vocab": vocab}


def _find_in_zip(data: bytes, member_suffix: str) -> Optional[bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for n in z.namelist():
            if n.endswith(member_suffix):
                return z.read(n)
        for n in z.namelist():
            if n.endswith(".zip"):
                inner = _find_in_zip(z.read(n), member_suffix)
                if inner is not None:
                    return inner
    return None


def _fetch_bank(root: Path) -> tuple[dict, dict]:
    raw = root / "bank" / "raw"
    dest = raw / "bank-full.csv"
    if not (dest.is_file() and _sha256(dest) == _BANK_FULL_SHA256):
        errors = []
        for url in _BANK_URLS:
            try:
                zpath = _download(url, raw / url.rsplit("/", 1)[-1])
                content = _find_in_zip(zpath.read_bytes(), "bank-full.csv")
                if content is None:
                    raise DataError(f"{url}: no bank-full.csv inside")
                _atomic_write(dest, lambda tmp: tmp.write_bytes(content))
                break
            except Exception as e:
                errors.append(f"{url}: {type(e).__name__}: {e}")
        else:
            raise OSError("could not download Bank Marketing: " + "; ".join(errors))
    actual = _sha256(dest)
    if actual != _BANK_FULL_SHA256:
        raise DataError(f"{dest}: sha256 {actual}, expected {_BANK_FULL_SHA256}; delete it and retry")
    return _parse_bank(dest)


def load_bank(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
              test_size: float = 0.2, seed: int = 0) -> Dataset:
    """UCI Bank Marketing (``bank-full.csv``): 45,211 rows, 2 classes (subscribed a term deposit).

    Label: ``y == "yes"`` = 1 (11.7 % of rows). Seeded random split with ``ceil(test_size * N)`` test
    rows; the defaults (``test_size=0.2, seed=0``) give 36,168 train / 9,043 test, both in shuffled order.
    Features: 7 numeric columns (age, balance, day, duration, campaign, pdays, previous) standardised
    with the training rows' mean/std, and 9 categorical columns one-hot over the categories of the
    whole file, ``unknown`` being a category (job 12, marital 3, education 4, default 2, housing 2,
    loan 2, contact 3, month 12, poutcome 4) -> **51 features**. Note (bank-names.txt): ``duration``
    is only known after the call, so a realistic predictive model would drop it; it is kept here.
    Download: the UCI archive ``bank+marketing.zip`` (or the older ``bank.zip``), ``bank-full.csv``
    checked against its sha256, into ``<root>/bank/raw``.
    """
    arrays, meta, source, root_p = _tabular(
        "bank", root, download, ["bank-marketing/bank-full.csv.gz"],
        lambda f: _parse_bank(f["bank-marketing/bank-full.csv.gz"]), _fetch_bank)
    tr_i, te_i = _split_perm(len(arrays["y"]), test_size, seed, "bank")
    return _tabular_dataset("bank", _take(arrays, tr_i), _take(arrays, te_i), meta, ["no", "yes"], source,
                            root_p, device, f"UCI Bank Marketing (random split test_size={test_size}, seed={seed})",
                            {"label_doc": "label y=yes = 1", "test_size": test_size, "seed": seed})


# ---------------------------------------------------------------------------- KDD Cup 99
_KDD_COLS = [
    "duration", "protocol_type", "service", "flag", "src_bytes", "dst_bytes", "land", "wrong_fragment",
    "urgent", "hot", "num_failed_logins", "logged_in", "num_compromised", "root_shell", "su_attempted",
    "num_root", "num_file_creations", "num_shells", "num_access_files", "num_outbound_cmds",
    "is_host_login", "is_guest_login", "count", "srv_count", "serror_rate", "srv_serror_rate",
    "rerror_rate", "srv_rerror_rate", "same_srv_rate", "diff_srv_rate", "srv_diff_host_rate",
    "dst_host_count", "dst_host_srv_count", "dst_host_same_srv_rate", "dst_host_diff_srv_rate",
    "dst_host_same_src_port_rate", "dst_host_srv_diff_host_rate", "dst_host_serror_rate",
    "dst_host_srv_serror_rate", "dst_host_rerror_rate", "dst_host_srv_rerror_rate"]
_KDD_CAT = ["protocol_type", "service", "flag"]
_KDD_NUM = [c for c in _KDD_COLS if c not in _KDD_CAT]


def _kdd_from_frame(df) -> tuple[dict, dict]:
    if df.shape[1] != 42:
        raise DataError(f"KDD Cup 99: expected 42 columns, got {df.shape[1]}")
    df.columns = _KDD_COLS + ["label"]
    labels = df["label"].astype(str).str.rstrip(".")
    label_names = _vocab(labels)
    vocab = [_vocab(df[c]) for c in _KDD_CAT]   # from the whole file, so the width does not depend on the split
    arrays = {"num": df[_KDD_NUM].to_numpy(np.float64),
              "cat": np.stack([_codes(df[c], v) for c, v in zip(_KDD_CAT, vocab)], axis=1),
              "y": _codes(labels, label_names).astype(np.int64)}
    return arrays, {"num_names": _KDD_NUM, "cat_names": _KDD_CAT, "vocab": vocab, "label_names": label_names}


def _parse_kdd(src) -> tuple[dict, dict]:
    import pandas as pd

    return _kdd_from_frame(pd.read_csv(src, header=None, keep_default_na=False, na_values=[]))


def _fetch_kdd(root: Path) -> tuple[dict, dict]:
    import pandas as pd
    from sklearn.datasets import fetch_kddcup99

    b = fetch_kddcup99(subset=None, percent10=True, data_home=str(root / "sklearn"), download_if_missing=True)
    dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    X = np.asarray(b.data, dtype=object)
    cols = {}
    for j, c in enumerate(_KDD_COLS):
        cols[j] = [dec(v) for v in X[:, j]] if c in _KDD_CAT else pd.to_numeric(X[:, j])
    cols[len(_KDD_COLS)] = [dec(v) for v in b.target]
    df = pd.DataFrame(cols)
    return _kdd_from_frame(df)


def load_kddcup99(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
                  binary: bool = False, test_size: float = 0.2, seed: int = 0) -> Dataset:
    """KDD Cup 1999, the 10 % file: 494,021 network connections, 41 features.

    Labels: by default the 23 connection types (``classes`` = the label names sorted alphabetically,
    trailing dot removed; ``normal`` is one of them); ``binary=True`` gives ``normal`` = 0 vs any attack
    = 1. Seeded random (unstratified) split with ``ceil(test_size * N)`` test rows: the defaults give
    395,216 train / 98,805 test, shuffled. Features: the 38 numeric columns standardised with the
    training rows' mean/std (constant columns, e.g. num_outbound_cmds, get std 1), and protocol_type (3),
    service (66), flag (11) one-hot over the categories of the whole file -> **118 features**. The
    file has many duplicate rows and some heavy-tailed columns (src_bytes); nothing is removed.
    Download: ``sklearn.datasets.fetch_kddcup99(percent10=True, data_home=<root>/sklearn)``.
    """
    arrays, meta, source, root_p = _tabular(
        "kddcup99", root, download, ["kddcup99/kddcup.data_10_percent.gz"],
        lambda f: _parse_kdd(f["kddcup99/kddcup.data_10_percent.gz"]), _fetch_kdd)
    tr_i, te_i = _split_perm(len(arrays["y"]), test_size, seed, "kddcup99")
    names = list(meta["label_names"])
    if binary:
        y_map = np.array([0 if n == "normal" else 1 for n in names], dtype=np.int64)
        classes, label_doc = ["normal", "attack"], "label normal = 0, any attack = 1 (binary=True)"
    else:
        y_map, classes = None, names
        label_doc = f"labels = the {len(names)} connection types in alphabetical order"
    return _tabular_dataset("kddcup99", _take(arrays, tr_i), _take(arrays, te_i), meta, classes, source,
                            root_p, device, f"KDD Cup 99 10% (random split test_size={test_size}, seed={seed})",
                            {"label_doc": label_doc, "test_size": test_size, "seed": seed, "binary": binary,
                             "label_names": names}, y_map=y_map)


# ---------------------------------------------------------------------------- Covertype
_COV_NUM = ["Elevation", "Aspect", "Slope", "Horizontal_Distance_To_Hydrology",
            "Vertical_Distance_To_Hydrology", "Horizontal_Distance_To_Roadways", "Hillshade_9am",
            "Hillshade_Noon", "Hillshade_3pm", "Horizontal_Distance_To_Fire_Points"]
_COV_BIN = [f"Wilderness_Area{i}" for i in range(1, 5)] + [f"Soil_Type{i}" for i in range(1, 41)]
_COV_CLASSES = ["Spruce/Fir", "Lodgepole Pine", "Ponderosa Pine", "Cottonwood/Willow", "Aspen", "Douglas-fir",
                "Krummholz"]


def _cov_from_matrix(m: np.ndarray) -> tuple[dict, dict]:
    if m.ndim != 2 or m.shape[1] != 55:
        raise DataError(f"Covertype: expected 55 columns, got shape {m.shape}")
    y = m[:, 54].astype(np.int64) - 1
    if y.min() < 0 or y.max() > 6:
        raise DataError(f"Covertype: labels outside 1..7 ({y.min() + 1}..{y.max() + 1})")
    arrays = {"num": m[:, :10].astype(np.float64), "bin": m[:, 10:54].astype(np.uint8), "y": y}
    return arrays, {"num_names": _COV_NUM, "bin_names": _COV_BIN}


def _parse_cov(src) -> tuple[dict, dict]:
    import pandas as pd

    return _cov_from_matrix(pd.read_csv(src, header=None, dtype=np.int32).to_numpy())


def _fetch_cov(root: Path) -> tuple[dict, dict]:
    from sklearn.datasets import fetch_covtype

    b = fetch_covtype(data_home=str(root / "sklearn"), download_if_missing=True)
    return _cov_from_matrix(np.concatenate([b.data, np.asarray(b.target).reshape(-1, 1)], axis=1))


def load_covertype(*, root: Optional[PathLike] = None, device: DeviceLike = "cpu", download: bool = True,
                   test_size: float = 0.2, seed: int = 0) -> Dataset:
    """UCI Forest Covertype: 581,012 rows, 54 features, 7 classes (label = Cover_Type - 1, in 0..6).

    Seeded random split with ``ceil(test_size * N)`` test rows: the defaults (``test_size=0.2, seed=0``)
    give 464,809 train / 116,203 test, shuffled (the classic first-15,120-rows split is not used).
    Features: the 10 numeric columns standardised with the training rows' mean/std, then the 4
    wilderness-area and 40 soil-type columns, already one-hot in the file, kept as 0/1 -> **54 features**.
    Download: ``sklearn.datasets.fetch_covtype(data_home=<root>/sklearn)``.
    """
    arrays, meta, source, root_p = _tabular(
        "covertype", root, download, ["covertype/covtype.data.gz"],
        lambda f: _parse_cov(f["covertype/covtype.data.gz"]), _fetch_cov)
    tr_i, te_i = _split_perm(len(arrays["y"]), test_size, seed, "covertype")
    return _tabular_dataset("covertype", _take(arrays, tr_i), _take(arrays, te_i), meta, _COV_CLASSES, source,
                            root_p, device, f"UCI Covertype (random split test_size={test_size}, seed={seed})",
                            {"label_doc": "label = Cover_Type - 1 in 0..6", "test_size": test_size, "seed": seed})


# ---------------------------------------------------------------------------- synthetic (sparse gradients)
def sparse_synthetic(n: int, d: int, *, c1: float, c2: float, seed: int = 0,
                     device: DeviceLike = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Binary classification data whose per-record gradients are skewed: (x (n, d) float32, y (n,) in {-1, +1}).

    Our reading of the procedure FedSel (DASFAA 2020, Section 5.1) takes from Wangni et al. (NeurIPS 2018,
    its reference [26]), which it names only by its two parameters: entries x_ij ~ N(0, 1), each multiplied
    by ``c1`` independently with probability ``c2`` (so a record has about (1 - c2) d large entries; c1 = 0.01,
    c2 = 0.9 is "syn-0.01-0.9"), a true weight vector w* ~ N(0, I_d) and noiseless labels y = sign(x.w*).
    Everything is drawn from ``seed``; the same seed gives the same data.
    """
    from ._validate import pos_int, real

    n, d = pos_int(n, "n"), pos_int(d, "d")
    c1 = real(c1, "c1", positive=True)
    c2 = real(c2, "c2", nonneg=True)
    if c2 > 1:
        raise ValueError(f"c2 is a probability, got {c2}")
    g = torch.Generator().manual_seed(int(seed))
    x = torch.randn(n, d, generator=g)
    x = torch.where(torch.rand(n, d, generator=g) < c2, x * c1, x)
    w_star = torch.randn(d, generator=g)
    y = torch.where(x @ w_star >= 0, 1.0, -1.0)
    return x.to(device), y.to(device)


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


if __name__ == "__main__":
    main()
