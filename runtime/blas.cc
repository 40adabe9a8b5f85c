#include "runtime/blas.h"

#include "runtime/thread_pool.h"

#include <cblas.h>
#include <dlfcn.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kiln::blas {
namespace {

// MKL's LP64 CBLAS (its enums have OpenBLAS's values: row-major 101, no-trans 111, trans 112).
using MklSgemm = void (*)(int, int, int, int, int, int, float, const float *, int, const float *,
                          int, float, float *, int);
using MklDgemm = void (*)(int, int, int, int, int, int, double, const double *, int, const double *,
                          int, double, double *, int);
using MklSgemmBatch = void (*)(int, int, int, int, int, int, float, const float *, int, int,
                               const float *, int, int, float, float *, int, int, int);
using MklDgemmBatch = void (*)(int, int, int, int, int, int, double, const double *, int, int,
                               const double *, int, int, double, double *, int, int, int);
using MklSetThreads = void (*)(int);
using MklGetThreads = int (*)();

struct Mkl {
  MklSgemm sgemm = nullptr;
  MklDgemm dgemm = nullptr;
  MklSgemmBatch sgemmBatch = nullptr; // optional: older MKLs lack the strided batch call
  MklDgemmBatch dgemmBatch = nullptr;
  MklSetThreads setThreads = nullptr;
  MklGetThreads getThreads = nullptr;
};

/// MKL's entry points, or null when KILN_MKL_LIB is unset or does not load (a warning then:
/// the variable asked for it).
const Mkl *loadMkl() {
  const char *path = std::getenv("KILN_MKL_LIB");
  if (!path || !*path)
    return nullptr;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  Mkl m;
  if (lib) {
    m.sgemm = reinterpret_cast<MklSgemm>(dlsym(lib, "cblas_sgemm"));
    m.dgemm = reinterpret_cast<MklDgemm>(dlsym(lib, "cblas_dgemm"));
    m.sgemmBatch = reinterpret_cast<MklSgemmBatch>(dlsym(lib, "cblas_sgemm_batch_strided"));
    m.dgemmBatch = reinterpret_cast<MklDgemmBatch>(dlsym(lib, "cblas_dgemm_batch_strided"));
    m.setThreads = reinterpret_cast<MklSetThreads>(dlsym(lib, "MKL_Set_Num_Threads"));
    m.getThreads = reinterpret_cast<MklGetThreads>(dlsym(lib, "MKL_Get_Max_Threads"));
  }
  if (!m.sgemm || !m.dgemm || !m.setThreads || !m.getThreads) {
    std::fprintf(stderr, "kiln: KILN_MKL_LIB=%s could not be loaded (%s); using OpenBLAS\n", path,
                 lib ? "missing cblas/MKL symbols" : dlerror());
    return nullptr;
  }
  static Mkl loaded = m;
  return &loaded;
}

const Mkl *mkl() {
  static const Mkl *m = loadMkl();
  return m;
}

/// MKL's interface takes 32-bit sizes: a larger GEMM goes to OpenBLAS.
bool fitsInt(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > INT_MAX)
      return false;
  return true;
}

/// MKL for double precision only on Intel CPUs: on AMD EPYC its dgemm/dgemv run a generic code
/// path, 10-300 % slower than OpenBLAS at every shape measured (a 1600x240 GEMV: 67 vs 42 us,
/// 256x256x10: 98 vs 26 us, 512^3: 6.0 vs 5.3 ms, 1 thread), while its sgemm stays faster.
bool mklForDouble() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool intel = __builtin_cpu_is("intel");
  return intel;
#else
  return true;
#endif
}

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
int transOf(bool t) { return t ? kTrans : kNoTrans; }

} // namespace

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  parkWorkers(); // the BLAS runs its own threads on the cores kiln's idle workers spin on
  if (const Mkl *l = mkl(); l && fitsInt(m, n, k, lda, ldb, ldc)) {
    l->sgemm(kRowMajor, transOf(ta), transOf(tb), static_cast<int>(m), static_cast<int>(n),
             static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
             c, static_cast<int>(ldc));
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
           int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
  parkWorkers(); // the BLAS runs its own threads on the cores kiln's idle workers spin on
  if (const Mkl *l = mkl(); l && mklForDouble() && fitsInt(m, n, k, lda, ldb, ldc)) {
    l->dgemm(kRowMajor, transOf(ta), transOf(tb), static_cast<int>(m), static_cast<int>(n),
             static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
             c, static_cast<int>(ldc));
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemv(bool trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda,
           const float *x, int64_t incx, float beta, float *y, int64_t incy) {
  parkWorkers();
  cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, incx,
              beta, y, incy);
}

void dgemv(bool trans, int64_t m, int64_t n, double alpha, const double *a, int64_t lda,
           const double *x, int64_t incx, double beta, double *y, int64_t incy) {
  parkWorkers();
  cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, incx,
              beta, y, incy);
}

namespace {
template <typename T, typename Fn>
bool batchStrided(Fn fn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a,
                  int64_t lda, int64_t sa, const T *b, int64_t ldb, int64_t sb, T beta, T *c,
                  int64_t ldc, int64_t sc, int64_t count) {
  if (!fn || !fitsInt(m, n, k, lda, ldb, ldc) || !fitsInt(sa, sb, sc, count, 0, 0) || sa < 0 ||
      sb < 0)
    return false;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  fn(kRowMajor, transOf(ta), transOf(tb), i(m), i(n), i(k), alpha, a, i(lda), i(sa), b, i(ldb),
     i(sb), beta, c, i(ldc), i(sc), i(count));
  return true;
}
} // namespace

bool sgemmBatchStrided(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, int64_t strideA, const float *b, int64_t ldb,
                       int64_t strideB, float beta, float *c, int64_t ldc, int64_t strideC,
                       int64_t count) {
  const Mkl *l = mkl();
  parkWorkers();
  return l && batchStrided(l->sgemmBatch, ta, tb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB,
                           beta, c, ldc, strideC, count);
}

bool dgemmBatchStrided(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const double *a, int64_t lda, int64_t strideA, const double *b, int64_t ldb,
                       int64_t strideB, double beta, double *c, int64_t ldc, int64_t strideC,
                       int64_t count) {
  const Mkl *l = mklForDouble() ? mkl() : nullptr;
  parkWorkers();
  return l && batchStrided(l->dgemmBatch, ta, tb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB,
                           beta, c, ldc, strideC, count);
}

int threads() {
  if (const Mkl *l = mkl())
    return l->getThreads();
  return openblas_get_num_threads();
}

void setThreads(int n) {
  // Both: a GEMM too large for MKL's 32-bit interface still runs on OpenBLAS's threads.
  if (const Mkl *l = mkl())
    l->setThreads(n);
  openblas_set_num_threads(n);
}

const char *name() { return mkl() ? "mkl" : "openblas"; }

} // namespace kiln::blas
