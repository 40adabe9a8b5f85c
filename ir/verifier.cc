// The structural part of the verifier: order, arity, operands, use lists, attributes, types.
// Dtype and shape rules per op class are in verifier_rules.cc.

#include "ir/verifier.h"

#include "ir/lexer.h"
#include "ir/printer.h"
#include "ir/verifier_impl.h"

#include <algorithm>
#include <fmt/format.h>
#include <unordered_map>

namespace kiln::ir {

namespace {

/// Thrown inside the verifier to stop at the first violation.
struct Violation {
  const Node *node;
  std::string message;
};

std::string describeArity(Arity a) {
  if (a.max == kVariadic)
    return a.min == 0 ? "any number of operands" : fmt::format("at least {} operand(s)", a.min);
  if (a.min == a.max)
    return fmt::format("{} operand{}", a.min, a.min == 1 ? "" : "s");
  return fmt::format("{} to {} operands", a.min, a.max);
}

std::string acceptedAttrs(OpKind op) {
  std::string out;
  for (const AttrSpec &spec : attrSpecs(op))
    out += (out.empty() ? "" : ", ") + std::string(spec.name);
  return out;
}

class Verifier {
public:
  explicit Verifier(const Graph &g) : g_(g), names_(g) {
    int i = 0;
    for (const Node *n : g.nodes()) {
      order_[n] = i++;
      for (const Value *v : n->operands())
        ++slotCounts_[v];
    }
  }

  void run() {
    checkStructure();
    for (const Node *n : g_.nodes())
      checkNode(*n);
  }

  /// `%2 = add`, `input %x`, `'return'`: how a node is named in messages.
  std::string describe(const Node &n) const {
    if (n.op() == OpKind::Input && n.numResults() == 1)
      return "input " + names_.name(n.result());
    if (n.numResults() == 0)
      return fmt::format("'{}'", n.keyword());
    std::string out;
    for (int i = 0; i < n.numResults(); ++i)
      out += (i ? ", " : "") + names_.name(n.result(i));
    return out + " = " + std::string(n.keyword());
  }

private:
  [[noreturn]] void fail(const Node *n, std::string message) const {
    throw Violation{n, std::move(message)};
  }

  void checkStructure() const {
    if (!isIdentifier(g_.name()))
      fail(nullptr, fmt::format("graph name '{}' is not an identifier", g_.name()));
    std::vector<Node *> nodes = g_.nodes();
    bool pastInputs = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node *n = nodes[i];
      if (n->op() == OpKind::Input && pastInputs)
        fail(n, "input nodes must come before every other node");
      pastInputs |= n->op() != OpKind::Input;
      if (n->op() == OpKind::Output && i + 1 != nodes.size())
        fail(n, "'return' must be the last node of the graph");
    }
    if (nodes.empty() || nodes.back()->op() != OpKind::Output)
      fail(nullptr, fmt::format("graph @{} has no 'return' node", g_.name()));
  }

  void checkNode(const Node &n) const {
    try {
      detail::checkArity(n.op(), n.numOperands(), n.numResults());
    } catch (const Error &e) {
      fail(&n, e.what());
    }
    for (int i = 0; i < n.numOperands(); ++i)
      checkOperand(n, i);
    for (int i = 0; i < n.numResults(); ++i)
      checkResult(n, i);
    checkAttributes(n);
    try {
      detail::checkOpRules(n);
    } catch (const Error &e) {
      fail(&n, e.what());
    }
  }

  void checkOperand(const Node &n, int i) const {
    const Value *v = n.operands()[i];
    if (v == nullptr)
      fail(&n, fmt::format("operand {} is null", i));
    const Node *def = v->definingNode();
    auto it = order_.find(def);
    if (def == nullptr || def->graph() != &g_ || it == order_.end())
      fail(&n, fmt::format("operand {} is not a value of graph @{}", i, g_.name()));
    if (it->second >= order_.at(&n))
      fail(&n, fmt::format("operand {} ({}) is used before it is defined", i, names_.name(v)));
  }

  void checkResult(const Node &n, int i) const {
    const Value *v = n.result(i);
    if (v->definingNode() != &n || v->resultIndex() != i)
      fail(&n, fmt::format("result {} does not point back at its node", i));
    checkUses(n, v);
    if (!v->isTensor())
      return;
    const TensorMeta &m = v->meta();
    if (m.strides.size() != m.sizes.size())
      fail(&n, fmt::format("{} has {} sizes but {} strides", names_.name(v), m.sizes.size(),
                           m.strides.size()));
    for (size_t d = 0; d < m.sizes.size(); ++d)
      if (std::optional<int64_t> c = m.sizes[d].constant(); c && *c < 0)
        fail(&n, fmt::format("{} has a negative size {} in dim {}", names_.name(v), *c, d));
  }

  // Every entry must be an operand slot holding v, each slot listed once: then the list is
  // complete exactly when it is as long as the number of slots that hold v.
  void checkUses(const Node &n, const Value *v) const {
    std::vector<Use> uses = v->uses();
    for (const Use &u : uses) {
      if (!order_.count(u.user) || u.operandIndex < 0 || u.operandIndex >= u.user->numOperands() ||
          u.user->operands()[u.operandIndex] != v)
        fail(&n, fmt::format("the use list of {} has a stale entry", names_.name(v)));
    }
    std::sort(uses.begin(), uses.end(), [](const Use &a, const Use &b) {
      return std::pair(a.user, a.operandIndex) < std::pair(b.user, b.operandIndex);
    });
    auto slots = slotCounts_.find(v);
    size_t expected = slots == slotCounts_.end() ? 0 : slots->second;
    if (std::adjacent_find(uses.begin(), uses.end()) != uses.end() || uses.size() != expected)
      fail(&n, fmt::format("the use list of {} has {} entries for {} uses", names_.name(v),
                           v->uses().size(), expected));
  }

  void checkAttributes(const Node &n) const {
    try {
      detail::checkAttributes(n.op(), n.attrs());
    } catch (const Error &e) {
      fail(&n, e.what());
    }
  }

  const Graph &g_;
  ValueNumbering names_;
  std::unordered_map<const Node *, int> order_;
  std::unordered_map<const Value *, size_t> slotCounts_; ///< operand slots holding each value
};

} // namespace

void detail::checkArity(OpKind op, int numOperands, int numResults) {
  const OpInfo &info = opInfo(op);
  KILN_CHECK_KIND(Value, info.operands.accepts(numOperands), "expects {}, got {}",
                  describeArity(info.operands), numOperands);
  KILN_CHECK_KIND(Value, info.numResults == kVariadic || numResults == info.numResults,
                  "produces {} result{}, got {}", info.numResults, info.numResults == 1 ? "" : "s",
                  numResults);
}

void detail::checkAttributes(OpKind op, const Attributes &attrs) {
  for (const auto &[name, value] : attrs) {
    const AttrSpec *spec = findAttrSpec(op, name);
    if (!spec) {
      std::string accepted = acceptedAttrs(op);
      KILN_CHECK_KIND(Value, false, "unknown attribute '{}' ({})", name,
                      accepted.empty() ? "it takes none" : "it takes " + accepted);
    }
    KILN_CHECK_KIND(Value, value.matches(spec->kind), "attribute '{}' must be {}, got {} {}", name,
                    attrKindWithArticle(spec->kind), attrKindName(value.kind()), value.str());
  }
  for (const AttrSpec &spec : attrSpecs(op))
    KILN_CHECK_KIND(Value, !spec.required || attrs.count(spec.name),
                    "missing required attribute '{}' ({})", spec.name, attrKindName(spec.kind));
}

std::optional<Diagnostic> verify(const Graph &graph) {
  Verifier verifier(graph);
  try {
    verifier.run();
  } catch (const Violation &v) {
    std::string prefix = v.node ? verifier.describe(*v.node) + ": " : "";
    return Diagnostic{prefix + v.message, "", {}, v.node};
  }
  return std::nullopt;
}

void verifyOrThrow(const Graph &graph) {
  if (std::optional<Diagnostic> d = verify(graph))
    throw DiagnosticError(std::move(*d));
}

} // namespace kiln::ir
