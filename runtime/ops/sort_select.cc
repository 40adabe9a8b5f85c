// Order statistics along a dim: kthvalue, median, nanmedian, mode.
#include "runtime/ops/sort.h"

#include "runtime/ops/sort_impl.h"

#include <algorithm>
#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

/// Runs pick(buf) -> (value, index) on every line along dim into reduced outputs.
template <typename Pick>
std::pair<Tensor, Tensor> selectAlong(const char *op, const Tensor &a, int64_t dim, bool keepdim,
                                      bool allowBool, Pick pick) {
  int64_t d = wrapDim(dim, a.dim(), op);
  KILN_CHECK_KIND(NotImplemented, allowBool || a.dtype() != DType::Bool,
                  "{}: not implemented for 'bool'", op);
  KILN_CHECK_KIND(Index, a.dim() == 0 || a.size(d) != 0,
                  "{}(): Expected reduction dim {} to have non-zero size.", op, d);
  SortLines l = sortLines(a, d);
  Shape shape = selectedShape(a, d, false);
  Tensor values = Tensor::empty(shape, l.in.dtype(), a.device());
  Tensor indices = Tensor::empty(shape, DType::Int64, a.device());
  dispatchCompute(l.in.dtype(), [&]<typename T>() {
    T *v = values.data<T>();
    int64_t *ix = indices.data<int64_t>();
    forEachLine<T>(l, [&](int64_t line, LineBuf<T> &buf) {
      std::pair<T, int64_t> r = pick(buf);
      v[line] = r.first;
      ix[line] = r.second;
    });
  });
  if (keepdim) {
    Shape kept = selectedShape(a, d, true);
    return {values.view(kept).to(a.dtype()), indices.view(kept)};
  }
  return {values.to(a.dtype()), indices};
}

/// The k-th smallest pair (0-based) of buf[0, m) by (value, index).
template <typename T> std::pair<T, int64_t> nth(LineBuf<T> &buf, int64_t k, int64_t m) {
  std::nth_element(buf.begin(), buf.begin() + k, buf.begin() + m, lessPair<T>);
  return buf[k];
}

/// The first NaN of buf, if any (median propagates it).
template <typename T> const std::pair<T, int64_t> *firstNan(const LineBuf<T> &buf) {
  for (const auto &p : buf)
    if (isNan(p.first))
      return &p;
  return nullptr;
}

template <typename T> std::pair<T, int64_t> modeOf(LineBuf<T> &buf) {
  std::sort(buf.begin(), buf.end(), lessPair<T>);
  size_t best = 0, bestCount = 0;
  for (size_t i = 0; i < buf.size();) {
    size_t j = i + 1;
    while (j < buf.size() && buf[j].first == buf[i].first) // NaN != NaN: each NaN is a run
      ++j;
    if (j - i > bestCount) {
      bestCount = j - i;
      best = j - 1; // the run's last (highest) index, as torch returns
    }
    i = j;
  }
  return buf[best];
}

} // namespace

std::pair<Tensor, Tensor> kthvalue(const Tensor &a, int64_t k, int64_t dim, bool keepdim) {
  int64_t d = wrapDim(dim, a.dim(), "kthvalue");
  int64_t n = a.dim() == 0 ? 1 : a.size(d);
  KILN_CHECK(n == 0 || (k >= 1 && k <= n),
             "kthvalue(): selected number k out of range for dimension {} (k = {}, size {})", d, k,
             n);
  return selectAlong("kthvalue", a, d, keepdim, false, [k]<typename T>(LineBuf<T> &buf) {
    return nth(buf, k - 1, static_cast<int64_t>(buf.size()));
  });
}

std::pair<Tensor, Tensor> medianDim(const Tensor &a, int64_t dim, bool keepdim) {
  return selectAlong("median", a, dim, keepdim, false, []<typename T>(LineBuf<T> &buf) {
    if (const auto *p = firstNan(buf))
      return *p;
    int64_t m = static_cast<int64_t>(buf.size());
    return nth(buf, (m - 1) / 2, m);
  });
}

std::pair<Tensor, Tensor> nanmedianDim(const Tensor &a, int64_t dim, bool keepdim) {
  return selectAlong("nanmedian", a, dim, keepdim, false, []<typename T>(LineBuf<T> &buf) {
    // NaN sorts last, so the non-NaN elements are the m smallest.
    int64_t m = 0;
    for (const auto &p : buf)
      m += isNan(p.first) ? 0 : 1;
    if (m == 0)
      return buf[0];
    return nth(buf, (m - 1) / 2, static_cast<int64_t>(buf.size()));
  });
}

Tensor median(const Tensor &a) {
  if (a.numel() == 0) {
    KILN_CHECK(isFloating(a.dtype()),
               "median(): cannot compute the median of an empty {} tensor (no NaN to return)",
               dtypeName(a.dtype()));
    return Tensor::scalarTensor(Scalar(std::numeric_limits<double>::quiet_NaN()), a.dtype());
  }
  return medianDim(a.reshape({-1}), 0).first;
}

Tensor nanmedian(const Tensor &a) {
  if (a.numel() == 0)
    return median(a);
  return nanmedianDim(a.reshape({-1}), 0).first;
}

std::pair<Tensor, Tensor> mode(const Tensor &a, int64_t dim, bool keepdim) {
  return selectAlong("mode", a, dim, keepdim, true,
                     []<typename T>(LineBuf<T> &buf) { return modeOf(buf); });
}

} // namespace kiln::ops
