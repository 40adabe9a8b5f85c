// Tensor factories: kiln.zeros/ones/full/empty/arange/linspace/logspace/eye, the *_like forms
// and Tensor.new_*. Data-based factories (kiln.tensor) are in bind_factory_data.cc, random ones
// in bind_factory_random.cc.
#include "frontend/csrc/bind_factory.h"
#include "cuda/backend.h"
#include "frontend/csrc/bindings.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

// The device factories use without a device= argument: kiln.set_default_device's, unless a
// `with kiln.device(...)` block of this thread says otherwise (torch's semantics).
std::optional<std::string> gDefaultDevice;
thread_local std::optional<std::string> tBlockDevice;

const std::optional<std::string> &defaultDevice() {
  return tBlockDevice ? tBlockDevice : gDefaultDevice;
}

/// The CUDA device `s` names (nullopt for the CPU), checked to exist.
std::optional<Device> cudaDevice(const Device &d, const std::string &s, const char *op) {
  if (d.type == DeviceType::CPU)
    return std::nullopt;
  std::string reason;
  cuda::Backend *backend = cuda::Backend::get(&reason);
  KILN_CHECK(backend,
             "kiln: CUDA is not available: {}. {}: device '{}' was requested but no CUDA device "
             "is available; use device='cpu'",
             reason, op, s);
  KILN_CHECK_KIND(Value, d.index >= 0 && d.index < backend->deviceCount(),
                  "{}: CUDA device {} does not exist ({} available)", op, d.index,
                  backend->deviceCount());
  return d;
}

/// The device `device=` names (nullopt for None or the CPU).
std::optional<Device> explicitDevice(py::handle device, const char *op) {
  if (device.is_none())
    return std::nullopt;
  std::string s = py::str(device);
  Device d =
      PyLong_Check(device.ptr()) ? Device{DeviceType::CUDA, device.cast<int>()} : Device::parse(s);
  return cudaDevice(d, s, op);
}

} // namespace

std::optional<Device> targetDevice(py::handle device, const char *op) {
  if (device.is_none()) {
    const std::optional<std::string> &fallback = defaultDevice();
    return fallback ? cudaDevice(Device::parse(*fallback), *fallback, op) : std::nullopt;
  }
  return explicitDevice(device, op);
}

void checkDevice(py::handle device, const char *op) { // a generator is on the CPU unless asked
  if (std::optional<Device> d = explicitDevice(device, op))
    fail(ErrorKind::NotImplemented,
         "{}: device='{}' is not supported by this factory yet; create the tensor on the CPU "
         "and move it with .to('{}')",
         op, d->str(), d->str());
}

std::optional<Device> targetDeviceLike(py::handle device, const Tensor &like, const char *op) {
  if (!device.is_none())
    return targetDevice(device, op);
  return like.isCpu() ? std::nullopt : std::optional<Device>(like.device());
}

Tensor placeOn(Tensor t, std::optional<Device> device) { return device ? t.to(*device) : t; }

Tensor finishFactory(Tensor t, bool requiresGrad, const char *op) {
  if (requiresGrad) {
    KILN_CHECK(isFloating(t.dtype()),
               "{}: Only Tensors of floating point and complex dtype can require gradients (got "
               "dtype {})",
               op, dtypeName(t.dtype()));
    t.setRequiresGrad(true);
  }
  return t;
}

Shape factoryShape(const py::args &args, py::handle size, const char *op) {
  if (!size.is_none()) {
    KILN_CHECK_KIND(Type, args.empty(),
                    "{}(): the size was given both positionally and as size=", op);
    return toIntList(size, op);
  }
  KILN_CHECK_KIND(Type, !args.empty(), "{}() missing 1 required positional argument: \"size\"", op);
  return toShape(args, op);
}

namespace {

py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// memory_format=None or kiln.preserve_format keep a dense input's layout; contiguous_format
/// (or anything else) gives a contiguous result.
bool preservesLayout(py::handle memoryFormat) {
  if (memoryFormat.is_none())
    return true;
  std::string s = py::str(memoryFormat);
  return s.size() >= 15 && s.compare(s.size() - 15, 15, "preserve_format") == 0;
}

using SizedMaker = Tensor (*)(IntList, DType);

/// Binds kiln.name(*size, dtype=None, device=None, requires_grad=False) and
/// Tensor.new_name(*size, ...) (whose dtype defaults to self's).
void defSized(py::module_ &m, const char *name, const char *newName, SizedMaker make) {
  m.def(
      name,
      [name, make](py::args args, py::handle size, std::optional<DType> dtype, py::handle device,
                   bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, name);
        Shape shape = factoryShape(args, size, name);
        return finishFactory(placeOn(make(shape, dtype.value_or(defaultFloatDType())), target),
                             requiresGrad, name);
      },
      py::arg("size") = py::none(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
  tensorClass(m).def(
      newName,
      [newName, make](const Tensor &self, py::args args, py::handle size,
                      std::optional<DType> dtype, py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDeviceLike(device, self, newName);
        Shape shape = factoryShape(args, size, newName);
        return finishFactory(placeOn(make(shape, dtype.value_or(self.dtype())), target),
                             requiresGrad, newName);
      },
      py::arg("size") = py::none(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
}

/// Binds kiln.name(input, *, dtype=None, device=None, requires_grad=False, memory_format=None).
void defLike(py::module_ &m, const char *name, const Scalar *fill) {
  m.def(
      name,
      [name, fill](const Tensor &input, std::optional<DType> dtype, py::handle device,
                   bool requiresGrad, py::handle memoryFormat) {
        std::optional<Device> target = targetDeviceLike(device, input, name);
        Tensor t =
            ops::emptyLike(input, dtype.value_or(input.dtype()), preservesLayout(memoryFormat));
        if (target)
          t = Tensor::empty(input.sizes(), t.dtype(), *target);
        if (fill)
          t.fill_(*fill);
        return finishFactory(t, requiresGrad, name);
      },
      py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false,
      py::arg("memory_format") = py::none());
}

void bindFilled(py::module_ &m) {
  defSized(m, "empty", "new_empty", &ops::empty);
  defSized(m, "zeros", "new_zeros", &ops::zeros);
  defSized(m, "ones", "new_ones", &ops::ones);
  static const Scalar kZero(int64_t{0}), kOne(int64_t{1});
  defLike(m, "empty_like", nullptr);
  defLike(m, "zeros_like", &kZero);
  defLike(m, "ones_like", &kOne);

  m.def(
      "full",
      [](py::handle size, py::handle fillValue, std::optional<DType> dtype, py::handle device,
         bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "full");
        Scalar v = toScalar(fillValue, "full");
        Tensor t =
            ops::full(toIntList(size, "full"), v, dtype.value_or(ops::scalarDefaultDType(v)));
        return finishFactory(placeOn(t, target), requiresGrad, "full");
      },
      py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);
  tensorClass(m).def(
      "new_full",
      [](const Tensor &self, py::handle size, py::handle fillValue, std::optional<DType> dtype,
         py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDeviceLike(device, self, "new_full");
        Tensor t = ops::full(toIntList(size, "new_full"), toScalar(fillValue, "new_full"),
                             dtype.value_or(self.dtype()));
        return finishFactory(placeOn(t, target), requiresGrad, "new_full");
      },
      py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);
  m.def(
      "full_like",
      [](const Tensor &input, py::handle fillValue, std::optional<DType> dtype, py::handle device,
         bool requiresGrad, py::handle memoryFormat) {
        std::optional<Device> target = targetDeviceLike(device, input, "full_like");
        Scalar v = toScalar(fillValue, "full_like");
        DType dt = dtype.value_or(input.dtype());
        ops::checkFits(v, dt, "full_like", /*checkFloatTargets=*/true);
        Tensor t = target ? Tensor::empty(input.sizes(), dt, *target)
                          : ops::emptyLike(input, dt, preservesLayout(memoryFormat));
        t.fill_(v);
        return finishFactory(t, requiresGrad, "full_like");
      },
      py::arg("input"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false,
      py::arg("memory_format") = py::none());
  m.def(
      "eye",
      [](int64_t n, std::optional<int64_t> mCols, std::optional<DType> dtype, py::handle device,
         bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "eye");
        Tensor t = ops::eye(n, mCols.value_or(n), dtype.value_or(defaultFloatDType()));
        return finishFactory(placeOn(t, target), requiresGrad, "eye");
      },
      py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);
}

void bindRanges(py::module_ &m) {
  m.def(
      "arange",
      [](py::handle start, py::handle end, py::handle step, std::optional<DType> dtype,
         py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "arange");
        // arange(end), arange(start, end[, step]) and arange(end=...).
        KILN_CHECK_KIND(Type, !start.is_none() || !end.is_none(),
                        "arange() missing required argument 'end'");
        py::handle endArg = end.is_none() ? start : end;
        Scalar st = toScalar(step, "arange"), e = toScalar(endArg, "arange");
        Scalar s =
            end.is_none() || start.is_none() ? Scalar(int64_t{0}) : toScalar(start, "arange");
        // All-integer arguments give int64, any float the default float dtype (as torch).
        bool anyFloat = s.isFloating() || e.isFloating() || st.isFloating();
        DType dt = dtype.value_or(anyFloat ? defaultFloatDType() : DType::Int64);
        return finishFactory(placeOn(ops::arange(s, e, st, dt), target), requiresGrad, "arange");
      },
      py::arg("start") = py::none(), py::arg("end") = py::none(), py::arg("step") = 1,
      py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
  m.def(
      "linspace",
      [](py::handle start, py::handle end, int64_t steps, std::optional<DType> dtype,
         py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "linspace");
        Tensor t = ops::linspace(toScalar(start, "linspace"), toScalar(end, "linspace"), steps,
                                 dtype.value_or(defaultFloatDType()));
        return finishFactory(placeOn(t, target), requiresGrad, "linspace");
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
  m.def(
      "logspace",
      [](py::handle start, py::handle end, int64_t steps, double base, std::optional<DType> dtype,
         py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "logspace");
        Tensor t = ops::logspace(toScalar(start, "logspace"), toScalar(end, "logspace"), steps,
                                 base, dtype.value_or(defaultFloatDType()));
        return finishFactory(placeOn(t, target), requiresGrad, "logspace");
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::arg("base") = 10.0, py::kw_only(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
}

} // namespace

void bindFactory(py::module_ &m) {
  bindFilled(m);
  bindRanges(m);
  bindTensorData(m);
  bindRandom(m);
  // kiln.set_default_device and `with kiln.device(...)` (kiln/_default_device.py); None: the CPU
  // (for the global default) or no block (for this thread's).
  auto parsed = [](const std::optional<std::string> &d) -> std::optional<std::string> {
    if (!d)
      return d;
    Device::parse(*d); // ValueError for an unknown device
    return d;
  };
  m.def("_set_default_device",
        [parsed](std::optional<std::string> d) { gDefaultDevice = parsed(d); });
  m.def("_set_block_device", [parsed](std::optional<std::string> d) {
    std::optional<std::string> previous = tBlockDevice;
    tBlockDevice = parsed(d);
    return previous;
  });
  m.def("_default_device", [] { return defaultDevice().value_or("cpu"); });
}

} // namespace kiln::frontend
