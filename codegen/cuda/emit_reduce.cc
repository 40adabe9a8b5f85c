// Reduction kernels: one block per output point (rows), one thread per output point (columns),
// and the two passes of a split reduction (see [Note: CUDA kernels] in emit.h). Every kernel
// folds the body's values into a prelude accumulator (kiln::Sum, kiln::ArgMax, ...).

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "ir/loop/prim_eval.h"
#include "runtime/error.h"

#include <limits>

namespace kiln::codegen::cuda::detail {

using namespace ir::loop;

Accumulator::Accumulator(ReductionKind k, DType t) : kind(k), value(t) {
  bool fl = isFloating(t);
  bool wide = k == ReductionKind::Sum || k == ReductionKind::Prod || t == DType::Int64;
  element = fl ? (t == DType::Float64 ? DType::Float64 : DType::Float32)
               : (wide ? DType::Int64 : DType::Int32);
  std::string_view et = computeType(element);
  auto lit = [&](double f, int64_t i) {
    return fl ? floatLiteral(f, element) : intLiteral(i, element);
  };
  double inf = std::numeric_limits<double>::infinity();
  auto [lo, hi] = fl ? std::pair<int64_t, int64_t>{0, 0} : intLimits(t);
  int size = static_cast<int>(itemsize(element));
  auto set = [&](const char *name, const std::string &init, int bytes) {
    type = fmt::format("kiln::{}<{}>", name, et);
    identity = "{" + init + "}";
    stateBytes = bytes; // the device struct: element fields, then an int64 if any (8-aligned)
  };
  switch (k) {
  case ReductionKind::Sum:
    set("Sum", lit(0, 0), size);
    break;
  case ReductionKind::Prod:
    set("Prod", lit(1, 1), size);
    break;
  case ReductionKind::Max:
    set("Max", lit(-inf, lo), size);
    break;
  case ReductionKind::Min:
    set("Min", lit(inf, hi), size);
    break;
  case ReductionKind::ArgMax:
    set("ArgMax", lit(-inf, lo) + ", -1LL", 16);
    break;
  case ReductionKind::ArgMin:
    set("ArgMin", lit(inf, hi) + ", -1LL", 16);
    break;
  case ReductionKind::Welford:
    set("Welford", lit(0, 0) + ", " + lit(0, 0) + ", 0LL", 2 * size + 8);
    break;
  }
}

std::string Accumulator::push(const std::string &v, const std::string &position) const {
  std::string_view from = computeType(value), to = computeType(element);
  return fmt::format("acc.push({}, {});", from == to ? v : fmt::format("({}){}", to, v), position);
}

std::string Accumulator::result(size_t n, DType outType) const {
  switch (kind) {
  case ReductionKind::ArgMax:
  case ReductionKind::ArgMin:
    return "acc.index";
  case ReductionKind::Welford:
    return n == 0 ? "acc.mean" : n == 1 ? "acc.m2" : "acc.count";
  default: {
    std::string_view from = computeType(element), to = computeType(outType);
    return from == to ? "acc.acc" : fmt::format("({})acc.acc", to);
  }
  }
}

namespace {

bool unitStrideAlong(const SymInt &e, const std::string &var) {
  SymInt base = e.substitute({{var, SymInt(0)}});
  SymInt coeff = e.substitute({{var, SymInt(1)}}) - base;
  return coeff.constant() == 1 && base + coeff * SymInt::symbol(var) == e;
}

/// Thread per output when loads move with the innermost range variable but not with the
/// innermost reduction variable (a column reduction), or when nothing is reduced.
bool threadPerOutput(const LoopProgram &program, const LoopNode &node) {
  size_t k = node.ranges.size(), m = node.reductionRanges.size();
  if (m == 0)
    return true;
  if (k == 0)
    return false;
  std::string rv = reductionVarName(m - 1), iv = loopVarName(k - 1);
  bool alongR = false, alongI = false;
  for (const Expr *e : node.body->exprs()) {
    if (e->kind != ExprKind::Load)
      continue;
    alongR |= unitStrideAlong(e->index, rv);
    alongI |= unitStrideAlong(e->index, iv);
  }
  for (BufferId out : node.outputs)
    alongI &= program.buffer(out).meta.strides[k - 1].constant() == 1;
  return alongI && !alongR;
}

class ReductionEmitter {
public:
  ReductionEmitter(const NodeContext &ctx)
      : ctx_(ctx), node_(*ctx.node), acc_(node_.reduction, node_.body->dtype()) {
    for (size_t j = 0; j < node_.ranges.size(); ++j)
      rangeVars_.push_back(loopVarName(j));
    for (size_t j = 0; j < node_.reductionRanges.size(); ++j)
      reductionVars_.push_back(reductionVarName(j));
  }

  const Accumulator &accumulator() const { return acc_; }

  /// ReduceBlock or ReduceThread.
  CudaKernel whole(bool perThread) {
    CudaKernel k{
        ctx_.baseName, perThread ? KernelRole::ReduceThread : KernelRole::ReduceBlock, {}, ""};
    Writer w;
    w.open(ctx_.signature(k.name, NodeContext::Buffers::All, "", k.args));
    Names names = prologue(w, !perThread, true);
    if (perThread) {
      w.emit("const long long stride = (long long)gridDim.x * blockDim.x;");
      w.open("for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; "
             "o += stride)");
    } else {
      w.open("for (long long o = blockIdx.x; o < outputs; o += gridDim.x)");
    }
    BodyWriter body = point(w, names);
    if (perThread)
      reduceLoop(w, body, names, "0", "reduced", "1");
    else
      reduceLoop(w, body, names, "threadIdx.x", "reduced", "blockDim.x");
    if (!perThread)
      w.emit("acc = kiln::block_reduce(acc, smem, identity);");
    stores(w, names, !perThread);
    w.close();
    w.close();
    k.code = w.take();
    return k;
  }

  /// Pass 1 of a split reduction: a partial state per (output, chunk).
  CudaKernel partial() {
    CudaKernel k{ctx_.baseName + "_partial", KernelRole::ReducePartial, {}, ""};
    Writer w;
    w.open(ctx_.signature(k.name, NodeContext::Buffers::Inputs,
                          fmt::format("{} *partials, long long chunks", acc_.type), k.args));
    k.args.push_back({KernelArg::Kind::Partials, {}, ""});
    k.args.push_back({KernelArg::Kind::Chunks, {}, ""});
    w.emit("static_assert(sizeof({}) == {}, \"the launcher sizes partials by this\");", acc_.type,
           acc_.stateBytes);
    Names names = prologue(w, true, true);
    w.emit("const long long chunk = (reduced + chunks - 1) / chunks;");
    w.open("for (long long job = blockIdx.x; job < outputs * chunks; job += gridDim.x)");
    if (!node_.ranges.empty())
      w.emit("const long long o = job / chunks;");
    w.emit("const long long begin = job % chunks * chunk;");
    w.emit("const long long end = kiln::imin(reduced, begin + chunk);");
    BodyWriter body = point(w, names);
    reduceLoop(w, body, names, "begin + threadIdx.x", "end", "blockDim.x");
    w.emit("acc = kiln::block_reduce(acc, smem, identity);");
    w.open("if (threadIdx.x == 0)");
    w.emit("partials[job] = acc;");
    w.close();
    w.close();
    w.close();
    k.code = w.take();
    return k;
  }

  /// Pass 2: each output merges its chunks' partial states.
  CudaKernel final() {
    CudaKernel k{ctx_.baseName + "_final", KernelRole::ReduceFinal, {}, ""};
    Writer w;
    w.open(ctx_.signature(k.name, NodeContext::Buffers::Outputs,
                          fmt::format("const {} *partials, long long chunks", acc_.type), k.args));
    k.args.push_back({KernelArg::Kind::Partials, {}, ""});
    k.args.push_back({KernelArg::Kind::Chunks, {}, ""});
    Names names = prologue(w, true, false);
    w.open("for (long long o = blockIdx.x; o < outputs; o += gridDim.x)");
    decompose(w, "o", rangeVars_, node_.ranges, names);
    for (const std::string &v : rangeVars_)
      names[v] = v;
    w.emit("{} acc = identity;", acc_.type);
    w.open("for (long long c = threadIdx.x; c < chunks; c += blockDim.x)");
    w.emit("acc.merge(partials[o * chunks + c]);");
    w.close();
    w.emit("acc = kiln::block_reduce(acc, smem, identity);");
    stores(w, names, true);
    w.close();
    w.close();
    k.code = w.take();
    return k;
  }

private:
  /// Shared memory, the identity, `outputs` and `reduced`; returns the size names.
  Names prologue(Writer &w, bool shared, bool withReduced) {
    Names names = ctx_.sizeNames();
    if (shared)
      w.emit("__shared__ {} smem[32];", acc_.type);
    w.emit("const {} identity = {};", acc_.type, acc_.identity);
    w.emit("const long long outputs = {};", indexExpr(product(node_.ranges), names));
    if (withReduced)
      w.emit("const long long reduced = {};", indexExpr(product(node_.reductionRanges), names));
    return names;
  }

  /// The output point `o`: range variables, the body's values that do not depend on the
  /// reduction variables, and a fresh accumulator.
  BodyWriter point(Writer &w, Names &names) {
    decompose(w, "o", rangeVars_, node_.ranges, names);
    for (const std::string &v : rangeVars_)
      names[v] = v;
    BodyWriter body(w, *ctx_.program, *node_.body);
    body.emitOuter({reductionVars_.begin(), reductionVars_.end()}, names);
    w.emit("{} acc = identity;", acc_.type);
    return body;
  }

  /// `for (red = begin; red < end; red += step)`: the reduction point, the rest of the body,
  /// one push. `red` is the row-major flat position (argmax's index).
  void reduceLoop(Writer &w, BodyWriter &body, Names names, const std::string &begin,
                  const std::string &end, const std::string &step) {
    w.open(fmt::format("for (long long red = {}; red < {}; {})", begin, end,
                       step == "1" ? "++red" : "red += " + step));
    decompose(w, "red", reductionVars_, node_.reductionRanges, names);
    for (const std::string &v : reductionVars_)
      names[v] = v;
    body.emitInner(names);
    w.line(acc_.push(body.result(), "red"));
    w.close();
  }

  /// Writes the results at the current output point (only thread 0 when `block`).
  void stores(Writer &w, const Names &names, bool block) {
    if (block)
      w.open("if (threadIdx.x == 0)");
    for (size_t n = 0; n < node_.outputs.size(); ++n) {
      BufferId out = node_.outputs[n];
      if (ctx_.locals.count(out))
        continue;
      DType t = ctx_.program->buffer(out).meta.dtype;
      w.emit("{}[{}] = {};", bufferName(out), storeOffset(ctx_, out, names),
             toMemory(acc_.result(n, t), t));
    }
    if (block)
      w.close();
  }

  const NodeContext &ctx_;
  const LoopNode &node_;
  Accumulator acc_;
  std::vector<std::string> rangeVars_, reductionVars_;
};

} // namespace

NodeKernels emitReduction(const NodeContext &ctx, const CudaEmitOptions &options) {
  const LoopNode &node = *ctx.node;
  KILN_CHECK(node.reduction != ReductionKind::Welford || isFloating(node.body->dtype()),
             "cuda emitter: welford of {} values", dtypeName(node.body->dtype()));
  NodeKernels out;
  out.points = product(node.ranges);
  out.reducedPoints = product(node.reductionRanges);
  ReductionEmitter emitter(ctx);
  out.kernels.push_back(emitter.whole(threadPerOutput(*ctx.program, node)));
  std::optional<int64_t> outputs = out.points.constant();
  if (options.splitMaxOutputs > 0 && !node.reductionRanges.empty() && outputs &&
      *outputs <= options.splitMaxOutputs) {
    out.kernels.push_back(emitter.partial());
    out.kernels.push_back(emitter.final());
    out.partialStateBytes = emitter.accumulator().stateBytes;
  }
  return out;
}

} // namespace kiln::codegen::cuda::detail
