// A compiled loop program: binding, buffer allocation, kernels launched in node order, externs
// through kiln's eager ops.

#include "codegen/cpu/compiled_program.h"

#include "codegen/cpu/launch.h"
#include "runtime/error.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/shape_ops.h"

#include <fmt/format.h>

#include <chrono>

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

/// An optional trailing input.
std::optional<Tensor> optionalInput(std::span<const Tensor> in, size_t k) {
  return in.size() > k ? std::optional<Tensor>(in[k]) : std::nullopt;
}

template <typename T>
T attrOr(const ir::Attributes &attrs, std::string_view name, T fallback,
         T (ir::Attribute::*get)() const) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : (it->second.*get)();
}

void checkInputs(std::string_view op, std::span<const Tensor> in, size_t lo, size_t hi) {
  KILN_CHECK_KIND(Value, in.size() >= lo && in.size() <= hi,
                  "compiled program: extern \"{}\" takes {} to {} inputs, got {}", op, lo, hi,
                  in.size());
}

std::map<std::string, CompiledProgram::ExternFn, std::less<>> defaultExterns() {
  using Attrs = ir::Attributes;
  std::map<std::string, CompiledProgram::ExternFn, std::less<>> ex;
  ex["mm"] = [](std::span<const Tensor> in, const Attrs &) -> std::vector<Tensor> {
    checkInputs("mm", in, 2, 2);
    return {ops::mm(in[0], in[1])};
  };
  ex["bmm"] = [](std::span<const Tensor> in, const Attrs &) -> std::vector<Tensor> {
    checkInputs("bmm", in, 2, 2);
    return {ops::bmm(in[0], in[1])};
  };
  ex["matmul"] = [](std::span<const Tensor> in, const Attrs &a) -> std::vector<Tensor> {
    checkInputs("matmul", in, 2, 2);
    Tensor x = attrOr(a, "transpose_a", false, &ir::Attribute::toBool) ? in[0].mT() : in[0];
    Tensor y = attrOr(a, "transpose_b", false, &ir::Attribute::toBool) ? in[1].mT() : in[1];
    return {ops::matmul(x, y)};
  };
  ex["linear"] = [](std::span<const Tensor> in, const Attrs &) -> std::vector<Tensor> {
    checkInputs("linear", in, 2, 3);
    return {ops::linear(in[0], in[1], optionalInput(in, 2))};
  };
  ex["conv2d"] = [](std::span<const Tensor> in, const Attrs &a) -> std::vector<Tensor> {
    checkInputs("conv2d", in, 2, 3);
    ops::ConvOptions o;
    auto list = [&](const char *name, Shape fallback) {
      auto it = a.find(name);
      return it == a.end() ? fallback : it->second.toInts();
    };
    o.stride = list("stride", {1});
    o.padding = list("padding", {0});
    o.dilation = list("dilation", {1});
    o.groups = attrOr<int64_t>(a, "groups", 1, &ir::Attribute::toInt);
    return {ops::convolution(2, in[0], in[1], optionalInput(in, 2), o)};
  };
  ex["scaled_dot_product_attention"] = [](std::span<const Tensor> in,
                                          const Attrs &a) -> std::vector<Tensor> {
    checkInputs("scaled_dot_product_attention", in, 3, 4);
    auto scale = a.find("scale");
    return {ops::scaledDotProductAttention(
        in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(), 0.0,
        attrOr(a, "is_causal", false, &ir::Attribute::toBool),
        scale == a.end() ? std::nullopt : std::optional<double>(scale->second.toDouble()), false)};
  };
  ex["attention"] = ex["scaled_dot_product_attention"];
  ex["embedding"] = [](std::span<const Tensor> in, const Attrs &a) -> std::vector<Tensor> {
    checkInputs("embedding", in, 2, 2);
    auto pad = a.find("padding_idx");
    return {ops::embedding(
        in[0], in[1], pad == a.end() ? std::nullopt : std::optional<int64_t>(pad->second.toInt()))};
  };
  return ex;
}

} // namespace

struct CompiledProgram::State {
  LoopProgram program;
  EmittedModule module;
  std::unique_ptr<CpuJit> jit;
  std::vector<KernelFn> kernels; ///< parallel to module.kernels
  std::vector<int> kernelOfNode; ///< node → index into kernels, -1 for externs
  /// Per buffer: the last node that reads or writes it (-1: none). An intermediate is freed
  /// after it, so a call holds only the buffers live at each node, not all of them at once.
  std::vector<int> lastUse;
  std::map<std::string, ExternFn, std::less<>> externs = defaultExterns();
  double seconds = 0;
  bool fromCache = false;

  SymbolValues bind(std::span<const Tensor> inputs, const SymbolValues &given,
                    std::vector<Tensor> &tensors) const;
  void runExtern(const LoopNode &node, const SymbolValues &values,
                 std::vector<Tensor> &tensors) const;
  /// The buffers node `k` reads or writes (a kernel's arguments, an extern's inputs and
  /// outputs).
  std::vector<BufferId> uses(size_t k) const;
  void runKernel(size_t node, const SymbolValues &values, std::vector<Tensor> &tensors) const;
};

CompiledProgram::CompiledProgram() : state_(std::make_unique<State>()) {}
CompiledProgram::CompiledProgram(CompiledProgram &&) noexcept = default;
CompiledProgram &CompiledProgram::operator=(CompiledProgram &&) noexcept = default;
CompiledProgram::~CompiledProgram() = default;

const LoopProgram &CompiledProgram::program() const { return state_->program; }
const EmittedModule &CompiledProgram::module() const { return state_->module; }
double CompiledProgram::compileSeconds() const { return state_->seconds; }
bool CompiledProgram::fromCache() const { return state_->fromCache; }
CompileDumps CompiledProgram::dumps() const { return state_->jit->dumps(); }

CompiledProgram &CompiledProgram::registerExtern(const std::string &op, ExternFn fn) {
  state_->externs[op] = std::move(fn);
  return *this;
}

CompiledProgram compileProgram(const LoopProgram &program, const ProgramOptions &options) {
  auto start = std::chrono::steady_clock::now();
  CompiledProgram compiled;
  CompiledProgram::State &s = *compiled.state_;
  s.program = program;
  JitOptions jitOptions = options.jit;
  if (!jitOptions.cache)
    jitOptions.cache = &KernelCache::global();
  s.jit = std::make_unique<CpuJit>(jitOptions);
  s.module = emitModule(s.program,
                        options.emit.value_or(emitOptionsForFeatures(s.jit->target().features)));
  s.kernelOfNode.assign(s.program.nodes().size(), -1);
  if (!s.module.kernels.empty()) {
    s.jit->addModule(s.module.text);
    s.fromCache = s.jit->dumps().fromCache;
    for (const KernelInfo &k : s.module.kernels) {
      s.kernelOfNode[k.node] = static_cast<int>(s.kernels.size());
      s.kernels.push_back(s.jit->lookupKernel(k.name));
    }
  }
  s.lastUse.assign(s.program.buffers().size(), -1);
  for (size_t k = 0; k < s.program.nodes().size(); ++k)
    for (BufferId id : s.uses(k))
      s.lastUse[id.index] = static_cast<int>(k);
  for (BufferId id : s.program.outputs()) // returned: never freed
    s.lastUse[id.index] = static_cast<int>(s.program.nodes().size());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return compiled;
}

namespace {

/// A fresh tensor with buffer `b`'s sizes and strides under `values`.
Tensor allocate(const Buffer &b, const SymbolValues &values) {
  Shape sizes = evaluateAll(b.meta.sizes, values);
  Shape strides = evaluateAll(b.meta.strides, values);
  int64_t extent = 1;
  for (size_t k = 0; k < sizes.size(); ++k) {
    KILN_CHECK_KIND(Value, sizes[k] >= 0 && strides[k] >= 0,
                    "compiled program: {} has sizes {} and strides {} here", b.name(),
                    shapeToString(sizes), shapeToString(strides));
    extent = sizes[k] == 0 || extent == 0 ? 0 : extent + (sizes[k] - 1) * strides[k];
  }
  return Tensor::empty({extent}, b.meta.dtype).asStrided(sizes, strides, 0);
}

} // namespace

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
  std::span<const BufferId> ids = program.inputs();
  KILN_CHECK_KIND(Value, inputs.size() == ids.size(),
                  "compiled program: the program takes {} inputs, got {}", ids.size(),
                  inputs.size());
  SymbolValues values = given;
  for (size_t n = 0; n < ids.size(); ++n) {
    const Buffer &b = program.buffer(ids[n]);
    const Tensor &t = inputs[n];
    KILN_CHECK_KIND(Value, t.defined(), "compiled program: input {} is undefined", b.name());
    KILN_CHECK_KIND(Type, t.dtype() == b.meta.dtype,
                    "compiled program: input {} is {} but the tensor bound to it has dtype {}",
                    b.name(), printType(b.meta), dtypeName(t.dtype()));
    KILN_CHECK_KIND(Value, t.dim() == b.rank(),
                    "compiled program: input {} is {} but the tensor bound to it has shape {}",
                    b.name(), printType(b.meta), t.shapeStr());
    for (int64_t k = 0; k < b.rank(); ++k)
      if (std::string_view s = b.meta.sizes[k].symbolName(); !s.empty())
        values.try_emplace(std::string(s), t.size(k));
  }
  for (const std::string &s : program.sizeSymbols())
    KILN_CHECK_KIND(Value, values.count(s),
                    "compiled program: symbol '{}' has no value: pass it or an input with a "
                    "dimension of size {}",
                    s, s);
  for (size_t n = 0; n < ids.size(); ++n) {
    const Buffer &b = program.buffer(ids[n]);
    Tensor t = inputs[n];
    std::vector<int64_t> sizes = evaluateAll(b.meta.sizes, values);
    std::vector<int64_t> strides = evaluateAll(b.meta.strides, values);
    KILN_CHECK_KIND(Value, sizes == t.sizes(),
                    "compiled program: input {} is {} = {} here, but the tensor bound to it has "
                    "shape {}",
                    b.name(), printType(b.meta), shapeToString(sizes), t.shapeStr());
    auto matches = [&](const Tensor &x) {
      for (int64_t k = 0; k < b.rank(); ++k)
        if (sizes[k] > 1 && strides[k] != x.stride(k))
          return false;
      return true;
    };
    if (!matches(t) && b.meta.isContiguous())
      t = t.contiguous();
    KILN_CHECK_KIND(Value, matches(t),
                    "compiled program: input {} has strides {} here, but the tensor bound to it "
                    "has strides {}",
                    b.name(), shapeToString(strides), shapeToString(t.strides()));
    tensors[ids[n].index] = t;
  }
  return values;
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
        out = allocate(b, values);
      out.copy_(results[n]);
    }
  }
}

void CompiledProgram::State::runKernel(size_t k, const SymbolValues &values,
                                       std::vector<Tensor> &tensors) const {
  const LoopNode &node = program.nodes()[k];
  const KernelInfo &info = module.kernels[kernelOfNode[k]];
  int64_t n = node.ranges.empty() ? 1 : node.ranges[0].evaluate(values);
  int64_t inner = product(std::span(node.ranges).subspan(node.ranges.empty() ? 0 : 1), values);
  int64_t reduced = product(node.reductionRanges, values);
  if (n <= 0 || inner <= 0)
    return;
  KILN_CHECK_KIND(
      Index,
      reduced > 0 ||
          (node.reduction != ReductionKind::ArgMax && node.reduction != ReductionKind::ArgMin) ||
          node.kind != LoopNodeKind::Reduction,
      "compiled program: {} over an empty reduction range", reductionKeyword(node.reduction));
  std::vector<void *> args;
  for (BufferId id : info.buffers)
    args.push_back(tensors[id.index].rawData());
  for (const std::string &s : info.symbols)
    args.push_back(packSize(values.at(s)));
  launch(kernels[kernelOfNode[k]], args.data(), n, grainFor(inner * std::max<int64_t>(1, reduced)));
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
    } else {
      for (BufferId id : s.module.kernels[s.kernelOfNode[k]].buffers)
        if (!tensors[id.index].defined())
          tensors[id.index] = allocate(s.program.buffer(id), values);
      s.runKernel(k, values, tensors);
    }
    for (BufferId id : s.uses(k))
      if (s.lastUse[id.index] == static_cast<int>(k))
        tensors[id.index] = Tensor();
  }
  for (BufferId id : s.program.outputs())
    if (!tensors[id.index].defined())
      tensors[id.index] = allocate(s.program.buffer(id), values);
  std::vector<Tensor> results;
  for (BufferId id : s.program.outputs())
    results.push_back(tensors[id.index]);
  return results;
}

} // namespace kiln::codegen::cpu
