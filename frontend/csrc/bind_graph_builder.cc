// `kiln._C._ir.GraphBuilder` and `kiln._C._ir.Graph`: the capture frontend builds the graphs it
// compiles in memory, node by node (ir/graph_builder.h), and reads each result's type back at
// once: dtype, symbolic sizes, strides. Values are numbered handles (ints) into the builder.
//
// Types cross as Python data: a tensor type is (dtype short name, sizes, strides or None for
// contiguous, device or None), sizes and strides ints or SymInt text (`s0*2`); a scalar type is
// "int", "float" or "bool". Attributes are Python values converted by the kind ops.def gives the
// attribute (`[s0, 8]` for a SymInt list, "f32" for a dtype). A node the op table rejects raises
// ValueError naming the op and the broken rule, and is not added.

#include "frontend/csrc/bindings.h"
#include "frontend/csrc/built_graph.h"
#include "ir/graph_builder.h"
#include "ir/op_kind.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/sym_int.h"
#include "ir/tensor_meta.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace kiln::frontend {

std::pair<std::unique_ptr<ir::Graph>, ir::NodePositions> BuiltGraph::copy() const {
  std::unordered_map<const ir::Node *, ir::Node *> map;
  std::unique_ptr<ir::Graph> out = ir::cloneGraph(*graph, &map);
  ir::NodePositions moved;
  for (const auto &[from, to] : map)
    if (auto it = positions.find(from); it != positions.end())
      moved[to] = it->second;
  return {std::move(out), std::move(moved)};
}

namespace {

ir::SymInt symIntOf(py::handle h) {
  if (py::isinstance<py::bool_>(h))
    throw py::type_error("a size must be an int or SymInt text, not bool");
  if (py::isinstance<py::int_>(h))
    return ir::SymInt(h.cast<int64_t>());
  return ir::SymInt::parse(h.cast<std::string>());
}

std::vector<ir::SymInt> symIntsOf(py::handle h) {
  std::vector<ir::SymInt> out;
  for (py::handle item : h)
    out.push_back(symIntOf(item));
  return out;
}

DType dtypeOf(const std::string &name) {
  if (std::optional<DType> dt = ir::dtypeFromShortName(name))
    return *dt;
  if (std::optional<DType> dt = dtypeFromName(name))
    return *dt;
  throw py::value_error(fmt::format("unknown dtype '{}'", name));
}

ir::ValueType convertType(py::handle h);

/// A Python type (see the file comment); TypeError naming what is wrong.
ir::ValueType typeOf(py::handle h) {
  try {
    return convertType(h);
  } catch (const py::cast_error &) {
    throw py::type_error(fmt::format("not a type: {} (a tensor type is (dtype, sizes, strides or "
                                     "None, device or None))",
                                     py::repr(h).cast<std::string>()));
  }
}

ir::ValueType convertType(py::handle h) {
  if (py::isinstance<py::str>(h)) {
    std::string s = h.cast<std::string>();
    if (s == "int")
      return ir::ScalarType::Int;
    if (s == "float")
      return ir::ScalarType::Float;
    if (s == "bool")
      return ir::ScalarType::Bool;
    throw py::value_error(fmt::format("unknown scalar type '{}'", s));
  }
  py::tuple t = h.cast<py::tuple>();
  if (t.size() != 4)
    throw py::value_error("a tensor type is (dtype, sizes, strides or None, device or None)");
  std::vector<ir::SymInt> sizes = symIntsOf(t[1]);
  Device device = t[3].is_none() ? Device() : Device::parse(t[3].cast<std::string>());
  ir::TensorMeta meta =
      ir::TensorMeta::contiguous(dtypeOf(t[0].cast<std::string>()), sizes, device);
  if (!t[2].is_none())
    meta.strides = symIntsOf(t[2]);
  return meta;
}

py::object sizeObject(const ir::SymInt &s) {
  if (std::optional<int64_t> c = s.constant())
    return py::int_(*c);
  return py::str(s.str());
}

py::tuple sizesObject(const std::vector<ir::SymInt> &sizes) {
  py::tuple out(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i)
    out[i] = sizeObject(sizes[i]);
  return out;
}

/// The Python form of a type (see the file comment); tensors add whether they are contiguous.
py::object typeObject(const ir::ValueType &type) {
  if (!type.isTensor())
    return py::str(std::string(ir::scalarTypeName(type.scalar())));
  const ir::TensorMeta &m = type.meta();
  py::object device = m.device.type == DeviceType::CPU ? py::object(py::none())
                                                       : py::object(py::str(m.device.str()));
  return py::make_tuple(std::string(ir::dtypeShortName(m.dtype)), sizesObject(m.sizes),
                        sizesObject(m.strides), device, m.isContiguous());
}

ir::Attribute convertAttribute(ir::OpKind op, const std::string &name, py::handle v);

/// A Python value as the attribute `name` of `op` (by the kind ops.def gives it); TypeError
/// naming the attribute when the value has another kind.
ir::Attribute attributeOf(ir::OpKind op, const std::string &name, py::handle v) {
  try {
    return convertAttribute(op, name, v);
  } catch (const py::cast_error &) {
    const ir::AttrSpec *spec = ir::findAttrSpec(op, name);
    throw py::type_error(
        fmt::format("{}: attribute '{}' must be {}, got {}", ir::opKeyword(op), name,
                    spec ? ir::attrKindWithArticle(spec->kind) : "a number, string or int list",
                    py::repr(v).cast<std::string>()));
  }
}

ir::Attribute convertAttribute(ir::OpKind op, const std::string &name, py::handle v) {
  const ir::AttrSpec *spec = ir::findAttrSpec(op, name);
  bool isBool = py::isinstance<py::bool_>(v), isInt = py::isinstance<py::int_>(v) && !isBool;
  if (spec) {
    switch (spec->kind) {
    case ir::AttrKind::SymInt:
      return symIntOf(v);
    case ir::AttrKind::SymIntList:
      return symIntsOf(v);
    case ir::AttrKind::DType:
      return dtypeOf(v.cast<std::string>());
    case ir::AttrKind::Float:
      return v.cast<double>();
    case ir::AttrKind::IntList:
      return v.cast<std::vector<int64_t>>();
    default:
      break;
    }
  }
  if (isBool)
    return v.cast<bool>();
  if (isInt)
    return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v))
    return v.cast<double>();
  if (py::isinstance<py::str>(v))
    return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v))
    return v.cast<std::vector<int64_t>>();
  throw py::type_error(fmt::format("attribute '{}' of {}: unsupported value {}", name,
                                   ir::opKeyword(op), py::repr(v).cast<std::string>()));
}

ir::SourceLoc locOf(py::handle loc) {
  if (loc.is_none())
    return {};
  py::tuple t = loc.cast<py::tuple>();
  return {t[0].cast<std::string>(), t[1].cast<int>()};
}

/// The bound builder: ir::GraphBuilder plus the value handles Python holds.
class PyGraphBuilder {
public:
  explicit PyGraphBuilder(std::string name) : builder_(std::move(name)) {}

  py::tuple input(std::string name, py::handle type, py::handle loc) {
    ir::Value *v = builder_.input(typeOf(type), std::move(name), locOf(loc));
    return handle(v);
  }

  py::list add(const std::string &keyword, const std::vector<int> &operands, const py::dict &attrs,
               py::handle loc, py::handle types) {
    std::optional<ir::OpKind> op = ir::opKindFromKeyword(keyword);
    if (!op)
      throw py::value_error(fmt::format("unknown op '{}'", keyword));
    std::vector<ir::Value *> values;
    for (int k : operands)
      values.push_back(value(k));
    ir::Attributes attributes;
    for (auto [name, v] : attrs) {
      std::string n = name.cast<std::string>();
      attributes[n] = attributeOf(*op, n, v);
    }
    std::optional<std::vector<ir::ValueType>> given;
    if (!types.is_none()) {
      given.emplace();
      for (py::handle t : types)
        given->push_back(typeOf(t));
    }
    size_t number = builder_.mark();
    std::vector<ir::Value *> results =
        builder_.add(*op, std::move(values), std::move(attributes), locOf(loc), std::move(given));
    py::list out;
    for (ir::Value *v : results)
      out.append(handle(v, number));
    return out;
  }

  size_t mark() const { return builder_.mark(); }
  std::vector<std::string> assumptions() const {
    std::vector<std::string> out;
    for (const ir::SymRelation &r : builder_.assumptions())
      out.push_back(r.str());
    return out;
  }

  void rollback(size_t mark) {
    builder_.rollback(mark);
    while (!values_.empty() && values_.back().first >= mark)
      values_.pop_back();
  }

  py::object type(int k) { return typeObject(value(k)->type()); }

  std::shared_ptr<BuiltGraph> finish(const std::vector<int> &outputs, py::handle outSpec) {
    std::vector<ir::Value *> values;
    for (int k : outputs)
      values.push_back(value(k));
    ir::Attributes attrs;
    if (!outSpec.is_none())
      attrs["out_spec"] = outSpec.cast<std::string>();
    auto out = std::make_shared<BuiltGraph>();
    out->positions = builder_.positions();
    out->graph = builder_.finish(std::move(values), std::move(attrs));
    values_.clear();
    return out;
  }

private:
  /// (handle, type) of a new value.
  py::tuple handle(ir::Value *v, size_t number = SIZE_MAX) {
    if (number == SIZE_MAX)
      number = builder_.mark() - 1;
    values_.emplace_back(number, v);
    return py::make_tuple(static_cast<int>(values_.size() - 1), typeObject(v->type()));
  }

  ir::Value *value(int k) const {
    if (k < 0 || k >= static_cast<int>(values_.size()))
      throw py::index_error(fmt::format("no value {} in the graph being built", k));
    return values_[k].second;
  }

  ir::GraphBuilder builder_;
  std::vector<std::pair<size_t, ir::Value *>> values_; ///< (node number, value) by handle
};

} // namespace

void bindGraphBuilder(py::module_ &ir) {
  ir.def(
      "evaluate_relation",
      [](const std::string &relation, const std::map<std::string, int64_t> &values) {
        ir::SymbolValues v(values.begin(), values.end());
        return ir::SymRelation::parse(relation).evaluate(v);
      },
      py::arg("relation"), py::arg("values"),
      "Whether a SymRelation (text, `s0 + 8 <= s1`) holds for the symbols' values.");
  py::class_<BuiltGraph, std::shared_ptr<BuiltGraph>>(
      ir, "Graph", "A graph built in memory (GraphBuilder.finish), as the compiler takes it.")
      .def_property_readonly("name", [](const BuiltGraph &g) { return g.graph->name(); })
      .def(
          "text", [](const BuiltGraph &g) { return ir::printGraph(*g.graph); },
          "The graph as .kir text (ir/printer.cc): dumps, export, cache keys.")
      .def("__str__", [](const BuiltGraph &g) { return ir::printGraph(*g.graph); });
  ir.def(
      "parse",
      [](const std::string &text, const std::string &filename) {
        ir::ParsedModule module = ir::parseModule(text, filename);
        KILN_CHECK_KIND(Value, module.graphs.size() == 1,
                        "{}: a program holds exactly one graph, found {}", filename,
                        module.graphs.size());
        auto out = std::make_shared<BuiltGraph>();
        out->graph = std::move(module.graphs[0]);
        out->positions = std::move(module.positions);
        return out;
      },
      py::arg("text"), py::arg("filename") = "<kir>",
      "The one graph of .kir text (an exported program's file) as a Graph; its nodes' positions "
      "are their lines (ValueError with `file:line:col: error: ...` on a syntax error).");

  py::class_<PyGraphBuilder>(ir, "GraphBuilder",
                             "Builds a graph node by node; every node is checked against the op "
                             "table and typed by its shape rule as it is added.")
      .def(py::init<std::string>(), py::arg("name"))
      .def("input", &PyGraphBuilder::input, py::arg("name"), py::arg("type"),
           py::arg("loc") = py::none(), "A graph input: returns (handle, type).")
      .def("add", &PyGraphBuilder::add, py::arg("op"), py::arg("operands"),
           py::arg("attrs") = py::dict(), py::arg("loc") = py::none(),
           py::arg("types") = py::none(),
           "Adds one node: returns [(handle, type)] of its results (ValueError when the op "
           "table rejects it; types only for ops typed as given: call, constant, weight).")
      .def("mark", &PyGraphBuilder::mark, "The number of nodes added so far.")
      .def("assumptions", &PyGraphBuilder::assumptions,
           "What the shape rules assumed about the symbols (`s0 >= 100`), as relation texts.")
      .def("rollback", &PyGraphBuilder::rollback, py::arg("mark"),
           "Erases the nodes added after `mark`.")
      .def("type", &PyGraphBuilder::type, py::arg("value"), "The type of a value handle.")
      .def("finish", &PyGraphBuilder::finish, py::arg("outputs"), py::arg("out_spec") = py::none(),
           "Adds the return of `outputs`, verifies and returns the Graph.");
}

} // namespace kiln::frontend
