// Sum-like reductions: sum, nansum, mean, nanmean, prod.
#include "runtime/device_ops.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/reduce_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {

/// Sums (optionally skipping NaN, optionally divided by the count for mean).
template <typename T, bool kSkipNan> struct SumReducer {
  using In = T;
  using Acc = SumAcc<T>;
  static constexpr int kLanes = 16;
  SumOut<T> *out;
  bool mean;
  double count;

  Acc identity() const { return Acc(0); }
  void add(Acc &a, T v, int64_t) const {
    if constexpr (kSkipNan)
      a += isNan(v) ? Acc(0) : Acc(v);
    else
      a += Acc(v);
  }
  void merge(Acc &a, const Acc &b) const { a += b; }
  void store(int64_t o, const Acc &a) const {
    if constexpr (std::is_floating_point_v<T>)
      out[o] = static_cast<T>(mean ? a / count : a);
    else
      out[o] = a;
  }
};

/// nanmean: the sum and the count of the non-NaN elements.
template <typename T> struct NanMeanReducer {
  struct Acc {
    double sum = 0;
    double count = 0;
  };
  using In = T;
  static constexpr int kLanes = 8;
  T *out;

  Acc identity() const { return {}; }
  void add(Acc &a, T v, int64_t) const {
    bool nan = isNan(v);
    a.sum += nan ? 0.0 : double(v);
    a.count += nan ? 0.0 : 1.0;
  }
  void merge(Acc &a, const Acc &b) const {
    a.sum += b.sum;
    a.count += b.count;
  }
  void store(int64_t o, const Acc &a) const { out[o] = static_cast<T>(a.sum / a.count); }
};

template <typename T> struct ProdReducer {
  using In = T;
  using Acc = SumAcc<T>;
  static constexpr int kLanes = 8;
  SumOut<T> *out;

  Acc identity() const { return Acc(1); }
  void add(Acc &a, T v, int64_t) const { a *= Acc(v); }
  void merge(Acc &a, const Acc &b) const { a *= b; }
  void store(int64_t o, const Acc &a) const { out[o] = static_cast<SumOut<T>>(a); }
};

enum class SumKind { Sum, NanSum, Mean, NanMean, Prod };

/// The shared driver: casts to `dtype` (when given) and the compute dtype, reduces, then casts the
/// result to `outDType`.
Tensor sumLike(SumKind kind, const Tensor &a, const std::vector<bool> &mask, bool keepdim,
               std::optional<DType> dtype, DType outDType) {
  DType target = dtype.value_or(a.dtype());
  Tensor in = a.to(target).to(computeDType(target));
  ReducePlan plan = makeReducePlan(in, mask);
  DType kernelOut = isFloating(in.dtype()) ? in.dtype() : DType::Int64;
  Tensor out = Tensor::empty(plan.outSizes, kernelOut, a.device());
  bool mean = kind == SumKind::Mean;
  dispatchCompute(in.dtype(), [&]<typename T>() {
    auto *o = out.data<SumOut<T>>();
    if (kind == SumKind::Prod) {
      runReduce(ProdReducer<T>{o}, plan, in);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (kind == SumKind::NanMean)
        runReduce(NanMeanReducer<T>{o}, plan, in);
      else if (kind == SumKind::NanSum)
        runReduce(SumReducer<T, true>{o, false, 0.0}, plan, in);
      else
        runReduce(SumReducer<T, false>{o, mean, double(plan.reduceSize)}, plan, in);
    } else {
      runReduce(SumReducer<T, false>{o, false, 0.0}, plan, in);
    }
  });
  return finishReduce(out, in, mask, keepdim, outDType);
}

/// sum/prod result dtype: `dtype`, else int64 for integers and bool, else the input's.
DType sumResult(const Tensor &a, std::optional<DType> dtype) {
  if (dtype)
    return *dtype;
  return isIntegral(a.dtype(), true) ? DType::Int64 : a.dtype();
}

/// mean/nanmean accept floating inputs, or any input with a floating `dtype`.
DType meanResult(const char *op, const Tensor &a, std::optional<DType> dtype) {
  if (dtype) {
    KILN_CHECK(isFloating(*dtype),
               "{}(): could not infer output dtype. Optional dtype must be either a floating "
               "point or complex dtype. Got: {}",
               op, dtypeName(*dtype));
    return *dtype;
  }
  KILN_CHECK(isFloating(a.dtype()),
             "{}(): could not infer output dtype. Input dtype must be either a floating point or "
             "complex dtype. Got: {}",
             op, dtypeName(a.dtype()));
  return a.dtype();
}

} // namespace

Tensor sum(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  if (onDevice({&a}))
    return deviceOp("sum", {a},
                    joinAttrs({dimsAttr("dim", dims), keepdim ? "keepdim = true" : "",
                               dtype ? dtypeAttr("dtype", *dtype) : ""}));
  return sumLike(SumKind::Sum, a, reduceMask("sum", a.dim(), dims), keepdim, dtype,
                 sumResult(a, dtype));
}

Tensor nansum(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  return sumLike(SumKind::NanSum, a, reduceMask("nansum", a.dim(), dims), keepdim, dtype,
                 sumResult(a, dtype));
}

Tensor mean(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  if (onDevice({&a}))
    return deviceOp("mean", {a},
                    joinAttrs({dimsAttr("dim", dims), keepdim ? "keepdim = true" : "",
                               dtype ? dtypeAttr("dtype", *dtype) : ""}));
  DType out = meanResult("mean", a, dtype);
  return sumLike(SumKind::Mean, a, reduceMask("mean", a.dim(), dims), keepdim, dtype, out);
}

Tensor nanmean(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  DType out = meanResult("nanmean", a, dtype);
  return sumLike(SumKind::NanMean, a, reduceMask("nanmean", a.dim(), dims), keepdim, dtype, out);
}

Tensor prod(const Tensor &a, std::optional<int64_t> dim, bool keepdim, std::optional<DType> dtype) {
  auto mask = dim ? reduceMask("prod", a.dim(), *dim) : reduceMask("prod", a.dim(), DimList{});
  return sumLike(SumKind::Prod, a, mask, dim && keepdim, dtype, sumResult(a, dtype));
}

} // namespace kiln::ops
