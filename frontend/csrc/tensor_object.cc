// kiln._C.Tensor objects without per-call type lookups (see tensor_object.h).
#include "frontend/csrc/tensor_object.h"

namespace py = pybind11;

namespace kiln::frontend {

namespace {

const py::detail::type_info *tensorTypeInfo() {
  static const py::detail::type_info *info = py::detail::get_type_info(typeid(Tensor));
  return info;
}

} // namespace

const Tensor *asTensor(PyObject *obj) {
  const py::detail::type_info *info = tensorTypeInfo();
  PyTypeObject *type = info->type;
  if (Py_TYPE(obj) != type && !PyType_IsSubtype(Py_TYPE(obj), type))
    return nullptr;
  auto *inst = reinterpret_cast<py::detail::instance *>(obj);
  if (inst->simple_layout) {
    if (!inst->simple_holder_constructed)
      return nullptr;
    return static_cast<const Tensor *>(inst->simple_value_holder[0]);
  }
  auto vh = inst->get_value_and_holder(info, /*throw_if_missing=*/false);
  if (!vh || !vh.holder_constructed())
    return nullptr;
  return vh.value_ptr<Tensor>();
}

py::object wrapTensor(Tensor t) {
  return py::reinterpret_steal<py::object>(py::detail::type_caster_generic::cast(
      &t, py::return_value_policy::move, py::handle(), tensorTypeInfo(), nullptr,
      [](const void *p) -> void * {
        return new Tensor(std::move(*const_cast<Tensor *>(static_cast<const Tensor *>(p))));
      }));
}

} // namespace kiln::frontend
