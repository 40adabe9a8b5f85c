// scaled_dot_product_attention: a fused CPU kernel over (batch, block of query rows) tasks. The
// scores of one block (rows x S) live in a per-thread buffer: GEMM, masked softmax in place, GEMM.
#include "runtime/ops/attention.h"
#include "runtime/blas.h"
#include "runtime/device_ops.h"

#include "runtime/error.h"
#include "runtime/ops/linalg_impl.h"
#include "runtime/ops/random.h"
#include "runtime/ops/softmax_impl.h"
#include "runtime/thread_pool.h"


#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace kiln::ops {

namespace {

constexpr const char *kOp = "scaled_dot_product_attention";
/// Query rows per task: enough to make the GEMMs efficient, few enough to keep the score block
/// in cache and to give the thread pool several tasks for one (batch, head).
constexpr int64_t kRowBlock = 64;

/// C (m x n, row-major) = alpha * A (m x k) * op(B), op(B) = B^T (B is n x k) when transB.
template <typename T>
void gemm(bool transB, int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t lda,
          const T *b, int64_t ldb, T *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) { // an empty sum; not every BLAS writes C when k == 0
    for (int64_t i = 0; i < m; ++i)
      std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, double>)
    blas::dgemm(false, transB, m, n, k, alpha, a, lda, b, ldb, 0.0, c, ldc);
  else
    blas::sgemm(false, transB, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

/// Element offsets of every flat batch index (row-major over `batch`) into `t`, whose leading
/// t.dim() - 2 dims right-align with `batch`; size-1 dims broadcast. With headRatio > 1 the last
/// batch dim is a head dim shared by headRatio query heads (grouped-query attention).
std::vector<int64_t> batchOffsets(IntList batch, const Tensor &t, int64_t headRatio) {
  const int64_t nb = static_cast<int64_t>(batch.size());
  const int64_t tb = t.dim() - 2;
  std::vector<int64_t> out(numelOf(batch), 0);
  Shape idx(nb, 0);
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    int64_t off = 0;
    for (int64_t d = 0; d < nb; ++d) {
      int64_t od = d - (nb - tb);
      if (od < 0 || t.size(od) == 1)
        continue;
      int64_t i = (od == tb - 1 && headRatio > 1) ? idx[d] / headRatio : idx[d];
      off += i * t.stride(od);
    }
    out[flat] = off;
    for (int64_t d = nb - 1; d >= 0 && ++idx[d] == batch[d]; --d)
      idx[d] = 0;
  }
  return out;
}

/// The attention mask as the kernel reads it: bool (keep) or additive values, per batch offsets.
template <typename T> struct MaskView {
  const bool *keep = nullptr;
  const T *add = nullptr;
  std::vector<int64_t> offsets;
  int64_t strideL = 0, strideS = 0;
};

/// Masks one row of scores in place and turns it into softmax probabilities. A row with no
/// finite score left is all zeros (torch's safe softmax for fully masked rows); NaN scores make
/// the row NaN.
template <typename T>
void maskedSoftmaxRow(T *s, int64_t S, int64_t row, bool causal, const bool *keep, const T *add,
                      int64_t strideS) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (causal)
    std::fill(s + std::min(row + 1, S), s + S, kNegInf);
  if (keep)
    for (int64_t j = 0; j < S; ++j)
      s[j] = keep[j * strideS] ? s[j] : kNegInf;
  if (add)
    for (int64_t j = 0; j < S; ++j)
      s[j] += add[j * strideS];
  const T m = detail::rowMax(s, S); // ignores NaN; fastExp carries NaN into the sum
  if (m == kNegInf) {
    bool nan = std::any_of(s, s + S, [](T v) { return std::isnan(v); });
    std::fill(s, s + S, nan ? std::numeric_limits<T>::quiet_NaN() : T(0));
    return;
  }
  for (int64_t j = 0; j < S; ++j) // vectorized: fastExp is branch-free
    s[j] = detail::fastExp(s[j] - m);
  const T inv = static_cast<T>(1.0 / detail::rowSum(s, S));
  for (int64_t j = 0; j < S; ++j)
    s[j] *= inv;
}

/// Whether parallelFor(0, n, grain) will split the work over the pool (see thread_pool.h).
bool runsInParallel(int64_t n, int64_t grain) {
  return n >= 2 * grain && numThreads() > 1 && !inParallelRegion();
}

struct AttnGeom {
  int64_t L, S, E, Ev;
  Shape batch;
  std::vector<int64_t> qOff, kOff, vOff;
};

/// The fused kernel. With `probs` non-null it stops after the softmax and writes the attention
/// probabilities (batch, L, S) there instead of the output (the dropout path).
template <typename T>
void attentionKernel(const T *q, const T *k, const T *v, T *out, T *probs, const AttnGeom &g,
                     const MaskView<T> &mask, bool causal, T scale) {
  const int64_t blocks = (g.L + kRowBlock - 1) / kRowBlock;
  const int64_t tasks = static_cast<int64_t>(g.qOff.size()) * blocks;
  const int64_t work = std::min(g.L, kRowBlock) * g.S * (g.E + g.Ev) + 1;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / work);
  std::optional<detail::BlasSerialScope> serial;
  if (runsInParallel(tasks, grain))
    serial.emplace(); // our pool parallelizes; OpenBLAS threads on top would oversubscribe
  parallelFor(0, tasks, grain, [&](int64_t t0, int64_t t1) {
    std::vector<T> buffer(probs ? 0 : std::min(g.L, kRowBlock) * g.S);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / blocks, r0 = (task % blocks) * kRowBlock;
      const int64_t rows = std::min(kRowBlock, g.L - r0);
      T *scores = probs ? probs + (b * g.L + r0) * g.S : buffer.data();
      // Causal rows r0.. see keys 0..r0+rows-1 only: the keys after them are -inf for the whole
      // block, so their scores and their share of P @ V are skipped (about half the work). Not
      // with an additive mask (a NaN there must still poison the row) or when the caller wants
      // every probability.
      const int64_t S = causal && !probs && !mask.add ? std::min(g.S, r0 + rows) : g.S;
      gemm(true, rows, S, g.E, scale, q + g.qOff[b] + r0 * g.E, g.E, k + g.kOff[b], g.E, scores,
           g.S);
      for (int64_t i = 0; i < rows; ++i) {
        int64_t mrow = mask.offsets.empty() ? 0 : mask.offsets[b] + (r0 + i) * mask.strideL;
        maskedSoftmaxRow(scores + i * g.S, S, r0 + i, causal,
                         mask.keep ? mask.keep + mrow : nullptr,
                         mask.add ? mask.add + mrow : nullptr, mask.strideS);
      }
      if (!probs)
        gemm(false, rows, g.Ev, S, T(1), scores, g.S, v + g.vOff[b], g.Ev,
             out + (b * g.L + r0) * g.Ev, g.Ev);
    }
  });
}

/// out[b] = probs[b] (L x S) @ v[b] (S x Ev) for every batch index: the dropout path's second
/// half.
template <typename T> void applyValues(const T *probs, const T *v, T *out, const AttnGeom &g) {
  const int64_t batches = static_cast<int64_t>(g.vOff.size());
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / (g.L * g.S * g.Ev + 1));
  std::optional<detail::BlasSerialScope> serial;
  if (runsInParallel(batches, grain))
    serial.emplace();
  parallelFor(0, batches, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      gemm(false, g.L, g.Ev, g.S, T(1), probs + b * g.L * g.S, g.S, v + g.vOff[b], g.Ev,
           out + b * g.L * g.Ev, g.Ev);
  });
}

void checkInputs(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &mask,
                 double dropoutP, bool isCausal) {
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
             "{}: expected query, key, and value to all be at least 2 dimensional, but got "
             "query.dim: {} key.dim: {} and value.dim: {}",
             kOp, q.dim(), k.dim(), v.dim());
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "{}: expected query, key, and value to have the same dtype, but got query.dtype: {} "
             "key.dtype: {} and value.dtype: {}",
             kOp, dtypeName(q.dtype()), dtypeName(k.dtype()), dtypeName(v.dtype()));
  KILN_CHECK_KIND(NotImplemented, isFloating(q.dtype()),
                  "{}: not implemented for dtype {}: expected floating point query, key and value",
                  kOp, dtypeName(q.dtype()));
  KILN_CHECK(q.size(-1) == k.size(-1),
             "{}: expected query and key to have the same embedding size E (last dim), but got "
             "query of shape {} and key of shape {}",
             kOp, q.shapeStr(), k.shapeStr());
  KILN_CHECK(k.size(-2) == v.size(-2),
             "{}: expected key and value to have the same sequence length S (dim -2), but got "
             "key of shape {} and value of shape {}",
             kOp, k.shapeStr(), v.shapeStr());
  KILN_CHECK_KIND(Value, dropoutP >= 0.0 && dropoutP <= 1.0,
                  "{}: dropout_p must be in [0, 1], but got {}", kOp, dropoutP);
  if (!mask.defined())
    return;
  KILN_CHECK(!isCausal, "{}: explicit attn_mask should not be set when is_causal=True", kOp);
  KILN_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::Float32 ||
                 mask.dtype() == q.dtype(),
             "{}: expected attn_mask dtype to be bool or float32 or to match query dtype, but got "
             "attn_mask.dtype: {} and query.dtype: {}",
             kOp, dtypeName(mask.dtype()), dtypeName(q.dtype()));
}

Shape batchDims(const Tensor &t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); }

/// Broadcast batch shape and per-operand head ratios (1 unless grouped-query attention).
Shape attentionBatch(const Tensor &q, const Tensor &k, const Tensor &v, bool enableGqa,
                     int64_t &kRatio, int64_t &vRatio) {
  Shape qb = batchDims(q), kb = batchDims(k), vb = batchDims(v);
  kRatio = vRatio = 1;
  if (enableGqa && q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3) {
    const int64_t hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
    KILN_CHECK(hk > 0 && hv > 0 && hq % hk == 0 && hq % hv == 0,
               "{}: number of heads in key ({}) and value ({}) must divide the number of heads "
               "in query ({}) when enable_gqa=True",
               kOp, hk, hv, hq);
    kRatio = hq / hk;
    vRatio = hq / hv;
    kb.back() = hq;
    vb.back() = hq;
  }
  return broadcastShapes(broadcastShapes(qb, kb, kOp), vb, kOp);
}

} // namespace

Tensor scaledDotProductAttention(const Tensor &query, const Tensor &key, const Tensor &value,
                                 const Tensor &attnMask, double dropoutP, bool isCausal,
                                 std::optional<double> scale, bool enableGqa) {
  checkInputs(query, key, value, attnMask, dropoutP, isCausal);
  if (onDevice({&query, &key, &value, &attnMask})) {
    KILN_CHECK_KIND(NotImplemented, dropoutP == 0.0 && !enableGqa,
                    "kiln: scaled_dot_product_attention with dropout or enable_gqa has no CUDA "
                    "implementation yet");
    std::string attrs = joinAttrs(
        {isCausal ? "is_causal = true" : "", scale ? fmt::format("scale = {}", *scale) : ""});
    return attnMask.defined()
               ? deviceOp("scaled_dot_product_attention", {query, key, value, attnMask}, attrs)
               : deviceOp("scaled_dot_product_attention", {query, key, value}, attrs);
  }
  AttnGeom g{query.size(-2), key.size(-2), query.size(-1), value.size(-1), {}, {}, {}, {}};
  int64_t kRatio, vRatio;
  g.batch = attentionBatch(query, key, value, enableGqa, kRatio, vRatio);
  Shape outShape = g.batch;
  outShape.push_back(g.L);
  outShape.push_back(g.Ev);
  const DType ct = query.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor out = Tensor::empty(outShape, ct, query.device());
  Shape scoreShape = g.batch;
  scoreShape.push_back(g.L);
  scoreShape.push_back(g.S);
  Tensor mask;
  if (attnMask.defined()) {
    Shape b = broadcastShapes(attnMask.sizes(), scoreShape, kOp);
    KILN_CHECK(b == scoreShape,
               "{}: attn_mask of shape {} must broadcast to the attention scores' shape {}", kOp,
               attnMask.shapeStr(), shapeToString(scoreShape));
    mask = attnMask.to(attnMask.dtype() == DType::Bool ? DType::Bool : ct).expand(scoreShape);
  }
  if (out.numel() == 0)
    return out.to(query.dtype());
  Tensor q = query.to(ct).contiguous(), k = key.to(ct).contiguous(), v = value.to(ct).contiguous();
  g.qOff = batchOffsets(g.batch, q, 1);
  g.kOff = batchOffsets(g.batch, k, kRatio);
  g.vOff = batchOffsets(g.batch, v, vRatio);
  auto run = [&]<typename T>() {
    MaskView<T> mv;
    if (mask.defined()) {
      mv.offsets = batchOffsets(g.batch, mask, 1);
      mv.strideL = mask.stride(-2);
      mv.strideS = mask.stride(-1);
      if (mask.dtype() == DType::Bool)
        mv.keep = mask.data<bool>();
      else
        mv.add = mask.data<T>();
    }
    T s = static_cast<T>(scale.value_or(1.0 / std::sqrt(static_cast<double>(g.E))));
    if (dropoutP == 0.0) {
      attentionKernel<T>(q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), nullptr, g, mv,
                         isCausal, s);
      return;
    }
    // Dropout acts on the probabilities, so they are materialized (as torch's math path does).
    Tensor probs = Tensor::empty({numelOf(g.batch), g.L, g.S}, ct);
    attentionKernel<T>(q.data<T>(), k.data<T>(), v.data<T>(), nullptr, probs.data<T>(), g, mv,
                       isCausal, s);
    probs = dropout(probs, dropoutP, /*train=*/true).contiguous();
    applyValues<T>(probs.data<T>(), v.data<T>(), out.data<T>(), g);
  };
  if (ct == DType::Float64)
    run.template operator()<double>();
  else
    run.template operator()<float>();
  return out.to(query.dtype());
}

} // namespace kiln::ops
