"""Chooses and configures kiln's BLAS before the extension (and so the BLAS) is loaded.

kiln's float GEMMs run on Intel MKL when the `mkl` package is installed (the set-up installs it;
`runtime/blas.h` says why), else on the OpenBLAS kiln links. The C++ side loads MKL from the
path in KILN_MKL_LIB, which is set here to the environment's libmkl_rt unless the user set it or
chose OpenBLAS with KILN_BLAS=openblas. MKL runs sequentially there (kiln's own pool splits
each GEMM into single-threaded MKL calls, runtime/blas.cc), so it needs no OpenMP settings.

Debian's OpenBLAS 0.3.21 does not recognize recent Xeons and falls back to its generic
"Prescott" SSE kernels, which are ~7x slower than the AVX-512 ones on the same machine (512x512
sgemm, one thread: 22 ms vs 3.2 ms). OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded,
so kiln sets it here from the CPU's flags — only when the user has not set it.

bfloat16 GEMMs run on oneDNN where the CPU has bfloat16 dot products (runtime/onednn.h): its
library comes from the `onednn-cpu-gomp` package, found here the same way as MKL's.
"""

import glob
import os
import sys


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _mkl_library() -> str | None:
    """libmkl_rt from the `mkl` package of this environment (pip puts it in <prefix>/lib)."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[0]
    return None


def _dnnl_library() -> str | None:
    """libdnnl.so.3 from the `onednn-cpu-gomp` package of this environment (in <prefix>/lib)."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        path = os.path.join(prefix, "lib", "libdnnl.so.3")
        if os.path.exists(path):
            return path
    return None


def configure() -> None:
    if "KILN_DNNL_LIB" not in os.environ and (dnnl := _dnnl_library()):
        os.environ["KILN_DNNL_LIB"] = dnnl  # bfloat16 GEMMs (runtime/onednn.h)
    if os.environ.get("KILN_BLAS", "").lower() == "openblas":
        os.environ.pop("KILN_MKL_LIB", None)
    elif "KILN_MKL_LIB" not in os.environ and (lib := _mkl_library()):
        os.environ["KILN_MKL_LIB"] = lib
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
