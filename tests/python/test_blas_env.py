"""kiln picks OpenBLAS's kernel family from the CPU flags unless the user chose one."""

import os

import kiln._blas_env as blas_env


def test_avx512_cpu_gets_skylakex(monkeypatch):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(
        blas_env,
        "_cpu_flags",
        lambda: {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma"},
    )
    blas_env.configure()
    assert os.environ["OPENBLAS_CORETYPE"] == "SkylakeX"


def test_avx2_cpu_gets_haswell(monkeypatch):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(blas_env, "_cpu_flags", lambda: {"avx2", "fma", "sse4_2"})
    blas_env.configure()
    assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"


def test_user_choice_is_respected(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Prescott")
    monkeypatch.setattr(
        blas_env, "_cpu_flags", lambda: {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
    )
    blas_env.configure()
    assert os.environ["OPENBLAS_CORETYPE"] == "Prescott"


def test_unknown_cpu_leaves_openblas_alone(monkeypatch):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(blas_env, "_cpu_flags", lambda: {"sse2"})
    blas_env.configure()
    assert "OPENBLAS_CORETYPE" not in os.environ
