#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"

namespace kiln::frontend {

void bindReduce(py::module_ &m) {}

} // namespace kiln::frontend
