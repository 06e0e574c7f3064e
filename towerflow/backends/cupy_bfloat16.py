"""bfloat16 on the GPU backend: what the installed CuPy does with it, and the
GPU kernel table's bfloat16 rules.

CuPy 14 takes ml_dtypes' bfloat16 (towerflow's ``tf.bfloat16.as_numpy_dtype``)
as its own bfloat16 dtype, CUDA's ``__nv_bfloat16`` (cupy/cupy#9494):
arrays, host copies and casts; elementwise ufuncs and reductions (their
``types`` list bfloat16 loops, 'EE->E'); 2-D matmul through
``cublasGemmEx`` (``CUDA_R_16BF`` in and out, float32 accumulation).
CuPy calls that support experimental; in 14.2 a matmul of stacked (more than
2-D) bfloat16 operands fails (fixed after 14.2, cupy/cupy#10317), and
``cupyx``, the old ``cupy.fuse`` and rounding have no bfloat16
(cupy/cupy#9630). CuPy before 14, or without ml_dtypes, has no bfloat16.

So towerflow's bfloat16 tensors on a GPU are CuPy bfloat16 arrays (half the
memory and host-transfer bytes of float32), NCCL all-reduces them as
``ncclBfloat16``, and every op that computes runs in float32 on them and
rounds once, as on the CPU (see bfloat16_kernels.py): no op reaches a
CuPy call that lacks bfloat16, and GPU and CPU round alike. Where CuPy has
no bfloat16 at all, a plan with bfloat16 tensors on a GPU fails when it is
compiled, with an UnimplementedError naming the op, the device and why::

    KERNELS = gpu_kernels_with_bfloat16(cupy, table)
"""

import ml_dtypes
import numpy as np

from .bfloat16_kernels import NATIVE_BFLOAT16_KERNELS, with_bfloat16

_CHAR = np.dtype(ml_dtypes.bfloat16).char      # 'E'

# On a GPU NCCL sums bfloat16 itself (ncclBfloat16; see parallel/nccl.py).
GPU_NATIVE_BFLOAT16_KERNELS = NATIVE_BFLOAT16_KERNELS | {
    "NcclAllReduce", "NcclAllReduceStart", "NcclAllReduceWait"}


def unsupported_reason(cupy_module):
    """None if ``cupy_module`` holds ml_dtypes' bfloat16 (its ufuncs have
    bfloat16 loops), else why it does not.

    Example: ``unsupported_reason(cupy) is None`` with CuPy 14 and ml_dtypes.
    """
    loops = getattr(getattr(cupy_module, "add", None), "types", None) or ()
    if f"{_CHAR}{_CHAR}->{_CHAR}" in loops:
        return None
    version = getattr(cupy_module, "__version__", "?")
    return (f"CuPy {version} has no bfloat16 dtype (its ufuncs have no bfloat16 loops): "
            "bfloat16 on a GPU needs CuPy >= 14 with the ml_dtypes package")


def gpu_kernels_with_bfloat16(cupy_module, table):
    """The GPU kernel ``table`` with towerflow's bfloat16 rules: see the
    module docstring. Example: ``gpu_kernels_with_bfloat16(cupy, KERNELS)``."""
    return with_bfloat16(table, GPU_NATIVE_BFLOAT16_KERNELS,
                         unsupported=unsupported_reason(cupy_module))
