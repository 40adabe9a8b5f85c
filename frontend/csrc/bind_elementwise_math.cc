// The unary math ops that have no op-table row yet; the rows (sin, clamp, lerp, round,
// nan_to_num, where, ...) are bound by bind_op_table.cc.
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

} // namespace

void bindElementwiseMath(py::module_ &m) {
  auto t = tensorClass(m);
  for (const UnaryEntry &e : kUnaryOps)
    defUnary(m, t, e.name, e.inplaceName, e.fn);
  t.def("__pos__", &ops::positive);
}

} // namespace kiln::frontend::elementwise
