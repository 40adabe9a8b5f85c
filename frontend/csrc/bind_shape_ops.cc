// Shape ops: kiln.<op> functions and Tensor methods for joining, splitting, repeating, flipping,
// diagonals, broadcasting and padding (runtime/ops/shape_ops.h).
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/shape_ops.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// A sequence of kiln tensors (list or tuple); TypeError naming op otherwise.
std::vector<Tensor> toTensorList(py::handle seq, const char *op) {
  KILN_CHECK_KIND(Type, PySequence_Check(seq.ptr()) && !py::isinstance<Tensor>(seq),
                  "{}(): argument 'tensors' must be a tuple or list of Tensors, not {}", op,
                  std::string(py::str(py::type::of(seq).attr("__name__"))));
  std::vector<Tensor> out;
  size_t i = 0;
  for (py::handle h : py::reinterpret_borrow<py::sequence>(seq)) {
    KILN_CHECK_KIND(Type, py::isinstance<Tensor>(h),
                    "{}(): expected a sequence of Tensors, but element {} is a {}", op, i,
                    std::string(py::str(py::type::of(h).attr("__name__"))));
    out.push_back(h.cast<Tensor>());
    ++i;
  }
  return out;
}

/// Tensors passed either as f(a, b, c) or as f([a, b, c]).
std::vector<Tensor> tensorArgs(const py::args &args, const char *op) {
  if (args.size() == 1 && !py::isinstance<Tensor>(args[0]))
    return toTensorList(args[0], op);
  return toTensorList(args, op);
}

/// An int list given as varargs (x.flip(0, 1), x.flip((0, 1))) or as the keyword `name`.
Shape varInts(const py::args &args, const py::kwargs &kwargs, const char *name, const char *op) {
  if (args.size() == 0 && kwargs.contains(name))
    return toIntList(kwargs[name], op);
  KILN_CHECK_KIND(Type, args.size() > 0, "{}(): missing required argument '{}'", op, name);
  return toShape(args, op);
}

py::tuple toTuple(const std::vector<Tensor> &ts) { return py::tuple(py::cast(ts)); }

/// torch.split's second argument: an int size or a list of sizes.
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
  if (PyLong_Check(arg.ptr()))
    return ops::tensorSplit(self, arg.cast<int64_t>(), dim);
  return ops::tensorSplitIndices(self, toIntList(arg, "tensor_split"), dim);
}

Tensor repeatInterleaveAny(const Tensor &self, py::handle repeats, std::optional<int64_t> dim) {
  if (py::isinstance<Tensor>(repeats))
    return ops::repeatInterleave(self, repeats.cast<const Tensor &>(), dim);
  KILN_CHECK_KIND(Type, PyLong_Check(repeats.ptr()) && !PyBool_Check(repeats.ptr()),
                  "repeat_interleave(): repeats must be an int or a Tensor, not {}",
                  std::string(py::str(py::type::of(repeats).attr("__name__"))));
  return ops::repeatInterleave(self, repeats.cast<int64_t>(), dim);
}

Tensor movedimAny(const Tensor &self, py::handle source, py::handle destination) {
  return ops::movedim(self, toIntList(source, "movedim"), toIntList(destination, "movedim"));
}

Tensor flipAxis(const Tensor &self, int64_t minDim, int64_t dim, const char *op) {
  KILN_CHECK(self.dim() >= minDim, "{}: Input must be >= {}-d (got shape {}).", op, minDim,
             self.shapeStr());
  return ops::flip(self, {dim});
}

void bindJoinSplit(py::module_ &m, py::class_<Tensor> &t) {
  auto cat = [](py::handle tensors, int64_t dim) {
    return ops::cat(toTensorList(tensors, "cat"), dim);
  };
  m.def("cat", cat, py::arg("tensors"), py::arg("dim") = 0);
  m.def("concat", cat, py::arg("tensors"), py::arg("dim") = 0);
  m.def("concatenate", cat, py::arg("tensors"), py::arg("axis") = 0);
  m.def(
      "stack",
      [](py::handle tensors, int64_t dim) {
        return ops::stack(toTensorList(tensors, "stack"), dim);
      },
      py::arg("tensors"), py::arg("dim") = 0);
  auto split = [](const Tensor &self, py::handle size, int64_t dim) {
    return toTuple(splitAny(self, size, dim));
  };
  m.def("split", split, py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0);
  t.def("split", split, py::arg("split_size"), py::arg("dim") = 0);
  t.def(
      "split_with_sizes",
      [](const Tensor &self, py::handle sizes, int64_t dim) {
        return toTuple(ops::splitWithSizes(self, toIntList(sizes, "split_with_sizes"), dim));
      },
      py::arg("split_sizes"), py::arg("dim") = 0);
  auto chunk = [](const Tensor &self, int64_t chunks, int64_t dim) {
    return toTuple(ops::chunk(self, chunks, dim));
  };
  m.def("chunk", chunk, py::arg("input"), py::arg("chunks"), py::arg("dim") = 0);
  t.def("chunk", chunk, py::arg("chunks"), py::arg("dim") = 0);
  auto tensorSplit = [](const Tensor &self, py::handle arg, int64_t dim) {
    return toTuple(tensorSplitAny(self, arg, dim));
  };
  m.def("tensor_split", tensorSplit, py::arg("input"), py::arg("indices_or_sections"),
        py::arg("dim") = 0);
  t.def("tensor_split", tensorSplit, py::arg("indices_or_sections"), py::arg("dim") = 0);
  m.def(
      "unbind",
      [](const Tensor &self, int64_t dim) { return toTuple(autograd::unbind(self, dim)); },
      py::arg("input"), py::arg("dim") = 0);
}

void bindRepeatFlip(py::module_ &m, py::class_<Tensor> &t) {
  m.def(
      "tile",
      [](const Tensor &self, py::handle dims) { return ops::tile(self, toIntList(dims, "tile")); },
      py::arg("input"), py::arg("dims"));
  t.def("tile", [](const Tensor &self, py::args args, py::kwargs kwargs) {
    return ops::tile(self, varInts(args, kwargs, "dims", "tile"));
  });
  auto repeatInterleave = [](const Tensor &self, py::object repeats, std::optional<int64_t> dim,
                             py::object) {
    if (repeats.is_none())
      return ops::repeatInterleaveIndices(self);
    return repeatInterleaveAny(self, repeats, dim);
  };
  m.def("repeat_interleave", repeatInterleave, py::arg("input"), py::arg("repeats") = py::none(),
        py::arg("dim") = py::none(), py::kw_only(), py::arg("output_size") = py::none());
  t.def("repeat_interleave", repeatInterleave, py::arg("repeats") = py::none(),
        py::arg("dim") = py::none(), py::kw_only(), py::arg("output_size") = py::none());
  auto fliplr = [](const Tensor &self) { return flipAxis(self, 2, 1, "fliplr"); };
  auto flipud = [](const Tensor &self) { return flipAxis(self, 1, 0, "flipud"); };
  m.def("fliplr", fliplr, py::arg("input"));
  t.def("fliplr", fliplr);
  m.def("flipud", flipud, py::arg("input"));
  t.def("flipud", flipud);
  m.def("movedim", movedimAny, py::arg("input"), py::arg("source"), py::arg("destination"));
  t.def("movedim", movedimAny, py::arg("source"), py::arg("destination"));
  m.def("moveaxis", movedimAny, py::arg("input"), py::arg("source"), py::arg("destination"));
  t.def("moveaxis", movedimAny, py::arg("source"), py::arg("destination"));
}

void bindTriangleDiag(py::module_ &m, py::class_<Tensor> &t) {
  m.def("diagonal", &ops::diagonal, py::arg("input"), py::arg("offset") = 0, py::arg("dim1") = 0,
        py::arg("dim2") = 1);
  t.def("diagonal", &ops::diagonal, py::arg("offset") = 0, py::arg("dim1") = 0,
        py::arg("dim2") = 1);
  m.def("diag", &ops::diag, py::arg("input"), py::arg("diagonal") = 0);
  t.def("diag", &ops::diag, py::arg("diagonal") = 0);
  m.def("diag_embed", &ops::diagEmbed, py::arg("input"), py::arg("offset") = 0,
        py::arg("dim1") = -2, py::arg("dim2") = -1);
  t.def("diag_embed", &ops::diagEmbed, py::arg("offset") = 0, py::arg("dim1") = -2,
        py::arg("dim2") = -1);
}

void bindBroadcastPad(py::module_ &m, py::class_<Tensor> &t) {
  auto broadcastTo = [](const Tensor &self, py::handle size) {
    return ops::broadcastTo(self, toIntList(size, "broadcast_to"));
  };
  m.def("broadcast_to", broadcastTo, py::arg("input"), py::arg("size"));
  t.def("broadcast_to", broadcastTo, py::arg("size"));
  m.def("broadcast_tensors", [](py::args args) {
    return toTuple(ops::broadcastTensors(tensorArgs(args, "broadcast_tensors")));
  });
  m.def(
      "meshgrid",
      [](py::args args, py::object indexing) {
        std::string mode = indexing.is_none() ? "ij" : indexing.cast<std::string>();
        return toTuple(ops::meshgrid(tensorArgs(args, "meshgrid"), mode));
      },
      py::kw_only(), py::arg("indexing") = py::none());
  m.def(
      "pad",
      [](const Tensor &self, py::handle pad, const std::string &mode, std::optional<double> value) {
        return ops::pad(self, toIntList(pad, "pad"), mode, value);
      },
      py::arg("input"), py::arg("pad"), py::arg("mode") = "constant",
      py::arg("value") = py::none());
  m.def("_embedding", &ops::embedding, py::arg("input"), py::arg("weight"),
        py::arg("padding_idx") = py::none());
}

/// The function forms (torch.reshape, torch.transpose, ...) of the view methods bind_tensor.cc
/// defines on Tensor.
void bindViewFunctions(py::module_ &m) {
  m.def(
      "permute",
      [](const Tensor &self, py::handle dims) {
        return autograd::permute(self, toIntList(dims, "permute"));
      },
      py::arg("input"), py::arg("dims"));
  m.def("transpose", &autograd::transpose, py::arg("input"), py::arg("dim0"), py::arg("dim1"));
  m.def("swapaxes", &autograd::transpose, py::arg("input"), py::arg("axis0"), py::arg("axis1"));
  m.def("swapdims", &autograd::transpose, py::arg("input"), py::arg("dim0"), py::arg("dim1"));
  m.def("t", &autograd::t, py::arg("input"));
  m.def(
      "squeeze",
      [](const Tensor &self, py::object dim) {
        return dim.is_none() ? autograd::squeeze(self)
                             : autograd::squeeze(self, toIntList(dim, "squeeze"));
      },
      py::arg("input"), py::arg("dim") = py::none());
  m.def("unsqueeze", &autograd::unsqueeze, py::arg("input"), py::arg("dim"));
  m.def("flatten", &autograd::flatten, py::arg("input"), py::arg("start_dim") = 0,
        py::arg("end_dim") = -1);
  m.def(
      "unflatten",
      [](const Tensor &self, int64_t dim, py::handle sizes) {
        return autograd::unflatten(self, dim, toIntList(sizes, "unflatten"));
      },
      py::arg("input"), py::arg("dim"), py::arg("sizes"));
  m.def("narrow", &autograd::narrow, py::arg("input"), py::arg("dim"), py::arg("start"),
        py::arg("length"));
  m.def("select", &autograd::select, py::arg("input"), py::arg("dim"), py::arg("index"));
  m.def("numel", &Tensor::numel, py::arg("input"));
}

} // namespace

void bindShapeOps(py::module_ &m) {
  auto t = tensorClass(m);
  bindViewFunctions(m);
  bindJoinSplit(m, t);
  bindRepeatFlip(m, t);
  bindTriangleDiag(m, t);
  bindBroadcastPad(m, t);
}

} // namespace kiln::frontend
