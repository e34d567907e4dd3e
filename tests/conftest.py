"""Without a GPU, Triton's kernels run in its interpreter (numpy on the CPU): ``tests/test_kernels.py`` checks the
fused mechanism kernel of ``ldptut.kernels`` that way in CI. The switch must be set before Triton is imported."""
import os

import ldptut  # noqa: F401  (first: pins torch's CPU kernels, ldptut.cpu_kernels, before any test computes)
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
