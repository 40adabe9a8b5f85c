// Unary math, rounding and classification ops; clamp, where, lerp, nan_to_num.
#include "frontend/csrc/bind_elementwise.h"

#include "runtime/error.h"

#include <pybind11/stl.h>

namespace kiln::frontend::elementwise {

namespace {
struct UnaryEntry {
  const char *name;
  const char *inplaceName; // null: torch has no in-place form
  UnaryFn fn;
};

// clang-format off
const UnaryEntry kUnaryOps[] = {
    {"neg", "neg_", &ops::neg}, {"negative", "negative_", &ops::neg},
    {"abs", "abs_", &ops::abs}, {"absolute", "absolute_", &ops::abs},
    {"sign", "sign_", &ops::sign}, {"sgn", "sgn_", &ops::sign},
    {"reciprocal", "reciprocal_", &ops::reciprocal}, {"square", "square_", &ops::square},
    {"positive", nullptr, &ops::positive},
    {"exp", "exp_", &ops::exp}, {"exp2", "exp2_", &ops::exp2}, {"expm1", "expm1_", &ops::expm1},
    {"log", "log_", &ops::log}, {"log2", "log2_", &ops::log2}, {"log10", "log10_", &ops::log10},
    {"log1p", "log1p_", &ops::log1p}, {"sqrt", "sqrt_", &ops::sqrt}, {"rsqrt", "rsqrt_", &ops::rsqrt},
    {"sin", "sin_", &ops::sin}, {"cos", "cos_", &ops::cos}, {"tan", "tan_", &ops::tan},
    {"asin", "asin_", &ops::asin}, {"arcsin", "arcsin_", &ops::asin},
    {"acos", "acos_", &ops::acos}, {"arccos", "arccos_", &ops::acos},
    {"atan", "atan_", &ops::atan}, {"arctan", "arctan_", &ops::atan},
    {"sinh", "sinh_", &ops::sinh}, {"cosh", "cosh_", &ops::cosh}, {"tanh", "tanh_", &ops::tanh},
    {"asinh", "asinh_", &ops::asinh}, {"arcsinh", "arcsinh_", &ops::asinh},
    {"acosh", "acosh_", &ops::acosh}, {"arccosh", "arccosh_", &ops::acosh},
    {"atanh", "atanh_", &ops::atanh}, {"arctanh", "arctanh_", &ops::atanh},
    {"sigmoid", "sigmoid_", &ops::sigmoid}, {"erf", "erf_", &ops::erf}, {"erfc", "erfc_", &ops::erfc},
    {"floor", "floor_", &ops::floor}, {"ceil", "ceil_", &ops::ceil},
    {"trunc", "trunc_", &ops::trunc}, {"fix", "fix_", &ops::trunc}, {"frac", "frac_", &ops::frac},
    {"isnan", nullptr, &ops::isnan}, {"isinf", nullptr, &ops::isinf},
    {"isfinite", nullptr, &ops::isfinite}, {"isposinf", nullptr, &ops::isposinf},
    {"isneginf", nullptr, &ops::isneginf}, {"signbit", nullptr, &ops::signbit},
};
// clang-format on

/// A clamp bound: None, a number (a weak scalar) or a tensor.
std::optional<Tensor> bound(py::handle h, const char *op) {
  if (h.is_none())
    return std::nullopt;
  return operand(h, op);
}

void bindClamp(py::module_ &m, py::class_<Tensor> &t) {
  auto clamp = [](const Tensor &a, py::handle lo, py::handle hi) {
    return ops::clamp(a, bound(lo, "clamp"), bound(hi, "clamp"));
  };
  for (const char *name : {"clamp", "clip"}) {
    m.def(
        name,
        [clamp](const Tensor &a, py::handle lo, py::handle hi, py::handle out) {
          return finish("clamp", clamp(a, lo, hi), out);
        },
        py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none(), py::kw_only(),
        py::arg("out") = py::none());
    t.def(name, clamp, py::arg("min") = py::none(), py::arg("max") = py::none());
  }
  for (const char *name : {"clamp_", "clip_"})
    t.def(
        name,
        [clamp](py::object self, py::handle lo, py::handle hi) {
          return applyInplace("clamp_", self, clamp(autograd::inplaceOperand(self.cast<const Tensor &>()), lo, hi));
        },
        py::arg("min") = py::none(), py::arg("max") = py::none());
  auto clampMin = [](const Tensor &a, py::handle lo) {
    return ops::clamp(a, operand(lo, "clamp_min"), std::nullopt);
  };
  auto clampMax = [](const Tensor &a, py::handle hi) {
    return ops::clamp(a, std::nullopt, operand(hi, "clamp_max"));
  };
  m.def("clamp_min", clampMin, py::arg("input"), py::arg("min"));
  m.def("clamp_max", clampMax, py::arg("input"), py::arg("max"));
  t.def("clamp_min", clampMin, py::arg("min"));
  t.def("clamp_max", clampMax, py::arg("max"));
  t.def(
      "clamp_min_",
      [clampMin](py::object self, py::handle lo) {
        return applyInplace("clamp_min_", self, clampMin(autograd::inplaceOperand(self.cast<const Tensor &>()), lo));
      },
      py::arg("min"));
  t.def(
      "clamp_max_",
      [clampMax](py::object self, py::handle hi) {
        return applyInplace("clamp_max_", self, clampMax(autograd::inplaceOperand(self.cast<const Tensor &>()), hi));
      },
      py::arg("max"));
}

void bindWhereLerp(py::module_ &m, py::class_<Tensor> &t) {
  m.def(
      "where",
      [](const Tensor &cond, py::handle a, py::handle b, py::handle out) -> py::object {
        if (a.is_none() && b.is_none()) // where(condition) is nonzero(condition, as_tuple=True)
          return py::module_::import("kiln").attr("nonzero")(cond, py::arg("as_tuple") = true);
        KILN_CHECK_KIND(Type, !a.is_none() && !b.is_none(),
                        "where: expected both input and other, or neither (where(condition))");
        return finish("where", ops::where(cond, operand(a, "where"), operand(b, "where")), out);
      },
      py::arg("condition"), py::arg("input") = py::none(), py::arg("other") = py::none(),
      py::kw_only(), py::arg("out") = py::none());
  t.def(
      "where",
      [](const Tensor &self, const Tensor &cond, py::handle b) {
        return ops::where(cond, self, operand(b, "where"));
      },
      py::arg("condition"), py::arg("other"));
  auto lerp = [](const Tensor &a, py::handle end, py::handle weight) {
    return ops::lerp(a, operand(end, "lerp"), operand(weight, "lerp"));
  };
  m.def(
      "lerp",
      [lerp](const Tensor &a, py::handle end, py::handle weight, py::handle out) {
        return finish("lerp", lerp(a, end, weight), out);
      },
      py::arg("input"), py::arg("end"), py::arg("weight"), py::kw_only(),
      py::arg("out") = py::none());
  t.def("lerp", lerp, py::arg("end"), py::arg("weight"));
  t.def(
      "lerp_",
      [lerp](py::object self, py::handle end, py::handle weight) {
        return applyInplace("lerp_", self, lerp(autograd::inplaceOperand(self.cast<const Tensor &>()), end, weight));
      },
      py::arg("end"), py::arg("weight"));
}

void bindRounding(py::module_ &m, py::class_<Tensor> &t) {
  // decimals=None selects torch's plain round (integers allowed); an explicit value selects
  // round.decimals (floats only).
  using OptI = std::optional<int64_t>;
  m.def(
      "round",
      [](const Tensor &a, OptI decimals, py::handle out) {
        return finish("round", ops::round(a, decimals), out);
      },
      py::arg("input"), py::kw_only(), py::arg("decimals") = py::none(),
      py::arg("out") = py::none());
  t.def("round", &ops::round, py::kw_only(), py::arg("decimals") = py::none());
  t.def(
      "round_",
      [](py::object self, OptI decimals) {
        return applyInplace("round_", self, ops::round(self.cast<const Tensor &>(), decimals));
      },
      py::kw_only(), py::arg("decimals") = py::none());
  using OptD = std::optional<double>;
  m.def(
      "nan_to_num",
      [](const Tensor &a, OptD nan, OptD posinf, OptD neginf, py::handle out) {
        return finish("nan_to_num", ops::nanToNum(a, nan.value_or(0.0), posinf, neginf), out);
      },
      py::arg("input"), py::arg("nan") = 0.0, py::arg("posinf") = py::none(),
      py::arg("neginf") = py::none(), py::kw_only(), py::arg("out") = py::none());
  t.def(
      "nan_to_num",
      [](const Tensor &a, OptD nan, OptD posinf, OptD neginf) {
        return ops::nanToNum(a, nan.value_or(0.0), posinf, neginf);
      },
      py::arg("nan") = 0.0, py::arg("posinf") = py::none(), py::arg("neginf") = py::none());
  t.def(
      "nan_to_num_",
      [](py::object self, OptD nan, OptD posinf, OptD neginf) {
        Tensor r = ops::nanToNum(self.cast<const Tensor &>(), nan.value_or(0.0), posinf, neginf);
        return applyInplace("nan_to_num_", self, r);
      },
      py::arg("nan") = 0.0, py::arg("posinf") = py::none(), py::arg("neginf") = py::none());
}
} // namespace

void bindElementwiseMath(py::module_ &m) {
  auto t = tensorClass(m);
  for (const UnaryEntry &e : kUnaryOps)
    defUnary(m, t, e.name, e.inplaceName, e.fn);
  t.def("__neg__", &ops::neg);
  t.def("__pos__", &ops::positive);
  t.def("__abs__", &ops::abs);
  bindClamp(m, t);
  bindWhereLerp(m, t);
  bindRounding(m, t);
}

} // namespace kiln::frontend::elementwise
