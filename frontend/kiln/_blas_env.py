"""Chooses OpenBLAS's kernel family before the extension (and so libopenblas) is loaded.

Debian's OpenBLAS 0.3.21 does not recognize recent Xeons and falls back to its generic
"Prescott" SSE kernels, which are ~7x slower than the AVX-512 ones on the same machine (512x512
sgemm, one thread: 22 ms vs 3.2 ms). OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded,
so kiln sets it here from the CPU's flags — only when the user has not set it.
"""

import os


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def configure() -> None:
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
