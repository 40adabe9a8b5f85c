#include "ir/printer.h"

#include "ir/lexer.h"

#include <cctype>
#include <fmt/format.h>
#include <set>

namespace kiln::ir {

namespace {
// Input names must not look like the numbers other values get, or the text would be ambiguous.
bool usableInputName(const std::string &name) { return isIdentifier(name); }

std::string printAttributes(const Attributes &attrs) {
  if (attrs.empty())
    return "";
  std::string out = " {";
  bool first = true;
  for (const auto &[name, value] : attrs) {
    out +=
        (first ? "" : ", ") + (isIdentifier(name) ? name : quoteString(name)) + " = " + value.str();
    first = false;
  }
  return out + "}";
}

std::string joinOperands(const Node &node, const ValueNumbering &names) {
  std::string out;
  for (int i = 0; i < node.numOperands(); ++i)
    out += (i ? ", " : "") + names.name(node.operands()[i]);
  return out;
}
} // namespace

ValueNumbering::ValueNumbering(const Graph &graph) {
  std::set<std::string> taken;
  int argIndex = 0, number = 0;
  for (const Node *node : graph.nodes()) {
    if (node->op() == OpKind::Input) {
      for (const Value *v : node->results()) {
        std::string name = v->name();
        if (!usableInputName(name) || taken.count(name)) {
          do
            name = fmt::format("arg{}", argIndex++);
          while (taken.count(name));
        }
        taken.insert(name);
        names_[v] = "%" + name;
      }
      continue;
    }
    for (const Value *v : node->results())
      names_[v] = fmt::format("%{}", number++);
  }
}

std::string ValueNumbering::name(const Value *v) const {
  auto it = names_.find(v);
  return it == names_.end() ? "%<unknown>" : it->second;
}

std::string printLoc(const SourceLoc &loc) {
  if (!loc.known())
    return "";
  return fmt::format(" loc({}:{})", quoteString(loc.file), loc.line);
}

std::string printNode(const Node &node, const ValueNumbering &names) {
  if (node.op() == OpKind::Output) {
    std::string operands = joinOperands(node, names);
    return "return" + (operands.empty() ? "" : " " + operands) + printAttributes(node.attrs()) +
           printLoc(node.loc());
  }
  std::string out;
  for (int i = 0; i < node.numResults(); ++i)
    out += (i ? ", " : "") + names.name(node.result(i));
  if (node.numResults() > 0)
    out += " = ";
  out += fmt::format("{}({})", node.keyword(), joinOperands(node, names));
  out += printAttributes(node.attrs());
  for (int i = 0; i < node.numResults(); ++i)
    out += (i ? ", " : " : ") + printType(node.result(i)->type());
  return out + printLoc(node.loc());
}

std::string printGraph(const Graph &graph) {
  ValueNumbering names(graph);
  std::string params;
  std::string body;
  for (const Node *node : graph.nodes()) {
    if (node->op() == OpKind::Input && node->numResults() == 1 && node->numOperands() == 0 &&
        node->attrs().empty()) {
      const Value *v = node->result();
      params += (params.empty() ? "" : ", ") + names.name(v) + ": " + printType(v->type()) +
                printLoc(node->loc());
    } else {
      body += "  " + printNode(*node, names) + "\n";
    }
  }
  // The verifier insists on an identifier; the printer still emits parseable text without one.
  std::string graphName = graph.name().empty() ? "main" : graph.name();
  for (char &c : graphName)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      c = '_';
  return fmt::format("graph @{}({}) {{\n{}}}\n", graphName, params, body);
}

} // namespace kiln::ir
