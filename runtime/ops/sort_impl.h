#pragma once
/// Helpers shared by the sorting and selection kernels (private to runtime/ops/sort*.cc): a
/// tensor seen as lines along one dim, and torch's NaN-aware orders.

#include "runtime/error.h"
#include "runtime/ops/reduce_impl.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <utility>
#include <vector>

namespace kiln::ops::detail {

/// The lines along dim of a contiguous compute-dtype copy of a tensor: [outer, n, inner].
struct SortLines {
  Tensor in;
  int64_t outer = 1, n = 1, inner = 1;

  int64_t count() const { return outer * inner; }
  /// Offset of element i of `line` in a contiguous [outer, m, inner] tensor.
  int64_t at(int64_t line, int64_t i, int64_t m) const {
    return (line / inner) * m * inner + i * inner + line % inner;
  }
};

/// dim must already be wrapped (0 for a 0-d tensor).
inline SortLines sortLines(const Tensor &a, int64_t dim) {
  SortLines l;
  l.in = a.to(computeDType(a.dtype())).contiguous();
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < dim)
      l.outer *= a.size(d);
    else if (d == dim)
      l.n = a.size(d);
    else
      l.inner *= a.size(d);
  }
  return l;
}

/// a < b with NaN above every number (torch's ascending order).
template <typename T> inline bool lessNan(T a, T b) { return a < b || (isNan(b) && !isNan(a)); }

/// (value, index) pairs of one line.
template <typename T> using LineBuf = std::vector<std::pair<T, int64_t>>;

/// Ascending (value, index) order: lessNan, then the lower index.
template <typename T>
inline bool lessPair(const std::pair<T, int64_t> &a, const std::pair<T, int64_t> &b) {
  if (lessNan(a.first, b.first))
    return true;
  return !lessNan(b.first, a.first) && a.second < b.second;
}

/// Descending (value, index) order: greater values first, then the lower index.
template <typename T>
inline bool greaterPair(const std::pair<T, int64_t> &a, const std::pair<T, int64_t> &b) {
  if (lessNan(b.first, a.first))
    return true;
  return !lessNan(a.first, b.first) && a.second < b.second;
}

/// Calls fn(line, buf) for every line in parallel, buf holding the line's (value, index) pairs.
template <typename T, typename Fn> void forEachLine(const SortLines &l, Fn fn) {
  const T *data = l.in.data<T>();
  int64_t grain = std::max<int64_t>(1, kReduceChunk / std::max<int64_t>(l.n, 1));
  parallelFor(0, l.count(), grain, [&](int64_t b, int64_t e) {
    LineBuf<T> buf(l.n);
    for (int64_t line = b; line < e; ++line) {
      for (int64_t i = 0; i < l.n; ++i)
        buf[i] = {data[l.at(line, i, l.n)], i};
      fn(line, buf);
    }
  });
}

/// Shape of a per-line selection result: dim dropped, or kept as 1 with keepdim.
inline Shape selectedShape(const Tensor &a, int64_t dim, bool keepdim) {
  Shape s;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (d != dim)
      s.push_back(a.size(d));
    else if (keepdim)
      s.push_back(1);
  return s;
}

} // namespace kiln::ops::detail
