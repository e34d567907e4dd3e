"""Fused CUDA kernels (Triton) for the elementwise mechanisms: one read of x, counter-based random numbers, one write.

The torch path of :meth:`ldptut.mechanisms.Mechanism.privatize` makes several passes over memory (a finiteness
check, the clip, ``torch.rand`` writing a tensor of uniforms, then each operation of the formula). On a GPU those
passes, not arithmetic, set the speed. The kernel here does the whole mechanism in one pass per element:

* load x, check it is finite (a count per block, summed atomically; the host raises afterwards, as the torch path
  does), clip it to [c - r, c + r];
* draw the element's uniform from Philox-4x32-10 (Salmon et al., SC 2011; ``tl.randint``), a counter-based
  generator: the key is the row's 64-bit seed, the counter the element's index in the row, so no random-number
  state is stored and any element's number can be recomputed. The uniform is ``(bits >> 8) * 2^-24``, on the same
  grid of 2^-24 as float32 ``torch.rand``;
* apply the mechanism's formula (the same as its ``_sample``; :func:`privatize_rows` can take the uniforms from
  memory instead, which is how the tests check the two formulas agree);
* store the report in x's dtype (float16 / bfloat16 computed in float32; a report the dtype cannot hold is counted
  and raises, as in the torch path).

The per-client generator contract holds: each row's seed is drawn from that client's ``torch.Generator``
(:func:`seeds_from`), so the same generator state gives the same reports, and a client's reports depend on its own
stream only. The streams differ from ``torch.rand``'s, so on CUDA the same seed gives other numbers than on the CPU
(which keeps the torch path); records say which device ran (``ldptut.provenance``).

Used only for CUDA tensors of float32 / float16 / bfloat16 (float64 keeps the torch path, whose uniforms are on a
2^-53 grid), for the two-output mechanisms :class:`~ldptut.mechanisms.TwoPoint` and
:class:`~ldptut.mechanisms.RandomizedResponse` (exact classes, not subclasses), and when Triton is installed. The
continuous mechanisms (Laplace, Piecewise, Hybrid) report on a grid with float64 cumulatives
(:class:`~ldptut.mechanisms.GridMechanism`, :mod:`ldptut.fpsafe`) and take their torch path on every device.
``LDPTUT_FUSED=0`` in the environment turns it off. Without a GPU the kernel runs in Triton's interpreter
(``TRITON_INTERPRET=1``, numpy on the CPU, slow): that is how ``tests/test_kernels.py`` checks it in CI.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import torch
from torch import Tensor

try:  # Triton ships with the CUDA builds of torch on Linux; elsewhere the torch path is used
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the platform
    triton = None

__all__ = ["KINDS", "BLOCK", "available", "enabled", "usable", "seeds_from", "uniforms", "privatize_rows", "privatize"]

#: Elements per Triton program.
BLOCK = 1024
#: Kernel branch of each mechanism class (by name, so this module does not import the mechanisms at load time).
KINDS = {"TwoPoint": 0, "RandomizedResponse": 4}
#: The module of each class in KINDS: a subclass defined elsewhere (same name, maybe another formula) keeps the torch path.
_HOMES = {"TwoPoint": "ldptut.mechanisms.two_point", "RandomizedResponse": "ldptut.mechanisms.randomized_response"}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_SEED_HIGH = 2 ** 62
_MAX_ROWS = 65_535


def available() -> bool:
    """Triton is importable (on a machine without a GPU only its interpreter can run the kernel)."""
    return triton is not None


def enabled() -> bool:
    """Triton is importable and ``LDPTUT_FUSED`` is not ``0``."""
    return available() and os.environ.get("LDPTUT_FUSED", "1") != "0"


def usable(mech, x: Tensor) -> bool:
    """Whether :meth:`Mechanism.privatize` takes the fused kernel for ``x``: a CUDA float32 / float16 / bfloat16
    tensor with fewer than 2^31 elements, a mechanism in :data:`KINDS`, and :func:`enabled`."""
    return (x.is_cuda and x.dtype in _DTYPES and 0 < x.numel() < 2 ** 31
            and _HOMES.get(type(mech).__name__) == type(mech).__module__ and enabled())


def seeds_from(generators: Sequence[Optional[torch.Generator]], device: torch.device | str) -> Tensor:
    """One 62-bit Philox key per row, drawn from that row's generator (``None``: the device's default
    generator), as an int64 tensor on ``device``. Each call advances every generator by one draw."""
    device = torch.device(device)
    draws = [torch.randint(_SEED_HIGH, (1,), generator=g, dtype=torch.int64,
                           device=g.device if g is not None else device) for g in generators]
    return torch.cat([d.to(device) for d in draws])


def _constants(mech) -> tuple[int, list[float]]:
    """(kernel branch, five float constants) of a mechanism: what its ``_sample`` formula uses."""
    if type(mech).__name__ not in KINDS:
        raise TypeError(f"the fused kernels take {', '.join(KINDS)}; {type(mech).__name__} samples its grid law with "
                        f"the torch path on every device (ldptut.fpsafe)")
    kind = KINDS[type(mech).__name__]
    if kind == 0:  # TwoPoint: a
        return kind, [mech.a, 0.0, 0.0, 0.0, 0.0]
    return kind, [mech.p, 0.0, 0.0, 0.0, 0.0]  # RandomizedResponse: p


def _range_rows(p, rows: int, cols: int, shape: torch.Size, device) -> tuple[Tensor, int, int]:
    """A range parameter (float or tensor broadcastable to ``shape``) as a float32 tensor viewed as (rows, cols)
    and its two strides (0 where it is broadcast)."""
    t = torch.as_tensor(p, dtype=torch.float32, device=device)
    t = t.expand(shape).reshape(rows, cols)  # a view (strides 0 on broadcast axes) where possible, else a copy
    return t, t.stride(0), t.stride(1)


if triton is not None:
    @triton.jit
    def _uniform(seed, offsets):
        """U[0, 1) on the grid of 2^-24 (as float32 torch.rand) from Philox-4x32-10's first word."""
        bits = tl.randint(seed, offsets)
        return (bits >> 8).to(tl.float32) * 5.9604644775390625e-08  # 2^-24

    @triton.jit
    def _two_point(w, u, c, r, a):
        """Duchi's two-point mechanism (LDP-FL Eq. 2): c + r a with probability 1/2 + (w - c) / (2 r a)."""
        p_plus = (w - c) / (2.0 * r * a) + 0.5
        return tl.where(u < p_plus, 1.0, 0.0) * (2.0 * r * a) + (c - r * a)

    @triton.jit
    def _mechanism_kernel(x_ptr, out_ptr, u_ptr, seeds_ptr, c_ptr, r_ptr, bad_ptr,
                          c_s0, c_s1, r_s0, r_s1, n_cols,
                          k0, k1, k2, k3, k4,
                          KIND: tl.constexpr, U_FROM_MEMORY: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        col_block = tl.program_id(0)
        row = tl.program_id(1).to(tl.int64)
        cols = col_block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        base = row * n_cols
        xr = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        x = xr.to(tl.float32)
        finite = (x == x) & (tl.abs(x) <= 3.4028234663852886e38)  # not NaN, not +-inf (largest float32)
        if KIND == 4:  # randomized response: the input must be a bit
            ok = (x == 0.0) | (x == 1.0)
        else:
            ok = finite
        tl.atomic_add(bad_ptr, tl.sum(((~ok) & mask).to(tl.int32), axis=0))
        if U_FROM_MEMORY:
            u = tl.load(u_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        else:
            u = _uniform(tl.load(seeds_ptr + row), cols)
        if KIND == 4:
            flip = u >= k0  # probability 1 - p
            y = tl.where((x != 0.0) ^ flip, 1.0, 0.0)
        else:
            c = tl.load(c_ptr + row * c_s0 + cols * c_s1, mask=mask, other=0.0)
            r = tl.load(r_ptr + row * r_s0 + cols * r_s1, mask=mask, other=1.0)
            w = tl.minimum(tl.maximum(x, c - r), c + r)
            y = _two_point(w, u, c, r, k0)
        yo = y.to(out_ptr.dtype.element_ty)
        overflow = (tl.abs(yo.to(tl.float32)) > 3.4028234663852886e38) & mask  # inf in the output dtype
        tl.atomic_add(bad_ptr + 1, tl.sum(overflow.to(tl.int32), axis=0))
        tl.store(out_ptr + base + cols, yo, mask=mask)


if triton is not None:
    @triton.jit
    def _uniform_kernel(out_ptr, seeds_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
        row = tl.program_id(1).to(tl.int64)
        cols = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(out_ptr + row * n_cols + cols, _uniform(tl.load(seeds_ptr + row), cols), mask=cols < n_cols)


def uniforms(seeds: Tensor, n_cols: int) -> Tensor:
    """The (rows x n_cols) float32 uniforms that :func:`privatize_rows` draws for rows keyed by ``seeds``
    (to audit the generator, and to check that the kernel's random path equals its formula path)."""
    if triton is None:
        raise RuntimeError("the fused kernels need Triton (pip install triton; it comes with torch's CUDA builds)")
    out = torch.empty(seeds.numel(), n_cols, dtype=torch.float32, device=seeds.device)
    _uniform_kernel[(triton.cdiv(n_cols, BLOCK), seeds.numel())](out, seeds, n_cols, BLOCK_SIZE=BLOCK)
    return out


def privatize_rows(mech, x: Tensor, seeds: Tensor, *, uniforms: Optional[Tensor] = None) -> Tensor:
    """Reports of ``mech`` for every element of the (rows x cols) tensor ``x``, row i keyed by ``seeds[i]``, in one
    kernel launch. ``uniforms`` (same shape as x) replaces the Philox draws (to compare with ``mech._sample``).

    ``mech``'s center and radius broadcast to x as in :meth:`Mechanism.privatize` (floats, per-column or
    per-row tensors, or full ones). Raises ``ValueError`` as the torch path does: non-finite x, a non-bit input
    of randomized response, or a report that x's dtype cannot hold."""
    if triton is None:
        raise RuntimeError("the fused kernels need Triton (pip install triton; it comes with torch's CUDA builds)")
    if x.ndim != 2:
        raise ValueError(f"x must be a (rows, cols) tensor, got shape {tuple(x.shape)}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"the fused kernels take float32 / float16 / bfloat16, got {x.dtype}")
    rows, cols = x.shape
    if x.dtype in (torch.float16, torch.bfloat16) and type(mech).__name__ == "TwoPoint":
        _check_half_two_point(mech, x.dtype)
    if seeds.shape != (rows,) or seeds.dtype != torch.int64:
        raise ValueError(f"seeds must be an int64 tensor of shape ({rows},), got {seeds.dtype} {tuple(seeds.shape)}")
    x = x.contiguous()
    out = torch.empty_like(x)
    kind, k = _constants(mech)
    if kind == 4:
        c = r = torch.zeros(1, dtype=torch.float32, device=x.device)
        strides = (0, 0, 0, 0)
    else:
        c, c0, c1 = _range_rows(mech.center, rows, cols, x.shape, x.device)
        r, r0, r1 = _range_rows(mech.radius, rows, cols, x.shape, x.device)
        strides = (c0, c1, r0, r1)
    u = uniforms.contiguous().to(torch.float32) if uniforms is not None else x
    bad = torch.zeros(2, dtype=torch.int32, device=x.device)
    seeds = seeds.to(x.device)
    for lo in range(0, rows, _MAX_ROWS):  # CUDA grids allow 65,535 blocks along the second axis
        hi = min(rows, lo + _MAX_ROWS)
        c_part, r_part = (c[lo:hi], r[lo:hi]) if c.ndim == 2 else (c, r)  # (rows, cols) views; (1,) for kind 4
        _mechanism_kernel[(triton.cdiv(cols, BLOCK), hi - lo)](
            x[lo:hi], out[lo:hi], u[lo:hi] if uniforms is not None else u, seeds[lo:hi], c_part, r_part, bad, *strides,
            cols, *k, KIND=kind, U_FROM_MEMORY=uniforms is not None, BLOCK_SIZE=BLOCK)
    n_bad, n_overflow = bad.tolist()
    if n_bad:
        if kind == 4:
            raise ValueError(f"x must contain only 0 and 1 for RandomizedResponse ({n_bad} other values)")
        raise ValueError("x contains NaN or inf; privatize() needs finite inputs")
    if n_overflow:
        raise ValueError(f"{mech!r} produced {n_overflow} reports that {x.dtype} cannot represent "
                         f"(largest finite {torch.finfo(x.dtype).max:g}); pass x as float32 or float64")
    return out


def _check_half_two_point(mech, dtype: torch.dtype) -> None:
    """Refuse float16 / bfloat16 reports that the dtype would round (a bias), as the torch path does: the two values
    c - r a and c + r a as the kernel computes them in float32 must be exact in ``dtype``."""
    c = torch.as_tensor(mech.center, dtype=torch.float32)
    r = torch.as_tensor(mech.radius, dtype=torch.float32)
    a = torch.tensor(mech.a, dtype=torch.float32)
    lo = c - r * a
    values = torch.stack(torch.broadcast_tensors(lo, lo + 2.0 * r * a))
    if float(values.abs().max()) > torch.finfo(dtype).max:
        raise ValueError(f"{mech!r} produced reports up to |{float(values.abs().max()):.4g}|, which {dtype} cannot "
                         f"represent (largest finite {torch.finfo(dtype).max:g}); pass x as float32 or float64")
    moved = values.to(dtype).to(torch.float32) != values
    if bool(moved.any()):
        v = values[moved][0].item()
        w = torch.tensor(v).to(dtype).item()
        raise ValueError(f"{mech!r} reports {v:.6g}, which {dtype} rounds to {w:.6g} (every such report moves the "
                         f"same way: a bias of {w - v:+.3g}); pass x as float32 or float64")


def privatize(mech, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
    """:meth:`Mechanism.privatize` by the fused kernel: one seed drawn from ``generator``, x as one row."""
    seeds = seeds_from([generator], x.device)
    return privatize_rows(mech, x.reshape(1, -1), seeds).reshape(x.shape)
