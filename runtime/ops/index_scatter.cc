// Scatter-like ops: scatter_ (src or value, optional reduce), scatter_add_, scatter_reduce_ and
// index_add_. Each validates its operands, then runs the shared scatterKernel into a restrided
// view of self (see [Note: restrided operands]).
#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index.h"
#include "runtime/ops/index_impl.h"

#include <algorithm>
#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

Tensor atLeast1d(const Tensor &t) { return t.dim() == 0 ? t.view({1}) : t; }

/// torch's scatter shape rule: same rank, index no larger than src anywhere and no larger than
/// self outside `dim`. src is null for the value forms.
void checkScatterShapes(const char *op, const Tensor &self, int64_t dim, const Tensor &index,
                        const Tensor *src) {
  checkIndexDType(index, op, true);
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  KILN_CHECK(std::max<int64_t>(index.dim(), 1) == nd,
             "{}: Index tensor must have the same number of dimensions as self tensor (index "
             "shape {}, self shape {})",
             op, index.shapeStr(), self.shapeStr());
  KILN_CHECK(!src || std::max<int64_t>(src->dim(), 1) == nd,
             "{}: Index tensor must have the same number of dimensions as src tensor (index shape "
             "{}, src shape {})",
             op, index.shapeStr(), src->shapeStr());
  Tensor s = atLeast1d(self), ix = atLeast1d(index);
  for (int64_t d = 0; d < nd; ++d) {
    bool ok =
        (d == dim || ix.size(d) <= s.size(d)) && (!src || ix.size(d) <= atLeast1d(*src).size(d));
    KILN_CHECK(ok, "{}: Expected index {} to be no larger than self {} apart from dimension {}{}{}",
               op, index.shapeStr(), self.shapeStr(), dim,
               src ? " and to be no larger than src " : "", src ? src->shapeStr() : "");
  }
}

/// self[index[i]...] (mode)= src[i] along dim, where src already has index's (1-D+) shape and
/// self's dtype. Reducing modes on float16/bfloat16 run on a float32 copy.
void scatterAlong(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                  ScatterMode mode, const char *op) {
  Tensor s = atLeast1d(self), ix = atLeast1d(index);
  if (ix.numel() == 0)
    return;
  Tensor idx = normalizeIndex(ix, s.size(dim), dim, false, op, ErrorKind::Runtime);
  Tensor from = src.storage() == self.storage() ? src.clone() : src;
  if (mode != ScatterMode::Assign && isReducedFloat(self.dtype())) {
    Tensor wide = s.to(DType::Float32, true);
    scatterAlong(wide, dim, index, from.to(DType::Float32), mode, op);
    copyInto(s, wide);
    return;
  }
  Shape st = s.strides();
  st[dim] = 0;
  scatterKernel(s.asStrided(ix.sizes(), st), from, idx, s.stride(dim), mode);
}

/// src viewed at index's shape (its leading corner), as torch reads it.
Tensor srcCorner(const Tensor &src, const Tensor &index) {
  Tensor s = atLeast1d(src);
  Tensor ix = atLeast1d(index);
  return s.asStrided(ix.sizes(), s.strides());
}

void checkSameDType(const char *op, const Tensor &self, const Tensor &src) {
  KILN_CHECK(self.dtype() == src.dtype(),
             "{}: Expected self.dtype to be equal to src.dtype (got {} and {})", op,
             dtypeName(self.dtype()), dtypeName(src.dtype()));
}

/// The value every element combines with without changing (for include_self=False).
Scalar identityOf(ScatterMode mode, DType dtype) {
  if (mode == ScatterMode::Add)
    return Scalar(int64_t{0});
  if (mode == ScatterMode::Multiply)
    return Scalar(int64_t{1});
  bool max = mode == ScatterMode::Max;
  if (isFloating(dtype))
    return Scalar(max ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity());
  return dispatchCompute(dtype, [&]<typename T>() {
    return Scalar(static_cast<int64_t>(max ? std::numeric_limits<T>::lowest()
                                           : std::numeric_limits<T>::max()));
  });
}

/// index_add (or scatter_add with a row index) of contiguous float32/float64 tensors as whole rows:
/// for each index, the `inner` elements after `dim` added in one loop the compiler vectorizes (an
/// embedding's gradient, 512 rows of 128), where the general scatter combines element by element.
/// False: not this case.
bool addRows(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src, const char *op) {
  if (!self.isContiguous() || !src.isContiguous() || self.device().type != DeviceType::CPU ||
      src.storage() == self.storage() ||
      (self.dtype() != DType::Float32 && self.dtype() != DType::Float64))
    return false;
  const int64_t size = self.size(dim), n = index.numel();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < self.dim(); ++d)
    (d < dim ? outer : inner) *= d == dim ? 1 : self.size(d);
  Tensor idx = normalizeIndex(index, size, dim, false, op, ErrorKind::Runtime).contiguous();
  const int64_t *at = idx.data<int64_t>();
  auto run = [&]<typename T>() {
    T *dst = self.data<T>();
    const T *from = src.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i) {
        T *row = dst + (o * size + at[i]) * inner;
        const T *add = from + (o * n + i) * inner;
        for (int64_t k = 0; k < inner; ++k)
          row[k] += add[k];
      }
  };
  if (self.dtype() == DType::Float32)
    run.template operator()<float>();
  else
    run.template operator()<double>();
  return true;
}

/// The 1-D index of a scatter_add whose index picks whole rows: one position per element along
/// dim, repeated (stride 0, an `idx.unsqueeze(1).expand(n, f)` of GNN message passing) across
/// every other dim at self's full size. nullopt: not that case.
std::optional<Tensor> rowIndex(const Tensor &self, int64_t dim, const Tensor &index) {
  if (index.dim() == 0 || index.dim() != self.dim() || index.numel() == 0)
    return std::nullopt;
  for (int64_t d = 0; d < index.dim(); ++d)
    if (d != dim && (index.size(d) != self.size(d) || (index.stride(d) != 0 && index.size(d) > 1)))
      return std::nullopt;
  return index.asStrided({index.size(dim)}, {index.stride(dim)}, index.storageOffset());
}
} // namespace

Tensor &scatter_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                 const std::string &reduce) {
  dim = wrapDim(dim, self.dim(), "scatter()");
  checkScatterShapes("scatter()", self, dim, index, &src);
  checkSameDType("scatter()", self, src);
  KILN_CHECK(reduce.empty() || reduce == "add" || reduce == "multiply",
             "scatter(): reduce argument must be either add or multiply, got '{}'", reduce);
  ScatterMode mode = scatterModeOf(reduce, "scatter()");
  scatterAlong(self, dim, index, srcCorner(src, index), mode, "scatter()");
  self.bumpVersion();
  return self;
}

Tensor &scatterValue_(Tensor &self, int64_t dim, const Tensor &index, const Scalar &value,
                      const std::string &reduce) {
  dim = wrapDim(dim, self.dim(), "scatter()");
  checkScatterShapes("scatter()", self, dim, index, nullptr);
  KILN_CHECK(reduce.empty() || reduce == "add" || reduce == "multiply",
             "scatter(): reduce argument must be either add or multiply, got '{}'", reduce);
  ScatterMode mode = scatterModeOf(reduce, "scatter()");
  Tensor v = Tensor::scalarTensor(value, self.dtype()).expand(atLeast1d(index).sizes());
  scatterAlong(self, dim, index, v, mode, "scatter()");
  self.bumpVersion();
  return self;
}

Tensor &scatterAdd_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src) {
  dim = wrapDim(dim, self.dim(), "scatter_add()");
  checkScatterShapes("scatter_add()", self, dim, index, &src);
  checkSameDType("scatter_add()", self, src);
  Tensor corner = srcCorner(src, index);
  if (std::optional<Tensor> rows = rowIndex(self, dim, index);
      rows && addRows(self, dim, *rows, corner, "scatter_add()")) {
    self.bumpVersion();
    return self;
  }
  scatterAlong(self, dim, index, corner, ScatterMode::Add, "scatter_add()");
  self.bumpVersion();
  return self;
}

Tensor &scatterReduce_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                       const std::string &reduce, bool includeSelf) {
  const char *op = "scatter_reduce()";
  dim = wrapDim(dim, self.dim(), op);
  checkScatterShapes(op, self, dim, index, &src);
  checkSameDType(op, self, src);
  bool mean = reduce == "mean";
  KILN_CHECK(mean || reduce == "sum" || reduce == "prod" || reduce == "amax" || reduce == "amin",
             "{}: reduce argument must be one of sum, prod, mean, amax, amin, got '{}'", op,
             reduce);
  ScatterMode mode = mean ? ScatterMode::Add : scatterModeOf(reduce, op);
  Tensor corner = srcCorner(src, index);
  if (!includeSelf)
    scatterValue_(self, dim, index, identityOf(mode, self.dtype()));
  scatterAlong(self, dim, index, corner, mode, op);
  if (mean) {
    // mean = sum / count, where count includes self's element when include_self; positions
    // nothing was scattered to keep their value (count clamped to 1).
    Tensor count = Tensor::empty(self.sizes(), DType::Int64, self.device());
    count.fill_(Scalar(int64_t{includeSelf ? 1 : 0}));
    Tensor ones = Tensor::scalarTensor(Scalar(int64_t{1}), DType::Int64).expand(corner.sizes());
    scatterAlong(count, dim, index, ones, ScatterMode::Add, op);
    int64_t *c = count.data<int64_t>();
    for (int64_t i = 0, n = count.numel(); i < n; ++i)
      c[i] = std::max<int64_t>(c[i], 1);
    Tensor q = div(self, count, isFloating(self.dtype()) ? "" : "floor");
    copyInto(self, q.to(self.dtype()));
  }
  self.bumpVersion();
  return self;
}

Tensor &indexAdd_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                  const Scalar &alpha) {
  const char *op = "index_add_()";
  checkIndexDType(index, op, true);
  KILN_CHECK_KIND(Index, index.dim() <= 1, "{}: Index is supposed to be a vector, got shape {}", op,
                  index.shapeStr());
  dim = wrapDim(dim, self.dim(), op);
  Tensor s = atLeast1d(self), src = atLeast1d(source);
  KILN_CHECK(src.dim() == s.dim(),
             "{}: Source/destination tensor must have same dimensions (source {}, self {})", op,
             source.shapeStr(), self.shapeStr());
  const int64_t n = index.numel();
  KILN_CHECK(src.size(dim) == n,
             "{}: Number of indices ({}) should be equal to source.size(dim) ({}) for dim {}", op,
             n, src.size(dim), dim);
  for (int64_t d = 0; d < s.dim(); ++d)
    KILN_CHECK(d == dim || src.size(d) == s.size(d),
               "{}: source {} and self {} must have the same size in every dim but dim {}", op,
               source.shapeStr(), self.shapeStr(), dim);
  KILN_CHECK(self.dtype() == source.dtype(),
             "{}: self ({}) and source ({}) must have the same scalar type", op,
             dtypeName(self.dtype()), dtypeName(source.dtype()));
  Tensor scaled = alpha.isFloating() || alpha.toInt() != 1
                      ? mul(src, Tensor::wrapScalar(alpha)).to(self.dtype())
                      : src;
  if (n > 0 && addRows(s, dim, index.reshape({n}), scaled, op)) {
    self.bumpVersion();
    return self;
  }
  Shape idxView(s.dim(), 1);
  idxView[dim] = n;
  Tensor idx = index.reshape({n}).view(idxView).expand(src.sizes());
  scatterAlong(s, dim, idx, scaled, ScatterMode::Add, op);
  self.bumpVersion();
  return self;
}

} // namespace kiln::ops
