// NumPy and DLPack interop, zero-copy both ways where the memory allows.
#include "frontend/csrc/bind_factory.h"
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/dlpack.h"
#include "runtime/error.h"

#include <optional>
#include <vector>

namespace kiln::frontend {

namespace {

/// The NumPy dtypes kiln has, in DType order (BFloat16 has none), made once: a compiled NumPy
/// function converts its arguments and results on every call, and building a dtype from its name
/// or reading a descriptor's attributes costs more than the rest of the conversion.
constexpr DType kNumpyDTypes[] = {DType::Bool,    DType::UInt8,   DType::Int8,
                                  DType::Int16,   DType::Int32,   DType::Int64,
                                  DType::Float16, DType::Float32, DType::Float64};

const std::vector<py::dtype> &numpyDTypes() {
  // Leaked: NumPy's builtin descriptors live as long as the interpreter.
  static const auto *dtypes = [] {
    auto *v = new std::vector<py::dtype>;
    for (const char *name :
         {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"})
      v->push_back(py::dtype(name));
    return v;
  }();
  return *dtypes;
}

py::dtype numpyDType(DType t) {
  for (size_t i = 0; i < std::size(kNumpyDTypes); ++i)
    if (kNumpyDTypes[i] == t)
      return numpyDTypes()[i];
  fail(ErrorKind::Type,
       "Got unsupported ScalarType {}: NumPy has no {} dtype; convert with "
       ".float() first",
       dtypeName(t), dtypeName(t));
}

/// The DType of a builtin native-order NumPy descriptor (NumPy hands out one object per builtin
/// type), or nullopt for any other descriptor.
std::optional<DType> builtinDType(const py::dtype &d) {
  const auto &dtypes = numpyDTypes();
  for (size_t i = 0; i < dtypes.size(); ++i)
    if (dtypes[i].ptr() == d.ptr())
      return kNumpyDTypes[i];
  return std::nullopt;
}

/// Bytes spanned by a strided view (0 when it has no elements).
size_t spannedBytes(IntList sizes, IntList strides, int64_t itemsize) {
  int64_t maxOff = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0)
      return 0;
    maxOff += (sizes[i] - 1) * strides[i];
  }
  return static_cast<size_t>((maxOff + 1) * itemsize);
}

py::array tensorToNumpy(const Tensor &input, bool force) {
  KILN_CHECK(input.isCpu() || force,
             "numpy(): can't convert {} device tensor to numpy; use .cpu() first",
             input.device().str());
  Tensor self = input.isCpu() ? input : input.to(Device{}); // force=True copies to the host
  if (self.requiresGrad() && !force)
    fail(ErrorKind::Runtime, "Can't call numpy() on Tensor that requires grad. Use "
                             "tensor.detach().numpy() instead.");
  std::vector<py::ssize_t> shape(self.sizes().begin(), self.sizes().end());
  std::vector<py::ssize_t> strides(self.dim());
  for (int64_t i = 0; i < self.dim(); ++i)
    strides[i] = self.strides()[i] * self.itemsize();
  // The capsule keeps the storage alive as long as the array (and its views) exist.
  auto *keep = new Tensor(self);
  py::capsule base(keep, [](void *p) { delete static_cast<Tensor *>(p); });
  return py::array(numpyDType(self.dtype()), shape, strides, self.rawData(), base);
}

/// A tensor over `arr`'s memory (of builtin dtype `dt`, strides in whole non-negative elements:
/// checked by the caller), keeping the array alive.
Tensor borrowArray(const py::array &arr, DType dt) {
  const int64_t isz = itemsize(dt);
  Shape sizes(arr.ndim()), strides(arr.ndim());
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    sizes[i] = arr.shape(i);
    strides[i] = arr.strides(i) / isz;
  }
  PyObject *owner = arr.ptr();
  Py_INCREF(owner);
  auto storage = Storage::borrow(const_cast<void *>(arr.data()), spannedBytes(sizes, strides, isz),
                                 Device{}, [owner] {
                                   py::gil_scoped_acquire gil;
                                   Py_DECREF(owner);
                                 });
  return Tensor::fromStorage(storage, dt, sizes, strides, 0);
}

} // namespace

DType dtypeFromNumpy(const py::dtype &d) {
  if (auto builtin = builtinDType(d))
    return *builtin;
  // Read through Python attributes: NumPy 2 changed the descriptor struct that older pybind11
  // accessors read directly.
  char kind = d.attr("kind").cast<std::string>()[0];
  int64_t size = d.attr("itemsize").cast<int64_t>();
  if (kind == 'b')
    return DType::Bool;
  if (kind == 'u' && size == 1)
    return DType::UInt8;
  if (kind == 'i') {
    switch (size) {
    case 1:
      return DType::Int8;
    case 2:
      return DType::Int16;
    case 4:
      return DType::Int32;
    case 8:
      return DType::Int64;
    }
  }
  if (kind == 'f') {
    switch (size) {
    case 2:
      return DType::Float16;
    case 4:
      return DType::Float32;
    case 8:
      return DType::Float64;
    }
  }
  fail(ErrorKind::Type,
       "can't convert np.ndarray of type {}. The only supported types are: float64, float32, "
       "float16, int64, int32, int16, int8, uint8, and bool.",
       std::string(py::repr(d)));
}

Tensor tensorFromNumpy(const py::array &input, bool share) {
  py::array arr = input;
  if (!share) {
    // A private native-endian contiguous copy: any readable array qualifies.
    py::module_ np = py::module_::import("numpy");
    py::object native = arr.dtype().attr("newbyteorder")("=");
    // np.array, not ascontiguousarray (which turns 0-d arrays into 1-d ones).
    arr = py::reinterpret_borrow<py::array>(
        np.attr("array")(arr, py::arg("dtype") = native, py::arg("order") = "C"));
  }
  const py::dtype descr = arr.dtype();
  const std::optional<DType> builtin = builtinDType(descr);
  DType dt = builtin ? *builtin : dtypeFromNumpy(descr);
  KILN_CHECK_KIND(Type, builtin || descr.attr("byteorder").cast<std::string>() != ">",
                  "from_numpy: arrays in non-native byte order are not supported ({}); convert "
                  "with arr.astype(arr.dtype.newbyteorder('='))",
                  std::string(py::repr(descr)));
  const int64_t isz = itemsize(dt);
  for (py::ssize_t i = 0; i < arr.ndim(); ++i)
    KILN_CHECK_KIND(Value, arr.strides(i) >= 0 && arr.strides(i) % isz == 0,
                    "from_numpy: arrays with negative or unaligned strides are not supported "
                    "(stride {} bytes at dim {}); use np.ascontiguousarray first",
                    arr.strides(i), i);
  KILN_CHECK_KIND(Value, !share || arr.writeable(),
                  "from_numpy: the given NumPy array is not writable; copy it first");
  Tensor t = borrowArray(arr, dt);
  return share ? t : t.clone();
}

namespace {

/// One array's place in memory, for grouping arrays that overlap.
struct ArraySpan {
  size_t index;
  uintptr_t lo, hi; // bytes [lo, hi)
};

/// The dtype of an array a tensor can share the memory of (writable, of a builtin native dtype,
/// with non-negative strides in whole elements), else nullopt.
std::optional<DType> addressableDType(const py::array &arr) {
  const std::optional<DType> dt = builtinDType(arr.dtype());
  if (!dt || !arr.writeable())
    return std::nullopt;
  const int64_t isz = itemsize(*dt);
  for (py::ssize_t i = 0; i < arr.ndim(); ++i)
    if (arr.strides(i) < 0 || arr.strides(i) % isz != 0)
      return std::nullopt;
  return dt;
}

/// A compiled function's ndarray argument: shared where kiln can address the memory, else a
/// private copy (a read-only array, negative or unaligned strides, a non-native byte order).
/// A NumPy scalar becomes a 0-d array first.
Tensor ndarrayArgument(const py::object &value) {
  if (py::isinstance<py::array>(value)) {
    auto arr = py::reinterpret_borrow<py::array>(value);
    if (std::optional<DType> dt = addressableDType(arr))
      return borrowArray(arr, *dt); // checked once: the per-call path
    return tensorFromNumpy(arr, false);
  }
  py::array arr = py::array::ensure(value);
  KILN_CHECK_KIND(Type, arr, "expected a NumPy array or scalar, got {}",
                  std::string(py::str(py::type::of(value).attr("__name__"))));
  return tensorFromNumpy(arr, false);
}

/// Tensors over each array's memory (as from_numpy), where arrays whose bytes overlap (views of
/// one buffer, of one dtype) become views of one storage: a compiled program then sees that
/// they alias, so a write through one is read through the other as in NumPy.
std::vector<Tensor> tensorsFromNumpy(const std::vector<py::object> &values) {
  std::vector<Tensor> out;
  std::vector<ArraySpan> spans;
  std::vector<py::array> arrays(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    std::optional<DType> dt;
    if (py::isinstance<py::array>(values[i]))
      dt = addressableDType(arrays[i] = py::reinterpret_borrow<py::array>(values[i]));
    out.push_back(dt ? borrowArray(arrays[i], *dt) : ndarrayArgument(values[i]));
    if (!dt)
      continue; // a private copy (of a scalar too) aliases nothing
    const Tensor &t = out.back();
    auto lo = reinterpret_cast<uintptr_t>(t.rawData());
    spans.push_back({i, lo, lo + static_cast<uintptr_t>(t.storage()->nbytes())});
  }
  std::sort(spans.begin(), spans.end(),
            [](const ArraySpan &a, const ArraySpan &b) { return a.lo < b.lo; });
  for (size_t begin = 0; begin < spans.size();) {
    size_t end = begin + 1;
    uintptr_t hi = spans[begin].hi;
    while (end < spans.size() && spans[end].lo < hi)
      hi = std::max(hi, spans[end++].hi);
    const uintptr_t lo = spans[begin].lo;
    const DType dt = out[spans[begin].index].dtype();
    const int64_t isz = itemsize(dt);
    bool together = end - begin > 1;
    for (size_t k = begin; k < end && together; ++k)
      together = out[spans[k].index].dtype() == dt && (spans[k].lo - lo) % isz == 0;
    if (together) {
      std::vector<PyObject *> owners;
      for (size_t k = begin; k < end; ++k) {
        owners.push_back(arrays[spans[k].index].ptr());
        Py_INCREF(owners.back());
      }
      auto storage = Storage::borrow(reinterpret_cast<void *>(lo), hi - lo, Device{}, [owners] {
        py::gil_scoped_acquire gil;
        for (PyObject *o : owners)
          Py_DECREF(o);
      });
      for (size_t k = begin; k < end; ++k) {
        Tensor &t = out[spans[k].index];
        t = Tensor::fromStorage(storage, dt, t.sizes(), t.strides(),
                                static_cast<int64_t>(spans[k].lo - lo) / isz);
      }
    }
    begin = end;
  }
  return out;
}

// ---- DLPack ------------------------------------------------------------------------------------

using namespace dlpack;

DLDataType toDLDataType(DType t) {
  uint8_t bits = static_cast<uint8_t>(itemsize(t) * 8);
  switch (t) {
  case DType::Bool:
    return {kDLBool, 8, 1};
  case DType::UInt8:
    return {kDLUInt, 8, 1};
  case DType::Int8:
  case DType::Int16:
  case DType::Int32:
  case DType::Int64:
    return {kDLInt, bits, 1};
  case DType::BFloat16:
    return {kDLBfloat, 16, 1};
  case DType::Float16:
  case DType::Float32:
  case DType::Float64:
    return {kDLFloat, bits, 1};
  }
  __builtin_unreachable();
}

DType fromDLDataType(DLDataType d) {
  auto unsupported = [&]() -> DType {
    fail(ErrorKind::Type,
         "from_dlpack: unsupported DLPack dtype (code={}, bits={}, lanes={}); kiln supports "
         "bool, uint8, int8/16/32/64, float16/32/64 and bfloat16",
         d.code, d.bits, d.lanes);
  };
  if (d.lanes != 1)
    return unsupported();
  switch (d.code) {
  case kDLBool:
    return d.bits == 8 ? DType::Bool : unsupported();
  case kDLUInt:
    return d.bits == 8 ? DType::UInt8 : unsupported();
  case kDLInt:
    switch (d.bits) {
    case 8:
      return DType::Int8;
    case 16:
      return DType::Int16;
    case 32:
      return DType::Int32;
    case 64:
      return DType::Int64;
    }
    return unsupported();
  case kDLFloat:
    switch (d.bits) {
    case 16:
      return DType::Float16;
    case 32:
      return DType::Float32;
    case 64:
      return DType::Float64;
    }
    return unsupported();
  case kDLBfloat:
    return d.bits == 16 ? DType::BFloat16 : unsupported();
  default:
    return unsupported();
  }
}

/// What a kiln-made managed tensor owns: the tensor (keeping its storage alive) and the shape
/// and stride arrays the DLTensor points into. One of the two managed structs is handed out.
struct ExportContext {
  Tensor tensor;
  Shape shape;
  Shape strides;
  DLManagedTensor managed{};
  DLManagedTensorVersioned versioned{};
};

void deleteExport(DLManagedTensor *self) { delete static_cast<ExportContext *>(self->manager_ctx); }
void deleteExportVersioned(DLManagedTensorVersioned *self) {
  delete static_cast<ExportContext *>(self->manager_ctx);
}

/// Capsule destructors: a consumer renames the capsule ("used_...") and takes over the deleter,
/// so only a capsule still carrying its original name is freed here.
template <typename Managed> void destroyUnconsumed(PyObject *capsule, const char *name) {
  if (!PyCapsule_IsValid(capsule, name))
    return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto *m = static_cast<Managed *>(PyCapsule_GetPointer(capsule, name));
  if (m && m->deleter)
    m->deleter(m);
  PyErr_Restore(type, value, traceback);
}
void destroyCapsule(PyObject *c) { destroyUnconsumed<DLManagedTensor>(c, "dltensor"); }
void destroyVersionedCapsule(PyObject *c) {
  destroyUnconsumed<DLManagedTensorVersioned>(c, "dltensor_versioned");
}

/// A capsule sharing t's memory: "dltensor_versioned" (DLPack 1.0, writable) when the consumer
/// accepts it, else the 0.x "dltensor" (which NumPy, for one, imports read-only).
py::capsule toDLPackCapsule(const Tensor &t, bool versioned) {
  auto *ctx = new ExportContext{t, t.sizes(), t.strides()};
  DLTensor dl{};
  dl.data = t.rawData();
  dl.device = {kDLCPU, 0};
  dl.ndim = static_cast<int32_t>(t.dim());
  dl.dtype = toDLDataType(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  PyObject *cap;
  if (versioned) {
    ctx->versioned = {{1, 0}, ctx, deleteExportVersioned, 0, dl};
    cap = PyCapsule_New(&ctx->versioned, "dltensor_versioned", destroyVersionedCapsule);
  } else {
    ctx->managed = {dl, ctx, deleteExport};
    cap = PyCapsule_New(&ctx->managed, "dltensor", destroyCapsule);
  }
  if (!cap) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

/// A tensor viewing a producer's DLTensor; `release` (the producer's deleter) runs once, when the
/// last view of the memory dies. Validates before taking ownership, so on error the capsule
/// stays unconsumed and its own destructor frees it.
Tensor fromDLTensor(const DLTensor &dl, std::function<void()> release) {
  KILN_CHECK(dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost,
             "from_dlpack: kiln runs on the CPU only and cannot import a tensor on DLPack "
             "device type {} (device id {})",
             static_cast<int>(dl.device.device_type), dl.device.device_id);
  DType dt = fromDLDataType(dl.dtype);
  KILN_CHECK_KIND(Value, dl.ndim >= 0, "from_dlpack: invalid ndim {}", dl.ndim);
  Shape sizes(dl.shape, dl.shape + dl.ndim);
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguousStrides(sizes);
  for (int32_t i = 0; i < dl.ndim; ++i) {
    KILN_CHECK_KIND(Value, sizes[i] >= 0, "from_dlpack: negative size {} at dim {}", sizes[i], i);
    KILN_CHECK_KIND(Value, strides[i] >= 0 || sizes[i] <= 1,
                    "from_dlpack: negative strides are not supported (stride {} at dim {}); make "
                    "the array contiguous first",
                    strides[i], i);
    if (sizes[i] <= 1)
      strides[i] = std::max<int64_t>(strides[i], 0);
  }
  char *data = static_cast<char *>(dl.data) + dl.byte_offset;
  auto storage = Storage::borrow(data, spannedBytes(sizes, strides, itemsize(dt)), Device{},
                                 std::move(release));
  return Tensor::fromStorage(std::move(storage), dt, sizes, strides, 0);
}

Tensor fromCapsule(py::handle capsule) {
  PyObject *c = capsule.ptr();
  if (PyCapsule_IsValid(c, "dltensor")) {
    auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(c, "dltensor"));
    Tensor t = fromDLTensor(m->dl_tensor, [m] {
      if (m->deleter)
        m->deleter(m);
    });
    PyCapsule_SetName(c, "used_dltensor");
    return t;
  }
  if (PyCapsule_IsValid(c, "dltensor_versioned")) {
    auto *m =
        static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(c, "dltensor_versioned"));
    KILN_CHECK(m->version.major == 1,
               "from_dlpack: unsupported DLPack version {}.{} (kiln reads 0.x and 1.x)",
               m->version.major, m->version.minor);
    KILN_CHECK_KIND(Value, !(m->flags & kFlagReadOnly),
                    "from_dlpack: the DLPack tensor is read-only and kiln tensors are always "
                    "writable; copy it first");
    Tensor t = fromDLTensor(m->dl_tensor, [m] {
      if (m->deleter)
        m->deleter(m);
    });
    PyCapsule_SetName(c, "used_dltensor_versioned");
    return t;
  }
  const char *name = PyCapsule_GetName(c);
  std::string n = name ? name : "";
  KILN_CHECK_KIND(Value, n != "used_dltensor" && n != "used_dltensor_versioned",
                  "from_dlpack: this DLPack capsule was already consumed (a capsule can be "
                  "imported only once)");
  fail(ErrorKind::Type, "from_dlpack: expected a 'dltensor' capsule, got a capsule named '{}'", n);
}

Tensor fromDLPack(py::handle obj) {
  if (PyCapsule_CheckExact(obj.ptr()))
    return fromCapsule(obj);
  KILN_CHECK_KIND(Type, py::hasattr(obj, "__dlpack__"),
                  "from_dlpack: expected an object with a __dlpack__ method (a tensor or array) "
                  "or a DLPack capsule, got {}",
                  std::string(py::str(py::type::of(obj).attr("__name__"))));
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::tuple dev = obj.attr("__dlpack_device__")();
    int type = dev[0].cast<int>();
    KILN_CHECK(type == kDLCPU || type == kDLCUDAHost,
               "from_dlpack: kiln runs on the CPU only and cannot import a tensor on DLPack "
               "device type {}",
               type);
  }
  return fromCapsule(obj.attr("__dlpack__")());
}

/// Tensor.__dlpack__ (array API): a versioned capsule when max_version allows 1.x, else 0.x.
py::capsule exportDLPack(const Tensor &self, py::handle stream, py::handle maxVersion,
                         py::handle dlDevice, py::handle copy) {
  KILN_CHECK(!self.requiresGrad(),
             "Can't export tensors that require gradient, use tensor.detach()");
  KILN_CHECK_KIND(Type, stream.is_none() || PyLong_Check(stream.ptr()),
                  "__dlpack__: stream must be an int or None");
  if (!dlDevice.is_none()) {
    py::tuple dev = py::reinterpret_borrow<py::tuple>(dlDevice);
    if (dev[0].cast<int>() != kDLCPU || dev[1].cast<int>() != 0)
      throw py::buffer_error("__dlpack__: kiln tensors live on the CPU and can only be exported "
                             "to dl_device (1, 0)");
  }
  bool forceCopy = !copy.is_none() && copy.cast<bool>();
  bool versioned =
      !maxVersion.is_none() && py::reinterpret_borrow<py::tuple>(maxVersion)[0].cast<int>() >= 1;
  return toDLPackCapsule(forceCopy ? self.clone() : self, versioned);
}

} // namespace

void bindInterop(py::module_ &m) {
  m.def("from_numpy", [](py::array arr) { return tensorFromNumpy(arr, true); }, py::arg("ndarray"));
  m.def("_ndarray_argument", &ndarrayArgument, py::arg("ndarray"),
        "A compiled function's ndarray argument as a tensor over the same memory (a copy only "
        "for arrays kiln cannot address)");
  m.def("_from_numpy_arrays", &tensorsFromNumpy, py::arg("ndarrays"),
        "from_numpy of each array; arrays whose memory overlaps share one storage");
  m.def("from_dlpack", &fromDLPack, py::arg("ext_tensor"));

  py::class_<Tensor> t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  t.def("numpy", &tensorToNumpy, py::arg("force") = false);
  m.def(
      "_ndarray_result",
      [](const Tensor &t) -> py::object {
        py::array a = tensorToNumpy(t, false);
        return t.dim() == 0 ? a[py::tuple()] : py::object(std::move(a));
      },
      py::arg("tensor"),
      "A compiled NumPy function's array result: an ndarray over the tensor's memory, or a NumPy "
      "scalar for a 0-d one, as NumPy's ufuncs and reductions return");
  t.def("__dlpack__", &exportDLPack, py::arg("stream") = py::none(), py::kw_only(),
        py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
        py::arg("copy") = py::none());
  t.def("__dlpack_device__", [](const Tensor &) { return py::make_tuple(int(kDLCPU), 0); });
}

} // namespace kiln::frontend
