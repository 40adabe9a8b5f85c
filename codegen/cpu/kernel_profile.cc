#include "codegen/cpu/kernel_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::codegen::cpu {

struct KernelProfile::Entry {
  std::string what;
  int64_t nanos = 0;
  int64_t calls = 0;
};

struct KernelProfile::Table {
  std::mutex mutex;
  std::map<std::pair<const void *, size_t>, Entry> entries;
};

namespace {

std::string sizesText(const std::vector<ir::SymInt> &sizes) {
  std::vector<std::string> parts;
  for (const ir::SymInt &s : sizes)
    parts.push_back(s.str());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string describe(const ir::loop::LoopProgram &program, const ir::loop::LoopNode &node) {
  switch (node.kind) {
  case ir::loop::LoopNodeKind::Extern: {
    std::vector<std::string> in;
    for (ir::loop::BufferId id : node.externInputs)
      in.push_back(sizesText(program.buffer(id).meta.sizes));
    return fmt::format(
        "extern {}({}) -> {}", node.externOp, fmt::join(in, ", "),
        node.outputs.empty() ? "" : sizesText(program.buffer(node.outputs[0]).meta.sizes));
  }
  case ir::loop::LoopNodeKind::Reduction:
    return fmt::format("reduction {} over {}", sizesText(node.ranges),
                       sizesText(node.reductionRanges));
  case ir::loop::LoopNodeKind::Pointwise:
    break;
  }
  return fmt::format("pointwise {}", sizesText(node.ranges));
}

} // namespace

KernelProfile *KernelProfile::active() {
  static KernelProfile *profile = [] {
    const char *spec = std::getenv("KILN_PROFILE");
    if (!spec || !std::strstr(spec, "kernels"))
      return static_cast<KernelProfile *>(nullptr);
    static KernelProfile instance;
    instance.table_ = new Table;
    return &instance;
  }();
  return profile;
}

void KernelProfile::add(const ir::loop::LoopProgram &program, size_t index, int64_t nanos) {
  std::lock_guard<std::mutex> lock(table_->mutex);
  Entry &e = table_->entries[{&program, index}];
  if (e.calls == 0)
    e.what = fmt::format("program {} node {}: {}", static_cast<const void *>(&program), index,
                         describe(program, program.nodes()[index]));
  e.nanos += nanos;
  e.calls += 1;
}

KernelProfile::~KernelProfile() {
  if (!table_)
    return;
  std::vector<const Entry *> sorted;
  int64_t total = 0;
  for (const auto &[key, e] : table_->entries) {
    sorted.push_back(&e);
    total += e.nanos;
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Entry *a, const Entry *b) { return a->nanos > b->nanos; });
  std::fprintf(stderr, "[kiln:profile] %zu kernels, %.3f ms in all\n", sorted.size(),
               static_cast<double>(total) / 1e6);
  std::map<std::string, int64_t> byKind; // "extern matmul", "reduction", "pointwise"
  for (const Entry *e : sorted) {
    std::string kind = e->what.substr(e->what.find(": ") + 2);
    kind = kind.rfind("extern", 0) == 0 ? kind.substr(0, kind.find('('))
                                        : kind.substr(0, kind.find(' '));
    byKind[kind] += e->nanos;
  }
  for (const auto &[kind, nanos] : byKind)
    std::fprintf(stderr, "[kiln:profile] %6.2f%% %9.3f ms  %s (all)\n",
                 total ? 100.0 * static_cast<double>(nanos) / static_cast<double>(total) : 0.0,
                 static_cast<double>(nanos) / 1e6, kind.c_str());
  for (size_t i = 0; i < sorted.size() && i < 60; ++i) {
    const Entry &e = *sorted[i];
    std::fprintf(stderr, "[kiln:profile] %6.2f%% %9.3f ms %7lld calls %8.3f us/call  %s\n",
                 total ? 100.0 * static_cast<double>(e.nanos) / static_cast<double>(total) : 0.0,
                 static_cast<double>(e.nanos) / 1e6, static_cast<long long>(e.calls),
                 static_cast<double>(e.nanos) / 1e3 / static_cast<double>(e.calls), e.what.c_str());
  }
}

} // namespace kiln::codegen::cpu
