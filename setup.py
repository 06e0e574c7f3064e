"""Builds towerflow's optional compiled kernels (towerflow/backends/_native.c).

Everything else is in pyproject.toml. The extension is optional: where no C
compiler is found the install still succeeds and the NumPy kernels run
instead (towerflow.backends.native says which is in use).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "towerflow.backends._native", ["towerflow/backends/_native.c"],
    optional=True, extra_compile_args=["-O3"])])
