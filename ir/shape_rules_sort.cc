// Shape rules of the ops run by eager's kernels as externs: scans, sorts, scatters and upsamples
// (see ops.def), with eager kiln's conditions and words.

#include "ir/shape_rules_sort_impl.h"
#include "ir/verifier_impl.h"

#include <algorithm>

namespace kiln::ir::detail {

namespace {

/// The dim attribute wrapped against `rank` (a 0-d input counts as 1-d, as eager's).
int64_t sortDim(const Node &n, const TensorMeta &in) {
  const Attribute *d = n.attr("dim");
  return wrapDim(d ? d->toInt() : -1, std::max<int64_t>(1, in.rank()), "dim");
}

/// A scatter's result: input's type, after the index and source checks eager makes up front.
TensorMeta scatterType(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0), &index = tensorOperand(n, 1),
                   &src = tensorOperand(n, 2);
  std::string_view op = n.keyword();
  int64_t rank = std::max<int64_t>(1, in.rank());
  int64_t dim = wrapDim(n.attr("dim")->toInt(), rank, "dim");
  bool indexPut = n.op() == OpKind::IndexPut;
  if (index.dtype != DType::Int64 && !(indexPut && index.dtype == DType::Int32))
    ruleFails("{}(): Expected dtype int64 for index", op);
  if (n.op() == OpKind::Scatter || n.op() == OpKind::ScatterAdd ||
      n.op() == OpKind::ScatterReduce) {
    if (std::max<int64_t>(1, index.rank()) != rank || std::max<int64_t>(1, src.rank()) != rank)
      ruleFails("{}(): Index tensor must have the same number of dimensions as self tensor", op);
    if (src.dtype != in.dtype)
      ruleFails("{}(): Expected self.dtype to be equal to src.dtype", op);
    const Attribute *r = n.attr("reduce");
    if (n.op() == OpKind::ScatterReduce) {
      const std::string reduce = r->toString();
      if (reduce != "sum" && reduce != "prod" && reduce != "mean" && reduce != "amax" &&
          reduce != "amin")
        ruleFails("{}(): reduce argument must be either sum, prod, mean, amax or amin, got {}", op,
                  reduce);
    } else if (r && r->toString() != "add" && r->toString() != "multiply") {
      ruleFails("{}(): reduce argument must be either add or multiply, got {}", op, r->toString());
    }
  } else if (n.op() == OpKind::IndexAdd) {
    if (index.rank() > 1)
      ruleFails("index_add_(): Index is supposed to be a vector");
    if (src.dtype != in.dtype)
      ruleFails("index_add_(): self ({}) and source ({}) must have the same scalar type",
                dtypeShortName(in.dtype), dtypeShortName(src.dtype));
  }
  return TensorMeta::contiguous(in.dtype, in.sizes, in.device);
}

/// im2col / col2im sizes (eager's rules; a rank the op refuses is a rule failure).
TensorMeta foldType(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  auto two = [&](const char *name) {
    std::vector<int64_t> v = n.attr(name)->toInts();
    if (v.size() != 2)
      ruleFails("{}: {} must hold two values, got {}", n.keyword(), name, v.size());
    return v;
  };
  std::vector<int64_t> k = two("kernel_size"), d = two("dilation"), p = two("padding"),
                       s = two("stride");
  bool unfold = n.op() == OpKind::Unfold;
  if (in.rank() != (unfold ? 4 : 3))
    ruleFails("{}: expected a {}-d input, got {}", n.keyword(), unfold ? 4 : 3, in.rank());
  std::optional<int64_t> c = in.sizes[1].constant();
  std::vector<SymInt> sizes{in.sizes[0]};
  std::vector<int64_t> spatial = unfold ? std::vector<int64_t>{} : two("output_size");
  int64_t blocks = 1;
  for (int a = 0; a < 2; ++a) {
    std::optional<int64_t> extent =
        unfold ? in.sizes[2 + a].constant() : std::optional<int64_t>(spatial[a]);
    if (!extent)
      ruleFails("{}: symbolic spatial sizes", n.keyword());
    int64_t count = (*extent + 2 * p[a] - d[a] * (k[a] - 1) - 1) / s[a] + 1;
    if (count <= 0)
      ruleFails("{}: the blocks do not fit the input", n.keyword());
    blocks *= count;
  }
  if (unfold) {
    sizes.push_back(c ? SymInt(*c * k[0] * k[1]) : in.sizes[1] * SymInt(k[0] * k[1]));
    sizes.emplace_back(blocks);
  } else {
    if (!c || *c % (k[0] * k[1]))
      ruleFails("fold: the channels are not a constant multiple of the kernel size");
    if (std::optional<int64_t> l = in.sizes[2].constant(); !l || *l != blocks)
      ruleFails("fold: expected {} blocks, got {}", blocks, in.sizes[2].str());
    sizes.emplace_back(*c / (k[0] * k[1]));
    sizes.emplace_back(spatial[0]);
    sizes.emplace_back(spatial[1]);
  }
  return TensorMeta::contiguous(in.dtype, sizes, in.device);
}

/// conv_transpose2d's result: (N, C_out, H', W') of the input's dtype.
TensorMeta convTransposeType(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  std::string_view op = n.keyword();
  const int64_t spatial = n.op() == OpKind::ConvTranspose1d   ? 1
                          : n.op() == OpKind::ConvTranspose2d ? 2
                                                              : 3;
  if (in.rank() != spatial + 2 || w.rank() != spatial + 2)
    ruleFails("{}: expected a {}-d input and weight, got {} and {}", op, spatial + 2, in.rank(),
              w.rank());
  if (w.dtype != in.dtype)
    ruleFails("{}: weight of dtype {} for an input of {}", op, dtypeShortName(w.dtype),
              dtypeShortName(in.dtype));
  const Attribute *g = n.attr("groups");
  int64_t groups = g ? g->toInt() : 1;
  std::optional<int64_t> cin = in.sizes[1].constant(), wc = w.sizes[0].constant();
  if (cin && wc && *cin != *wc)
    ruleFails("{}: input of {} channels for a weight of {}", op, *cin, *wc);
  for (const char *name : {"stride", "padding", "output_padding", "dilation"})
    if (static_cast<int64_t>(n.attr(name)->toInts().size()) != spatial)
      ruleFails("{}: {} must hold {} values", op, name, spatial);
  std::vector<SymInt> sizes{in.sizes[0], w.sizes[1] * SymInt(groups)};
  for (int64_t a = 0; a < spatial; ++a) {
    std::optional<int64_t> k = w.sizes[2 + a].constant();
    if (!k)
      ruleFails("{}: a symbolic kernel size", op);
    auto at = [&](const char *name) { return n.attr(name)->toInts().at(a); };
    sizes.push_back(
        (in.sizes[2 + a] - SymInt(1)) * SymInt(at("stride")) +
        SymInt(at("dilation") * (*k - 1) + at("output_padding") + 1 - 2 * at("padding")));
  }
  return TensorMeta::contiguous(in.dtype, sizes, in.device);
}

/// An upsample's result: [N, C, *output_size] of the input's dtype.
TensorMeta upsampleType(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  std::vector<SymInt> out = n.attr("output_size")->toSymInts();
  if (in.rank() < 3 || in.rank() > 5 || static_cast<int64_t>(out.size()) != in.rank() - 2)
    ruleFails("{}: expected a 3-d to 5-d input with one output size per spatial dim (got input "
              "{} and output_size of {})",
              n.keyword(), printSizes(in.sizes), out.size());
  std::vector<SymInt> sizes(in.sizes.begin(), in.sizes.begin() + 2);
  for (const SymInt &s : out) {
    if (std::optional<int64_t> c = s.constant(); c && *c <= 0)
      ruleFails("{}: output sizes should be greater than 0, but got {}", n.keyword(), *c);
    sizes.push_back(s);
  }
  return TensorMeta::contiguous(in.dtype, sizes, in.device);
}

} // namespace

bool isScanOrSortOp(OpKind op) {
  switch (op) {
  case OpKind::UpsampleNearest:
  case OpKind::UpsampleLinear:
  case OpKind::Cumsum:
  case OpKind::Cumprod:
  case OpKind::CumprodBackward:
  case OpKind::Argsort:
  case OpKind::TopkIndices:
  case OpKind::Logcumsumexp:
  case OpKind::SelectionIndices:
  case OpKind::Unfold:
  case OpKind::Fold:
  case OpKind::ConvTranspose1d:
  case OpKind::ConvTranspose2d:
  case OpKind::ConvTranspose3d:
  case OpKind::Scatter:
  case OpKind::ScatterAdd:
  case OpKind::ScatterReduce:
  case OpKind::IndexAdd:
  case OpKind::IndexPut:
    return true;
  default:
    return isLinalgOp(op);
  }
}

TensorMeta scanOrSortType(const Node &n) {
  if (isLinalgOp(n.op()))
    return linalgType(n);
  const TensorMeta &in = tensorOperand(n, 0);
  switch (n.op()) {
  case OpKind::Scatter:
  case OpKind::ScatterAdd:
  case OpKind::ScatterReduce:
  case OpKind::IndexAdd:
  case OpKind::IndexPut:
    return scatterType(n);
  case OpKind::UpsampleNearest:
  case OpKind::UpsampleLinear:
    return upsampleType(n);
  case OpKind::Unfold:
  case OpKind::Fold:
    return foldType(n);
  case OpKind::ConvTranspose1d:
  case OpKind::ConvTranspose2d:
  case OpKind::ConvTranspose3d:
    return convTransposeType(n);
  default:
    break;
  }
  int64_t dim = sortDim(n, in);
  switch (n.op()) {
  case OpKind::Cumsum:
  case OpKind::Cumprod: {
    const Attribute *d = n.attr("dtype");
    DType dtype = d ? d->toDType() : isFloating(in.dtype) ? in.dtype : DType::Int64;
    return TensorMeta::contiguous(dtype, in.sizes, in.device);
  }
  case OpKind::Argsort:
    return TensorMeta::contiguous(DType::Int64, in.sizes, in.device);
  case OpKind::CumprodBackward:
    return TensorMeta::contiguous(in.dtype, in.sizes, in.device);
  case OpKind::Logcumsumexp:
    if (!isFloating(in.dtype))
      ruleFails("logcumsumexp: not implemented for {}", dtypeShortName(in.dtype));
    return TensorMeta::contiguous(in.dtype, in.sizes, in.device);
  case OpKind::SelectionIndices: {
    std::string kind = n.attr("kind")->toString();
    if (kind == "cummax" || kind == "cummin")
      return TensorMeta::contiguous(DType::Int64, in.sizes, in.device);
    if (kind != "kthvalue" && kind != "median" && kind != "nanmedian" && kind != "mode")
      ruleFails("selection_indices: unknown kind \"{}\"", kind);
    const Attribute *keep = n.attr("keepdim");
    std::vector<SymInt> sizes = in.sizes;
    if (in.rank() > 0) {
      if (keep && keep->toBool())
        sizes[dim] = 1;
      else
        sizes.erase(sizes.begin() + dim);
    }
    return TensorMeta::contiguous(DType::Int64, sizes, in.device);
  }
  default: {
    int64_t k = n.attr("k")->toInt();
    SymInt size = in.rank() == 0 ? SymInt(1) : in.sizes[dim];
    std::optional<int64_t> c = size.constant();
    if (k < 0 || (c && k > *c))
      ruleFails("topk: selected index k out of range (k = {}, size {})", k, size.str());
    std::vector<SymInt> sizes = in.sizes;
    if (in.rank() > 0)
      sizes[dim] = k;
    return TensorMeta::contiguous(DType::Int64, sizes, in.device);
  }
  }
}

void checkScanOrSort(const Node &n) {
  TensorMeta want = scanOrSortType(n);
  expectSameDevice(n);
  expectResultDType(n, want.dtype, "the op's rule");
  expectSizes(tensorResult(n).sizes, want.sizes, "the op's rule");
}

} // namespace kiln::ir::detail
