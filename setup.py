"""Builds towerflow's optional compiled kernels (towerflow/backends/_native.c
and the native_*.c files beside it, one extension module) and its aligned
NumPy allocator (towerflow/backends/_aligned_memory.c).

Everything else is in pyproject.toml. The extensions are optional: where no C
compiler is found the install still succeeds and the NumPy kernels run
instead (towerflow.backends.native says which is in use).

The build takes seconds (issue 31: it took minutes): each file is compiled at
the optimisation it needs (SOURCE_FLAGS), without debug information, on as
many cores as the process may use, and each says what it is (pip -v shows it).
"""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "towerflow/backends/"

# What each source is, and its flags. The GEMM kernels (explicit vectors in
# register tiles) need -O3: at -O2 their tile loops stayed rolled and the cifar10
# step took 45% longer. The other kernels are loops GCC vectorises: -O2 with -O3's
# cost model for the vectoriser ran the step as fast as -O3 (94.9 / 95.2 ms against
# 92.5 / 94.6 ms, one thread, batch 64) for half the compile time.
VECTORISED_LOOPS = ["-O2", "-fvect-cost-model=dynamic"]
SOURCES = {
    "_native.c": ("the argument helpers and the method table", VECTORISED_LOOPS),
    "native_window.c": ("pooling, im2col and col2im", VECTORISED_LOOPS),
    "native_winograd.c": ("Winograd's transforms", VECTORISED_LOOPS),
    "native_gemm.c": ("the GEMMs' entry points", VECTORISED_LOOPS),
    "native_gemm_avx512.c": ("the AVX-512 GEMM kernels", ["-O3"]),
    "native_gemm_avx2.c": ("the AVX2 GEMM kernels", ["-O3"]),
    "native_batch_norm.c": ("batch norm", VECTORISED_LOOPS),
    "native_updates.c": ("the optimizer updates", VECTORISED_LOOPS),
    "native_parts.c": ("the C threads of run_parts", VECTORISED_LOOPS),
}
# NOTE: -fno-math-errno lets GCC vectorise sqrt (the optimizer updates'): with
# errno to set, each sqrt is a scalar call guarded by a branch. The values are
# the same; the GCC optimize pragma cannot switch it per function. -g0: Python's
# own flags ask for debug information, which cost a quarter of the compile time.
COMMON_FLAGS = ["-g0", "-fno-math-errno"]


def usable_cores():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                    # not Linux
        return os.cpu_count() or 1


class BuildExt(build_ext):
    """build_ext compiling each source with its own flags (SOURCES), in parallel."""

    def build_extension(self, ext):
        compile_all = self.compiler.compile

        def compile_one(source, kwargs):
            what, flags = SOURCES.get(os.path.basename(source), (None, []))
            if what:
                print(f"towerflow: compiling {os.path.basename(source)}: {what}", flush=True)
            extra = list(kwargs.get("extra_postargs") or []) + flags
            return compile_all([source], **{**kwargs, "extra_postargs": extra})

        def compile_each(sources, **kwargs):
            with ThreadPoolExecutor(usable_cores()) as pool:
                objects = pool.map(lambda source: compile_one(source, kwargs), sources)
                return [name for names in objects for name in names]

        self.compiler.compile = compile_each
        try:
            super().build_extension(ext)
        finally:
            del self.compiler.compile


setup(cmdclass={"build_ext": BuildExt}, ext_modules=[Extension(
    "towerflow.backends._native", [NATIVE + name for name in SOURCES],
    depends=[NATIVE + name for name in ("native_common.h", "native_gemm.h",
                                        "native_gemm_path.h", "native_gemm_tiles.h")],
    optional=True, extra_compile_args=COMMON_FLAGS), Extension(
    # NumPy's allocator with 64-byte aligned blocks (aligned_memory.py): it
    # needs NumPy's C API, so NumPy's headers (a build requirement)
    "towerflow.backends._aligned_memory", [NATIVE + "_aligned_memory.c"],
    include_dirs=[numpy.get_include()], optional=True,
    extra_compile_args=["-O2", "-g0"])])
