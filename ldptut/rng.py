"""Seeded randomness: one independent generator per (seed, round, client or pair, purpose).

Every random draw in the simulator comes from a generator derived here, so the numbers depend only
on the seed and the key, never on execution order or on whether clients run vectorised.
The derivation uses NumPy's ``SeedSequence`` (a hash of the entropy and the spawn key), which gives
statistically independent streams for distinct keys.
"""
from __future__ import annotations

import zlib
from typing import Union

import numpy as np
import torch

Key = Union[int, str]


def _key_int(k: Key) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer, str)):
        raise TypeError(f"generator key parts must be int or str, got {type(k).__name__}: {k!r}")
    if isinstance(k, str):
        return zlib.crc32(k.encode("utf-8"))
    if k < 0:
        raise ValueError(f"generator key parts must be non-negative integers, got {k}")
    return int(k)


def derive_seed(seed: int, *keys: Key) -> int:
    """A 63-bit seed derived from ``seed`` and the key parts (``SeedSequence(seed, spawn_key=keys)``)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    ss = np.random.SeedSequence(int(seed), spawn_key=tuple(_key_int(k) for k in keys))
    hi, lo = (int(v) for v in ss.generate_state(2, dtype=np.uint32))
    return ((hi << 32) | lo) & ((1 << 63) - 1)


def generator(seed: int, *keys: Key, device: Union[str, torch.device] = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded by ``derive_seed(seed, *keys)``.

    Example: ``generator(0, "round", 3, "client", 17, "privatize")``.
    """
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, *keys))
    return g


# ---- the simulator's named streams (the keys are part of every stored run's numbers: never change them)
def round_generator(seed: int, round: int, purpose: str, *, device: Union[str, torch.device] = "cpu"
                    ) -> torch.Generator:
    """A stream of the server in one round, e.g. ``purpose="client-sampling"`` or ``"server"`` (its own draws)."""
    return generator(seed, "round", round, purpose, device=device)


def client_generator(seed: int, round: int, client: int, purpose: str, *,
                     device: Union[str, torch.device] = "cpu") -> torch.Generator:
    """Client ``client``'s own stream in one round: ``"batches"``, ``"sample"``, ``"privatize"``, ..."""
    return generator(seed, "round", round, "client", int(client), purpose, device=device)


def pair_generator(seed: int, round: int, a: int, b: int, purpose: str = "shared", *,
                   device: Union[str, torch.device] = "cpu") -> torch.Generator:
    """Common randomness of the client pair {a, b} in one round (the same stream for (a, b) and (b, a)):
    what two clients that share a seed, such as CorBin-FL's correlated pairs, both can draw."""
    lo, hi = sorted((int(a), int(b)))
    if lo == hi:
        raise ValueError(f"a pair needs two different clients, got {a} and {b}")
    return generator(seed, "round", round, "pair", lo, hi, purpose, device=device)
