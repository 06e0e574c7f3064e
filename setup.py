"""Builds towerflow's optional compiled kernels (towerflow/backends/_native.c
and the native_*.c files beside it, one extension module).

Everything else is in pyproject.toml. The extension is optional: where no C
compiler is found the install still succeeds and the NumPy kernels run
instead (towerflow.backends.native says which is in use).
"""
from setuptools import Extension, setup

NATIVE = "towerflow/backends/"

setup(ext_modules=[Extension(
    "towerflow.backends._native",
    [NATIVE + name for name in ("_native.c", "native_window.c", "native_winograd.c",
                                "native_gemm.c", "native_batch_norm.c", "native_updates.c",
                                "native_parts.c")],
    depends=[NATIVE + "native_common.h"],
    # NOTE: -fno-math-errno lets GCC vectorise sqrt (the optimizer updates'):
    # with errno to set, each sqrt is a scalar call guarded by a branch. The
    # values are the same; the GCC optimize pragma cannot switch it per function.
    optional=True, extra_compile_args=["-O3", "-fno-math-errno"])])
