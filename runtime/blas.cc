#include "runtime/blas.h"

#include "runtime/thread_pool.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

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
using MklSetThreadingLayer = int (*)(int);
constexpr int kMklSequential = 1; // MKL_THREADING_SEQUENTIAL

struct Mkl {
  MklSgemm sgemm = nullptr;
  MklDgemm dgemm = nullptr;
  MklSgemmBatch sgemmBatch = nullptr; // optional: older MKLs lack the strided batch call
  MklDgemmBatch dgemmBatch = nullptr;
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
    // Before any other MKL call: kiln's pool runs MKL's GEMMs (onPool), each block a serial
    // call, so MKL loads no OpenMP runtime and starts no threads of its own.
    auto layer = reinterpret_cast<MklSetThreadingLayer>(dlsym(lib, "MKL_Set_Threading_Layer"));
    if (layer)
      layer(kMklSequential);
    else
      m.sgemm = nullptr;
  }
  if (!m.sgemm || !m.dgemm) {
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

/// Below this many multiply-adds a GEMM runs on the calling thread (a 64 x 64 x 64 GEMM takes
/// about 10 us on one core, the order of a pool hand-off).
constexpr double kMinSplitWork = 64.0 * 64.0 * 64.0;

/// A GEMM's output split into a rows x cols grid of blocks, one per thread of kiln's pool.
struct GemmGrid {
  int64_t rows = 1, cols = 1;
};

/// The grid for at most `threads` threads with the most blocks, each at least 16 x 16 (one
/// micro-kernel panel) where the output allows, and of those the least packing work: each block
/// packs its rows of a and its columns of b, so blocks should be square-ish (rows + cols per block
/// least). Ties go to more row blocks, which are contiguous in C.
GemmGrid gemmGrid(int64_t m, int64_t n, int64_t threads) {
  GemmGrid best;
  double bestCost = double(m) + double(n);
  for (int64_t r = 1; r <= std::min(threads, std::max<int64_t>(1, m / 16)); ++r) {
    int64_t c = std::min(threads / r, std::max<int64_t>(1, n / 16));
    double cost = double(m) / r + double(n) / c;
    if (r * c > best.rows * best.cols || (r * c == best.rows * best.cols && cost <= bestCost)) {
      best = {r, c};
      bestCost = cost;
    }
  }
  return best;
}

/// Below this depth per thread a GEMM whose output is too small to split is not split over k.
constexpr int64_t kMinDepthPerPart = 256;

/// Runs a row-major GEMM on kiln's thread pool as single-threaded library calls: MKL then never
/// starts threads of its own, so kiln's workers, still spinning from the last kernel, start the
/// GEMM at once and nothing competes for the cores (MKL's OpenMP threads and kiln's pool took
/// turns waking each other). The output is split into blocks (gemmGrid); an output too small for
/// that (a weight gradient: 16 x 27 over 16,384 pixels) is split over k instead, each part summed
/// into C after. `gemm(rows, cols, depth, a, b, beta, c, ldc)` computes one piece.
template <typename T, typename Gemm>
void onPool(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T *a, int64_t lda, const T *b,
            int64_t ldb, T beta, T *c, int64_t ldc, Gemm gemm) {
  int64_t threads = numThreads();
  if (threads == 1 || inParallelRegion() || double(m) * n * k < kMinSplitWork) {
    gemm(m, n, k, a, b, beta, c, ldc);
    return;
  }
  GemmGrid grid = gemmGrid(m, n, threads);
  if (grid.rows * grid.cols > 1) {
    int64_t bm = (m + grid.rows - 1) / grid.rows, bn = (n + grid.cols - 1) / grid.cols;
    parallelFor(0, grid.rows * grid.cols, 1, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        int64_t i0 = block / grid.cols * bm, j0 = block % grid.cols * bn;
        int64_t rows = std::min(bm, m - i0), cols = std::min(bn, n - j0);
        if (rows > 0 && cols > 0)
          gemm(rows, cols, k, ta ? a + i0 : a + i0 * lda, tb ? b + j0 * ldb : b + j0, beta,
               c + i0 * ldc + j0, ldc);
      }
    });
    return;
  }
  int64_t parts = std::min(threads, k / kMinDepthPerPart);
  if (parts < 2) {
    gemm(m, n, k, a, b, beta, c, ldc);
    return;
  }
  // Part 0 accumulates into C (with beta); the others into zeroed scratch, added after.
  int64_t depth = (k + parts - 1) / parts;
  std::vector<T> partial(static_cast<size_t>((parts - 1) * m * n));
  parallelFor(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      int64_t k0 = p * depth, kd = std::min(depth, k - k0);
      const T *pa = ta ? a + k0 * lda : a + k0, *pb = tb ? b + k0 : b + k0 * ldb;
      if (p == 0)
        gemm(m, n, kd, pa, pb, beta, c, ldc);
      else if (kd > 0)
        gemm(m, n, kd, pa, pb, T(0), partial.data() + (p - 1) * m * n, n);
    }
  });
  for (int64_t p = 1; p < parts; ++p)
    if ((p * depth) < k)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          c[i * ldc + j] += partial[(p - 1) * m * n + i * n + j];
}

} // namespace

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (const Mkl *l = mkl(); l && fitsInt(m, n, k, lda, ldb, ldc)) {
    onPool(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc,
           [&](int64_t rows, int64_t cols, int64_t depth, const float *pa, const float *pb,
               float pbeta, float *pc, int64_t pldc) {
             l->sgemm(kRowMajor, transOf(ta), transOf(tb), int(rows), int(cols), int(depth), alpha,
                      pa, int(lda), pb, int(ldb), pbeta, pc, int(pldc));
           });
    return;
  }
  parkWorkers(); // OpenBLAS runs its own threads on the cores kiln's idle workers spin on
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
           int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
  if (const Mkl *l = mkl(); l && mklForDouble() && fitsInt(m, n, k, lda, ldb, ldc)) {
    onPool(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc,
           [&](int64_t rows, int64_t cols, int64_t depth, const double *pa, const double *pb,
               double pbeta, double *pc, int64_t pldc) {
             l->dgemm(kRowMajor, transOf(ta), transOf(tb), int(rows), int(cols), int(depth), alpha,
                      pa, int(lda), pb, int(ldb), pbeta, pc, int(pldc));
           });
    return;
  }
  parkWorkers(); // OpenBLAS runs its own threads on the cores kiln's idle workers spin on
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemv(bool trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda,
           const float *x, int64_t incx, float beta, float *y, int64_t incy) {
  parkWorkers();
  cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, incx, beta,
              y, incy);
}

void dgemv(bool trans, int64_t m, int64_t n, double alpha, const double *a, int64_t lda,
           const double *x, int64_t incx, double beta, double *y, int64_t incy) {
  parkWorkers();
  cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, incx, beta,
              y, incy);
}

namespace {
/// One strided-batch library call, or (at several threads) the batch shared out over kiln's
/// pool in runs of whole GEMMs, each run one single-threaded call.
template <typename T, typename Fn>
bool batchStrided(Fn fn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a,
                  int64_t lda, int64_t sa, const T *b, int64_t ldb, int64_t sb, T beta, T *c,
                  int64_t ldc, int64_t sc, int64_t count) {
  if (!fn || !fitsInt(m, n, k, lda, ldb, ldc) || !fitsInt(sa, sb, sc, count, 0, 0) || sa < 0 ||
      sb < 0)
    return false;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  auto run = [&](int64_t first, int64_t end) {
    fn(kRowMajor, transOf(ta), transOf(tb), i(m), i(n), i(k), alpha, a + first * sa, i(lda), i(sa),
       b + first * sb, i(ldb), i(sb), beta, c + first * sc, i(ldc), i(sc), i(end - first));
  };
  // One run per thread: each call packs its operands once per GEMM anyway, and fewer calls pay
  // the library's per-call set-up fewer times.
  double work = double(m) * n * k;
  int64_t threads = numThreads();
  int64_t grain = std::max<int64_t>(static_cast<int64_t>(kMinSplitWork / std::max(work, 1.0)),
                                    (count + threads - 1) / threads);
  parallelFor(0, count, std::max<int64_t>(1, grain), run);
  return true;
}
} // namespace

bool sgemmBatchStrided(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, int64_t strideA, const float *b, int64_t ldb,
                       int64_t strideB, float beta, float *c, int64_t ldc, int64_t strideC,
                       int64_t count) {
  const Mkl *l = mkl();
  return l && batchStrided(l->sgemmBatch, ta, tb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB,
                           beta, c, ldc, strideC, count);
}

bool dgemmBatchStrided(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const double *a, int64_t lda, int64_t strideA, const double *b, int64_t ldb,
                       int64_t strideB, double beta, double *c, int64_t ldc, int64_t strideC,
                       int64_t count) {
  const Mkl *l = mklForDouble() ? mkl() : nullptr;
  return l && batchStrided(l->dgemmBatch, ta, tb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB,
                           beta, c, ldc, strideC, count);
}

int threads() { return openblas_get_num_threads(); }

void setThreads(int n) { openblas_set_num_threads(n); }

const char *name() { return mkl() ? "mkl" : "openblas"; }

} // namespace kiln::blas
