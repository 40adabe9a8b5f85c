// kiln._C._capture.GuardManager and GuardNode: the builder API the symbolic evaluator calls.
#include "frontend/csrc/guards.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

LeafCheck leaf(LeafCheck::Kind kind, int tier, std::string text) {
  LeafCheck c;
  c.kind = kind;
  c.tier = tier;
  c.text = std::move(text);
  return c;
}

/// Tiers (see [Note: guard trees]): identity-like checks, then equality with a constant (which
/// may run a user __eq__), then container shape, then tensors.
constexpr int kCheapTier = 0;
constexpr int kEqualsTier = 1;
constexpr int kContainerTier = 2;
constexpr int kTensorTier = 3;

std::vector<int64_t> optionalInts(py::handle seq, const char *what) {
  std::vector<int64_t> out;
  for (py::handle v : py::reinterpret_borrow<py::sequence>(seq)) {
    if (v.is_none())
      out.push_back(LeafCheck::kUnchecked);
    else if (PyLong_Check(v.ptr()))
      out.push_back(v.cast<int64_t>());
    else
      throw py::type_error(std::string("check_tensor(): ") + what + " must hold ints or None");
  }
  return out;
}

void checkTensor(GuardNode &node, DType dtype, py::sequence sizes, py::object strides,
                 bool requiresGrad, const std::string &device, std::string text) {
  LeafCheck c = leaf(LeafCheck::Kind::Tensor, kTensorTier, std::move(text));
  c.dtype = dtype;
  c.n = tensorDeviceCode(Device::parse(device));
  c.requiresGrad = requiresGrad;
  c.sizes = optionalInts(sizes, "sizes");
  if (strides.is_none())
    c.strides.assign(c.sizes.size(), LeafCheck::kUnchecked);
  else
    c.strides = optionalInts(strides, "strides");
  if (c.strides.size() != c.sizes.size())
    throw py::value_error("check_tensor(): sizes and strides have different lengths (" +
                          std::to_string(c.sizes.size()) + " vs " +
                          std::to_string(c.strides.size()) + ")");
  node.addCheck(std::move(c));
}

void checkArray(GuardNode &node, std::string format, int64_t itemsize, py::sequence sizes,
                py::sequence strides, std::string text) {
  LeafCheck c = leaf(LeafCheck::Kind::Array, kTensorTier, std::move(text));
  c.format = std::move(format);
  c.n = itemsize;
  c.sizes = optionalInts(sizes, "sizes");
  c.strides = optionalInts(strides, "strides");
  if (c.strides.size() != c.sizes.size())
    throw py::value_error("check_array(): sizes and strides have different lengths");
  node.addCheck(std::move(c));
}

PyObject *const *items(const py::tuple &t) {
  return reinterpret_cast<PyTupleObject *>(t.ptr())->ob_item;
}

std::vector<std::string> describeNode(const GuardNode &node) {
  std::vector<std::string> out;
  for (auto &c : node.checks())
    out.push_back(c.text);
  return out;
}

} // namespace

void bindGuards(py::module_ &m) {
  using Kind = LeafCheck::Kind;
  py::class_<GuardNode> node(m, "GuardNode",
                             "A node of a guard tree: one value reached from its parent, its "
                             "checks and its children. Owned by its GuardManager.");
  auto child = py::return_value_policy::reference_internal;
  node.def("arg", &GuardNode::arg, child, py::arg("i"))
      .def("global_", &GuardNode::global, child, py::arg("name"))
      .def("closure", &GuardNode::closure, child, py::arg("i"))
      .def("held", &GuardNode::held, child, py::arg("obj"), py::arg("label"))
      .def("attr", &GuardNode::attr, child, py::arg("name"))
      .def("item", &GuardNode::item, child, py::arg("key"))
      .def_property_readonly("source", &GuardNode::source)
      .def_property_readonly("num_checks", &GuardNode::numChecks)
      .def("own_checks", &describeNode, "The texts of this node's own checks, in order.");

  node.def(
      "check_type",
      [](GuardNode &n, py::object type, std::string text) {
        if (!PyType_Check(type.ptr()))
          throw py::type_error("check_type(): expected a type");
        LeafCheck c = leaf(Kind::Type, kCheapTier, std::move(text));
        c.object = std::move(type);
        n.addCheck(std::move(c));
      },
      py::arg("type"), py::arg("text"));
  node.def(
      "check_id",
      [](GuardNode &n, py::object obj, std::string text) {
        LeafCheck c = leaf(Kind::Id, kCheapTier, std::move(text));
        c.object = std::move(obj);
        n.addCheck(std::move(c));
      },
      py::arg("obj"), py::arg("text"));
  node.def(
      "check_none",
      [](GuardNode &n, std::string text) { n.addCheck(leaf(Kind::None, kCheapTier, text)); },
      py::arg("text"));
  node.def(
      "check_not_none",
      [](GuardNode &n, std::string text) { n.addCheck(leaf(Kind::NotNone, kCheapTier, text)); },
      py::arg("text"));
  node.def(
      "check_equals",
      [](GuardNode &n, py::object value, std::string text) {
        bool container = PyTuple_Check(value.ptr());
        LeafCheck c = leaf(Kind::Equals, container ? kContainerTier : kEqualsTier, std::move(text));
        c.object = std::move(value);
        n.addCheck(std::move(c));
      },
      py::arg("value"), py::arg("text"));
  node.def(
      "check_compare",
      [](GuardNode &n, int op, py::object value, bool expected, std::string text) {
        LeafCheck c = leaf(Kind::Compare, kEqualsTier, std::move(text));
        c.n = op;
        c.object = std::move(value);
        c.expected = expected;
        n.addCheck(std::move(c));
      },
      py::arg("op"), py::arg("value"), py::arg("expected"), py::arg("text"));
  node.def(
      "check_len",
      [](GuardNode &n, int64_t len, std::string text) {
        if (len < 0)
          throw py::value_error("check_len(): the length must be >= 0");
        LeafCheck c = leaf(Kind::Len, kContainerTier, std::move(text));
        c.n = len;
        n.addCheck(std::move(c));
      },
      py::arg("n"), py::arg("text"));
  node.def(
      "check_dict_keys",
      [](GuardNode &n, py::iterable keys, std::string text) {
        LeafCheck c = leaf(Kind::DictKeys, kContainerTier, std::move(text));
        for (py::handle k : keys)
          c.keys.push_back(py::reinterpret_borrow<py::object>(k));
        n.addCheck(std::move(c));
      },
      py::arg("keys"), py::arg("text"));
  node.def("check_array", &checkArray, py::arg("format"), py::arg("itemsize"), py::arg("sizes"),
           py::arg("strides"), py::arg("text"),
           "NumPy array geometry through the buffer protocol (strides in bytes, None: any).");
  node.def("check_tensor", &checkTensor, py::arg("dtype"), py::arg("sizes"), py::arg("strides"),
           py::arg("requires_grad"), py::arg("device"), py::arg("text"));
  node.def(
      "bind_size",
      [](GuardNode &n, int64_t dim, int64_t sym, std::string text) {
        LeafCheck c = leaf(Kind::BindSize, kTensorTier, std::move(text));
        c.n = dim;
        c.sym = sym;
        n.addCheck(std::move(c));
      },
      py::arg("dim"), py::arg("sym"), py::arg("text"));
  node.def(
      "bind_int",
      [](GuardNode &n, int64_t sym, std::string text) {
        LeafCheck c = leaf(Kind::BindSize, kTensorTier, std::move(text));
        c.n = LeafCheck::kBindValue;
        c.sym = sym;
        n.addCheck(std::move(c));
      },
      py::arg("sym"), py::arg("text"), "Binds the value (an exact int) to symbol slot `sym`.");

  py::class_<GuardManager> gm(m, "GuardManager",
                              "The guard set of one compiled entry: a tree of accessors rooted at "
                              "the frame state, global flags and symbolic-size relations.");
  gm.def(py::init<>());
  gm.def_property_readonly("root", &GuardManager::root, child);
  using Op = SymCheck::Op;
  gm.def(
      "add_sym_eq",
      [](GuardManager &g, int64_t a, int64_t b, std::string text) {
        g.addSymCheck(Op::Eq, a, b, std::move(text));
      },
      py::arg("a"), py::arg("b"), py::arg("text"));
  auto symConst = [&](const char *name, Op op) {
    gm.def(
        name,
        [op](GuardManager &g, int64_t a, int64_t c, std::string text) {
          g.addSymCheck(op, a, c, std::move(text));
        },
        py::arg("a"), py::arg("c"), py::arg("text"));
  };
  symConst("add_sym_eq_const", Op::EqConst);
  symConst("add_sym_ge_const", Op::GeConst);
  symConst("add_sym_le_const", Op::LeConst);
  symConst("add_sym_ne_const", Op::NeConst);
  gm.def("add_sym_relation", &GuardManager::addRelationCheck, py::arg("relation"), py::arg("slots"),
         py::arg("text"),
         "A relation a shape rule assumed (SymRelation text), over the symbols named in "
         "`slots` ((name, slot) pairs), which must be bound.");
  gm.def("check_global_flag", &GuardManager::addFlagCheck, py::arg("obj"), py::arg("attr_name"),
         py::arg("expected_value"), py::arg("text"));
  gm.def(
      "check",
      [](const GuardManager &g, py::tuple args, py::handle func) {
        return g.check(items(args), PyTuple_GET_SIZE(args.ptr()), func.ptr());
      },
      py::arg("args"), py::arg("func"));
  gm.def(
      "first_failure",
      [](const GuardManager &g, py::tuple args, py::handle func) {
        return g.firstFailure(items(args), PyTuple_GET_SIZE(args.ptr()), func.ptr());
      },
      py::arg("args"), py::arg("func"));
  gm.def("describe", &GuardManager::describe);
  gm.def_property_readonly("num_checks", &GuardManager::numChecks);
  gm.def("__repr__", [](const GuardManager &g) {
    std::string s = "GuardManager(";
    std::string sep;
    for (const std::string &t : g.describe()) {
      s += sep + t;
      sep = ", ";
    }
    return s + ")";
  });
}

} // namespace kiln::frontend
