"""``make reproduce``: it checks its arguments before anything slow, and a failed execution never overwrites the
committed page it was meant to regenerate (it used to: a failed run turned a 440 KB page into a 55 KB error notebook).

The Makefile is run with ``VENV`` set to this interpreter's environment as an absolute path (which the recipe must
accept)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix).resolve()
pytestmark = pytest.mark.skipif(shutil.which("make") is None or not (VENV / "bin" / "papermill").exists(),
                                reason="needs make and papermill in this environment")


def _make(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "reproduce", f"VENV={VENV}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_an_unknown_chapter_or_parameter_file_is_refused_before_the_data_step():
    out = _make("CHAPTER=no_such_chapter", timeout=60)
    assert out.returncode == 2 and "no chapter book/no_such_chapter.ipynb" in out.stdout
    assert "ldptut.data" not in out.stdout + out.stderr  # nothing else ran
    out = _make("CHAPTER=foundations", "RUN=no_such_variant", timeout=60)
    assert out.returncode == 2 and "no parameter file book/params/foundations-no_such_variant-paper.yaml" in out.stdout
    assert "ldptut.data" not in out.stdout + out.stderr
    out = _make(timeout=60)
    assert out.returncode == 2 and "usage: make reproduce CHAPTER=" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the failure used here is DEVICE=cuda on a machine without CUDA")
def test_a_failed_execution_leaves_the_committed_page_as_it_was():
    page = ROOT / "book" / "runs" / "foundations-paper.ipynb"
    failed = ROOT / "book" / "runs" / ".foundations-paper.failed.ipynb"
    before = page.read_bytes()
    try:
        out = _make("CHAPTER=foundations", "LOAD_ONLY=1", "DEVICE=cuda")
        assert out.returncode != 0
        assert "foundations-paper.ipynb is unchanged" in out.stdout, out.stdout[-2000:]
        assert page.read_bytes() == before
        assert failed.exists()  # the partial output is kept beside it, for reading the error
    finally:
        if page.read_bytes() != before:  # never leave the committed page damaged, even when the test fails
            page.write_bytes(before)
        failed.unlink(missing_ok=True)
