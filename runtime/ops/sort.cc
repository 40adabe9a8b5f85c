// Sorting along a dim: sort, argsort, topk.
#include "runtime/ops/sort.h"

#include "runtime/device_ops.h"

#include "runtime/ops/sort_impl.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace kiln::ops {

using namespace detail;

namespace {

/// On a device: the positions from graph op `op` (argsort, topk_indices), the values a gather.
std::pair<Tensor, Tensor> deviceSelection(const Tensor &a, const char *op, int64_t dim,
                                          const std::string &attrs) {
  Tensor indices = deviceOp(op, {a}, attrs);
  return {deviceOp("gather", {a, indices}, fmt::format("dim = {}", dim)), indices};
}

/// Sorts a line of floats by integer keys: each value's bits mapped to an unsigned order (NaN
/// above everything, -0.0 as 0.0, inverted for descending) above its index, so one integer
/// comparison gives torch's stable NaN-aware order, several times faster than comparing
/// (value, index) pairs.
template <typename T>
void sortByKeys(LineBuf<T> &buf, std::vector<unsigned __int128> &keys, bool descending) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const size_t n = buf.size();
  keys.resize(n);
  for (size_t i = 0; i < n; ++i) {
    T v = buf[i].first;
    Bits bits;
    if (isNan(v)) {
      bits = ~Bits{0};
    } else {
      if (v == T(0))
        v = T(0);
      std::memcpy(&bits, &v, sizeof(T));
      constexpr Bits sign = Bits{1} << (sizeof(T) * 8 - 1);
      bits = (bits & sign) ? ~bits : (bits | sign);
    }
    if (descending)
      bits = ~bits;
    keys[i] = (static_cast<unsigned __int128>(bits) << 64) | static_cast<uint64_t>(buf[i].second);
  }
  std::sort(keys.begin(), keys.end());
  LineBuf<T> sorted(n);
  for (size_t i = 0; i < n; ++i) {
    auto index = static_cast<int64_t>(static_cast<uint64_t>(keys[i]));
    sorted[i] = {buf[static_cast<size_t>(index)].first, index};
  }
  buf.swap(sorted);
}

} // namespace

std::pair<Tensor, Tensor> sort(const Tensor &a, int64_t dim, bool descending, bool stable) {
  if (onDevice({&a}))
    return deviceSelection(
        a, "argsort", dim,
        fmt::format("dim = {}, descending = {}, stable = {}", dim, descending, stable));
  (void)stable; // every sort here is stable, which also satisfies stable=False
  int64_t d = wrapDim(dim, a.dim(), "sort");
  SortLines l = sortLines(a, d);
  Tensor values = Tensor::empty(a.sizes(), l.in.dtype(), a.device());
  Tensor indices = Tensor::empty(a.sizes(), DType::Int64, a.device());
  dispatchCompute(l.in.dtype(), [&]<typename T>() {
    T *v = values.data<T>();
    int64_t *ix = indices.data<int64_t>();
    forEachLine<T>(l, [&](int64_t line, LineBuf<T> &buf) {
      // Pairs are unique by index, so ordering by (value, index) is a stable sort by value.
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        thread_local std::vector<unsigned __int128> keys;
        sortByKeys(buf, keys, descending);
      } else if (descending) {
        std::sort(buf.begin(), buf.end(), greaterPair<T>);
      } else {
        std::sort(buf.begin(), buf.end(), lessPair<T>);
      }
      for (int64_t i = 0; i < l.n; ++i) {
        int64_t p = l.at(line, i, l.n);
        v[p] = buf[i].first;
        ix[p] = buf[i].second;
      }
    });
  });
  return {values.to(a.dtype()), indices};
}

Tensor argsort(const Tensor &a, int64_t dim, bool descending, bool stable) {
  return sort(a, dim, descending, stable).second;
}

std::pair<Tensor, Tensor> topk(const Tensor &a, int64_t k, int64_t dim, bool largest, bool sorted) {
  if (onDevice({&a}))
    return deviceSelection(
        a, "topk_indices", dim,
        fmt::format("k = {}, dim = {}, largest = {}, sorted = {}", k, dim, largest, sorted));
  (void)sorted; // results always come sorted, which torch allows for sorted=False too
  int64_t d = wrapDim(dim, a.dim(), "topk");
  KILN_CHECK(a.dtype() != DType::Bool, "topk: bool tensors are not supported (as in torch)");
  int64_t n = a.dim() == 0 ? 1 : a.size(d);
  KILN_CHECK(k >= 0 && k <= n,
             "topk(): selected index k out of range (k = {}, but dim {} has size {})", k, d, n);
  SortLines l = sortLines(a, d);
  Shape shape = a.sizes();
  if (a.dim() > 0)
    shape[d] = k;
  else
    k = 1; // a 0-d result holds its one element whatever k (0 or 1) is, as in torch
  Tensor values = Tensor::empty(shape, l.in.dtype(), a.device());
  Tensor indices = Tensor::empty(shape, DType::Int64, a.device());
  dispatchCompute(l.in.dtype(), [&]<typename T>() {
    T *v = values.data<T>();
    int64_t *ix = indices.data<int64_t>();
    forEachLine<T>(l, [&](int64_t line, LineBuf<T> &buf) {
      if (largest)
        std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), greaterPair<T>);
      else
        std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), lessPair<T>);
      for (int64_t i = 0; i < k; ++i) {
        int64_t p = l.at(line, i, k);
        v[p] = buf[i].first;
        ix[p] = buf[i].second;
      }
    });
  });
  return {values.to(a.dtype()), indices};
}

} // namespace kiln::ops
