"""Without a GPU, Triton's kernels run in its interpreter (numpy on the CPU): ``tests/test_kernels.py`` checks the
fused mechanism kernel of ``ldptut.kernels`` that way in CI. The switch must be set before Triton is imported."""
import os

import pytest

import ldptut  # noqa: F401  (first: pins torch's CPU kernels, ldptut.cpu_kernels, before any test computes)
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def data_mirror():
    """The local data mirror (a folder laid out like ../shared/datasets, with SHA256SUMS): LDPTUT_DATA_MIRROR, else
    ../shared/datasets beside the repository, else None (tests on real data then use the cache or skip)."""
    from pathlib import Path

    for c in (os.environ.get("LDPTUT_DATA_MIRROR"), Path(__file__).resolve().parents[2] / "shared" / "datasets",
              "/work/shared/datasets"):
        if c and (Path(c) / "SHA256SUMS").is_file():
            return Path(c).resolve()
    return None
