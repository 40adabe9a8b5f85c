#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"

namespace kiln::frontend {

void bindNN(py::module_ &m) {}

} // namespace kiln::frontend
