"""Simulation of LDP-FL's parameter shuffling and of a timing attack that undoes it.

LDP-FL (Sun, Qian, Chen, IJCAI 2021, Sec. 3.1 "Parameter Shuffling", Algorithm 3) splits a
client's perturbed model into its d weights, tags each with its position id and sends weight j
after a random delay t_ij ~ U(0, T). The server receives one merged stream of (position id, value)
messages from all clients; the paper argues that, since "all uploads happen uniformly randomly
during the same period of time, the cloud cannot distinguish them by upload time", so each weight
needs only its own ε (Sec. 4, "Parameter Shuffling").

That argument needs every client to start its uploads at the same instant. In practice client i
finishes local training and communication at its own time t_LC^i + t_C^i; the paper's
"In practical scenarios ..." paragraph corrects for this with a waiting time
T_W^i = T_S - t_LC^i - t_C^i, T_S = max_i (t_LC^i + t_C^i), after which every client's arrival
times are T_S + t̃_ij with t̃_ij ~ U(0, T). This module simulates both variants
(:func:`simulate_shuffle`), the server's aggregate (:func:`aggregate_stream`), and the server's
linking attack that uses only arrival times and position ids (:func:`linking_attack`,
:func:`linking_success`, :func:`linking_curve`).

Times are in seconds and float64; randomness comes from an explicit ``torch.Generator``.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from ._validate import pos_int, real

from ldptut.rng import generator as make_generator

__all__ = [
    "ShuffledStream",
    "simulate_shuffle",
    "aggregate_stream",
    "linking_attack",
    "linking_success",
    "chance_level",
    "linking_curve",
]


# ---- the stream -----------------------------------------------------------------------------------
@dataclass
class ShuffledStream:
    """What the server receives in one round: one merged stream of messages, sorted by arrival.

    ``values`` (N,), ``position`` (N,) int64 position ids and ``arrival`` (N,) float64 arrival
    times (seconds) are the server's view (N = m · d messages). ``client`` (N,) int64 is the
    ground truth sender of each message, kept **for evaluation only**: the server never sees it,
    and attacks (:func:`linking_attack`) must not use it.
    """

    values: Tensor
    position: Tensor
    arrival: Tensor
    client: Tensor

    def __len__(self) -> int:
        return int(self.values.shape[0])


def _check_stream(stream: Any) -> ShuffledStream:
    if not isinstance(stream, ShuffledStream):
        raise ValueError(f"stream must be a ShuffledStream, got {type(stream).__name__}")
    n = stream.values.shape[0]
    for name in ("values", "position", "arrival", "client"):
        t = getattr(stream, name)
        if not isinstance(t, Tensor) or t.ndim != 1 or t.shape[0] != n:
            raise ValueError(f"stream.{name} must be a 1-D tensor of length {n}")
    return stream


def simulate_shuffle(
    payloads: Tensor,
    *,
    T: float,
    start_times: Optional[Tensor] = None,
    waiting_correction: bool = False,
    sync_error: float = 0.0,
    generator: Optional[torch.Generator],
) -> ShuffledStream:
    """Send every weight of every client after a random delay and merge the messages by arrival.

    LDP-FL, Algorithm 3: client i tags weight j with its position id and sends it after
    t_ij ~ U(0, T), counted from the moment s_i = t_LC^i + t_C^i (``start_times[i]``, default 0)
    at which it has finished local training and communication:

        arrival_ij = s_i + t_ij.

    ``waiting_correction=True`` (LDP-FL, Sec. 3.1, paragraph "In practical scenarios ..."): the
    client first waits T_W^i = T_S - s_i, T_S = max_i s_i, so arrival_ij = T_S + t̃_ij. With
    ``sync_error`` σ > 0 the client's estimate of T_W^i is off by e_i ~ N(0, σ²) (imperfect
    prediction of T_S, clock offsets); a client cannot wait a negative time, so
    arrival_ij = max(s_i, T_S + e_i) + t̃_ij and per-client offsets of order σ remain.

    ``payloads`` (m, d): the (already perturbed) weights, one row per client; the stream is on
    their device. Random draws: the (m, d) uniform delays first, then (only if
    ``waiting_correction`` and σ > 0) the m sync errors, so for a fixed seed the delays do not
    depend on σ.
    """
    if not isinstance(payloads, Tensor) or payloads.ndim != 2 or payloads.shape[0] < 1 or payloads.shape[1] < 1:
        shape = tuple(payloads.shape) if isinstance(payloads, Tensor) else type(payloads).__name__
        raise ValueError(f"payloads must be a tensor of shape (m, d) with m, d >= 1, got {shape}")
    T = real(T, "T", positive=True)
    sync_error = real(sync_error, "sync_error", nonneg=True)
    if not isinstance(waiting_correction, bool):
        raise ValueError(f"waiting_correction must be a bool, got {waiting_correction!r}")
    m, d = payloads.shape
    device = payloads.device
    if start_times is None:
        start = torch.zeros(m, dtype=torch.float64, device=device)
    else:
        if not isinstance(start_times, Tensor):
            start_times = torch.as_tensor(start_times, dtype=torch.float64)
        if start_times.shape != (m,):
            raise ValueError(f"start_times must have shape ({m},) (one per client), got {tuple(start_times.shape)}")
        start = start_times.detach().to(dtype=torch.float64, device=device)
        if not bool(torch.isfinite(start).all()) or bool((start < 0).any()):
            raise ValueError("start_times must be finite and >= 0")

    delay = torch.rand((m, d), generator=generator, dtype=torch.float64, device=device).mul_(T)
    if waiting_correction:
        t_s = start.max()
        offset = t_s.expand(m).clone()
        if sync_error > 0:
            err = torch.randn(m, generator=generator, dtype=torch.float64, device=device).mul_(sync_error)
            offset = torch.maximum(start, t_s + err)
    else:
        offset = start
    arrival = (offset.unsqueeze(1) + delay).reshape(-1)

    order = torch.argsort(arrival, stable=True)
    client = torch.arange(m, device=device).repeat_interleave(d)
    position = torch.arange(d, device=device).repeat(m)
    return ShuffledStream(
        values=payloads.detach().reshape(-1)[order],
        position=position[order],
        arrival=arrival[order],
        client=client[order],
    )


# ---- the server -----------------------------------------------------------------------------------
def aggregate_stream(stream: ShuffledStream, d: int) -> Tensor:
    """The server's mean per position id, from the stream alone (LDP-FL, Algorithm 1, line 11).

    w̄_id = (Σ of values with position id) / (number of such values), by ``index_add`` over
    position ids. Needs no sender information, so it equals ``payloads.mean(0)`` up to the
    floating-point summation order. Positions with no message give NaN.
    """
    stream = _check_stream(stream)
    d = pos_int(d, "d")
    pos = stream.position
    if len(stream) and (int(pos.min()) < 0 or int(pos.max()) >= d):
        raise ValueError(f"stream.position must lie in [0, d) = [0, {d})")
    vals = stream.values
    if not vals.dtype.is_floating_point:
        vals = vals.to(torch.float32)
    sums = torch.zeros(d, dtype=vals.dtype, device=vals.device).index_add_(0, pos, vals)
    counts = torch.bincount(pos, minlength=d).to(vals.dtype)
    return sums / counts


def linking_attack(stream: ShuffledStream, m: int, d: int) -> Tensor:
    """Guess which messages come from the same client using only arrival times and position ids.

    For every position id, sort its m messages by arrival time and label each with its rank
    (0 .. m-1); messages with the same rank at different positions are guessed to come from the
    same client. Exact when client start offsets differ by more than T (then client i's messages
    always have the same rank); no better than chance when all clients' arrival times are i.i.d.
    (waiting correction with perfect synchronisation). Does not read ``stream.client``.

    Returns (N,) int64 group labels, aligned with the stream. Every position must carry exactly m
    messages (``ValueError`` otherwise).
    """
    stream = _check_stream(stream)
    m = pos_int(m, "m")
    d = pos_int(d, "d")
    if len(stream) != m * d:
        raise ValueError(f"stream has {len(stream)} messages, expected m * d = {m * d}")
    pos = stream.position
    n = m * d
    if n * d >= 2**53:
        raise ValueError(f"m * d * d = {n * d} is too large for the float64 sort key (must be < 2^53)")
    # rank of every message in arrival order (ties broken by stream order)
    arr = stream.arrival
    if bool((arr[1:] >= arr[:-1]).all()):
        time_rank = torch.arange(n, device=pos.device, dtype=torch.float64)
    else:
        time_rank = torch.empty(n, device=pos.device, dtype=torch.float64)
        time_rank[torch.argsort(arr, stable=True)] = torch.arange(n, device=pos.device, dtype=torch.float64)
    # one sort by the exact integer key position * N + time rank (unique, exact in float64)
    by_pos = torch.argsort(pos.to(torch.float64) * n + time_rank)
    expected = torch.arange(d, device=pos.device).repeat_interleave(m)
    if not torch.equal(pos[by_pos], expected):
        raise ValueError(f"every position id must lie in [0, d) and occur exactly m = {m} times in the stream")
    rank = torch.arange(n, device=pos.device) % m
    groups = torch.empty_like(pos)
    groups[by_pos] = rank
    return groups


def _success_from_labels(client: Tensor, groups: Tensor, m: int, g: int) -> float:
    """Mean over clients of the share of a client's messages in its most common group."""
    table = torch.bincount(client * g + groups, minlength=m * g).reshape(m, g)
    per_client = table.max(1).values.double() / table.sum(1).clamp(min=1).double()
    return float(per_client[table.sum(1) > 0].mean())


def linking_success(stream: ShuffledStream, groups: Tensor) -> float:
    """How well guessed groups re-link clients' vectors (evaluation: uses the ground truth).

    For each true client, the share of its messages that fall into its most common guessed group;
    the mean over clients. 1.0 = every client's whole vector re-linked. The chance level (arrival
    times independent of clients, so each message's group is an independent uniform rank) is
    E[max of a Multinomial(d; 1/m, ..., 1/m)] / d, about (d/m + sqrt(2 (d/m) ln m)) / d for
    d >> m; :func:`chance_level` computes it by simulation (≈ 0.02 for m = 100, d = 1000).
    """
    stream = _check_stream(stream)
    if not isinstance(groups, Tensor) or groups.shape != stream.client.shape:
        raise ValueError(f"groups must be a tensor of shape {tuple(stream.client.shape)}")
    if groups.dtype.is_floating_point or groups.dtype == torch.bool or groups.dtype.is_complex:
        raise ValueError(f"groups must be an integer tensor, got {groups.dtype}")
    if len(stream) == 0:
        raise ValueError("stream is empty")
    groups = groups.to(torch.int64)
    if int(groups.min()) < 0:
        raise ValueError("groups must be >= 0")
    m = int(stream.client.max()) + 1
    g = int(groups.max()) + 1
    return _success_from_labels(stream.client, groups, m, g)


def chance_level(m: int, d: int, generator: Optional[torch.Generator], *, repeats: int = 1) -> float:
    """:func:`linking_success` of a guess that carries no information, by simulation.

    At every position the m clients get a uniformly random permutation of the ranks 0 .. m-1
    (what :func:`linking_attack` returns when arrival times are i.i.d. across clients); the mean of
    the metric over ``repeats`` draws. Expectation E[max Multinomial(d; 1/m, ..., 1/m)] / d.
    """
    m = pos_int(m, "m")
    d = pos_int(d, "d")
    repeats = pos_int(repeats, "repeats")
    device = generator.device if generator is not None else torch.device("cpu")
    client = torch.arange(m, device=device).repeat_interleave(d)
    out = []
    for _ in range(repeats):
        ranks = torch.rand((m, d), generator=generator, device=device).argsort(0)  # a permutation per column
        out.append(_success_from_labels(client, ranks.reshape(-1), m, m))
    return sum(out) / repeats


# ---- the curve for the chapter --------------------------------------------------------------------
def _as_values(v: Any, name: str, kind: type) -> list:
    if isinstance(v, Tensor):
        v = v.reshape(-1).tolist()
    if isinstance(v, (str, bytes)):
        raise ValueError(f"{name} must be a {kind.__name__} or a sequence of them, got {v!r}")
    if isinstance(v, (bool, numbers.Real)):
        v = [v]
    v = list(v)
    if not v:
        raise ValueError(f"{name} must not be empty")
    return v


def linking_curve(
    *,
    m: int,
    d: int,
    T_values: Sequence[float],
    start_spread: float,
    waiting_correction: Union[bool, Sequence[bool]] = (False, True),
    sync_error: Union[float, Sequence[float]] = 0.0,
    repeats: int = 5,
    seed: int = 0,
    device: Union[str, torch.device] = "cpu",
):
    """Linking success of :func:`linking_attack` against T, with and without the waiting time T_W.

    Each repeat draws client start times s_i ~ U(0, ``start_spread``) (heterogeneous compute and
    network: t_LC^i + t_C^i), then for every scenario (T, waiting_correction, sync_error) simulates
    one round with :func:`simulate_shuffle` (payloads are irrelevant: zeros) and scores the attack
    with :func:`linking_success`. Start times of repeat r are shared by all scenarios (common random
    numbers); delays come from ``generator(seed, "linking_curve", "delays", r, scenario index)``.

    ``sync_error`` only acts with the waiting correction, so scenarios without it are simulated
    once per T and reported with sync_error = 0.

    Returns a ``pandas.DataFrame`` with columns T, waiting_correction, sync_error, success_mean,
    success_std (over repeats; std with ddof = 1, 0 for one repeat) and chance (see
    :func:`chance_level`, same for every row).
    """
    import pandas as pd

    m = pos_int(m, "m")
    d = pos_int(d, "d")
    repeats = pos_int(repeats, "repeats")
    spread = real(start_spread, "start_spread", nonneg=True)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    Ts = [real(t, "T_values", positive=True) for t in _as_values(T_values, "T_values", float)]
    corrs = _as_values(waiting_correction, "waiting_correction", bool)
    if not all(isinstance(c, bool) for c in corrs):
        raise ValueError(f"waiting_correction must be a bool or a sequence of bools, got {waiting_correction!r}")
    sigmas = [real(s, "sync_error", nonneg=True) for s in _as_values(sync_error, "sync_error", float)]
    # sync_error only matters with the waiting correction: rows without it appear once, sync_error 0
    scenarios = [(t, c, s) for c in dict.fromkeys(corrs) for s in (dict.fromkeys(sigmas) if c else [0.0]) for t in Ts]

    payloads = torch.zeros((m, d), device=device)
    results = torch.empty((len(scenarios), repeats), dtype=torch.float64)
    for r in range(repeats):
        g0 = make_generator(seed, "linking_curve", "starts", r, device=device)
        start = torch.rand(m, generator=g0, dtype=torch.float64, device=device) * spread
        for k, (t, c, s) in enumerate(scenarios):
            g = make_generator(seed, "linking_curve", "delays", r, k, device=device)
            stream = simulate_shuffle(payloads, T=t, start_times=start, waiting_correction=c, sync_error=s, generator=g)
            results[k, r] = linking_success(stream, linking_attack(stream, m, d))
    chance = chance_level(m, d, make_generator(seed, "linking_curve", "chance", device=device), repeats=repeats)
    std = results.std(1) if repeats > 1 else torch.zeros(len(scenarios), dtype=torch.float64)
    return pd.DataFrame(
        {
            "T": [t for t, _, _ in scenarios],
            "waiting_correction": [c for _, c, _ in scenarios],
            "sync_error": [s for _, _, s in scenarios],
            "success_mean": results.mean(1).tolist(),
            "success_std": std.tolist(),
            "chance": chance,
        }
    )
