// The text of a loop program, and its stable hash.

#include "ir/loop/program.h"

#include <fmt/format.h>

namespace kiln::ir::loop {

namespace {

std::string joinSyms(std::span<const SymInt> syms) {
  std::string out;
  for (const SymInt &s : syms)
    out += (out.empty() ? "" : ", ") + s.str();
  return "[" + out + "]";
}

bool isPlainName(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9'))
    return false;
  for (char c : s)
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return false;
  return true;
}

std::string attributesStr(const Attributes &attrs) {
  if (attrs.empty())
    return "";
  std::string out;
  for (const auto &[name, value] : attrs)
    out += fmt::format("{}{} = {}", out.empty() ? "" : ", ",
                       isPlainName(name) ? name : quoteString(name), value.str());
  return " {" + out + "}";
}

} // namespace

std::string LoopProgram::str() const {
  std::string out;
  for (BufferId id : inputs_)
    out += fmt::format("input {}: {}\n", bufferName(id), printType(buffer(id).meta));
  for (const LoopNode &n : nodes_) {
    std::string lhs;
    for (BufferId id : n.outputs)
      lhs += fmt::format("{}{}: {}", lhs.empty() ? "" : ", ", bufferName(id),
                         printType(buffer(id).meta));
    switch (n.kind) {
    case LoopNodeKind::Pointwise:
      out += fmt::format("{} = pointwise {} {{\n{}}}\n", lhs, joinSyms(n.ranges), n.body->str());
      break;
    case LoopNodeKind::Reduction:
      out +=
          fmt::format("{} = reduction {} {} over {} {{\n{}}}\n", lhs, reductionKeyword(n.reduction),
                      joinSyms(n.ranges), joinSyms(n.reductionRanges), n.body->str());
      break;
    case LoopNodeKind::Extern: {
      std::string args;
      for (BufferId id : n.externInputs)
        args += (args.empty() ? "" : ", ") + bufferName(id);
      out += fmt::format("{} = extern {}({}){}\n", lhs, quoteString(n.externOp), args,
                         attributesStr(n.attributes));
      break;
    }
    }
  }
  if (!outputs_.empty()) {
    std::string results;
    for (BufferId id : outputs_)
      results += (results.empty() ? "" : ", ") + bufferName(id);
    out += "return " + results + "\n";
  }
  return out;
}

uint64_t LoopProgram::hash() const {
  uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a 64
  for (unsigned char c : str()) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

} // namespace kiln::ir::loop
