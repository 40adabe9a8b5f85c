// The eager kernels of the op table's elementwise rows. Each entry reads its arguments by their
// position in the row's schema (ir/ops.def); the binding generator has already checked their
// types, applied the defaults and, for an in-place spelling, put the operand in argument 0.
#include "frontend/csrc/eager_kernels.h"

#include "frontend/csrc/py_convert.h"

#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/linalg.h"

#include <fmt/format.h>

#include <algorithm>

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

using ir::OpKind;
using UnaryFn = Tensor (*)(const Tensor &);
using BinaryFn = Tensor (*)(const Tensor &, const Tensor &);

template <UnaryFn F> Tensor unary(const BoundArgs &a) { return F(a.tensor(0)); }
template <BinaryFn F> Tensor binary(const BoundArgs &a) { return F(a.tensor(0), a.tensor(1)); }

void warn(const std::string &message) {
  // Level 1 is the caller's frame: the C function has none of its own.
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) < 0)
    throw py::error_already_set();
}

/// fill_'s value: torch rejects Python numbers the dtype cannot hold (uint8.fill_(-2.5),
/// half.fill_(1e10)).
Scalar fillValue(const Tensor &self, const BoundArgs &a) {
  Scalar value = a.scalar(1);
  if (!isTensor(a.get(1)))
    ops::checkFits(value, self.dtype(), "fill_", true);
  return value;
}

/// torch's loss reduction from `reduction`, or from the deprecated size_average/reduce flags
/// (with torch's warning) when either is given.
ops::Reduction lossReduction(const BoundArgs &a, int sizeAverage, int reduce, int reduction) {
  std::string r = a.str(reduction);
  if (!a.isNone(sizeAverage) || !a.isNone(reduce)) {
    warn("size_average and reduce args will be deprecated, please use reduction= instead.");
    bool average = a.isNone(sizeAverage) || a.toBool(sizeAverage);
    bool reduced = a.isNone(reduce) || a.toBool(reduce);
    r = !reduced ? "none" : average ? "mean" : "sum";
  }
  if (r == "none")
    return ops::Reduction::None;
  if (r == "mean")
    return ops::Reduction::Mean;
  KILN_CHECK_KIND(Value, r == "sum", "{} is not a valid value for reduction", r);
  return ops::Reduction::Sum;
}

std::string sizeText(const Tensor &t) {
  std::string dims;
  for (int64_t d : t.sizes())
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return "kiln.Size([" + dims + "])";
}

/// The elementwise losses broadcast a target of another shape, with torch's warning.
void warnSizeMismatch(const Tensor &input, const Tensor &target) {
  if (input.sizes() != target.sizes())
    warn(fmt::format("Using a target size ({}) that is different to the input size ({}). This "
                     "will likely lead to incorrect results due to broadcasting. Please ensure "
                     "they have the same size.",
                     sizeText(target), sizeText(input)));
}

/// F.softmax's dim; dim=None is torch's deprecated implicit choice, with its warning
/// at the caller's line (`_stacklevel` counts the Python frames of torch's wrapper).
int64_t softmaxDim(const BoundArgs &a, const char *name) {
  if (!a.isNone(1))
    return a.toInt(1);
  int64_t ndim = a.tensor(0).dim();
  std::string message = fmt::format("Implicit dimension choice for {} has been deprecated. Change "
                                    "the call to include dim=X as an argument.",
                                    name);
  int stacklevel = static_cast<int>(std::max<int64_t>(1, a.toInt(2) - 2));
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), stacklevel) < 0)
    throw py::error_already_set();
  return ndim == 0 || ndim == 1 || ndim == 3 ? 0 : 1;
}

// clang-format off
const EagerKernel kKernels[] = {
    {OpKind::Neg, "neg", unary<&ops::neg>},
    {OpKind::Abs, "abs", unary<&ops::abs>},
    {OpKind::Exp, "exp", unary<&ops::exp>},
    {OpKind::Log, "log", unary<&ops::log>},
    {OpKind::Sqrt, "sqrt", unary<&ops::sqrt>},
    {OpKind::Rsqrt, "rsqrt", unary<&ops::rsqrt>},
    {OpKind::Tanh, "tanh", unary<&ops::tanh>},
    {OpKind::Sigmoid, "sigmoid", unary<&ops::sigmoid>},
    {OpKind::Erf, "erf", unary<&ops::erf>},
    {OpKind::Erfc, "erfc", unary<&ops::erfc>},
    {OpKind::Sin, "sin", unary<&ops::sin>},
    {OpKind::Cos, "cos", unary<&ops::cos>},
    {OpKind::Tan, "tan", unary<&ops::tan>},
    {OpKind::Asin, "asin", unary<&ops::asin>},
    {OpKind::Acos, "acos", unary<&ops::acos>},
    {OpKind::Atan, "atan", unary<&ops::atan>},
    {OpKind::Sinh, "sinh", unary<&ops::sinh>},
    {OpKind::Cosh, "cosh", unary<&ops::cosh>},
    {OpKind::Asinh, "asinh", unary<&ops::asinh>},
    {OpKind::Acosh, "acosh", unary<&ops::acosh>},
    {OpKind::Atanh, "atanh", unary<&ops::atanh>},
    {OpKind::Log1p, "log1p", unary<&ops::log1p>},
    {OpKind::Expm1, "expm1", unary<&ops::expm1>},
    {OpKind::Exp2, "exp2", unary<&ops::exp2>},
    {OpKind::Log2, "log2", unary<&ops::log2>},
    {OpKind::Log10, "log10", unary<&ops::log10>},
    {OpKind::Reciprocal, "reciprocal", unary<&ops::reciprocal>},
    {OpKind::Floor, "floor", unary<&ops::floor>},
    {OpKind::Ceil, "ceil", unary<&ops::ceil>},
    {OpKind::Trunc, "trunc", unary<&ops::trunc>},
    {OpKind::Frac, "frac", unary<&ops::frac>},
    {OpKind::Sign, "sign", unary<&ops::sign>},
    {OpKind::Isnan, "isnan", unary<&ops::isnan>},
    {OpKind::Isinf, "isinf", unary<&ops::isinf>},
    {OpKind::Isfinite, "isfinite", unary<&ops::isfinite>},
    {OpKind::Isposinf, "isposinf", unary<&ops::isposinf>},
    {OpKind::Isneginf, "isneginf", unary<&ops::isneginf>},
    {OpKind::Signbit, "signbit", unary<&ops::signbit>},
    {OpKind::LogicalNot, "logical_not", unary<&ops::logicalNot>},
    {OpKind::BitwiseNot, "bitwise_not", unary<&ops::bitwiseNot>},
    {OpKind::BitwiseNot, "__invert__", [](const BoundArgs &a) {
       Tensor x = a.tensor(0);
       KILN_CHECK_KIND(Type, !isFloating(x.dtype()),
                       "~ (operator.invert) is only implemented on integer and bool tensors, "
                       "got {}", dtypeName(x.dtype()));
       return ops::bitwiseNot(x);
     }},
    // torch's round without decimals also takes integers; with decimals it is round.decimals.
    {OpKind::Round, "round", [](const BoundArgs &a) {
       return ops::round(a.tensor(0), a.optInt(1));
     }},
    {OpKind::NanToNum, "nan_to_num", [](const BoundArgs &a) {
       return ops::nanToNum(a.tensor(0), a.optDouble(1).value_or(0.0), a.optDouble(2),
                            a.optDouble(3));
     }},
    {OpKind::Clamp, "clamp", [](const BoundArgs &a) {
       return ops::clamp(a.tensor(0), a.optTensor(1), a.optTensor(2));
     }},
    {OpKind::Clamp, "clamp_min", [](const BoundArgs &a) {
       return ops::clamp(a.tensor(0), a.tensor(1), std::nullopt);
     }},
    {OpKind::Clamp, "clamp_max", [](const BoundArgs &a) {
       return ops::clamp(a.tensor(0), std::nullopt, a.tensor(1));
     }},
    {OpKind::Add, "add", [](const BoundArgs &a) {
       return ops::add(a.tensor(0), a.tensor(1), a.scalar(2));
     }},
    {OpKind::Sub, "sub", [](const BoundArgs &a) {
       return ops::sub(a.tensor(0), a.tensor(1), a.scalar(2));
     }},
    {OpKind::Mul, "mul", binary<&ops::mul>},
    {OpKind::Div, "div", [](const BoundArgs &a) {
       return ops::div(a.tensor(0), a.tensor(1), a.optStr(2).value_or(""));
     }},
    {OpKind::Pow, "pow", binary<&ops::pow>},
    // max(input, other) and min(input, other) share their names with the reductions, which
    // are bound by hand (bind_reduce.cc) until those rows have kernels too.
    {OpKind::Maximum, "maximum", binary<&ops::maximum>},
    {OpKind::Minimum, "minimum", binary<&ops::minimum>},
    {OpKind::Fmax, "fmax", binary<&ops::fmax>},
    {OpKind::Fmin, "fmin", binary<&ops::fmin>},
    {OpKind::FloorDivide, "floor_divide", binary<&ops::floorDivide>},
    {OpKind::Remainder, "remainder", binary<&ops::remainder>},
    {OpKind::Fmod, "fmod", binary<&ops::fmod>},
    {OpKind::Atan2, "atan2", binary<&ops::atan2>},
    {OpKind::Hypot, "hypot", binary<&ops::hypot>},
    {OpKind::Eq, "eq", binary<&ops::eq>},
    {OpKind::Ne, "ne", binary<&ops::ne>},
    {OpKind::Lt, "lt", binary<&ops::lt>},
    {OpKind::Le, "le", binary<&ops::le>},
    {OpKind::Gt, "gt", binary<&ops::gt>},
    {OpKind::Ge, "ge", binary<&ops::ge>},
    {OpKind::LogicalAnd, "logical_and", binary<&ops::logicalAnd>},
    {OpKind::LogicalOr, "logical_or", binary<&ops::logicalOr>},
    {OpKind::LogicalXor, "logical_xor", binary<&ops::logicalXor>},
    {OpKind::BitwiseAnd, "bitwise_and", binary<&ops::bitwiseAnd>},
    {OpKind::BitwiseOr, "bitwise_or", binary<&ops::bitwiseOr>},
    {OpKind::BitwiseXor, "bitwise_xor", binary<&ops::bitwiseXor>},
    {OpKind::Lerp, "lerp", [](const BoundArgs &a) {
       return ops::lerp(a.tensor(0), a.tensor(1), a.tensor(2));
     }},
    // Activations. An `inplace` argument is read by the binding, not here.
    {OpKind::Relu, "relu", unary<&ops::relu>},
    {OpKind::Gelu, "gelu", [](const BoundArgs &a) { return ops::gelu(a.tensor(0), a.str(1)); }},
    {OpKind::Silu, "silu", unary<&ops::silu>},
    {OpKind::Softplus, "softplus", [](const BoundArgs &a) {
       return ops::softplus(a.tensor(0), a.toDouble(1), a.toDouble(2));
     }},
    {OpKind::Mish, "mish", unary<&ops::mish>},
    {OpKind::Elu, "elu", [](const BoundArgs &a) { return ops::elu(a.tensor(0), a.toDouble(1)); }},
    {OpKind::Elu, "selu", unary<&ops::selu>},
    {OpKind::Celu, "celu", [](const BoundArgs &a) {
       return ops::celu(a.tensor(0), a.toDouble(1));
     }},
    {OpKind::LeakyRelu, "leaky_relu", [](const BoundArgs &a) {
       return ops::leakyRelu(a.tensor(0), a.toDouble(1));
     }},
    {OpKind::Hardtanh, "hardtanh", [](const BoundArgs &a) {
       return ops::hardtanh(a.tensor(0), a.scalar(1), a.scalar(2));
     }},
    {OpKind::Hardtanh, "relu6", unary<&ops::relu6>},
    {OpKind::Hardsigmoid, "hardsigmoid", unary<&ops::hardsigmoid>},
    {OpKind::Hardswish, "hardswish", unary<&ops::hardswish>},
    {OpKind::LogSigmoid, "logsigmoid", unary<&ops::logsigmoid>},
    {OpKind::Softsign, "softsign", unary<&ops::softsign>},
    {OpKind::Tanhshrink, "tanhshrink", unary<&ops::tanhshrink>},
    {OpKind::Hardshrink, "hardshrink", [](const BoundArgs &a) {
       return ops::hardshrink(a.tensor(0), a.toDouble(1));
     }},
    {OpKind::Softshrink, "softshrink", [](const BoundArgs &a) {
       return ops::softshrink(a.tensor(0), a.toDouble(1));
     }},
    {OpKind::Threshold, "threshold", [](const BoundArgs &a) {
       return ops::threshold(a.tensor(0), a.scalar(1), a.scalar(2));
     }},
    // Reductions, scans and softmax.
    {OpKind::Sum, "sum", [](const BoundArgs &a) {
       return ops::sum(a.tensor(0), a.optIntList(1), a.toBool(2), a.optDType(3));
     }},
    {OpKind::Mean, "mean", [](const BoundArgs &a) {
       return ops::mean(a.tensor(0), a.optIntList(1), a.toBool(2), a.optDType(3));
     }},
    {OpKind::Prod, "prod", [](const BoundArgs &a) {
       return ops::prod(a.tensor(0), a.optInt(1), a.toBool(2), a.optDType(3));
     }},
    {OpKind::Amax, "amax", [](const BoundArgs &a) {
       return ops::amax(a.tensor(0), a.optIntList(1), a.toBool(2));
     }},
    {OpKind::Amin, "amin", [](const BoundArgs &a) {
       return ops::amin(a.tensor(0), a.optIntList(1), a.toBool(2));
     }},
    {OpKind::All, "all", [](const BoundArgs &a) {
       return ops::all(a.tensor(0), a.optIntList(1), a.toBool(2));
     }},
    {OpKind::Any, "any", [](const BoundArgs &a) {
       return ops::any(a.tensor(0), a.optIntList(1), a.toBool(2));
     }},
    {OpKind::Argmax, "argmax", [](const BoundArgs &a) {
       return ops::argmax(a.tensor(0), a.optInt(1), a.toBool(2));
     }},
    {OpKind::Argmin, "argmin", [](const BoundArgs &a) {
       return ops::argmin(a.tensor(0), a.optInt(1), a.toBool(2));
     }},
    {OpKind::Logsumexp, "logsumexp", [](const BoundArgs &a) {
       return ops::logsumexp(a.tensor(0), a.intList(1), a.toBool(2));
     }},
    {OpKind::Cumsum, "cumsum", [](const BoundArgs &a) {
       return ops::cumsum(a.tensor(0), a.toInt(1), a.optDType(2));
     }},
    {OpKind::Cumprod, "cumprod", [](const BoundArgs &a) {
       return ops::cumprod(a.tensor(0), a.toInt(1), a.optDType(2));
     }},
    {OpKind::Logcumsumexp, "logcumsumexp", [](const BoundArgs &a) {
       return ops::logcumsumexp(a.tensor(0), a.toInt(1));
     }},
    {OpKind::LinalgSolve, "_linalg_solve", [](const BoundArgs &a) {
       return ops::linalgSolve(a.tensor(0), a.tensor(1), a.toBool(2));
     }},
    {OpKind::LinalgSolveTriangular, "_linalg_solve_triangular", [](const BoundArgs &a) {
       return ops::linalgSolveTriangular(a.tensor(0), a.tensor(1), a.toBool(2), a.toBool(3));
     }},
    {OpKind::LinalgCholesky, "_linalg_cholesky",
     [](const BoundArgs &a) { return ops::linalgCholesky(a.tensor(0)); }},
    {OpKind::LinalgLogabsdet, "_linalg_logabsdet",
     [](const BoundArgs &a) { return ops::linalgLogabsdet(a.tensor(0)); }},
    {OpKind::LinalgDetSign, "_linalg_det_sign",
     [](const BoundArgs &a) { return kiln::ops::linalgDetSign(a.tensor(0)); }},
    {OpKind::LinalgEighPacked, "_linalg_eigh_packed",
     [](const BoundArgs &a) { return ops::linalgEighPacked(a.tensor(0), a.toBool(1)); }},
    {OpKind::Argsort, "argsort", [](const BoundArgs &a) {
       return ops::argsort(a.tensor(0), a.toInt(1), a.toBool(2), a.toBool(3));
     }},
    // kiln.softmax(input, dim, dtype) and F.softmax(input, dim=None, _stacklevel=3, dtype=None).
    {OpKind::Softmax, "softmax",
     [](const BoundArgs &a) { return ops::softmax(a.tensor(0), a.toInt(1), a.optDType(2)); },
     nullptr, nullptr, 3},
    {OpKind::Softmax, "softmax",
     [](const BoundArgs &a) {
       return ops::softmax(a.tensor(0), softmaxDim(a, "softmax"), a.optDType(3));
     },
     nullptr, nullptr, 4},
    {OpKind::LogSoftmax, "log_softmax",
     [](const BoundArgs &a) { return ops::logSoftmax(a.tensor(0), a.toInt(1), a.optDType(2)); },
     nullptr, nullptr, 3},
    {OpKind::LogSoftmax, "log_softmax",
     [](const BoundArgs &a) {
       return ops::logSoftmax(a.tensor(0), softmaxDim(a, "log_softmax"), a.optDType(3));
     },
     nullptr, nullptr, 4},
    // Layout and gathers.
    {OpKind::Tril, "tril", [](const BoundArgs &a) { return ops::tril(a.tensor(0), a.toInt(1)); }},
    {OpKind::Triu, "triu", [](const BoundArgs &a) { return ops::triu(a.tensor(0), a.toInt(1)); }},
    {OpKind::Flip, "flip", [](const BoundArgs &a) { return ops::flip(a.tensor(0), a.intList(1)); }},
    {OpKind::Roll, "roll", [](const BoundArgs &a) {
       return ops::roll(a.tensor(0), a.intList(1), a.optIntList(2).value_or(Shape{}));
     }},
    {OpKind::Repeat, "repeat", [](const BoundArgs &a) {
       return ops::repeat(a.tensor(0), a.intList(1));
     }},
    {OpKind::Gather, "gather", [](const BoundArgs &a) {
       return ops::gather(a.tensor(0), a.toInt(1), a.tensor(2));
     }},
    {OpKind::IndexSelect, "index_select", [](const BoundArgs &a) {
       return ops::indexSelect(a.tensor(0), a.toInt(1), a.tensor(2));
     }},
    {OpKind::MaskedFill, "masked_fill",
     [](const BoundArgs &a) { return ops::maskedFill(a.tensor(0), a.tensor(1), a.tensor(2)); },
     [](Tensor &self, const BoundArgs &a) { ops::maskedFill_(self, a.tensor(1), a.tensor(2)); }},
    {OpKind::ScatterAdd, "scatter_add",
     [](const BoundArgs &a) {
       return ops::scatterAdd(a.tensor(0), a.toInt(1), a.tensor(2), a.tensor(3));
     },
     [](Tensor &self, const BoundArgs &a) {
       ops::scatterAdd_(self, a.toInt(1), a.tensor(2), a.tensor(3));
     }},
    {OpKind::IndexAdd, "index_add",
     [](const BoundArgs &a) {
       return ops::indexAdd(a.tensor(0), a.toInt(1), a.tensor(2), a.tensor(3), a.scalar(4));
     },
     [](Tensor &self, const BoundArgs &a) {
       ops::indexAdd_(self, a.toInt(1), a.tensor(2), a.tensor(3), a.scalar(4));
     }},
    {OpKind::OneHot, "one_hot", [](const BoundArgs &a) {
       return ops::oneHot(a.tensor(0), a.toInt(1));
     }},
    // Normalization and losses (kiln.nn.functional's argument lists, legacy flags included).
    {OpKind::RmsNorm, "rms_norm", [](const BoundArgs &a) {
       return ops::rmsNorm(a.tensor(0), a.intList(1), a.optTensor(2).value_or(Tensor()),
                           a.optDouble(3));
     }},
    {OpKind::MseLoss, "mse_loss", [](const BoundArgs &a) {
       warnSizeMismatch(a.tensor(0), a.tensor(1));
       return ops::mseLoss(a.tensor(0), a.tensor(1), a.optTensor(5).value_or(Tensor()),
                           lossReduction(a, 2, 3, 4));
     }},
    {OpKind::L1Loss, "l1_loss", [](const BoundArgs &a) {
       warnSizeMismatch(a.tensor(0), a.tensor(1));
       return ops::l1Loss(a.tensor(0), a.tensor(1), a.optTensor(5).value_or(Tensor()),
                          lossReduction(a, 2, 3, 4));
     }},
    {OpKind::NllLoss, "nll_loss", [](const BoundArgs &a) {
       return ops::nllLoss(a.tensor(0), a.tensor(1), a.optTensor(2).value_or(Tensor()),
                           lossReduction(a, 3, 5, 6), a.toInt(4));
     }},
    {OpKind::CrossEntropy, "cross_entropy", [](const BoundArgs &a) {
       return ops::crossEntropy(a.tensor(0), a.tensor(1), a.optTensor(2).value_or(Tensor()),
                                lossReduction(a, 3, 5, 6), a.toInt(4), a.toDouble(7));
     }},
    // max/min: over everything, elementwise with another tensor, or along a dim with indices.
    {OpKind::Maximum, "max", binary<&ops::maximum>},
    {OpKind::Minimum, "min", binary<&ops::minimum>},
    {OpKind::Amax, "max", [](const BoundArgs &a) { return ops::max(a.tensor(0)); }},
    {OpKind::Amin, "min", [](const BoundArgs &a) { return ops::min(a.tensor(0)); }},
    {std::nullopt, "max", nullptr, nullptr, [](const BoundArgs &a) {
       auto [values, indices] = ops::maxDim(a.tensor(0), a.toInt(1), a.toBool(2));
       return returnType("max", std::move(values), std::move(indices));
     }},
    {std::nullopt, "min", nullptr, nullptr, [](const BoundArgs &a) {
       auto [values, indices] = ops::minDim(a.tensor(0), a.toInt(1), a.toBool(2));
       return returnType("min", std::move(values), std::move(indices));
     }},
    {OpKind::Where, "where", [](const BoundArgs &a) {
       return ops::where(a.tensor(0), a.tensor(1), a.tensor(2));
     }},
    // Tensor.where(condition, other): the receiver is the input.
    {std::nullopt, "where",
     [](const BoundArgs &a) { return ops::where(a.tensor(1), a.tensor(0), a.tensor(2)); },
     nullptr, nullptr, 3},
    // where(condition) is nonzero(condition, as_tuple=True).
    {std::nullopt, "where", nullptr, nullptr,
     [](const BoundArgs &a) {
       return py::object(tensorTuple(ops::nonzeroTuple(a.tensor(0))));
     },
     1},
    // torch.norm's p: 'fro' (or None) is the 2-norm, a number a vector p-norm.
    {OpKind::Norm, "norm", [](const BoundArgs &a) {
       double ord = 2.0;
       if (PyUnicode_Check(a.get(1))) {
         std::string p = a.str(1);
         KILN_CHECK_KIND(NotImplemented, p != "nuc",
                         "norm: p='nuc' (nuclear norm) is not supported by kiln yet");
         KILN_CHECK_KIND(Value, p == "fro", "norm: unsupported p '{}' (expected 'fro' or a number)",
                         p);
       } else if (!a.isNone(1)) {
         ord = a.scalar(1).toDouble();
       }
       return ops::vectorNorm(a.tensor(0), ord, a.optIntList(2), a.toBool(3), a.optDType(4));
     }},
    // scatter of a source tensor (differentiable without a reduction) or of a value.
    {OpKind::Scatter, "scatter",
     [](const BoundArgs &a) {
       Tensor self = a.tensor(0), index = a.tensor(2), src = a.tensor(3);
       std::optional<std::string> reduce = a.optStr(4);
       if (!reduce)
         return ops::scatter(self, a.toInt(1), index, src);
       requireUntracked("scatter with a reduction", {&self, &src});
       Tensor out = self.clone();
       return ops::scatter_(out, a.toInt(1), index, src, *reduce);
     },
     [](Tensor &self, const BoundArgs &a) {
       ops::scatter_(self, a.toInt(1), a.tensor(2), a.tensor(3), a.optStr(4).value_or(""));
     }},
    {std::nullopt, "scatter",
     [](const BoundArgs &a) {
       Tensor self = a.tensor(0);
       requireUntracked("scatter with a value", {&self});
       Tensor out = self.clone();
       return ops::scatterValue_(out, a.toInt(1), a.tensor(2), a.scalar(3),
                                 a.optStr(4).value_or(""));
     },
     [](Tensor &self, const BoundArgs &a) {
       ops::scatterValue_(self, a.toInt(1), a.tensor(2), a.scalar(3), a.optStr(4).value_or(""));
     }},
    // Elementwise ops without a node kind (KILN_EAGER_SPELLING rows).
    {std::nullopt, "square", unary<&ops::square>},
    {std::nullopt, "positive", unary<&ops::positive>},
    {std::nullopt, "rsub", [](const BoundArgs &a) {
       return ops::sub(a.tensor(1), a.tensor(0), a.scalar(2));
     }},
    {std::nullopt, "float_power", binary<&ops::floatPower>},
    {std::nullopt, "addcmul",
     [](const BoundArgs &a) {
       return ops::addcmul(a.tensor(0), a.tensor(1), a.tensor(2), a.scalar(3));
     },
     [](Tensor &self, const BoundArgs &a) {
       kiln::ops::addcmul_(self, a.tensor(1), a.tensor(2), a.scalar(3));
     }},
    {std::nullopt, "addcdiv",
     [](const BoundArgs &a) {
       return ops::addcdiv(a.tensor(0), a.tensor(1), a.tensor(2), a.scalar(3));
     },
     [](Tensor &self, const BoundArgs &a) {
       kiln::ops::addcdiv_(self, a.tensor(1), a.tensor(2), a.scalar(3));
     }},
    {OpKind::BitwiseLeftShift, "bitwise_left_shift", binary<&ops::bitwiseLeftShift>},
    {OpKind::BitwiseRightShift, "bitwise_right_shift", binary<&ops::bitwiseRightShift>},
    {std::nullopt, "isclose", [](const BoundArgs &a) {
       return ops::isclose(a.tensor(0), a.tensor(1), a.toDouble(2), a.toDouble(3), a.toBool(4));
     }},
    {std::nullopt, "equal", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return py::bool_(ops::equal(a.tensor(0), a.tensor(1)));
     }},
    {std::nullopt, "allclose", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return py::bool_(ops::allclose(a.tensor(0), a.tensor(1), a.toDouble(2), a.toDouble(3),
                                      a.toBool(4)));
     }},
    // Tensor methods (in place: bind_op_table.cc's runInplace writes `fn`'s result when
    // autograd records the write, else the in-place kernel runs).
    {std::nullopt, "item", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       Scalar s = a.tensor(0).item();
       if (s.dtype() == DType::Bool)
         return py::bool_(s.toBool());
       if (s.isFloating())
         return py::float_(s.toDouble());
       return py::int_(s.toInt());
     }},
    {std::nullopt, "zero_",
     [](const BoundArgs &a) {
       Tensor self = a.tensor(0);
       return ops::full(self.sizes(), Scalar(int64_t{0}), self.dtype());
     },
     [](Tensor &self, const BoundArgs &) { self.fill_(Scalar(int64_t{0})); }},
    {std::nullopt, "fill_",
     [](const BoundArgs &a) {
       Tensor self = a.tensor(0);
       return ops::full(self.sizes(), fillValue(self, a), self.dtype());
     },
     [](Tensor &self, const BoundArgs &a) { self.fill_(fillValue(self, a)); }},
    {std::nullopt, "copy_",
     [](const BoundArgs &a) {
       // Differentiable: the source broadcast and cast to self is self's new value.
       Tensor self = a.tensor(0);
       return autograd::to(autograd::expand(a.tensor(1), self.sizes()), self.dtype());
     },
     [](Tensor &self, const BoundArgs &a) { self.copy_(a.tensor(1)); }, nullptr, -1, true},
    {OpKind::Detach, "detach", [](const BoundArgs &a) { return autograd::detach(a.tensor(0)); }},
    // Products and layer_norm.
    {OpKind::Matmul, "matmul", binary<&ops::matmul>, nullptr, nullptr, -1, true},
    {OpKind::Linear, "linear", [](const BoundArgs &a) {
       return ops::linear(a.tensor(0), a.tensor(1), a.optTensor(2));
     }, nullptr, nullptr, -1, true},
    {OpKind::LayerNorm, "layer_norm", [](const BoundArgs &a) {
       return ops::layerNorm(a.tensor(0), a.intList(1), a.optTensor(2).value_or(Tensor()),
                             a.optTensor(3).value_or(Tensor()), a.toDouble(4));
     }},
    // Views (KILN_EAGER_SPELLING rows): view(*size), view(dtype), reshape(*shape).
    {std::nullopt, "view",
     [](const BoundArgs &a) {
       if (isDType(a.get(1))) {
         Tensor self = a.tensor(0);
         KILN_CHECK_KIND(NotImplemented, !autograd::anyRequiresGrad({&self}),
                         "view(dtype) of a tensor that requires grad is not differentiable");
         return self.aliasWithDType(*a.optDType(1));
       }
       return autograd::view(a.tensor(0), a.intList(1));
     }},
    {std::nullopt, "reshape", [](const BoundArgs &a) {
       return autograd::reshape(a.tensor(0), a.intList(1));
     }},
};
// clang-format on

} // namespace

const EagerKernel *findEagerKernel(std::optional<ir::OpKind> op, const ir::OpSchema &schema) {
  for (std::span<const EagerKernel> table :
       {std::span<const EagerKernel>(kKernels), shapeEagerKernels(), reduceEagerKernels(),
        linalgEagerKernels(), indexEagerKernels(), randomEagerKernels()})
    for (const EagerKernel &k : table)
      if (k.op == op && k.name == schema.name &&
          (k.numArgs < 0 || k.numArgs == static_cast<int>(schema.args.size())))
        return &k;
  return nullptr;
}

} // namespace kiln::frontend
