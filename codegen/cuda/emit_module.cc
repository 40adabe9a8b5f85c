// The module: kernel signatures and arguments, index decomposition, the steps of the schedule
// (nodes alone, fused launches, externs) and the translation unit (schedule text, prelude,
// kernels).

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "runtime/error.h"

#include <cctype>
#include <sstream>

namespace kiln::codegen::cuda {

using namespace ir::loop;
using namespace detail;

std::string_view kernelRoleName(KernelRole role) {
  switch (role) {
  case KernelRole::Pointwise:
    return "pointwise";
  case KernelRole::PointwiseVector:
    return "pointwise-vector";
  case KernelRole::PointwiseTiled:
    return "pointwise-tiled";
  case KernelRole::ReduceBlock:
    return "reduce-block";
  case KernelRole::ReduceThread:
    return "reduce-thread";
  case KernelRole::ReducePartial:
    return "reduce-partial";
  case KernelRole::ReduceFinal:
    return "reduce-final";
  case KernelRole::Fused:
    return "fused";
  }
  return "?";
}

const CudaKernel *NodeKernels::find(KernelRole role) const {
  for (const CudaKernel &k : kernels)
    if (k.role == role)
      return &k;
  return nullptr;
}

const CudaKernel *CudaModule::find(std::string_view name) const {
  for (const CudaKernel *k : kernels())
    if (k->name == name)
      return k;
  return nullptr;
}

namespace detail {

bool NodeContext::writes(BufferId id) const {
  for (BufferId out : node->outputs)
    if (out == id)
      return true;
  return false;
}

bool hasIndirectLoads(const LoopNode &node) {
  for (const Expr *e : node.body->exprs())
    if (e->kind == ExprKind::IndirectLoad)
      return true;
  return false;
}

bool NodeContext::checksIndices() const { return hasIndirectLoads(*node); }

std::string kernelSignature(const LoopProgram &program, const std::string &name,
                            std::span<const BufferId> buffers,
                            const std::function<bool(BufferId)> &written,
                            std::span<const std::string> symbols, bool checksIndices,
                            std::string_view extra, std::vector<KernelArg> &args) {
  std::vector<std::string> params;
  for (BufferId id : buffers) {
    bool out = written(id);
    params.push_back(fmt::format("{}{} *{}", out ? "" : "const ",
                                 memType(program.buffer(id).meta.dtype), bufferName(id)));
    args.push_back({KernelArg::Kind::Buffer, id, ""});
  }
  for (const std::string &s : symbols) {
    params.push_back("long long " + sizeName(s));
    args.push_back({KernelArg::Kind::Size, {}, s});
  }
  if (checksIndices) {
    params.push_back("long long *kiln_index_error");
    args.push_back({KernelArg::Kind::IndexError, {}, ""});
  }
  std::string list = fmt::format("{}", fmt::join(params, ", "));
  if (!extra.empty())
    list += (list.empty() ? "" : ", ") + std::string(extra);
  return fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({})", kMaxBlockThreads,
                     name, list);
}

SymInt product(const std::vector<SymInt> &v) {
  SymInt p = 1;
  for (const SymInt &x : v)
    p *= x;
  return p;
}

std::string NodeContext::signature(const std::string &name, Buffers which, std::string_view extra,
                                   std::vector<KernelArg> &args) const {
  std::vector<BufferId> taken;
  for (BufferId id : buffers) {
    bool out = writes(id);
    if ((out && which == Buffers::Inputs) || (!out && which == Buffers::Outputs))
      continue;
    taken.push_back(id);
  }
  return kernelSignature(
      *program, name, taken, [&](BufferId id) { return writes(id); }, symbols, checksIndices(),
      extra, args);
}

Names NodeContext::sizeNames() const {
  Names names;
  for (const std::string &s : symbols)
    names[s] = sizeName(s);
  return names;
}

namespace {
/// `text`, parenthesized unless it is a name or a number.
std::string operand(const std::string &text) {
  for (char c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return "(" + text + ")";
  return text;
}
} // namespace

void decompose(Writer &w, const std::string &flat, const std::vector<std::string> &vars,
               const std::vector<SymInt> &extents, const Names &names) {
  size_t k = vars.size();
  if (k == 0)
    return;
  std::string rest = flat;
  if (k > 2) {
    rest = w.fresh("t");
    w.emit("long long {} = {};", rest, flat);
  }
  for (size_t j = k - 1; j > 0; --j) {
    if (extents[j].constant() == 1) {
      w.emit("const long long {} = 0;", vars[j]);
      continue;
    }
    std::string e = operand(indexExpr(extents[j], names));
    w.emit("const long long {} = {} % {};", vars[j], rest, e);
    if (k > 2)
      w.emit("{} /= {};", rest, e);
    else
      rest = fmt::format("{} / {}", flat, e);
  }
  w.emit("const long long {} = {};", vars[0], rest);
}

std::string storeOffset(const NodeContext &ctx, BufferId out, const Names &names) {
  std::vector<IndexExpr> vars;
  for (size_t j = 0; j < ctx.node->ranges.size(); ++j)
    vars.push_back(SymInt::symbol(loopVarName(j)));
  return indexExpr(flatIndex(vars, ctx.program->buffer(out).meta.strides), names);
}

} // namespace detail

std::vector<const CudaKernel *> CudaModule::kernels() const {
  std::vector<const CudaKernel *> out;
  for (const CudaStep &step : steps) {
    if (step.kind == CudaStep::Kind::Node)
      for (const CudaKernel &k : nodes[step.index].kernels)
        out.push_back(&k);
    else if (step.kind == CudaStep::Kind::Fused)
      out.push_back(&fused[step.index].kernel);
  }
  return out;
}

CudaModule emitCuda(const passes::schedule::Schedule &schedule, const CudaEmitOptions &options) {
  using passes::schedule::Kernel;
  using passes::schedule::KernelKind;
  const LoopProgram &program = schedule.program;
  CudaModule module;
  std::set<std::string, std::less<>> symbolSet = program.sizeSymbols();
  std::vector<std::string> symbols(symbolSet.begin(), symbolSet.end());
  std::set<BufferId> locals;
  for (size_t b = 0; b < schedule.buffers.size(); ++b)
    if (schedule.buffers[b].kind == passes::schedule::StorageKind::Local)
      locals.insert(BufferId{static_cast<int>(b)});
  std::string kernels;
  std::span<const LoopNode> nodes = program.nodes();
  auto alone = [&](size_t k) {
    const LoopNode &node = nodes[k];
    NodeContext ctx;
    ctx.program = &program;
    ctx.node = &node;
    ctx.index = k;
    ctx.baseName = fmt::format("node{}_{}", k, bufferName(node.outputs[0]));
    std::set<BufferId> buffers(node.outputs.begin(), node.outputs.end());
    for (BufferId id : node.reads())
      buffers.insert(id);
    for (BufferId id : buffers)
      if (!locals.count(id))
        ctx.buffers.push_back(id);
    ctx.locals = locals;
    ctx.symbols = symbols;
    ctx.tileVar = schedule.loops[k].tileVar;
    NodeKernels nk = node.kind == LoopNodeKind::Pointwise ? emitPointwise(ctx, options)
                                                          : emitReduction(ctx, options);
    nk.node = k;
    for (const CudaKernel &kernel : nk.kernels)
      kernels += "\n" + kernel.code;
    module.steps.push_back({CudaStep::Kind::Node, module.nodes.size()});
    module.nodes.push_back(std::move(nk));
  };
  std::span<const Kernel> scheduled = schedule.kernels;
  for (size_t k = 0; k < scheduled.size();) {
    size_t end = k + 1;
    while (end < scheduled.size() && scheduled[end].withPrevious)
      ++end;
    const Kernel &first = scheduled[k];
    if (first.kind == KernelKind::Extern) {
      // The library call, then its epilogues, each on its own (as the CPU runs them).
      module.steps.push_back({CudaStep::Kind::Extern, first.nodes[0]});
      for (size_t j = 1; j < first.nodes.size(); ++j)
        alone(first.nodes[j]);
    } else if (end == k + 1 && first.nodes.size() == 1) {
      alone(first.nodes[0]);
    } else {
      LaunchContext ctx;
      ctx.schedule = &schedule;
      for (size_t j = k; j < end; ++j)
        ctx.kernels.push_back(j);
      ctx.symbols = symbols;
      ctx.locals = locals;
      FusedKernel fused = emitFused(ctx);
      kernels += "\n" + fused.kernel.code;
      module.steps.push_back({CudaStep::Kind::Fused, module.fused.size()});
      module.fused.push_back(std::move(fused));
    }
    k = end;
  }
  std::string text = "// Generated by kiln (codegen/cuda) from the scheduled program:\n";
  std::istringstream lines(schedule.str());
  for (std::string line; std::getline(lines, line);)
    text += "//   " + line + "\n";
  module.source = text + "\n" + std::string(cudaPrelude()) + kernels;
  return module;
}

} // namespace kiln::codegen::cuda
