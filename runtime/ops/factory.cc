#include "runtime/ops/factory.h"

#include "runtime/copy.h"
#include "runtime/error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kiln::ops {

DType scalarDefaultDType(const Scalar &s) {
  if (s.dtype() == DType::Bool)
    return DType::Bool;
  return s.isFloating() ? defaultFloatDType() : DType::Int64;
}

void checkSizes(const char *op, IntList sizes) {
  for (int64_t s : sizes)
    KILN_CHECK(s >= 0, "{}: Trying to create tensor with negative dimension {}: {}", op, s,
               shapeToString(sizes));
}

namespace {

template <typename T> bool integerFits(int64_t v) {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_signed_v<T>)
    return v >= static_cast<int64_t>(L::lowest()) && v <= static_cast<int64_t>(L::max());
  // Unsigned: negative values wrap (torch keeps uint8(-1) == 255 working) if small enough.
  uint64_t magnitude = v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  return magnitude <= static_cast<uint64_t>(L::max());
}

bool fits(const Scalar &v, DType dtype, bool checkFloatTargets) {
  return dispatchAll(dtype, [&]<typename T>() -> bool {
    if constexpr (std::is_same_v<T, bool>) {
      return true;
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.isFloating())
        return integerFits<T>(v.toInt());
      double d = v.toDouble();
      // NaN fails both comparisons; max + 1 is exact in double even for int64.
      return d >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
             d < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
    } else {
      double d = v.toDouble();
      double limit = static_cast<double>(static_cast<float>(std::numeric_limits<float>::max()));
      if constexpr (std::is_same_v<T, Half>)
        limit = 65504.0;
      else if constexpr (std::is_same_v<T, BFloat16>)
        limit = 3.3895313892515355e38;
      else if constexpr (std::is_same_v<T, double>)
        return true;
      return !checkFloatTargets || !std::isfinite(d) || std::abs(d) <= limit;
    }
  });
}

} // namespace

void checkFits(const Scalar &v, DType dtype, const char *op, bool checkFloatTargets) {
  if (fits(v, dtype, checkFloatTargets))
    return;
  std::string shown =
      v.isFloating() ? fmt::format("{}", v.toDouble()) : fmt::format("{}", v.toInt());
  fail(ErrorKind::Runtime, "{}: value {} cannot be converted to type {} without overflow", op,
       shown, dtypeName(dtype));
}

Tensor empty(IntList sizes, DType dtype) {
  checkSizes("empty", sizes);
  return Tensor::empty(sizes, dtype);
}

Tensor full(IntList sizes, const Scalar &value, DType dtype) {
  checkSizes("full", sizes);
  checkFits(value, dtype, "full", /*checkFloatTargets=*/true);
  Tensor out = Tensor::empty(sizes, dtype);
  fillInto(out, value);
  return out;
}

Tensor zeros(IntList sizes, DType dtype) {
  checkSizes("zeros", sizes);
  Tensor out = Tensor::empty(sizes, dtype);
  fillInto(out, Scalar(int64_t{0}));
  return out;
}

Tensor ones(IntList sizes, DType dtype) {
  checkSizes("ones", sizes);
  Tensor out = Tensor::empty(sizes, dtype);
  fillInto(out, Scalar(int64_t{1}));
  return out;
}

Tensor emptyLike(const Tensor &like, DType dtype, bool preserveLayout) {
  const int64_t nd = like.dim();
  if (!preserveLayout || like.isContiguous() || like.numel() == 0)
    return Tensor::empty(like.sizes(), dtype);
  // Outermost dim first: the order the input's memory is laid out in.
  std::vector<int64_t> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  Shape permSizes(nd);
  for (int64_t k = 0; k < nd; ++k)
    permSizes[k] = like.size(perm[k]);
  // Only a dense, non-overlapping input (a permutation of a contiguous tensor) keeps its layout;
  // sliced or expanded inputs get contiguous results, as in torch.
  Shape dense = contiguousStrides(permSizes);
  for (int64_t k = 0; k < nd; ++k)
    if (permSizes[k] != 1 && like.stride(perm[k]) != dense[k])
      return Tensor::empty(like.sizes(), dtype);
  Shape inverse(nd);
  for (int64_t k = 0; k < nd; ++k)
    inverse[perm[k]] = k;
  return Tensor::empty(permSizes, dtype).permute(inverse);
}

Tensor eye(int64_t n, int64_t m, DType dtype) {
  KILN_CHECK(n >= 0, "eye: n must be greater or equal to 0, got {}", n);
  KILN_CHECK(m >= 0, "eye: m must be greater or equal to 0, got {}", m);
  Tensor out = zeros({n, m}, dtype);
  int64_t diag = std::min(n, m);
  if (diag > 0)
    fillInto(out.asStrided({diag}, {m + 1}, 0), Scalar(int64_t{1}));
  return out;
}

} // namespace kiln::ops
