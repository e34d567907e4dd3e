"""Without a GPU, Triton's kernels run in its interpreter (numpy on the CPU): ``tests/test_kernels.py`` checks the
fused mechanism kernel of ``ldptut.kernels`` that way in CI. The switch must be set before Triton is imported."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
