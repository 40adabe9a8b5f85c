// Matrix factorizations and solves through LAPACK (OpenBLAS's, the library the GEMMs link):
// torch.linalg's solve, solve_triangular, cholesky, eigh and the determinant's LU. Each batch
// element is one library call on a column-major copy (LAPACK's layout; an n x n copy is noise
// beside the O(n^3) factorization). float32 and float64 only, as torch's CPU kernels.
#include "runtime/ops/linalg.h"

#include "runtime/error.h"
#include "runtime/thread_pool.h"

#include <cblas.h>

#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

extern "C" {
void sgesv_(const int *n, const int *nrhs, float *a, const int *lda, int *ipiv, float *b,
            const int *ldb, int *info);
void dgesv_(const int *n, const int *nrhs, double *a, const int *lda, int *ipiv, double *b,
            const int *ldb, int *info);
void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info);
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
void sgetrf_(const int *m, const int *n, float *a, const int *lda, int *ipiv, int *info);
void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
void ssyevd_(const char *jobz, const char *uplo, const int *n, float *a, const int *lda, float *w,
             float *work, const int *lwork, int *iwork, const int *liwork, int *info);
void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
             double *work, const int *lwork, int *iwork, const int *liwork, int *info);
}

namespace kiln::ops {

namespace {

void gesv(int n, int k, float *a, int *piv, float *b, int *info) {
  sgesv_(&n, &k, a, &n, piv, b, &n, info);
}
void gesv(int n, int k, double *a, int *piv, double *b, int *info) {
  dgesv_(&n, &k, a, &n, piv, b, &n, info);
}
void potrf(int n, float *a, int *info) { spotrf_("L", &n, a, &n, info); }
void potrf(int n, double *a, int *info) { dpotrf_("L", &n, a, &n, info); }
void getrf(int n, float *a, int *piv, int *info) { sgetrf_(&n, &n, a, &n, piv, info); }
void getrf(int n, double *a, int *piv, int *info) { dgetrf_(&n, &n, a, &n, piv, info); }
void syevd(char uplo, int n, float *a, float *w, float *work, int lwork, int *iwork, int liwork,
           int *info) {
  ssyevd_("V", &uplo, &n, a, &n, w, work, &lwork, iwork, &liwork, info);
}
void syevd(char uplo, int n, double *a, double *w, double *work, int lwork, int *iwork, int liwork,
           int *info) {
  dsyevd_("V", &uplo, &n, a, &n, w, work, &lwork, iwork, &liwork, info);
}
void trsm(bool upper, bool unit, int n, int k, const float *a, float *b) {
  cblas_strsm(CblasRowMajor, CblasLeft, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, n, k, 1.0f, a, n, b, k);
}
void trsm(bool upper, bool unit, int n, int k, const double *a, double *b) {
  cblas_dtrsm(CblasRowMajor, CblasLeft, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, n, k, 1.0, a, n, b, k);
}

std::string_view dtypeWord(DType t) {
  switch (t) {
  case DType::Float16:
    return "Half";
  case DType::BFloat16:
    return "BFloat16";
  case DType::Int64:
    return "Long";
  case DType::Int32:
    return "Int";
  case DType::Bool:
    return "Bool";
  default:
    return dtypeName(t);
  }
}

/// torch's checks of a batch of square float matrices.
void checkSquare(const char *op, const Tensor &a, const char *name = "A") {
  KILN_CHECK(a.dim() >= 2, "{}: The input tensor {} must have at least 2 dimensions.", op, name);
  KILN_CHECK(a.size(-1) == a.size(-2),
             "{}: {} must be batches of square matrices, but they are {} by {} matrices", op, name,
             a.size(-2), a.size(-1));
  KILN_CHECK(a.dtype() == DType::Float32 || a.dtype() == DType::Float64,
             "{}: Expected a floating point or complex tensor as input. Got {}", op,
             dtypeWord(a.dtype()));
}

/// "(Batch element i): " where the input is a batch, as torch prefixes its errors.
std::string batchPrefix(const Tensor &a, int64_t i) {
  return a.dim() > 2 ? fmt::format("(Batch element {}): ", i) : std::string();
}

int64_t batchCount(IntList sizes) {
  int64_t count = 1;
  for (size_t d = 0; d + 2 < sizes.size(); ++d)
    count *= sizes[d];
  return count;
}

Shape batchOf(IntList sizes) { return Shape(sizes.begin(), sizes.end() - 2); }

Shape withMatrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

/// Column-major copies of each matrix of `a` (..., r, c): the transposed row-major buffer, always
/// a fresh one (LAPACK overwrites it; a transposed view's transpose is already contiguous).
Tensor columnMajor(const Tensor &a) { return a.transpose(-2, -1).clone(); }

/// Runs `fn` on host copies of device tensors and moves the result back: LAPACK is host code.
template <class Fn> Tensor onHost(const Tensor &a, Fn fn) {
  if (a.isCpu())
    return fn(a);
  return fn(a.to(Device{})).to(a.device());
}

/// LinAlgError, the Python exception torch.linalg raises for singular or indefinite input.
template <typename... Args>
[[noreturn]] void linalgFail(fmt::format_string<Args...> f, Args &&...args) {
  throw Error(ErrorKind::LinAlg, fmt::format(f, std::forward<Args>(args)...));
}

template <class T> Tensor solveImpl(const Tensor &a, const Tensor &b, bool inverse) {
  const int64_t n = a.size(-1), k = b.size(-1);
  const Shape batch = broadcastShapes(batchOf(a.sizes()), batchOf(b.sizes()), "linalg.solve");
  Tensor lu = columnMajor(a.expand(withMatrix(batch, n, n)));
  Tensor x = columnMajor(b.expand(withMatrix(batch, n, k))); // LAPACK overwrites B with X
  std::vector<int> piv(static_cast<size_t>(n));
  const int64_t count = batchCount(lu.sizes());
  parkWorkers();
  for (int64_t i = 0; i < count && n > 0; ++i) {
    int info = 0;
    gesv(int(n), int(k), lu.data<T>() + i * n * n, piv.data(), x.data<T>() + i * n * k, &info);
    if (info > 0 && inverse)
      linalgFail("linalg.inv: {}The diagonal element {} is zero, the inversion could not be "
                 "completed because the input matrix is singular.",
                 batchPrefix(lu, i), info);
    if (info > 0)
      linalgFail("torch.linalg.solve: {}The solver failed because the input matrix is singular.",
                 batchPrefix(lu, i));
  }
  return x.transpose(-2, -1).contiguous();
}

template <class T> Tensor triangularImpl(const Tensor &a, const Tensor &b, bool upper, bool unit) {
  const int64_t n = a.size(-1), k = b.size(-1);
  const Shape batch =
      broadcastShapes(batchOf(a.sizes()), batchOf(b.sizes()), "linalg.solve_triangular");
  Tensor t = a.expand(withMatrix(batch, n, n)).contiguous();
  Tensor x = b.expand(withMatrix(batch, n, k)).clone(); // trsm overwrites B with X
  const int64_t count = batchCount(t.sizes());
  parkWorkers();
  for (int64_t i = 0; i < count && n > 0 && k > 0; ++i)
    trsm(upper, unit, int(n), int(k), t.data<T>() + i * n * n, x.data<T>() + i * n * k);
  return x;
}

template <class T> Tensor choleskyImpl(const Tensor &a) {
  const int64_t n = a.size(-1);
  Tensor l = columnMajor(a); // column-major A: LAPACK's lower triangle is A's lower triangle
  const int64_t count = batchCount(l.sizes());
  parkWorkers();
  for (int64_t i = 0; i < count && n > 0; ++i) {
    int info = 0;
    potrf(int(n), l.data<T>() + i * n * n, &info);
    if (info > 0)
      linalgFail("linalg.cholesky: {}The factorization could not be completed because the input "
                 "is not positive-definite (the leading minor of order {} is not "
                 "positive-definite).",
                 batchPrefix(a, i), info);
    T *m = l.data<T>() + i * n * n; // zero what LAPACK left of A above the diagonal
    for (int64_t col = 1; col < n; ++col)
      for (int64_t row = 0; row < col; ++row)
        m[row + col * n] = T(0);
  }
  return l.transpose(-2, -1).contiguous();
}

/// log|det| (sign false) or the determinant's sign (sign true) of each matrix, through LU.
template <class T> Tensor determinantImpl(const Tensor &a, bool sign) {
  const int64_t n = a.size(-1);
  Tensor lu = a.clone(); // det(A^T) = det(A): the layout does not matter
  Tensor out = Tensor::empty(batchOf(a.sizes()), a.dtype());
  std::vector<int> piv(static_cast<size_t>(std::max<int64_t>(n, 1)));
  const int64_t count = batchCount(a.sizes());
  parkWorkers();
  for (int64_t i = 0; i < count; ++i) {
    T *m = lu.data<T>() + i * n * n;
    int info = 0;
    if (n > 0)
      getrf(int(n), m, piv.data(), &info);
    T logAbs = 0, s = 1;
    for (int64_t j = 0; j < n; ++j) {
      const T u = m[j * n + j];
      if (piv[static_cast<size_t>(j)] != j + 1)
        s = -s;
      if (u < 0)
        s = -s;
      logAbs += std::log(std::abs(u));
    }
    if (info > 0) { // an exactly zero pivot: a singular matrix
      s = 0;
      logAbs = -std::numeric_limits<T>::infinity();
    }
    out.data<T>()[i] = sign ? s : logAbs;
  }
  return out;
}

template <class T> Tensor eighImpl(const Tensor &a, bool upper) {
  const int64_t n = a.size(-1);
  Tensor v = columnMajor(a); // the triangle `upper` names of A is the same one in this copy
  const Shape batch = batchOf(a.sizes());
  Tensor packed = Tensor::empty(withMatrix(batch, n + 1, n), a.dtype());
  const int64_t count = batchCount(a.sizes());
  std::vector<T> work(1);
  std::vector<int> iwork(1);
  int lwork = -1, liwork = -1, info = 0;
  parkWorkers();
  if (n > 0) { // the workspace query
    T w0 = 0;
    syevd(upper ? 'U' : 'L', int(n), v.data<T>(), &w0, work.data(), -1, iwork.data(), -1, &info);
    lwork = int(work[0]);
    liwork = iwork[0];
    work.resize(static_cast<size_t>(std::max(lwork, 1)));
    iwork.resize(static_cast<size_t>(std::max(liwork, 1)));
  }
  for (int64_t i = 0; i < count && n > 0; ++i) {
    T *m = v.data<T>() + i * n * n;
    T *out = packed.data<T>() + i * (n + 1) * n;
    syevd(upper ? 'U' : 'L', int(n), m, out, work.data(), lwork, iwork.data(), liwork, &info);
    if (info > 0)
      linalgFail("linalg.eigh: {}The algorithm failed to converge because the input matrix is "
                 "ill-conditioned or has too many repeated eigenvalues (error code: {}).",
                 batchPrefix(a, i), info);
    for (int64_t r = 0; r < n; ++r) // eigenvector j is LAPACK's column j
      for (int64_t c = 0; c < n; ++c)
        out[(r + 1) * n + c] = m[r + c * n];
  }
  return packed;
}

template <class Fn> Tensor byDType(const Tensor &a, Fn fn) {
  return a.dtype() == DType::Float32 ? fn(float{}) : fn(double{});
}

/// torch's checks of A X = B: square float matrices A, B of at least 2 dims, one dtype.
void checkSystem(const char *op, const Tensor &a, const Tensor &b) {
  checkSquare(op, a);
  KILN_CHECK(b.dim() >= 2, "{}: The input tensor B must have at least 2 dimensions.", op);
  KILN_CHECK(a.dtype() == b.dtype(),
             "{}: Expected A and B to have the same dtype, but found A of type {} and B of type {} "
             "instead",
             op, dtypeWord(a.dtype()), dtypeWord(b.dtype()));
  KILN_CHECK(b.size(-2) == a.size(-1),
             "{}: Incompatible shapes of A and B for the equation AX = B ({}x{} and {}x{})", op,
             a.size(-2), a.size(-1), b.size(-2), b.size(-1));
}

/// onHost for a pair of operands.
template <class Fn> Tensor onHost(const Tensor &a, const Tensor &b, Fn fn) {
  return onHost(a, [&](const Tensor &ha) { return fn(ha, b.isCpu() ? b : b.to(Device{})); });
}

/// log|det A| (sign false) or the determinant's sign (sign true).
Tensor determinant(const Tensor &a, bool sign) {
  checkSquare("linalg.slogdet", a);
  return onHost(a, [sign](const Tensor &h) {
    return byDType(h, [&](auto t) { return determinantImpl<decltype(t)>(h, sign); });
  });
}

} // namespace

Tensor linalgSolve(const Tensor &a, const Tensor &b, bool inverse) {
  checkSystem(inverse ? "linalg.inv" : "linalg.solve", a, b);
  return onHost(a, b, [&](const Tensor &ha, const Tensor &hb) {
    return byDType(ha, [&](auto t) { return solveImpl<decltype(t)>(ha, hb, inverse); });
  });
}

Tensor linalgSolveTriangular(const Tensor &a, const Tensor &b, bool upper, bool unitriangular) {
  checkSystem("linalg.solve_triangular", a, b);
  return onHost(a, b, [&](const Tensor &ha, const Tensor &hb) {
    return byDType(
        ha, [&](auto t) { return triangularImpl<decltype(t)>(ha, hb, upper, unitriangular); });
  });
}

Tensor linalgCholesky(const Tensor &a) {
  checkSquare("linalg.cholesky", a);
  return onHost(a, [](const Tensor &h) {
    return byDType(h, [&](auto t) { return choleskyImpl<decltype(t)>(h); });
  });
}

Tensor linalgLogabsdet(const Tensor &a) { return determinant(a, false); }

Tensor linalgDetSign(const Tensor &a) { return determinant(a, true); }

Tensor linalgEighPacked(const Tensor &a, bool upper) {
  checkSquare("linalg.eigh", a);
  return onHost(a, [&](const Tensor &h) {
    return byDType(h, [&](auto t) { return eighImpl<decltype(t)>(h, upper); });
  });
}

} // namespace kiln::ops
