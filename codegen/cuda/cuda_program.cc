// A loop program on a CUDA device: binding, device buffers, kernels launched as planLaunches says,
// externs on the host through kiln's eager kernels.

#include "codegen/cuda/cuda_program.h"

#include "codegen/cuda/device_externs.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/launch_plan.h"
#include "ir/loop/binding.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

namespace kiln::codegen::cuda {

using namespace ir::loop;
using ir::SymbolValues;
using ir::SymInt;

namespace {

constexpr std::string_view kWho = "cuda program";

BufferLayout layoutOf(const Buffer &b, const SymbolValues &values) {
  return ir::loop::layoutOf(b, values, kWho);
}

/// A host tensor with buffer `b`'s layout (the same bytes as its device buffer).
Tensor hostTensor(const Buffer &b, const BufferLayout &l) {
  return Tensor::empty({l.extent}, b.meta.dtype).asStrided(l.sizes, l.strides, 0);
}

/// The device buffers of one call, by buffer id (0: not allocated), released on every exit
/// unless they belong to a tensor (a device input or result, `borrowed`).
struct DeviceBuffers {
  CudaDevice &device;
  std::vector<uint64_t> addresses;
  std::vector<Tensor> borrowed; ///< by buffer id: the tensor whose memory the buffer is

  DeviceBuffers(CudaDevice &d, size_t n) : device(d), addresses(n, 0), borrowed(n) {}
  ~DeviceBuffers() {
    for (size_t i = 0; i < addresses.size(); ++i)
      if (uint64_t a = addresses[i]; a && !borrowed[i].defined()) {
        try {
          device.release(a);
        } catch (const std::exception &) {
          // Unwinding from another error: that one is the one to report.
        }
      }
  }
  DeviceBuffers(const DeviceBuffers &) = delete;
  DeviceBuffers &operator=(const DeviceBuffers &) = delete;

  void release(BufferId id) {
    uint64_t a = std::exchange(addresses[id.index], 0);
    if (a && !borrowed[id.index].defined())
      device.release(a);
  }
  /// Makes buffer `id` the memory of `t` (a tensor on the device).
  void borrow(BufferId id, Tensor t) {
    addresses[id.index] = reinterpret_cast<uint64_t>(t.address());
    borrowed[id.index] = std::move(t);
  }
};

} // namespace

struct CudaProgram::State {
  LoopProgram program;
  CudaModule module;
  std::shared_ptr<CudaDevice> device;
  std::vector<int> kernelsOfNode; ///< node → index into module.nodes, -1 for externs
  /// Per buffer: the last node that reads or writes it (-1: none; outputs: past the last node).
  std::vector<int> lastUse;
  codegen::ExternTable externs = codegen::eagerExterns();
  /// Whether a kernel takes the index-error record (it has indirect loads).
  bool checksIndices = false;

  std::vector<BufferId> uses(size_t k) const;
  SymbolValues bind(std::span<const Tensor> inputs, const SymbolValues &given,
                    std::vector<Tensor> &bound, bool checked) const;
  uint64_t ensure(BufferId id, const SymbolValues &values, DeviceBuffers &buffers) const;
  void runExtern(const LoopNode &node, const SymbolValues &values, DeviceBuffers &buffers) const;
  /// `indexError`: the device address of the run's index-error record (0 when no kernel takes
  /// one).
  void runKernels(size_t k, const SymbolValues &values, DeviceBuffers &buffers,
                  uint64_t indexError) const;
  void runNodes(const SymbolValues &values, DeviceBuffers &buffers) const;
};

CudaProgram::CudaProgram(LoopProgram program, CudaModule module, std::shared_ptr<CudaDevice> device)
    : state_(std::make_unique<State>()) {
  KILN_CHECK(device, "cuda program: no device");
  State &s = *state_;
  s.program = std::move(program);
  s.module = std::move(module);
  s.device = std::move(device);
  s.kernelsOfNode.assign(s.program.nodes().size(), -1);
  for (size_t n = 0; n < s.module.nodes.size(); ++n) {
    size_t node = s.module.nodes[n].node;
    KILN_CHECK(node < s.program.nodes().size() &&
                   s.program.nodes()[node].kind != LoopNodeKind::Extern &&
                   !s.module.nodes[n].kernels.empty(),
               "cuda program: the module's kernels of node {} do not match the program", node);
    s.kernelsOfNode[node] = static_cast<int>(n);
    for (const CudaKernel &kernel : s.module.nodes[n].kernels)
      for (const KernelArg &a : kernel.args)
        s.checksIndices = s.checksIndices || a.kind == KernelArg::Kind::IndexError;
  }
  for (size_t k = 0; k < s.program.nodes().size(); ++k)
    KILN_CHECK(s.program.nodes()[k].kind == LoopNodeKind::Extern || s.kernelsOfNode[k] >= 0,
               "cuda program: the module has no kernels for node {}", k);
  s.lastUse.assign(s.program.buffers().size(), -1);
  for (size_t k = 0; k < s.program.nodes().size(); ++k)
    for (BufferId id : s.uses(k))
      s.lastUse[id.index] = static_cast<int>(k);
  for (BufferId id : s.program.outputs()) // copied back at the end: never freed before
    s.lastUse[id.index] = static_cast<int>(s.program.nodes().size());
}

CudaProgram::CudaProgram(CudaProgram &&) noexcept = default;
CudaProgram &CudaProgram::operator=(CudaProgram &&) noexcept = default;
CudaProgram::~CudaProgram() = default;

const LoopProgram &CudaProgram::program() const { return state_->program; }
const CudaModule &CudaProgram::module() const { return state_->module; }
CudaDevice &CudaProgram::device() const { return *state_->device; }

CudaProgram &CudaProgram::registerExtern(const std::string &op, codegen::ExternFn fn) {
  state_->externs[op] = std::move(fn);
  return *this;
}

std::vector<BufferId> CudaProgram::State::uses(size_t k) const {
  const LoopNode &node = program.nodes()[k];
  std::vector<BufferId> out = node.reads();
  out.insert(out.end(), node.outputs.begin(), node.outputs.end());
  if (kernelsOfNode[k] >= 0)
    for (const CudaKernel &kernel : module.nodes[kernelsOfNode[k]].kernels)
      for (const KernelArg &a : kernel.args)
        if (a.kind == KernelArg::Kind::Buffer)
          out.push_back(a.buffer);
  return out;
}

SymbolValues CudaProgram::State::bind(std::span<const Tensor> inputs, const SymbolValues &given,
                                      std::vector<Tensor> &bound, bool checked) const {
  return ir::loop::bindInputs(program, inputs, given, {kWho, "pass it or an input", true, checked},
                              bound);
}

uint64_t CudaProgram::State::ensure(BufferId id, const SymbolValues &values,
                                    DeviceBuffers &buffers) const {
  uint64_t &a = buffers.addresses[id.index];
  if (!a) {
    const Buffer &b = program.buffer(id);
    a = device->allocate(layoutOf(b, values).bytes(b.meta.dtype));
  }
  return a;
}

void CudaProgram::State::runExtern(const LoopNode &node, const SymbolValues &values,
                                   DeviceBuffers &buffers) const {
  if (const DeviceExternFn *onDevice = findDeviceExtern(node.externOp)) {
    auto view = [&](BufferId id) {
      const Buffer &b = program.buffer(id);
      BufferLayout l = layoutOf(b, values);
      return DeviceTensor{ensure(id, values, buffers), b.meta.dtype, l.sizes, l.strides};
    };
    std::vector<DeviceTensor> ins, outs;
    for (BufferId id : node.externInputs)
      ins.push_back(view(id));
    for (BufferId id : node.outputs)
      outs.push_back(view(id));
    try {
      ir::Attributes bound;
      (*onDevice)(*device, ins, outs, ir::loop::bindAttributes(node.attributes, values, bound));
      return;
    } catch (const DeviceExternDeclined &) {
      // This call's layout or dtypes are not cuBLAS's: the host path below computes it.
    }
  }
  std::vector<Tensor> inputs;
  for (BufferId id : node.externInputs) {
    const Buffer &b = program.buffer(id);
    BufferLayout l = layoutOf(b, values);
    Tensor host = hostTensor(b, l);
    device->copyToHost(host.rawData(), ensure(id, values, buffers), l.bytes(b.meta.dtype));
    inputs.push_back(host);
  }
  std::vector<Tensor> results =
      ir::loop::runExtern(externs, program, node, inputs, values, "cuda program");
  for (size_t n = 0; n < results.size(); ++n) {
    BufferId id = node.outputs[n];
    const Buffer &b = program.buffer(id);
    BufferLayout l = layoutOf(b, values);
    Tensor host = results[n];
    if (!l.matches(host)) {
      host = hostTensor(b, l);
      host.copy_(results[n]);
    }
    device->copyToDevice(ensure(id, values, buffers), host.rawData(), l.bytes(b.meta.dtype));
  }
}

void CudaProgram::State::runKernels(size_t k, const SymbolValues &values, DeviceBuffers &buffers,
                                    uint64_t indexError) const {
  const LoopNode &node = program.nodes()[k];
  const NodeKernels &nk = module.nodes[kernelsOfNode[k]];
  int64_t points = nk.points.evaluate(values);
  KILN_CHECK_KIND(
      Index,
      points <= 0 || node.kind != LoopNodeKind::Reduction ||
          (node.reduction != ReductionKind::ArgMax && node.reduction != ReductionKind::ArgMin) ||
          nk.reducedPoints.evaluate(values) > 0,
      "cuda program: {} over an empty reduction range", reductionKeyword(node.reduction));
  for (const CudaKernel &kernel : nk.kernels)
    for (const KernelArg &a : kernel.args)
      if (a.kind == KernelArg::Kind::Buffer)
        ensure(a.buffer, values, buffers);
  std::vector<KernelLaunch> launches =
      planLaunches(program, nk, values, buffers.addresses, device->limits());
  int64_t workspaceBytes = 0;
  for (const KernelLaunch &l : launches)
    workspaceBytes = std::max(workspaceBytes, l.workspaceBytes);
  // Pass 1 of a split reduction writes the workspace pass 2 reads; both are queued on the same
  // stream, so releasing it after queueing them is safe (the allocator reuses it only there).
  uint64_t workspace = workspaceBytes ? device->allocate(static_cast<size_t>(workspaceBytes)) : 0;
  struct Workspace {
    CudaDevice &device;
    uint64_t address;
    ~Workspace() {
      try {
        if (address)
          device.release(address);
      } catch (const std::exception &) {
        // Unwinding from a failed launch: that error is the one to report.
      }
    }
  } hold{*device, workspace};
  std::vector<uint64_t> args;
  for (const KernelLaunch &l : launches) {
    args.clear();
    for (const KernelArg &a : l.kernel->args)
      switch (a.kind) {
      case KernelArg::Kind::Buffer:
        args.push_back(buffers.addresses[a.buffer.index]);
        break;
      case KernelArg::Kind::Size:
        args.push_back(static_cast<uint64_t>(values.at(a.symbol)));
        break;
      case KernelArg::Kind::Partials:
        args.push_back(workspace);
        break;
      case KernelArg::Kind::Chunks:
        args.push_back(static_cast<uint64_t>(l.chunks));
        break;
      case KernelArg::Kind::IndexError:
        args.push_back(indexError);
        break;
      }
    device->launch(*l.kernel, args, l.grid, l.block);
  }
}

void CudaProgram::State::runNodes(const SymbolValues &values, DeviceBuffers &buffers) const {
  std::span<const LoopNode> nodes = program.nodes();
  // Kernels with indirect loads record an out-of-range position in one zeroed device record,
  // read back (a synchronization) once the program has run.
  bool checks = checksIndices;
  int64_t record[3] = {0, 0, 0};
  struct Record {
    CudaDevice &device;
    uint64_t address;
    ~Record() {
      try {
        if (address)
          device.release(address);
      } catch (const std::exception &) {
        // Unwinding from a failed launch: that error is the one to report.
      }
    }
  } error{*device, checks ? device->allocate(sizeof record) : 0};
  if (checks)
    device->copyToDevice(error.address, record, sizeof record);
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (nodes[k].kind == LoopNodeKind::Extern)
      runExtern(nodes[k], values, buffers);
    else
      runKernels(k, values, buffers, error.address);
    for (BufferId id : uses(k))
      if (lastUse[id.index] == static_cast<int>(k))
        buffers.release(id);
  }
  if (!checks)
    return;
  device->copyToHost(record, error.address, sizeof record);
  if (record[0])
    fail(ErrorKind::Index, "{}", ir::loop::indexOutOfRange(record[1], record[2]));
}

std::vector<Tensor> CudaProgram::run(std::span<const Tensor> hostInputs,
                                     const SymbolValues &symbols, bool checked) const {
  const State &s = *state_;
  std::vector<Tensor> bound(s.program.buffers().size());
  SymbolValues values = s.bind(hostInputs, symbols, bound, checked);
  DeviceBuffers buffers(*s.device, s.program.buffers().size());
  for (BufferId id : s.program.inputs()) {
    const Buffer &b = s.program.buffer(id);
    s.device->copyToDevice(s.ensure(id, values, buffers), bound[id.index].rawData(),
                           layoutOf(b, values).bytes(b.meta.dtype));
  }
  bound.clear();
  s.runNodes(values, buffers);
  std::vector<Tensor> results;
  for (BufferId id : s.program.outputs()) {
    const Buffer &b = s.program.buffer(id);
    BufferLayout l = layoutOf(b, values);
    Tensor host = hostTensor(b, l);
    if (uint64_t a = buffers.addresses[id.index])
      s.device->copyToHost(host.rawData(), a, l.bytes(b.meta.dtype));
    results.push_back(host);
  }
  return results;
}

std::vector<Tensor> CudaProgram::runOnDevice(std::span<const Tensor> inputs, Device device,
                                             const SymbolValues &symbols,
                                             std::span<const Tensor> into, bool checked) const {
  const State &s = *state_;
  KILN_CHECK(device.type == DeviceType::CUDA, "cuda program: results on {}, not a CUDA device",
             device.str());
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(!inputs[i].defined() || inputs[i].isWrappedNumber() || inputs[i].dim() == 0 ||
                   inputs[i].device() == device,
               "cuda program: input {} is on {}, but the program runs on {}", i,
               inputs[i].device().str(), device.str());
  std::span<const BufferId> outputs = s.program.outputs();
  KILN_CHECK_KIND(Value, into.empty() || into.size() == outputs.size(),
                  "cuda program: {} tensors to write results into, for {} outputs", into.size(),
                  outputs.size());
  std::vector<Tensor> bound(s.program.buffers().size());
  SymbolValues values = s.bind(inputs, symbols, bound, checked);
  DeviceBuffers buffers(*s.device, s.program.buffers().size());
  for (BufferId id : s.program.inputs()) {
    Tensor t = bound[id.index];
    if (!t.isCpu()) {
      buffers.borrow(id, std::move(t));
      continue;
    }
    // A 0-d host tensor for a scalar input: uploaded like run() does.
    const Buffer &b = s.program.buffer(id);
    s.device->copyToDevice(s.ensure(id, values, buffers), t.rawData(),
                           layoutOf(b, values).bytes(b.meta.dtype));
  }
  for (size_t n = 0; n < outputs.size(); ++n) {
    BufferId id = outputs[n];
    if (buffers.addresses[id.index])
      continue; // an input, or an output listed twice
    const Buffer &b = s.program.buffer(id);
    BufferLayout l = layoutOf(b, values);
    Tensor t;
    if (into.empty()) {
      t = Tensor::empty({l.extent}, b.meta.dtype, device).asStrided(l.sizes, l.strides, 0);
    } else {
      t = into[n];
      KILN_CHECK_KIND(
          Value, t.defined() && t.device() == device && t.dtype() == b.meta.dtype && l.matches(t),
          "cuda program: the tensor for output {} must be {} on {}", n, printType(b.meta),
          device.str());
    }
    buffers.borrow(id, std::move(t));
  }
  bound.clear();
  s.runNodes(values, buffers);
  std::vector<Tensor> results;
  for (BufferId id : outputs)
    results.push_back(buffers.borrowed[id.index]);
  return results;
}

CudaProgram compileCudaProgram(const LoopProgram &program, int deviceIndex,
                               CudaCompileOptions options) {
  std::string reason;
  const Driver *driver = Driver::get(&reason);
  KILN_CHECK(driver, "kiln: CUDA is not available: {}", reason);
  options.arch = driver->device(deviceIndex).smVersion();
  CudaModule module = emitCuda(program);
  CompiledCuda code = compileCuda(module.source, options);
  std::shared_ptr<CudaDevice> device = openDriverDevice(deviceIndex, code);
  return CudaProgram(program, std::move(module), std::move(device));
}

} // namespace kiln::codegen::cuda
