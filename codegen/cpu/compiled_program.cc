// A compiled loop program: binding, buffer allocation, kernels launched in node order, externs
// through kiln's eager ops.

#include "codegen/cpu/compiled_program.h"

#include "codegen/cpu/launch.h"
#include "ir/loop/binding.h"
#include "passes/lower/eager_externs.h"
#include "runtime/error.h"

#include <fmt/format.h>

namespace kiln::codegen::cpu {

using namespace ir::loop;
using ir::SymbolValues;
using ir::SymInt;

namespace {

std::vector<int64_t> evaluateAll(std::span<const SymInt> syms, const SymbolValues &values) {
  std::vector<int64_t> out;
  for (const SymInt &s : syms)
    out.push_back(s.evaluate(values));
  return out;
}

int64_t product(std::span<const SymInt> syms, const SymbolValues &values) {
  int64_t n = 1;
  for (const SymInt &s : syms)
    n *= s.evaluate(values);
  return n;
}

} // namespace

struct CompiledProgram::State {
  LoopProgram program;
  EmittedModule module;
  std::shared_ptr<const void> codeOwner; ///< keeps the kernels' code loaded
  CompileDumps dumps;
  std::vector<KernelFn> kernels; ///< parallel to module.kernels
  std::vector<int> kernelOfNode; ///< node → index into kernels, -1 for externs
  /// Per buffer: the last node that reads or writes it (-1: none). An intermediate is freed
  /// after it, so a call holds only the buffers live at each node, not all of them at once.
  std::vector<int> lastUse;
  std::map<std::string, ExternFn, std::less<>> externs = passes::lower::eagerExterns();
  double seconds = 0;

  SymbolValues bind(std::span<const Tensor> inputs, const SymbolValues &given,
                    std::vector<Tensor> &tensors) const;
  void runExtern(const LoopNode &node, const SymbolValues &values,
                 std::vector<Tensor> &tensors) const;
  /// The buffers node `k` reads or writes (a kernel's arguments, an extern's inputs and
  /// outputs).
  std::vector<BufferId> uses(size_t k) const;
  void runKernel(size_t node, const SymbolValues &values, std::vector<Tensor> &tensors) const;
  int64_t workPerRow(size_t node, const SymbolValues &values) const;
  /// Per node: the nodes whose code runs inside its function (KernelInfo::fusedInto).
  std::vector<std::vector<size_t>> members;
};

CompiledProgram::CompiledProgram() : state_(std::make_unique<State>()) {}
CompiledProgram::CompiledProgram(CompiledProgram &&) noexcept = default;
CompiledProgram &CompiledProgram::operator=(CompiledProgram &&) noexcept = default;
CompiledProgram::~CompiledProgram() = default;

const LoopProgram &CompiledProgram::program() const { return state_->program; }
const EmittedModule &CompiledProgram::module() const { return state_->module; }
double CompiledProgram::compileSeconds() const { return state_->seconds; }
bool CompiledProgram::fromCache() const { return state_->dumps.fromCache; }
CompileDumps CompiledProgram::dumps() const { return state_->dumps; }

CompiledProgram &CompiledProgram::registerExtern(const std::string &op, ExternFn fn) {
  state_->externs[op] = std::move(fn);
  return *this;
}

CompiledProgram CompiledProgram::fromKernels(LoopProgram program, EmittedModule module,
                                             std::vector<KernelFn> kernels,
                                             std::shared_ptr<const void> codeOwner, double seconds,
                                             CompileDumps dumps) {
  KILN_CHECK(kernels.size() == module.kernels.size(),
             "compiled program: {} kernels for a module of {}", kernels.size(),
             module.kernels.size());
  CompiledProgram compiled;
  CompiledProgram::State &s = *compiled.state_;
  s.program = std::move(program);
  s.module = std::move(module);
  s.kernels = std::move(kernels);
  s.codeOwner = std::move(codeOwner);
  s.seconds = seconds;
  s.dumps = std::move(dumps);
  s.kernelOfNode.assign(s.program.nodes().size(), -1);
  for (size_t k = 0; k < s.module.kernels.size(); ++k) {
    KILN_CHECK(s.kernels[k], "compiled program: kernel {} has no code", s.module.kernels[k].name);
    s.kernelOfNode[s.module.kernels[k].node] = static_cast<int>(k);
  }
  s.members.assign(s.program.nodes().size(), {});
  for (const KernelInfo &info : s.module.kernels)
    if (info.fusedInto)
      s.members[*info.fusedInto].push_back(info.node);
  s.lastUse.assign(s.program.buffers().size(), -1);
  for (size_t k = 0; k < s.program.nodes().size(); ++k)
    for (BufferId id : s.uses(k))
      s.lastUse[id.index] = static_cast<int>(k);
  for (BufferId id : s.program.outputs()) // returned: never freed
    s.lastUse[id.index] = static_cast<int>(s.program.nodes().size());
  return compiled;
}

std::vector<BufferId> CompiledProgram::State::uses(size_t k) const {
  const LoopNode &node = program.nodes()[k];
  std::vector<BufferId> out = node.reads();
  out.insert(out.end(), node.outputs.begin(), node.outputs.end());
  if (kernelOfNode[k] >= 0) {
    const std::vector<BufferId> &args = module.kernels[kernelOfNode[k]].buffers;
    out.insert(out.end(), args.begin(), args.end());
  }
  return out;
}

SymbolValues CompiledProgram::State::bind(std::span<const Tensor> inputs, const SymbolValues &given,
                                          std::vector<Tensor> &tensors) const {
  return bindInputs(program, inputs, given, {"compiled program", "pass it or an input", true},
                    tensors);
}

void CompiledProgram::State::runExtern(const LoopNode &node, const SymbolValues &values,
                                       std::vector<Tensor> &tensors) const {
  auto it = externs.find(node.externOp);
  KILN_CHECK_KIND(NotImplemented, it != externs.end(),
                  "compiled program: no implementation of extern \"{}\" (registerExtern it)",
                  node.externOp);
  std::vector<Tensor> inputs;
  for (BufferId id : node.externInputs)
    inputs.push_back(tensors[id.index]);
  std::vector<Tensor> results = it->second(inputs, node.attributes);
  KILN_CHECK_KIND(Value, results.size() == node.outputs.size(),
                  "compiled program: extern \"{}\" returned {} tensors for {} buffers",
                  node.externOp, results.size(), node.outputs.size());
  for (size_t n = 0; n < results.size(); ++n) {
    const Buffer &b = program.buffer(node.outputs[n]);
    Tensor &out = tensors[node.outputs[n].index];
    Shape sizes = out.defined() ? out.sizes() : evaluateAll(b.meta.sizes, values);
    KILN_CHECK_KIND(Value, results[n].sizes() == sizes && results[n].dtype() == b.meta.dtype,
                    "compiled program: extern \"{}\" result {} is {} {}, but {} is {}",
                    node.externOp, n, dtypeName(results[n].dtype()), results[n].shapeStr(),
                    bufferName(node.outputs[n]), printType(b.meta));
    // Adopt the result when its layout is the buffer's (kernels read it through the buffer's
    // strides); otherwise copy it in. An output buffer is only allocated for the copy.
    Shape strides = out.defined() ? out.strides() : evaluateAll(b.meta.strides, values);
    if (results[n].strides() == strides) {
      out = results[n];
    } else {
      if (!out.defined())
        out = allocateBuffer(b, values, "compiled program");
      out.copy_(results[n]);
    }
  }
}

/// Iterations of node `k` per index of its outermost range (inner points times reduced points),
/// or -1 when its ranges are empty; throws for an argmax/argmin over an empty range.
int64_t CompiledProgram::State::workPerRow(size_t k, const SymbolValues &values) const {
  const LoopNode &node = program.nodes()[k];
  int64_t n = node.ranges.empty() ? 1 : node.ranges[0].evaluate(values);
  int64_t inner = product(std::span(node.ranges).subspan(node.ranges.empty() ? 0 : 1), values);
  int64_t reduced = product(node.reductionRanges, values);
  if (n <= 0 || inner <= 0)
    return -1;
  KILN_CHECK_KIND(
      Index,
      reduced > 0 ||
          (node.reduction != ReductionKind::ArgMax && node.reduction != ReductionKind::ArgMin) ||
          node.kind != LoopNodeKind::Reduction,
      "compiled program: {} over an empty reduction range", reductionKeyword(node.reduction));
  return inner * std::max<int64_t>(1, reduced);
}

void CompiledProgram::State::runKernel(size_t k, const SymbolValues &values,
                                       std::vector<Tensor> &tensors) const {
  const LoopNode &node = program.nodes()[k];
  const KernelInfo &info = module.kernels[kernelOfNode[k]];
  int64_t work = workPerRow(k, values);
  if (work < 0)
    return;
  // The nodes fused into this one run inside its function: the grain counts their work too.
  for (size_t member : members[k])
    work += std::max<int64_t>(0, workPerRow(member, values));
  std::vector<void *> args;
  for (BufferId id : info.buffers)
    args.push_back(tensors[id.index].rawData());
  for (const std::string &s : info.symbols)
    args.push_back(packSize(values.at(s)));
  int64_t n = node.ranges.empty() ? 1 : node.ranges[0].evaluate(values);
  launch(kernels[kernelOfNode[k]], args.data(), n, grainFor(work));
}

std::vector<Tensor> CompiledProgram::run(std::span<const Tensor> inputs,
                                         const SymbolValues &symbols) const {
  const State &s = *state_;
  std::vector<Tensor> tensors(s.program.buffers().size());
  SymbolValues values = s.bind(inputs, symbols, tensors);
  // Intermediates are allocated just before the first node that uses them and freed after the
  // last one (outputs are kept), so the peak is what is live at one node.
  std::span<const LoopNode> nodes = s.program.nodes();
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (nodes[k].kind == LoopNodeKind::Extern) {
      s.runExtern(nodes[k], values, tensors);
    } else if (s.module.kernels[s.kernelOfNode[k]].fusedInto) {
      // Its code ran inside an earlier node's function; its function does nothing.
    } else {
      for (BufferId id : s.module.kernels[s.kernelOfNode[k]].buffers)
        if (!tensors[id.index].defined())
          tensors[id.index] = allocateBuffer(s.program.buffer(id), values, "compiled program");
      s.runKernel(k, values, tensors);
    }
    for (BufferId id : s.uses(k))
      if (s.lastUse[id.index] == static_cast<int>(k))
        tensors[id.index] = Tensor();
  }
  for (BufferId id : s.program.outputs())
    if (!tensors[id.index].defined())
      tensors[id.index] = allocateBuffer(s.program.buffer(id), values, "compiled program");
  std::vector<Tensor> results;
  for (BufferId id : s.program.outputs())
    results.push_back(tensors[id.index]);
  return results;
}

} // namespace kiln::codegen::cpu
