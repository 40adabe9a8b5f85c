// Logical reductions: all, any, count_nonzero.
#include "runtime/ops/reduce.h"
#include "runtime/ops/reduce_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {

/// all (kAll) or any: whether every / some element is nonzero (NaN counts as nonzero).
template <typename T, bool kAll> struct TruthReducer {
  using In = T;
  using Acc = bool;
  static constexpr int kLanes = 16;
  bool *out;

  Acc identity() const { return kAll; }
  void add(Acc &a, T v, int64_t) const {
    if constexpr (kAll)
      a = a && (v != T(0));
    else
      a = a || (v != T(0));
  }
  void merge(Acc &a, const Acc &b) const { a = kAll ? (a && b) : (a || b); }
  void store(int64_t o, const Acc &a) const { out[o] = a; }
};

template <typename T> struct CountNonzeroReducer {
  using In = T;
  using Acc = int64_t;
  static constexpr int kLanes = 16;
  int64_t *out;

  Acc identity() const { return 0; }
  void add(Acc &a, T v, int64_t) const { a += v != T(0) ? 1 : 0; }
  void merge(Acc &a, const Acc &b) const { a += b; }
  void store(int64_t o, const Acc &a) const { out[o] = a; }
};

Tensor truth(const char *op, bool isAll, const Tensor &a, const DimList &dims, bool keepdim) {
  auto mask = reduceMask(op, a.dim(), dims);
  Tensor in = a.to(computeDType(a.dtype()));
  ReducePlan plan = makeReducePlan(in, mask);
  Tensor out = Tensor::empty(plan.outSizes, DType::Bool, a.device());
  dispatchCompute(in.dtype(), [&]<typename T>() {
    if (isAll)
      runReduce(TruthReducer<T, true>{out.data<bool>()}, plan, in);
    else
      runReduce(TruthReducer<T, false>{out.data<bool>()}, plan, in);
  });
  // torch keeps uint8 for uint8 inputs (a legacy of uint8 masks).
  DType result = a.dtype() == DType::UInt8 ? DType::UInt8 : DType::Bool;
  return finishReduce(out, a, mask, keepdim, result);
}

} // namespace

Tensor all(const Tensor &a, const DimList &dims, bool keepdim) {
  return truth("all", true, a, dims, keepdim);
}

Tensor any(const Tensor &a, const DimList &dims, bool keepdim) {
  return truth("any", false, a, dims, keepdim);
}

Tensor countNonzero(const Tensor &a, const DimList &dims) {
  auto mask = reduceMask("count_nonzero", a.dim(), dims);
  Tensor in = a.to(computeDType(a.dtype()));
  ReducePlan plan = makeReducePlan(in, mask);
  Tensor out = Tensor::empty(plan.outSizes, DType::Int64, a.device());
  dispatchCompute(in.dtype(), [&]<typename T>() {
    runReduce(CountNonzeroReducer<T>{out.data<int64_t>()}, plan, in);
  });
  return out;
}

} // namespace kiln::ops
