"""The tabular sets: UCI Adult, Bank Marketing, KDD Cup 99 (10 %) and Forest Covertype, parsed once into a cached npz
and standardised per split.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from .store import DataError, Dataset, DeviceLike, PathLike, _CACHE_VERSION, _atomic_write, _cache_file_ok, _digest, _download, _obtain, _resolve_root, _sha256, _split_perm, log


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
