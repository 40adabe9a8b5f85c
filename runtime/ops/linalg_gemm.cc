// GEMM kernels: MKL or OpenBLAS for float/double (runtime/blas.h), a blocked loop for integers,
// and the batched tensor GEMM every matrix product in kiln goes through.
#include "runtime/blas.h"
#include "runtime/copy.h"
#include "runtime/onednn.h"
#include "runtime/ops/linalg_impl.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

namespace kiln::ops::detail {

std::string_view torchTypeName(DType t) {
  switch (t) {
  case DType::Bool:
    return "Bool";
  case DType::UInt8:
    return "Byte";
  case DType::Int8:
    return "Char";
  case DType::Int16:
    return "Short";
  case DType::Int32:
    return "Int";
  case DType::Int64:
    return "Long";
  case DType::Float16:
    return "Half";
  case DType::BFloat16:
    return "BFloat16";
  case DType::Float32:
    return "Float";
  case DType::Float64:
    return "Double";
  }
  return "?";
}

void notImplementedFor(const char *op, DType t) {
  fail(ErrorKind::NotImplemented, "\"{}\" not implemented for '{}'", op, torchTypeName(t));
}

std::optional<BlasLayout> blasLayout(int64_t rows, int64_t cols, int64_t rowStride,
                                     int64_t colStride) {
  // A dim of size 1 never moves the pointer, so its stride is free to be whatever BLAS needs.
  if ((colStride == 1 || cols == 1) && (rows == 1 || rowStride >= std::max<int64_t>(1, cols)))
    return BlasLayout{false, rows == 1 ? std::max<int64_t>(1, cols) : rowStride};
  if ((rowStride == 1 || rows == 1) && (cols == 1 || colStride >= std::max<int64_t>(1, rows)))
    return BlasLayout{true, cols == 1 ? std::max<int64_t>(1, rows) : colStride};
  return std::nullopt;
}

namespace {

std::mutex gBlasMutex;
int gBlasDepth = 0;
int gBlasSaved = 1;
std::atomic<int> gBlasSynced{0}; ///< the thread count last given to the BLAS (0: never)

/// Makes the BLAS use kiln's thread count (kiln.set_num_threads), so one knob bounds every
/// thread an op uses; checked before each BLAS call, which costs one atomic load when unchanged.
void syncBlasThreads() {
  int want = numThreads();
  if (gBlasSynced.load(std::memory_order_relaxed) == want)
    return;
  std::lock_guard<std::mutex> lock(gBlasMutex);
  if (gBlasDepth == 0)
    blas::setThreads(want);
  else
    gBlasSaved = want; // a serial scope restores this when it ends
  gBlasSynced.store(want, std::memory_order_relaxed);
}

/// Scales c by beta (zero when beta == 0, ignoring NaNs already there), as BLAS does for k == 0.
template <typename T> void scaleOutput(int64_t m, int64_t n, T beta, T *c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = beta == T(0) ? T(0) : static_cast<T>(beta * c[i * ldc + j]);
}

template <typename T>
void gemv(bool trans, int64_t m, int64_t n, T alpha, const T *a, int64_t lda, const T *x,
          int64_t incx, T beta, T *y, int64_t incy) {
  if constexpr (std::is_same_v<T, float>)
    blas::sgemv(trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
  else
    blas::dgemv(trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

/// A matrix-vector product (one column of b, or one row of a) as a BLAS gemv, which runs it
/// several times faster than a one-column GEMM; false when the vector's stride is not positive.
template <typename T>
bool blasGemv(int64_t m, int64_t n, int64_t k, T alpha, MatRef<T> a, MatRef<T> b, T beta, T *c,
              int64_t ldc, const BlasLayout &la, const BlasLayout &lb) {
  if (n == 1) { // c[:, 0] = op(a) @ b[:, 0]
    int64_t incx = k == 1 ? 1 : b.rowStride, incy = m == 1 ? 1 : ldc;
    if (incx <= 0 || incy <= 0)
      return false;
    if (la.trans)
      gemv<T>(true, k, m, alpha, a.data, la.ld, b.data, incx, beta, c, incy);
    else
      gemv<T>(false, m, k, alpha, a.data, la.ld, b.data, incx, beta, c, incy);
    return true;
  }
  if (m == 1) { // c[0, :] = a[0, :] @ op(b), as op(b)^T @ a[0, :]
    int64_t incx = k == 1 ? 1 : a.colStride;
    if (incx <= 0)
      return false;
    if (lb.trans)
      gemv<T>(false, n, k, alpha, b.data, lb.ld, a.data, incx, beta, c, 1);
    else
      gemv<T>(true, k, n, alpha, b.data, lb.ld, a.data, incx, beta, c, 1);
    return true;
  }
  return false;
}

template <typename T>
void blasGemm(int64_t m, int64_t n, int64_t k, T alpha, MatRef<T> a, MatRef<T> b, T beta, T *c,
              int64_t ldc) {
  auto la = blasLayout(m, k, a.rowStride, a.colStride);
  auto lb = blasLayout(k, n, b.rowStride, b.colStride);
  KILN_CHECK(la && lb, "gemm: operand strides are not BLAS-compatible (internal error)");
  if ((m == 1 || n == 1) && k > 0 && blasGemv(m, n, k, alpha, a, b, beta, c, ldc, *la, *lb))
    return;
  if constexpr (std::is_same_v<T, float>)
    blas::sgemm(la->trans, lb->trans, m, n, k, alpha, a.data, la->ld, b.data, lb->ld, beta, c, ldc);
  else
    blas::dgemm(la->trans, lb->trans, m, n, k, alpha, a.data, la->ld, b.data, lb->ld, beta, c, ldc);
}

// Tiles of the integer GEMM: a kRowBlock x kColBlock accumulator tile stays in L1/L2 while the
// k loop streams through a kDepthBlock x kColBlock panel of b.
constexpr int64_t kRowBlock = 32;
constexpr int64_t kColBlock = 256;
constexpr int64_t kDepthBlock = 128;

/// Integer GEMM in unsigned arithmetic: the result modulo 2^bits equals torch's wrapping integer
/// accumulation, without signed-overflow UB.
template <typename T>
void intGemm(int64_t m, int64_t n, int64_t k, T alpha, MatRef<T> a, MatRef<T> b, T beta, T *c,
             int64_t ldc) {
  using Acc = std::conditional_t<sizeof(T) <= 4, uint32_t, uint64_t>;
  const Acc al = static_cast<Acc>(alpha), be = static_cast<Acc>(beta);
  int64_t rowBlocks = (m + kRowBlock - 1) / kRowBlock;
  int64_t work = kRowBlock * std::max<int64_t>(1, n) * std::max<int64_t>(1, k);
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / work);
  parallelFor(0, rowBlocks, grain, [&](int64_t rb0, int64_t rb1) {
    std::vector<Acc> acc(kRowBlock * kColBlock);
    for (int64_t rb = rb0; rb < rb1; ++rb) {
      int64_t i0 = rb * kRowBlock, i1 = std::min(m, i0 + kRowBlock);
      for (int64_t j0 = 0; j0 < n; j0 += kColBlock) {
        int64_t nj = std::min(n, j0 + kColBlock) - j0;
        std::fill(acc.begin(), acc.end(), Acc(0));
        for (int64_t p0 = 0; p0 < k; p0 += kDepthBlock) {
          int64_t p1 = std::min(k, p0 + kDepthBlock);
          for (int64_t i = i0; i < i1; ++i) {
            Acc *row = acc.data() + (i - i0) * kColBlock;
            for (int64_t p = p0; p < p1; ++p) {
              Acc av = static_cast<Acc>(a.data[i * a.rowStride + p * a.colStride]);
              const T *brow = b.data + p * b.rowStride + j0 * b.colStride;
              if (b.colStride == 1) {
                for (int64_t j = 0; j < nj; ++j)
                  row[j] += av * static_cast<Acc>(brow[j]);
              } else {
                for (int64_t j = 0; j < nj; ++j)
                  row[j] += av * static_cast<Acc>(brow[j * b.colStride]);
              }
            }
          }
        }
        for (int64_t i = i0; i < i1; ++i) {
          T *crow = c + i * ldc + j0;
          const Acc *row = acc.data() + (i - i0) * kColBlock;
          for (int64_t j = 0; j < nj; ++j) {
            Acc prev = be == 0 ? Acc(0) : be * static_cast<Acc>(crow[j]);
            crow[j] = static_cast<T>(al * row[j] + prev);
          }
        }
      }
    }
  });
}

} // namespace

template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, T alpha, MatRef<T> a, MatRef<T> b, T beta, T *c,
          int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if constexpr (std::is_floating_point_v<T>) {
    if (k == 0) {
      scaleOutput(m, n, beta, c, ldc);
    } else {
      syncBlasThreads();
      blasGemm(m, n, k, alpha, a, b, beta, c, ldc);
    }
  } else {
    intGemm(m, n, k, alpha, a, b, beta, c, ldc);
  }
}

template void gemm<float>(int64_t, int64_t, int64_t, float, MatRef<float>, MatRef<float>, float,
                          float *, int64_t);
template void gemm<double>(int64_t, int64_t, int64_t, double, MatRef<double>, MatRef<double>,
                           double, double *, int64_t);
template void gemm<uint8_t>(int64_t, int64_t, int64_t, uint8_t, MatRef<uint8_t>, MatRef<uint8_t>,
                            uint8_t, uint8_t *, int64_t);
template void gemm<int8_t>(int64_t, int64_t, int64_t, int8_t, MatRef<int8_t>, MatRef<int8_t>,
                           int8_t, int8_t *, int64_t);
template void gemm<int16_t>(int64_t, int64_t, int64_t, int16_t, MatRef<int16_t>, MatRef<int16_t>,
                            int16_t, int16_t *, int64_t);
template void gemm<int32_t>(int64_t, int64_t, int64_t, int32_t, MatRef<int32_t>, MatRef<int32_t>,
                            int32_t, int32_t *, int64_t);
template void gemm<int64_t>(int64_t, int64_t, int64_t, int64_t, MatRef<int64_t>, MatRef<int64_t>,
                            int64_t, int64_t *, int64_t);

BlasSerialScope::BlasSerialScope() {
  std::lock_guard<std::mutex> lock(gBlasMutex);
  if (gBlasDepth++ == 0) {
    gBlasSaved = blas::threads();
    if (gBlasSaved > 1)
      blas::setThreads(1);
  }
}

BlasSerialScope::~BlasSerialScope() {
  std::lock_guard<std::mutex> lock(gBlasMutex);
  if (--gBlasDepth == 0 && gBlasSaved > 1)
    blas::setThreads(gBlasSaved);
}

void checkGemmDTypes(const char *op, const Tensor &a, const Tensor &b, const char *what) {
  KILN_CHECK(a.dtype() == b.dtype(), "{}: expected {} to have the same dtype, but got: {} != {}",
             op, what, dtypeName(a.dtype()), dtypeName(b.dtype()));
  if (a.dtype() == DType::Bool)
    notImplementedFor(op, a.dtype());
}

namespace {

/// Element offsets of every matrix of `t` (viewed with the broadcast batch shape) in batch order.
std::vector<int64_t> batchOffsets(const Tensor &t, IntList batch) {
  Shape sizes(batch.begin(), batch.end());
  sizes.push_back(t.size(-2));
  sizes.push_back(t.size(-1));
  Tensor e = t.expand(sizes);
  int64_t nb = numelOf(batch), nd = static_cast<int64_t>(batch.size());
  std::vector<int64_t> offs(nb);
  Shape idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < nb; ++i) {
    offs[i] = off;
    for (int64_t d = nd - 1; d >= 0; --d) {
      off += e.stride(d);
      if (++idx[d] < batch[d])
        break;
      off -= idx[d] * e.stride(d);
      idx[d] = 0;
    }
  }
  return offs;
}

/// `t` in the compute dtype with matrices BLAS can read in place (copied only when needed).
Tensor gemmOperand(const Tensor &t, DType compute) {
  Tensor c = t.to(compute);
  if (!isFloating(compute))
    return c;
  if (!blasLayout(c.size(-2), c.size(-1), c.stride(-2), c.stride(-1)))
    return c.contiguous();
  return c;
}

/// The batch as strided-batch BLAS calls, one run of GEMMs per thread of kiln's pool (one call
/// per run, not per GEMM); false when the library has no such call or the offsets are not evenly
/// spaced.
template <typename T>
bool stridedBatch(const std::vector<int64_t> &offA, const std::vector<int64_t> &offB, int64_t m,
                  int64_t n, int64_t k, T alpha, MatRef<T> a, MatRef<T> b, T beta, T *c) {
  const int64_t count = static_cast<int64_t>(offA.size());
  if (count < 2 || m == 0 || n == 0 || k == 0 || inParallelRegion())
    return false;
  auto evenly = [](const std::vector<int64_t> &off) {
    for (size_t i = 1; i < off.size(); ++i)
      if (off[i] - off[i - 1] != off[1] - off[0])
        return false;
    return true;
  };
  if (!evenly(offA) || !evenly(offB))
    return false;
  auto la = blasLayout(m, k, a.rowStride, a.colStride);
  auto lb = blasLayout(k, n, b.rowStride, b.colStride);
  if (!la || !lb)
    return false;
  // The library requires each matrix to end before the next begins (no broadcast batch).
  const int64_t sa = offA[1] - offA[0], sb = offB[1] - offB[0], ldc = std::max<int64_t>(1, n);
  if (sa < la->ld * (la->trans ? k : m) || sb < lb->ld * (lb->trans ? n : k))
    return false;
  syncBlasThreads();
  if constexpr (std::is_same_v<T, float>)
    return blas::sgemmBatchStrided(la->trans, lb->trans, m, n, k, alpha, a.data + offA[0], la->ld,
                                   sa, b.data + offB[0], lb->ld, sb, beta, c, ldc, m * n, count);
  else
    return blas::dgemmBatchStrided(la->trans, lb->trans, m, n, k, alpha, a.data + offA[0], la->ld,
                                   sa, b.data + offB[0], lb->ld, sb, beta, c, ldc, m * n, count);
}

/// `t` as a oneDNN operand of rank `rank` (leading batch dims of size 1 added; a broadcast dim,
/// stride 0, given as size 1, which oneDNN broadcasts).
onednn::Operand dnnlOperand(const Tensor &t, size_t rank) {
  onednn::Operand o;
  const size_t pad = rank - static_cast<size_t>(t.dim());
  o.dims.assign(pad, 1);
  o.strides.assign(pad, std::max<int64_t>(1, t.numel()));
  for (int64_t d = 0; d < t.dim(); ++d) {
    const bool broadcast = t.stride(d) == 0 && t.size(d) > 1;
    o.dims.push_back(broadcast ? 1 : t.size(d));
    o.strides.push_back(broadcast ? 0 : t.stride(d));
  }
  o.data = t.rawData();
  return o;
}

/// The product on oneDNN in the operands' own narrow dtype (bfloat16 on CPUs with its dot
/// products): plain products and addmm's `self + a @ b` (as oneDNN's bias); nullopt for the
/// rest (scaled forms, empty or oddly strided operands), which widen to float32 BLAS instead.
std::optional<Tensor> narrowGemm(const Tensor &a, const Tensor &b, const Tensor *self,
                                 const Scalar &alpha, const Scalar &beta, const Shape &outShape) {
  const DType dt = a.dtype();
  if (!onednn::available(dt) || !a.isCpu() || b.dtype() != dt || alpha.toDouble() != 1.0)
    return std::nullopt;
  const bool bias = self != nullptr && beta.toDouble() != 0.0;
  if (bias && (beta.toDouble() != 1.0 || self->dtype() != dt ||
               static_cast<size_t>(self->dim()) > outShape.size()))
    return std::nullopt;
  for (int64_t s : {a.size(-2), a.size(-1), b.size(-1)})
    if (s == 0)
      return std::nullopt;
  auto plain = [](const Tensor &t) {
    return blasLayout(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1)) ? t : t.contiguous();
  };
  Tensor pa = plain(a), pb = plain(b);
  Tensor out = Tensor::empty(outShape, dt, a.device());
  const size_t rank = outShape.size();
  onednn::Operand biasOp;
  if (bias) {
    biasOp = dnnlOperand(*self, rank);
    for (size_t d = 0; d < rank; ++d)
      if (biasOp.dims[d] != 1 && biasOp.dims[d] != outShape[d])
        return std::nullopt;
  }
  if (!onednn::matmul(dt, dnnlOperand(pa, rank), dnnlOperand(pb, rank), bias ? &biasOp : nullptr,
                      dnnlOperand(out, rank)))
    return std::nullopt;
  return out;
}

} // namespace

Tensor batchedGemm(const Tensor &a, const Tensor &b, const Tensor *self, const Scalar &alpha,
                   const Scalar &beta) {
  DType dt = a.dtype(), compute = computeDType(dt);
  Shape batchA(a.sizes().begin(), a.sizes().end() - 2);
  Shape batchB(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcastShapes(batchA, batchB, "matmul");
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape outShape = batch;
  outShape.push_back(m);
  outShape.push_back(n);
  if (compute != dt)
    if (std::optional<Tensor> narrow = narrowGemm(a, b, self, alpha, beta, outShape))
      return *narrow;
  Tensor ac = gemmOperand(a, compute), bc = gemmOperand(b, compute);
  Tensor out = Tensor::empty(outShape, compute, a.device());
  bool useSelf = self != nullptr && beta.toDouble() != 0.0;
  if (useSelf)
    copyInto(out, self->to(compute).expand(outShape));
  std::vector<int64_t> offA = batchOffsets(ac, batch), offB = batchOffsets(bc, batch);
  dispatchCompute(compute, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      notImplementedFor("matmul", dt);
    } else {
      T al = alpha.to<T>(), be = useSelf ? beta.to<T>() : T(0);
      const T *pa = ac.data<T>(), *pb = bc.data<T>();
      T *pc = out.data<T>();
      if constexpr (std::is_floating_point_v<T>)
        if (stridedBatch<T>(offA, offB, m, n, k, al, {pa, ac.stride(-2), ac.stride(-1)},
                            {pb, bc.stride(-2), bc.stride(-1)}, be, pc))
          return;
      forEachGemm(numelOf(batch), m * n * k, [&](int64_t i) {
        MatRef<T> ma{pa + offA[i], ac.stride(-2), ac.stride(-1)};
        MatRef<T> mb{pb + offB[i], bc.stride(-2), bc.stride(-1)};
        gemm<T>(m, n, k, al, ma, mb, be, pc + i * m * n, std::max<int64_t>(1, n));
      });
    }
  });
  return compute == dt ? out : out.to(dt);
}

} // namespace kiln::ops::detail
