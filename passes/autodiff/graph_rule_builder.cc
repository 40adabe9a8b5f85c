#include "passes/autodiff/graph_rule_builder.h"

#include "autograd/derivatives.h"

#include <fmt/format.h>

namespace kiln::passes::autodiff {

GraphRuleBuilder::Sizes GraphRuleBuilder::sizes(Value v) {
  Sizes out;
  for (const ir::SymInt &s : v->meta().sizes) {
    if (!s.isConstant())
      throw Unsupported(fmt::format("a size of {} is symbolic ({}): compiled derivatives "
                                    "specialize sizes",
                                    ir::printType(v->type()), s.str()));
    out.push_back(*s.constant());
  }
  return out;
}

DType GraphRuleBuilder::dtype(Value v) { return v->meta().dtype; }

GraphRuleBuilder::Value GraphRuleBuilder::op(ir::OpKind kind, std::vector<Value> operands,
                                             ir::Attributes attrs) {
  return g_.add(kind, std::move(operands), std::move(attrs), loc_).at(0);
}

GraphRuleBuilder::Value GraphRuleBuilder::number(double v) {
  return g_
      .add(ir::OpKind::Constant, {}, {{"value", v}}, loc_,
           std::vector<ir::ValueType>{ir::ScalarType::Float})
      .at(0);
}

GraphRuleBuilder::Value GraphRuleBuilder::integer(int64_t v) {
  return g_
      .add(ir::OpKind::Constant, {}, {{"value", v}}, loc_,
           std::vector<ir::ValueType>{ir::ScalarType::Int})
      .at(0);
}

GraphRuleBuilder::Value GraphRuleBuilder::cast(Value a, DType dtype) {
  if (a->meta().dtype == dtype)
    return a;
  return op(ir::OpKind::Cast, {a}, {{"dtype", dtype}});
}

GraphRuleBuilder::Value GraphRuleBuilder::zeros(const Sizes &sizes, DType dtype) {
  std::vector<ir::SymInt> size(sizes.begin(), sizes.end());
  return op(ir::OpKind::Full, {}, {{"size", size}, {"dtype", dtype}, {"value", 0.0}});
}

GraphRuleBuilder::Value GraphRuleBuilder::sum(Value a, const DimList &dims, bool keepdim) {
  ir::Attributes attrs{{"keepdim", keepdim}};
  if (dims && !dims->empty())
    attrs["dim"] = *dims;
  return op(ir::OpKind::Sum, {a}, std::move(attrs));
}

GraphRuleBuilder::Value GraphRuleBuilder::reduceTo(Value g, const Sizes &target, DType dtype) {
  Sizes gs = sizes(g);
  if (gs == target)
    return cast(g, dtype);
  Sizes dims = autograd::rules::broadcastDims(gs, target);
  Value s = dims.empty() ? g : sum(g, dims, true);
  return cast(reshape(s, target), dtype);
}

GraphRuleBuilder::Value GraphRuleBuilder::unsqueezeReduced(Value g, const DimList &dims,
                                                           int64_t rank) {
  if (!dims || dims->empty())
    return reshape(g, Sizes(rank, 1));
  Value r = g;
  for (int64_t d : autograd::rules::sortedReducedDims(dims, rank))
    r = unsqueeze(r, d);
  return r;
}

GraphRuleBuilder::Value GraphRuleBuilder::expand(Value a, const Sizes &target) {
  if (sizes(a) == target)
    return a;
  std::vector<ir::SymInt> size(target.begin(), target.end());
  return op(ir::OpKind::Expand, {a}, {{"size", size}});
}

GraphRuleBuilder::Value GraphRuleBuilder::reshape(Value a, const Sizes &target) {
  if (sizes(a) == target)
    return a;
  std::vector<ir::SymInt> shape(target.begin(), target.end());
  return op(ir::OpKind::Reshape, {a}, {{"shape", shape}});
}

GraphRuleBuilder::Value GraphRuleBuilder::slice(Value a, int64_t dim, int64_t start, int64_t end,
                                                int64_t step) {
  return op(ir::OpKind::Slice, {a}, {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
}

GraphRuleBuilder::Value GraphRuleBuilder::select(Value a, int64_t dim, int64_t index) {
  return op(ir::OpKind::Select, {a}, {{"dim", dim}, {"index", index}});
}

GraphRuleBuilder::Value GraphRuleBuilder::sliceBackward(Value g, const Sizes &target, int64_t dim,
                                                        int64_t start, int64_t end, int64_t step) {
  return op(ir::OpKind::SliceScatter, {zeros(target, dtype(g)), g},
            {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
}

GraphRuleBuilder::Value GraphRuleBuilder::scatterAdd(const Sizes &target, int64_t dim, Value index,
                                                     Value src) {
  return op(ir::OpKind::ScatterAdd, {zeros(target, dtype(src)), index, src}, {{"dim", dim}});
}

GraphRuleBuilder::Value GraphRuleBuilder::indexAdd(const Sizes &target, int64_t dim, Value index,
                                                   Value src) {
  return op(ir::OpKind::IndexAdd, {zeros(target, dtype(src)), index, src}, {{"dim", dim}});
}

} // namespace kiln::passes::autodiff
