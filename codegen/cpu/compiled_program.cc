// A compiled loop program: binding, the run-time memory plan and its arenas, kernels launched in
// node order, externs through kiln's eager ops.

#include "codegen/cpu/compiled_program.h"

#include "codegen/cpu/kernel_profile.h"
#include "codegen/cpu/launch.h"
#include "codegen/externs.h"
#include "ir/loop/binding.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

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

/// Bytes every slot is rounded up to, so each buffer starts on a cache line.
constexpr size_t kSlotAlign = 64;
/// Arenas kept for later calls; more concurrent calls than this allocate and free their own.
constexpr size_t kMaxPooledArenas = 8;

size_t alignUp(size_t n) { return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

/// One call's memory for intermediates, and where its slots went for the sizes it last served
/// (a call with the same slot sizes reuses the offsets).
struct Arena {
  std::shared_ptr<Storage> storage;
  std::vector<size_t> sizes, offsets;
  size_t need = 0;
};

} // namespace

struct CompiledProgram::State {
  LoopProgram program;
  EmittedModule module;
  std::shared_ptr<const void> codeOwner; ///< keeps the kernels' code loaded
  CompileDumps dumps;
  std::vector<KernelFn> kernels; ///< parallel to module.kernels
  std::vector<int> kernelOfNode; ///< node → index into kernels, -1 for externs
  ExternTable externs = codegen::eagerExterns();
  double seconds = 0;
  /// Per node: the nodes whose code runs inside its function (KernelInfo::fusedInto).
  std::vector<std::vector<size_t>> members;

  /// The schedule's kernels (units of the memory plan) and the plan ([Note: memory plan] in
  /// passes/schedule/schedule.h); per buffer its slot (-1: none).
  std::vector<std::vector<size_t>> units;
  std::vector<int> unitOf; ///< per node
  /// Per node: the first kernel of its launch ([Note: launches]); kernels of one launch may run
  /// at the same time.
  std::vector<size_t> launchOf;
  std::vector<int> slotOf;
  std::vector<BufferId> slotted; ///< buffers with an arena slot, in id order
  /// Per buffer in an external slot: its predecessor there (whose memory it overwrites in
  /// place), or an invalid id for the extern's result itself.
  std::vector<BufferId> overwrites;
  /// Per node: the buffers of external slots whose memory goes after it (its unit's end).
  std::vector<std::vector<BufferId>> freeAfter;
  std::vector<MemorySlot> slots;

  mutable std::mutex poolMutex;
  mutable std::vector<Arena> pool;

  /// A call's arena: taken from the pool (or new) and handed back when the call ends, however
  /// it ends.
  class Lease {
  public:
    explicit Lease(const State &s) : s_(s) {
      std::lock_guard<std::mutex> lock(s.poolMutex);
      if (!s.pool.empty()) {
        arena_ = std::move(s.pool.back());
        s.pool.pop_back();
      }
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(s_.poolMutex);
      if (s_.pool.size() < kMaxPooledArenas)
        s_.pool.push_back(std::move(arena_));
    }
    Lease(const Lease &) = delete;
    Lease &operator=(const Lease &) = delete;
    Arena &get() { return arena_; }

  private:
    const State &s_;
    Arena arena_;
  };

  void adoptPlan(const passes::schedule::Schedule &schedule);
  /// Lays the slots out for `values` in `arena` (growing it if needed); returns the layout of
  /// every slotted buffer, parallel to `slotted`.
  std::vector<BufferLayout> layOut(const SymbolValues &values, Arena &arena) const;
  /// Places the inputs in `tensors` and returns every symbol's value: `given` itself when the
  /// caller checked the inputs, else the binding made in `own`.
  const SymbolValues &bind(std::span<const Tensor> inputs, const SymbolValues &given,
                           std::vector<Tensor> &tensors, bool checked, SymbolValues &own) const;
  std::vector<Tensor> run(std::span<const Tensor> inputs, const SymbolValues &symbols,
                          std::span<const Tensor> into, bool checked) const;
  void runExtern(const LoopNode &node, const SymbolValues &values, const Arena &arena,
                 std::vector<Tensor> &tensors) const;
  void runKernel(size_t node, const SymbolValues &values, std::vector<Tensor> &tensors) const;
  int64_t pointsOf(size_t node, const SymbolValues &values) const;
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

CompiledProgram CompiledProgram::fromKernels(const passes::schedule::Schedule &schedule,
                                             EmittedModule module, std::vector<KernelFn> kernels,
                                             std::shared_ptr<const void> codeOwner, double seconds,
                                             CompileDumps dumps) {
  KILN_CHECK(kernels.size() == module.kernels.size(),
             "compiled program: {} kernels for a module of {}", kernels.size(),
             module.kernels.size());
  CompiledProgram compiled;
  CompiledProgram::State &s = *compiled.state_;
  s.program = schedule.program;
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
  s.adoptPlan(schedule);
  return compiled;
}

const std::vector<CompiledProgram::MemorySlot> &CompiledProgram::memorySlots() const {
  return state_->slots;
}

size_t CompiledProgram::arenaBytes(const SymbolValues &values) const {
  Arena arena; // only laid out, never allocated
  state_->layOut(values, arena);
  return arena.need;
}

CompiledProgram::ArenaStats CompiledProgram::arenaStats() const {
  std::lock_guard<std::mutex> lock(state_->poolMutex);
  ArenaStats stats;
  for (const Arena &a : state_->pool)
    if (a.storage) {
      ++stats.arenas;
      stats.bytes += a.storage->nbytes();
    }
  return stats;
}

void CompiledProgram::State::adoptPlan(const passes::schedule::Schedule &schedule) {
  using passes::schedule::StorageKind;
  std::span<const LoopNode> nodes = program.nodes();
  size_t numBuffers = program.buffers().size();
  units.clear();
  unitOf.assign(nodes.size(), -1);
  launchOf.assign(nodes.size(), 0);
  std::vector<size_t> launches = passes::schedule::launchStarts(schedule.kernels);
  for (const passes::schedule::Kernel &kernel : schedule.kernels) {
    units.push_back(kernel.nodes);
    for (size_t n : kernel.nodes) {
      unitOf[n] = static_cast<int>(units.size()) - 1;
      launchOf[n] = launches[units.size() - 1];
    }
  }
  slots = schedule.slots;
  slotOf.assign(numBuffers, -1);
  for (size_t b = 0; b < numBuffers; ++b)
    if (schedule.buffers[b].kind == StorageKind::Allocated)
      slotOf[b] = schedule.buffers[b].slot;
  // Every buffer a kernel function takes is an input, an output or has a slot; the emitter
  // follows the same plan, so a miss is a bug there.
  for (const KernelInfo &info : module.kernels)
    for (BufferId id : info.buffers)
      KILN_CHECK(program.buffer(id).kind != BufferKind::Intermediate || slotOf[id.index] >= 0,
                 "compiled program: {} is passed to {} but has no memory in the plan",
                 bufferName(id), info.name);
  slotted.clear();
  overwrites.assign(numBuffers, BufferId{});
  freeAfter.assign(nodes.size(), {});
  for (size_t b = 0; b < numBuffers; ++b)
    if (slotOf[b] >= 0 && !slots[slotOf[b]].external)
      slotted.push_back(BufferId{static_cast<int>(b)});
  for (const MemorySlot &ms : slots) {
    if (!ms.external)
      continue;
    for (size_t t = 1; t < ms.buffers.size(); ++t)
      overwrites[ms.buffers[t].index] = ms.buffers[t - 1];
    std::vector<BufferId> &after = freeAfter[units[ms.lifetimes.back().second].back()];
    after.insert(after.end(), ms.buffers.begin(), ms.buffers.end());
  }
}

std::vector<BufferLayout> CompiledProgram::State::layOut(const SymbolValues &values,
                                                         Arena &arena) const {
  std::vector<BufferLayout> layouts;
  std::vector<size_t> sizes(slots.size(), 0);
  for (BufferId id : slotted) {
    const Buffer &b = program.buffer(id);
    layouts.push_back(layoutOf(b, values, "compiled program"));
    size_t &size = sizes[slotOf[id.index]];
    size = std::max(size, alignUp(layouts.back().bytes(b.meta.dtype)));
  }
  if (sizes != arena.sizes || arena.offsets.size() != sizes.size()) {
    arena.offsets = passes::schedule::placeSlots(slots, sizes, false, arena.need);
    arena.sizes = std::move(sizes);
  }
  return layouts;
}

const SymbolValues &CompiledProgram::State::bind(std::span<const Tensor> inputs,
                                                 const SymbolValues &given,
                                                 std::vector<Tensor> &tensors, bool checked,
                                                 SymbolValues &own) const {
  if (checked) { // the caller's binding as it is: no copy per call
    KILN_CHECK_KIND(Value, inputs.size() == program.inputs().size(),
                    "compiled program: the program takes {} inputs, got {}",
                    program.inputs().size(), inputs.size());
    placeInputs(program, inputs, true, tensors);
    return given;
  }
  own = bindInputs(program, inputs, given, {"compiled program", "pass it or an input", true, false},
                   tensors);
  return own;
}

void CompiledProgram::State::runExtern(const LoopNode &node, const SymbolValues &values,
                                       const Arena &arena, std::vector<Tensor> &tensors) const {
  std::vector<Tensor> inputs;
  for (BufferId id : node.externInputs)
    inputs.push_back(tensors[id.index]);
  std::vector<Tensor> results =
      ir::loop::runExtern(externs, program, node, inputs, values, "compiled program");
  for (size_t n = 0; n < results.size(); ++n) {
    BufferId id = node.outputs[n];
    const Buffer &b = program.buffer(id);
    Tensor &out = tensors[id.index];
    if (b.kind == BufferKind::Intermediate && slotOf[id.index] < 0)
      continue; // never read
    // Adopt the result when its layout is the buffer's (kernels read it through the buffer's
    // strides) and, where a kernel may overwrite it in place, nothing else holds it (not a
    // view of an input or of the arena); otherwise copy it into a fresh tensor.
    const Tensor &r = results[n];
    Shape strides = out.defined() ? out.strides() : evaluateAll(b.meta.strides, values);
    bool alone = r.implPtr().use_count() == 1 && r.storage().use_count() == 1;
    if (r.strides() == strides && r.storage() != arena.storage &&
        (alone || b.kind != BufferKind::Intermediate)) {
      out = r;
    } else {
      if (!out.defined())
        out = allocateBuffer(b, values, "compiled program");
      out.copy_(results[n]);
    }
  }
}

/// The points node `k` computes (its range points times its reduced points), or 0 when a range
/// is empty; throws for an argmax/argmin over an empty range.
int64_t CompiledProgram::State::pointsOf(size_t k, const SymbolValues &values) const {
  const LoopNode &node = program.nodes()[k];
  int64_t points = product(node.ranges, values);
  int64_t reduced = product(node.reductionRanges, values);
  if (points <= 0)
    return 0;
  KILN_CHECK_KIND(
      Index,
      reduced > 0 ||
          (node.reduction != ReductionKind::ArgMax && node.reduction != ReductionKind::ArgMin) ||
          node.kind != LoopNodeKind::Reduction,
      "compiled program: {} over an empty reduction range", reductionKeyword(node.reduction));
  return points * std::max<int64_t>(1, reduced);
}

void CompiledProgram::State::runKernel(size_t k, const SymbolValues &values,
                                       std::vector<Tensor> &tensors) const {
  const KernelInfo &info = module.kernels[kernelOfNode[k]];
  // The launch range: this node's rows, then each later kernel's of its launch; the grain is
  // the work of all nodes that run in the function (those fused into it) per row, on average
  // over the launch's kernels (a launch of rows of unequal work splits by rows, not by work).
  auto rowsOf = [&](size_t node, size_t parallel) {
    return product(std::span(program.nodes()[node].ranges).first(parallel), values);
  };
  int64_t rows = rowsOf(k, info.parallelLoops);
  for (size_t head : info.laterRuns)
    rows += rowsOf(head, module.kernels[kernelOfNode[head]].parallelLoops);
  int64_t work = pointsOf(k, values);
  for (size_t member : members[k])
    work += pointsOf(member, values);
  if (rows <= 0 || work == 0)
    return;
  std::vector<void *> args;
  for (BufferId id : info.buffers)
    args.push_back(tensors[id.index].rawData());
  for (const std::string &s : info.symbols)
    args.push_back(packSize(values.at(s)));
  int64_t indexError[kIndexErrorSlots] = {0, 0, 0};
  if (info.checksIndices)
    args.push_back(indexError);
  launch(kernels[kernelOfNode[k]], args.data(), rows, grainFor((work + rows - 1) / rows));
  if (indexError[0])
    fail(ErrorKind::Index, "{}", ir::loop::indexOutOfRange(indexError[1], indexError[2]));
}

bool CompiledProgram::canComputeInPlace(size_t output, size_t input) const {
  const State &s = *state_;
  const LoopProgram &p = s.program;
  if (output >= p.outputs().size() || input >= p.inputs().size())
    return false;
  BufferId out = p.outputs()[output], in = p.inputs()[input];
  std::span<const LoopNode> nodes = p.nodes();
  std::optional<size_t> producer;
  for (size_t k = 0; k < nodes.size(); ++k)
    for (BufferId id : nodes[k].outputs)
      if (id == out)
        producer = k;
  if (!producer || nodes[*producer].kind != LoopNodeKind::Pointwise)
    return false;
  // A kernel that checks gather indices may fail after the argument was overwritten; the
  // caller then reruns eagerly for the error, which needs the argument as it was.
  for (const KernelInfo &info : s.module.kernels)
    if (info.checksIndices)
      return false;
  size_t k = *producer;
  const ir::TensorMeta &a = p.buffer(in).meta, &b = p.buffer(out).meta;
  if (a.sizes != nodes[k].ranges || a.sizes != b.sizes || a.strides != b.strides ||
      a.dtype != b.dtype)
    return false;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (n == k)
      continue;
    std::vector<BufferId> reads = nodes[n].reads();
    if (std::find(reads.begin(), reads.end(), in) == reads.end())
      continue;
    if (s.launchOf[n] >= s.launchOf[k]) // read in the same launch or after it
      return false;
  }
  for (size_t n : s.units[s.unitOf[k]]) // rows of a fused run see earlier nodes' results
    if (n != k && nodes[n].kind == LoopNodeKind::Reduction)
      return false;
  IndexExpr self = flatIndex(nodes[k].varRanges().vars(), a.strides);
  for (const Expr *e : nodes[k].body->exprs())
    if (e->isLoad() && e->buffer == in && (e->kind != ExprKind::Load || !(e->index == self)))
      return false;
  return true;
}

std::vector<Tensor> CompiledProgram::run(std::span<const Tensor> inputs,
                                         const SymbolValues &symbols) const {
  return run(inputs, symbols, {});
}

std::vector<Tensor> CompiledProgram::run(std::span<const Tensor> inputs,
                                         const SymbolValues &symbols,
                                         std::span<const Tensor> into) const {
  return state_->run(inputs, symbols, into, false);
}

std::vector<Tensor> CompiledProgram::runChecked(std::span<const Tensor> inputs,
                                                const SymbolValues &values,
                                                std::span<const Tensor> into) const {
  return state_->run(inputs, values, into, true);
}

std::vector<Tensor> CompiledProgram::State::run(std::span<const Tensor> inputs,
                                                const SymbolValues &symbols,
                                                std::span<const Tensor> into, bool checked) const {
  const State &s = *this;
  State::Lease lease(s); // declared first: the arena goes back after every view of it is gone
  Arena &arena = lease.get();
  std::vector<Tensor> tensors(s.program.buffers().size());
  SymbolValues own;
  const SymbolValues &values = s.bind(inputs, symbols, tensors, checked, own);
  std::vector<BufferLayout> layouts = s.layOut(values, arena);
  if (arena.need > 0 && (!arena.storage || arena.storage->nbytes() < arena.need)) {
    arena.storage.reset(); // the old arena goes before the new one is allocated
    arena.storage = Storage::allocate(arena.need);
  }
  if (!arena.storage && !s.slotted.empty()) // buffers of no element still need a storage
    arena.storage = Storage::allocate(0);
  for (size_t k = 0; k < s.slotted.size(); ++k) {
    BufferId id = s.slotted[k];
    DType dtype = s.program.buffer(id).meta.dtype;
    size_t offset = arena.offsets[s.slotOf[id.index]];
    tensors[id.index] =
        Tensor::fromStorage(arena.storage, dtype, layouts[k].sizes, layouts[k].strides,
                            static_cast<int64_t>(offset / itemsize(dtype)));
  }
  for (size_t k = 0; k < into.size() && k < s.program.outputs().size(); ++k) {
    BufferId id = s.program.outputs()[k];
    const Buffer &b = s.program.buffer(id);
    if (into[k].defined() && !tensors[id.index].defined() && into[k].dtype() == b.meta.dtype &&
        into[k].sizes() == evaluateAll(b.meta.sizes, values) &&
        into[k].strides() == evaluateAll(b.meta.strides, values))
      tensors[id.index] = into[k];
  }
  std::span<const LoopNode> nodes = s.program.nodes();
  KernelProfile *profile = KernelProfile::active();
  for (size_t k = 0; k < nodes.size(); ++k) {
    ScopedNodeTimer timer(profile, s.program, k);
    if (nodes[k].kind == LoopNodeKind::Extern) {
      s.runExtern(nodes[k], values, arena, tensors);
    } else if (s.module.kernels[s.kernelOfNode[k]].fusedInto) {
      // Its code ran inside an earlier node's function; its function does nothing.
    } else {
      for (BufferId id : s.module.kernels[s.kernelOfNode[k]].buffers) {
        Tensor &t = tensors[id.index];
        if (t.defined())
          continue;
        if (BufferId old = s.overwrites[id.index]; old.valid()) { // in place over an extern's
          const Tensor &o = tensors[old.index];                   // result: same layout
          t = Tensor::fromStorage(o.storage(), s.program.buffer(id).meta.dtype, o.sizes(),
                                  o.strides(), o.storageOffset());
        } else { // a program output: fresh memory
          t = allocateBuffer(s.program.buffer(id), values, "compiled program");
        }
      }
      s.runKernel(k, values, tensors);
    }
    for (BufferId id : s.freeAfter[k]) // an extern's result, after its last reader
      tensors[id.index] = Tensor();
  }
  std::vector<Tensor> results;
  for (BufferId id : s.program.outputs()) {
    if (!tensors[id.index].defined())
      tensors[id.index] = allocateBuffer(s.program.buffer(id), values, "compiled program");
    results.push_back(tensors[id.index]);
  }
  return results;
}

} // namespace kiln::codegen::cpu
