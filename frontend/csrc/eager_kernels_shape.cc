// The eager kernels of the op table's view and shape rows (ir/ops.def KILN_EAGER_SPELLING:
// transpose, unsqueeze, cat, split, ...). Each entry reads its arguments by their position in the
// row's schema; the binding generator has already checked their types and applied the defaults.
#include "frontend/csrc/eager_kernels.h"

#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/shape_ops.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

/// The tensors of a Tensor[] argument (the binder checked that it is a list or tuple of them).
std::vector<Tensor> tensorList(const BoundArgs &a, int i) {
  std::vector<Tensor> out;
  for (py::handle h : py::reinterpret_borrow<py::sequence>(a.get(i)))
    out.push_back(h.cast<Tensor>());
  return out;
}

Tensor flipAxis(const Tensor &self, int64_t minDim, int64_t dim, const char *op) {
  KILN_CHECK(self.dim() >= minDim, "{}: Input must be >= {}-d (got shape {}).", op, minDim,
             self.shapeStr());
  return ops::flip(self, {dim});
}

/// torch.split's size argument: an int size (or a 0-d tensor) splits into equal parts, a list
/// gives each part's size.
std::vector<Tensor> splitAny(const Tensor &self, py::handle size, int64_t dim) {
  if (PyLong_Check(size.ptr()) ||
      (py::isinstance<Tensor>(size) && size.cast<const Tensor &>().dim() == 0))
    return ops::split(self, toScalar(size, "split").toInt(), dim);
  return ops::splitWithSizes(self, toIntList(size, "split"), dim);
}

/// torch.tensor_split's second argument: sections (int or 0-d tensor) or indices (list or 1-D).
std::vector<Tensor> tensorSplitAny(const Tensor &self, py::handle arg, int64_t dim) {
  if (py::isinstance<Tensor>(arg)) {
    const Tensor &t = arg.cast<const Tensor &>();
    KILN_CHECK(isIntegral(t.dtype(), false) && t.dim() <= 1,
               "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
               "one-dimensional tensor of integers, but got a {} tensor of shape {}",
               dtypeName(t.dtype()), t.shapeStr());
    if (t.dim() == 0)
      return ops::tensorSplit(self, t.item().toInt(), dim);
    Tensor c = t.to(DType::Int64).contiguous();
    return ops::tensorSplitIndices(self, IntList(c.data<int64_t>(), c.numel()), dim);
  }
  KILN_CHECK_KIND(Type,
                  PyLong_Check(arg.ptr()) || PyList_Check(arg.ptr()) || PyTuple_Check(arg.ptr()),
                  "tensor_split(): argument 'indices_or_sections' must be int, tuple of ints or "
                  "Tensor, not {}",
                  std::string(py::str(py::type::of(arg).attr("__name__"))));
  if (PyLong_Check(arg.ptr()))
    return ops::tensorSplit(self, arg.cast<int64_t>(), dim);
  return ops::tensorSplitIndices(self, toIntList(arg, "tensor_split"), dim);
}

Tensor repeatInterleaveAny(const BoundArgs &a) {
  Tensor self = a.tensor(0);
  if (a.isNone(1))
    return ops::repeatInterleaveIndices(self);
  py::handle repeats = a.get(1);
  if (py::isinstance<Tensor>(repeats))
    return ops::repeatInterleave(self, repeats.cast<const Tensor &>(), a.optInt(2));
  KILN_CHECK_KIND(Type, PyLong_Check(repeats.ptr()) && !PyBool_Check(repeats.ptr()),
                  "repeat_interleave(): argument 'repeats' must be Tensor or int, not {}",
                  std::string(py::str(py::type::of(repeats).attr("__name__"))));
  return ops::repeatInterleave(self, repeats.cast<int64_t>(), a.optInt(2));
}

// clang-format off
const EagerKernel kShapeKernels[] = {
    // Views.
    {std::nullopt, "transpose", [](const BoundArgs &a) {
       return autograd::transpose(a.tensor(0), a.toInt(1), a.toInt(2));
     }},
    {std::nullopt, "swapaxes", [](const BoundArgs &a) {
       return autograd::transpose(a.tensor(0), a.toInt(1), a.toInt(2));
     }},
    {std::nullopt, "t", [](const BoundArgs &a) { return autograd::t(a.tensor(0)); }},
    {std::nullopt, "permute", [](const BoundArgs &a) {
       return autograd::permute(a.tensor(0), a.intList(1));
     }},
    {std::nullopt, "expand", [](const BoundArgs &a) {
       return autograd::expand(a.tensor(0), a.intList(1));
     }},
    {std::nullopt, "unsqueeze", [](const BoundArgs &a) {
       return autograd::unsqueeze(a.tensor(0), a.toInt(1));
     }},
    {std::nullopt, "squeeze", [](const BoundArgs &a) {
       std::optional<Shape> dims = a.optIntList(1);
       return dims ? autograd::squeeze(a.tensor(0), *dims) : autograd::squeeze(a.tensor(0));
     }},
    {std::nullopt, "flatten", [](const BoundArgs &a) {
       return autograd::flatten(a.tensor(0), a.toInt(1), a.toInt(2));
     }},
    {std::nullopt, "unflatten", [](const BoundArgs &a) {
       return autograd::unflatten(a.tensor(0), a.toInt(1), a.intList(2));
     }},
    {std::nullopt, "narrow", [](const BoundArgs &a) {
       return autograd::narrow(a.tensor(0), a.toInt(1), a.toInt(2), a.toInt(3));
     }},
    {std::nullopt, "select", [](const BoundArgs &a) {
       return autograd::select(a.tensor(0), a.toInt(1), a.toInt(2));
     }},
    {std::nullopt, "movedim", [](const BoundArgs &a) {
       return ops::movedim(a.tensor(0), a.intList(1), a.intList(2));
     }},
    {std::nullopt, "diagonal", [](const BoundArgs &a) {
       return ops::diagonal(a.tensor(0), a.toInt(1), a.toInt(2), a.toInt(3));
     }},
    {std::nullopt, "view_as", [](const BoundArgs &a) {
       return autograd::view(a.tensor(0), a.tensor(1).sizes());
     }, nullptr, nullptr, -1, true},
    {std::nullopt, "reshape_as", [](const BoundArgs &a) {
       return autograd::reshape(a.tensor(0), a.tensor(1).sizes());
     }, nullptr, nullptr, -1, true},
    {std::nullopt, "expand_as", [](const BoundArgs &a) {
       return autograd::expand(a.tensor(0), a.tensor(1).sizes());
     }, nullptr, nullptr, -1, true},
    {std::nullopt, "broadcast_to", [](const BoundArgs &a) {
       return ops::broadcastTo(a.tensor(0), a.intList(1));
     }},
    // Copies: diagonals, repeats, flips.
    {std::nullopt, "diag", [](const BoundArgs &a) { return ops::diag(a.tensor(0), a.toInt(1)); }},
    {std::nullopt, "diag_embed", [](const BoundArgs &a) {
       return ops::diagEmbed(a.tensor(0), a.toInt(1), a.toInt(2), a.toInt(3));
     }},
    {std::nullopt, "tile", [](const BoundArgs &a) { return ops::tile(a.tensor(0), a.intList(1)); }},
    {std::nullopt, "repeat_interleave", repeatInterleaveAny},
    {std::nullopt, "fliplr", [](const BoundArgs &a) {
       return flipAxis(a.tensor(0), 2, 1, "fliplr");
     }},
    {std::nullopt, "flipud", [](const BoundArgs &a) {
       return flipAxis(a.tensor(0), 1, 0, "flipud");
     }},
    {std::nullopt, "as_strided", [](const BoundArgs &a) {
       return autograd::asStrided(a.tensor(0), a.intList(1), a.intList(2), a.optInt(3));
     }, nullptr, nullptr, -1, true},
    {std::nullopt, "broadcast_tensors", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(ops::broadcastTensors(tensorList(a, 0)));
     }},
    {std::nullopt, "meshgrid", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(ops::meshgrid(tensorList(a, 0), a.optStr(1).value_or("ij")));
     }},
    // Joining and splitting.
    {std::nullopt, "cat", [](const BoundArgs &a) { return ops::cat(tensorList(a, 0), a.toInt(1)); }},
    {std::nullopt, "concatenate", [](const BoundArgs &a) {
       return ops::cat(tensorList(a, 0), a.toInt(1));
     }},
    {std::nullopt, "stack", [](const BoundArgs &a) {
       return ops::stack(tensorList(a, 0), a.toInt(1));
     }},
    {std::nullopt, "split", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(splitAny(a.tensor(0), a.get(1), a.toInt(2)));
     }},
    {std::nullopt, "split_with_sizes", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(ops::splitWithSizes(a.tensor(0), a.intList(1), a.toInt(2)));
     }},
    {std::nullopt, "chunk", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(ops::chunk(a.tensor(0), a.toInt(1), a.toInt(2)));
     }},
    {std::nullopt, "tensor_split", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(tensorSplitAny(a.tensor(0), a.get(1), a.toInt(2)));
     }},
    {std::nullopt, "unbind", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       return tensorTuple(autograd::unbind(a.tensor(0), a.toInt(1)));
     }},
};
// clang-format on

} // namespace

std::span<const EagerKernel> shapeEagerKernels() { return kShapeKernels; }

} // namespace kiln::frontend
