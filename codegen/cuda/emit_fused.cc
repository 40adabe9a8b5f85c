// The kernels of one launch of the schedule as one CUDA kernel: its members' units laid end to
// end, blocks grid-striding over them (see [Note: CUDA launches] in emit.h).

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "runtime/error.h"

#include <algorithm>

namespace kiln::codegen::cuda::detail {

using namespace ir::loop;
using passes::schedule::Kernel;
using passes::schedule::onePointPerShared;

namespace {

std::vector<std::string> rangeVars(size_t from, size_t to) {
  std::vector<std::string> vars;
  for (size_t j = from; j < to; ++j)
    vars.push_back(loopVarName(j));
  return vars;
}

std::vector<std::string> reductionVars(const LoopNode &node) {
  std::vector<std::string> vars;
  for (size_t j = 0; j < node.reductionRanges.size(); ++j)
    vars.push_back(reductionVarName(j));
  return vars;
}

/// Whether `node` does more than one point per point of the first `shared` loops.
bool hasInnerWork(const LoopNode &node, size_t shared) {
  if (node.kind == LoopNodeKind::Reduction)
    return true;
  for (size_t d = shared; d < node.ranges.size(); ++d)
    if (node.ranges[d].constant() != 1)
      return true;
  return false;
}

/// Writes one member: the code that runs unit `unit` of one schedule kernel.
class MemberWriter {
public:
  MemberWriter(const LaunchContext &ctx, const Kernel &kernel, Writer &w)
      : ctx_(ctx), program_(ctx.schedule->program), kernel_(kernel), w_(w),
        shared_(kernel.outer.size()) {
    for (size_t n : kernel.nodes)
      rows_ = rows_ || hasInnerWork(program_.nodes()[n], shared_);
  }

  FusedMember describe() const {
    FusedMember m;
    m.nodes = kernel_.nodes;
    m.rows = rows_;
    m.points = product(kernel_.outer);
    for (size_t n : kernel_.nodes) {
      const LoopNode &node = program_.nodes()[n];
      m.work.push_back(
          node.kind == LoopNodeKind::Reduction
              ? product(node.reductionRanges)
              : product(std::vector<SymInt>(node.ranges.begin() + shared_, node.ranges.end())));
    }
    return m;
  }

  /// `const long long units<k> = ...;`: how many units the member has.
  std::string units(const Names &sizes) const {
    std::string points = indexExpr(product(kernel_.outer), sizes);
    return rows_ ? points : fmt::format("(({}) + blockDim.x - 1) / blockDim.x", points);
  }

  /// The member's code for unit `unit` (a C expression), with `names` the size names.
  void emit(const std::string &unit, Names names) {
    std::vector<std::string> vars = rangeVars(0, shared_);
    if (rows_) {
      decompose(w_, unit, vars, kernel_.outer, names);
    } else {
      w_.emit("const long long p = {} * blockDim.x + threadIdx.x;", unit);
      w_.open("if (p < " + indexExpr(product(kernel_.outer), names) + ")");
      decompose(w_, "p", vars, kernel_.outer, names);
    }
    for (const std::string &v : vars)
      names[v] = v;
    declareRegisters();
    for (size_t j = 0; j < kernel_.nodes.size(); ++j) {
      const LoopNode &node = program_.nodes()[kernel_.nodes[j]];
      w_.open("");
      if (node.kind == LoopNodeKind::Reduction)
        reduction(node, names);
      else
        pointwise(node, names);
      w_.close();
      if (rows_ && readLater(node, j))
        w_.line("__syncthreads();");
    }
    if (!rows_)
      w_.close();
  }

private:
  /// Whether `n`'s output is held in a register: a local buffer of one value per shared point
  /// (a local buffer of more values is one nobody reads).
  bool inRegister(const LoopNode &node, BufferId out) const {
    if (!ctx_.locals.count(out) || !onePointPerShared(node, shared_))
      return false;
    for (size_t n : kernel_.nodes)
      for (BufferId id : program_.nodes()[n].reads())
        if (id == out)
          return true;
    return false; // a result nobody reads (a Welford count)
  }
  bool stored(BufferId out) const { return !ctx_.locals.count(out); }

  void declareRegisters() {
    for (size_t n : kernel_.nodes) {
      const LoopNode &node = program_.nodes()[n];
      for (BufferId out : node.outputs)
        if (inRegister(node, out)) {
          std::string name = "l_" + bufferName(out);
          w_.emit("{} {}{{}};", computeType(program_.buffer(out).meta.dtype), name);
          registers_[out] = name;
        }
    }
  }

  /// Whether a node after the `j`-th reads a buffer that node stores.
  bool readLater(const LoopNode &node, size_t j) const {
    for (size_t k = j + 1; k < kernel_.nodes.size(); ++k)
      for (BufferId id : program_.nodes()[kernel_.nodes[k]].reads())
        for (BufferId out : node.outputs)
          if (id == out && stored(out))
            return true;
    return false;
  }

  /// The inner loop variables of `node`, all at 0 (its extents there are 1).
  void zeroInner(const LoopNode &node, Names &names) {
    for (const std::string &v : rangeVars(shared_, node.ranges.size())) {
      w_.emit("[[maybe_unused]] const long long {} = 0;", v);
      names[v] = v;
    }
  }

  std::string storeAt(const LoopNode &node, BufferId out, const Names &names) const {
    std::vector<IndexExpr> vars;
    for (size_t j = 0; j < node.ranges.size(); ++j)
      vars.push_back(SymInt::symbol(loopVarName(j)));
    return indexExpr(flatIndex(vars, program_.buffer(out).meta.strides), names);
  }

  /// `out = value` into memory or the register of `out` (a value of the output's compute type).
  void write(const LoopNode &node, BufferId out, const std::string &value, const Names &names) {
    DType t = program_.buffer(out).meta.dtype;
    if (auto r = registers_.find(out); r != registers_.end())
      w_.emit("{} = {};", r->second, fromMemory(toMemory(value, t), t)); // rounded as if stored
    else if (stored(out))
      w_.emit("{}[{}] = {};", bufferName(out), storeAt(node, out, names), toMemory(value, t));
  }

  void pointwise(const LoopNode &node, Names names) {
    BufferId out = node.outputs[0];
    if (!stored(out) && !inRegister(node, out))
      return; // nobody reads it
    bool perThread = rows_ && hasInnerWork(node, shared_);
    BodyWriter body(w_, program_, *node.body, &registers_);
    if (perThread) {
      // What does not move with the inner loops (a row's statistics) is computed once.
      std::vector<std::string> vars = rangeVars(shared_, node.ranges.size());
      body.emitOuter({vars.begin(), vars.end()}, names);
      std::vector<SymInt> inner(node.ranges.begin() + shared_, node.ranges.end());
      w_.open(fmt::format("for (long long q = threadIdx.x; q < {}; q += blockDim.x)",
                          indexExpr(product(inner), names)));
      decompose(w_, "q", vars, inner, names);
      for (const std::string &v : vars)
        names[v] = v;
      body.emitInner(names);
    } else {
      zeroInner(node, names);
      body.emitOuter({}, names);
    }
    // In rows, a point of the shared loops is the block's: one thread stores it, every thread
    // holds a register.
    bool oneThread = rows_ && !perThread && stored(out) && !registers_.count(out);
    if (oneThread)
      w_.open("if (threadIdx.x == 0)");
    write(node, out, body.result(), names);
    if (oneThread)
      w_.close();
    if (perThread)
      w_.close();
  }

  void reduction(const LoopNode &node, Names names) {
    KILN_CHECK(node.reduction != ReductionKind::Welford || isFloating(node.body->dtype()),
               "cuda emitter: welford of {} values", dtypeName(node.body->dtype()));
    Accumulator acc(node.reduction, node.body->dtype());
    w_.emit("{0} *smem = reinterpret_cast<{0} *>(kiln_smem);", acc.type);
    w_.emit("const {} identity = {};", acc.type, acc.identity);
    w_.emit("const long long reduced = {};", indexExpr(product(node.reductionRanges), names));
    bool one = onePointPerShared(node, shared_);
    if (one) {
      zeroInner(node, names);
    } else {
      std::vector<SymInt> inner(node.ranges.begin() + shared_, node.ranges.end());
      w_.open(fmt::format("for (long long q = 0; q < {}; ++q)", indexExpr(product(inner), names)));
      std::vector<std::string> vars = rangeVars(shared_, node.ranges.size());
      decompose(w_, "q", vars, inner, names);
      for (const std::string &v : vars)
        names[v] = v;
    }
    std::vector<std::string> rvars = reductionVars(node);
    BodyWriter body(w_, program_, *node.body, &registers_);
    body.emitOuter({rvars.begin(), rvars.end()}, names);
    w_.emit("{} acc = identity;", acc.type);
    w_.open("for (long long red = threadIdx.x; red < reduced; red += blockDim.x)");
    Names inner = names;
    decompose(w_, "red", rvars, node.reductionRanges, inner);
    for (const std::string &v : rvars)
      inner[v] = v;
    body.emitInner(inner);
    w_.line(acc.push(body.result(), "red"));
    w_.close();
    // Every thread needs a value held in a register; only thread 0 stores.
    bool everyone = false;
    for (BufferId out : node.outputs)
      everyone = everyone || registers_.count(out);
    w_.emit("acc = kiln::{}(acc, smem, identity);", everyone ? "block_allreduce" : "block_reduce");
    for (size_t n = 0; n < node.outputs.size(); ++n)
      if (registers_.count(node.outputs[n]))
        write(node, node.outputs[n], acc.result(n, program_.buffer(node.outputs[n]).meta.dtype),
              names);
    bool stores = false;
    for (BufferId out : node.outputs)
      stores = stores || (stored(out) && !registers_.count(out));
    if (stores) {
      w_.open("if (threadIdx.x == 0)");
      for (size_t n = 0; n < node.outputs.size(); ++n)
        if (!registers_.count(node.outputs[n]))
          write(node, node.outputs[n], acc.result(n, program_.buffer(node.outputs[n]).meta.dtype),
                names);
      w_.close();
    }
    if (!one)
      w_.close();
  }

  const LaunchContext &ctx_;
  const LoopProgram &program_;
  const Kernel &kernel_;
  Writer &w_;
  size_t shared_;
  bool rows_ = false;
  std::map<BufferId, std::string> registers_;
};

} // namespace

FusedKernel emitFused(const LaunchContext &ctx) {
  const LoopProgram &program = ctx.schedule->program;
  const Kernel &head = ctx.schedule->kernels.at(ctx.kernels.at(0));
  FusedKernel out;
  CudaKernel &k = out.kernel;
  k.role = KernelRole::Fused;
  k.name = fmt::format("fused{}_{}", ctx.kernels[0],
                       bufferName(program.nodes()[head.nodes[0]].outputs[0]));
  std::set<BufferId> buffers, written;
  bool indices = false;
  for (size_t kernel : ctx.kernels)
    for (size_t n : ctx.schedule->kernels[kernel].nodes) {
      const LoopNode &node = program.nodes()[n];
      for (BufferId id : node.reads())
        buffers.insert(id);
      for (BufferId id : node.outputs) {
        buffers.insert(id);
        written.insert(id);
      }
      indices = indices || hasIndirectLoads(node);
    }
  std::vector<BufferId> inMemory;
  for (BufferId id : buffers)
    if (!ctx.locals.count(id))
      inMemory.push_back(id);
  Writer w;
  w.open(kernelSignature(
      program, k.name, inMemory, [&](BufferId id) { return written.count(id); }, ctx.symbols,
      indices, "", k.args));
  Names names;
  for (const std::string &s : ctx.symbols)
    names[s] = sizeName(s);
  // One shared array serves every reduction of the launch (each ends with a barrier), so a
  // launch of many small reductions stays within the static shared memory a block may have.
  int stateBytes = 0;
  for (size_t kernel : ctx.kernels)
    for (size_t n : ctx.schedule->kernels[kernel].nodes) {
      const LoopNode &node = program.nodes()[n];
      if (node.kind == LoopNodeKind::Reduction)
        stateBytes =
            std::max(stateBytes, Accumulator(node.reduction, node.body->dtype()).stateBytes);
    }
  if (stateBytes)
    w.emit("__shared__ unsigned long long kiln_smem[{}]; // 32 accumulators, 8-byte aligned",
           (32 * stateBytes + 7) / 8);
  std::vector<MemberWriter> members;
  for (size_t kernel : ctx.kernels)
    members.emplace_back(ctx, ctx.schedule->kernels[kernel], w);
  std::string total;
  for (size_t m = 0; m < members.size(); ++m) {
    w.emit("const long long units{} = {};", m, members[m].units(names));
    total += (m ? " + units" : "units") + std::to_string(m);
    out.members.push_back(members[m].describe());
  }
  w.emit("const long long units = {};", total);
  w.open("for (long long u = blockIdx.x; u < units; u += gridDim.x)");
  if (members.size() == 1) {
    members[0].emit("u", names);
  } else {
    std::string before;
    for (size_t m = 0; m < members.size(); ++m) {
      std::string end = m == 0 ? "units0" : fmt::format("{} + units{}", before, m);
      if (m + 1 == members.size())
        w.open("else");
      else
        w.open(fmt::format("{}if (u < {})", m ? "else " : "", end));
      w.emit("const long long unit = {};", m ? fmt::format("u - ({})", before) : "u");
      members[m].emit("unit", names);
      w.close();
      before = end;
    }
  }
  w.close();
  w.close();
  k.code = w.take();
  return out;
}

} // namespace kiln::codegen::cuda::detail
