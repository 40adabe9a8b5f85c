// The module: kernel signatures and arguments, index decomposition, one NodeKernels per
// pointwise/reduction node, and the translation unit (program text, prelude, kernels).

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
  case KernelRole::ReduceBlock:
    return "reduce-block";
  case KernelRole::ReduceThread:
    return "reduce-thread";
  case KernelRole::ReducePartial:
    return "reduce-partial";
  case KernelRole::ReduceFinal:
    return "reduce-final";
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
  for (const NodeKernels &n : nodes)
    for (const CudaKernel &k : n.kernels)
      if (k.name == name)
        return &k;
  return nullptr;
}

namespace detail {

bool NodeContext::writes(BufferId id) const {
  for (BufferId out : node->outputs)
    if (out == id)
      return true;
  return false;
}

bool NodeContext::checksIndices() const {
  for (const Expr *e : node->body->exprs())
    if (e->kind == ExprKind::IndirectLoad)
      return true;
  return false;
}

std::string NodeContext::signature(const std::string &name, Buffers which, std::string_view extra,
                                   std::vector<KernelArg> &args) const {
  std::vector<std::string> params;
  for (BufferId id : buffers) {
    bool out = writes(id);
    if ((out && which == Buffers::Inputs) || (!out && which == Buffers::Outputs))
      continue;
    params.push_back(fmt::format("{}{} *{}", out ? "" : "const ",
                                 memType(program->buffer(id).meta.dtype), bufferName(id)));
    args.push_back({KernelArg::Kind::Buffer, id, ""});
  }
  for (const std::string &s : symbols) {
    params.push_back("long long " + sizeName(s));
    args.push_back({KernelArg::Kind::Size, {}, s});
  }
  if (checksIndices()) {
    params.push_back("long long *kiln_index_error");
    args.push_back({KernelArg::Kind::IndexError, {}, ""});
  }
  std::string list = fmt::format("{}", fmt::join(params, ", "));
  if (!extra.empty())
    list += (list.empty() ? "" : ", ") + std::string(extra);
  return fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({})", kMaxBlockThreads,
                     name, list);
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

CudaModule emitCuda(const LoopProgram &program, const CudaEmitOptions &options) {
  CudaModule module;
  std::set<std::string, std::less<>> symbols = program.sizeSymbols();
  std::string kernels;
  std::span<const LoopNode> nodes = program.nodes();
  for (size_t k = 0; k < nodes.size(); ++k) {
    const LoopNode &node = nodes[k];
    if (node.kind == LoopNodeKind::Extern)
      continue;
    NodeContext ctx;
    ctx.program = &program;
    ctx.node = &node;
    ctx.index = k;
    ctx.baseName = fmt::format("node{}_{}", k, bufferName(node.outputs[0]));
    std::set<BufferId> buffers(node.outputs.begin(), node.outputs.end());
    for (BufferId id : node.reads())
      buffers.insert(id);
    ctx.buffers.assign(buffers.begin(), buffers.end());
    ctx.symbols.assign(symbols.begin(), symbols.end());
    NodeKernels nk = node.kind == LoopNodeKind::Pointwise ? emitPointwise(ctx, options)
                                                          : emitReduction(ctx, options);
    nk.node = k;
    for (const CudaKernel &kernel : nk.kernels)
      kernels += "\n" + kernel.code;
    module.nodes.push_back(std::move(nk));
  }
  std::string text = "// Generated by kiln (codegen/cuda) from the loop program:\n";
  std::istringstream lines(program.str());
  for (std::string line; std::getline(lines, line);)
    text += "//   " + line + "\n";
  module.source = text + "\n" + std::string(cudaPrelude()) + kernels;
  return module;
}

} // namespace kiln::codegen::cuda
