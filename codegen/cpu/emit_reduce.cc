// Reduction accumulators: identities, one update per reduced value, the horizontal merge of a
// vector accumulator, and the values stored (semantics: ir/loop/program.h).

#include "codegen/cpu/emit_impl.h"

#include "runtime/error.h"

#include <limits>

namespace kiln::codegen::cpu::detail {

using namespace ir::loop;

namespace {

/// The lowest and highest value of an integer dtype, as the signed value of its bits.
std::pair<int64_t, int64_t> intRange(DType t) {
  switch (t) {
  case DType::Bool:
    return {0, -1}; // i1: false, true
  case DType::UInt8:
    return {0, -1}; // 0, 255
  case DType::Int8:
    return {-128, 127};
  case DType::Int16:
    return {-32768, 32767};
  case DType::Int32:
    return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  default:
    return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

/// The op that folds two values of a sum/prod/max/min, and its vector.reduction kind.
struct FoldOp {
  const char *binary;
  const char *reduction;
};

FoldOp foldOp(ReductionKind kind, DType t) {
  bool fl = isFloating(t), uns = isUnsignedDType(t);
  switch (kind) {
  case ReductionKind::Sum:
    return fl ? FoldOp{"arith.addf", "add"} : FoldOp{"arith.addi", "add"};
  case ReductionKind::Prod:
    return fl ? FoldOp{"arith.mulf", "mul"} : FoldOp{"arith.muli", "mul"};
  case ReductionKind::Max:
    return fl    ? FoldOp{"arith.maximumf", "maximumf"}
           : uns ? FoldOp{"arith.maxui", "maxui"}
                 : FoldOp{"arith.maxsi", "maxsi"};
  case ReductionKind::Min:
    return fl    ? FoldOp{"arith.minimumf", "minimumf"}
           : uns ? FoldOp{"arith.minui", "minui"}
                 : FoldOp{"arith.minsi", "minsi"};
  default:
    fail(ErrorKind::Runtime, "cpu emitter: {} does not fold lane by lane", reductionKeyword(kind));
  }
}

} // namespace

Value Accumulator::identity() {
  std::string elem = computeElem(dtype_);
  double inf = std::numeric_limits<double>::infinity();
  bool fl = isFloating(dtype_);
  auto [lo, hi] = intRange(dtype_);
  switch (kind_) {
  case ReductionKind::Prod:
    return fl ? b_.floatConst(1.0, elem, lanes_) : b_.intConst(1, elem, lanes_);
  case ReductionKind::Max:
    return fl ? b_.floatConst(-inf, elem, lanes_) : b_.intConst(lo, elem, lanes_);
  case ReductionKind::Min:
    return fl ? b_.floatConst(inf, elem, lanes_) : b_.intConst(hi, elem, lanes_);
  default:
    return fl ? b_.floatConst(0.0, elem, lanes_) : b_.intConst(0, elem, lanes_);
  }
}

std::vector<Value> Accumulator::init() {
  switch (kind_) {
  case ReductionKind::ArgMax:
  case ReductionKind::ArgMin:
    return {identity(), b_.intConst(-1, "i64", lanes_)}; // best value, its position (-1: none)
  case ReductionKind::Welford:
    return {b_.floatConst(0.0, "f64", lanes_), b_.floatConst(0.0, "f64", lanes_),
            b_.floatConst(0.0, "f64")}; // mean, m2, count (the same in every lane)
  default:
    return {identity()};
  }
}

std::vector<Value> Accumulator::update(const std::vector<Value> &state, const Value &value,
                                       const std::string &position) {
  Value v = b_.broadcast(value, lanes_);
  switch (kind_) {
  case ReductionKind::ArgMax:
  case ReductionKind::ArgMin: {
    bool isMax = kind_ == ReductionKind::ArgMax;
    const Value &best = state[0], &at = state[1];
    Value first = b_.compare("arith.cmpi", "slt", at, b_.intConst(0, "i64"));
    Value better;
    if (isFloating(dtype_)) { // a NaN wins and stays; ties keep the first
      Value beats = b_.compare("arith.cmpf", isMax ? "ogt" : "olt", v, best);
      Value vNan = b_.compare("arith.cmpf", "uno", v, v);
      Value bestNotNan = b_.compare("arith.cmpf", "ord", best, best);
      better = b_.binary("arith.andi", b_.binary("arith.ori", vNan, beats), bestNotNan);
    } else {
      bool uns = isUnsignedDType(dtype_);
      better =
          b_.compare("arith.cmpi", isMax ? (uns ? "ugt" : "sgt") : (uns ? "ult" : "slt"), v, best);
    }
    Value take = b_.binary("arith.ori", first, better);
    Value pos = b_.broadcast(b_.indexToI64(position), lanes_);
    return {b_.select(take, v, best), b_.select(take, pos, at)};
  }
  case ReductionKind::Welford: {
    Value x = v.elem == "f64" ? v : b_.convert("arith.extf", v, "f64");
    const Value &mean = state[0], &m2 = state[1];
    Value n = b_.binary("arith.addf", state[2], b_.floatConst(1.0, "f64"));
    // The count is the same in every lane: one reciprocal, off the mean's dependency chain.
    Value inv = b_.binary("arith.divf", b_.floatConst(1.0, "f64"), n);
    Value delta = b_.binary("arith.subf", x, mean);
    Value nextMean = b_.binary("arith.addf", mean, b_.binary("arith.mulf", delta, inv));
    Value nextM2 = b_.binary("arith.addf", m2,
                             b_.binary("arith.mulf", delta, b_.binary("arith.subf", x, nextMean)));
    return {nextMean, nextM2, n};
  }
  default:
    return {b_.binary(foldOp(kind_, dtype_).binary, state[0], v)};
  }
}

bool Accumulator::foldsOneValue() const {
  return kind_ == ReductionKind::Sum || kind_ == ReductionKind::Prod ||
         kind_ == ReductionKind::Max || kind_ == ReductionKind::Min;
}

bool Accumulator::rounds() const { return isFloating(dtype_) && kind_ == ReductionKind::Sum; }

std::vector<Value> Accumulator::combine(const std::vector<Value> &a, const std::vector<Value> &b) {
  return {b_.binary(foldOp(kind_, dtype_).binary, a[0], b[0])};
}

Value Accumulator::reduceLanes(const char *kind, const Value &v) {
  Value folded{b_.fresh("red"), v.elem};
  b_.emit("{} = vector.reduction <{}>, {} : {} into {}", folded.name, kind, v.name, v.type(),
          v.elem);
  return folded;
}

std::vector<Value> Accumulator::mergeLanes(const std::vector<Value> &vector,
                                           const std::vector<Value> &scalar) {
  if (kind_ != ReductionKind::Welford) {
    FoldOp op = foldOp(kind_, dtype_);
    return {b_.binary(op.binary, reduceLanes(op.reduction, vector[0]), scalar[0])};
  }
  // Lanes with equal counts n: mean = avg(mean_l), m2 = sum(m2_l) + n * sum((mean_l - mean)^2);
  // then Chan et al.'s pairwise merge with the tail's statistics.
  const Value &meanL = vector[0], &m2L = vector[1], &nL = vector[2];
  Value lanes = b_.floatConst(static_cast<double>(meanL.lanes), "f64");
  Value meanV = b_.binary("arith.divf", reduceLanes("add", meanL), lanes);
  Value dev = b_.binary("arith.subf", meanL, meanV);
  Value spread = reduceLanes("add", b_.binary("arith.mulf", dev, dev));
  Value m2V = b_.binary("arith.addf", reduceLanes("add", m2L), b_.binary("arith.mulf", nL, spread));
  Value nV = b_.binary("arith.mulf", nL, lanes);
  const Value &meanT = scalar[0], &m2T = scalar[1], &nT = scalar[2];
  Value n = b_.binary("arith.addf", nV, nT);
  Value zero = b_.floatConst(0.0, "f64");
  Value safeN = b_.select(b_.compare("arith.cmpf", "oeq", n, zero), b_.floatConst(1.0, "f64"), n);
  Value delta = b_.binary("arith.subf", meanT, meanV);
  Value mean = b_.binary("arith.addf", meanV,
                         b_.binary("arith.divf", b_.binary("arith.mulf", delta, nT), safeN));
  Value cross = b_.binary("arith.divf", b_.binary("arith.mulf", nV, nT), safeN);
  Value m2 = b_.binary("arith.addf", b_.binary("arith.addf", m2V, m2T),
                       b_.binary("arith.mulf", b_.binary("arith.mulf", delta, delta), cross));
  return {mean, m2, n};
}

std::vector<Value> Accumulator::results(const std::vector<Value> &state, const std::string &count) {
  switch (kind_) {
  case ReductionKind::ArgMax:
  case ReductionKind::ArgMin:
    return {state[1]};
  case ReductionKind::Welford: {
    std::string elem = computeElem(dtype_);
    auto narrow = [&](const Value &f64) {
      return elem == "f64" ? f64 : b_.convert("arith.truncf", f64, elem);
    };
    return {narrow(state[0]), narrow(state[1]), b_.indexToI64(count)};
  }
  default:
    return {state[0]};
  }
}

} // namespace kiln::codegen::cpu::detail
