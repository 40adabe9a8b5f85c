// The module, one function per launch of loop kernels: the kernel ABI prologue, each kernel's
// loop nest over its nodes' ranges (the outermost over its part of [begin, end)), the vector loop
// with its scalar tail, tiles for transposed loads, and the reduction loops carrying their
// accumulators.

#include "codegen/cpu/emit_impl.h"

#include "ir/loop/index.h"
#include "ir/tensor_meta.h"
#include "runtime/error.h"

#include <algorithm>
#include <sstream>

namespace kiln::codegen::cpu {

using namespace ir::loop;
using namespace detail;

namespace {

constexpr const char *kDescriptor = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>";

/// The element count a buffer's view spans: 1 + sum((size - 1) * stride).
SymInt extentOf(const Buffer &buffer) {
  SymInt extent = 1;
  for (int64_t k = 0; k < buffer.rank(); ++k)
    extent += (buffer.meta.sizes[k] - 1) * buffer.meta.strides[k];
  return extent;
}

/// Nodes emitted as one function under their shared outermost loop (see [Note: fused runs] in
/// emit.h): a loop kernel of the schedule, or one node of an extern kernel (an epilogue).
struct Run {
  std::vector<size_t> nodes;
  std::set<BufferId> registers; ///< the schedule's local buffers: one value per shared point
  size_t shared = 0;            ///< how many outer loops the nodes share (0: one node alone)
};

/// The functions to emit, in order: one per launch of loop kernels (their runs one after another
/// in one parallel range, [Note: launches] in passes/schedule/schedule.h), one per node after an
/// extern's call.
std::vector<std::vector<Run>> launchesOf(const passes::schedule::Schedule &s) {
  using passes::schedule::KernelKind;
  using passes::schedule::StorageKind;
  std::vector<std::vector<Run>> launches;
  for (const passes::schedule::Kernel &kernel : s.kernels) {
    if (kernel.kind == KernelKind::Loop) {
      Run run{kernel.nodes, {}, kernel.nodes.size() > 1 ? kernel.outer.size() : 0};
      for (size_t n : kernel.nodes)
        for (BufferId id : s.program.nodes()[n].outputs)
          if (s.buffers[id.index].kind == StorageKind::Local)
            run.registers.insert(id);
      if (kernel.withPrevious && !launches.empty())
        launches.back().push_back(std::move(run));
      else
        launches.push_back({std::move(run)});
      continue;
    }
    for (size_t n : kernel.nodes)
      if (s.program.nodes()[n].kind != LoopNodeKind::Extern)
        launches.push_back({Run{{n}, {}, 0}});
  }
  return launches;
}

/// Whether `a` (of a reduction body, reduced variable r0) computes what `b` (of a pointwise body
/// with one more range loop, `inner`) does at the same point, with r0 standing for inner.
bool sameExpr(const Expr *a, const Expr *b, const std::string &inner) {
  if (a == b)
    return true;
  if (a->kind != b->kind || a->dtype != b->dtype || a->numOperands != b->numOperands)
    return false;
  switch (a->kind) {
  case ExprKind::Constant:
    return a->floatValue == b->floatValue && a->intValue == b->intValue;
  case ExprKind::IndirectLoad:
    if (!(a->indirectStride == b->indirectStride && a->indirectExtent == b->indirectExtent &&
          a->intValue == b->intValue && sameExpr(a->operand(0), b->operand(0), inner)))
      return false;
    [[fallthrough]];
  case ExprKind::Load:
  case ExprKind::Index:
    return a->buffer == b->buffer &&
           a->index.substitute({{reductionVarName(0), SymInt::symbol(inner)}}) == b->index;
  default:
    for (int k = 0; k < a->numOperands; ++k)
      if (!sameExpr(a->operand(k), b->operand(k), inner))
        return false;
    return true;
  }
}

bool hasTranscendental(const Body &body) {
  for (const Expr *e : body.exprs())
    if (ir::loop::isTranscendental(e->kind))
      return true;
  return false;
}

class KernelEmitter {
public:
  /// `symbols`: the program's size symbols, every kernel's trailing arguments.
  KernelEmitter(const passes::schedule::Schedule &schedule, const EmitOptions &options,
                const std::vector<std::string> &symbols)
      : program_(schedule.program), loops_(schedule.loops), options_(options), symbols_(symbols) {
    scope_.program = &program_;
  }

  /// The function of a launch's runs (named `info.name`); fills `info` for its first node.
  std::string emit(const std::vector<Run> &runs, KernelInfo &info,
                   std::map<std::string, std::string> &externals) {
    select(runs[0].nodes[0]);
    info.lanes = plan_.mode;
    info.width = plan_.width;
    // Arguments in the order the runs first use them (each node's reads, then its outputs),
    // not by id: runs that compute the same thing on other buffers (the time steps of a stencil)
    // then emit the same function text, and emitModule keeps one function for all of them.
    std::set<BufferId> seen;
    for (const Run &run : runs)
      seen.insert(run.registers.begin(), run.registers.end());
    auto use = [&](BufferId id) {
      if (seen.insert(id).second)
        info.buffers.push_back(id);
    };
    for (const Run &run : runs)
      for (size_t n : run.nodes) {
        const LoopNode &node = program_.nodes()[n];
        for (BufferId id : node.reads())
          use(id);
        for (BufferId id : node.outputs)
          use(id);
      }
    info.symbols = symbols_;
    for (const Run &run : runs)
      for (size_t n : run.nodes)
        for (const Expr *e : program_.nodes()[n].body->exprs())
          info.checksIndices = info.checksIndices || e->kind == ExprKind::IndirectLoad;

    prologue(info);
    info.parallelLoops = loops_[runs[0].nodes[0]].parallelLoops;
    if (runs.size() == 1) {
      emitRun(runs[0], "%lo", "%hi");
    } else {
      // The runs' parallel ranges laid end to end: each runs the part of [begin, end) that
      // falls in its own range, shifted to start at 0.
      std::string offset = b_.indexConst(0), zero = b_.indexConst(0);
      for (const Run &run : runs) {
        const LoopNode &head = program_.nodes()[run.nodes[0]];
        SymInt rows = 1;
        for (size_t d = 0; d < loops_[run.nodes[0]].parallelLoops; ++d)
          rows = rows * head.ranges[d];
        std::string extent = emitIndex(b_, rows, scope_.names);
        auto clamp = [&](const std::string &bound) {
          std::string shifted = b_.indexOp("arith.subi", bound, offset);
          return b_.indexOp("arith.minsi", b_.indexOp("arith.maxsi", shifted, zero), extent);
        };
        std::string lo = clamp("%lo"), hi = clamp("%hi");
        emitRun(run, lo, hi);
        offset = b_.indexOp("arith.addi", offset, extent);
      }
    }
    b_.emit("return");
    externals.insert(b_.externals().begin(), b_.externals().end());
    return fmt::format("  func.func @{}(%args: !llvm.ptr, %begin: i64, %end: i64) {{\n{}  }}\n",
                       info.name, b_.take());
  }

  /// How node `n` is vectorized: the schedule's lane, as wide as this target allows.
  NodePlan planOf(size_t n) const { return planNode(program_.nodes()[n], loops_[n], options_); }

private:
  /// One run's loops over rows [lo, hi) of its parallel range.
  void emitRun(const Run &run, const std::string &lo, const std::string &hi) {
    registers_ = &run.registers;
    shared_ = run.shared;
    lo_ = lo;
    hi_ = hi;
    tileVar_.reset();
    select(run.nodes[0]);
    if (run.nodes.size() > 1)
      planStashes(run);
    size_t parallelLoops = loops_[run.nodes[0]].parallelLoops;
    if (run.nodes.size() == 1) {
      const std::string &tile = loops_[run.nodes[0]].tileVar;
      if (plan_.mode == LaneMode::Range && !tile.empty())
        tileVar_ = std::stoul(tile.substr(1));
      if (parallelLoops > 1)
        flatLoop(node_->ranges, parallelLoops, [&] {
          if (parallelLoops == node_->ranges.size())
            point(0);
          else
            rangeLoops(parallelLoops);
        });
      else
        rangeLoops(0);
    } else {
      flatLoop(node_->ranges, run.shared, [&] { runNodes(run); });
    }
  }

  void select(size_t n) {
    // The extents the schedule runs its loops with (loops merged into the lane).
    node_ = &program_.nodes()[n];
    if (loops_[n].mergedIntoLane > 0) {
      scheduled_ = passes::schedule::asScheduled(program_, *node_, loops_[n]);
      node_ = &scheduled_;
    }
    plan_ = planOf(n);
    auto it = stashOf_.find(n);
    stash_ = it == stashOf_.end() ? std::nullopt : std::optional<BufferId>(it->second);
  }

  /// A row reduction of an expensive value that a later node of the run recomputes at the same
  /// points (softmax: exp(x - max) summed, then divided): the reduction also stores each value
  /// where that node will write its own result, and the node loads it back instead of
  /// recomputing it, the way eager softmax writes exp into its output and scales it in place.
  void planStashes(const Run &run) {
    std::span<const LoopNode> nodes = program_.nodes();
    size_t s = run.shared;
    for (size_t a = 0; a < run.nodes.size(); ++a) {
      const LoopNode &r = nodes[run.nodes[a]];
      if (r.kind != LoopNodeKind::Reduction || r.ranges.size() != s ||
          r.reductionRanges.size() != 1 ||
          Accumulator(b_, r.reduction, r.body->dtype(), 0).foldsOneValue() == false ||
          planOf(run.nodes[a]).mode != LaneMode::Reduce || !hasTranscendental(*r.body))
        continue;
      for (size_t z = a + 1; z < run.nodes.size() && !stashOf_.count(run.nodes[a]); ++z) {
        const LoopNode &p = nodes[run.nodes[z]];
        if (p.kind != LoopNodeKind::Pointwise || p.ranges.size() != s + 1 ||
            !(p.ranges[s] == r.reductionRanges[0]) || planOf(run.nodes[z]).mode != LaneMode::Range)
          continue;
        const Buffer &out = program_.buffer(p.outputs[0]);
        if (out.meta.dtype != r.body->dtype() ||
            memElem(out.meta.dtype) != computeElem(out.meta.dtype) ||
            out.meta.strides.back().constant() != 1) // the reduction stores W values in a row
          continue;
        for (const Expr *e : p.body->exprs())
          if (e != p.body->result() && sameExpr(r.body->result(), e, loopVarName(s))) {
            std::vector<IndexExpr> vars = p.varRanges().vars();
            scope_.stashes[e] = {out.id, flatIndex(vars, out.meta.strides)};
            stashOf_[run.nodes[a]] = out.id;
            break;
          }
      }
    }
  }

  /// Stores a reduction's value at the current reduced point where the stash reader expects it.
  void stashValue(const Value &v, int lanes) {
    if (!stash_)
      return;
    std::vector<IndexExpr> vars; // the shared loops, then r0 where the reader has its own loop
    for (size_t j = 0; j < shared_; ++j)
      vars.push_back(SymInt::symbol(loopVarName(j)));
    vars.push_back(SymInt::symbol(reductionVarName(0)));
    std::string index =
        emitIndex(b_, flatIndex(vars, program_.buffer(*stash_).meta.strides), scope_.names);
    emitStore(b_, scope_, *stash_, index, v, lanes);
  }

  /// `%name = memref<?xelem>` over the pointer in args[slot], `extent` (i64) elements.
  void flatMemref(size_t slot, const Value &extent, const std::string &name,
                  const std::string &elem) {
    Value zero = b_.intConst(0, "i64"), one = b_.intConst(1, "i64");
    std::string ptrSlot = b_.fresh("slot"), ptr = b_.fresh("ptr");
    b_.emit("{} = llvm.getelementptr %args[{}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr", ptrSlot,
            slot);
    b_.emit("{} = llvm.load {} : !llvm.ptr -> !llvm.ptr", ptr, ptrSlot);
    std::string d = b_.fresh("desc");
    b_.emit("{}_0 = llvm.mlir.undef : {}", d, kDescriptor);
    b_.emit("{}_1 = llvm.insertvalue {}, {}_0[0] : {}", d, ptr, d, kDescriptor);
    b_.emit("{}_2 = llvm.insertvalue {}, {}_1[1] : {}", d, ptr, d, kDescriptor);
    b_.emit("{}_3 = llvm.insertvalue {}, {}_2[2] : {}", d, zero.name, d, kDescriptor);
    b_.emit("{}_4 = llvm.insertvalue {}, {}_3[3, 0] : {}", d, extent.name, d, kDescriptor);
    b_.emit("{}_5 = llvm.insertvalue {}, {}_4[4, 0] : {}", d, one.name, d, kDescriptor);
    b_.emit("{} = builtin.unrealized_conversion_cast {}_5 : {} to memref<?x{}>", name, d,
            kDescriptor, elem);
  }

  /// Loads args: size symbols as index values, buffers as flat memrefs, the index-error record.
  void prologue(const KernelInfo &info) {
    size_t slot = info.buffers.size();
    for (const std::string &s : info.symbols) {
      std::string ptr = b_.fresh("slot"), raw = b_.fresh("sym"), name = "%s_" + s;
      b_.emit("{} = llvm.getelementptr %args[{}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr", ptr,
              slot++);
      b_.emit("{} = llvm.load {} : !llvm.ptr -> i64", raw, ptr);
      b_.emit("{} = arith.index_cast {} : i64 to index", name, raw);
      scope_.names[s] = name;
    }
    for (size_t k = 0; k < info.buffers.size(); ++k) {
      const Buffer &buffer = program_.buffer(info.buffers[k]);
      Value extent = b_.indexToI64(emitIndex(b_, extentOf(buffer), scope_.names));
      std::string memref = "%" + buffer.name();
      flatMemref(k, extent, memref, memElem(buffer.meta.dtype));
      scope_.memrefs[buffer.id] = memref;
    }
    if (info.checksIndices) {
      scope_.errorRecord = "%index_error";
      flatMemref(slot, b_.intConst(kIndexErrorSlots, "i64"), scope_.errorRecord, "i64");
    }
    b_.emit("%lo = arith.index_cast %begin : i64 to index");
    b_.emit("%hi = arith.index_cast %end : i64 to index");
  }

  /// The nodes of a kernel at one point of its shared loops, one after another.
  void runNodes(const Run &run) {
    for (size_t n : run.nodes) {
      select(n);
      if (passes::schedule::onePointPerShared(*node_, run.shared)) {
        for (size_t d = run.shared; d < node_->ranges.size(); ++d)
          scope_.names[loopVarName(d)] = b_.indexConst(0);
        point(0);
      } else {
        rangeLoops(run.shared);
      }
    }
  }

  /// One loop over [begin, end) of the first `count` range loops flattened row-major: each
  /// iteration recovers i0..i<count-1> by division (a few divides per row) and runs `inner`.
  template <typename Inner>
  void flatLoop(std::span<const SymInt> ranges, size_t count, Inner inner) {
    std::vector<std::string> extents(count); // i0's is not needed: it is what remains
    for (size_t d = 1; d < count; ++d)
      extents[d] = emitIndex(b_, ranges[d], scope_.names);
    b_.forLoop(lo_, hi_, b_.indexConst(1), {}, [&](const std::string &iv, auto &) {
      std::string rest = iv;
      for (size_t d = count; d-- > 1;) {
        scope_.names[loopVarName(d)] = b_.indexOp("arith.remsi", rest, extents[d]);
        rest = b_.indexOp("arith.divsi", rest, extents[d]);
      }
      scope_.names[loopVarName(0)] = rest;
      inner();
      return std::vector<Value>{};
    });
  }

  /// [lo, hi) by `width` over the largest multiple of width, then the scalar tail.
  std::vector<Value> splitLoop(const std::string &lo, const std::string &hi,
                               const std::vector<Value> &inits, const Builder::LoopBody &vector,
                               const Builder::LoopBody &scalar) {
    std::string w = b_.indexConst(plan_.width);
    std::string rem = b_.indexOp("arith.remsi", b_.indexOp("arith.subi", hi, lo), w);
    std::string vend = b_.indexOp("arith.subi", hi, rem);
    std::vector<Value> state = b_.forLoop(lo, vend, w, inits, vector);
    return b_.forLoop(vend, hi, b_.indexConst(1), state, scalar);
  }

  /// The loops over the node's ranges from `level` inward, then one point (or W points).
  void rangeLoops(size_t level) {
    size_t k = node_->ranges.size();
    if (k == 0) { // a single point; [begin, end) is [0, 1) or empty
      b_.forLoop(lo_, hi_, b_.indexConst(1), {}, [&](const std::string &, auto &) {
        point(0);
        return std::vector<Value>{};
      });
      return;
    }
    std::string var = loopVarName(level);
    std::string lo = level == 0 ? lo_ : b_.indexConst(0);
    std::string hi = level == 0 ? hi_ : emitIndex(b_, node_->ranges[level], scope_.names);
    if (tileVar_ && level == *tileVar_) {
      tileBlocks(level, lo, hi);
      return;
    }
    if (tileVar_ && level + 1 == k) {
      tileInner(hi);
      return;
    }
    auto at = [&](int lanes) {
      return [this, var, lanes, level, k](const std::string &iv, auto &) {
        scope_.names[var] = iv;
        if (level + 1 == k)
          point(lanes);
        else
          rangeLoops(level + 1);
        return std::vector<Value>{};
      };
    };
    if (level + 1 == k && plan_.mode == LaneMode::Range)
      splitLoop(lo, hi, {}, at(plan_.width), at(0));
    else
      b_.forLoop(lo, hi, b_.indexConst(1), {}, at(0));
  }

  /// The tile variable's loop in blocks of T = kTileFactor * W over [lo, hi) (inside the
  /// parallel chunk when it is i0); the loops between it and the lane variable stay inside.
  void tileBlocks(size_t level, const std::string &lo, const std::string &hi) {
    std::string t = b_.indexConst(kTileFactor * plan_.width);
    b_.forLoop(lo, hi, t, {}, [&](const std::string &iv, auto &) {
      tileLo_ = iv;
      tileHi_ = b_.indexOp("arith.minsi", b_.indexOp("arith.addi", iv, t), hi);
      rangeLoops(level + 1);
      return std::vector<Value>{};
    });
  }

  /// The lane variable over [0, n) in a tile: T x T blocks of (tile variable, lane variable),
  /// the block's rows of the tile variable inside, W lanes at a time; then the columns past
  /// the last full block with the usual vector loop and scalar tail per row.
  void tileInner(const std::string &n) {
    std::string lane = loopVarName(node_->ranges.size() - 1);
    std::string row = loopVarName(*tileVar_);
    std::string t = b_.indexConst(kTileFactor * plan_.width), w = b_.indexConst(plan_.width);
    std::string one = b_.indexConst(1);
    std::string tend = b_.indexOp("arith.subi", n, b_.indexOp("arith.remsi", n, t));
    auto at = [this, lane](int lanes) {
      return [this, lane, lanes](const std::string &iv, auto &) {
        scope_.names[lane] = iv;
        point(lanes);
        return std::vector<Value>{};
      };
    };
    b_.forLoop(b_.indexConst(0), tend, t, {}, [&](const std::string &cb, auto &) {
      std::string cend = b_.indexOp("arith.addi", cb, t);
      b_.forLoop(tileLo_, tileHi_, one, {}, [&](const std::string &r, auto &) {
        scope_.names[row] = r;
        b_.forLoop(cb, cend, w, {}, at(plan_.width));
        return std::vector<Value>{};
      });
      return std::vector<Value>{};
    });
    b_.forLoop(tileLo_, tileHi_, one, {}, [&](const std::string &r, auto &) {
      scope_.names[row] = r;
      splitLoop(tend, n, {}, at(plan_.width), at(0));
      return std::vector<Value>{};
    });
  }

  /// Stores `v` at the current point of the range variables in `out`.
  void store(BufferId out, const Value &v, int lanes) {
    if (registers_->count(out)) { // one value per row, read later in this iteration only
      scope_.registers[out] = v;
      return;
    }
    const Buffer &buffer = program_.buffer(out);
    std::vector<IndexExpr> vars;
    for (size_t j = 0; j < node_->ranges.size(); ++j)
      vars.push_back(SymInt::symbol(loopVarName(j)));
    std::string index = emitIndex(b_, flatIndex(vars, buffer.meta.strides), scope_.names);
    int64_t stride = 1; // the lane is the last range loop; stores along it may be strided
    if (lanes && !buffer.meta.strides.empty()) {
      std::optional<int64_t> c = buffer.meta.strides.back().constant();
      KILN_CHECK(c, "cpu emitter: a vector store of {} along a symbolic stride", bufferName(out));
      stride = *c;
    }
    emitStore(b_, scope_, out, index, v, lanes, stride);
  }

  void point(int lanes) {
    if (node_->kind == LoopNodeKind::Pointwise) {
      BodyEmitter body(b_, scope_, lanes, plan_.laneVar);
      store(node_->outputs[0], body.emit(*node_->body), lanes);
      return;
    }
    DType dtype = node_->body->dtype();
    Accumulator acc(b_, node_->reduction, dtype, lanes);
    std::vector<Value> state = acc.init();
    size_t numScalar = state.size();
    if (plan_.mode == LaneMode::Reduce) { // vector state first, then the tail's scalar state
      std::vector<Value> vstate = Accumulator(b_, node_->reduction, dtype, plan_.width).init();
      state.insert(state.begin(), vstate.begin(), vstate.end());
    }
    if (node_->reductionRanges.empty()) // no reduction loops: one point
      state = acc.update(state, BodyEmitter(b_, scope_, lanes, plan_.laneVar).emit(*node_->body),
                         b_.indexConst(0));
    else
      state = reductionLoops(0, state, acc, lanes);
    if (plan_.mode == LaneMode::Reduce) {
      std::vector<Value> vstate(state.begin(), state.end() - numScalar);
      std::vector<Value> sstate(state.end() - numScalar, state.end());
      state = acc.mergeLanes(vstate, sstate);
    }
    SymInt count = 1;
    for (const SymInt &r : node_->reductionRanges)
      count *= r;
    std::vector<Value> results = acc.results(state, emitIndex(b_, count, scope_.names));
    for (size_t n = 0; n < node_->outputs.size(); ++n)
      store(node_->outputs[n], results[n], lanes);
  }

  /// The row-major position of the current reduction point (argmax/argmin), else "".
  std::string position() {
    if (node_->reduction != ReductionKind::ArgMax && node_->reduction != ReductionKind::ArgMin)
      return "";
    std::vector<IndexExpr> vars;
    for (size_t j = 0; j < node_->reductionRanges.size(); ++j)
      vars.push_back(SymInt::symbol(reductionVarName(j)));
    return emitIndex(b_, flatIndex(vars, ir::contiguousStrides(node_->reductionRanges)),
                     scope_.names);
  }

  std::vector<Value> reductionLoops(size_t level, const std::vector<Value> &inits, Accumulator &acc,
                                    int lanes) {
    size_t m = node_->reductionRanges.size();
    std::string var = reductionVarName(level);
    std::string hi = emitIndex(b_, node_->reductionRanges[level], scope_.names);
    std::string zero = b_.indexConst(0);
    if (level + 1 < m)
      return b_.forLoop(zero, hi, b_.indexConst(1), inits,
                        [&](const std::string &iv, const std::vector<Value> &state) {
                          scope_.names[var] = iv;
                          return reductionLoops(level + 1, state, acc, lanes);
                        });
    if (plan_.mode != LaneMode::Reduce)
      return b_.forLoop(zero, hi, b_.indexConst(1), inits,
                        [&](const std::string &iv, const std::vector<Value> &state) {
                          scope_.names[var] = iv;
                          Value v =
                              BodyEmitter(b_, scope_, lanes, plan_.laneVar).emit(*node_->body);
                          return acc.update(state, v, position());
                        });
    // Horizontal: the vector loop folds W points per lane into the vector state (the first
    // half of the values), the tail folds the rest into the scalar state (the second half).
    Accumulator vacc(b_, node_->reduction, node_->body->dtype(), plan_.width);
    if (vacc.foldsOneValue())
      return unrolledReduction(hi, inits, acc, vacc);
    size_t half = inits.size() / 2;
    auto split = [half](const std::vector<Value> &state) {
      return std::pair(std::vector<Value>(state.begin(), state.begin() + half),
                       std::vector<Value>(state.begin() + half, state.end()));
    };
    auto join = [](std::vector<Value> a, const std::vector<Value> &b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    return splitLoop(
        zero, hi, inits,
        [&](const std::string &iv, const std::vector<Value> &state) {
          scope_.names[var] = iv;
          Value v = BodyEmitter(b_, scope_, plan_.width, var).emit(*node_->body);
          auto [vs, ss] = split(state);
          return join(vacc.update(vs, v, ""), ss);
        },
        [&](const std::string &iv, const std::vector<Value> &state) {
          scope_.names[var] = iv;
          Value v = BodyEmitter(b_, scope_, 0, "").emit(*node_->body);
          auto [vs, ss] = split(state);
          return join(vs, acc.update(ss, v, ""));
        });
  }

  /// The innermost reduction loop of a sum/prod/max/min folded into kUnroll independent vector
  /// accumulators, kUnroll x W points per iteration: one accumulator is a chain of dependent
  /// adds (or compare-selects), so its latency, not the loads, would bound the loop. Then full
  /// vectors into one accumulator, then the scalar tail. `inits`: {vector state, scalar state}.
  std::vector<Value> unrolledReduction(const std::string &hi, const std::vector<Value> &inits,
                                       Accumulator &acc, Accumulator &vacc) {
    constexpr int kUnroll = 4;
    std::string var = reductionVarName(node_->reductionRanges.size() - 1);
    std::string zero = b_.indexConst(0), w = b_.indexConst(plan_.width);
    std::string step = b_.indexConst(kUnroll * plan_.width);
    std::string uend = b_.indexOp("arith.subi", hi, b_.indexOp("arith.remsi", hi, step));
    std::string vend = b_.indexOp("arith.subi", hi, b_.indexOp("arith.remsi", hi, w));
    auto vectorPoint = [&](const std::string &at, const Value &state) {
      scope_.names[var] = at;
      Value v = BodyEmitter(b_, scope_, plan_.width, var).emit(*node_->body);
      stashValue(v, plan_.width);
      return vacc.update({state}, v, "")[0];
    };
    // inits[0] may carry the points of outer reduction loops: only the first part starts there.
    std::vector<Value> starts(kUnroll, vacc.init()[0]);
    starts[0] = inits[0];
    auto unrolled = [&](const std::string &iv, const std::vector<Value> &state) {
      std::vector<Value> next;
      for (int u = 0; u < kUnroll; ++u)
        next.push_back(vectorPoint(
            u ? b_.indexOp("arith.addi", iv, b_.indexConst(u * plan_.width)) : iv, state[u]));
      return next;
    };
    std::string from = zero;
    if (vacc.rounds()) {
      // A floating-point sum in blocks of kBlock iterations, each from zero, added into the
      // running parts: every value goes through about kBlock + n / (kBlock kUnroll W) roundings,
      // not n / (kUnroll W) (a 10^7-element float32 sum: 1e-5 relative error, not 1e-3).
      constexpr int kBlock = 256;
      std::string block = b_.indexConst(kBlock * kUnroll * plan_.width);
      std::string bend = b_.indexOp("arith.subi", uend, b_.indexOp("arith.remsi", uend, block));
      std::vector<Value> fresh(kUnroll, vacc.init()[0]);
      starts = b_.forLoop(
          zero, bend, block, starts, [&](const std::string &bv, const std::vector<Value> &outer) {
            std::vector<Value> inner =
                b_.forLoop(bv, b_.indexOp("arith.addi", bv, block), step, fresh, unrolled);
            std::vector<Value> sums;
            for (int u = 0; u < kUnroll; ++u)
              sums.push_back(vacc.combine({outer[u]}, {inner[u]})[0]);
            return sums;
          });
      from = bend;
    }
    std::vector<Value> parts = b_.forLoop(from, uend, step, starts, unrolled);
    std::vector<Value> folded =
        vacc.combine(vacc.combine({parts[0]}, {parts[1]}), vacc.combine({parts[2]}, {parts[3]}));
    std::vector<Value> vector =
        b_.forLoop(uend, vend, w, folded, [&](const std::string &iv, const std::vector<Value> &s) {
          return std::vector<Value>{vectorPoint(iv, s[0])};
        });
    std::vector<Value> scalar = b_.forLoop(vend, hi, b_.indexConst(1), {inits[1]},
                                           [&](const std::string &iv, const std::vector<Value> &s) {
                                             scope_.names[var] = iv;
                                             Value v =
                                                 BodyEmitter(b_, scope_, 0, "").emit(*node_->body);
                                             stashValue(v, 0);
                                             return acc.update(s, v, "");
                                           });
    return {vector[0], scalar[0]};
  }

  const LoopProgram &program_;
  const std::vector<passes::schedule::LoopOrder> &loops_;
  EmitOptions options_;
  const std::vector<std::string> &symbols_;
  const LoopNode *node_ = nullptr;
  LoopNode scheduled_; ///< the selected node as asScheduled gives it
  NodePlan plan_;
  const std::set<BufferId> *registers_ = nullptr;
  std::map<size_t, BufferId> stashOf_; ///< reduction node → the buffer it stashes values in
  std::optional<BufferId> stash_;      ///< the current node's
  std::optional<size_t> tileVar_;      ///< the range variable tiled with the lane variable
  size_t shared_ = 0;                  ///< the run's shared loops (for stashes)
  std::string tileLo_, tileHi_;        ///< the current block of the tile variable
  std::string lo_, hi_;                ///< the current run's rows of its parallel range
  Builder b_;
  KernelScope scope_;
};

/// `function`'s text without its name and with `%bufN` renumbered in order of appearance: equal
/// for two runs whose code differs only in which buffers it is called with.
std::string canonicalFunction(const std::string &function, const std::string &name) {
  std::string out;
  out.reserve(function.size());
  std::map<std::string, int, std::less<>> numbers;
  size_t i = 0, at = function.find("@" + name + "(");
  while (i < function.size()) {
    if (i == at) {
      out += "@(";
      i += name.size() + 2;
      continue;
    }
    if (function.compare(i, 4, "%buf") == 0) {
      size_t j = i + 4;
      while (j < function.size() && std::isdigit(static_cast<unsigned char>(function[j])))
        ++j;
      if (j > i + 4) {
        auto [it, added] = numbers.emplace(function.substr(i, j - i), int(numbers.size()));
        out += "%b" + std::to_string(it->second);
        i = j;
        continue;
      }
    }
    out += function[i++];
  }
  return out;
}

} // namespace

EmittedModule emitModule(const passes::schedule::Schedule &schedule, const EmitOptions &options) {
  const LoopProgram &program = schedule.program;
  EmittedModule out;
  std::string functions;
  std::map<std::string, std::string> externals;
  std::span<const LoopNode> nodes = program.nodes();
  auto nameOf = [&](size_t k) {
    return fmt::format("node{}_{}", k, bufferName(nodes[k].outputs[0]));
  };
  std::map<std::string, std::string> functionOfText; // body text with buffers numbered by use
  // Once per module: a program of thousands of kernels (an unrolled loop) would walk every node
  // once per kernel.
  std::set<std::string, std::less<>> symbolSet = program.sizeSymbols();
  std::vector<std::string> symbols(symbolSet.begin(), symbolSet.end());
  for (const std::vector<Run> &runs : launchesOf(schedule)) {
    size_t first = runs[0].nodes[0];
    KernelInfo head;
    head.node = first;
    head.name = nameOf(first);
    for (size_t r = 1; r < runs.size(); ++r)
      head.laterRuns.push_back(runs[r].nodes[0]);
    KernelEmitter emitter(schedule, options, symbols);
    std::string function = emitter.emit(runs, head, externals);
    std::string key = canonicalFunction(function, head.name);
    if (auto it = functionOfText.find(key); it != functionOfText.end()) {
      head.name = it->second; // the same code on other buffers: call that function
    } else {
      functionOfText.emplace(std::move(key), head.name);
      functions += function;
    }
    out.kernels.push_back(std::move(head));
    // The launch's other nodes ran inside the first one's function: theirs do nothing.
    for (const Run &run : runs)
      for (size_t n : run.nodes) {
        if (n == first)
          continue;
        KernelInfo info;
        info.node = n;
        info.name = nameOf(n);
        info.symbols = symbols;
        NodePlan plan = emitter.planOf(n);
        info.lanes = plan.mode;
        info.width = plan.width;
        info.fusedInto = first;
        if (n == run.nodes[0])
          info.parallelLoops = schedule.loops[n].parallelLoops;
        functions += fmt::format(
            "  func.func @{}(%args: !llvm.ptr, %begin: i64, %end: i64) {{\n    return\n  }}\n",
            info.name);
        out.kernels.push_back(std::move(info));
      }
  }
  std::string text = fmt::format("// kiln loop program (vector bits {}):\n", options.vectorBits);
  std::istringstream lines(program.str());
  for (std::string line; std::getline(lines, line);)
    text += "//   " + line + "\n";
  text += "module {\n";
  for (const auto &[name, signature] : externals)
    text += fmt::format("  func.func private @{}{}\n", name, signature);
  out.text = text + functions + "}\n";
  return out;
}

} // namespace kiln::codegen::cpu
