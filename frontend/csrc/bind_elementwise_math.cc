// The unary math ops and `where` forms that have no op-table row yet; the rows (sin, clamp,
// lerp, round, nan_to_num, ...) are bound by bind_op_table.cc.
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

// The unary ops without an op-table row (the rows are bound by bind_op_table.cc).
const UnaryEntry kUnaryOps[] = {
    {"square", "square_", &ops::square},
    {"positive", nullptr, &ops::positive},
    {"erfc", "erfc_", &ops::erfc},
};

void bindWhere(py::module_ &m, py::class_<Tensor> &t) {
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
}

} // namespace

void bindElementwiseMath(py::module_ &m) {
  auto t = tensorClass(m);
  for (const UnaryEntry &e : kUnaryOps)
    defUnary(m, t, e.name, e.inplaceName, e.fn);
  t.def("__pos__", &ops::positive);
  bindWhere(m, t);
}

} // namespace kiln::frontend::elementwise
