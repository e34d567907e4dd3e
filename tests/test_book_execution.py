"""``book/_execute_chapters.py`` (``make book``): chapters executed several at a time into the jupyter-cache that the
book's build reads in ``cache`` mode. The build must find each execution (else it would execute the chapter again,
one at a time), a failing chapter must fail the step with its traceback and leave nothing cached, and each kernel runs
in its notebook's folder with OpenMP's passive waiting."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "book" / "_execute_chapters.py"
jupyter_cache = pytest.importorskip("jupyter_cache", reason="the book extra (jupyter-book) brings jupyter-cache")


def _notebook(path: Path, source: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter"), nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}   # make test sets it: the script must
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


def test_executions_land_where_the_build_finds_them_and_a_failure_fails_the_step(tmp_path):
    ok = _notebook(tmp_path / "ok.ipynb", "import os\nprint(os.environ['OMP_WAIT_POLICY'], os.getcwd())")
    bad = _notebook(tmp_path / "bad.ipynb", "raise ValueError('boom in the chapter')")
    cache_dir = tmp_path / "cache"
    out = _run("--cache", str(cache_dir), "--jobs", "2", str(ok), str(bad))
    assert out.returncode == 1
    assert "executing 2 chapters, 2 at a time" in out.stdout
    assert "ok.ipynb" in out.stdout and "bad.ipynb" in out.stdout and "FAILED" in out.stdout
    assert "boom in the chapter" in out.stderr and "1 chapter(s) failed: bad.ipynb" in out.stderr

    cache = jupyter_cache.get_cache(str(cache_dir))
    # what myst-nb does in cache mode: match the notebook as read from disk to a cached execution
    record = cache.match_cache_notebook(nbformat.read(ok, as_version=4))
    assert record is not None
    executed = cache.get_cache_bundle(record.pk).nb
    assert executed.cells[-1].outputs[0]["text"] == f"PASSIVE {tmp_path}\n"   # passive waits, the notebook's folder
    with pytest.raises(KeyError):  # the failed chapter is not cached: the build would execute it and fail on it
        cache.match_cache_notebook(nbformat.read(bad, as_version=4))


def test_bad_arguments_are_named():
    out = _run("--jobs", "-1", str(SCRIPT))
    assert out.returncode == 2 and "--jobs must be >= 0" in out.stderr
    out = _run("book/no_such_chapter.ipynb")
    assert out.returncode == 2 and "chapters: no such notebook: book/no_such_chapter.ipynb" in out.stderr
