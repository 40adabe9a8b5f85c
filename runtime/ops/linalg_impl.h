#pragma once
/// Internal GEMM layer shared by the linear-algebra ops and convolution: raw strided GEMM kernels
/// (OpenBLAS for float/double, a blocked loop for integers), the policy that runs many small
/// GEMMs over kiln's pool, and the batched tensor GEMM behind matmul/mm/bmm/addmm. Not part of
/// the public op API.

#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <optional>
#include <string_view>

namespace kiln::ops::detail {

/// torch's C++ name of a dtype ('Float', 'Long', ...), used in "not implemented" errors so the
/// messages read like torch's.
std::string_view torchTypeName(DType t);

/// Throws NotImplementedError `"op" not implemented for 'Long'`, torch's wording.
[[noreturn]] void notImplementedFor(const char *op, DType t);

/// A matrix stored with element strides (rowStride, colStride): how BLAS can read it without a
/// copy. `trans` means the matrix is the transpose of a row-major matrix with leading dim `ld`.
struct BlasLayout {
  bool trans;
  int64_t ld;
};
/// The BLAS view of a rows x cols matrix, or nullopt when its strides need a copy first.
std::optional<BlasLayout> blasLayout(int64_t rows, int64_t cols, int64_t rowStride,
                                     int64_t colStride);

/// One GEMM operand: base pointer and element strides of a rows x cols matrix.
template <typename T> struct MatRef {
  const T *data;
  int64_t rowStride;
  int64_t colStride;
};

/// c[m, n] (row-major, leading dim ldc) = alpha * a[m, k] @ b[k, n] + beta * c.
/// T is float or double (runtime/blas.h; a and b must satisfy blasLayout) or an integer type (a
/// blocked loop with any strides; arithmetic wraps like torch's). beta == 0 ignores c's contents.
template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, T alpha, MatRef<T> a, MatRef<T> b, T beta, T *c,
          int64_t ldc);

/// Keeps the BLAS single-threaded while kiln's pool runs independent GEMMs in parallel, so the
/// two thread pools do not oversubscribe the cores. Nests; restores the setting on exit.
class BlasSerialScope {
public:
  BlasSerialScope();
  ~BlasSerialScope();
  BlasSerialScope(const BlasSerialScope &) = delete;
  BlasSerialScope &operator=(const BlasSerialScope &) = delete;
};

/// A GEMM this large (multiply-adds) is left to the BLAS's own threads.
constexpr int64_t kLargeGemmWork = int64_t{1} << 24;

/// Runs fn(i) for i in [0, count): independent GEMMs of `workEach` multiply-adds each. Small
/// GEMMs run in parallel over kiln's pool (the BLAS kept serial); large ones run one after
/// another, each using the BLAS's threads.
template <typename Fn> void forEachGemm(int64_t count, int64_t workEach, Fn &&fn) {
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, workEach));
  if (count < 2 * grain || workEach >= kLargeGemmWork || numThreads() == 1 || inParallelRegion()) {
    for (int64_t i = 0; i < count; ++i)
      fn(i);
    return;
  }
  BlasSerialScope serial;
  parallelFor(0, count, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      fn(i);
  });
}

/// Rejects bool (torch has no boolean GEMM) and mismatched dtypes (torch does not promote in
/// matmul); `what` names the two operands in the message.
void checkGemmDTypes(const char *op, const Tensor &a, const Tensor &b, const char *what);

/// out[batch..., M, N] = beta * self + alpha * (a @ b) for a [batchA..., M, K] and
/// b [batchB..., K, N] of one dtype, batch dims broadcast (never materialized). `self` is
/// optional (nullptr: beta is ignored) and must expand to the output shape. Shapes are checked
/// by the callers, which know the op-specific messages.
Tensor batchedGemm(const Tensor &a, const Tensor &b, const Tensor *self = nullptr,
                   const Scalar &alpha = Scalar(int64_t{1}),
                   const Scalar &beta = Scalar(int64_t{1}));

} // namespace kiln::ops::detail
