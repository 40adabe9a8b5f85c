// Extremum reductions: amax/amin, max/min (with and without dim), argmax/argmin, aminmax.
// NaN is the extreme of both orders, as in torch: it propagates, and its (first) index wins.
#include "runtime/device_ops.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/reduce_impl.h"

#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

/// Whether v beats cur for a max (kMax) or min reduction; NaN beats everything but NaN.
template <bool kMax, typename T> inline bool beats(T v, T cur) {
  if constexpr (std::is_same_v<T, bool>)
    return kMax ? (v && !cur) : (!v && cur);
  else if constexpr (std::is_floating_point_v<T>)
    return (kMax ? v > cur : v < cur) || (v != v && cur == cur);
  else
    return kMax ? v > cur : v < cur;
}

/// The worst value of an order: every element beats it or ties with it.
template <bool kMax, typename T> inline T worst() {
  if constexpr (std::is_same_v<T, bool>)
    return !kMax;
  else if constexpr (std::is_floating_point_v<T>)
    return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  else
    return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
}

template <typename T, bool kMax> struct ExtremeReducer {
  using In = T;
  using Acc = T;
  static constexpr int kLanes = 16;
  T *out;

  Acc identity() const { return worst<kMax, T>(); }
  void add(Acc &a, T v, int64_t) const { a = beats<kMax>(v, a) ? v : a; }
  void merge(Acc &a, const Acc &b) const { add(a, b, 0); }
  void store(int64_t o, const Acc &a) const { out[o] = a; }
};

/// Value and index of the first extreme; identity has index -1 ("nothing seen yet").
template <typename T, bool kMax> struct ArgReducer {
  struct Acc {
    T value;
    int64_t index;
  };
  using In = T;
  static constexpr int kLanes = 1;
  T *values; // may be null (argmax)
  int64_t *indices;

  Acc identity() const { return {worst<kMax, T>(), -1}; }
  void add(Acc &a, T v, int64_t i) const {
    if (a.index < 0 || beats<kMax>(v, a.value))
      a = {v, i};
  }
  void merge(Acc &a, const Acc &b) const {
    if (b.index >= 0 && (a.index < 0 || beats<kMax>(b.value, a.value)))
      a = b;
  }
  void store(int64_t o, const Acc &a) const {
    if (values)
      values[o] = a.value;
    indices[o] = a.index;
  }
};

template <typename T> struct MinMaxReducer {
  struct Acc {
    T lo, hi;
  };
  using In = T;
  static constexpr int kLanes = 16;
  T *lo, *hi;

  Acc identity() const { return {worst<false, T>(), worst<true, T>()}; }
  void add(Acc &a, T v, int64_t) const {
    a.lo = beats<false>(v, a.lo) ? v : a.lo;
    a.hi = beats<true>(v, a.hi) ? v : a.hi;
  }
  void merge(Acc &a, const Acc &b) const {
    add(a, b.lo, 0);
    add(a, b.hi, 0);
  }
  void store(int64_t o, const Acc &a) const {
    lo[o] = a.lo;
    hi[o] = a.hi;
  }
};

Tensor extreme(const char *op, bool isMax, const Tensor &a, const DimList &dims, bool keepdim,
               bool dimGiven) {
  auto mask = reduceMask(op, a.dim(), dims);
  checkNonEmptyReduction(op, a, mask, dimGiven);
  Tensor in = a.to(computeDType(a.dtype()));
  ReducePlan plan = makeReducePlan(in, mask);
  Tensor out = Tensor::empty(plan.outSizes, in.dtype(), a.device());
  dispatchCompute(in.dtype(), [&]<typename T>() {
    if (isMax)
      runReduce(ExtremeReducer<T, true>{out.data<T>()}, plan, in);
    else
      runReduce(ExtremeReducer<T, false>{out.data<T>()}, plan, in);
  });
  return finishReduce(out, a, mask, keepdim, a.dtype());
}

/// Values (when wanted) and indices of the extremes along `dim`, or over the flattened input.
std::pair<Tensor, Tensor> argExtreme(const char *op, bool isMax, const Tensor &a,
                                     std::optional<int64_t> dim, bool keepdim, bool wantValues) {
  Tensor src = dim ? a : a.reshape({-1});
  auto mask = reduceMask(op, src.dim(), dim ? DimList(Shape{*dim}) : DimList{});
  if (!dim && a.numel() == 0)
    fail(ErrorKind::Index, "{}(): Expected reduction dim to be specified for input.numel() == 0.",
         op);
  checkNonEmptyReduction(op, src, mask, true);
  Tensor in = src.to(computeDType(src.dtype()));
  ReducePlan plan = makeReducePlan(in, mask);
  Tensor values = Tensor::empty(plan.outSizes, in.dtype(), a.device());
  Tensor indices = Tensor::empty(plan.outSizes, DType::Int64, a.device());
  dispatchCompute(in.dtype(), [&]<typename T>() {
    T *v = wantValues ? values.data<T>() : nullptr;
    if (isMax)
      runReduce(ArgReducer<T, true>{v, indices.data<int64_t>()}, plan, in);
    else
      runReduce(ArgReducer<T, false>{v, indices.data<int64_t>()}, plan, in);
  });
  if (!dim) // keepdim over the flattened input keeps every dim as size 1
    return {values.to(a.dtype()), keepdim ? indices.view(Shape(a.dim(), 1)) : indices};
  return {finishReduce(values, a, mask, keepdim, a.dtype()),
          finishReduce(indices, a, mask, keepdim, DType::Int64)};
}

} // namespace

Tensor amax(const Tensor &a, const DimList &dims, bool keepdim) {
  if (onDevice({&a}))
    return deviceOp("amax", {a},
                    joinAttrs({dimsAttr("dim", dims), keepdim ? "keepdim = true" : ""}));
  return extreme("amax", true, a, dims, keepdim, dims && !dims->empty());
}

Tensor amin(const Tensor &a, const DimList &dims, bool keepdim) {
  if (onDevice({&a}))
    return deviceOp("amin", {a},
                    joinAttrs({dimsAttr("dim", dims), keepdim ? "keepdim = true" : ""}));
  return extreme("amin", false, a, dims, keepdim, dims && !dims->empty());
}

Tensor max(const Tensor &a) { return extreme("max", true, a, {}, false, false); }

Tensor min(const Tensor &a) { return extreme("min", false, a, {}, false, false); }

std::pair<Tensor, Tensor> maxDim(const Tensor &a, int64_t dim, bool keepdim) {
  return argExtreme("max", true, a, dim, keepdim, true);
}

std::pair<Tensor, Tensor> minDim(const Tensor &a, int64_t dim, bool keepdim) {
  return argExtreme("min", false, a, dim, keepdim, true);
}

Tensor argmax(const Tensor &a, std::optional<int64_t> dim, bool keepdim) {
  KILN_CHECK(a.dtype() != DType::Bool, "argmax(): does not support bool input");
  if (onDevice({&a}))
    return deviceOp(
        "argmax", {a},
        joinAttrs({dim ? fmt::format("dim = {}", *dim) : "", keepdim ? "keepdim = true" : ""}));
  return argExtreme("argmax", true, a, dim, keepdim, false).second;
}

Tensor argmin(const Tensor &a, std::optional<int64_t> dim, bool keepdim) {
  KILN_CHECK(a.dtype() != DType::Bool, "argmin(): does not support bool input");
  return argExtreme("argmin", false, a, dim, keepdim, false).second;
}

std::pair<Tensor, Tensor> aminmax(const Tensor &a, std::optional<int64_t> dim, bool keepdim) {
  auto mask =
      dim ? reduceMask("aminmax", a.dim(), *dim) : reduceMask("aminmax", a.dim(), DimList{});
  for (size_t d = 0; d < mask.size(); ++d)
    KILN_CHECK(!mask[d] || a.size(d) != 0,
               "aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
               "identity.");
  Tensor in = a.to(computeDType(a.dtype()));
  ReducePlan plan = makeReducePlan(in, mask);
  Tensor lo = Tensor::empty(plan.outSizes, in.dtype(), a.device());
  Tensor hi = Tensor::empty(plan.outSizes, in.dtype(), a.device());
  dispatchCompute(in.dtype(), [&]<typename T>() {
    runReduce(MinMaxReducer<T>{lo.data<T>(), hi.data<T>()}, plan, in);
  });
  return {finishReduce(lo, a, mask, keepdim, a.dtype()),
          finishReduce(hi, a, mask, keepdim, a.dtype())};
}

} // namespace kiln::ops
