"""ldptut: local differential privacy mechanisms and a federated-learning simulator for the book."""
from ldptut import cpu_kernels as _cpu_kernels

_cpu_kernels.pin()  # before any tensor computation: the same CPU kernels, so the same numbers, on any x86 CPU

__version__ = "0.1.0"
