"""Builds towerflow's optional compiled kernels (towerflow/backends/_native.c
and the native_*.c files beside it, one extension module) and its aligned
NumPy allocator (towerflow/backends/_aligned_memory.c).

Everything else is in pyproject.toml. The extensions are optional: where no C
compiler is found the install still succeeds and the NumPy kernels run
instead (towerflow.backends.native says which is in use).
"""
import numpy
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
    optional=True, extra_compile_args=["-O3", "-fno-math-errno"]), Extension(
    # NumPy's allocator with 64-byte aligned blocks (aligned_memory.py): it
    # needs NumPy's C API, so NumPy's headers (a build requirement)
    "towerflow.backends._aligned_memory", [NATIVE + "_aligned_memory.c"],
    include_dirs=[numpy.get_include()], optional=True, extra_compile_args=["-O2"])])
