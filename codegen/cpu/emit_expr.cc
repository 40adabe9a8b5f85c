// A body's expression DAG as arith/math ops, scalar or vector: loads, stores, casts and prims.

#include "codegen/cpu/emit_impl.h"

#include "runtime/error.h"

#include <limits>

namespace kiln::codegen::cpu::detail {

using namespace ir::loop;

namespace {

Value zeroLike(Builder &b, const Value &like) {
  return isFloatElem(like.elem) ? b.floatConst(0.0, like.elem) : b.intConst(0, like.elem);
}

/// bfloat16 bits (i16) → f32: the bits are the top half of the float.
Value bf16ToF32(Builder &b, const Value &bits) {
  Value wide = b.convert("arith.extui", bits, "i32");
  Value shifted = b.binary("arith.shli", wide, b.intConst(16, "i32"));
  return b.convert("arith.bitcast", shifted, "f32");
}

/// f32 → bfloat16 bits (i16), rounding to nearest even; NaN becomes the quiet NaN 0x7fc0.
Value f32ToBf16(Builder &b, const Value &f) {
  Value u = b.convert("arith.bitcast", f, "i32");
  Value lsb = b.binary("arith.andi", b.binary("arith.shrui", u, b.intConst(16, "i32")),
                       b.intConst(1, "i32"));
  Value rounded = b.binary("arith.addi", u, b.binary("arith.addi", lsb, b.intConst(0x7fff, "i32")));
  Value top =
      b.convert("arith.trunci", b.binary("arith.shrui", rounded, b.intConst(16, "i32")), "i16");
  Value isNan = b.compare("arith.cmpf", "uno", f, f);
  return b.select(isNan, b.intConst(0x7fc0, "i16"), top);
}

/// A value of `to`'s compute type rounded to `to` (float16/bfloat16 round through memory form).
Value roundTo(Builder &b, const Value &f32, DType to) {
  if (to == DType::Float16)
    return b.convert("arith.extf", b.convert("arith.truncf", f32, "f16"), "f32");
  if (to == DType::BFloat16)
    return bf16ToF32(b, f32ToBf16(b, f32));
  return f32;
}

Value fromMemory(Builder &b, const Value &v, DType t) {
  switch (t) {
  case DType::Bool:
    return b.compare("arith.cmpi", "ne", v, b.intConst(0, "i8"));
  case DType::Float16:
    return b.convert("arith.extf", v, "f32");
  case DType::BFloat16:
    return bf16ToF32(b, v);
  default:
    return v;
  }
}

Value toMemory(Builder &b, const Value &v, DType t) {
  switch (t) {
  case DType::Bool:
    return b.convert("arith.extui", v, "i8");
  case DType::Float16:
    return b.convert("arith.truncf", v, "f16");
  case DType::BFloat16:
    return f32ToBf16(b, v);
  default:
    return v;
  }
}

Value iota(Builder &b, int lanes) {
  std::string items;
  for (int k = 0; k < lanes; ++k)
    items += fmt::format("{}{}", k ? ", " : "", k);
  Value r{b.fresh("iota"), "i64", lanes};
  b.emit("{} = arith.constant dense<[{}]> : {}", r.name, items, r.type());
  return r;
}

/// `base + coeff * [0, 1, ..., lanes-1]` as i64 lanes (index arguments).
Value laneOffsets(Builder &b, const std::string &base, const std::string &coeff, int lanes) {
  Value c = b.indexToI64(coeff);
  Value steps = b.binary("arith.muli", iota(b, lanes), c);
  return b.binary("arith.addi", b.broadcast(b.indexToI64(base), lanes), steps);
}

/// Python floor division of integers; a zero divisor gives an unspecified value instead of a
/// trap, a divisor of -1 wraps (INT_MIN floordiv -1 == INT_MIN) like the interpreter.
Value intFloorDivMod(Builder &b, ExprKind kind, bool isUnsigned, Value a, Value d) {
  int lanes = std::max(a.lanes, d.lanes);
  a = b.broadcast(a, lanes);
  d = b.broadcast(d, lanes);
  Value zero = b.intConst(0, a.elem), one = b.intConst(1, a.elem);
  Value isZero = b.compare("arith.cmpi", "eq", d, zero);
  if (isUnsigned) {
    Value safe = b.select(isZero, one, d);
    return b.binary(kind == ExprKind::FloorDiv ? "arith.divui" : "arith.remui", a, safe);
  }
  Value minusOne = b.intConst(-1, a.elem);
  Value isMinusOne = b.compare("arith.cmpi", "eq", d, minusOne);
  Value safe = b.select(b.binary("arith.ori", isZero, isMinusOne), one, d);
  if (kind == ExprKind::FloorDiv)
    return b.select(isMinusOne, b.binary("arith.subi", zero, a),
                    b.binary("arith.floordivsi", a, safe));
  Value r = b.binary("arith.remsi", a, safe);
  Value fix = b.binary("arith.andi", b.compare("arith.cmpi", "ne", r, zero),
                       b.binary("arith.xori", b.compare("arith.cmpi", "slt", r, zero),
                                b.compare("arith.cmpi", "slt", d, zero)));
  return b.binary("arith.addi", r, b.select(fix, d, zero));
}

/// Python mod of floats: fmod, moved to the divisor's sign.
Value floatMod(Builder &b, const Value &a, const Value &d) {
  Value zero = b.floatConst(0.0, a.elem);
  Value r = b.binary("arith.remf", a, d);
  Value fix = b.binary("arith.andi", b.compare("arith.cmpf", "une", r, zero),
                       b.binary("arith.xori", b.compare("arith.cmpf", "olt", r, zero),
                                b.compare("arith.cmpf", "olt", d, zero)));
  return b.binary("arith.addf", r, b.select(fix, d, zero));
}

/// torch's div_floor for floats (see interpreter_eval.cc).
Value floatFloorDiv(Builder &b, const Value &a, const Value &d) {
  Value zero = b.floatConst(0.0, a.elem), one = b.floatConst(1.0, a.elem);
  Value q = b.binary("arith.divf", a, d);
  Value m = b.binary("arith.remf", a, d);
  Value div = b.binary("arith.divf", b.binary("arith.subf", a, m), d);
  Value fix = b.binary("arith.andi", b.compare("arith.cmpf", "une", m, zero),
                       b.binary("arith.xori", b.compare("arith.cmpf", "olt", d, zero),
                                b.compare("arith.cmpf", "olt", m, zero)));
  div = b.select(fix, b.binary("arith.subf", div, one), div);
  Value f = b.unary("math.floor", div);
  Value up =
      b.compare("arith.cmpf", "ogt", b.binary("arith.subf", div, f), b.floatConst(0.5, a.elem));
  Value r = b.select(up, b.binary("arith.addf", f, one), f);
  Value signedZero = b.binary("math.copysign", zero, q);
  r = b.select(b.compare("arith.cmpf", "oeq", div, zero), signedZero, r);
  return b.select(b.compare("arith.cmpf", "oeq", d, zero), q, r);
}

/// Integer power by squaring over the exponent's 64 bits; a negative exponent gives 1/a
/// truncated, as prim_eval and eager do: 1 for a == 1, +-1 for a == -1, else 0.
Value intPow(Builder &b, Value base, Value exp, bool isUnsigned) {
  int lanes = std::max(base.lanes, exp.lanes);
  base = b.broadcast(base, lanes);
  exp = b.broadcast(exp, lanes);
  Value one = b.intConst(1, base.elem, lanes);
  std::vector<Value> r =
      b.forLoop(b.indexConst(0), b.indexConst(64), b.indexConst(1), {one, base, exp},
                [&](const std::string &, const std::vector<Value> &s) -> std::vector<Value> {
                  Value odd = b.compare("arith.cmpi", "ne",
                                        b.binary("arith.andi", s[2], b.intConst(1, s[2].elem)),
                                        b.intConst(0, s[2].elem));
                  Value acc = b.select(odd, b.binary("arith.muli", s[0], s[1]), s[0]);
                  return {acc, b.binary("arith.muli", s[1], s[1]),
                          b.binary("arith.shrui", s[2], b.intConst(1, s[2].elem))};
                });
  if (isUnsigned) // an exponent of 128 or more is not negative
    return r[0];
  Value zero = b.intConst(0, exp.elem), minusOne = b.intConst(-1, base.elem);
  Value negative = b.compare("arith.cmpi", "slt", exp, zero);
  Value oddExp =
      b.compare("arith.cmpi", "ne", b.binary("arith.andi", exp, b.intConst(1, exp.elem)), zero);
  Value inverse =
      b.select(b.compare("arith.cmpi", "eq", base, one), one,
               b.select(b.compare("arith.cmpi", "eq", base, minusOne),
                        b.select(oddExp, minusOne, one), b.intConst(0, base.elem, lanes)));
  return b.select(negative, inverse, r[0]);
}

/// `a * b + c` with one rounding (math.fma), broadcasting scalar operands.
Value fma(Builder &b, Value x, Value y, Value z) {
  int lanes = std::max({x.lanes, y.lanes, z.lanes});
  x = b.broadcast(x, lanes);
  y = b.broadcast(y, lanes);
  z = b.broadcast(z, lanes);
  Value r{b.fresh(), x.elem, lanes};
  b.emit("{} = math.fma {}, {}, {} : {}", r.name, x.name, y.name, z.name, r.type());
  return r;
}

/// `cond ? slow() : fast` decided once for all lanes: the slow path runs (in an scf.if) only
/// when some lane needs it, so a rare argument does not cost every vector a libm call.
template <typename Slow>
Value unlessAny(Builder &b, const Value &cond, const Value &fast, Slow slow) {
  std::string any = cond.name;
  if (cond.isVector()) {
    any = b.fresh("any");
    b.emit("{} = vector.reduction <or>, {} : {} into i1", any, cond.name, cond.type());
  }
  std::string res = b.fresh("r");
  b.open(fmt::format("{} = scf.if {} -> ({}) {{", res, any, fast.type()));
  Value s = b.broadcast(slow(), fast.lanes);
  Value mixed = b.select(cond, s, fast);
  b.emit("scf.yield {} : {}", mixed.name, mixed.type());
  b.close("} else {");
  b.open("");
  b.emit("scf.yield {} : {}", fast.name, fast.type());
  b.close("}");
  return Value{res, fast.elem, fast.lanes};
}

/// `f` of single-precision `x` computed in double precision (libm, correctly rounded enough).
Value throughF64(Builder &b, std::string_view op, std::span<const Value> args) {
  std::vector<Value> wide;
  for (const Value &a : args)
    wide.push_back(b.convert("arith.extf", a, "f64"));
  Value r = wide.size() == 1 ? b.unary(op, wide[0]) : b.binary(op, wide[0], wide[1]);
  return b.convert("arith.truncf", r, "f32");
}

/// Single-precision sin or cos accurate to about 1 ulp (MLIR's polynomial
/// reduces by pi/2 in one step and loses 1e-5 absolute at |x| = 200, where positional encodings
/// and rotary embeddings evaluate them): x = q * pi/2 + r by a three-part Cody-Waite reduction
/// with FMA, then Cephes' minimax polynomials on [-pi/4, pi/4], chosen and signed by q mod 4;
/// lanes past |x| = 1e5, where that reduction runs out of bits, go to libm in double precision.
Value sinCos32(Builder &b, Value x, bool cosine) {
  auto k = [&](double v) { return b.floatConst(v, "f32"); };
  Value q = b.unary("math.roundeven", b.binary("arith.mulf", x, k(0.6366197723675814)));
  Value negQ = b.unary("arith.negf", q);
  Value r = fma(b, negQ, k(1.5707963705062866), x);
  r = fma(b, negQ, k(-4.371138828673793e-08), r);
  r = fma(b, negQ, k(-1.7151245100058819e-15), r);
  Value n = b.convert("arith.fptosi", q, "i32");
  if (cosine)
    n = b.binary("arith.addi", n, b.intConst(1, "i32"));
  Value r2 = b.binary("arith.mulf", r, r);
  Value sinPoly =
      fma(b, fma(b, k(-1.9515295891e-4), r2, k(8.3321608736e-3)), r2, k(-1.6666654611e-1));
  sinPoly = fma(b, b.binary("arith.mulf", sinPoly, r2), r, r);
  Value cosPoly = fma(b, fma(b, k(2.443315711809948e-5), r2, k(-1.388731625493765e-3)), r2,
                      k(4.166664568298827e-2));
  cosPoly = fma(b, b.binary("arith.mulf", cosPoly, r2), r2, fma(b, k(-0.5), r2, k(1.0)));
  Value zero = b.intConst(0, "i32");
  Value odd = b.compare("arith.cmpi", "ne", b.binary("arith.andi", n, b.intConst(1, "i32")), zero);
  Value flip = b.compare("arith.cmpi", "ne", b.binary("arith.andi", n, b.intConst(2, "i32")), zero);
  Value v = b.select(odd, cosPoly, sinPoly);
  v = b.select(flip, b.unary("arith.negf", v), v);
  if (!cosine) // sin(-0.0) is -0.0; the reduction's fma makes it +0.0
    v = b.select(b.compare("arith.cmpf", "oeq", x, b.floatConst(0.0, "f32")), x, v);
  // Past 1e5 (and for infinities) the reduction loses bits: those lanes take libm in f64.
  Value large = b.compare("arith.cmpf", "ugt", b.unary("math.absf", x), k(1e5));
  Value arg[1] = {x};
  return unlessAny(b, large, v,
                   [&] { return throughF64(b, cosine ? "math.cos" : "math.sin", arg); });
}

/// A math function of loop.def's KILN_LOOP_MATH rows as its MLIR op. The polynomial
/// approximations of lowering.cc are not exact where these need it: f32 sin and cos are
/// sinCos32, asin and acos become atan2
/// of the exact square root (MLIR's asin polynomial is off by 1e-4 and undefined past |x| = 1),
/// and atan2 keeps y's sign, C's results for two zeros (the polynomial gives NaN) and takes libm
/// for infinite operands.
Value emitMath(Builder &b, ExprKind kind, std::string_view op, std::span<const Value> args) {
  if (kind == ExprKind::Exp && args[0].elem == "f64")
    return exp64(b, args[0]);
  if (kind == ExprKind::Log && args[0].elem == "f64")
    return log64(b, args[0]);
  if ((kind == ExprKind::Exp || kind == ExprKind::Expm1) && args[0].elem == "f32") {
    // The polynomial converts x / ln 2 to an integer, which LLVM folds to poison for a NaN it
    // sees as a constant (exp(-inf - -inf) in a fully masked softmax row): NaN stays NaN.
    const Value &x = args[0];
    std::optional<Value> vec = vectorLibmCall(b, kind, args);
    return b.select(b.compare("arith.cmpf", "uno", x, x), x, vec ? *vec : b.unary(op, x));
  }
  if (kind != ExprKind::Atan2 && kind != ExprKind::Asin && kind != ExprKind::Acos)
    if (std::optional<Value> r = vectorLibmCall(b, kind, args))
      return *r;
  if (kind == ExprKind::Erfc) // no MLIR op (1 - erf loses the tail): libm per element
    return scalarLibmCall(b, kind, args[0]);
  if ((kind == ExprKind::Sin || kind == ExprKind::Cos) && args[0].elem == "f32")
    return sinCos32(b, args[0], kind == ExprKind::Cos);
  if (kind == ExprKind::Asin || kind == ExprKind::Acos) {
    const Value &x = args[0];
    Value one = b.floatConst(1.0, x.elem);
    Value root = b.unary("math.sqrt", b.binary("arith.mulf", b.binary("arith.subf", one, x),
                                               b.binary("arith.addf", one, x)));
    Value yx[2] = {kind == ExprKind::Asin ? x : root, kind == ExprKind::Asin ? root : x};
    return emitMath(b, ExprKind::Atan2, "math.atan2", yx);
  }
  if (kind == ExprKind::Atan2) {
    const Value &y = args[0], &x = args[1];
    std::optional<Value> vec = vectorLibmCall(b, kind, args);
    Value r = vec ? *vec : b.binary("math.atan2", y, x);
    Value zero = b.floatConst(0.0, y.elem);
    Value bothZero = b.binary("arith.andi", b.compare("arith.cmpf", "oeq", y, zero),
                              b.compare("arith.cmpf", "oeq", x, zero));
    Value xNegative = b.compare("arith.cmpf", "olt",
                                b.binary("math.copysign", b.floatConst(1.0, x.elem), x), zero);
    Value pi = b.binary("math.copysign", b.floatConst(3.14159265358979323846, y.elem), y);
    r = b.select(bothZero, b.select(xNegative, pi, b.broadcast(y, r.lanes)), r);
    r = b.binary("math.copysign", r, y); // atan2 has y's sign, signed zeros included
    if (y.elem != "f32")
      return r;
    Value inf = b.floatConst(std::numeric_limits<double>::infinity(), "f32");
    Value infinite =
        b.binary("arith.ori", b.compare("arith.cmpf", "oeq", b.unary("math.absf", y), inf),
                 b.compare("arith.cmpf", "oeq", b.unary("math.absf", x), inf));
    return unlessAny(b, infinite, r, [&] { return throughF64(b, "math.atan2", args); });
  }
  return args.size() == 1 ? b.unary(op, args[0]) : b.binary(op, args[0], args[1]);
}

/// The `philox` prim on i64 lanes holding 32-bit words: the ten Philox4x32-10 rounds of
/// runtime/philox.h, each 32x32-bit product taken whole in 64 bits (LLVM sees the zero high
/// halves and multiplies with vpmuludq), then the selected word.
Value emitPhilox(Builder &b, std::span<const Value> args) {
  int lanes = std::max({args[0].lanes, args[1].lanes, args[2].lanes});
  auto shr = [&](const Value &v, int k) {
    return b.binary("arith.shrui", v, b.intConst(k, "i64"));
  };
  Value mask = b.intConst(0xffffffffll, "i64");
  auto low = [&](const Value &v) { return b.binary("arith.andi", v, mask); };
  auto xor3 = [&](const Value &x, const Value &y, const Value &z) {
    return b.binary("arith.xori", b.binary("arith.xori", x, y), z);
  };
  Value key = args[0], counter = b.broadcast(args[1], lanes), select = args[2];
  Value k0 = low(key), k1 = shr(key, 32);
  std::array<Value, 4> c = {low(counter), shr(counter, 32), b.broadcast(shr(select, 2), lanes),
                            b.broadcast(b.intConst(0, "i64"), lanes)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = low(b.binary("arith.addi", k0, b.intConst(0x9E3779B9ll, "i64")));
      k1 = low(b.binary("arith.addi", k1, b.intConst(0xBB67AE85ll, "i64")));
    }
    Value p0 = b.binary("arith.muli", c[0], b.intConst(0xD2511F53ll, "i64"));
    Value p1 = b.binary("arith.muli", c[2], b.intConst(0xCD9E8D57ll, "i64"));
    c = {xor3(shr(p1, 32), c[1], b.broadcast(k0, lanes)), low(p1),
         xor3(shr(p0, 32), c[3], b.broadcast(k1, lanes)), low(p0)};
  }
  Value which = b.broadcast(b.binary("arith.andi", select, b.intConst(3, "i64")), lanes);
  auto is = [&](int k) { return b.compare("arith.cmpi", "eq", which, b.intConst(k, "i64")); };
  return b.select(is(0), c[0], b.select(is(1), c[1], b.select(is(2), c[2], c[3])));
}

const char *comparePredicate(ExprKind kind, bool isFloat, bool isUnsigned) {
  switch (kind) {
  case ExprKind::Eq:
    return isFloat ? "oeq" : "eq";
  case ExprKind::Ne:
    return isFloat ? "une" : "ne";
  case ExprKind::Lt:
    return isFloat ? "olt" : isUnsigned ? "ult" : "slt";
  case ExprKind::Le:
    return isFloat ? "ole" : isUnsigned ? "ule" : "sle";
  case ExprKind::Gt:
    return isFloat ? "ogt" : isUnsigned ? "ugt" : "sgt";
  default:
    return isFloat ? "oge" : isUnsigned ? "uge" : "sge";
  }
}

} // namespace

Value emitPrim(Builder &b, ExprKind kind, DType operandType, std::span<const Value> args) {
  bool fl = isFloating(operandType), uns = isUnsignedDType(operandType);
  auto arith = [&](const char *f, const char *i) { return b.binary(fl ? f : i, args[0], args[1]); };
  switch (kind) {
  case ExprKind::Neg:
    return fl ? b.unary("arith.negf", args[0])
              : b.binary("arith.subi", zeroLike(b, args[0]), args[0]);
  case ExprKind::Abs:
    return fl ? b.unary("math.absf", args[0]) : uns ? args[0] : b.unary("math.absi", args[0]);
  case ExprKind::Rsqrt:
    return b.unary("math.rsqrt", args[0]);
#define KILN_LOOP_MATH(E, M, K, N, MLIR, C, COST)                                                  \
  case ExprKind::E:                                                                                \
    return emitMath(b, kind, MLIR, args);
#include "ir/loop/loop.def"
  case ExprKind::Sigmoid: {
    Value one = b.floatConst(1.0, args[0].elem);
    Value negated = b.unary("arith.negf", args[0]);
    Value e = emitMath(b, ExprKind::Exp, "math.exp", std::span<const Value>(&negated, 1));
    return b.binary("arith.divf", one, b.binary("arith.addf", one, e));
  }
  case ExprKind::Not:
    return b.binary("arith.xori", args[0], b.intConst(-1, args[0].elem));
  case ExprKind::Add:
    return arith("arith.addf", "arith.addi");
  case ExprKind::Sub:
    return arith("arith.subf", "arith.subi");
  case ExprKind::Mul:
    return arith("arith.mulf", "arith.muli");
  case ExprKind::Div: // correctly rounded, as eager's and NumPy's (softmax asks for a reciprocal)
    return b.binary("arith.divf", args[0], args[1]);
  case ExprKind::FloorDiv:
  case ExprKind::Mod:
    if (fl)
      return kind == ExprKind::Mod ? floatMod(b, args[0], args[1])
                                   : floatFloorDiv(b, args[0], args[1]);
    return intFloorDivMod(b, kind, uns, args[0], args[1]);
  case ExprKind::Pow:
    if (std::optional<Value> r = fl ? vectorLibmCall(b, kind, args) : std::nullopt)
      return *r;
    return fl ? b.binary("math.powf", args[0], args[1]) : intPow(b, args[0], args[1], uns);
  case ExprKind::Max:
    return arith("arith.maximumf", uns ? "arith.maxui" : "arith.maxsi");
  case ExprKind::Min:
    return arith("arith.minimumf", uns ? "arith.minui" : "arith.minsi");
  case ExprKind::Eq:
  case ExprKind::Ne:
  case ExprKind::Lt:
  case ExprKind::Le:
  case ExprKind::Gt:
  case ExprKind::Ge:
    return b.compare(fl ? "arith.cmpf" : "arith.cmpi", comparePredicate(kind, fl, uns), args[0],
                     args[1]);
  case ExprKind::And:
    return b.binary("arith.andi", args[0], args[1]);
  case ExprKind::Or:
    return b.binary("arith.ori", args[0], args[1]);
  case ExprKind::Xor:
    return b.binary("arith.xori", args[0], args[1]);
  case ExprKind::Where:
    return b.select(args[0], args[1], args[2]);
  case ExprKind::Philox:
    return emitPhilox(b, args);
  default:
    fail(ErrorKind::Runtime, "cpu emitter: {} is not a prim", exprKeyword(kind));
  }
}

Value emitCast(Builder &b, const Value &v, DType from, DType to) {
  if (from == to)
    return v;
  std::string te = computeElem(to);
  if (isFloating(from) && isFloating(to)) {
    Value x = v;
    if (x.elem == "f64" && te == "f32")
      x = b.convert("arith.truncf", x, "f32");
    else if (x.elem == "f32" && te == "f64")
      x = b.convert("arith.extf", x, "f64");
    return roundTo(b, x, to);
  }
  if (isFloating(from)) {
    if (to == DType::Bool)
      return b.compare("arith.cmpf", "une", v, b.floatConst(0.0, v.elem));
    Value x = b.convert("arith.fptosi", v, "i64"); // toward zero, then wrapped like the interpreter
    return te == "i64" ? x : b.convert("arith.trunci", x, te);
  }
  if (isFloating(to))
    return roundTo(b, b.convert(isUnsignedDType(from) ? "arith.uitofp" : "arith.sitofp", v, te),
                   to);
  if (to == DType::Bool)
    return b.compare("arith.cmpi", "ne", v, b.intConst(0, v.elem));
  int fromBits = elemBits(v.elem), toBits = elemBits(te);
  if (fromBits < toBits)
    return b.convert(isUnsignedDType(from) ? "arith.extui" : "arith.extsi", v, te);
  if (fromBits > toBits)
    return b.convert("arith.trunci", v, te);
  return Value{v.name, te, v.lanes};
}

Value emitLoad(Builder &b, const KernelScope &scope, BufferId buffer, const std::string &index,
               int lanes, const std::optional<std::string> &coeff, bool contiguous) {
  DType t = scope.program->buffer(buffer).meta.dtype;
  std::string mem = memElem(t);
  const std::string &memref = scope.memrefs.at(buffer);
  Value raw{b.fresh("ld"), mem};
  if (lanes == 0 || (!contiguous && !coeff)) {
    b.emit("{} = memref.load {}[{}] : memref<?x{}>", raw.name, memref, index, mem);
  } else if (contiguous) {
    raw.lanes = lanes;
    b.emit("{} = vector.load {}[{}] : memref<?x{}>, {}", raw.name, memref, index, mem, raw.type());
  } else {
    return emitGather(b, scope, buffer, laneOffsets(b, index, *coeff, lanes));
  }
  return fromMemory(b, raw, t);
}

Value emitGather(Builder &b, const KernelScope &scope, BufferId buffer, const Value &offsets) {
  DType t = scope.program->buffer(buffer).meta.dtype;
  std::string mem = memElem(t);
  int lanes = offsets.lanes;
  Value raw{b.fresh("ld"), mem, lanes};
  std::string mask = b.fresh("mask"), pass = b.fresh("pass"), zero = b.indexConst(0);
  b.emit("{} = arith.constant dense<true> : vector<{}xi1>", mask, lanes);
  b.emit("{} = arith.constant dense<{}> : {}", pass, isFloatElem(mem) ? "0.0" : "0", raw.type());
  b.emit("{} = vector.gather {}[{}] [{}], {}, {} : memref<?x{}>, {}, vector<{}xi1>, {} into {}",
         raw.name, scope.memrefs.at(buffer), zero, offsets.name, mask, pass, mem, offsets.type(),
         lanes, raw.type(), raw.type());
  return fromMemory(b, raw, t);
}

Value emitStridedLoad(Builder &b, const KernelScope &scope, BufferId buffer,
                      const std::string &index, int lanes, int64_t stride) {
  DType t = scope.program->buffer(buffer).meta.dtype;
  std::string mem = memElem(t);
  int64_t span = lanes * stride, read = (lanes - 1) * stride + 1;
  Value wide{b.fresh("ld"), mem, static_cast<int>(span)};
  std::string mask = b.fresh("mask"), pass = b.fresh("pass");
  b.emit("{} = vector.constant_mask [{}] : vector<{}xi1>", mask, read, span);
  b.emit("{} = arith.constant dense<{}> : {}", pass, isFloatElem(mem) ? "0.0" : "0", wide.type());
  b.emit("{} = vector.maskedload {}[{}], {}, {} : memref<?x{}>, vector<{}xi1>, {} into {}",
         wide.name, scope.memrefs.at(buffer), index, mask, pass, mem, span, wide.type(),
         wide.type());
  std::string picks;
  for (int64_t k = 0; k < lanes; ++k)
    picks += (k ? ", " : "") + std::to_string(k * stride);
  Value raw{b.fresh("ld"), mem, lanes};
  b.emit("{} = vector.shuffle {}, {} [{}] : {}, {}", raw.name, wide.name, wide.name, picks,
         wide.type(), wide.type());
  return fromMemory(b, raw, t);
}

void emitStore(Builder &b, const KernelScope &scope, BufferId buffer, const std::string &index,
               Value v, int lanes, int64_t stride) {
  DType t = scope.program->buffer(buffer).meta.dtype;
  std::string mem = memElem(t);
  const std::string &memref = scope.memrefs.at(buffer);
  Value m = toMemory(b, b.broadcast(v, lanes), t);
  if (lanes && stride > 1) {
    KILN_CHECK(stride <= passes::schedule::kMaxShuffledStride,
               "cpu emitter: a vector store {} elements apart", stride);
    int64_t span = lanes * stride;
    std::string picks, mask;
    for (int64_t j = 0; j < span; ++j) {
      bool mine = j % stride == 0;
      picks += (j ? ", " : "") + std::to_string(mine ? j / stride : 0);
      mask += (j ? ", " : "") + std::string(mine ? "true" : "false");
    }
    Value wide{b.fresh("st"), m.elem, static_cast<int>(span)};
    b.emit("{} = vector.shuffle {}, {} [{}] : {}, {}", wide.name, m.name, m.name, picks, m.type(),
           m.type());
    std::string maskName = b.fresh("mask");
    b.emit("{} = arith.constant dense<[{}]> : vector<{}xi1>", maskName, mask, span);
    b.emit("vector.maskedstore {}[{}], {}, {} : memref<?x{}>, vector<{}xi1>, {}", memref, index,
           maskName, wide.name, mem, span, wide.type());
  } else if (lanes)
    b.emit("vector.store {}, {}[{}] : memref<?x{}>, {}", m.name, memref, index, mem, m.type());
  else
    b.emit("memref.store {}, {}[{}] : memref<?x{}>", m.name, memref, index, mem);
}

Value BodyEmitter::emit(const Body &body) {
  values_.clear();
  for (const Expr *e : body.exprs())
    values_[e] = emitExpr(*e);
  return values_.at(body.result());
}

namespace {
double constantAsDouble(const Expr &c) {
  return isFloating(c.dtype) ? c.floatValue : static_cast<double>(c.intValue);
}
} // namespace

Value BodyEmitter::emitExpr(const Expr &e) {
  if (auto it = scope_.stashes.find(&e); it != scope_.stashes.end()) {
    // Stored by the run's reduction at this very point (its operands are left dead).
    const auto &[buffer, offset] = it->second;
    std::optional<SymInt> c = lanes_ ? laneCoefficient(offset, laneVar_) : std::nullopt;
    KILN_CHECK(!lanes_ || (c && c->constant() == 1), "cpu emitter: stash {}[{}] is not contiguous",
               bufferName(buffer), offset.str());
    return detail::emitLoad(b_, scope_, buffer, emitIndex(b_, offset, scope_.names), lanes_,
                            std::nullopt, lanes_ > 0);
  }
  switch (e.kind) {
  case ExprKind::Load:
    return emitLoad(e);
  case ExprKind::IndirectLoad:
    return emitIndirectLoad(e);
  case ExprKind::Constant:
    return isFloating(e.dtype) ? b_.floatConst(e.floatValue, computeElem(e.dtype))
                               : b_.intConst(e.intValue, computeElem(e.dtype));
  case ExprKind::Index:
    return emitIndexValue(e);
  case ExprKind::Cast:
    return emitCast(b_, values_.at(e.operand(0)), e.operand(0)->dtype, e.dtype);
  default: {
    std::vector<Value> args;
    for (const Expr *op : e.operands())
      args.push_back(values_.at(op));
    DType operandType = e.operand(e.kind == ExprKind::Where ? 1 : 0)->dtype;
    if (e.kind == ExprKind::Pow && isFloating(e.dtype) && e.operand(1)->isConstant())
      if (std::optional<Value> r = powByConstant(b_, args[0], constantAsDouble(*e.operand(1))))
        return *r;
    return emitPrim(b_, e.kind, operandType, args);
  }
  }
}

Value BodyEmitter::emitLoad(const Expr &e) {
  if (auto it = scope_.registers.find(e.buffer); it != scope_.registers.end())
    return it->second; // the fused run proved the load reads the current outer point
  std::optional<std::string> coeff;
  bool contiguous = false;
  int lanes = 0;
  if (lanes_) {
    std::optional<SymInt> c = laneCoefficient(e.index, laneVar_);
    if (!c)
      if (std::optional<ClampedIndex> clamped = clampedAlong(e.index, laneVar_))
        return emitClampedLoad(e, *clamped);
    KILN_CHECK(c, "cpu emitter: load {}[{}] is not affine in {}", bufferName(e.buffer),
               e.index.str(), laneVar_);
    std::optional<int64_t> stride = c->constant();
    if (stride && *stride > 1 && *stride <= passes::schedule::kMaxShuffledStride)
      return emitStridedLoad(b_, scope_, e.buffer, emitIndex(b_, e.index, scope_.names), lanes_,
                             *stride);
    if (c->constant() != 0) {
      lanes = lanes_;
      contiguous = c->constant() == 1;
      if (!contiguous)
        coeff = emitIndex(b_, *c, scope_.names);
    }
  }
  std::string index = emitIndex(b_, e.index, scope_.names);
  return detail::emitLoad(b_, scope_, e.buffer, index, lanes, coeff, contiguous);
}

Value BodyEmitter::emitClampedLoad(const Expr &e, const ClampedIndex &c) {
  const Names &names = scope_.names;
  std::string first = emitIndex(b_, c.inner, names);
  std::string lo = emitIndex(b_, c.lo, names), hi = emitIndex(b_, c.hi, names);
  std::string last = b_.indexOp("arith.addi", first, b_.indexConst(lanes_ - 1));
  std::string geLo = b_.fresh("in"), leHi = b_.fresh("in"), inside = b_.fresh("in");
  b_.emit("{} = arith.cmpi sge, {}, {} : index", geLo, first, lo);
  b_.emit("{} = arith.cmpi sle, {}, {} : index", leHi, last, hi);
  b_.emit("{} = arith.andi {}, {} : i1", inside, geLo, leHi);
  DType t = scope_.program->buffer(e.buffer).meta.dtype;
  Value result{b_.fresh("ld"), computeElem(t), lanes_};
  b_.open(fmt::format("{} = scf.if {} -> ({}) {{", result.name, inside, result.type()));
  Value fast = detail::emitLoad(b_, scope_, e.buffer, emitIndex(b_, c.inner + c.rest, names),
                                lanes_, std::nullopt, true);
  b_.emit("scf.yield {} : {}", fast.name, fast.type());
  b_.close("} else {");
  b_.open("");
  Value positions = laneOffsets(b_, first, b_.indexConst(1), lanes_);
  positions = b_.binary("arith.maxsi", positions, b_.indexToI64(lo));
  positions = b_.binary("arith.minsi", positions, b_.indexToI64(hi));
  positions = b_.binary("arith.addi", positions, b_.indexToI64(emitIndex(b_, c.rest, names)));
  Value slow = emitGather(b_, scope_, e.buffer, positions);
  b_.emit("scf.yield {} : {}", slow.name, slow.type());
  b_.close("}");
  return result;
}

Value BodyEmitter::emitIndirectLoad(const Expr &e) {
  Value position = values_.at(e.operand(0));
  Value zero = b_.intConst(0, "i64");
  Value extent = b_.indexToI64(emitIndex(b_, e.indirectExtent, scope_.names));
  Value p = position;
  if (e.wrapsNegative())
    p = b_.select(b_.compare("arith.cmpi", "slt", p, zero), b_.binary("arith.addi", p, extent), p);
  Value ok = b_.compare("arith.cmpi", "ult", p, extent); // 0 <= p < extent
  reportOutOfRange(ok, position, extent);
  Value term = b_.binary("arith.muli", b_.select(ok, p, zero),
                         b_.indexToI64(emitIndex(b_, e.indirectStride, scope_.names)));
  std::string base = emitIndex(b_, e.index, scope_.names);
  std::optional<SymInt> c;
  if (lanes_) {
    c = laneCoefficient(e.index, laneVar_);
    KILN_CHECK(c, "cpu emitter: load {}[{}] is not affine in {}", bufferName(e.buffer),
               e.index.str(), laneVar_);
  }
  if (!term.isVector()) { // one position for every lane: a load at a moved base
    std::string moved = b_.fresh("at");
    b_.emit("{} = arith.index_cast {} : i64 to index", moved, term.name);
    std::string index = b_.indexOp("arith.addi", base, moved);
    bool lanesMove = lanes_ && c->constant() != 0;
    std::optional<std::string> coeff;
    if (lanesMove && c->constant() != 1)
      coeff = emitIndex(b_, *c, scope_.names);
    return detail::emitLoad(b_, scope_, e.buffer, index, lanesMove ? lanes_ : 0, coeff,
                            lanesMove && c->constant() == 1);
  }
  Value offsets = c->constant() == 0
                      ? b_.broadcast(b_.indexToI64(base), lanes_)
                      : laneOffsets(b_, base, emitIndex(b_, *c, scope_.names), lanes_);
  return emitGather(b_, scope_, e.buffer, b_.binary("arith.addi", offsets, term));
}

void BodyEmitter::reportOutOfRange(const Value &ok, const Value &position, const Value &extent) {
  KILN_CHECK(!scope_.errorRecord.empty(), "cpu emitter: an indirect load without an error record");
  Value allOk = ok;
  Value bad = position;
  if (ok.isVector()) {
    allOk = Value{b_.fresh("allok"), "i1"};
    b_.emit("{} = vector.reduction <and>, {} : {} into i1", allOk.name, ok.name, ok.type());
    Value masked = b_.select(ok, b_.intConst(std::numeric_limits<int64_t>::min(), "i64"), position);
    bad = Value{b_.fresh("bad"), "i64"};
    b_.emit("{} = vector.reduction <maxsi>, {} : {} into i64", bad.name, masked.name,
            masked.type());
  }
  Value failed = b_.binary("arith.xori", allOk, b_.intConst(1, "i1"));
  b_.open(fmt::format("scf.if {} {{", failed.name));
  const std::string &record = scope_.errorRecord;
  Value one = b_.intConst(1, "i64");
  const Value *slots[] = {&one, &bad, &extent};
  for (int k = 0; k < 3; ++k)
    b_.emit("memref.store {}, {}[{}] : memref<?xi64>", slots[k]->name, record, b_.indexConst(k));
  b_.close();
}

Value BodyEmitter::emitIndexValue(const Expr &e) {
  std::string base = emitIndex(b_, e.index, scope_.names);
  if (lanes_) {
    std::optional<SymInt> c = laneCoefficient(e.index, laneVar_);
    KILN_CHECK(c, "cpu emitter: index {} is not affine in {}", e.index.str(), laneVar_);
    if (c->constant() != 0)
      return laneOffsets(b_, base, emitIndex(b_, *c, scope_.names), lanes_);
  }
  return b_.indexToI64(base);
}

} // namespace kiln::codegen::cpu::detail
