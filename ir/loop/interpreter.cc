// The reference interpreter: binding inputs and symbols, then every node, element by element.

#include "ir/loop/interpreter.h"

#include "ir/loop/binding.h"
#include "ir/loop/interpreter_impl.h"
#include "runtime/error.h"
#include "runtime/ops/linalg.h"

#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <unordered_map>

namespace kiln::ir::loop {

using detail::Elem;

namespace {

std::vector<int64_t> evaluateAll(std::span<const SymInt> syms, const SymbolValues &values) {
  std::vector<int64_t> out;
  for (const SymInt &s : syms)
    out.push_back(s.evaluate(values));
  return out;
}

/// The largest flat offset a tensor's view reaches, or -1 when it has no elements.
int64_t maxOffset(const Tensor &t) {
  int64_t m = 0;
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (t.size(k) == 0)
      return -1;
    m += (t.size(k) - 1) * t.stride(k);
  }
  return m;
}

/// Row-major iteration over the points of `extents`: calls fn(point, flatPosition).
template <typename Fn> void forEachPoint(std::span<const int64_t> extents, Fn &&fn) {
  for (int64_t e : extents)
    if (e <= 0)
      return;
  std::vector<int64_t> point(extents.size(), 0);
  for (int64_t flat = 0;; ++flat) {
    fn(std::span<const int64_t>(point), flat);
    size_t k = extents.size();
    while (k > 0 && ++point[k - 1] == extents[k - 1])
      point[--k] = 0;
    if (k == 0)
      return;
  }
}

/// Evaluates one body at the point its loop-variable slots in `symbols` hold.
class BodyEvaluator {
public:
  BodyEvaluator(const Body &body, const LoopProgram &program, const std::vector<Tensor> &tensors,
                const SymbolValues &symbols)
      : body_(body), program_(program), tensors_(tensors), symbols_(symbols),
        values_(body.exprs().size()) {
    for (const Expr *e : body.exprs())
      slots_.emplace(e, slots_.size());
  }

  Elem eval() {
    size_t n = 0;
    for (const Expr *e : body_.exprs())
      values_[n++] = evalOne(*e);
    return values_[slots_.at(body_.result())];
  }

private:
  Elem evalOne(const Expr &e) {
    switch (e.kind) {
    case ExprKind::Load:
      return load(e, e.index.evaluate(symbols_));
    case ExprKind::IndirectLoad:
      return load(e, indirectOffset(e));
    case ExprKind::Constant:
      return {e.floatValue, e.intValue};
    case ExprKind::Index:
      return {0, e.index.evaluate(symbols_)};
    case ExprKind::Cast:
      return detail::convert(value(e.operand(0)), e.operand(0)->dtype, e.dtype);
    default: {
      Elem args[3];
      for (int k = 0; k < e.numOperands; ++k)
        args[k] = value(e.operand(k));
      DType operandType = e.operand(e.kind == ExprKind::Where ? 1 : 0)->dtype;
      return detail::evalPrim(e.kind, operandType, e.dtype, {args, size_t(e.numOperands)});
    }
    }
  }

  Elem value(const Expr *e) const { return values_[slots_.at(e)]; }

  int64_t indirectOffset(const Expr &e) const {
    int64_t p = value(e.operand(0)).i, extent = e.indirectExtent.evaluate(symbols_);
    int64_t wrapped = e.wrapsNegative() && p < 0 ? p + extent : p;
    if (wrapped < 0 || wrapped >= extent)
      fail(ErrorKind::Index, "{}", indexOutOfRange(p, extent));
    return e.index.evaluate(symbols_) + wrapped * e.indirectStride.evaluate(symbols_);
  }

  Elem load(const Expr &e, int64_t offset) {
    const Tensor &t = tensors_[e.buffer.index];
    int64_t last = maxOffset(t);
    if (offset < 0 || offset > last) {
      std::string at;
      for (const auto &[name, v] : symbols_)
        at += fmt::format("{}{} = {}", at.empty() ? "" : ", ", name, v);
      fail(ErrorKind::Index,
           "loop interpreter: load {}[{}] reads offset {} outside the buffer {} (offsets 0..{}) "
           "at {}",
           bufferName(e.buffer), e.index.str(), offset, printType(program_.buffer(e.buffer).meta),
           last, at);
    }
    return detail::readElem(t, offset);
  }

  const Body &body_;
  const LoopProgram &program_;
  const std::vector<Tensor> &tensors_;
  const SymbolValues &symbols_;
  std::unordered_map<const Expr *, size_t> slots_;
  std::vector<Elem> values_;
};

/// Pointers to the loop-variable entries of `symbols`, created for `names`.
std::vector<int64_t *> loopVarSlots(SymbolValues &symbols, std::span<const IndexExpr> vars) {
  std::vector<int64_t *> slots;
  for (const IndexExpr &v : vars)
    slots.push_back(&symbols[std::string(v.symbolName())]);
  return slots;
}

int64_t storeOffset(std::span<const int64_t> point, const Tensor &out) {
  int64_t offset = 0;
  for (size_t k = 0; k < point.size(); ++k)
    offset += point[k] * out.stride(static_cast<int64_t>(k));
  return offset;
}

/// The running state of one reduction output.
struct Accumulator {
  ReductionKind kind;
  DType dtype;
  double f = 0;
  int64_t i = 0;
  Elem best;
  int64_t bestIndex = -1;
  int64_t count = 0;
  double mean = 0, m2 = 0;

  Accumulator(ReductionKind k, DType t) : kind(k), dtype(t) {
    auto [lo, hi] = detail::intLimits(t);
    double inf = std::numeric_limits<double>::infinity();
    if (kind == ReductionKind::Prod) {
      f = 1;
      i = 1;
    } else if (kind == ReductionKind::Max) {
      f = -inf;
      i = lo;
    } else if (kind == ReductionKind::Min) {
      f = inf;
      i = hi;
    }
  }

  /// Whether `v` replaces the current extreme (argmax/argmin: NaN wins, ties keep the first).
  bool beats(Elem v, bool wantMax) const {
    if (bestIndex < 0)
      return true;
    if (isFloating(dtype)) {
      if (std::isnan(best.f))
        return false;
      return std::isnan(v.f) || (wantMax ? v.f > best.f : v.f < best.f);
    }
    return wantMax ? v.i > best.i : v.i < best.i;
  }

  void add(Elem v, int64_t position) {
    bool floating = isFloating(dtype);
    switch (kind) {
    case ReductionKind::Sum: // integers wrap, as the dtype does
      if (floating)
        f += v.f;
      else
        i = static_cast<int64_t>(static_cast<uint64_t>(i) + static_cast<uint64_t>(v.i));
      break;
    case ReductionKind::Prod:
      if (floating)
        f *= v.f;
      else
        i = static_cast<int64_t>(static_cast<uint64_t>(i) * static_cast<uint64_t>(v.i));
      break;
    case ReductionKind::Max:
    case ReductionKind::Min: {
      bool isMax = kind == ReductionKind::Max;
      if (floating)
        f = std::isnan(f) || std::isnan(v.f) ? std::numeric_limits<double>::quiet_NaN()
            : isMax                          ? std::max(f, v.f)
                                             : std::min(f, v.f);
      else
        i = isMax ? std::max(i, v.i) : std::min(i, v.i);
      break;
    }
    case ReductionKind::ArgMax:
    case ReductionKind::ArgMin:
      if (beats(v, kind == ReductionKind::ArgMax)) {
        best = v;
        bestIndex = position;
      }
      break;
    case ReductionKind::Welford: {
      ++count;
      double delta = v.f - mean;
      mean += delta / static_cast<double>(count);
      m2 += delta * (v.f - mean);
      break;
    }
    }
  }

  /// The results, one per output buffer.
  std::vector<Elem> results() const {
    switch (kind) {
    case ReductionKind::ArgMax:
    case ReductionKind::ArgMin:
      KILN_CHECK_KIND(Index, bestIndex >= 0, "loop interpreter: {} over an empty reduction range",
                      reductionKeyword(kind));
      return {{0, bestIndex}};
    case ReductionKind::Welford:
      return {{detail::roundFloat(mean, dtype), 0}, {detail::roundFloat(m2, dtype), 0}, {0, count}};
    default:
      if (isFloating(dtype))
        return {{detail::roundFloat(f, dtype), 0}};
      return {{0, detail::wrapInt(i, dtype)}};
    }
  }
};

} // namespace

Interpreter::Interpreter(const LoopProgram &program) : program_(program) {
  auto binary = [](Tensor (*op)(const Tensor &, const Tensor &)) -> ExternFn {
    return [op](std::span<const Tensor> in, const Attributes &) -> std::vector<Tensor> {
      KILN_CHECK_KIND(Value, in.size() == 2, "extern op: expected 2 inputs, got {}", in.size());
      return {op(in[0], in[1])};
    };
  };
  externs_["mm"] = binary(&ops::mm);
  externs_["bmm"] = binary(&ops::bmm);
  externs_["matmul"] = binary(&ops::matmul);
}

Interpreter &Interpreter::bind(const std::string &symbol, int64_t value) {
  bound_[symbol] = value;
  return *this;
}

Interpreter &Interpreter::registerExtern(const std::string &op, ExternFn fn) {
  externs_[op] = std::move(fn);
  return *this;
}

const Tensor &Interpreter::tensor(BufferId id) const {
  program_.buffer(id); // throws for an unknown buffer
  KILN_CHECK_KIND(Value, static_cast<size_t>(id.index) < tensors_.size(),
                  "loop interpreter: {} has no tensor before run()", bufferName(id));
  return tensors_[id.index];
}

void Interpreter::bindInputs(std::span<const Tensor> inputs) {
  symbols_ = loop::bindInputs(program_, inputs, bound_,
                              {"loop interpreter", "bind() it or pass an input", false}, tensors_);
}

Tensor Interpreter::allocate(const Buffer &b) const {
  BufferLayout l = layoutOf(b, symbols_, "loop interpreter");
  Tensor storage = Tensor::empty({l.extent}, b.meta.dtype);
  storage.fill_(Scalar(int64_t{0})); // gaps between strided elements read as zero
  return storage.asStrided(l.sizes, l.strides, 0);
}

std::vector<Tensor> Interpreter::run(std::span<const Tensor> inputs) {
  tensors_.assign(program_.buffers().size(), Tensor());
  bindInputs(inputs);
  for (const Buffer &b : program_.buffers())
    if (b.kind != BufferKind::Input)
      tensors_[b.id.index] = allocate(b);
  for (const LoopNode &node : program_.nodes()) {
    switch (node.kind) {
    case LoopNodeKind::Pointwise:
      runPointwise(node);
      break;
    case LoopNodeKind::Reduction:
      runReduction(node);
      break;
    case LoopNodeKind::Extern:
      runExtern(node);
      break;
    }
  }
  std::vector<Tensor> results;
  for (BufferId id : program_.outputs())
    results.push_back(tensors_[id.index]);
  return results;
}

void Interpreter::runPointwise(const LoopNode &node) {
  SymbolValues symbols = symbols_;
  VarRanges ranges = node.varRanges();
  std::vector<int64_t *> vars = loopVarSlots(symbols, ranges.vars());
  BodyEvaluator body(*node.body, program_, tensors_, symbols);
  const Tensor &out = tensors_[node.outputs[0].index];
  forEachPoint(evaluateAll(node.ranges, symbols_), [&](std::span<const int64_t> point, int64_t) {
    for (size_t k = 0; k < point.size(); ++k)
      *vars[k] = point[k];
    detail::writeElem(out, storeOffset(point, out), body.eval());
  });
}

void Interpreter::runReduction(const LoopNode &node) {
  SymbolValues symbols = symbols_;
  VarRanges ranges = node.varRanges();
  std::vector<int64_t *> vars = loopVarSlots(symbols, ranges.vars());
  size_t numOuter = node.ranges.size();
  BodyEvaluator body(*node.body, program_, tensors_, symbols);
  std::vector<int64_t> inner = evaluateAll(node.reductionRanges, symbols_);
  forEachPoint(evaluateAll(node.ranges, symbols_), [&](std::span<const int64_t> point, int64_t) {
    for (size_t k = 0; k < numOuter; ++k)
      *vars[k] = point[k];
    Accumulator acc(node.reduction, node.body->dtype());
    forEachPoint(inner, [&](std::span<const int64_t> r, int64_t position) {
      for (size_t k = 0; k < r.size(); ++k)
        *vars[numOuter + k] = r[k];
      acc.add(body.eval(), position);
    });
    std::vector<Elem> results = acc.results();
    for (size_t n = 0; n < node.outputs.size(); ++n) {
      const Tensor &out = tensors_[node.outputs[n].index];
      detail::writeElem(out, storeOffset(point, out), results[n]);
    }
  });
}

void Interpreter::runExtern(const LoopNode &node) {
  std::vector<Tensor> inputs;
  for (BufferId id : node.externInputs)
    inputs.push_back(tensors_[id.index]);
  std::vector<Tensor> results =
      ir::loop::runExtern(externs_, program_, node, inputs, symbols_, "loop interpreter");
  for (size_t n = 0; n < results.size(); ++n)
    tensors_[node.outputs[n].index].copy_(results[n]);
}

std::vector<Tensor> interpret(const LoopProgram &program, std::span<const Tensor> inputs,
                              const SymbolValues &symbols) {
  Interpreter interp(program);
  for (const auto &[name, value] : symbols)
    interp.bind(name, value);
  return interp.run(inputs);
}

} // namespace kiln::ir::loop
