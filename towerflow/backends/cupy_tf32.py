"""TF32 for float32 GEMMs on GPUs that have it (compute capability 8.0 and
up: Ampere, Hopper and later): cuBLAS then multiplies float32 matrices on
the tensor cores with 10-bit mantissas (``CUBLAS_COMPUTE_32F_FAST_TF32``),
summing in float32. On by default, as in TensorFlow 2.4+;
``TOWERFLOW_TF32=0`` keeps full float32.

CuPy 14 picks a GEMM's compute type in ``cupy._core._routines_linalg``: the
first float32 GEMM of the process reads ``CUPY_TF32`` and the choice is
then cached for the process. Setting that variable from towerflow would
only work if no float32 GEMM had run yet, so towerflow sets the cached
choice itself (``set_compute_type``) each time it opens a GPU: the switch is
honoured whenever it is read, whatever ran before. The choice is one per
process, so one GPU without TF32 (or the switch off) means full float32 on
all of them::

    configure(cupy.cuda.Device(0))    # inside towerflow: when a GPU is opened
    compute_type([90, 80], {})        # 'COMPUTE_TYPE_TF32'
    compute_type([90, 75], {})        # 'COMPUTE_TYPE_DEFAULT'
    compute_type([90], {"TOWERFLOW_TF32": "0"})   # 'COMPUTE_TYPE_DEFAULT'
"""


import numpy as np

from .. import switches

TF32_CAPABILITY = 80        # compute capability 8.0
_capabilities = set()       # of the GPUs opened so far in this process


def tf32_requested(environ=None):
    """Whether TOWERFLOW_TF32 leaves TF32 on (see towerflow.switches):
    ``tf32_requested({"TOWERFLOW_TF32": "0"})`` is False."""
    return switches.on("TOWERFLOW_TF32", environ)


def compute_type(capabilities, environ=None):
    """The name of CuPy's float32 compute type for GPUs of these compute
    capabilities (as integers: 90 for 9.0)."""
    use_tf32 = tf32_requested(environ) and bool(capabilities) and \
        min(capabilities) >= TF32_CAPABILITY
    return "COMPUTE_TYPE_TF32" if use_tf32 else "COMPUTE_TYPE_DEFAULT"


def configure(device, linalg=None, environ=None):
    """Set float32 GEMMs to TF32 or full float32 for ``device`` (a
    cupy.cuda.Device, current while this runs) and every GPU opened before;
    returns the compute type's name. ``linalg``: CuPy's _routines_linalg."""
    if linalg is None:
        from cupy._core import _routines_linalg as linalg
    _capabilities.add(int(device.compute_capability))
    name = compute_type(_capabilities, environ)
    linalg.set_compute_type(np.float32, getattr(linalg, name))
    return name
