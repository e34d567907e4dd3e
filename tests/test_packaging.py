"""The package as a user installs it: ``pip install .`` (a wheel), not the editable checkout the other tests import.

Builds the wheel (no build isolation: setuptools comes from the test environment, nothing is downloaded), installs it
without dependencies into a fresh virtual environment whose dependencies are the test environment's (a ``.pth`` line
pointing at its site-packages, which Python appends after the venv's own), and imports every module of the source
tree from the installed copy, in a process started outside the checkout."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                        for p in (ROOT / "ldptut").rglob("*.py"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the wheel is made of, so the build leaves no build/ folder in the checkout
    src = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "ldptut", src / "ldptut", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                        "--wheel-dir", str(out), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (w,) = out.glob("ldptut-*.whl")
    return w


def test_the_wheel_holds_every_module_of_the_source_tree(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = {n for n in z.namelist() if n.startswith("ldptut/") and n.endswith(".py")}
    in_wheel = sorted(".".join(Path(n).with_suffix("").parts).removesuffix(".__init__") for n in names)
    assert "ldptut.papers" in SOURCE_MODULES and "ldptut.papers.ldp_fl" in SOURCE_MODULES
    assert in_wheel == SOURCE_MODULES


def test_every_module_imports_from_the_installed_wheel(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the test environment's packages (torch, pandas, ...) after the venv's own site-packages
    (site / "test-env-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                        "--quiet", str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    importable = [m for m in SOURCE_MODULES if not m.endswith(".__main__")]   # a __main__ runs a command
    code = ("import importlib, json, sys\n"
            f"mods = {importable!r}\n"
            "files = {m: importlib.import_module(m).__file__ for m in mods}\n"
            "print(json.dumps(files))\n")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    files = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(files) == importable
    outside = {m: f for m, f in files.items() if not Path(f).resolve().is_relative_to(site.resolve())}
    assert not outside, f"imported from outside the installed wheel: {outside}"
