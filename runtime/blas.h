#pragma once
/// The BLAS behind kiln's float and double GEMMs: Intel MKL when it can be loaded, else the
/// OpenBLAS kiln links against.
///
/// MKL is measured faster on these machines for the shapes models use (a 512x128 @ 128x384
/// sgemm: 292 us vs OpenBLAS's 352 us at 1 thread, 151 vs 234 us at 2; `bench/blas.py`, table
/// in bench/README.md), and it is what torch's CPU GEMMs use. It is loaded with dlopen from the
/// library KILN_MKL_LIB names (the Python front sets it to the venv's libmkl_rt when the `mkl`
/// package is installed, unless KILN_BLAS=openblas), so one build runs with or without it; a
/// process without Python (a kilnc library) uses OpenBLAS unless the variable is set.
/// Double precision goes to MKL only on Intel CPUs: on AMD EPYC, OpenBLAS's dgemm/dgemv measured
/// faster at every shape (blas.cc, mklForDouble).

#include <cstdint>

namespace kiln::blas {

/// c = alpha * op(a) @ op(b) + beta * c, row-major; op transposes when ta / tb.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
           int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

/// y = alpha * op(a) @ x + beta * y for row-major a (m x n; op transposes), vectors at strides
/// incx, incy (> 0). Always OpenBLAS: its gemv measured faster than MKL's GEMM or GEMV at the
/// matrix-vector shapes NumPy code runs (a 1600x1600 float64 GEMV: 486 us vs 2657 us for a
/// one-column dgemm, float32 137 vs 186 us, 1 thread).
void sgemv(bool trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda,
           const float *x, int64_t incx, float beta, float *y, int64_t incy);
void dgemv(bool trans, int64_t m, int64_t n, double alpha, const double *a, int64_t lda,
           const double *x, int64_t incx, double beta, double *y, int64_t incy);

/// `count` GEMMs whose operands and results lie at fixed strides (elements) from one another,
/// shared out over kiln's pool in runs of whole GEMMs, one library call per run. Returns false, doing nothing, when the
/// library has no such call (OpenBLAS): the caller loops then.
bool sgemmBatchStrided(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, int64_t strideA, const float *b, int64_t ldb,
                       int64_t strideB, float beta, float *c, int64_t ldc, int64_t strideC,
                       int64_t count);
bool dgemmBatchStrided(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const double *a, int64_t lda, int64_t strideA, const double *b, int64_t ldb,
                       int64_t strideB, double beta, double *c, int64_t ldc, int64_t strideC,
                       int64_t count);

/// OpenBLAS's own thread count (MKL runs sequentially, split over kiln's pool: blas.cc onPool).
int threads();
void setThreads(int n);

/// "mkl" or "openblas": the library in use (loaded on first use).
const char *name();

} // namespace kiln::blas
