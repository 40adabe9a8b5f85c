// A scheduled loop program on a CUDA device: binding, the memory plan's arena, the module's steps
// launched as planLaunches/planFused say, externs on cuBLAS or the host's eager kernels.

#include "codegen/cuda/cuda_program.h"

#include "codegen/cuda/device_externs.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/launch_plan.h"
#include "ir/loop/binding.h"
#include "passes/schedule/schedule.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
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

/// The device addresses of one call's buffers, by buffer id (0: no memory). What ensure()
/// allocated is released on every exit; a borrowed buffer is a tensor's memory (a device input or
/// result) and an intermediate points into the call's arena.
struct DeviceBuffers {
  CudaDevice &device;
  std::vector<uint64_t> addresses;
  std::vector<bool> owned;      ///< by buffer id: allocated for this call alone
  std::vector<Tensor> borrowed; ///< by buffer id: the tensor whose memory the buffer is

  DeviceBuffers(CudaDevice &d, size_t n) : device(d), addresses(n, 0), owned(n), borrowed(n) {}
  ~DeviceBuffers() {
    for (size_t i = 0; i < addresses.size(); ++i)
      if (owned[i]) {
        try {
          device.release(addresses[i]);
        } catch (const std::exception &) {
          // Unwinding from another error: that one is the one to report.
        }
      }
  }
  DeviceBuffers(const DeviceBuffers &) = delete;
  DeviceBuffers &operator=(const DeviceBuffers &) = delete;

  /// Makes buffer `id` the memory of `t` (a tensor on the device).
  void borrow(BufferId id, Tensor t) {
    addresses[id.index] = reinterpret_cast<uint64_t>(t.address());
    borrowed[id.index] = std::move(t);
  }
};

} // namespace

struct CudaProgram::State {
  LoopProgram program;
  std::vector<passes::schedule::BufferPlan> plan; ///< per buffer
  std::vector<passes::schedule::MemorySlot> slots;
  CudaModule module;
  std::shared_ptr<CudaDevice> device;
  codegen::ExternTable externs = codegen::eagerExterns();
  /// Whether a kernel takes the index-error record (it has indirect loads).
  bool checksIndices = false;

  SymbolValues bind(std::span<const Tensor> inputs, const SymbolValues &given,
                    std::vector<Tensor> &bound, bool checked) const;
  uint64_t ensure(BufferId id, const SymbolValues &values, DeviceBuffers &buffers) const;
  mutable std::mutex layoutMutex;
  mutable std::vector<size_t> lastBytes, lastOffsets; ///< the last layout: slot bytes, offsets
  mutable size_t lastNeed = 0;

  /// Each slot's offset in the arena for `values`; sets `need` to the arena's bytes.
  std::vector<size_t> layOut(const SymbolValues &values, size_t &need) const;
  /// Allocates the call's arena and points every buffer with a slot into it.
  uint64_t placeIntermediates(const SymbolValues &values, DeviceBuffers &buffers) const;
  void runExtern(const LoopNode &node, const SymbolValues &values, DeviceBuffers &buffers) const;
  /// `indexError`: the device address of the run's index-error record (0 when no kernel takes
  /// one).
  void runKernels(const NodeKernels &nk, const SymbolValues &values, DeviceBuffers &buffers,
                  uint64_t indexError) const;
  void runFused(const FusedKernel &fused, const SymbolValues &values, const DeviceBuffers &buffers,
                uint64_t indexError) const;
  void runSteps(const SymbolValues &values, DeviceBuffers &buffers) const;
};

CudaProgram::CudaProgram(passes::schedule::Schedule schedule, CudaModule module,
                         std::shared_ptr<CudaDevice> device)
    : state_(std::make_unique<State>()) {
  KILN_CHECK(device, "cuda program: no device");
  State &s = *state_;
  s.program = std::move(schedule.program);
  s.plan = std::move(schedule.buffers);
  s.slots = std::move(schedule.slots);
  s.module = std::move(module);
  s.device = std::move(device);
  size_t numNodes = s.program.nodes().size();
  std::vector<bool> covered(numNodes, false);
  auto cover = [&](size_t node) {
    KILN_CHECK(node < numNodes && !covered[node],
               "cuda program: the module's steps do not match the program (node {})", node);
    covered[node] = true;
  };
  for (const CudaStep &step : s.module.steps) {
    if (step.kind == CudaStep::Kind::Extern) {
      cover(step.index);
      KILN_CHECK(s.program.nodes()[step.index].kind == LoopNodeKind::Extern,
                 "cuda program: node {} is not an extern", step.index);
    } else if (step.kind == CudaStep::Kind::Node) {
      cover(s.module.nodes.at(step.index).node);
    } else {
      for (const FusedMember &m : s.module.fused.at(step.index).members)
        for (size_t n : m.nodes)
          cover(n);
    }
  }
  for (size_t k = 0; k < numNodes; ++k)
    KILN_CHECK(covered[k], "cuda program: the module does not run node {}", k);
  for (const CudaKernel *kernel : s.module.kernels())
    for (const KernelArg &a : kernel->args) {
      s.checksIndices = s.checksIndices || a.kind == KernelArg::Kind::IndexError;
      KILN_CHECK(a.kind != KernelArg::Kind::Buffer ||
                     s.plan.at(a.buffer.index).kind != passes::schedule::StorageKind::Local,
                 "cuda program: {} takes {}, which the memory plan keeps out of memory",
                 kernel->name, bufferName(a.buffer));
    }
}

CudaProgram::CudaProgram(CudaProgram &&) noexcept = default;
CudaProgram &CudaProgram::operator=(CudaProgram &&) noexcept = default;
CudaProgram::~CudaProgram() = default;

const LoopProgram &CudaProgram::program() const { return state_->program; }

size_t CudaProgram::arenaBytes(const SymbolValues &values) const {
  size_t need = 0;
  state_->layOut(values, need);
  return need;
}
const CudaModule &CudaProgram::module() const { return state_->module; }
CudaDevice &CudaProgram::device() const { return *state_->device; }

CudaProgram &CudaProgram::registerExtern(const std::string &op, codegen::ExternFn fn) {
  state_->externs[op] = std::move(fn);
  return *this;
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
    buffers.owned[id.index] = true;
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
    if (plan[id.index].kind == passes::schedule::StorageKind::Local)
      continue; // never read
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

namespace {

/// Refuses an argmax/argmin over an empty range that has outputs (the interpreter's error).
void checkReducible(const LoopNode &node, const SymbolValues &values) {
  if (node.kind != LoopNodeKind::Reduction ||
      (node.reduction != ReductionKind::ArgMax && node.reduction != ReductionKind::ArgMin))
    return;
  auto product = [&](const std::vector<SymInt> &v) {
    int64_t p = 1;
    for (const SymInt &x : v)
      p *= x.evaluate(values);
    return p;
  };
  KILN_CHECK_KIND(Index, product(node.ranges) <= 0 || product(node.reductionRanges) > 0,
                  "cuda program: {} over an empty reduction range",
                  reductionKeyword(node.reduction));
}

/// Device memory of one call released when the call ends, however it ends.
struct Scratch {
  CudaDevice &device;
  uint64_t address = 0;
  ~Scratch() {
    try {
      if (address)
        device.release(address);
    } catch (const std::exception &) {
      // Unwinding from a failed launch: that error is the one to report.
    }
  }
};

/// Bytes each slot of the device arena is rounded up to (the alignment 128-bit accesses need,
/// and then some).
constexpr size_t kSlotAlign = 256;

} // namespace

std::vector<size_t> CudaProgram::State::layOut(const SymbolValues &values, size_t &need) const {
  std::vector<size_t> bytes(slots.size(), 0);
  for (size_t b = 0; b < plan.size(); ++b)
    if (plan[b].kind == passes::schedule::StorageKind::Allocated) {
      const Buffer &buffer = program.buffers()[b];
      size_t n = layoutOf(buffer, values).bytes(buffer.meta.dtype);
      size_t &size = bytes[plan[b].slot];
      size = std::max(size, (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign);
    }
  // Placing is quadratic in the slots; calls with the sizes of the last one reuse its layout.
  std::lock_guard<std::mutex> lock(layoutMutex);
  if (bytes != lastBytes) {
    lastOffsets = passes::schedule::placeSlots(slots, bytes, true, lastNeed);
    lastBytes = std::move(bytes);
  }
  need = lastNeed;
  return lastOffsets;
}

uint64_t CudaProgram::State::placeIntermediates(const SymbolValues &values,
                                                DeviceBuffers &buffers) const {
  size_t need = 0;
  std::vector<size_t> offsets = layOut(values, need);
  uint64_t arena = need ? device->allocate(need) : 0;
  for (size_t b = 0; b < plan.size(); ++b)
    if (plan[b].kind == passes::schedule::StorageKind::Allocated)
      buffers.addresses[b] = arena + offsets[plan[b].slot];
  return arena;
}

void CudaProgram::State::runKernels(const NodeKernels &nk, const SymbolValues &values,
                                    DeviceBuffers &buffers, uint64_t indexError) const {
  checkReducible(program.nodes()[nk.node], values);
  std::vector<KernelLaunch> launches =
      planLaunches(program, nk, values, buffers.addresses, device->limits());
  int64_t workspaceBytes = 0;
  for (const KernelLaunch &l : launches)
    workspaceBytes = std::max(workspaceBytes, l.workspaceBytes);
  // Pass 1 of a split reduction writes the workspace pass 2 reads; both are queued on the same
  // stream, so releasing it after queueing them is safe (the allocator reuses it only there).
  Scratch workspace{*device,
                    workspaceBytes ? device->allocate(static_cast<size_t>(workspaceBytes)) : 0};
  for (const KernelLaunch &l : launches)
    device->launch(*l.kernel,
                   launchArguments(l, values, buffers.addresses, workspace.address, indexError),
                   l.grid, l.block);
}

void CudaProgram::State::runFused(const FusedKernel &fused, const SymbolValues &values,
                                  const DeviceBuffers &buffers, uint64_t indexError) const {
  for (const FusedMember &m : fused.members)
    for (size_t n : m.nodes)
      checkReducible(program.nodes()[n], values);
  KernelLaunch l = planFused(fused, values, device->limits());
  if (l.grid > 0)
    device->launch(fused.kernel, launchArguments(l, values, buffers.addresses, 0, indexError),
                   l.grid, l.block);
}

void CudaProgram::State::runSteps(const SymbolValues &values, DeviceBuffers &buffers) const {
  // Intermediates live in one arena laid out by the schedule's memory plan; it is released
  // after the last launch is queued (the allocator reuses it only on the same stream).
  Scratch arena{*device, placeIntermediates(values, buffers)};
  // Kernels with indirect loads record an out-of-range position in one zeroed device record,
  // read back (a synchronization) once the program has run.
  int64_t record[3] = {0, 0, 0};
  Scratch error{*device, checksIndices ? device->allocate(sizeof record) : 0};
  if (checksIndices)
    device->copyToDevice(error.address, record, sizeof record);
  for (const CudaStep &step : module.steps)
    switch (step.kind) {
    case CudaStep::Kind::Extern:
      runExtern(program.nodes()[step.index], values, buffers);
      break;
    case CudaStep::Kind::Node:
      runKernels(module.nodes[step.index], values, buffers, error.address);
      break;
    case CudaStep::Kind::Fused:
      runFused(module.fused[step.index], values, buffers, error.address);
      break;
    }
  if (!checksIndices)
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
  for (BufferId id : s.program.outputs())
    s.ensure(id, values, buffers);
  s.runSteps(values, buffers);
  std::vector<Tensor> results;
  for (BufferId id : s.program.outputs()) {
    const Buffer &b = s.program.buffer(id);
    BufferLayout l = layoutOf(b, values);
    Tensor host = hostTensor(b, l);
    s.device->copyToHost(host.rawData(), buffers.addresses[id.index], l.bytes(b.meta.dtype));
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
  s.runSteps(values, buffers);
  std::vector<Tensor> results;
  for (BufferId id : outputs)
    results.push_back(buffers.borrowed[id.index]);
  return results;
}

CudaProgram compileCudaProgram(const passes::schedule::Schedule &schedule, int deviceIndex,
                               CudaCompileOptions options) {
  std::string reason;
  const Driver *driver = Driver::get(&reason);
  KILN_CHECK(driver, "kiln: CUDA is not available: {}", reason);
  options.arch = driver->device(deviceIndex).smVersion();
  CudaModule module = emitCuda(schedule);
  CompiledCuda code = compileCuda(module.source, options);
  std::shared_ptr<CudaDevice> device = openDriverDevice(deviceIndex, code);
  return CudaProgram(schedule, std::move(module), std::move(device));
}

} // namespace kiln::codegen::cuda
