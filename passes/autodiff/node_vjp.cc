#include "passes/autodiff/node_vjp.h"

#include "autograd/derivatives_layout.h"
#include "autograd/derivatives_linalg.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::passes::autodiff {

namespace rules = autograd::rules;
using ir::OpKind;
using B = GraphRuleBuilder;
using V = ir::Value *;
using Grads = std::vector<V>;
using Info = rules::InputInfo<B>;

namespace {

Info info(V v) {
  if (!v->isTensor())
    return {{}, DType::Float64};
  return {B::sizes(v), B::dtype(v)};
}

double numberAttr(const ir::Node &n, std::string_view name, double fallback) {
  const ir::Attribute *a = n.attr(name);
  return a ? a->toDouble() : fallback;
}

int64_t intAttr(const ir::Node &n, std::string_view name, int64_t fallback) {
  const ir::Attribute *a = n.attr(name);
  return a ? a->toSymInt().constant().value_or(fallback) : fallback;
}

/// An attribute that must be a constant int when present (a symbolic slice bound is refused).
std::optional<int64_t> constantIntAttr(const ir::Node &n, std::string_view name) {
  const ir::Attribute *a = n.attr(name);
  if (!a)
    return std::nullopt;
  std::optional<int64_t> v = a->toSymInt().constant();
  if (!v)
    throw Unsupported(fmt::format("{}: attribute '{}' is symbolic", n.keyword(), name));
  return v;
}

B::DimList dimsAttr(const ir::Node &n) {
  const ir::Attribute *a = n.attr("dim");
  if (!a)
    return std::nullopt;
  std::vector<int64_t> dims = a->toInts();
  if (dims.empty())
    return std::nullopt;
  return dims;
}

/// The value of a `constant` scalar operand (the exponent of x ** 2).
std::optional<double> constantValue(V v) {
  const ir::Node *def = v->definingNode();
  if (def && def->op() == OpKind::Constant && !v->isTensor())
    return def->attr("value")->toDouble();
  return std::nullopt;
}

/// torch's slice bounds: negative from the end, clamped to [0, size].
int64_t clampBound(int64_t v, int64_t size) {
  if (v < 0)
    v += size;
  return std::clamp<int64_t>(v, 0, size);
}

/// torch's cross-entropy gradient for (N, C) logits and class indices, with class weights w and
/// label smoothing e: per valid row, softmax(x) * ((1 - e) * w[t] + e / C * sum(w)) minus
/// (1 - e) * w[t] * onehot(t) + e / C * w (w = 1 without weights); `mean` divides by the
/// valid rows' sum of w[t].
V crossEntropyRows(B &b, const ir::Node &n, V x, V target, V g);

int64_t elementsPerRow(const B::Sizes &xs);
V crossEntropyProbabilityRows(B &b, const ir::Node &n, V x, V target, V g, int64_t rows);

/// (N, C, d1, ..., dk) logits (segmentation, sequence models) are (N * d1 * ... * dk, C) rows
/// with the class dim moved last, as are probability targets; the rows' gradient is moved back.

V crossEntropyGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), target = n.operand(1);
  B::Sizes xs = B::sizes(x);
  if (xs.size() < 2)
    throw Unsupported("cross_entropy: compiled derivatives cover (N, C, ...) logits");
  const bool probabilities = !isIntegral(B::dtype(target), false);
  if (xs.size() == 2)
    return probabilities ? crossEntropyProbabilityRows(b, n, x, target, g, xs[0])
                         : crossEntropyRows(b, n, x, target, g);
  B::Sizes last = {0}; // the permutation moving the class dim last, and back
  for (int64_t d = 2; d < static_cast<int64_t>(xs.size()); ++d)
    last.push_back(d);
  last.push_back(1);
  B::Sizes back(xs.size());
  for (size_t d = 0; d < last.size(); ++d)
    back[static_cast<size_t>(last[d])] = static_cast<int64_t>(d);
  B::Sizes moved;
  for (int64_t d : last)
    moved.push_back(xs[static_cast<size_t>(d)]);
  V rows2d = b.reshape(b.permute(x, last), {-1, xs[1]});
  const ir::Attribute *red = n.attr("reduction");
  V gRows = red && red->toString() == "none" ? b.reshape(g, {-1}) : g;
  V grad = probabilities
               ? crossEntropyProbabilityRows(b, n, rows2d,
                                             b.reshape(b.permute(target, last), {-1, xs[1]}), gRows,
                                             elementsPerRow(xs))
               : crossEntropyRows(b, n, rows2d, b.reshape(target, {-1}), gRows);
  return b.permute(b.reshape(grad, moved), back);
}

/// Rows of the batch a mean over probability targets divides by: N, times the extra dims.
int64_t elementsPerRow(const B::Sizes &xs) {
  int64_t n = xs[0];
  for (size_t d = 2; d < xs.size(); ++d)
    n *= xs[d];
  return n;
}

/// Probability targets (mixup, CutMix, soft labels): the row loss is -sum_c a_c log_softmax(x)_c
/// with a = w * (p (1 - e) + e / C), so its gradient is softmax(x) * sum_c a_c - a; a mean
/// divides by the number of rows, whatever the weights.
V crossEntropyProbabilityRows(B &b, const ir::Node &n, V x, V target, V g, int64_t rows) {
  V weight = n.numOperands() > 2 ? n.operand(2) : nullptr;
  const int64_t classes = B::sizes(x)[1];
  const double smoothing = numberAttr(n, "label_smoothing", 0.0);
  const ir::Attribute *red = n.attr("reduction");
  const std::string reduction = red ? red->toString() : "mean";
  V a = b.cast(target, B::dtype(x));
  if (smoothing != 0.0)
    a = b.addScalar(b.scale(a, 1.0 - smoothing), smoothing / static_cast<double>(classes));
  if (weight)
    a = b.mul(a, b.unsqueeze(weight, 0));
  V total = b.sum(a, B::Sizes{1}, true);
  V grad = b.sub(b.mul(b.softmax(x, 1), total), a);
  if (reduction == "none")
    return b.mul(grad, b.unsqueeze(g, 1));
  if (reduction == "sum")
    return b.mul(grad, g);
  return b.mul(grad, b.scale(g, 1.0 / static_cast<double>(rows)));
}

V crossEntropyRows(B &b, const ir::Node &n, V x, V target, V g) {
  V weight = n.numOperands() > 2 ? n.operand(2) : nullptr;
  const int64_t classes = B::sizes(x)[1];
  const int64_t ignore = intAttr(n, "ignore_index", -100);
  const double smoothing = numberAttr(n, "label_smoothing", 0.0);
  const ir::Attribute *red = n.attr("reduction");
  const std::string reduction = red ? red->toString() : "mean";
  const DType dt = B::dtype(x);
  V valid = b.op(OpKind::Ne, {target, b.integer(ignore)});
  V safe = b.where(valid, target, b.integer(0));
  V onehot = b.cast(b.op(OpKind::OneHot, {safe}, {{"num_classes", classes}}), dt);
  // The weight of each row's class (1 without weights), zero on ignored rows.
  V rowWeight = b.cast(valid, dt);
  if (weight)
    rowWeight = b.mul(rowWeight, b.op(OpKind::IndexSelect, {weight, safe}, {{"dim", int64_t{0}}}));
  V want = b.mul(onehot, b.unsqueeze(rowWeight, 1));
  V scale = rowWeight;
  if (smoothing != 0.0) {
    V validRows = b.cast(valid, dt);
    V spread = b.unsqueeze(validRows, 1); // e / C of every class's weight, on valid rows
    V smoothed = validRows;               // e / C * sum(w) on valid rows: e without weights
    if (weight) {
      spread = b.mul(spread, b.unsqueeze(weight, 0));
      smoothed = b.mul(validRows, b.scale(b.sum(weight, std::nullopt, false), 1.0 / classes));
    }
    want = b.add(b.scale(want, 1.0 - smoothing), b.scale(spread, smoothing / classes));
    scale = b.add(b.scale(rowWeight, 1.0 - smoothing), b.scale(smoothed, smoothing));
  }
  V rows = b.sub(b.mul(b.softmax(x, 1), b.unsqueeze(scale, 1)), want);
  if (reduction == "none")
    return b.mul(rows, b.unsqueeze(g, 1));
  if (reduction == "sum")
    return b.mul(rows, g);
  V count = b.sum(rowWeight, std::nullopt, false);
  return b.mul(rows, b.div(g, count));
}

} // namespace

Differentiability differentiability(ir::OpKind op) {
  switch (op) {
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Pow:
  case OpKind::Maximum:
  case OpKind::Minimum:
  case OpKind::Where:
  case OpKind::MaskedFill:
  case OpKind::Neg:
  case OpKind::Abs:
  case OpKind::Exp:
  case OpKind::Log:
  case OpKind::Log1p:
  case OpKind::Expm1:
  case OpKind::Sqrt:
  case OpKind::Rsqrt:
  case OpKind::Reciprocal:
  case OpKind::Tanh:
  case OpKind::Sigmoid:
  case OpKind::Erf:
  case OpKind::Erfc:
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Relu:
  case OpKind::Gelu:
  case OpKind::Silu:
  case OpKind::Softplus:
  case OpKind::LeakyRelu:
  case OpKind::Elu:
  case OpKind::Hardtanh:
  case OpKind::Clamp:
  case OpKind::Cast:
  case OpKind::Contiguous:
  case OpKind::Sum:
  case OpKind::Mean:
  case OpKind::Amax:
  case OpKind::Amin:
  case OpKind::Softmax:
  case OpKind::LogSoftmax:
  case OpKind::View:
  case OpKind::Reshape:
  case OpKind::Permute:
  case OpKind::Transpose:
  case OpKind::Expand:
  case OpKind::Unsqueeze:
  case OpKind::Squeeze:
  case OpKind::Slice:
  case OpKind::Select:
  case OpKind::Cat:
  case OpKind::Matmul:
  case OpKind::Linear:
  case OpKind::LayerNorm:
  case OpKind::Embedding:
  case OpKind::CrossEntropy:
  case OpKind::Dropout:
  case OpKind::Conv2d:
  case OpKind::Conv3d:
  case OpKind::MaxPool2d:
  case OpKind::AvgPool2d:
  case OpKind::AdaptiveAvgPool2d:
  case OpKind::ScaledDotProductAttention:
  case OpKind::ConvTranspose1d:
  case OpKind::ConvTranspose2d:
  case OpKind::ConvTranspose3d:
  case OpKind::BatchNorm:
  case OpKind::LinalgSolve:
  case OpKind::LinalgSolveTriangular:
  case OpKind::LinalgCholesky:
  case OpKind::LinalgLogabsdet:
  case OpKind::LinalgEighPacked:
    return Differentiability::Rule;
  case OpKind::Input: // leaves: what flows into them is the caller's business
  case OpKind::Constant:
  case OpKind::Weight:
    return Differentiability::Constant;
  default:
    break;
  }
  // The op table says which ops never carry gradients (ir/ops.def, NoGradient).
  for (ir::OpTraits t : {ir::trait::NoGradient, ir::trait::Comparison, ir::trait::Integral})
    if (ir::hasTrait(op, t))
      return Differentiability::Constant;
  return hasExtraVjp(op) || hasLayoutVjp(op) ? Differentiability::Rule : Differentiability::Missing;
}

Grads nodeVjp(B &b, const ir::Node &n, V g, rules::Needs need) {
  auto in = [&](int i) { return n.operand(i); };
  V out = n.result(0);
  auto one = [&](V v) { return Grads{v}; };
  switch (n.op()) {
  case OpKind::Add:
    return rules::add(b, g, info(in(0)), info(in(1)), 1.0, need);
  case OpKind::Sub:
    return rules::add(b, g, info(in(0)), info(in(1)), -1.0, need);
  case OpKind::Mul:
    return rules::mul(b, g, in(0), in(1), need);
  case OpKind::Div:
    if (n.attr("rounding_mode"))
      return Grads(2); // floor/trunc division: zero almost everywhere, as torch says
    return rules::div(b, g, in(0), in(1), need);
  case OpKind::Pow: {
    if (!in(1)->isTensor()) {
      std::optional<double> s = constantValue(in(1));
      if (!s)
        throw Unsupported("pow: the exponent is a graph scalar, not a constant");
      return Grads{b.reduceTo(rules::powScalar(b, g, in(0), *s), B::sizes(in(0)), B::dtype(in(0))),
                   nullptr};
    }
    if (!in(0)->isTensor())
      throw Unsupported("pow: a number base has no compiled derivative yet");
    return rules::pow(b, g, in(0), in(1), out, need);
  }
  case OpKind::Maximum:
  case OpKind::Minimum:
    return rules::maximum(b, g, in(0), in(1), n.op() == OpKind::Maximum, need);
  case OpKind::Where:
    return rules::where(b, g, in(0), info(in(1)), info(in(2)), need);
  case OpKind::MaskedFill:
    return rules::maskedFill(b, g, in(1), info(in(0)), info(in(2)), need);
  case OpKind::Neg:
    return one(rules::neg(b, g));
  case OpKind::Abs:
    return one(rules::abs(b, g, in(0)));
  case OpKind::Exp:
    return one(rules::exp(b, g, out));
  case OpKind::Log:
    return one(rules::log(b, g, in(0)));
  case OpKind::Log1p:
    return one(rules::log1p(b, g, in(0)));
  case OpKind::Expm1:
    return one(rules::expm1(b, g, out));
  case OpKind::Sqrt:
    return one(rules::sqrt(b, g, out));
  case OpKind::Rsqrt:
    return one(rules::rsqrt(b, g, out));
  case OpKind::Reciprocal:
    return one(rules::reciprocal(b, g, out));
  case OpKind::Tanh:
    return one(rules::tanh(b, g, out));
  case OpKind::Sigmoid:
    return one(rules::sigmoid(b, g, out));
  case OpKind::Erf:
    return one(rules::erf(b, g, in(0)));
  case OpKind::Erfc:
    return one(rules::erfc(b, g, in(0)));
  case OpKind::Sin:
    return one(rules::sin(b, g, in(0)));
  case OpKind::Cos:
    return one(rules::cos(b, g, in(0)));
  case OpKind::Relu:
    return one(rules::relu(b, g, out));
  case OpKind::Gelu: {
    const ir::Attribute *a = n.attr("approximate");
    return one(rules::gelu(b, g, in(0), a && a->toString() == "tanh"));
  }
  case OpKind::Silu:
    return one(rules::silu(b, g, in(0)));
  case OpKind::Softplus:
    return one(
        rules::softplus(b, g, in(0), numberAttr(n, "beta", 1.0), numberAttr(n, "threshold", 20.0)));
  case OpKind::LeakyRelu:
    return one(rules::leakyRelu(b, g, in(0), numberAttr(n, "negative_slope", 0.01)));
  case OpKind::Elu:
    return one(rules::elu(b, g, in(0), out, numberAttr(n, "alpha", 1.0),
                          numberAttr(n, "scale", 1.0), numberAttr(n, "input_scale", 1.0)));
  case OpKind::Hardtanh:
    return one(rules::hardtanh(b, g, in(0), numberAttr(n, "min_val", -1.0),
                               numberAttr(n, "max_val", 1.0)));
  case OpKind::Clamp: { // number bounds (attributes): only x gets a gradient
    auto bound = [&](const char *name) -> std::optional<V> {
      if (const ir::Attribute *a = n.attr(name))
        return b.number(a->toDouble());
      return std::nullopt;
    };
    return one(rules::clamp(b, g, in(0), bound("min"), bound("max"), rules::Needs{1, {}})[0]);
  }
  case OpKind::Cast:
  case OpKind::Contiguous:
    return one(b.cast(g, B::dtype(in(0))));
  case OpKind::Sum:
    return one(rules::sum(b, g, info(in(0)), dimsAttr(n),
                          n.attr("keepdim") && n.attr("keepdim")->toBool()));
  case OpKind::Mean: {
    B::DimList dims = dimsAttr(n);
    Info x = info(in(0));
    return one(rules::mean(b, g, x, dims, n.attr("keepdim") && n.attr("keepdim")->toBool(),
                           reducedCount(x.sizes, dims)));
  }
  case OpKind::Amax:
  case OpKind::Amin:
    return one(rules::amax(b, g, in(0), out, dimsAttr(n),
                           n.attr("keepdim") && n.attr("keepdim")->toBool()));
  case OpKind::Softmax:
    return one(b.cast(rules::softmax(b, g, out, n.attr("dim")->toInt()), B::dtype(in(0))));
  case OpKind::LogSoftmax:
    return one(b.cast(rules::logSoftmax(b, g, out, n.attr("dim")->toInt()), B::dtype(in(0))));
  case OpKind::View:
  case OpKind::Reshape:
  case OpKind::Squeeze:
    return one(b.reshape(g, B::sizes(in(0))));
  case OpKind::Permute: {
    std::vector<int64_t> dims = n.attr("dims")->toInts();
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<int64_t> inverse(dims.size());
    for (int64_t i = 0; i < rank; ++i)
      inverse[wrapDim(dims[i], rank)] = i;
    return one(b.permute(g, inverse));
  }
  case OpKind::Transpose:
    return one(b.transpose(g, n.attr("dim0")->toInt(), n.attr("dim1")->toInt()));
  case OpKind::Expand:
    return one(b.reduceTo(g, B::sizes(in(0)), B::dtype(in(0))));
  case OpKind::Unsqueeze:
    return one(b.squeezeDim(g, wrapDim(n.attr("dim")->toInt(), out->meta().rank())));
  case OpKind::Slice: {
    B::Sizes xs = B::sizes(in(0));
    const int64_t dim = wrapDim(intAttr(n, "dim", 0), static_cast<int64_t>(xs.size()));
    const int64_t size = xs[dim];
    const int64_t start = clampBound(constantIntAttr(n, "start").value_or(0), size);
    const int64_t end = clampBound(constantIntAttr(n, "end").value_or(size), size);
    return one(b.sliceBackward(g, xs, dim, start, std::max(start, end), intAttr(n, "step", 1)));
  }
  case OpKind::Select: {
    B::Sizes xs = B::sizes(in(0));
    const int64_t dim = wrapDim(n.attr("dim")->toInt(), static_cast<int64_t>(xs.size()));
    int64_t index = *constantIntAttr(n, "index");
    if (index < 0)
      index += xs[dim];
    return one(b.sliceBackward(b.unsqueeze(g, dim), xs, dim, index, index + 1, 1));
  }
  case OpKind::Cat: {
    const int64_t dim = wrapDim(intAttr(n, "dim", 0), out->meta().rank());
    std::vector<rules::CatPiece> pieces;
    int64_t offset = 0;
    for (int i = 0; i < n.numOperands(); ++i) {
      const int64_t len = B::sizes(in(i))[dim];
      pieces.push_back({offset, len, B::dtype(in(i))});
      offset += len;
    }
    return rules::cat(b, g, dim, pieces, need);
  }
  case OpKind::Matmul:
    return rules::matmul(b, g, in(0), in(1), need);
  case OpKind::LinalgSolve:
    return rules::linalgSolve(b, g, in(0), info(in(1)), out, need);
  case OpKind::LinalgSolveTriangular:
    return rules::linalgSolveTriangular(
        b, g, in(0), info(in(1)), out, n.attr("upper")->toBool(),
        n.attr("unitriangular") && n.attr("unitriangular")->toBool(), need);
  case OpKind::LinalgCholesky:
    return one(rules::linalgCholesky(b, g, out));
  case OpKind::LinalgLogabsdet:
    return one(rules::linalgLogabsdet(b, g, in(0)));
  case OpKind::LinalgEighPacked:
    return one(rules::linalgEighPacked(b, g, out));
  case OpKind::Linear: {
    std::optional<Info> bias;
    if (n.numOperands() > 2)
      bias = info(in(2));
    return rules::linear(b, g, in(0), in(1), B::sizes(in(1)), bias, need);
  }
  case OpKind::LayerNorm: {
    std::optional<V> w;
    std::optional<Info> bias;
    if (n.numOperands() > 1)
      w = in(1);
    if (n.numOperands() > 2)
      bias = info(in(2));
    const int64_t normDims = static_cast<int64_t>(n.attr("normalized_shape")->toSymInts().size());
    return rules::layerNorm(b, g, in(0), w, bias, normDims, numberAttr(n, "eps", 1e-5), need);
  }
  case OpKind::Embedding: {
    if (!need[1])
      return Grads(2);
    std::optional<int64_t> pad;
    const B::Sizes ws = B::sizes(in(1));
    if (const ir::Attribute *p = n.attr("padding_idx"))
      pad = p->toInt() < 0 ? p->toInt() + ws[0] : p->toInt();
    return Grads{nullptr, rules::embedding(b, g, b.reshape(in(0), {-1}), ws, pad)};
  }
  case OpKind::CrossEntropy:
    if (need[1])
      throw Unsupported("cross_entropy: the gradient of probability targets");
    if (n.numOperands() > 2 && need[2])
      throw Unsupported("cross_entropy: the gradient of the class weights");
    return Grads{need[0] ? crossEntropyGrad(b, n, g) : nullptr, nullptr, nullptr};
  case OpKind::Conv2d:
    return convolutionVjp(b, n, g, need);
  case OpKind::Conv3d:
    return conv3dVjp(b, n, g, need);
  case OpKind::MaxPool2d:
    return maxPoolVjp(b, n, g);
  case OpKind::AvgPool2d:
    return avgPoolVjp(b, n, g);
  case OpKind::AdaptiveAvgPool2d:
    return adaptiveAvgPoolVjp(b, n, g);
  case OpKind::ScaledDotProductAttention:
    return attentionVjp(b, n, g, need);
  case OpKind::ConvTranspose1d:
  case OpKind::ConvTranspose2d:
  case OpKind::ConvTranspose3d:
    return convTransposeVjp(b, n, g, need);
  case OpKind::BatchNorm:
    return batchNormVjp(b, n, g, need);
  case OpKind::Dropout: // the same counters draw the same mask
    return Grads{b.op(OpKind::Dropout, {g, in(1)}, {{"p", n.attr("p")->toDouble()}}), nullptr};
  default:
    break;
  }
  if (std::optional<Grads> r = extraVjp(b, n, g, need))
    return *r;
  if (std::optional<Grads> r = layoutVjp(b, n, g, need))
    return *r;
  throw Unsupported(fmt::format("'{}' has no compiled derivative yet", n.keyword()));
}

} // namespace kiln::passes::autodiff
