// Double-precision exp and log as vector arithmetic. MLIR's polynomial approximations cover
// f32 only, and LLVM turns a vector `llvm.exp.v8f64` into eight scalar libm calls: NumPy
// programs (float64 throughout) would then run their exp and log at libm's scalar speed.

#include "codegen/cpu/emit_impl.h"
#include "runtime/error.h"

#include <dlfcn.h>
#include <fmt/ranges.h>

#include <bit>
#include <limits>
#include <optional>

namespace kiln::codegen::cpu::detail {

namespace {

Value fma64(Builder &b, const Value &x, const Value &y, const Value &z) {
  int lanes = std::max({x.lanes, y.lanes, z.lanes});
  Value r{b.fresh(), "f64", lanes};
  b.emit("{} = math.fma {}, {}, {} : {}", r.name, b.broadcast(x, lanes).name,
         b.broadcast(y, lanes).name, b.broadcast(z, lanes).name, r.type());
  return r;
}

/// 2^n for i64 lanes n with exponent n + 1023 in [1, 2046].
Value pow2(Builder &b, const Value &n) {
  Value biased = b.binary("arith.addi", n, b.intConst(1023, "i64"));
  return b.convert("arith.bitcast", b.binary("arith.shli", biased, b.intConst(52, "i64")), "f64");
}

} // namespace

/// exp(x): x = n ln2 + r by Cody-Waite with fdlibm's two-part ln2 (n ln2_hi is exact), exp(r)
/// by its Taylor series to r^13 on |r| <= ln2/2 (truncation below 1e-17, Horner with FMA), then
/// times 2^n built from exponent bits in two halves, so results that are subnormal, overflow
/// to inf (x > 709.78) or underflow to 0 (x < -745.13) come out as libm's. NaN stays NaN.
Value exp64(Builder &b, const Value &x) {
  auto k = [&](double v) { return b.floatConst(v, "f64"); };
  Value xc = b.binary("arith.minimumf", b.binary("arith.maximumf", x, k(-746.0)), k(710.0));
  Value n = b.unary("math.roundeven", b.binary("arith.mulf", xc, k(1.4426950408889634)));
  Value negN = b.unary("arith.negf", n);
  Value r = fma64(b, negN, k(std::bit_cast<double>(0x3FE62E42FEE00000ull)), xc);
  r = fma64(b, negN, k(std::bit_cast<double>(0x3DEA39EF35793C76ull)), r);
  double factorial = 1.0;
  for (int i = 1; i <= 13; ++i)
    factorial *= i;
  Value p = k(1.0 / factorial);
  for (int i = 12; i >= 0; --i) {
    factorial /= (i + 1);
    p = fma64(b, p, r, k(1.0 / factorial));
  }
  Value ni = b.convert("arith.fptosi", n, "i64");
  Value half = b.binary("arith.shrsi", ni, b.intConst(1, "i64"));
  Value rest = b.binary("arith.subi", ni, half);
  Value y = b.binary("arith.mulf", b.binary("arith.mulf", p, pow2(b, half)), pow2(b, rest));
  return b.select(b.compare("arith.cmpf", "uno", x, x), x, y);
}

/// log(x): x = 2^e m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^54 first), then
/// fdlibm's log1p kernel: f = m - 1, s = f / (2 + f), log(m) = f - hfsq + s (hfsq + R(s^2)) with
/// its minimax R, plus e ln2 in two parts. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
Value log64(Builder &b, const Value &x) {
  auto k = [&](double v) { return b.floatConst(v, "f64"); };
  auto i64 = [&](int64_t v) { return b.intConst(v, "i64"); };
  Value subnormal = b.compare("arith.cmpf", "olt", x, k(std::numeric_limits<double>::min()));
  Value xs = b.select(subnormal, b.binary("arith.mulf", x, k(18014398509481984.0)), x);
  Value bits = b.convert("arith.bitcast", xs, "i64");
  // Shift the mantissa so that m lands in [sqrt(1/2), sqrt(2)): add the bits of
  // 1 - sqrt(1/2) below the exponent before taking the exponent out (musl's log).
  Value shifted = b.binary("arith.subi", bits, i64(0x3FE6A09E667F3BCDll));
  Value e = b.binary("arith.subi", b.binary("arith.shrsi", shifted, i64(52)),
                     b.select(subnormal, i64(54), i64(0)));
  Value mbits = b.binary("arith.addi", b.binary("arith.andi", shifted, i64(0x000FFFFFFFFFFFFFll)),
                         i64(0x3FE6A09E667F3BCDll));
  Value m = b.convert("arith.bitcast", mbits, "f64");
  Value f = b.binary("arith.subf", m, k(1.0));
  Value s = b.binary("arith.divf", f, b.binary("arith.addf", k(2.0), f));
  Value z = b.binary("arith.mulf", s, s);
  Value w = b.binary("arith.mulf", z, z);
  // fdlibm's Lg1..Lg7: R(z) = t1 + t2, even and odd powers of w = z^2 evaluated apart.
  Value lg[8] = {{},
                 k(6.666666666666735130e-01),
                 k(3.999999999940941908e-01),
                 k(2.857142874366239149e-01),
                 k(2.222219843214978396e-01),
                 k(1.818357216161805012e-01),
                 k(1.531383769920937332e-01),
                 k(1.479819860511658591e-01)};
  Value t1 = b.binary("arith.mulf", w, fma64(b, fma64(b, w, lg[6], lg[4]), w, lg[2]));
  Value t2 =
      b.binary("arith.mulf", z, fma64(b, fma64(b, fma64(b, w, lg[7], lg[5]), w, lg[3]), w, lg[1]));
  Value rs = b.binary("arith.addf", t2, t1);
  Value hfsq = b.binary("arith.mulf", k(0.5), b.binary("arith.mulf", f, f));
  Value dk = b.convert("arith.sitofp", e, "f64");
  // log(m) + e ln2 = e ln2_hi - ((hfsq - (s (hfsq + R) + e ln2_lo)) - f)
  Value eLn2Lo = b.binary("arith.mulf", dk, k(1.90821492927058770002e-10));
  Value inner = fma64(b, s, b.binary("arith.addf", hfsq, rs), eLn2Lo);
  Value y = fma64(b, dk, k(6.93147180369123816490e-01),
                  b.binary("arith.subf", f, b.binary("arith.subf", hfsq, inner)));
  Value inf = k(std::numeric_limits<double>::infinity());
  y = b.select(b.compare("arith.cmpf", "oeq", x, k(0.0)), b.unary("arith.negf", inf), y);
  y = b.select(b.compare("arith.cmpf", "oeq", x, inf), inf, y);
  Value invalid = b.compare("arith.cmpf", "ult", x, k(0.0)); // negative or NaN
  return b.select(invalid, k(std::numeric_limits<double>::quiet_NaN()), y);
}

bool vectorLibmAvailable() {
  // The JIT resolves kernel symbols in the process: libmvec must be loaded globally. Kernels
  // built into kilnc libraries link it (-lmvec).
  static const bool loaded = dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr;
  return loaded;
}

/// The C library name of a math prim (loop.def's KILN_LOOP_MATH rows, and pow).
std::string_view libmName(ExprKind kind) {
  switch (kind) {
#define KILN_LOOP_MATH(E, M, K, N, MLIR, C, COST)                                                  \
  case ExprKind::E:                                                                                \
    return #C;
#include "ir/loop/loop.def"
  case ExprKind::Pow:
    return "pow";
  default:
    return {};
  }
}

std::string_view vectorLibmFunction(ExprKind kind) {
  // exp and log are arithmetic here (exp64, log64), sqrt one instruction; cheap rows (floor,
  // copysign, ...) are instructions too. libmvec has every other costly row and pow.
  if (!isTranscendental(kind) || kind == ExprKind::Exp || kind == ExprKind::Log ||
      kind == ExprKind::Sqrt || kind == ExprKind::Rsqrt || kind == ExprKind::Sigmoid ||
      kind == ExprKind::Philox)
    return {};
  return libmName(kind);
}

std::optional<Value> vectorLibmCall(Builder &b, ExprKind kind, std::span<const Value> args) {
  std::string_view fn = vectorLibmFunction(kind);
  int lanes = 0;
  for (const Value &a : args)
    lanes = std::max(lanes, a.lanes);
  const std::string &elem = args[0].elem;
  // f32 math is polynomial (lowering.cc) except erfc, which MLIR has no op for.
  bool f32 = elem == "f32" && kind == ExprKind::Erfc;
  // glibc's vector ABI names by register width: b = SSE, d = AVX2, e = AVX-512.
  int bits = lanes * (f32 ? 32 : 64);
  char isa = bits == 128 ? 'b' : bits == 256 ? 'd' : bits == 512 ? 'e' : 0;
  if (fn.empty() || isa == 0 || (elem != "f64" && !f32) || !vectorLibmAvailable())
    return std::nullopt;
  std::string name = fmt::format("_ZGV{}N{}{}_{}{}", isa, lanes, std::string(args.size(), 'v'), fn,
                                 f32 ? "f" : "");
  std::string vec = fmt::format("vector<{}x{}>", lanes, elem);
  std::vector<std::string> names, types;
  for (const Value &a : args) {
    names.push_back(b.broadcast(a, lanes).name);
    types.push_back(vec);
  }
  std::string signature = fmt::format("({}) -> {}", fmt::join(types, ", "), vec);
  b.externals()[name] = signature;
  Value r{b.fresh(), elem, lanes};
  b.emit("{} = func.call @{}({}) : {}", r.name, name, fmt::join(names, ", "), signature);
  return r;
}

Value scalarLibmCall(Builder &b, ExprKind kind, const Value &x) {
  KILN_CHECK(!x.isVector(), "cpu emitter: {} of a vector without libmvec", libmName(kind));
  std::string name = fmt::format("{}{}", libmName(kind), x.elem == "f32" ? "f" : "");
  std::string signature = fmt::format("({}) -> {}", x.elem, x.elem);
  b.externals()[name] = signature;
  Value r{b.fresh(), x.elem, 0};
  b.emit("{} = func.call @{}({}) : {}", r.name, name, x.name, signature);
  return r;
}

std::optional<Value> powByConstant(Builder &b, const Value &x, double y) {
  auto k = [&](double v) { return b.floatConst(v, x.elem); };
  auto mul = [&](const Value &p, const Value &q) { return b.binary("arith.mulf", p, q); };
  auto inv = [&](const Value &p) { return b.binary("arith.divf", k(1.0), p); };
  // sqrt(-0) is -0 and sqrt(-inf) NaN where pow gives +0 and +inf (or 0): adding +0 and a
  // select on -inf keep pow's results.
  auto root = [&] { return b.binary("arith.addf", b.unary("math.sqrt", x), k(0.0)); };
  auto atNegInf = [&](const Value &r, double v) {
    return b.select(b.compare("arith.cmpf", "oeq", x, k(-std::numeric_limits<double>::infinity())),
                    k(v), r);
  };
  double inf = std::numeric_limits<double>::infinity();
  if (y == 2.0)
    return mul(x, x);
  if (y == 3.0)
    return mul(mul(x, x), x);
  if (y == -1.0)
    return inv(x);
  if (y == -2.0)
    return inv(mul(x, x));
  if (y == 0.5)
    return atNegInf(root(), inf);
  if (y == -0.5)
    return atNegInf(inv(root()), 0.0);
  if (y == 1.5)
    return atNegInf(mul(x, root()), inf);
  if (y == -1.5)
    return atNegInf(inv(mul(x, root())), 0.0);
  return std::nullopt;
}

} // namespace kiln::codegen::cpu::detail
