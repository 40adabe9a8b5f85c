// Eager CUDA ops as cached one-node graphs (see [Note: eager signatures] in eager.h).

#include "cuda/eager.h"

#include "codegen/cuda/cuda_program.h"
#include "codegen/cuda/emit.h"
#include "codegen/executable.h"
#include "cuda/backend.h"
#include "driver/prepared_graph.h"
#include "ir/diagnostic.h"
#include "ir/op_kind.h"
#include "ir/tensor_meta.h"
#include "runtime/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

namespace kiln::cuda {

namespace {

using codegen::cuda::CudaProgram;

std::string scalarType(const Scalar &s) {
  return s.dtype() == DType::Bool ? "bool" : s.isFloating() ? "float" : "int";
}

/// `f32[s0, 1, s1] on cuda:0`, or with concrete sizes and `strided [...]` when not contiguous.
std::string tensorType(const Tensor &t, std::map<int64_t, std::string> &symbols, Device device) {
  std::string dims;
  bool contiguous = t.isContiguous();
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t size = t.sizes()[d];
    std::string dim;
    if (size <= 1 || !contiguous) {
      dim = std::to_string(size);
    } else {
      auto [it, fresh] = symbols.try_emplace(size, "");
      if (fresh)
        it->second = fmt::format("s{}", symbols.size() - 1);
      dim = it->second;
    }
    dims += (d ? ", " : "") + dim;
  }
  std::string type = fmt::format("{}[{}]", ir::dtypeShortName(t.dtype()), dims);
  if (!contiguous)
    type += fmt::format(" strided [{}]", fmt::join(t.strides(), ", "));
  return type + " on " + device.str();
}

struct EagerProgram {
  std::once_flag built;
  std::unique_ptr<codegen::Executable> program;
  std::string error; ///< why it cannot run (NotImplemented), when program is null
};

std::mutex cacheMutex;
std::map<std::string, std::shared_ptr<EagerProgram>> cache;
std::atomic<size_t> compiled{0};

void build(EagerProgram &entry, const std::string &text, std::string_view op, Device device) {
  Backend *backend = Backend::get();
  KILN_CHECK(backend, "kiln: CUDA is not available: {}", Backend::unavailableReason());
  driver::PreparedGraph graph;
  try {
    graph = driver::prepareGraph(text, {.filename = fmt::format("<eager cuda {}>", op)});
  } catch (const driver::LoweringDeclined &e) {
    entry.error = fmt::format("kiln: '{}' cannot run on CUDA yet: {}", op, e.diagnostic.message);
    return;
  } catch (const ir::DiagnosticError &e) {
    entry.error =
        fmt::format("kiln: '{}' on these operands is not supported on CUDA: {}", op, e.what());
    return;
  }
  codegen::cuda::CudaModule module = codegen::cuda::emitCuda(graph.schedule);
  std::shared_ptr<codegen::cuda::CudaDevice> dev = backend->open(device.index, module);
  entry.program = codegen::cudaExecutable(
      CudaProgram(graph.schedule, std::move(module), std::move(dev)), device);
  compiled.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

std::string eagerGraphText(std::string_view op, std::span<const DeviceOperand> operands,
                           std::string_view attrs, Device device, int results,
                           ir::SymbolValues *sizes) {
  std::map<int64_t, std::string> symbols;
  bool concrete = false;
  for (const DeviceOperand &o : operands)
    concrete |= o.tensor.defined() && !o.tensor.isContiguous();
  std::string params, args;
  for (size_t i = 0; i < operands.size(); ++i) {
    const DeviceOperand &o = operands[i];
    std::string type;
    if (!o.tensor.defined()) {
      type = scalarType(o.scalar);
    } else if (concrete && o.tensor.isContiguous()) {
      // Every size concrete: a strided operand's sizes must meet the others' as numbers.
      type = fmt::format("{}[{}] on {}", ir::dtypeShortName(o.tensor.dtype()),
                         fmt::join(o.tensor.sizes(), ", "), device.str());
    } else {
      type = tensorType(o.tensor, symbols, device);
    }
    params += fmt::format("{}%a{}: {}", i ? ", " : "", i, type);
    args += fmt::format("{}%a{}", i ? ", " : "", i);
  }
  std::string names;
  for (int r = 0; r < results; ++r)
    names += fmt::format("{}%r{}", r ? ", " : "", r);
  std::string types;
  for (int r = 0; r < results; ++r)
    types += fmt::format("{}f32[] on {}", r ? ", " : "", device.str());
  if (sizes)
    for (const auto &[size, name] : symbols)
      (*sizes)[name] = size;
  std::string attrText = attrs.empty() ? "" : fmt::format(" {{{}}}", attrs);
  return fmt::format("graph @eager({}) {{\n  {} = {}({}){} : {}\n  return {}\n}}\n", params, names,
                     op, args, attrText, types, names);
}

std::vector<Tensor> runEagerOp(std::string_view op, std::span<const DeviceOperand> operands,
                               std::string_view attrs, Device device, int results,
                               std::span<const Tensor> into) {
  KILN_CHECK(device.type == DeviceType::CUDA, "runEagerOp: {} is not a CUDA device", device.str());
  KILN_CHECK_KIND(NotImplemented, ir::opKindFromKeyword(op),
                  "kiln: '{}' has no CUDA implementation yet (CUDA runs the ops of kiln's graph "
                  "IR); move the tensor to the CPU with .cpu() first",
                  op);
  std::vector<DeviceOperand> moved(operands.begin(), operands.end());
  std::vector<Tensor> inputs;
  for (DeviceOperand &o : moved) {
    if (!o.tensor.defined()) {
      inputs.push_back(Tensor::wrapScalar(o.scalar));
      continue;
    }
    if (o.tensor.device() != device) {
      KILN_CHECK(o.tensor.isCpu() && o.tensor.dim() == 0,
                 "kiln: {}: expected all tensors to be on the same device, but found at "
                 "least two devices, {} and {}",
                 op, device.str(), o.tensor.device().str());
      o.tensor = o.tensor.to(device);
    }
    inputs.push_back(o.tensor);
  }
  // The text names each distinct size once: its symbols' values are the operands' sizes, so the
  // program runs them as checked (the Executable contract) with nothing bound twice.
  ir::SymbolValues sizes;
  std::string text = eagerGraphText(op, moved, attrs, device, results, &sizes);
  std::string key = fmt::format("{}\n{}", device.index, text);
  std::shared_ptr<EagerProgram> entry;
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    std::shared_ptr<EagerProgram> &slot = cache[key];
    if (!slot)
      slot = std::make_shared<EagerProgram>();
    entry = slot;
  }
  std::call_once(entry->built, [&] { build(*entry, text, op, device); });
  KILN_CHECK_KIND(NotImplemented, entry->program, "{}", entry->error);
  std::vector<Tensor> out = entry->program->run(inputs, sizes, into);
  // A result that is an operand (an op the pipeline folded away) is still a new tensor.
  for (Tensor &t : out)
    for (const Tensor &in : inputs)
      if (t.isSameAs(in)) {
        t = t.clone();
        break;
      }
  return out;
}

size_t eagerProgramsCompiled() { return compiled.load(std::memory_order_relaxed); }

} // namespace kiln::cuda
