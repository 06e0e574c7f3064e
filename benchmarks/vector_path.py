"""``--isa`` for the CPU benchmarks: every framework on one vector path.

One AVX-512 machine can then measure what an AVX2-only CPU (an AMD EPYC
before Zen 4, say) runs: towerflow's compiled GEMMs on their AVX2 kernels
(``TOWERFLOW_ISA``), NumPy's OpenBLAS on its Haswell kernels
(``OPENBLAS_CORETYPE``) and PyTorch's ATen, oneDNN and MKL kernels on AVX2
(``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``, ``MKL_ENABLE_INSTRUCTIONS``). Each is read when its library loads, so the
script restarts itself with them set (``hold``) before it imports any.
What a run used goes into its JSON (``record``).
"""

import os
import sys

# NOTE: PyTorch's ATen kernels, its oneDNN convolutions and its MKL GEMMs each
# pick their instructions themselves: with ATEN_CPU_CAPABILITY alone its
# convolutions still ran on AVX-512.
SWITCHES = {
    "avx2": {"TOWERFLOW_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell",
             "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512": {"TOWERFLOW_ISA": "avx512", "OPENBLAS_CORETYPE": "SkylakeX",
               "ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
               "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}


def add_argument(parser):
    parser.add_argument("--isa", choices=sorted(SWITCHES), default=None,
                        help="run every framework on this vector path (default: the "
                             "best each finds)")


def hold(isa):
    """Restart this script with ``isa``'s switches in its environment, unless
    they are set already; no-op for None."""
    if isa is None:
        return
    wanted = SWITCHES[isa]
    if all(os.environ.get(name) == value for name, value in wanted.items()):
        return
    print(f"restarting with {' '.join(f'{k}={v}' for k, v in wanted.items())}", flush=True)
    os.execve(sys.executable, sys.orig_argv, {**os.environ, **wanted})   # as it started


def record(torch=None):
    """The vector-path switches set, and the path PyTorch reports it runs."""
    names = sorted({name for switches in SWITCHES.values() for name in switches})
    found = {name: os.environ.get(name) for name in names}
    if torch is not None:
        capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
        found["torch_cpu_capability"] = capability() if capability else None
    return found
