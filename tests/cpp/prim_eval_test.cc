// The shared scalar evaluator of prims and casts (ir/loop/prim_eval.h) against kiln's eager
// kernels on 0-d tensors: special values (NaN, infinities, -0.0, integer extremes, division by
// zero, signs of floordiv/mod) for every dtype a prim's type rule admits.

#include "ir/loop/prim_eval.h"
#include "ir/loop/program.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/unary_math.h"

#include <bit>
#include <cmath>
#include <functional>
#include <kiln_catch.h>
#include <limits>
#include <map>

using namespace kiln;
using namespace kiln::ir::loop;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();

const DType kFloats[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
const DType kInts[] = {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64};

/// A 0-d tensor holding `v` (a value of `t`).
Tensor zeroDim(Elem v, DType t) {
  Tensor x = Tensor::empty({}, t);
  dispatchAll(t, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>)
      x.data<T>()[0] = v.i != 0;
    else if constexpr (std::is_integral_v<T>)
      x.data<T>()[0] = static_cast<T>(v.i);
    else if constexpr (std::is_same_v<T, double>)
      x.data<T>()[0] = v.f;
    else
      x.data<T>()[0] = T(static_cast<float>(v.f));
  });
  return x;
}

Elem valueOf(const Tensor &x) {
  return dispatchAll(x.dtype(), [&]<typename T>() -> Elem {
    T v = x.data<T>()[0];
    if constexpr (std::is_integral_v<T>)
      return {0, static_cast<int64_t>(v)};
    else
      return {static_cast<double>(v), 0};
  });
}

/// Special values of dtype `t`, each a value of `t`.
std::vector<Elem> specials(DType t) {
  std::vector<Elem> out;
  if (isFloating(t)) {
    for (double v : {0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.5, 3.0, -7.0, 7.0, 0.1, 1e-40, 65504.0,
                     1e30, -1e30, kInf, -kInf, kNaN})
      out.push_back({roundFloat(v, t), 0});
  } else if (t == DType::Bool) {
    out = {{0, 0}, {0, 1}};
  } else {
    auto [lo, hi] = intLimits(t);
    for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{2}, int64_t{-2}, int64_t{3},
                      int64_t{-7}, int64_t{7}, int64_t{100}, lo, lo + 1, hi, hi - 1})
      out.push_back({0, wrapInt(v, t)});
  }
  return out;
}

bool same(Elem a, Elem b, DType t) {
  if (!isFloating(t))
    return a.i == b.i;
  if (std::isnan(a.f) || std::isnan(b.f))
    return std::isnan(a.f) && std::isnan(b.f);
  return std::bit_cast<uint64_t>(a.f) == std::bit_cast<uint64_t>(b.f); // -0.0 is not 0.0
}

using Unary = std::function<Tensor(const Tensor &)>;
using Binary = std::function<Tensor(const Tensor &, const Tensor &)>;

const std::map<ExprKind, Unary> &unaryEager() {
  static const std::map<ExprKind, Unary> m = {
      {ExprKind::Neg, ops::neg},       {ExprKind::Abs, ops::abs},
      {ExprKind::Exp, ops::exp},       {ExprKind::Log, ops::log},
      {ExprKind::Sqrt, ops::sqrt},     {ExprKind::Rsqrt, ops::rsqrt},
      {ExprKind::Tanh, ops::tanh},     {ExprKind::Sigmoid, ops::sigmoid},
      {ExprKind::Erf, ops::erf},       {ExprKind::Floor, ops::floor},
      {ExprKind::Not, ops::bitwiseNot}};
  return m;
}

const std::map<ExprKind, Binary> &binaryEager() {
  static const std::map<ExprKind, Binary> m = {
      {ExprKind::Add, [](const Tensor &a, const Tensor &b) { return ops::add(a, b); }},
      {ExprKind::Sub, [](const Tensor &a, const Tensor &b) { return ops::sub(a, b); }},
      {ExprKind::Mul, ops::mul},
      {ExprKind::Div, [](const Tensor &a, const Tensor &b) { return ops::div(a, b); }},
      {ExprKind::FloorDiv, ops::floorDivide},
      {ExprKind::Mod, ops::remainder},
      {ExprKind::Pow, ops::pow},
      {ExprKind::Max, ops::maximum},
      {ExprKind::Min, ops::minimum},
      {ExprKind::Eq, ops::eq},
      {ExprKind::Ne, ops::ne},
      {ExprKind::Lt, ops::lt},
      {ExprKind::Le, ops::le},
      {ExprKind::Gt, ops::gt},
      {ExprKind::Ge, ops::ge},
      {ExprKind::And, ops::bitwiseAnd},
      {ExprKind::Or, ops::bitwiseOr},
      {ExprKind::Xor, ops::bitwiseXor}};
  return m;
}

/// Whether the type rule of `kind` admits operands of dtype `t`.
bool admits(ExprKind kind, DType t) {
  switch (exprTypeRule(kind)) {
  case TypeRule::Numeric:
    return t != DType::Bool;
  case TypeRule::Float:
    return isFloating(t);
  case TypeRule::Bits:
    return !isFloating(t);
  case TypeRule::Int64:
    return t == DType::Int64;
  default:
    return true;
  }
}

DType resultOf(ExprKind kind, DType t) {
  return exprTypeRule(kind) == TypeRule::Compare ? DType::Bool : t;
}

std::vector<DType> allDTypes() {
  std::vector<DType> all(std::begin(kFloats), std::end(kFloats));
  all.insert(all.end(), std::begin(kInts), std::end(kInts));
  all.push_back(DType::Bool);
  return all;
}

} // namespace

TEST_CASE("prim_eval: unary prims equal the eager kernels on special values", "[prim_eval]") {
  int checked = 0;
  for (auto &[kind, eager] : unaryEager())
    for (DType t : allDTypes()) {
      if (!admits(kind, t))
        continue;
      for (Elem a : specials(t)) {
        Elem args[1] = {a};
        Elem got = evalPrim(kind, t, t, args);
        Elem want = valueOf(eager(zeroDim(a, t)));
        INFO(exprKeyword(kind) << " " << dtypeName(t) << " of " << a.f << "/" << a.i);
        CHECK(same(got, want, t));
        ++checked;
      }
    }
  CHECK(checked > 300);
}

TEST_CASE("prim_eval: binary prims equal the eager kernels on special values", "[prim_eval]") {
  int checked = 0;
  for (auto &[kind, eager] : binaryEager())
    for (DType t : allDTypes()) {
      if (!admits(kind, t))
        continue;
      for (Elem a : specials(t))
        for (Elem b : specials(t)) {
          Elem args[2] = {a, b};
          if (!primUndefined(kind, t, args).empty())
            continue; // integer division by zero: checked below
          DType r = resultOf(kind, t);
          Elem got = evalPrim(kind, t, r, args);
          Elem want = valueOf(eager(zeroDim(a, t), zeroDim(b, t)));
          INFO(exprKeyword(kind) << " " << dtypeName(t) << " of (" << a.f << "/" << a.i << ", "
                                 << b.f << "/" << b.i << ")");
          CHECK(same(got, want, r));
          ++checked;
        }
    }
  CHECK(checked > 10000);
}

TEST_CASE("prim_eval: where picks without converting", "[prim_eval]") {
  for (DType t : allDTypes())
    for (Elem a : specials(t)) {
      Elem other = isFloating(t) ? Elem{2.0, 0} : Elem{0, 1};
      Elem yes[3] = {{0, 1}, a, other}, no[3] = {{0, 0}, other, a};
      CHECK(same(evalPrim(ExprKind::Where, t, t, yes), a, t));
      CHECK(same(evalPrim(ExprKind::Where, t, t, no), a, t));
    }
}

TEST_CASE("prim_eval: philox is the generator's stream, word by word", "[prim_eval]") {
  // Wide seeds and counters that cross 2^32 (the high counter word) and the sub-block select.
  for (uint64_t seed : {uint64_t{0}, uint64_t{67280421310721}, uint64_t{0xFFFFFFFF12345678}})
    for (uint64_t counter : {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 32) - 1, uint64_t{1} << 32,
                             (uint64_t{1} << 40) + 7})
      for (uint32_t sub : {0u, 1u})
        for (int word = 0; word < 4; ++word) {
          Elem args[3] = {{0, static_cast<int64_t>(seed)},
                          {0, static_cast<int64_t>(counter)},
                          {0, int64_t{sub * 4 + word}}};
          auto want = PhiloxStream{seed, 0}.block(counter, sub)[word];
          INFO("seed " << seed << " counter " << counter << " sub " << sub << " word " << word);
          CHECK(evalPrim(ExprKind::Philox, DType::Int64, DType::Int64, args).i == int64_t{want});
        }
}

TEST_CASE("prim_eval: casts equal Tensor::to wherever they are defined", "[prim_eval]") {
  int checked = 0, undefined = 0;
  for (DType from : allDTypes())
    for (DType to : allDTypes())
      for (Elem v : specials(from)) {
        if (!convertDefined(v, from, to)) {
          ++undefined;
          continue;
        }
        INFO(dtypeName(from) << " -> " << dtypeName(to) << " of " << v.f << "/" << v.i);
        CHECK(same(convert(v, from, to), valueOf(zeroDim(v, from).to(to)), to));
        ++checked;
      }
  CHECK(checked > 1000);
  CHECK(undefined > 0);
}

TEST_CASE("prim_eval: casts of floats to integers are defined only in range", "[prim_eval]") {
  CHECK(convertDefined({127.9, 0}, DType::Float32, DType::Int8));
  CHECK(convertDefined({-128.9, 0}, DType::Float32, DType::Int8));
  CHECK_FALSE(convertDefined({128.0, 0}, DType::Float32, DType::Int8));
  CHECK_FALSE(convertDefined({-129.0, 0}, DType::Float32, DType::Int8));
  CHECK(convertDefined({-0.9, 0}, DType::Float32, DType::UInt8)); // truncates to 0
  CHECK_FALSE(convertDefined({-1.0, 0}, DType::Float32, DType::UInt8));
  CHECK_FALSE(convertDefined({256.0, 0}, DType::Float64, DType::UInt8));
  CHECK(convertDefined({-0x1p63, 0}, DType::Float64, DType::Int64));
  CHECK_FALSE(convertDefined({0x1p63, 0}, DType::Float64, DType::Int64));
  CHECK_FALSE(convertDefined({kNaN, 0}, DType::Float32, DType::Int32));
  CHECK_FALSE(convertDefined({kInf, 0}, DType::Float32, DType::Int64));
  CHECK(convertDefined({kNaN, 0}, DType::Float32, DType::Bool)); // NaN != 0
  CHECK(convertDefined({kNaN, 0}, DType::Float32, DType::Float16));
  CHECK(convertDefined({0, kMin64}, DType::Int64, DType::Int8)); // integers wrap
  CHECK(convert({kNaN, 0}, DType::Float32, DType::Bool).i == 1);
  CHECK(convert({-2.75, 0}, DType::Float64, DType::Int32).i == -2);
  CHECK(convert({300.0, 0}, DType::Float32, DType::UInt8).i == 44);
}

TEST_CASE("prim_eval: an integer converts to f32/f16/bf16 with one rounding", "[prim_eval]") {
  // 2^60 + 2^36 + 1 is just above a float halfway point; through double it lands on the halfway
  // point (the +1 is lost) and rounds to even, 2^60.
  int64_t v = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  Elem f = convert({0, v}, DType::Int64, DType::Float32);
  CHECK(f.f == std::ldexp(1.0, 60) + std::ldexp(1.0, 37));
  CHECK(same(f, valueOf(zeroDim({0, v}, DType::Int64).to(DType::Float32)), DType::Float32));
  for (DType t : {DType::Float16, DType::BFloat16})
    CHECK(same(convert({0, v}, DType::Int64, t), valueOf(zeroDim({0, v}, DType::Int64).to(t)), t));
}

TEST_CASE("prim_eval: max/min propagate NaN and pick the second zero on ties", "[prim_eval]") {
  for (DType t : kFloats) {
    Elem nz{-0.0, 0}, pz{0.0, 0}, nan{kNaN, 0}, one{1.0, 0};
    Elem a[2] = {nz, pz}, b[2] = {pz, nz}, c[2] = {one, nan}, d[2] = {nan, one};
    CHECK(!std::signbit(evalPrim(ExprKind::Max, t, t, a).f));
    CHECK(std::signbit(evalPrim(ExprKind::Max, t, t, b).f));
    CHECK(!std::signbit(evalPrim(ExprKind::Min, t, t, a).f));
    CHECK(std::signbit(evalPrim(ExprKind::Min, t, t, b).f));
    for (ExprKind k : {ExprKind::Max, ExprKind::Min}) {
      CHECK(std::isnan(evalPrim(k, t, t, c).f));
      CHECK(std::isnan(evalPrim(k, t, t, d).f));
    }
  }
}

TEST_CASE("prim_eval: floordiv and mod round toward negative infinity", "[prim_eval]") {
  auto i64 = [](ExprKind k, int64_t a, int64_t b) {
    Elem args[2] = {{0, a}, {0, b}};
    return evalPrim(k, DType::Int64, DType::Int64, args).i;
  };
  CHECK(i64(ExprKind::FloorDiv, -7, 2) == -4);
  CHECK(i64(ExprKind::Mod, -7, 2) == 1);
  CHECK(i64(ExprKind::FloorDiv, 7, -2) == -4);
  CHECK(i64(ExprKind::Mod, 7, -2) == -1);
  CHECK(i64(ExprKind::FloorDiv, kMin64, -1) == kMin64); // wraps instead of trapping
  CHECK(i64(ExprKind::Mod, kMin64, -1) == 0);
  auto f64 = [](ExprKind k, double a, double b) {
    Elem args[2] = {{a, 0}, {b, 0}};
    return evalPrim(k, DType::Float64, DType::Float64, args).f;
  };
  CHECK(f64(ExprKind::FloorDiv, -7.5, 2) == -4);
  CHECK(f64(ExprKind::Mod, -7.5, 2) == 0.5);
  CHECK(f64(ExprKind::Mod, 7.5, -2) == -0.5);
  CHECK(std::signbit(f64(ExprKind::Mod, -4, 2))); // fmod's zero keeps the dividend's sign
  CHECK(std::signbit(f64(ExprKind::FloorDiv, -0.5, 2)));
  CHECK(f64(ExprKind::FloorDiv, 1, 0) == kInf);
  CHECK(std::isnan(f64(ExprKind::Mod, 1, 0)));
}

TEST_CASE("prim_eval: integer division by zero has no value", "[prim_eval]") {
  for (DType t : kInts)
    for (ExprKind k : {ExprKind::FloorDiv, ExprKind::Mod}) {
      Elem args[2] = {{0, 7}, {0, 0}};
      CHECK(primUndefined(k, t, args) == fmt::format("integer {} by zero", exprKeyword(k)));
      CHECK_THROWS_AS(evalPrim(k, t, t, args), Error);
      CHECK_THROWS_AS(ops::floorDivide(zeroDim({0, 7}, t), zeroDim({0, 0}, t)), Error);
      Elem ok[2] = {{0, 7}, {0, 2}};
      CHECK(primUndefined(k, t, ok).empty());
    }
  Elem fargs[2] = {{7.0, 0}, {0.0, 0}};
  CHECK(primUndefined(ExprKind::FloorDiv, DType::Float32, fargs).empty());
}

TEST_CASE("prim_eval: integer pow squares and wraps; negative exponents truncate", "[prim_eval]") {
  auto pow = [](int64_t a, int64_t b, DType t = DType::Int64) {
    Elem args[2] = {{0, a}, {0, b}};
    return evalPrim(ExprKind::Pow, t, t, args).i;
  };
  CHECK(pow(3, 4) == 81);
  CHECK(pow(2, 63) == kMin64);
  CHECK(pow(2, 64) == 0);
  CHECK(pow(3, 5, DType::Int8) == wrapInt(243, DType::Int8));
  CHECK(pow(1, -5) == 1);
  CHECK(pow(-1, -5) == -1);
  CHECK(pow(-1, -4) == 1);
  CHECK(pow(2, -1) == 0);
  CHECK(pow(0, 0) == 1);
  CHECK(pow(kMax64, 2) == 1);
}

TEST_CASE("prim_eval: f32 prims compute in float like the kernels", "[prim_eval]") {
  // pow(1.1f, 80.3f): powf and pow-then-round differ; the kernel calls powf.
  int differ = 0;
  for (float base = 1.01f; base < 3.0f; base += 0.0137f)
    for (float e : {7.3f, 31.7f, 80.3f, -13.1f}) {
      Elem args[2] = {{base, 0}, {e, 0}};
      Elem got = evalPrim(ExprKind::Pow, DType::Float32, DType::Float32, args);
      CHECK(got.f == static_cast<double>(std::pow(base, e)));
      differ += got.f != static_cast<double>(static_cast<float>(std::pow(double(base), double(e))));
    }
  INFO("float and double pow differed in " << differ << " cases");
  SUCCEED();
}

TEST_CASE("prim_eval: literals round like casts", "[prim_eval]") {
  int64_t v = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  LoopProgram p;
  std::vector<ir::SymInt> one{ir::SymInt(1)};
  for (DType t : kFloats) {
    p.pointwise(one, [&](Ops &ops, std::span<const IndexExpr>) { return ops.constant(v, t); });
    const Expr *c = p.nodes().back().body->result();
    INFO(dtypeName(t));
    CHECK(same({c->floatValue, 0}, convert({0, v}, DType::Int64, t), t));
    CHECK(same({c->floatValue, 0}, valueOf(zeroDim({0, v}, DType::Int64).to(t)), t));
  }
}
