// The module, one function per loop node: the kernel ABI prologue, the loop nest over the
// node's ranges (the outermost over [begin, end)), the vector loop with its scalar tail, and the
// reduction loops carrying their accumulators.

#include "codegen/cpu/emit_impl.h"

#include "ir/loop/index.h"
#include "ir/tensor_meta.h"
#include "runtime/error.h"

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

class KernelEmitter {
public:
  KernelEmitter(const LoopProgram &program, const LoopNode &node, const EmitOptions &options)
      : program_(program), node_(node), plan_(planNode(program, node, options)) {
    scope_.program = &program;
  }

  /// The function's text; fills `info`.
  std::string emit(KernelInfo &info, std::map<std::string, std::string> &externals) {
    info.lanes = plan_.mode;
    info.width = plan_.width;
    std::set<BufferId> buffers(node_.outputs.begin(), node_.outputs.end());
    for (BufferId id : node_.reads())
      buffers.insert(id);
    info.buffers.assign(buffers.begin(), buffers.end());
    std::set<std::string, std::less<>> symbols = program_.sizeSymbols();
    info.symbols.assign(symbols.begin(), symbols.end());

    prologue(info);
    rangeLoops(0);
    b_.emit("return");
    externals.insert(b_.externals().begin(), b_.externals().end());
    return fmt::format("  func.func @{}(%args: !llvm.ptr, %begin: i64, %end: i64) {{\n{}  }}\n",
                       info.name, b_.take());
  }

private:
  /// Loads args: size symbols as index values, buffers as flat memrefs.
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
    Value zero = b_.intConst(0, "i64"), one = b_.intConst(1, "i64");
    for (size_t k = 0; k < info.buffers.size(); ++k) {
      const Buffer &buffer = program_.buffer(info.buffers[k]);
      std::string ptrSlot = b_.fresh("slot"), ptr = b_.fresh("ptr");
      b_.emit("{} = llvm.getelementptr %args[{}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr", ptrSlot,
              k);
      b_.emit("{} = llvm.load {} : !llvm.ptr -> !llvm.ptr", ptr, ptrSlot);
      Value extent = b_.indexToI64(emitIndex(b_, extentOf(buffer), scope_.names));
      std::string d = b_.fresh("desc");
      b_.emit("{}_0 = llvm.mlir.undef : {}", d, kDescriptor);
      b_.emit("{}_1 = llvm.insertvalue {}, {}_0[0] : {}", d, ptr, d, kDescriptor);
      b_.emit("{}_2 = llvm.insertvalue {}, {}_1[1] : {}", d, ptr, d, kDescriptor);
      b_.emit("{}_3 = llvm.insertvalue {}, {}_2[2] : {}", d, zero.name, d, kDescriptor);
      b_.emit("{}_4 = llvm.insertvalue {}, {}_3[3, 0] : {}", d, extent.name, d, kDescriptor);
      b_.emit("{}_5 = llvm.insertvalue {}, {}_4[4, 0] : {}", d, one.name, d, kDescriptor);
      std::string memref = "%" + buffer.name();
      b_.emit("{} = builtin.unrealized_conversion_cast {}_5 : {} to memref<?x{}>", memref, d,
              kDescriptor, memElem(buffer.meta.dtype));
      scope_.memrefs[buffer.id] = memref;
    }
    b_.emit("%lo = arith.index_cast %begin : i64 to index");
    b_.emit("%hi = arith.index_cast %end : i64 to index");
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
    size_t k = node_.ranges.size();
    if (k == 0) { // a single point; [begin, end) is [0, 1) or empty
      b_.forLoop("%lo", "%hi", b_.indexConst(1), {}, [&](const std::string &, auto &) {
        point(0);
        return std::vector<Value>{};
      });
      return;
    }
    std::string var = loopVarName(level);
    std::string lo = level == 0 ? "%lo" : b_.indexConst(0);
    std::string hi = level == 0 ? "%hi" : emitIndex(b_, node_.ranges[level], scope_.names);
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

  /// Stores `v` at the current point of the range variables in `out`.
  void store(BufferId out, const Value &v, int lanes) {
    const Buffer &buffer = program_.buffer(out);
    std::vector<IndexExpr> vars;
    for (size_t j = 0; j < node_.ranges.size(); ++j)
      vars.push_back(SymInt::symbol(loopVarName(j)));
    std::string index = emitIndex(b_, flatIndex(vars, buffer.meta.strides), scope_.names);
    emitStore(b_, scope_, out, index, v, lanes);
  }

  void point(int lanes) {
    if (node_.kind == LoopNodeKind::Pointwise) {
      BodyEmitter body(b_, scope_, lanes, plan_.laneVar);
      store(node_.outputs[0], body.emit(*node_.body), lanes);
      return;
    }
    DType dtype = node_.body->dtype();
    Accumulator acc(b_, node_.reduction, dtype, lanes);
    std::vector<Value> state = acc.init();
    size_t numScalar = state.size();
    if (plan_.mode == LaneMode::Reduce) { // vector state first, then the tail's scalar state
      std::vector<Value> vstate = Accumulator(b_, node_.reduction, dtype, plan_.width).init();
      state.insert(state.begin(), vstate.begin(), vstate.end());
    }
    if (node_.reductionRanges.empty()) // no reduction loops: one point
      state = acc.update(state, BodyEmitter(b_, scope_, lanes, plan_.laneVar).emit(*node_.body),
                         b_.indexConst(0));
    else
      state = reductionLoops(0, state, acc, lanes);
    if (plan_.mode == LaneMode::Reduce) {
      std::vector<Value> vstate(state.begin(), state.end() - numScalar);
      std::vector<Value> sstate(state.end() - numScalar, state.end());
      state = acc.mergeLanes(vstate, sstate);
    }
    SymInt count = 1;
    for (const SymInt &r : node_.reductionRanges)
      count *= r;
    std::vector<Value> results = acc.results(state, emitIndex(b_, count, scope_.names));
    for (size_t n = 0; n < node_.outputs.size(); ++n)
      store(node_.outputs[n], results[n], lanes);
  }

  /// The row-major position of the current reduction point (argmax/argmin), else "".
  std::string position() {
    if (node_.reduction != ReductionKind::ArgMax && node_.reduction != ReductionKind::ArgMin)
      return "";
    std::vector<IndexExpr> vars;
    for (size_t j = 0; j < node_.reductionRanges.size(); ++j)
      vars.push_back(SymInt::symbol(reductionVarName(j)));
    return emitIndex(b_, flatIndex(vars, ir::contiguousStrides(node_.reductionRanges)),
                     scope_.names);
  }

  std::vector<Value> reductionLoops(size_t level, const std::vector<Value> &inits, Accumulator &acc,
                                    int lanes) {
    size_t m = node_.reductionRanges.size();
    std::string var = reductionVarName(level);
    std::string hi = emitIndex(b_, node_.reductionRanges[level], scope_.names);
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
                          Value v = BodyEmitter(b_, scope_, lanes, plan_.laneVar).emit(*node_.body);
                          return acc.update(state, v, position());
                        });
    // Horizontal: the vector loop folds W points per lane into the vector state (the first
    // half of the values), the tail folds the rest into the scalar state (the second half).
    Accumulator vacc(b_, node_.reduction, node_.body->dtype(), plan_.width);
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
          Value v = BodyEmitter(b_, scope_, plan_.width, var).emit(*node_.body);
          auto [vs, ss] = split(state);
          return join(vacc.update(vs, v, ""), ss);
        },
        [&](const std::string &iv, const std::vector<Value> &state) {
          scope_.names[var] = iv;
          Value v = BodyEmitter(b_, scope_, 0, "").emit(*node_.body);
          auto [vs, ss] = split(state);
          return join(vs, acc.update(ss, v, ""));
        });
  }

  const LoopProgram &program_;
  const LoopNode &node_;
  NodePlan plan_;
  Builder b_;
  KernelScope scope_;
};

} // namespace

EmittedModule emitModule(const LoopProgram &program, const EmitOptions &options) {
  EmittedModule out;
  std::string functions;
  std::map<std::string, std::string> externals;
  std::span<const LoopNode> nodes = program.nodes();
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (nodes[k].kind == LoopNodeKind::Extern)
      continue;
    KernelInfo info;
    info.node = k;
    info.name = fmt::format("node{}_{}", k, bufferName(nodes[k].outputs[0]));
    functions += KernelEmitter(program, nodes[k], options).emit(info, externals);
    out.kernels.push_back(std::move(info));
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
