// Verifier rules for views, cat, library calls (matmul, linear, conv2d, attention) and the
// composites kept whole until decomposition (layer_norm, embedding).

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

void expectSameDType(const Node &n, int a, int b) {
  DType da = tensorOperand(n, a).dtype, db = tensorOperand(n, b).dtype;
  if (da != db)
    ruleFails("'{}' needs operands of one dtype, got {} (operand {}) and {} (operand {})",
              n.keyword(), dtypeShortName(da), a, dtypeShortName(db), b);
}

std::vector<SymInt> viewShape(const Node &n, const TensorMeta &in) {
  std::vector<SymInt> shape = n.attr("shape")->toSymInts();
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != SymInt(-1))
      continue;
    if (inferred >= 0)
      ruleFails("'shape' {} has more than one -1", shapeStr(shape));
    inferred = static_cast<int>(i);
  }
  const std::vector<SymInt> &out = tensorResult(n).sizes;
  if (inferred >= 0 && out.size() == shape.size())
    shape[inferred] = out[inferred];
  std::optional<int64_t> inNumel = constantNumel(in.sizes), outNumel = constantNumel(shape);
  if (inNumel && outNumel && *inNumel != *outNumel)
    ruleFails("cannot {} {} ({} elements) as {} ({} elements)", n.keyword(), shapeStr(in.sizes),
              *inNumel, shapeStr(shape), *outNumel);
  return shape;
}

std::vector<SymInt> expandShape(const Node &n, const TensorMeta &in) {
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
  }
  return size;
}

std::vector<SymInt> sliceShape(const Node &n, const TensorMeta &in) {
  int64_t dim = wrapDim(intAttrOr(n, "dim", 0), in.rank(), "dim");
  int64_t step = intAttrOr(n, "step", 1);
  if (step <= 0)
    ruleFails("slice step must be positive, got {}", step);
  std::vector<SymInt> out = in.sizes;
  const std::vector<SymInt> &got = tensorResult(n).sizes;
  if (in.rank() == 0)
    ruleFails("cannot slice a 0-d tensor");
  out[dim] = got.size() == out.size() ? got[dim] : out[dim]; // the sliced length is checked below
  std::optional<int64_t> size = in.sizes[dim].constant();
  const Attribute *startAttr = n.attr("start"), *endAttr = n.attr("end");
  SymInt start = startAttr ? startAttr->toSymInt() : SymInt(0);
  SymInt end = endAttr ? endAttr->toSymInt() : in.sizes[dim];
  if (size && start.isConstant() && end.isConstant()) { // torch clamps to [0, size]
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + *size : v, 0, *size); };
    int64_t s = clamp(*start.constant()), e = clamp(*end.constant());
    out[dim] = e > s ? (e - s + step - 1) / step : 0;
  }
  return out;
}

std::vector<SymInt> squeezeShape(const Node &n, const TensorMeta &in) {
  std::set<int64_t> dims;
  if (const Attribute *a = n.attr("dim")) {
    for (int64_t d : a->toInts())
      dims.insert(wrapDim(d, in.rank(), "dim"));
  }
  std::vector<SymInt> out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    bool listed = dims.empty() || dims.count(d);
    if (!(listed && in.sizes[d] == SymInt(1)))
      out.push_back(in.sizes[d]);
  }
  return out;
}

std::vector<SymInt> permuteShape(const Node &n, const TensorMeta &in) {
  std::vector<int64_t> dims = n.attr("dims")->toInts();
  if (static_cast<int64_t>(dims.size()) != in.rank())
    ruleFails("permute needs {} dims for a tensor of rank {}, got {}", in.rank(), in.rank(),
              dims.size());
  std::set<int64_t> seen;
  std::vector<SymInt> out;
  for (int64_t d : dims) {
    int64_t w = wrapDim(d, in.rank(), "dim");
    if (!seen.insert(w).second)
      ruleFails("permute dims must be a permutation, but dim {} repeats", w);
    out.push_back(in.sizes[w]);
  }
  return out;
}

std::vector<SymInt> expectedViewShape(const Node &n, const TensorMeta &in) {
  std::vector<SymInt> out = in.sizes;
  switch (n.op()) {
  case OpKind::View:
  case OpKind::Reshape:
    return viewShape(n, in);
  case OpKind::Permute:
    return permuteShape(n, in);
  case OpKind::Transpose: {
    int64_t a = wrapDim(n.attr("dim0")->toInt(), in.rank(), "dim0");
    int64_t b = wrapDim(n.attr("dim1")->toInt(), in.rank(), "dim1");
    if (in.rank() > 0)
      std::swap(out[a], out[b]);
    return out;
  }
  case OpKind::Expand:
    return expandShape(n, in);
  case OpKind::Slice:
    return sliceShape(n, in);
  case OpKind::Select: {
    if (in.rank() == 0)
      ruleFails("cannot select from a 0-d tensor");
    int64_t d = wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
    std::optional<int64_t> index = n.attr("index")->toSymInt().constant(),
                           size = in.sizes[d].constant();
    if (index && size && (*index < -*size || *index >= *size))
      ruleFails("select index {} is out of range for dim {} of size {}", *index, d, *size);
    out.erase(out.begin() + d);
    return out;
  }
  case OpKind::Squeeze:
    return squeezeShape(n, in);
  case OpKind::Unsqueeze: {
    int64_t d = wrapDim(n.attr("dim")->toInt(), in.rank() + 1, "dim");
    out.insert(out.begin() + d, SymInt(1));
    return out;
  }
  default: // copy_: the result is operand 0
    std::vector<std::span<const SymInt>> shapes{in.sizes, tensorOperand(n, 1).sizes};
    expectSizes(in.sizes, broadcastShapes(shapes), "copy_ source must broadcast to the target");
    return out;
  }
}

} // namespace

void checkView(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  const TensorMeta &out = tensorResult(n);
  expectSameDevice(n);
  if (out.dtype != in.dtype)
    ruleFails("'{}' keeps the dtype, but the operand is {} and the result {}", n.keyword(),
              dtypeShortName(in.dtype), dtypeShortName(out.dtype));
  expectSizes(out.sizes, expectedViewShape(n, in),
              fmt::format("'{}' of {}", n.keyword(), shapeStr(in.sizes)));
}

void checkCat(const Node &n) {
  const TensorMeta &first = tensorOperand(n, 0);
  int64_t dim = wrapDim(intAttrOr(n, "dim", 0), first.rank(), "dim");
  if (first.rank() == 0)
    ruleFails("cannot concatenate 0-d tensors");
  std::vector<SymInt> want = first.sizes;
  DType dtype = first.dtype;
  for (int i = 1; i < n.numOperands(); ++i) {
    const TensorMeta &m = tensorOperand(n, i);
    if (m.rank() != first.rank())
      ruleFails("cat operands must have one rank, got {} (operand 0) and {} (operand {})",
                first.rank(), m.rank(), i);
    for (int64_t d = 0; d < m.rank(); ++d)
      if (d != dim && provablyDifferent(m.sizes[d], first.sizes[d]))
        ruleFails("cat operand {} has size {} in dim {}, operand 0 has {}", i, m.sizes[d].str(), d,
                  first.sizes[d].str());
    want[dim] = want[dim] + m.sizes[dim];
    dtype = promoteTypes(dtype, m.dtype);
  }
  expectSameDevice(n);
  expectResultDType(n, dtype, "the promoted dtype of the operands");
  expectSizes(tensorResult(n).sizes, want, "operand sizes summed along dim");
}

void checkMatmul(const Node &n) {
  const TensorMeta &a = tensorOperand(n, 0), &b = tensorOperand(n, 1);
  if (a.rank() == 0 || b.rank() == 0)
    ruleFails("matmul needs operands of rank >= 1, got ranks {} and {}", a.rank(), b.rank());
  expectSameDType(n, 0, 1);
  expectSameDevice(n);
  const SymInt &ka = a.sizes.back();
  const SymInt &kb = b.rank() == 1 ? b.sizes[0] : b.sizes[b.rank() - 2];
  if (provablyDifferent(ka, kb))
    ruleFails("matmul shapes {} and {} cannot be multiplied ({} vs {})", shapeStr(a.sizes),
              shapeStr(b.sizes), ka.str(), kb.str());
  std::span<const SymInt> batchA(a.sizes.data(), a.rank() > 2 ? a.rank() - 2 : 0);
  std::span<const SymInt> batchB(b.sizes.data(), b.rank() > 2 ? b.rank() - 2 : 0);
  std::vector<SymInt> want = broadcastShapes({batchA, batchB});
  if (a.rank() > 1)
    want.push_back(a.sizes[a.rank() - 2]);
  if (b.rank() > 1)
    want.push_back(b.sizes.back());
  expectResultDType(n, a.dtype, "the operand dtype");
  expectSizes(tensorResult(n).sizes, want, "matmul of the operand shapes");
}

void checkLinear(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  if (x.rank() == 0 || w.rank() != 2)
    ruleFails("linear needs an input of rank >= 1 and a 2-d weight, got ranks {} and {}", x.rank(),
              w.rank());
  expectSameDType(n, 0, 1);
  if (n.numOperands() == 3) {
    expectSameDType(n, 0, 2);
    const TensorMeta &bias = tensorOperand(n, 2);
    if (bias.rank() != 1 || provablyDifferent(bias.sizes[0], w.sizes[0]))
      ruleFails("linear bias must have shape [{}], got {}", w.sizes[0].str(), shapeStr(bias.sizes));
  }
  expectSameDevice(n);
  if (provablyDifferent(x.sizes.back(), w.sizes[1]))
    ruleFails("linear input has {} features but the weight expects {}", x.sizes.back().str(),
              w.sizes[1].str());
  std::vector<SymInt> want(x.sizes.begin(), x.sizes.end() - 1);
  want.push_back(w.sizes[0]);
  expectResultDType(n, x.dtype, "the operand dtype");
  expectSizes(tensorResult(n).sizes, want, "input sizes with the last replaced by out_features");
}

void checkConv2d(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  if ((x.rank() != 3 && x.rank() != 4) || w.rank() != 4)
    ruleFails("conv2d needs a 3-d or 4-d input and a 4-d weight, got ranks {} and {}", x.rank(),
              w.rank());
  expectSameDType(n, 0, 1);
  if (n.numOperands() == 3)
    expectSameDType(n, 0, 2);
  for (std::string_view name : {"stride", "padding", "dilation"}) {
    if (const Attribute *a = n.attr(name); a && a->toInts().size() != 1 && a->toInts().size() != 2)
      ruleFails("conv2d '{}' needs 1 or 2 values, got {}", name, a->str());
  }
  if (intAttrOr(n, "groups", 1) < 1)
    ruleFails("conv2d groups must be >= 1, got {}", intAttrOr(n, "groups", 1));
  expectSameDevice(n);
  const TensorMeta &out = tensorResult(n);
  if (out.rank() != x.rank())
    ruleFails("conv2d result rank {} should equal the input rank {}", out.rank(), x.rank());
  if (provablyDifferent(out.sizes[x.rank() - 3], w.sizes[0]))
    ruleFails("conv2d result has {} channels but the weight has {} output channels",
              out.sizes[x.rank() - 3].str(), w.sizes[0].str());
  expectResultDType(n, x.dtype, "the operand dtype");
}

void checkAttention(const Node &n) {
  const TensorMeta &q = tensorOperand(n, 0), &k = tensorOperand(n, 1), &v = tensorOperand(n, 2);
  if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2)
    ruleFails("scaled_dot_product_attention needs query, key and value of rank >= 2");
  if (!isFloating(q.dtype))
    ruleFails("scaled_dot_product_attention needs a floating dtype, got {}",
              dtypeShortName(q.dtype));
  expectSameDType(n, 0, 1);
  expectSameDType(n, 0, 2);
  if (n.numOperands() == 4 && tensorOperand(n, 3).dtype != DType::Bool)
    expectSameDType(n, 0, 3);
  if (provablyDifferent(q.sizes.back(), k.sizes.back()))
    ruleFails("query has head size {} but key has {}", q.sizes.back().str(), k.sizes.back().str());
  expectSameDevice(n);
  std::vector<SymInt> want(q.sizes.begin(), q.sizes.end() - 1);
  want.push_back(v.sizes.back());
  expectResultDType(n, q.dtype, "the query dtype");
  expectSizes(tensorResult(n).sizes, want, "query sizes with the value head size");
}

void checkLayerNorm(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0);
  std::vector<SymInt> normalized = n.attr("normalized_shape")->toSymInts();
  if (!isFloating(x.dtype))
    ruleFails("layer_norm needs a floating input, got {}", dtypeShortName(x.dtype));
  if (static_cast<int64_t>(normalized.size()) > x.rank())
    ruleFails("normalized_shape {} has more dims than the input {}", shapeStr(normalized),
              shapeStr(x.sizes));
  size_t lead = x.sizes.size() - normalized.size();
  for (size_t i = 0; i < normalized.size(); ++i)
    if (provablyDifferent(normalized[i], x.sizes[lead + i]))
      ruleFails("normalized_shape {} does not match the trailing dims of input {}",
                shapeStr(normalized), shapeStr(x.sizes));
  for (int i = 1; i < n.numOperands(); ++i) {
    expectSameDType(n, 0, i);
    const TensorMeta &p = tensorOperand(n, i);
    bool ok = p.sizes.size() == normalized.size();
    for (size_t d = 0; ok && d < normalized.size(); ++d)
      ok = !provablyDifferent(p.sizes[d], normalized[d]);
    if (!ok)
      ruleFails("layer_norm {} has shape {}, expected normalized_shape {}",
                i == 1 ? "weight" : "bias", shapeStr(p.sizes), shapeStr(normalized));
  }
  expectSameDevice(n);
  expectResultDType(n, x.dtype, "the input dtype");
  expectSizes(tensorResult(n).sizes, x.sizes, "layer_norm keeps the input shape");
}

void checkEmbedding(const Node &n) {
  const TensorMeta &indices = tensorOperand(n, 0), &weight = tensorOperand(n, 1);
  if (indices.dtype != DType::Int64 && indices.dtype != DType::Int32)
    ruleFails("embedding indices (operand 0) must be i64 or i32, got {}",
              dtypeShortName(indices.dtype));
  if (weight.rank() != 2)
    ruleFails("embedding weight (operand 1) must be 2-d, got {}", shapeStr(weight.sizes));
  expectSameDevice(n);
  std::vector<SymInt> want = indices.sizes;
  want.push_back(weight.sizes[1]);
  expectResultDType(n, weight.dtype, "the weight dtype");
  expectSizes(tensorResult(n).sizes, want, "index sizes followed by the embedding size");
}

} // namespace kiln::ir::detail
