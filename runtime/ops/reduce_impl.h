#pragma once
/// The reduction engine shared by kiln's reduction ops (private to runtime/ops/reduce*.cc).
///
/// [Note: reduction plan]
/// An op folds, for every output element, the input elements that differ only along the
/// reduced dims. makeReducePlan drops size-1 dims and picks the input dim with the smallest
/// stride as the "inner run", then merges every dim it can into it:
/// - row mode (the inner run is reduced): each output folds unit-stride runs; the fold keeps
///   R::kLanes independent accumulators, which both vectorizes and splits a long sum into
///   several partial sums (accuracy);
/// - column mode (the inner run is kept): a block of output columns is updated from one input
///   row at a time, a unit-stride update the compiler vectorizes.
/// The reduction of each output is cut into fixed-size chunks (kReduceChunk elements) whose
/// partial results are merged in order, so results never depend on the thread count; chunks and
/// outputs run in parallel.
///
/// A reducer R provides:
///   using In;  using Acc;  static constexpr int kLanes;
///   Acc identity() const;
///   void add(Acc &a, In v, int64_t i) const;   // i: position of v along the reduced dims
///   void merge(Acc &a, const Acc &b) const;    // b folds elements that come after a's
///   void store(int64_t out, const Acc &a) const; // writes output element `out` (contiguous)
/// The position `i` is exact when a single dim of size > 1 is reduced (what the arg-reductions
/// use); with several reduced dims it is only an iteration counter.

#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

namespace kiln::ops::detail {

/// Elements of input one work unit folds; fixed so that results are deterministic.
constexpr int64_t kReduceChunk = 32768;
/// Output columns a column-mode work unit updates at once (their accumulators stay in L1).
constexpr int64_t kColumnBlock = 256;

/// Dims iterated in row-major order, with a stride into the input and one into the output.
struct ReduceDims {
  Shape sizes;
  Shape inStrides;
  Shape outStrides;
  int64_t numel() const { return numelOf(sizes); }
};

/// How runReduce walks one input for one set of reduced dims (see [Note: reduction plan]).
struct ReducePlan {
  Shape outSizes;             ///< logical output shape, reduced dims removed
  int64_t numOutputs = 1;     ///< numel of outSizes
  int64_t reduceSize = 1;     ///< input elements folded into each output
  bool rowMode = true;        ///< the inner run is reduced (true) or kept (false)
  int64_t inner = 1;          ///< length of the inner run
  int64_t innerStride = 0;    ///< input stride of the inner run, in elements
  int64_t innerOutStride = 0; ///< column mode: output stride of the inner run
  ReduceDims kept;            ///< kept dims outside the inner run
  ReduceDims reduced;         ///< reduced dims outside the inner run
};

/// The reduced-dims mask of a reduction over `dims` of an ndim-d tensor (nullopt or empty: all
/// dims). Negative dims wrap; out-of-range or repeated dims throw, naming `op`.
std::vector<bool> reduceMask(const char *op, int64_t ndim, const std::optional<Shape> &dims);
/// The mask of a single-dim reduction.
std::vector<bool> reduceMask(const char *op, int64_t ndim, int64_t dim);
/// The result shape of a reduction: reduced dims dropped, or kept as size 1 with keepdim.
Shape reducedShape(IntList sizes, const std::vector<bool> &mask, bool keepdim);
/// Plans the reduction of `in` over the dims set in `mask` (mask.size() == in.dim()).
ReducePlan makeReducePlan(const Tensor &in, const std::vector<bool> &mask);
/// Throws IndexError, as torch does, when a reduction without identity meets an empty dim.
void checkNonEmptyReduction(const char *op, const Tensor &in, const std::vector<bool> &mask,
                            bool dimGiven);

/// Walks dims in row-major order, tracking the input and output offsets of the current index.
class Odometer {
public:
  explicit Odometer(const ReduceDims &d) : d_(d), idx_(d.sizes.size(), 0) {}
  void reset(int64_t linear) {
    in_ = out_ = 0;
    for (int64_t k = static_cast<int64_t>(idx_.size()) - 1; k >= 0; --k) {
      idx_[k] = linear % d_.sizes[k];
      linear /= d_.sizes[k];
      in_ += idx_[k] * d_.inStrides[k];
      out_ += idx_[k] * d_.outStrides[k];
    }
  }
  void next() {
    for (int64_t k = static_cast<int64_t>(idx_.size()) - 1; k >= 0; --k) {
      in_ += d_.inStrides[k];
      out_ += d_.outStrides[k];
      if (++idx_[k] < d_.sizes[k])
        return;
      in_ -= idx_[k] * d_.inStrides[k];
      out_ -= idx_[k] * d_.outStrides[k];
      idx_[k] = 0;
    }
  }
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

private:
  const ReduceDims &d_;
  Shape idx_;
  int64_t in_ = 0, out_ = 0;
};

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Folds n elements p[0], p[stride], ... (positions idx, idx+1, ...) into acc.
template <typename R>
inline void foldRun(const R &r, typename R::Acc &acc, const typename R::In *p, int64_t n,
                    int64_t stride, int64_t idx) {
  using Acc = typename R::Acc;
  if constexpr (R::kLanes > 1) {
    constexpr int L = R::kLanes;
    if (stride == 1 && n >= 2 * L) {
      Acc lanes[L];
      for (int l = 0; l < L; ++l)
        lanes[l] = r.identity();
      int64_t k = 0;
      if constexpr (std::is_arithmetic_v<Acc>) {
        // Kept as a loop (not unrolled) so GCC vectorizes it; unrolled, selects stay scalar.
        for (; k + L <= n; k += L) {
#pragma GCC unroll 1
          for (int l = 0; l < L; ++l)
            r.add(lanes[l], p[k + l], idx + k + l);
        }
      } else {
        for (; k + L <= n; k += L)
          for (int l = 0; l < L; ++l)
            r.add(lanes[l], p[k + l], idx + k + l);
      }
      for (int l = 0; l < L; ++l)
        r.merge(acc, lanes[l]);
      for (; k < n; ++k)
        r.add(acc, p[k], idx + k);
      return;
    }
  }
  if (stride == 1) {
    for (int64_t k = 0; k < n; ++k)
      r.add(acc, p[k], idx + k);
  } else {
    for (int64_t k = 0; k < n; ++k)
      r.add(acc, p[k * stride], idx + k);
  }
}

/// Row mode: folds positions [b, e) of the reduction (outer reduced dims x inner run) of the
/// output whose input starts at base.
template <typename R>
void foldRange(const R &r, const ReducePlan &plan, typename R::Acc &acc, const typename R::In *base,
               int64_t b, int64_t e, Odometer &red) {
  if (plan.reduced.sizes.empty()) {
    foldRun(r, acc, base + b * plan.innerStride, e - b, plan.innerStride, b);
    return;
  }
  int64_t i = b % plan.inner;
  red.reset(b / plan.inner);
  for (int64_t pos = b; pos < e; red.next()) {
    int64_t n = std::min(plan.inner - i, e - pos);
    foldRun(r, acc, base + red.in() + i * plan.innerStride, n, plan.innerStride, pos);
    pos += n;
    i = 0;
  }
}

template <typename R>
void reduceRows(const R &r, const ReducePlan &plan, const typename R::In *in) {
  using Acc = typename R::Acc;
  const int64_t m = plan.numOutputs, n = plan.reduceSize;
  const int64_t chunks = ceilDiv(n, kReduceChunk);
  if (chunks <= 1) {
    parallelFor(0, m, std::max<int64_t>(1, kReduceChunk / n), [&](int64_t b, int64_t e) {
      Odometer kept(plan.kept), red(plan.reduced);
      kept.reset(b);
      for (int64_t o = b; o < e; ++o, kept.next()) {
        Acc acc = r.identity();
        foldRange(r, plan, acc, in + kept.in(), 0, n, red);
        r.store(kept.out(), acc);
      }
    });
    return;
  }
  std::unique_ptr<Acc[]> partial(new Acc[m * chunks]);
  parallelFor(0, m * chunks, 1, [&](int64_t b, int64_t e) {
    Odometer kept(plan.kept), red(plan.reduced);
    for (int64_t item = b; item < e; ++item) {
      int64_t c = item % chunks;
      kept.reset(item / chunks);
      Acc acc = r.identity();
      foldRange(r, plan, acc, in + kept.in(), c * kReduceChunk, std::min(n, (c + 1) * kReduceChunk),
                red);
      partial[item] = acc;
    }
  });
  Odometer kept(plan.kept);
  kept.reset(0);
  for (int64_t o = 0; o < m; ++o, kept.next()) {
    Acc acc = partial[o * chunks];
    for (int64_t c = 1; c < chunks; ++c)
      r.merge(acc, partial[o * chunks + c]);
    r.store(kept.out(), acc);
  }
}

/// Column mode: folds rows [r0, r1) of the reduced dims into the w accumulators of one block.
template <typename R>
void foldColumns(const R &r, const ReducePlan &plan, typename R::Acc *acc,
                 const typename R::In *base, int64_t w, int64_t r0, int64_t r1, Odometer &red) {
  const int64_t s = plan.innerStride;
  for (int64_t j = 0; j < w; ++j)
    acc[j] = r.identity();
  red.reset(r0);
  for (int64_t row = r0; row < r1; ++row, red.next()) {
    const typename R::In *p = base + red.in();
    if (s == 1) {
      for (int64_t j = 0; j < w; ++j)
        r.add(acc[j], p[j], row);
    } else {
      for (int64_t j = 0; j < w; ++j)
        r.add(acc[j], p[j * s], row);
    }
  }
}

template <typename R>
void reduceColumns(const R &r, const ReducePlan &plan, const typename R::In *in) {
  using Acc = typename R::Acc;
  const int64_t cols = plan.inner, rows = plan.reduced.numel();
  const int64_t width = std::min(cols, kColumnBlock), blocks = ceilDiv(cols, width);
  const int64_t items = plan.kept.numel() * blocks;
  const int64_t rowsPerChunk = std::max<int64_t>(1, kReduceChunk / width);
  const int64_t chunks = ceilDiv(rows, rowsPerChunk);
  // Item `it` is column block it % blocks of kept index it / blocks.
  auto locate = [&](int64_t it, Odometer &kept, int64_t &c0, int64_t &w) {
    kept.reset(it / blocks);
    c0 = (it % blocks) * width;
    w = std::min(width, cols - c0);
  };
  auto storeBlock = [&](const Acc *acc, const Odometer &kept, int64_t c0, int64_t w) {
    for (int64_t j = 0; j < w; ++j)
      r.store(kept.out() + (c0 + j) * plan.innerOutStride, acc[j]);
  };
  if (chunks <= 1) {
    parallelFor(
        0, items, std::max<int64_t>(1, kReduceChunk / (width * rows)), [&](int64_t b, int64_t e) {
          Odometer kept(plan.kept), red(plan.reduced);
          Acc acc[kColumnBlock];
          for (int64_t it = b; it < e; ++it) {
            int64_t c0, w;
            locate(it, kept, c0, w);
            foldColumns(r, plan, acc, in + kept.in() + c0 * plan.innerStride, w, 0, rows, red);
            storeBlock(acc, kept, c0, w);
          }
        });
    return;
  }
  std::unique_ptr<Acc[]> partial(new Acc[items * chunks * width]);
  parallelFor(0, items * chunks, 1, [&](int64_t b, int64_t e) {
    Odometer kept(plan.kept), red(plan.reduced);
    for (int64_t unit = b; unit < e; ++unit) {
      int64_t c0, w, c = unit % chunks;
      locate(unit / chunks, kept, c0, w);
      foldColumns(r, plan, partial.get() + unit * width, in + kept.in() + c0 * plan.innerStride, w,
                  c * rowsPerChunk, std::min(rows, (c + 1) * rowsPerChunk), red);
    }
  });
  parallelFor(0, items, 1, [&](int64_t b, int64_t e) {
    Odometer kept(plan.kept);
    for (int64_t it = b; it < e; ++it) {
      int64_t c0, w;
      locate(it, kept, c0, w);
      Acc *acc = partial.get() + it * chunks * width;
      for (int64_t c = 1; c < chunks; ++c)
        for (int64_t j = 0; j < w; ++j)
          r.merge(acc[j], acc[c * width + j]);
      storeBlock(acc, kept, c0, w);
    }
  });
}

/// Runs reducer r over `in` (whose dtype must be R::In's) as planned; r.store receives the
/// contiguous index of each of plan.numOutputs outputs.
template <typename R> void runReduce(const R &r, const ReducePlan &plan, const Tensor &in) {
  if (plan.numOutputs == 0)
    return;
  if (plan.reduceSize == 0) {
    for (int64_t o = 0; o < plan.numOutputs; ++o)
      r.store(o, r.identity());
    return;
  }
  const auto *data = in.data<typename R::In>();
  if (plan.rowMode)
    reduceRows(r, plan, data);
  else
    reduceColumns(r, plan, data);
}

/// The accumulator of sums: double for floating types, int64 for integers and bool.
template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
/// The element type sum-like reductions write: T for floating types, int64 otherwise.
template <typename T> using SumOut = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;

/// Applies keepdim to a reduction's contiguous result and casts it to the op's result dtype.
inline Tensor finishReduce(const Tensor &out, const Tensor &in, const std::vector<bool> &mask,
                           bool keepdim, DType dtype) {
  Tensor r = keepdim ? out.view(reducedShape(in.sizes(), mask, true)) : out;
  return r.to(dtype);
}

template <typename T> inline bool isNan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

} // namespace kiln::ops::detail
