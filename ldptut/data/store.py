"""Where the data come from and how they are kept: the data root and the mirror, sha256 checks (the mirror's SHA256SUMS
and the sums hard-coded here), atomic writes with checksum sidecars, downloads, the :class:`Dataset` record and the
cache-mirror-download order every loader follows.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import shutil
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import torch

from ..rng import generator


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
_CACHE_VERSION = "v1"


# ============================================================================ errors and paths
class DataError(ValueError):
    """A data file failed verification (wrong sha256) or could not be parsed."""


class DatasetUnavailable(RuntimeError):
    """The data set is in neither the cache nor a mirror, and could not be downloaded."""


def _repo_root() -> Optional[Path]:
    here = Path(__file__).resolve().parents[2]  # the folder above ldptut/
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
