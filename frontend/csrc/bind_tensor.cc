// kiln.dtype and the core of kiln.Tensor: properties, views, copies. Op methods are added by the
// other bind_*.cc files onto the same class.
#include "frontend/csrc/bind_factory.h"
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

void bindDTypes(py::module_ &m) {
  py::enum_<DType> dt(m, "dtype");
#define X(E, N, T, S) dt.value(N, DType::E);
  KILN_DTYPES(X)
#undef X
  // Replace (not overload) enum_'s own __repr__/__str__: dtypes print as torch's do.
  auto repr = [](DType t) { return "kiln." + std::string(dtypeName(t)); };
  dt.attr("__repr__") = py::cpp_function(repr, py::is_method(dt));
  dt.attr("__str__") = py::cpp_function(repr, py::is_method(dt));
  dt.def_property_readonly("is_floating_point", [](DType t) { return isFloating(t); });
  dt.def_property_readonly("is_signed",
                           [](DType t) { return t != DType::Bool && t != DType::UInt8; });
  dt.def_property_readonly("itemsize", [](DType t) { return itemsize(t); });
  dt.def_property_readonly("name", [](DType t) { return std::string(dtypeName(t)); });
  m.def("promote_types", &promoteTypes);
  m.def("get_default_dtype", &defaultFloatDType);
  m.def("set_default_dtype", &setDefaultFloatDType);
}

namespace {

/// torch's legacy constructors (`Tensor(2, 3)`, `Tensor([1., 2.])`, `FloatTensor(4)`,
/// `x.new(5)`): sizes as ints or a Size give a tensor of zeros (torch leaves the memory
/// uninitialized; kiln fills it so a forgotten init is not garbage), one sequence gives its data.
Tensor legacyTensor(const py::args &args, DType dtype) {
  if (args.empty())
    return Tensor::empty({0}, dtype);
  bool sizes = true;
  for (py::handle a : args)
    sizes = sizes && py::isinstance<py::int_>(a) && !py::isinstance<py::bool_>(a);
  if (args.size() == 1 && py::isinstance<py::tuple>(args[0]) &&
      py::type::of(args[0]).attr("__name__").cast<std::string>() == "Size")
    return ops::zeros(args[0].cast<Shape>(), dtype);
  if (sizes)
    return ops::zeros(args.cast<Shape>(), dtype);
  KILN_CHECK_KIND(Type, args.size() == 1,
                  "Tensor(): expected sizes (ints) or one sequence of data, got {} arguments",
                  args.size());
  return tensorFromData(args[0], dtype, "Tensor");
}

} // namespace

void bindTensor(py::module_ &m) {
  py::class_<Tensor> t(m, "Tensor");
  t.def(py::init([](const Tensor &other) { return other.alias(); }), py::arg("data"));
  t.def(py::init([](const py::args &args) { return legacyTensor(args, DType::Float32); }));
  t.def("new", [](const Tensor &self, const py::args &args) {
    return legacyTensor(args, self.dtype()).to(self.device());
  });
  m.def("_legacy_tensor",
        [](DType dtype, const py::args &args) { return legacyTensor(args, dtype); });
  t.def_property_readonly("dtype", &Tensor::dtype);
  t.def_property_readonly("_device_str", [](const Tensor &self) { return self.device().str(); });
  t.def_property_readonly("ndim", &Tensor::dim);
  t.def("dim", &Tensor::dim);
  t.def("ndimension", &Tensor::dim);
  t.def("numel", &Tensor::numel);
  t.def("nelement", &Tensor::numel);
  t.def("element_size", &Tensor::itemsize);
  t.def_property_readonly("itemsize", &Tensor::itemsize);
  t.def_property_readonly("nbytes",
                          [](const Tensor &self) { return self.numel() * self.itemsize(); });
  t.def_property_readonly("_sizes", [](const Tensor &self) { return self.sizes(); });
  t.def("_size_dim", [](const Tensor &self, int64_t d) { return self.size(d); });
  t.def(
      "stride",
      [](const Tensor &self, py::object d) -> py::object {
        if (d.is_none())
          return py::tuple(py::cast(self.strides()));
        return py::cast(self.stride(d.cast<int64_t>()));
      },
      py::arg("dim") = py::none());
  t.def("storage_offset", &Tensor::storageOffset);
  t.def("is_contiguous", [](const Tensor &self) { return self.isContiguous(); });
  t.def("data_ptr", [](const Tensor &self) { return reinterpret_cast<uintptr_t>(self.address()); });
  // Python wrappers are made per access (`p.grad` twice gives two objects); this names the
  // tensor itself, for code that must tell tensors apart by identity.
  t.def_property_readonly(
      "_impl_id", [](const Tensor &self) { return reinterpret_cast<uintptr_t>(&self.impl()); });
  t.def("_storage_ptr",
        [](const Tensor &self) { return reinterpret_cast<uintptr_t>(self.storage()->address()); });
  t.def(
      "_to_device",
      [](const Tensor &self, const std::string &device) {
        return autograd::to(self, Device::parse(device));
      },
      py::arg("device"), py::call_guard<py::gil_scoped_release>());
  t.def_property_readonly("_version", &Tensor::version);
  // torch's untyped_storage().resize_(n) and .size(), for FullyShardedDataParallel's freeing of
  // gathered parameters (runtime/storage.h).
  t.def(
      "_storage_resize_",
      [](const Tensor &self, int64_t nbytes) {
        KILN_CHECK(nbytes >= 0, "Storage.resize_: nbytes must be non-negative, got {}", nbytes);
        self.storage()->resize(static_cast<size_t>(nbytes));
      },
      py::arg("nbytes"));
  t.def("_unsafe_restore_version",
        [](const Tensor &self, int64_t v) { self.storage()->restoreVersion(v); });
  t.def("_storage_nbytes", [](const Tensor &self) {
    const Storage &s = *self.storage();
    return s.released() ? size_t{0} : s.nbytes();
  });
  t.def_property_readonly(
      "is_cuda", [](const Tensor &self) { return self.device().type == DeviceType::CUDA; });
  t.def_property_readonly("_is_wrapped_number", &Tensor::isWrappedNumber);

  // Views (with autograd history: autograd/views.cc); the others are op-table rows.
  t.def_property_readonly("T", [](const Tensor &self) {
    Shape dims(self.dim());
    for (int64_t i = 0; i < self.dim(); ++i)
      dims[i] = self.dim() - 1 - i;
    return autograd::permute(self, dims);
  });
  t.def_property_readonly("mT", &autograd::mT);
  t.def("_slice", &autograd::slice, py::arg("dim"), py::arg("start"), py::arg("end"),
        py::arg("step") = 1);

  // Copies.
  // memory_format: the default (None) runs `fn` here; kiln.contiguous_format / preserve_format
  // go to kiln/_factory.py's `helper` (kiln has no channels_last layout).
  auto withFormat = [&t](const char *name, Tensor (*fn)(const Tensor &), const char *helper) {
    t.def(
        name,
        [fn, helper](const py::object &self, const py::object &format) -> py::object {
          if (format.is_none())
            return wrap(fn(self.cast<const Tensor &>()));
          return py::module_::import("kiln._factory").attr(helper)(self, format);
        },
        py::kw_only(), py::arg("memory_format") = py::none());
  };
  withFormat("contiguous", &autograd::contiguous, "_contiguous_as");
  withFormat("clone", &autograd::clonePreservingLayout, "_clone_as");
  t.def(
      "_to_dtype",
      [](const Tensor &self, DType dt, bool copy) { return autograd::to(self, dt, copy); },
      py::arg("dtype"), py::arg("copy") = false);
  t.def("_wrap_scalar", [](py::handle v) { return Tensor::wrapScalar(toScalar(v, "scalar")); });
  m.def("_scalar_tensor", [](py::handle v, DType dt) {
    return Tensor::scalarTensor(toScalar(v, "scalar_tensor"), dt);
  });
  m.def("_empty",
        [](py::handle shape, DType dt) { return Tensor::empty(toIntList(shape, "empty"), dt); });
}

} // namespace kiln::frontend
