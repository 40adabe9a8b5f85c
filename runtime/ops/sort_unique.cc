// unique and unique_consecutive, over elements or over slices along a dim.
#include "runtime/ops/sort.h"

#include "runtime/ops/sort_impl.h"

#include <algorithm>
#include <numeric>

namespace kiln::ops {

using namespace detail;

namespace {

/// Rows of a [n, len] block in output order, cut into groups of equal rows:
/// group g is order[starts[g] .. starts[g + 1]).
struct Grouping {
  std::vector<int64_t> order, starts;
};

/// Groups equal rows, after a stable lexicographic sort (torch's NaN order) when `sortRows`;
/// otherwise only runs of consecutive equal rows group. NaN never equals NaN, as in torch.
template <typename T> Grouping groupRows(const T *x, int64_t n, int64_t len, bool sortRows) {
  Grouping g;
  g.order.resize(n);
  std::iota(g.order.begin(), g.order.end(), int64_t{0});
  if (sortRows)
    std::stable_sort(g.order.begin(), g.order.end(), [&](int64_t i, int64_t j) {
      for (int64_t k = 0; k < len; ++k) {
        if (lessNan(x[i * len + k], x[j * len + k]))
          return true;
        if (lessNan(x[j * len + k], x[i * len + k]))
          return false;
      }
      return false;
    });
  auto rowEqual = [&](int64_t i, int64_t j) {
    for (int64_t k = 0; k < len; ++k)
      if (!(x[i * len + k] == x[j * len + k]))
        return false;
    return true;
  };
  for (int64_t p = 0; p < n; ++p)
    if (p == 0 || !rowEqual(g.order[p - 1], g.order[p]))
      g.starts.push_back(p);
  g.starts.push_back(n);
  return g;
}

UniqueResult uniqueImpl(const char *op, const Tensor &a, std::optional<int64_t> dim,
                        bool returnInverse, bool returnCounts, bool sortRows) {
  // Rows are the elements (dim nullopt) or the slices along dim, moved to the front.
  Shape perm;
  Tensor rows;
  if (dim) {
    KILN_CHECK(a.dim() > 0, "{}: dim {} given for a 0-d tensor", op, *dim);
    int64_t d = wrapDim(*dim, a.dim(), op);
    perm.push_back(d);
    for (int64_t k = 0; k < a.dim(); ++k)
      if (k != d)
        perm.push_back(k);
    rows = a.permute(perm);
  } else {
    rows = a.reshape({-1});
  }
  Tensor x = rows.to(computeDType(a.dtype())).contiguous();
  int64_t n = rows.size(0), len = n == 0 ? 0 : rows.numel() / n;
  UniqueResult r;
  dispatchCompute(x.dtype(), [&]<typename T>() {
    const T *data = x.data<T>();
    Grouping g = groupRows(data, n, len, sortRows);
    int64_t groups = static_cast<int64_t>(g.starts.size()) - 1;
    Shape shape = rows.sizes();
    shape[0] = groups;
    Tensor values = Tensor::empty(shape, x.dtype(), a.device());
    Tensor inverse = Tensor::empty({n}, DType::Int64, a.device());
    Tensor counts = Tensor::empty({groups}, DType::Int64, a.device());
    T *v = values.data<T>();
    int64_t *inv = inverse.data<int64_t>(), *cnt = counts.data<int64_t>();
    for (int64_t k = 0; k < groups; ++k) {
      std::copy_n(data + g.order[g.starts[k]] * len, len, v + k * len);
      cnt[k] = g.starts[k + 1] - g.starts[k];
      for (int64_t p = g.starts[k]; p < g.starts[k + 1]; ++p)
        inv[g.order[p]] = k;
    }
    r.values = values.to(a.dtype());
    if (returnInverse)
      r.inverse = dim ? inverse : inverse.view(a.sizes());
    if (returnCounts)
      r.counts = counts;
  });
  if (dim) {
    Shape back(perm.size());
    for (size_t k = 0; k < perm.size(); ++k)
      back[perm[k]] = static_cast<int64_t>(k);
    r.values = r.values.permute(back).contiguous();
  }
  return r;
}

} // namespace

UniqueResult unique(const Tensor &a, std::optional<int64_t> dim, bool returnInverse,
                    bool returnCounts) {
  return uniqueImpl("unique", a, dim, returnInverse, returnCounts, true);
}

UniqueResult uniqueConsecutive(const Tensor &a, std::optional<int64_t> dim, bool returnInverse,
                               bool returnCounts) {
  return uniqueImpl("unique_consecutive", a, dim, returnInverse, returnCounts, false);
}

} // namespace kiln::ops
