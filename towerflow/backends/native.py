"""The optional compiled window kernels (the ``_native`` extension:
``_native.c`` and the ``native_*.c`` files beside it) behind the NumPy
backend's max pooling and convolutions, and when they apply.

pip builds ``_native`` with the package wherever a C compiler is found; where
it is missing, or ``TOWERFLOW_NATIVE=0`` is set, every kernel runs in NumPy.
Both give the same values (col2im to rounding: it adds in another order;
Winograd convolutions, see winograd.py, to a few 1e-6 in float32):
the compiled loops do in one pass over each window what the NumPy kernels do
in a dozen whole-array passes (see pool_kernels.py and nn_kernels.py). All
take C-contiguous float32 or float64 NumPy arrays; pooling only windows that
tile the input (ksize == strides, no padding) with at most 8 taps. Each
function here returns False, having done nothing, for anything else.
"""

import os

import numpy as np

from .. import switches

try:
    from . import _native as _compiled
    _IMPORT_ERROR = None
except ImportError as err:    # no compiler at install time: NumPy kernels only
    _compiled, _IMPORT_ERROR = None, err

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# The compiled GEMMs (gemm, winograd_gemms, Winograd's convolutions) are built
# for two vector paths, AVX-512 and AVX2 with FMA (native_gemm.h); the best one
# the CPU runs is used. TOWERFLOW_ISA=avx2 runs an AVX-512 machine's GEMMs on
# the AVX2 path, so one machine can test and time both; =avx512 asks for the
# AVX-512 path (where the CPU lacks it, no compiled GEMM runs); =generic runs
# no compiled kernel at all. The other kernels (pooling, transforms, batch norm,
# updates) are GCC target_clones that follow the CPU whatever the switch. Read
# once, at import.
ISA_SWITCH, ISA_PATHS = "TOWERFLOW_ISA", ("avx512", "avx2", "generic")


def _forced_isa():
    isa = os.environ.get(ISA_SWITCH) or None
    if isa is not None and isa not in ISA_PATHS:
        raise ValueError(f"{ISA_SWITCH}={isa!r}: expected one of {', '.join(ISA_PATHS)}")
    return isa


def _chosen_gemm_path():
    """The vector path the compiled GEMMs run on (selected in the extension), or None
    where none runs (then gemm and winograd_gemms decline and OpenBLAS runs them:
    the kernels' vectors, split into pieces on a plain x86-64, ran 40x slower)."""
    if _compiled is None:
        return None
    wanted = FORCED_ISA if FORCED_ISA in GEMM_PATHS else (
        GEMM_PATHS[0] if GEMM_PATHS and FORCED_ISA is None else None)
    return _compiled.select_gemm_path(wanted)


FORCED_ISA = _forced_isa()
# The CPU's vector paths for the GEMMs, best first, and the one in use.
GEMM_PATHS = tuple(_compiled.gemm_paths()) if _compiled is not None else ()
GEMM_PATH = _chosen_gemm_path()
VECTOR_GEMM = GEMM_PATH is not None


def available():
    """Whether the compiled kernels are built and switched on (TOWERFLOW_NATIVE,
    TOWERFLOW_ISA=generic)."""
    return _compiled is not None and switches.on("TOWERFLOW_NATIVE") \
        and FORCED_ISA != "generic"


def status():
    """Which compiled kernels run here, and why not (``towerflow devices``)::

        {"loaded": True, "running": True, "reason": None, "vector_gemm": True,
         "gemm_path": "avx2", "vector_gemm_reason": None}
    """
    if _compiled is None:
        reason = f"the _native extension is not built ({_IMPORT_ERROR}): NumPy kernels only"
    elif FORCED_ISA == "generic":
        reason = "TOWERFLOW_ISA=generic turns them off: NumPy kernels only"
    elif not available():
        reason = "TOWERFLOW_NATIVE=0 turns them off: NumPy kernels only"
    else:
        reason = None
    return {"loaded": _compiled is not None, "running": available(), "reason": reason,
            "vector_gemm": bool(VECTOR_GEMM) and available(),
            "gemm_path": GEMM_PATH if available() else None,
            "vector_gemm_reason": _gemm_reason()}


def _gemm_reason():
    if VECTOR_GEMM or _compiled is None:
        return None
    declines = "the compiled GEMM and Winograd's tile products decline, OpenBLAS runs them"
    if FORCED_ISA == "generic":
        return f"{ISA_SWITCH}=generic: {declines}"
    if FORCED_ISA:
        return f"{ISA_SWITCH}={FORCED_ISA} but the CPU cannot run that path: {declines}"
    return f"the CPU has neither AVX-512 nor AVX2 with FMA: {declines}"


def max_pool(x, lay, out, code=None, bias=None, relu=False):
    """MaxPool of the images ``x`` into ``out`` (winner bits into ``code``, as
    pool_kernels records them), after adding ``bias`` to ``x`` in place, and
    with a ReLU on ``out``; False if the compiled kernel does not apply."""
    if not (accepts(x, out, code, bias) and _tiled(x, lay) and _same_floats(x, out, bias)
            and (code is None or code.dtype == np.uint8)):
        return False
    _compiled.max_pool(pool_geometry(x, lay), x, bias, out, code, relu)
    return True


def max_pool_grad(code, grad, lay, dx, relu_output=None):
    """MaxPoolGrad of the images into ``dx`` (every cell written), each window's
    ``grad`` masked by ``relu_output > 0`` when given; False if the compiled
    kernel does not apply (see :func:`max_pool_grad_applies`)."""
    if not max_pool_grad_applies(code, grad, lay, dx, relu_output):
        return False
    _compiled.max_pool_grad(pool_geometry(dx, lay), code, grad, relu_output, dx)
    return True


def max_pool_grad_applies(code, grad, lay, dx, relu_output=None):
    """Whether :func:`max_pool_grad` runs compiled on these arrays (and so on
    any block of their images)."""
    return accepts(code, grad, relu_output, dx) and _tiled(dx, lay) \
        and _same_floats(dx, grad, relu_output) and code.dtype == np.uint8


def im2col(x, lay, patches):
    """The [N*OH*OW, KH*KW*C] patch matrix of the images ``x`` (rows ordered
    as the C-ordered im2col of nn_kernels) into ``patches``; False if the
    compiled kernel does not apply."""
    if not (accepts(x, patches) and x.ndim == 4 and _same_floats(x, patches)):
        return False
    _compiled.im2col(_conv_geometry(x, lay), x, patches)
    return True


def col2im(patches, lay, dx):
    """dx = the adjoint of :func:`im2col`: each patch value added to the cell
    of ``dx`` it was read from (every cell written); False if the compiled
    kernel does not apply."""
    if not (accepts(dx, patches) and dx.ndim == 4 and _same_floats(dx, patches)):
        return False
    _compiled.col2im(_conv_geometry(dx, lay), dx, patches)
    return True


def winograd_input(x, top, left, out_h, out_w, u, first_tile=0, tile=4):
    """u[tiles, 36, C] (from tile ``first_tile`` on) = B^T d B of the 6x6
    window d of each ``tile`` x ``tile`` tile of ``out_h`` x ``out_w`` outputs
    of the images ``x`` (Winograd F(4x4, 3x3) with tile 4, F(2x2, 5x5) with
    tile 2, see winograd.py; output (r, q) reads from row r - top, column q -
    left; zeros outside ``x``); False if the compiled kernel does not apply."""
    if not (accepts(x, u) and x.ndim == 4 and u.ndim == 3 and _same_floats(x, u)):
        return False
    _compiled.winograd_input(tuple(x.shape) + (top, left, out_h, out_w, first_tile,
                                               u.shape[0], tile), x, u)
    return True


def winograd_grad_tiles(grad, v, tile=4):
    """v[tiles, 36, O] = A e A^T of each ``tile`` x ``tile`` tile e of the
    images' output gradient ``grad`` [N, OH, OW, O] (zeros past its edge),
    for the filter gradient (see winograd.py); False if the compiled kernel
    does not apply."""
    if not (accepts(grad, v) and grad.ndim == 4 and _same_floats(grad, v)):
        return False
    _compiled.winograd_grad_tiles(tuple(grad.shape) + (tile,), v, grad)
    return True


def winograd_output(m, shape, y, tile=4):
    """y (``shape`` [N, OH, OW, O]) = A^T m A of each ``tile`` x ``tile`` tile
    of m[tiles, 36, O], cropped to the output; False if the compiled kernel
    does not apply."""
    if not (accepts(m, y) and _same_floats(m, y)):
        return False
    _compiled.winograd_output(tuple(shape) + (tile,), m, y)
    return True


def winograd_conv(x, top, left, out_h, out_w, v, u, m, y, per_block, tile=4, kept=None,
                  first_tile=0):
    """A thread's part of a Winograd convolution in one call, block after block
    of ``per_block`` images of ``x``: each block's transformed inputs into
    ``u`` and its 36 GEMMs by ``v`` [36, C, O] into ``m`` (``u``, ``m``: a
    block's worth, or more), its outputs into ``y`` (C-contiguous, [N, out_h,
    out_w, O] items); with ``kept`` ([tiles, 36, C]), the transformed inputs
    are copied there too, from tile ``first_tile`` on. False if the compiled
    kernels do not apply (then nothing is written)."""
    if not (winograd_conv_applies(x, v, y, kept) and accepts(u, m) and _same_floats(x, u, m)):
        return False
    per_image = -(-out_h // tile) * -(-out_w // tile)
    block_tiles = min(per_block, x.shape[0]) * per_image
    plane_tiles = block_tiles if kept is None else kept.shape[0]
    first_tile = 0 if kept is None else first_tile
    _compiled.winograd_conv(tuple(x.shape) + (top, left, out_h, out_w, first_tile,
                                              plane_tiles, tile, v.shape[2], per_block,
                                              kept is not None),
                            x, v, u.reshape(-1)[:block_tiles * 36 * x.shape[3]],
                            m.reshape(-1)[:block_tiles * 36 * v.shape[2]], y, kept)
    return True


def winograd_conv_applies(x, v, y, kept=None):
    """Whether :func:`winograd_conv` runs compiled on these arrays (given
    workspaces ``u`` and ``m`` of x's dtype, C-contiguous, as NumPy makes them)."""
    return VECTOR_GEMM and accepts(x, v, y, kept) and x.ndim == 4 and v.ndim == 3 \
        and _same_floats(x, v, y, kept) and vector_columns(v.shape[2], v.dtype)


def winograd_grad_sums(grad, u, first_tile, v, sums, per_block, tile=4):
    """sums [36, C, O] += the filter gradient's tile products of the images
    whose output gradient is ``grad`` [n, OH, OW, O], their kept inputs in
    ``u`` [tiles, 36, C] from tile ``first_tile`` on, block after block of
    ``per_block`` images (gradient tiles through ``v``) in one call; False if
    the compiled kernels do not apply (then nothing is written)."""
    if not (winograd_grad_sums_applies(grad, u) and accepts(v, sums)
            and _same_floats(grad, v, sums)):
        return False
    n, out_h, out_w, out_channels = grad.shape
    per_image = -(-out_h // tile) * -(-out_w // tile)
    block_values = min(per_block, n) * per_image * 36 * out_channels
    _compiled.winograd_grad_sums((n, 0, 0, u.shape[2], 0, 0, out_h, out_w, first_tile,
                                  u.shape[0], tile, out_channels, per_block, True),
                                 grad, u, v.reshape(-1)[:block_values], sums)
    return True


def winograd_grad_sums_applies(grad, u):
    """Whether :func:`winograd_grad_sums` runs compiled on these arrays (given
    ``v`` and ``sums`` of grad's dtype, C-contiguous, as NumPy makes them)."""
    return VECTOR_GEMM and accepts(grad, u) and grad.ndim == 4 and u.ndim == 3 \
        and _same_floats(grad, u) and vector_columns(grad.shape[3], grad.dtype)


def winograd_filter(matrix, grid, out, first=0, stop=None):
    """out[a, b] = sum over p, q of matrix[a, p] matrix[b, q] grid[p, q] (rows
    of the filter's C * O channel pairs), summed in float64 and rounded once
    into ``out`` [R, R, X] (``matrix`` [R, S] float64, ``grid`` [S, S, X] of
    out's dtype, or a stack [K, S, S, X] of grids, added in order in their
    dtype first): Winograd's filter transform and its filter gradient's; only
    pairs ``first``..``stop`` - 1 (default all); False if the compiled kernel
    does not apply (see :func:`winograd_filter_applies`)."""
    if not winograd_filter_applies(matrix, grid, out):
        return False
    pairs, stack = grid.shape[-1], grid.shape[0] if grid.ndim == 4 else 1
    _compiled.winograd_filter((matrix.shape[0], matrix.shape[1], pairs, first,
                               pairs if stop is None else stop, stack), matrix, grid, out)
    return True


def winograd_filter_applies(matrix, grid, out):
    """Whether :func:`winograd_filter` runs compiled on these arrays."""
    return accepts(matrix, grid, out) and matrix.dtype == np.float64 and matrix.ndim == 2 \
        and grid.ndim in (3, 4) and out.ndim == 3 and _same_floats(grid, out)


# The compiled GEMM beats OpenBLAS (through NumPy, one thread) 1.2-2x: its
# unblocked loops on the convolutions' narrow products (im2col's patches @
# filter, 27 to 800 wide, col2im's grad @ filter^T, the filter gradient's a^T @
# b), its blocked and packed kernel on deep or wide ones (dense layers); native_gemm.c
# picks one by the shapes (UNPACKED_MAX_VECTORS). benchmarks/dense_gemm.py times both.


def gemm(a, b, out, transpose_a=False, transpose_b=False, rows=None, columns=None):
    """out = op(a) @ op(b) by the compiled register-blocked kernel, where op(a)
    is a^T with ``transpose_a`` (a stored [K, M]) and op(b) is b^T with
    ``transpose_b`` (b stored [N, K]); with ``rows`` and/or ``columns`` (a
    (start, stop) range each) only that block of ``out`` is written (the
    parts of a split product). Any width is taken. False where it does not
    apply (then nothing is written): C-contiguous float32 or float64 NumPy
    arrays of one dtype only, on a CPU with AVX-512 or AVX2 (:data:`VECTOR_GEMM`).

    Example::

        >>> a, b = np.ones((50, 3136), np.float32), np.ones((1024, 3136), np.float32)
        >>> out = np.empty((50, 1024), np.float32)
        >>> gemm(a, b, out, transpose_b=True), float(out[0, 0])
        (True, 3136.0)
    """
    if not gemm_applies(a, b, out):
        return False
    (m, inner), n = (a.shape[::-1] if transpose_a else a.shape), out.shape[1]
    if (b.shape[::-1] if transpose_b else b.shape) != (inner, n) or out.shape[0] != m:
        raise ValueError(f"gemm: shapes {a.shape}{'^T' if transpose_a else ''} @ "
                         f"{b.shape}{'^T' if transpose_b else ''} -> {out.shape} "
                         f"do not match")
    first_row, stop_row = rows or (0, m)
    first_column, stop_column = columns or (0, n)
    _compiled.gemm((m, inner, n, transpose_a, transpose_b, first_row, stop_row - first_row,
                    first_column, stop_column - first_column), a, b, out)
    return True


def gemm_takes(columns, *arrays):
    """Whether :func:`gemm` takes these arrays for a product ``columns`` wide
    and wins there (whole vectors of columns, see :func:`vector_columns`)."""
    return vector_columns(columns, arrays[0].dtype) and gemm_applies(*arrays)


def gemm_applies(*arrays):
    """Whether :func:`gemm` takes these arrays (operands and output alike:
    C-contiguous 2-D float32 or float64 NumPy arrays of one dtype, on a CPU
    with AVX-512 or AVX2); their shapes it checks itself."""
    return VECTOR_GEMM and accepts(*arrays) and all(array.ndim == 2 for array in arrays) \
        and _same_floats(*arrays)


def vector_columns(columns, dtype):
    """Whether the compiled GEMM takes products ``columns`` wide: whole 64-byte
    vectors (16 float32 or 8 float64 values: one AVX-512 vector, two AVX2 ones,
    on either path); narrower remainders ran at a tenth of OpenBLAS's speed,
    so they are left to NumPy."""
    return columns % (64 // np.dtype(dtype).itemsize) == 0


# The blocked kernel's column panels are two vectors wide: products narrower
# than one panel (a 10-way logits layer) ran at 0.2-0.6x OpenBLAS's speed.
# NOTE: on the AVX2 path one thread of the blocked kernel ran the dense layers'
# products at 0.81-0.91x OpenBLAS's Haswell kernels, but split over the pool's
# two threads at 0.85-1.80x, and the cpu_peers MLP's step took 3.53 ms against
# 4.92 on OpenBLAS (benchmarks/dense_gemm.py, tables 1-3, TOWERFLOW_ISA=avx2
# OPENBLAS_CORETYPE=Haswell, Xeon with AVX-512, 2 cores, 2026-11-29): both paths
# take them.
def gemm_wins(columns, dtype):
    """Whether the compiled GEMM beats OpenBLAS on products ``columns`` wide:
    at least one panel of two vectors (32 float32 or 16 float64 values), on a
    CPU where it runs vectorised (:data:`VECTOR_GEMM`).

    Example::

        >>> gemm_wins(1024, np.float32), gemm_wins(10, np.float32)   # AVX-512 or AVX2
        (True, False)
    """
    return VECTOR_GEMM and columns >= 128 // np.dtype(dtype).itemsize  # 2 x 64 bytes


def winograd_gemms(u, first_tile, w, m, sums=False):
    """The 36 GEMMs of a block of Winograd tiles, into ``m``: u[plane, 36, C]
    holds the transformed inputs, the block being tiles ``first_tile`` ..
    ``first_tile + tiles - 1``; ``m[:, t] = u_block[:, t] @ w[t]`` (w [36, C,
    O], m [tiles, 36, O]), or with ``sums`` ``m[t] += u_block[:, t]^T @ w[:,
    t]`` (w [tiles, 36, O], m [36, C, O]: the filter gradient, added to what
    ``m`` holds). False if the compiled kernel does not apply."""
    if not (VECTOR_GEMM and accepts(u, w, m) and u.ndim == w.ndim == m.ndim == 3
            and _same_floats(u, w, m) and vector_columns(m.shape[2], m.dtype)):
        return False
    tiles = w.shape[0] if sums else m.shape[0]
    _compiled.winograd_gemms((u.shape[0], first_tile, tiles, u.shape[2], m.shape[2], sums),
                             u, w, m)
    return True


def accepts(*arrays):
    """Whether the compiled kernels are on and every array (but None) is a
    C-contiguous NumPy array (not CuPy's, say)."""
    return available() and all(
        array is None or (isinstance(array, np.ndarray) and array.flags.c_contiguous)
        for array in arrays)


def float_arrays(*arrays):
    """Whether :func:`im2col` and :func:`col2im` take these arrays: accepted
    (see :func:`accepts`) and all float32, or all float64."""
    return accepts(*arrays) and _same_floats(*arrays)


def _conv_geometry(x, lay):
    top, _, left, _ = lay.pads
    return tuple(x.shape) + tuple(lay.window) + tuple(lay.strides) + \
        (top, left, lay.out_h, lay.out_w)


def _tiled(x, lay):
    return lay.tiles and len(lay.taps) <= 8 and x.ndim == 4


def _same_floats(first, *others):
    return first.dtype in _FLOATS and all(
        other is None or other.dtype == first.dtype for other in others)


def pool_geometry(x, lay):
    """The compiled pooling kernels' geometry (n, h, w, c, kh, kw, oh, ow) of
    the windows ``lay`` over the NHWC ``x``."""
    n, h, w, c = x.shape
    return (n, h, w, c) + tuple(lay.window) + (lay.out_h, lay.out_w)


# -- training-mode batch norm (see native_batch_norm.py) -------------------------------


def batch_norm_sums(geometry, x, shift, grad, relu_output, partials, pool=None):
    """Per-block float64 channel sums into ``partials`` (native_batch_norm.c's
    batch_norm_sums); ``pool`` (pool geometry, winner code, pooled max): the
    gradient is MaxPool's ``grad``, routed as max_pool_grad routes it."""
    _compiled.batch_norm_sums(geometry, x, shift, grad, relu_output, partials,
                              *([pool] if pool else []))


def batch_norm_apply(geometry, x, coefficients, y, relu):
    """y = (x - mean) * gain + offset (then ReLU) over a range of rows."""
    _compiled.batch_norm_apply(geometry, x, coefficients, y, relu)


def batch_norm_grad_apply(geometry, grad, relu_output, x, coefficients, dx, pool=None):
    """dx of a training-mode batch norm over a range of rows (masked by the
    ReLU, or ``grad`` routed as ``pool`` says: see :func:`batch_norm_sums`)."""
    _compiled.batch_norm_grad_apply(geometry, grad, relu_output, x, coefficients, dx,
                                    *([pool] if pool else []))


def batch_norm_pool(geometry, x, coefficients, out, code):
    """MaxPool (tiled windows) of relu((x - mean) * gain + offset) into ``out``, ``code``."""
    _compiled.batch_norm_pool(geometry, x, coefficients, out, code)


# -- parallel parts (native_parts.c) ------------------------------------------------------


def run_parts(work, count, threads):
    """``work(part)`` for each of ``count`` parts on this thread, the calls it
    makes to the kernels that record (winograd_conv, winograd_grad_sums,
    winograd_filter, the batch norm kernels, max_pool, max_pool_grad, im2col,
    col2im, gemm) recorded; then those calls run with the GIL released, the
    parts spread over up to ``threads`` threads, each part's calls in order,
    and this returns when all have run.
    A part must not read what its calls write, nor run NumPy work on their
    arrays (see cpu_threads.Serial.run_compiled); a kernel that cannot record
    called from a part raises RuntimeError."""
    _compiled.run_parts(work, count, threads)


# -- optimizer updates (see native_updates.py) -------------------------------------------


def apply_update(kind, scalars, var, slot_a, slot_b, grad, part, parts):
    """One optimizer's in-place update of part ``part`` of ``parts`` of
    ``var``'s elements (native_updates.c's apply_update); False, having written
    nothing, unless every array is a C-contiguous float32 or float64 NumPy
    array of var's shape and dtype."""
    return _compiled.apply_update(kind, scalars, var, slot_a, slot_b, grad, part, parts)
