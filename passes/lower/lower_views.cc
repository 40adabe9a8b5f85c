// Lowerings of views (view, reshape, permute, transpose, expand, slice, select, squeeze,
// unsqueeze) as index remapping, and of cat, slice_scatter and select_scatter as one pointwise
// node each.
//
// A view writes nothing: its result is its operand's ref with a new index map (lower_context.h),
// whatever the operand's strides, so views of views and views of transposed inputs compose by
// substitution. reshape splits and merges dims group by group, so `[s0, 8, 16] -> [s0, 128]`
// reads `[i0, i1 floordiv 16, i1 mod 16]` rather than dividing one flat index by everything.

#include "passes/lower/lower_context.h"
#include "passes/lower/region.h"

#include <optional>
#include <set>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;
using ir::loop::VarRanges;

bool isOne(const SymInt &s) { return s == SymInt(1); }

/// Whether b is a proper multiple of a (b == a*k, k != 1), as far as SymInt can prove.
bool properMultiple(const SymInt &a, const SymInt &b) {
  if (a == b || a == SymInt(0))
    return false;
  return floorDiv(b, a) * a == b;
}

/// The memory coefficient of each input dim (the flat offset is affine in it), when known.
using Coeffs = std::vector<std::optional<SymInt>>;

/// Index of dims `inDims` of the input from the flat position `flat` within their group. When
/// the group is contiguous in memory (each dim's coefficient is the next one's times its size),
/// the flat position goes on the innermost dim and the others read 0: the same offset, without a
/// floordiv/mod per dim.
void decodeGroup(const std::vector<SymInt> &in, std::span<const int64_t> inDims,
                 const IndexExpr &flat, const VarRanges &ranges, const Coeffs &coeffs,
                 std::vector<IndexExpr> &map) {
  std::vector<int64_t> dims;
  for (int64_t d : inDims)
    if (!isOne(in[d]))
      dims.push_back(d);
  bool contiguous = !dims.empty();
  for (int64_t d : dims)
    contiguous = contiguous && coeffs[d].has_value();
  for (size_t j = 0; contiguous && j + 1 < dims.size(); ++j)
    contiguous = *coeffs[dims[j]] == *coeffs[dims[j + 1]] * in[dims[j + 1]];
  for (size_t k = 0; k < inDims.size(); ++k) {
    int64_t d = inDims[k];
    if (isOne(in[d]) || contiguous) {
      map[d] = contiguous && d == dims.back() ? flat : IndexExpr(0);
      continue;
    }
    SymInt stride = 1;
    for (size_t j = k + 1; j < inDims.size(); ++j)
      stride = stride * in[inDims[j]];
    IndexExpr e = ir::loop::floorDivInRange(flat, stride, ranges);
    map[d] = k == 0 ? e : ir::loop::modInRange(e, in[d], ranges);
  }
}

/// The flat position of out dims `outDims` within their group.
IndexExpr flatOf(const std::vector<SymInt> &out, std::span<const int64_t> outDims,
                 std::span<const IndexExpr> vars) {
  IndexExpr flat = 0;
  for (int64_t d : outDims)
    flat = flat * out[d] + vars[d];
  return flat;
}

/// The map of a reshape from `in` to `out` sizes: dims are matched in groups of equal products;
/// when no grouping is provable, one group holds everything.
std::vector<IndexExpr> reshapeMap(const std::vector<SymInt> &in, const std::vector<SymInt> &out,
                                  const Coeffs &coeffs) {
  std::vector<IndexExpr> vars = loopVars(out.size()), map(in.size(), IndexExpr(0));
  for (const SymInt &s : out)
    if (s == SymInt(0))
      return map; // no elements: nothing is ever read
  VarRanges ranges(out);
  std::vector<int64_t> allIn, allOut;
  size_t a = 0, b = 0;
  bool grouped = true;
  while (grouped && (a < in.size() || b < out.size())) {
    if (a < in.size() && isOne(in[a])) {
      ++a; // map[a] stays 0
      continue;
    }
    if (b < out.size() && isOne(out[b])) {
      ++b;
      continue;
    }
    if (a == in.size() || b == out.size()) {
      grouped = false;
      break;
    }
    std::vector<int64_t> gi{int64_t(a)}, go{int64_t(b)};
    SymInt p = in[a++], q = out[b++];
    while (grouped && !(p == q)) {
      if (properMultiple(p, q) && a < in.size()) {
        gi.push_back(int64_t(a));
        p = p * in[a++];
      } else if (properMultiple(q, p) && b < out.size()) {
        go.push_back(int64_t(b));
        q = q * out[b++];
      } else {
        grouped = false;
      }
    }
    if (grouped)
      decodeGroup(in, gi, flatOf(out, go, vars), ranges, coeffs, map);
  }
  if (grouped)
    return map;
  for (size_t d = 0; d < in.size(); ++d)
    allIn.push_back(int64_t(d));
  for (size_t d = 0; d < out.size(); ++d)
    allOut.push_back(int64_t(d));
  std::fill(map.begin(), map.end(), IndexExpr(0));
  decodeGroup(in, allIn, flatOf(out, allOut, vars), ranges, coeffs, map);
  return map;
}

/// How far the flat offset of `x` moves per step of each of its dims (nullopt where not affine).
Coeffs memoryCoeffs(const LoopProgram &p, const TensorRef &x) {
  Coeffs out(x.sizes.size());
  if (x.isFill())
    return out;
  IndexExpr flat = ir::loop::flatIndex(x.index, p.buffer(x.buffer).meta.strides);
  std::optional<ir::loop::AffineForm> form = ir::loop::affineForm(flat, VarRanges(x.sizes));
  if (!form)
    return out;
  for (size_t d = 0; d < out.size(); ++d) {
    auto it = form->coeffs.find(ir::loop::loopVarName(d));
    out[d] = it == form->coeffs.end() ? SymInt(0) : it->second;
  }
  return out;
}

void lowerView(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  std::vector<SymInt> out = n.result(0)->meta().sizes;
  int64_t rank = x.rank();
  std::vector<IndexExpr> vars = loopVars(out.size()), map(rank, IndexExpr(0));
  switch (n.op()) {
  case OpKind::View:
  case OpKind::Reshape:
    map = reshapeMap(x.sizes, out, memoryCoeffs(ctx.program(), x));
    break;
  case OpKind::Permute: {
    std::vector<int64_t> dims = n.attr("dims")->toInts();
    for (size_t k = 0; k < dims.size(); ++k)
      map[wrapDim(dims[k], rank)] = vars[k];
    break;
  }
  case OpKind::Transpose: {
    map = vars;
    if (rank > 0)
      std::swap(map[wrapDim(n.attr("dim0")->toInt(), rank)],
                map[wrapDim(n.attr("dim1")->toInt(), rank)]);
    break;
  }
  case OpKind::Expand: {
    size_t lead = out.size() - rank;
    for (int64_t d = 0; d < rank; ++d)
      map[d] = isOne(x.sizes[d]) ? IndexExpr(0) : vars[d + lead];
    break;
  }
  case OpKind::Slice: {
    const ir::Attribute *dimAttr = n.attr("dim"), *startAttr = n.attr("start");
    const ir::Attribute *stepAttr = n.attr("step");
    int64_t dim = wrapDim(dimAttr ? dimAttr->toInt() : 0, rank);
    SymInt start =
        normalizeIndex(startAttr ? startAttr->toSymInt() : SymInt(0), x.sizes[dim], true);
    map = vars;
    map[dim] = start + vars[dim] * (stepAttr ? stepAttr->toInt() : 1);
    break;
  }
  case OpKind::Select: {
    int64_t dim = wrapDim(n.attr("dim")->toInt(), rank);
    for (int64_t d = 0; d < rank; ++d)
      map[d] = d < dim ? vars[d] : d > dim ? vars[d - 1] : IndexExpr(0);
    map[dim] = normalizeIndex(n.attr("index")->toSymInt(), x.sizes[dim], false);
    break;
  }
  case OpKind::Squeeze: {
    std::set<int64_t> listed;
    if (const ir::Attribute *a = n.attr("dim"))
      for (int64_t d : a->toInts())
        listed.insert(wrapDim(d, rank));
    size_t pos = 0;
    for (int64_t d = 0; d < rank; ++d) {
      bool squeezed = (listed.empty() || listed.count(d)) && isOne(x.sizes[d]);
      map[d] = squeezed ? IndexExpr(0) : vars[pos++];
    }
    break;
  }
  case OpKind::Detach:
    map = vars;
    break;
  default: { // unsqueeze
    int64_t dim = wrapDim(n.attr("dim")->toInt(), rank + 1);
    for (int64_t d = 0; d < rank; ++d)
      map[d] = vars[d < dim ? d : d + 1];
  }
  }
  ctx.define(n.result(0), x.view(out, map));
}

Val indexOrConstant(Ops &ops, const SymInt &s) {
  if (std::optional<int64_t> c = s.constant())
    return ops.constant(*c, DType::Int64);
  return ops.indexValue(s);
}

/// cat: each element reads the operand whose slice of `dim` holds it, selected by a chain of
/// `where`s on the index. The other operands are read at a clamped index so every load stays
/// in bounds (their values are discarded).
void lowerCat(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  const ir::Attribute *dimAttr = n.attr("dim");
  int64_t dim = wrapDim(dimAttr ? dimAttr->toInt() : 0, out.rank());
  struct Part {
    const TensorRef *ref;
    SymInt offset, size;
  };
  std::vector<Part> parts;
  SymInt offset = 0;
  for (const ir::Value *v : n.operands()) {
    const TensorRef &t = ctx.tensor(v);
    if (t.sizes[dim] == SymInt(0))
      continue;
    parts.push_back({&t, offset, t.sizes[dim]});
    offset = offset + t.sizes[dim];
  }
  if (parts.empty())
    ctx.decline(n, "cat of empty tensors only");
  DType result = out.dtype;
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    auto read = [&](size_t j) {
      const Part &part = parts[j];
      std::vector<IndexExpr> point(i.begin(), i.end());
      IndexExpr at = i[dim] - part.offset;
      if (j + 1 < parts.size())
        at = min(at, part.size - 1);
      if (j > 0)
        at = max(at, SymInt(0));
      point[dim] = at;
      return ops.cast(LowerContext::load(ops, *part.ref, point), result);
    };
    Val acc = read(parts.size() - 1);
    for (size_t j = parts.size() - 1; j-- > 0;) {
      Val inPart = ops.lt(ops.indexValue(i[dim]), indexOrConstant(ops, parts[j + 1].offset));
      acc = ops.where(inPart, read(j), acc);
    }
    return acc;
  }));
}

/// Whether `point` of the base lies in the region.
Val regionHit(Ops &ops, const std::vector<IndexExpr> &point, const Region &r) {
  IndexExpr offset = point[r.dim] - r.start;
  IndexExpr slot = r.step == 1 ? offset : floorDiv(offset, SymInt(r.step));
  Val hit = ops.ge(ops.indexValue(offset), ops.constant(0, DType::Int64));
  hit = ops.bitwiseAnd(hit, ops.lt(ops.indexValue(slot), indexOrConstant(ops, r.len)));
  if (r.step != 1)
    hit = ops.bitwiseAnd(
        hit, ops.eq(ops.indexValue(mod(offset, SymInt(r.step))), ops.constant(0, DType::Int64)));
  return hit;
}

/// The point of the written source that `point` of the base reads, clamped into bounds (the
/// load runs everywhere; regionHit masks it).
std::vector<IndexExpr> regionPoint(std::vector<IndexExpr> point, const Region &r) {
  if (r.select) {
    point.erase(point.begin() + r.dim);
    return point;
  }
  IndexExpr offset = point[r.dim] - r.start;
  IndexExpr slot = r.step == 1 ? offset : floorDiv(offset, SymInt(r.step));
  point[r.dim] = max(min(slot, r.len - 1), SymInt(0));
  return point;
}

/// slice_scatter / select_scatter (what functionalization makes of writes through views): the
/// base, except where the slice or select lands, which reads the source. The source is read at
/// a clamped index everywhere, so every load stays in bounds.
///
/// A write through a view of a view (`out[:, i, j, :] = v`) functionalizes to
/// `scatter(B, scatter(select(B, i), v, j), i)`: the levels compose into one region test, so
/// the result reads B once per point. Then a chain of such writes (a pooling loop filling its
/// output slot by slot) inlines into one loop instead of copying B once per write.
void lowerScatter(LowerContext &ctx, const ir::Node &n) {
  Region outer = *regionOf(n);
  const TensorRef &base = ctx.tensor(n.operand(0));
  if (outer.len == SymInt(0)) // nothing lands: the result is the base
    return ctx.define(n.result(0), base);
  ComposedScatter composed = composeScatter(n);
  const std::vector<Region> &levels = composed.levels;
  const std::vector<DType> &levelTypes = composed.levelTypes;
  const TensorRef &source = ctx.tensor(composed.source);
  DType result = n.result(0)->meta().dtype;
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> point(i.begin(), i.end());
    Val hit = regionHit(ops, point, levels[0]);
    point = regionPoint(std::move(point), levels[0]);
    for (size_t l = 1; l < levels.size(); ++l) {
      hit = ops.bitwiseAnd(hit, regionHit(ops, point, levels[l]));
      point = regionPoint(std::move(point), levels[l]);
    }
    Val fromSrc = LowerContext::load(ops, source, point);
    for (size_t l = levelTypes.size(); l-- > 0;)
      fromSrc = ops.cast(fromSrc, levelTypes[l]);
    return ops.where(hit, ops.cast(fromSrc, result),
                     ops.cast(LowerContext::load(ops, base, i), result));
  }));
}

} // namespace

void registerViews(Registry &r) {
  for (OpKind op :
       {OpKind::View, OpKind::Reshape, OpKind::Permute, OpKind::Transpose, OpKind::Expand,
        OpKind::Slice, OpKind::Select, OpKind::Squeeze, OpKind::Unsqueeze, OpKind::Detach})
    r.add(op, lowerView);
  r.add(OpKind::Cat, lowerCat);
  r.add(OpKind::SliceScatter, lowerScatter);
  r.add(OpKind::SelectScatter, lowerScatter);
}

} // namespace kiln::passes::lower
