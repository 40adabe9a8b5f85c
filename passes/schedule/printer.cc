// The text of a schedule: kernels around their nodes, storage, loop orders, memory slots.

#include "passes/schedule/schedule.h"

#include <fmt/format.h>

namespace kiln::passes::schedule {

namespace {

using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;

std::string joinSyms(std::span<const SymInt> syms) {
  std::string out;
  for (const SymInt &s : syms)
    out += (out.empty() ? "" : ", ") + s.str();
  return "[" + out + "]";
}

std::string joinNames(std::span<const std::string> names) {
  std::string out;
  for (const std::string &s : names)
    out += (out.empty() ? "" : ", ") + s;
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

std::string attributesStr(const ir::Attributes &attrs) {
  std::string out;
  for (const auto &[name, value] : attrs)
    out += fmt::format("{}{} = {}", out.empty() ? "" : ", ",
                       isPlainName(name) ? name : ir::quoteString(name), value.str());
  return attrs.empty() ? "" : " {" + out + "}";
}

std::string storageStr(const BufferPlan &plan) {
  switch (plan.kind) {
  case StorageKind::Output:
    return " output";
  case StorageKind::Local:
    return " local";
  case StorageKind::Allocated:
    return fmt::format(" @mem{}", plan.slot);
  default:
    return "";
  }
}

std::string nodeStr(const Schedule &s, size_t index) {
  const LoopNode &n = s.program.nodes()[index];
  std::string lhs;
  for (BufferId id : n.outputs)
    lhs += fmt::format("{}{}: {}{}", lhs.empty() ? "" : ", ", ir::loop::bufferName(id),
                       ir::printType(s.program.buffer(id).meta), storageStr(s.buffers[id.index]));
  const LoopOrder &loops = s.loops[index];
  std::string order = fmt::format("order {}", joinNames(loops.vars));
  if (!loops.laneVar.empty() && loops.mergedIntoLane > 0) // the loops it walks as one
    order += fmt::format(" vector {}{}..{}", loops.laneVar[0],
                         std::stoul(loops.laneVar.substr(1)) - loops.mergedIntoLane, loops.laneVar);
  else if (!loops.laneVar.empty())
    order += " vector " + loops.laneVar;
  if (!loops.tileVar.empty())
    order += " tile " + loops.tileVar;
  switch (n.kind) {
  case LoopNodeKind::Pointwise:
    return fmt::format("  {} = pointwise {} {} {{\n{}  }}\n", lhs, joinSyms(n.ranges), order,
                       n.body->str("    "));
  case LoopNodeKind::Reduction:
    return fmt::format("  {} = reduction {} {} over {} {} {{\n{}  }}\n", lhs,
                       ir::loop::reductionKeyword(n.reduction), joinSyms(n.ranges),
                       joinSyms(n.reductionRanges), order, n.body->str("    "));
  default: {
    std::string args;
    for (BufferId id : n.externInputs)
      args += (args.empty() ? "" : ", ") + ir::loop::bufferName(id);
    return fmt::format("  {} = extern {}({}){}\n", lhs, ir::quoteString(n.externOp), args,
                       attributesStr(n.attributes));
  }
  }
}

} // namespace

std::string Schedule::str() const {
  size_t local = 0, allocated = 0;
  for (const BufferPlan &b : buffers) {
    local += b.kind == StorageKind::Local;
    allocated += b.kind == StorageKind::Allocated;
  }
  std::string out =
      fmt::format("// kernels: {}, local buffers: {}, allocated buffers: {} in {} memory slots\n",
                  kernels.size(), local, allocated, slots.size());
  for (BufferId id : program.inputs())
    out += fmt::format("input {}: {}\n", ir::loop::bufferName(id),
                       ir::printType(program.buffer(id).meta));
  for (size_t m = 0; m < slots.size(); ++m) {
    std::string users;
    for (BufferId id : slots[m].buffers)
      users += (users.empty() ? "" : ", ") + ir::loop::bufferName(id);
    std::string live;
    for (auto [first, last] : slots[m].lifetimes)
      live += fmt::format(", k{}..k{}", first, last);
    out += fmt::format("memory mem{}{}: {} bytes for {}, in use{}\n", m,
                       slots[m].external ? " (extern result)" : "", slots[m].bytes.str(), users,
                       live.substr(1));
  }
  std::vector<size_t> launches = launchStarts(kernels);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const Kernel &kernel = kernels[k];
    std::string head = kernel.kind == KernelKind::Extern
                           ? "extern"
                           : fmt::format("loop {}", joinSyms(kernel.outer));
    std::string parallel = kernel.parallel.empty() ? "" : " parallel " + kernel.parallel;
    if (launches[k] != k)
      parallel += fmt::format(" in launch of k{}", launches[k]);
    out += fmt::format("kernel k{} {}{} {{\n", k, head, parallel);
    for (size_t n : kernel.nodes)
      out += nodeStr(*this, n);
    out += "}\n";
  }
  std::string results;
  for (BufferId id : program.outputs())
    results += (results.empty() ? "" : ", ") + ir::loop::bufferName(id);
  if (!results.empty())
    out += "return " + results + "\n";
  return out;
}

} // namespace kiln::passes::schedule
