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


def test_mkl_is_found_in_the_environment_prefix(monkeypatch, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmkl_rt.so.2").write_bytes(b"")
    monkeypatch.setattr(blas_env.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(blas_env.sys, "base_prefix", str(tmp_path))
    for var in ("KILN_MKL_LIB", "KILN_BLAS"):
        monkeypatch.delenv(var, raising=False)
    blas_env.configure()
    assert os.environ["KILN_MKL_LIB"] == str(tmp_path / "lib" / "libmkl_rt.so.2")


def test_openblas_can_be_chosen_and_a_user_mkl_path_wins(monkeypatch, tmp_path):
    monkeypatch.setattr(blas_env.sys, "prefix", str(tmp_path))
    monkeypatch.setenv("KILN_BLAS", "openblas")
    monkeypatch.setenv("KILN_MKL_LIB", "/opt/mkl/libmkl_rt.so.2")
    blas_env.configure()
    assert "KILN_MKL_LIB" not in os.environ
    monkeypatch.delenv("KILN_BLAS")
    monkeypatch.setenv("KILN_MKL_LIB", "/opt/mkl/libmkl_rt.so.2")
    blas_env.configure()
    assert os.environ["KILN_MKL_LIB"] == "/opt/mkl/libmkl_rt.so.2"
