"""Tests for ldptut.data: mirror -> cache conversion, checksums, offline errors, preprocessing.

Tests marked ``needs_mirror`` use the real data mirror: ``$LDPTUT_DATA_MIRROR``, else ``shared/datasets``
next to the repository (CI layout), else ``/work/shared/datasets``; they are skipped when none exists.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import math
import os
import shutil
import time
import urllib.error
import urllib.request
import zipfile
from email.message import Message
from pathlib import Path

import pytest
import torch

from ldptut import data as D
from ldptut.data import images, store


def _find_mirror():
    cands = [os.environ.get("LDPTUT_DATA_MIRROR"),
             Path(__file__).resolve().parents[2] / "shared" / "datasets",
             "/work/shared/datasets"]
    for c in cands:
        if c and (Path(c) / "SHA256SUMS").is_file():
            return Path(c).resolve()
    return None


MIRROR = _find_mirror()
needs_mirror = pytest.mark.skipif(MIRROR is None, reason="no data mirror: set LDPTUT_DATA_MIRROR "
                                  "(e.g. to ../shared/datasets)")


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory):
    """One cache root for the whole module, filled from the mirror (so each set is converted once)."""
    root = tmp_path_factory.mktemp("ldptut-data")
    with pytest.MonkeyPatch.context() as mp:
        if MIRROR is not None:
            mp.setenv("LDPTUT_DATA_MIRROR", str(MIRROR))
        yield root


@pytest.fixture
def offline(monkeypatch):
    """No mirror, and every URL fails as on a machine without network."""
    monkeypatch.delenv("LDPTUT_DATA_MIRROR", raising=False)

    def refuse(*a, **k):
        raise urllib.error.URLError("network is unreachable (test)")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(time, "sleep", lambda s: None)  # sklearn's retry delay
    return refuse


# ----------------------------------------------------------------------------- expected numbers (mirror README)
MNIST_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
COVER_COUNTS = [211840, 283301, 35754, 2747, 9493, 17367, 20510]


def _counts(y, C):
    return torch.bincount(y.cpu(), minlength=C).tolist()


def _check_common(d: D.Dataset):
    for x, y in ((d.x_train, d.y_train), (d.x_test, d.y_test)):
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.device.type == "cpu" and y.device.type == "cpu"
        assert tuple(x.shape[1:]) == d.input_shape
        assert int(y.min()) >= 0 and int(y.max()) < d.num_classes
        assert math.isfinite(float(x.sum()))  # (cheaper than isfinite(x).all() on 600 MB)
    assert len(d.classes) == d.num_classes
    assert d.description


def _check_images(d, mean, std):
    assert d.info["mean"] == pytest.approx(mean, abs=1e-4)
    assert d.info["std"] == pytest.approx(std, abs=1e-4)
    mean_ = d.x_train.mean(dim=(0, 2, 3))             # whole set: ~0
    std_ = torch.std(d.x_train[::5], dim=(0, 2, 3))   # every 5th image (cheap): ~1
    assert float(mean_.abs().max()) < 1e-3 and float((std_ - 1).abs().max()) < 1e-2


def _check_standardised(d, n_num):
    num = d.x_train[:, :n_num].double()
    assert float(num.mean(0).abs().max()) < 1e-4
    std = num.std(0, unbiased=False)
    assert bool((((std - 1).abs() < 1e-4) | (std < 1e-6)).all())


def _exp_mnist(d):
    assert d.input_shape == (1, 28, 28) and (d.n_train, d.n_test) == (60000, 10000)
    assert _counts(d.y_train, 10) == MNIST_TRAIN and _counts(d.y_test, 10) == MNIST_TEST
    _check_images(d, [0.1307], [0.3081])


def _exp_fashion(d):
    assert d.input_shape == (1, 28, 28) and (d.n_train, d.n_test) == (60000, 10000)
    assert _counts(d.y_train, 10) == [6000] * 10 and _counts(d.y_test, 10) == [1000] * 10
    assert d.classes[0] == "T-shirt/top" and d.classes[9] == "Ankle boot"
    _check_images(d, [0.2860], [0.3530])


def _exp_cifar(d):
    assert d.input_shape == (3, 32, 32) and (d.n_train, d.n_test) == (50000, 10000)
    assert _counts(d.y_train, 10) == [5000] * 10 and _counts(d.y_test, 10) == [1000] * 10
    assert d.y_test[:10].tolist() == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
    assert d.classes[0] == "airplane" and d.classes[9] == "truck"
    _check_images(d, [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])


def _exp_adult(d):
    assert (d.n_train, d.n_test) == (32561, 16281)
    assert d.input_shape == (108,) and len(d.feature_names) == 108
    assert _counts(d.y_train, 2) == [24720, 7841] and _counts(d.y_test, 2) == [12435, 3846]
    assert d.classes == ["<=50K", ">50K"]
    assert "workclass=?" in d.feature_names
    _check_standardised(d, 6)
    # one-hot blocks: exactly one 1 per categorical column (test too: no unseen categories)
    assert bool((d.x_test[:, 6:].sum(1) == 8).all())


def _exp_bank(d):
    assert (d.n_train, d.n_test) == (36168, 9043)
    assert d.input_shape == (51,)
    assert sum(_counts(d.y_train, 2)) + sum(_counts(d.y_test, 2)) == 45211
    assert _counts(d.y_train, 2)[1] + _counts(d.y_test, 2)[1] == 5289
    assert d.classes == ["no", "yes"]
    _check_standardised(d, 7)
    assert bool((d.x_train[:, 7:].sum(1) == 9).all())


def _exp_kdd(d):
    assert (d.n_train, d.n_test) == (395216, 98805)
    assert d.input_shape == (118,) and d.num_classes == 23
    tot = [a + b for a, b in zip(_counts(d.y_train, 23), _counts(d.y_test, 23))]
    assert sum(tot) == 494021
    for name, n in (("smurf", 280790), ("neptune", 107201), ("normal", 97278)):
        assert tot[d.classes.index(name)] == n
    _check_standardised(d, 38)


def _exp_cov(d):
    assert (d.n_train, d.n_test) == (464809, 116203)
    assert d.input_shape == (54,) and d.num_classes == 7
    tot = [a + b for a, b in zip(_counts(d.y_train, 7), _counts(d.y_test, 7))]
    assert tot == COVER_COUNTS
    onehot = d.x_train[:, 10:]
    assert bool(((onehot == 0) | (onehot == 1)).all())
    assert bool((onehot[:, :4].sum(1) == 1).all()) and bool((onehot[:, 4:].sum(1) == 1).all())
    _check_standardised(d, 10)


EXPECT = {"mnist": _exp_mnist, "fashion_mnist": _exp_fashion, "cifar10": _exp_cifar, "adult": _exp_adult,
          "bank": _exp_bank, "kddcup99": _exp_kdd, "covertype": _exp_cov}


@needs_mirror
@pytest.mark.parametrize("name", list(EXPECT))
def test_mirror_then_cache(name, shared_root):
    t0 = time.perf_counter()
    d1 = D.load_dataset(name, root=shared_root)
    t1 = time.perf_counter()
    assert d1.source == "mirror", d1.source
    _check_common(d1)
    EXPECT[name](d1)
    t2 = time.perf_counter()
    d2 = D.load_dataset(name, root=shared_root)
    t3 = time.perf_counter()
    assert d2.source == "cache"
    for f in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(d1, f), getattr(d2, f)), f
    assert d2.classes == d1.classes and d2.description == d1.description
    print(f"\n{name}: mirror {t1 - t0:.2f}s, cache {t3 - t2:.2f}s, {d1!r}")
    if name in D.IMAGE_SHAPES:   # the shapes known without loading are the loaded ones
        assert (tuple(d1.input_shape), d1.num_classes) == D.IMAGE_SHAPES[name]


@needs_mirror
def test_cache_layouts(shared_root):
    import torchvision.datasets as tvd

    D.load_mnist(root=shared_root)
    # the cache is torchvision's own layout: torchvision reads it without downloading
    tv = tvd.MNIST(str(shared_root), train=False, download=False)
    assert len(tv) == 10000
    assert (shared_root / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz").is_file()
    # the cached file is the verified mirror file, byte for byte
    assert store._sha256(shared_root / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz") == \
        D.MIRROR_SHA256["mnist/t10k-images-idx3-ubyte.gz"]
    D.load_adult(root=shared_root)
    npz = shared_root / "adult" / "adult_v1.npz"
    assert npz.is_file()
    assert npz.stat().st_mode & 0o777 == 0o666 & ~store._umask()  # not mkstemp's 0600


@needs_mirror
def test_kdd_binary_and_split_options(shared_root):
    d = D.load_kddcup99(root=shared_root, binary=True)
    assert d.classes == ["normal", "attack"] and d.num_classes == 2
    assert _counts(d.y_train, 2)[0] + _counts(d.y_test, 2)[0] == 97278
    b0, b0b, b1 = (D.load_bank(root=shared_root, seed=s) for s in (0, 0, 1))
    assert torch.equal(b0.x_train, b0b.x_train) and torch.equal(b0.y_test, b0b.y_test)
    assert not torch.equal(b0.y_test, b1.y_test)
    b = D.load_bank(root=shared_root, test_size=0.5)
    assert (b.n_train, b.n_test) == (22605, 22606)
    with pytest.raises(ValueError, match="test_size"):
        D.load_bank(root=shared_root, test_size=1.5)


def _copy_adult_mirror(tmp_path, with_sums=True):
    mirror = tmp_path / "mirror"
    (mirror / "adult").mkdir(parents=True)
    for f in ("adult.data.gz", "adult.test.gz"):
        shutil.copyfile(MIRROR / "adult" / f, mirror / "adult" / f)
    if with_sums:
        shutil.copyfile(MIRROR / "SHA256SUMS", mirror / "SHA256SUMS")
    return mirror


def _flip_byte(path, offset=1000):
    b = bytearray(path.read_bytes())
    b[offset] ^= 0xFF
    path.write_bytes(bytes(b))


@needs_mirror
@pytest.mark.parametrize("sums", ["mirror", "none", "forged"])
def test_corrupted_mirror_refused(tmp_path, monkeypatch, sums):
    mirror = _copy_adult_mirror(tmp_path, with_sums=(sums != "none"))
    bad = mirror / "adult" / "adult.test.gz"
    _flip_byte(bad)
    actual = hashlib.sha256(bad.read_bytes()).hexdigest()
    if sums == "forged":  # SHA256SUMS edited to match the corrupted file: the built-in sums still catch it
        text = (mirror / "SHA256SUMS").read_text().replace(D.MIRROR_SHA256["adult/adult.test.gz"], actual)
        (mirror / "SHA256SUMS").write_text(text)
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(mirror))
    root = tmp_path / "root"
    with pytest.raises(D.DataError) as ei:
        D.load_adult(root=root, download=False)
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError)
    assert "adult.test.gz" in msg and D.MIRROR_SHA256["adult/adult.test.gz"] in msg and actual in msg
    assert "sha256sum -c SHA256SUMS" in msg
    assert not (root / "adult" / "adult_v1.npz").exists()  # nothing cached from a bad file


@needs_mirror
def test_intact_copy_without_sums_file_loads(tmp_path, monkeypatch):
    mirror = _copy_adult_mirror(tmp_path, with_sums=False)
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(mirror))
    d = D.load_adult(root=tmp_path / "root", download=False)
    assert d.source == "mirror" and d.n_train == 32561


@pytest.mark.filterwarnings("ignore:Retry downloading")  # sklearn's fetchers retry before giving up
@pytest.mark.parametrize("name", ["mnist", "adult", "covertype", "kddcup99", "cifar10", "bank"])
def test_offline_and_missing(name, tmp_path, offline):
    with pytest.raises(D.DatasetUnavailable) as ei:
        D.load_dataset(name, root=tmp_path, download=True)
    msg = str(ei.value)
    assert isinstance(ei.value, RuntimeError)
    assert repr(name) in msg and "LDPTUT_DATA_MIRROR" in msg and "download" in msg and str(tmp_path) in msg
    assert ei.value.__cause__ is not None  # the original error is chained ...
    assert "failed" in msg                  # ... and summarised


def test_download_disabled(tmp_path, monkeypatch):
    monkeypatch.delenv("LDPTUT_DATA_MIRROR", raising=False)
    with pytest.raises(D.DatasetUnavailable, match="LDPTUT_DATA_MIRROR") as ei:
        D.load_fashion_mnist(root=tmp_path, download=False)
    assert "download=False" in str(ei.value) and "'fashion_mnist'" in str(ei.value)


def test_mirror_lacking_the_dataset(tmp_path, monkeypatch, offline):
    empty = tmp_path / "mirror"
    empty.mkdir()
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(empty))
    with pytest.raises(D.DatasetUnavailable, match="lacks bank-marketing/bank-full.csv.gz"):
        D.load_bank(root=tmp_path / "root")


# ----------------------------------------------------------------------------- a download, served locally
class _FakeResponse(io.BytesIO):
    def __init__(self, data, url):
        super().__init__(data)
        self.url = url
        self.length = len(data)
        self.status = 200
        self._headers = Message()
        self._headers["Content-Length"] = str(len(data))

    def info(self):
        return self._headers

    @property
    def headers(self):
        return self._headers

    def geturl(self):
        return self.url


def _serve(monkeypatch, files: dict[str, bytes]):
    """Patch urlopen so that a URL whose last path part is a key of ``files`` returns those bytes."""
    seen = []

    def fake_urlopen(req, *a, **k):
        url = req.full_url if isinstance(req, urllib.request.Request) else req
        seen.append(url)
        name = url.rstrip("/").rsplit("/", 1)[-1]
        if name not in files:
            raise urllib.error.URLError(f"not served in the test: {url}")
        return _FakeResponse(files[name], url)
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return seen


@needs_mirror
def test_download_path_mnist_torchvision(tmp_path, monkeypatch):
    monkeypatch.delenv("LDPTUT_DATA_MIRROR", raising=False)
    files = {f: (MIRROR / "mnist" / f).read_bytes() for f in images._MNIST_FILES}
    seen = _serve(monkeypatch, files)
    d = D.load_mnist(root=tmp_path)
    assert d.source == "download" and seen
    assert _counts(d.y_test, 10) == MNIST_TEST
    assert D.load_mnist(root=tmp_path, download=False).source == "cache"


@needs_mirror
def test_download_path_adult_and_bank(tmp_path, monkeypatch, shared_root):
    monkeypatch.delenv("LDPTUT_DATA_MIRROR", raising=False)
    bank_csv = gzip.decompress((MIRROR / "bank-marketing" / "bank-full.csv.gz").read_bytes())
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("bank-full.csv", bank_csv)
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w") as z:   # the UCI archive nests bank.zip inside bank+marketing.zip
        z.writestr("bank.zip", inner.getvalue())
    files = {"adult.data": gzip.decompress((MIRROR / "adult" / "adult.data.gz").read_bytes()),
             "adult.test": gzip.decompress((MIRROR / "adult" / "adult.test.gz").read_bytes()),
             "bank+marketing.zip": outer.getvalue()}
    _serve(monkeypatch, files)
    a = D.load_adult(root=tmp_path)
    b = D.load_bank(root=tmp_path)
    assert a.source == "download" and b.source == "download"
    # identical to what the mirror gives
    with monkeypatch.context() as mp:
        mp.setenv("LDPTUT_DATA_MIRROR", str(MIRROR))
        for got in (a, b):
            ref = D.load_dataset(got.name, root=shared_root)
            assert torch.equal(got.x_train, ref.x_train) and torch.equal(got.y_test, ref.y_test)
            assert got.feature_names == ref.feature_names


@needs_mirror
def test_download_of_wrong_bytes_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("LDPTUT_DATA_MIRROR", raising=False)
    good = gzip.decompress((MIRROR / "adult" / "adult.data.gz").read_bytes())
    _serve(monkeypatch, {"adult.data": good[:-10] + b"tampered\n\n", "adult.test": b""})
    with pytest.raises(D.DataError, match="md5"):
        D.load_adult(root=tmp_path)


# ----------------------------------------------------------------------------- digits, API, helpers
def test_digits():
    d = D.load_dataset("digits")
    assert d.source == "bundled" and (d.n_train, d.n_test) == (1437, 360)
    assert d.input_shape == (1, 8, 8) and d.num_classes == 10 and (d.input_shape, d.num_classes) == D.IMAGE_SHAPES["digits"]
    _check_common(d)
    assert float(d.x_train.min()) == 0.0 and float(d.x_train.max()) == 1.0
    # stratified: every class has 35-37 test images
    assert all(35 <= c <= 37 for c in _counts(d.y_test, 10))
    again, other = D.load_digits(seed=0), D.load_digits(seed=1)
    assert torch.equal(d.x_test, again.x_test) and not torch.equal(d.y_test, other.y_test)
    x, y = D.load_digits_raw()
    assert x.shape == (1797, 1, 8, 8) and y.shape == (1797,) and y.dtype == torch.int64
    assert D.load_digits(test_size=0.25).n_test == 450


def test_unknown_name():
    with pytest.raises(ValueError) as ei:
        D.load_dataset("imagenet")
    for n in ("mnist", "fashion_mnist", "cifar10", "digits", "adult", "bank", "kddcup99", "covertype"):
        assert n in str(ei.value)


def test_aliases_dispatch(monkeypatch):
    called = {}
    monkeypatch.setitem(D.DATASETS, "fashion_mnist", lambda **kw: called.setdefault("kw", kw))
    D.load_dataset("Fashion-MNIST", device="cpu", download=False)
    assert called["kw"] == {"root": None, "device": "cpu", "download": False}


def test_dataset_is_frozen_and_validated():
    d = D.load_digits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.name = "x"
    with pytest.raises(ValueError, match="rows"):
        dataclasses.replace(d, y_train=d.y_train[:-1])
    assert "digits" in repr(d) and "1437" in d.summary()
    assert d.to("cpu").x_train.device.type == "cpu"


def test_roots_and_mirror_path(monkeypatch, tmp_path):
    monkeypatch.setenv("LDPTUT_DATA_DIR", str(tmp_path / "cache"))
    assert D.data_root() == (tmp_path / "cache").resolve()
    monkeypatch.delenv("LDPTUT_DATA_DIR")
    repo = Path(D.__file__).resolve().parents[2]  # ldptut/data/__init__.py -> the checkout
    assert D.data_root() == (repo / "data" if (repo / "pyproject.toml").is_file()
                             else Path.home() / ".cache" / "ldptut")
    monkeypatch.delenv("LDPTUT_DATA_MIRROR", raising=False)
    assert D.mirror_path() is None
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(tmp_path))
    assert D.mirror_path() == tmp_path.resolve()


def test_sha256_chunked(tmp_path):
    p = tmp_path / "f.bin"
    data = os.urandom(10_000)
    p.write_bytes(data)
    assert store._sha256(p, chunk_size=97) == hashlib.sha256(data).hexdigest() == store._sha256(p)


def test_builtin_sums_match_mirror_sums():
    if MIRROR is None:
        pytest.skip("no data mirror")
    sums = store._read_sums(MIRROR)
    for rel, digest in D.MIRROR_SHA256.items():
        assert sums[rel] == digest, rel


# ----------------------------------------------------------------------------- damaged or unwritable caches
@needs_mirror
def test_truncated_cifar_cache_is_rebuilt_and_stale_temp_files_removed(tmp_path, monkeypatch, caplog):
    """A truncated cifar10_uint8_v1.pt (killed copy) used to raise a torch error forever, and a killed
    conversion left a hidden temporary file of the cache's size behind."""
    import logging
    import os
    import time

    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(MIRROR))
    folder = tmp_path / "cifar10"
    folder.mkdir()
    (folder / "cifar10_uint8_v1.pt").write_bytes(b"PK\x03\x04 truncated")
    stale = folder / ".cifar10_uint8_v1.pt.abc123.tmp"
    stale.write_bytes(b"\0" * 1000)
    old = time.time() - 2 * store.STALE_TEMP_SECONDS
    os.utime(stale, (old, old))
    fresh = folder / ".cifar10_uint8_v1.pt.def456.tmp"  # another process may be writing it right now
    fresh.write_bytes(b"\0")
    with caplog.at_level(logging.WARNING, logger="ldptut.data"):
        d = D.load_cifar10(root=tmp_path, download=False)
    assert d.source == "mirror" and d.n_train == 50_000
    assert "unreadable cache file" in caplog.text and "interrupted cache write" in caplog.text
    assert not stale.exists() and fresh.exists()
    assert D.load_cifar10(root=tmp_path, download=False).source == "cache"


@needs_mirror
def test_unwritable_cache_folder_says_which_folder_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(MIRROR))

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(store.tempfile, "mkstemp", denied)
    with pytest.raises(D.DataError, match=r"cannot write the data cache file .*adult.*writable.*LDPTUT_DATA_DIR"):
        D.load_adult(root=tmp_path, download=False)


# ---- the cache is checked, not trusted ------------------------------------------------------------------------------
@needs_mirror
def test_a_corrupted_cache_file_of_the_same_size_is_rebuilt(tmp_path, monkeypatch, caplog):
    """A converted cache file carries its sha256 beside it; a byte flipped in place (same size, which the IDX reader's
    size check cannot see) used to load silently."""
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(MIRROR))
    first = D.load_mnist(root=tmp_path)
    images = tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    assert store._sidecar(images).read_text().split()[0] == store._sha256(images)
    with open(images, "r+b") as f:  # flip one pixel of the test set, keep the size
        f.seek(5000)
        b = f.read(1)
        f.seek(5000)
        f.write(bytes([b[0] ^ 0xFF]))
    with caplog.at_level("WARNING"):
        again = D.load_mnist(root=tmp_path)
    assert "does not match its checksum" in caplog.text and again.source == "mirror"  # rebuilt from the mirror
    assert torch.equal(again.x_test, first.x_test)
    assert D.load_mnist(root=tmp_path).source == "cache"


@needs_mirror
def test_a_folder_where_a_cache_file_should_be_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("LDPTUT_DATA_MIRROR", str(MIRROR))
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").mkdir(parents=True)
    with pytest.raises(D.DataError, match=r"t10k-labels-idx1-ubyte is a folder, where the data cache expects a file"):
        D.load_mnist(root=tmp_path)
