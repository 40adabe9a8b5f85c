// Shape rules for views (sizes and the strides eager kiln gives them) and for the scatters that
// functionalization makes of writes through slice/select views.

#include "ir/verifier_impl.h"

#include <algorithm>
#include <set>

namespace kiln::ir::detail {

namespace {

std::optional<int64_t> constantNumel(std::span<const SymInt> sizes) {
  int64_t n = 1;
  for (const SymInt &s : sizes) {
    if (!s.isConstant() || __builtin_mul_overflow(n, *s.constant(), &n))
      return std::nullopt;
  }
  return n;
}

SymInt product(std::span<const SymInt> sizes) {
  SymInt p = 1;
  for (const SymInt &s : sizes)
    p = p * s;
  return p;
}

std::vector<SymInt> viewShape(const Node &n, const TensorMeta &in, std::span<const SymInt> given,
                              SymAssumptions *assumed) {
  std::vector<SymInt> shape = n.attr("shape")->toSymInts();
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != SymInt(-1))
      continue;
    if (inferred >= 0)
      ruleFails("'shape' {} has more than one -1", printSizes(shape));
    inferred = static_cast<int>(i);
  }
  if (inferred >= 0 && given.size() == shape.size()) {
    shape[inferred] = given[inferred];
  } else if (inferred >= 0) { // the element count divided by the other sizes
    std::vector<SymInt> others = shape;
    others.erase(others.begin() + inferred);
    SymInt numel = product(in.sizes), known = product(others);
    if (known == SymInt(0))
      ruleFails("cannot {} {} as {}: the -1 could be any size when another size is 0", n.keyword(),
                printSizes(in.sizes), printSizes(shape));
    std::optional<int64_t> num = numel.constant(), den = known.constant();
    if (num && den && *num % *den != 0)
      ruleFails("cannot {} {} ({} elements) as {}: {} is not a multiple of {}", n.keyword(),
                printSizes(in.sizes), *num, printSizes(shape), *num, *den);
    shape[inferred] = floorDiv(numel, known);
    if (assumed && shape[inferred] * known != numel)
      assumed->add(SymRelation{mod(numel, known), RelOp::Eq, SymInt(0)});
  }
  std::optional<int64_t> inNumel = constantNumel(in.sizes), outNumel = constantNumel(shape);
  if (inNumel && outNumel && *inNumel != *outNumel)
    ruleFails("cannot {} {} ({} elements) as {} ({} elements)", n.keyword(), printSizes(in.sizes),
              *inNumel, printSizes(shape), *outNumel);
  if (SymInt a = product(shape), b = product(in.sizes); provablyDifferent(a, b))
    ruleFails("cannot {} {} ({} elements) as {} ({} elements)", n.keyword(), printSizes(in.sizes),
              b.str(), printSizes(shape), a.str());
  else if (assumed && a != b && inferred < 0) // an inferred -1 recorded its divisibility
    assumed->add(SymRelation{a, RelOp::Eq, b});
  return shape;
}

std::vector<SymInt> expandShape(const Node &n, const TensorMeta &in, SymAssumptions *assumed) {
  std::vector<SymInt> size = n.attr("size")->toSymInts();
  int64_t lead = static_cast<int64_t>(size.size()) - in.rank();
  if (lead < 0)
    ruleFails("cannot expand a tensor of rank {} to the smaller rank {}", in.rank(), size.size());
  for (int64_t i = 0; i < static_cast<int64_t>(size.size()); ++i) {
    if (i < lead) {
      if (size[i] == SymInt(-1))
        ruleFails("expand: -1 is not allowed for the new leading dim {}", i);
      continue;
    }
    const SymInt &have = in.sizes[i - lead];
    if (size[i] == SymInt(-1))
      size[i] = have;
    else if (have != SymInt(1) && provablyDifferent(have, size[i]))
      ruleFails("cannot expand dim {} of size {} to {} (only size-1 dims expand)", i - lead,
                have.str(), size[i].str());
    else if (assumed && have != SymInt(1) && have != size[i]) // a run-time size kept its size
      assumed->add(SymRelation{have, RelOp::Eq, size[i]});
  }
  return size;
}

/// The sliced dim's length. Constant bounds on a constant size clamp to [0, size] like torch;
/// otherwise `start <= end <= size` is assumed (negative constants count from the end).
SymInt sliceLength(const Node &n, const SymInt &size, int64_t step, SymAssumptions *assumed) {
  const Attribute *startAttr = n.attr("start"), *endAttr = n.attr("end");
  SymInt start = startAttr ? startAttr->toSymInt() : SymInt(0);
  SymInt end = endAttr ? endAttr->toSymInt() : size;
  std::optional<int64_t> c = size.constant();
  if (c && start.isConstant() && end.isConstant()) {
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + *c : v, 0, *c); };
    int64_t s = clamp(*start.constant()), e = clamp(*end.constant());
    return e > s ? (e - s + step - 1) / step : 0;
  }
  constexpr int64_t kToEnd = int64_t{1} << 62; // x[a:] may carry sys.maxsize as its end
  auto fromEnd = [&](const SymInt &v) {
    std::optional<int64_t> k = v.constant();
    return k && *k < 0 ? size + v : k && *k >= kToEnd ? size : v;
  };
  start = fromEnd(start);
  end = fromEnd(end);
  if (assumed) {
    assumed->add(SymRelation{start, RelOp::Le, end});
    assumed->add(SymRelation{end, RelOp::Le, size});
  }
  return step == 1 ? end - start : floorDiv(end - start + SymInt(step - 1), SymInt(step));
}

std::vector<SymInt> sliceShape(const Node &n, const TensorMeta &in, SymAssumptions *assumed) {
  int64_t dim = wrapDim(intAttrOr(n, "dim", 0), in.rank(), "dim");
  int64_t step = intAttrOr(n, "step", 1);
  if (step <= 0)
    ruleFails("slice step must be positive, got {}", step);
  if (in.rank() == 0)
    ruleFails("cannot slice a 0-d tensor");
  std::vector<SymInt> out = in.sizes;
  out[dim] = sliceLength(n, in.sizes[dim], step, assumed);
  return out;
}

std::vector<SymInt> selectShape(const Node &n, const TensorMeta &in) {
  if (in.rank() == 0)
    ruleFails("cannot select from a 0-d tensor");
  int64_t d = wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
  std::optional<int64_t> index = n.attr("index")->toSymInt().constant(),
                         size = in.sizes[d].constant();
  if (index && size && (*index < -*size || *index >= *size))
    ruleFails("select index {} is out of range for dim {} of size {}", *index, d, *size);
  std::vector<SymInt> out = in.sizes;
  out.erase(out.begin() + d);
  return out;
}

/// The dims squeeze drops: the listed ones (all when none are) whose size is 1.
std::vector<bool> squeezedDims(const Node &n, const TensorMeta &in) {
  std::set<int64_t> dims;
  if (const Attribute *a = n.attr("dim")) {
    for (int64_t d : a->toInts())
      dims.insert(wrapDim(d, in.rank(), "dim"));
  }
  std::vector<bool> drop(in.rank());
  for (int64_t d = 0; d < in.rank(); ++d)
    drop[d] = (dims.empty() || dims.count(d)) && in.sizes[d] == SymInt(1);
  return drop;
}

std::vector<int64_t> permutation(const Node &n, const TensorMeta &in) {
  std::vector<int64_t> dims = n.attr("dims")->toInts();
  if (static_cast<int64_t>(dims.size()) != in.rank())
    ruleFails("permute needs {} dims for a tensor of rank {}, got {}", in.rank(), in.rank(),
              dims.size());
  std::set<int64_t> seen;
  for (int64_t &d : dims) {
    d = wrapDim(d, in.rank(), "dim");
    if (!seen.insert(d).second)
      ruleFails("permute dims must be a permutation, but dim {} repeats", d);
  }
  return dims;
}

/// torch's computeStride: the strides viewing (sizes, strides) as newSizes without a copy, or
/// nullopt when a merged group of dims is not contiguous in memory. Symbolic sizes and strides
/// are compared structurally, so an unprovable case answers nullopt.
std::optional<std::vector<SymInt>> computeViewStrides(std::span<const SymInt> sizes,
                                                      std::span<const SymInt> strides,
                                                      std::span<const SymInt> newSizes) {
  std::vector<SymInt> out(newSizes.size(), SymInt(1));
  if (sizes.empty())
    return out;
  if (std::any_of(sizes.begin(), sizes.end(), [](const SymInt &s) { return s == SymInt(0); }))
    return contiguousStrides(newSizes);
  int64_t viewD = static_cast<int64_t>(newSizes.size()) - 1;
  SymInt chunkBase = strides.back(), tensorNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensorNumel = tensorNumel * sizes[d];
    if (d > 0 && (sizes[d - 1] == SymInt(1) || strides[d - 1] == tensorNumel * chunkBase))
      continue; // dim d-1 continues this contiguous chunk
    // Sizes only grow, so `!=` stops where torch's `<` does or fails the same way.
    while (viewD >= 0 && (viewNumel != tensorNumel || newSizes[viewD] == SymInt(1))) {
      out[viewD] = viewNumel * chunkBase;
      viewNumel = viewNumel * newSizes[viewD];
      --viewD;
    }
    if (viewNumel != tensorNumel)
      return std::nullopt;
    if (d > 0) {
      chunkBase = strides[d - 1];
      tensorNumel = 1;
      viewNumel = 1;
    }
  }
  if (viewD != -1)
    return std::nullopt;
  return out;
}

} // namespace

std::vector<SymInt> viewSizes(const Node &n, const TensorMeta &in, std::span<const SymInt> given,
                              SymAssumptions *assumed) {
  std::vector<SymInt> out = in.sizes;
  switch (n.op()) {
  case OpKind::View:
  case OpKind::Reshape:
    return viewShape(n, in, given, assumed);
  case OpKind::Permute: {
    std::vector<SymInt> sizes;
    for (int64_t d : permutation(n, in))
      sizes.push_back(in.sizes[d]);
    return sizes;
  }
  case OpKind::Transpose: {
    int64_t a = wrapDim(n.attr("dim0")->toInt(), in.rank(), "dim0");
    int64_t b = wrapDim(n.attr("dim1")->toInt(), in.rank(), "dim1");
    if (in.rank() > 0)
      std::swap(out[a], out[b]);
    return out;
  }
  case OpKind::Expand:
    return expandShape(n, in, assumed);
  case OpKind::Slice:
    return sliceShape(n, in, assumed);
  case OpKind::Select:
    return selectShape(n, in);
  case OpKind::Squeeze: {
    std::vector<bool> drop = squeezedDims(n, in);
    std::vector<SymInt> sizes;
    for (int64_t d = 0; d < in.rank(); ++d)
      if (!drop[d])
        sizes.push_back(in.sizes[d]);
    return sizes;
  }
  case OpKind::Unsqueeze: {
    int64_t d = wrapDim(n.attr("dim")->toInt(), in.rank() + 1, "dim");
    out.insert(out.begin() + d, SymInt(1));
    return out;
  }
  case OpKind::Detach:
    return out;
  default: // copy_: the result is operand 0
    std::vector<std::span<const SymInt>> shapes{in.sizes, tensorOperand(n, 1).sizes};
    expectSizes(in.sizes, broadcastShapes(shapes), "copy_ source must broadcast to the target");
    return out;
  }
}

std::vector<SymInt> viewResultStrides(const Node &n, const TensorMeta &in,
                                      std::span<const SymInt> sizes) {
  std::vector<SymInt> st = in.strides;
  switch (n.op()) {
  case OpKind::View:
  case OpKind::Reshape: {
    if (auto strides = computeViewStrides(in.sizes, in.strides, sizes))
      return *strides;
    if (n.op() == OpKind::Reshape) // reshape copies what it cannot view
      return contiguousStrides(sizes);
    ruleFails("cannot view {} strided {} as {} without a copy (use reshape)", printSizes(in.sizes),
              printSizes(in.strides), printSizes(sizes));
  }
  case OpKind::Permute: {
    std::vector<SymInt> out;
    for (int64_t d : permutation(n, in))
      out.push_back(in.strides[d]);
    return out;
  }
  case OpKind::Transpose:
    if (in.rank() > 0)
      std::swap(st[wrapDim(n.attr("dim0")->toInt(), in.rank(), "dim0")],
                st[wrapDim(n.attr("dim1")->toInt(), in.rank(), "dim1")]);
    return st;
  case OpKind::Expand: { // new leading dims and expanded size-1 dims get stride 0
    size_t lead = sizes.size() - in.sizes.size();
    std::vector<SymInt> out(sizes.size(), SymInt(0));
    for (size_t i = lead; i < sizes.size(); ++i) // a size that is not 1 keeps its stride
      if (sizes[i] == in.sizes[i - lead] || in.sizes[i - lead] != SymInt(1))
        out[i] = in.strides[i - lead];
    return out;
  }
  case OpKind::Slice: {
    int64_t d = wrapDim(intAttrOr(n, "dim", 0), in.rank(), "dim");
    st[d] = st[d] * SymInt(intAttrOr(n, "step", 1));
    return st;
  }
  case OpKind::Select:
    st.erase(st.begin() + wrapDim(n.attr("dim")->toInt(), in.rank(), "dim"));
    return st;
  case OpKind::Detach:
    return st;
  case OpKind::Squeeze: {
    std::vector<bool> drop = squeezedDims(n, in);
    std::vector<SymInt> out;
    for (int64_t d = 0; d < in.rank(); ++d)
      if (!drop[d])
        out.push_back(in.strides[d]);
    return out;
  }
  case OpKind::Unsqueeze: {
    int64_t d = wrapDim(n.attr("dim")->toInt(), in.rank() + 1, "dim");
    SymInt stride = d < in.rank() ? in.sizes[d] * in.strides[d] : SymInt(1);
    st.insert(st.begin() + d, stride);
    return st;
  }
  default:
    return st;
  }
}

std::vector<SymInt> scatterSourceSizes(const Node &n, SymAssumptions *assumed) {
  const TensorMeta &in = tensorOperand(n, 0);
  return n.op() == OpKind::SliceScatter ? sliceShape(n, in, assumed) : selectShape(n, in);
}

} // namespace kiln::ir::detail
