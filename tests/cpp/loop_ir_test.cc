// The loop-level IR: recording bodies (hash-consing, dtype rules), the printer and hash, and
// index simplification.

#include "ir/loop/program.h"
#include "runtime/error.h"

#include <kiln_catch.h>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;

namespace {

SymInt sym(const char *name) { return SymInt::symbol(name); }
constexpr DType F32 = DType::Float32;

using Idx = std::span<const IndexExpr>;

/// buf2 = relu(buf0[s0, 128] + buf1[128]).
LoopProgram addRelu() {
  LoopProgram p;
  BufferId x = p.addInput(F32, {sym("s0"), 128});
  BufferId b = p.addInput(F32, {128});
  BufferId y = p.pointwise({sym("s0"), 128}, [&](Ops &ops, Idx i) {
    Val sum = ops.load(x, {i[0], i[1]}) + ops.load(b, {i[1]});
    return ops.maximum(sum, ops.constant(0.0, F32));
  });
  p.markOutput(y);
  return p;
}

/// The message of the kiln::Error `fn` throws, checking its kind.
template <typename Fn> std::string errorOf(ErrorKind kind, Fn &&fn) {
  try {
    fn();
  } catch (const Error &e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  FAIL("no kiln::Error thrown");
  return "";
}

} // namespace

TEST_CASE("a pointwise program prints in the documented grammar", "[loop][printer]") {
  CHECK(addRelu().str() == R"(input buf0: f32[s0, 128]
input buf1: f32[128]
buf2: f32[s0, 128] = pointwise [s0, 128] {
  %0 = load buf0[i0*128 + i1]
  %1 = load buf1[i1]
  %2 = add %0, %1
  %3 = max %2, 0.0
  yield %3
}
return buf2
)");
}

TEST_CASE("bodies are hash-consed DAGs with only live nodes", "[loop][dag]") {
  LoopProgram p;
  BufferId x = p.addInput(F32, {4});
  std::vector<Val> seen;
  p.pointwise({4}, [&](Ops &ops, Idx i) {
    Val a = ops.load(x, {i[0]});
    Val b = ops.load(x, {i[0]});
    CHECK(a == b); // the same load is one node
    CHECK(ops.exp(a) == ops.exp(b));
    CHECK(ops.constant(1.0, F32) == ops.constant(1.0, F32));
    CHECK_FALSE(ops.constant(0.0, F32) == ops.constant(-0.0, F32)); // compared by bits
    CHECK_FALSE(ops.constant(1.0, F32) == ops.constant(1.0, DType::Float64));
    CHECK(ops.cast(a, F32) == a); // a cast to the same dtype is the value itself
    CHECK_FALSE(ops.sub(a, ops.exp(a)) == ops.sub(ops.exp(a), a));
    ops.log(a); // dead: not part of the body
    Val e = ops.exp(a);
    return e * e + e;
  });
  const Body &body = *p.nodes()[0].body;
  REQUIRE(body.exprs().size() == 4); // load, exp, mul, add
  CHECK(body.exprs()[0]->kind == ExprKind::Load);
  CHECK(body.result()->operand(0)->operand(0) == body.result()->operand(1));
  CHECK(body.str() == R"(  %0 = load buf0[i0]
  %1 = exp %0
  %2 = mul %1, %1
  %3 = add %2, %1
  yield %3
)");
  CHECK(body.reads() == std::vector<BufferId>{x});
}

TEST_CASE("reductions, welford tuples, externs and strided buffers print", "[loop][printer]") {
  LoopProgram p;
  SymInt s0 = sym("s0");
  BufferId x = p.addInput(F32, {s0, 64});
  BufferId w = p.addInput(F32, {64, 32}, std::vector<SymInt>{1, 64});
  BufferId mx = p.reduction(ReductionKind::Max, {s0}, {64},
                            [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  WelfordBuffers st = p.welford({s0}, {64}, [&](Ops &ops, Idx i) {
    return ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]});
  });
  BufferId am = p.reduction(ReductionKind::ArgMin, {s0}, {64},
                            [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  std::vector<BufferId> mm = p.external("mm", {x, w}, {TensorMeta::contiguous(F32, {s0, 32})},
                                        {{"transpose_b", false}, {"alpha", 1.0}});
  BufferId t = p.pointwise(
      {32, s0},
      [&](Ops &ops, Idx i) {
        Val count = ops.cast(ops.load(st.count, {i[1]}), DType::Float64);
        Val big = ops.gt(count, ops.constant(0.5, DType::Float64));
        Val v = ops.cast(ops.load(mm[0], {i[1], i[0]}), DType::Float64);
        Val pos = ops.cast(ops.indexValue(i[0] + 1), DType::Float64);
        return ops.where(big, v * pos, ops.constant(2.0, DType::Float64));
      },
      std::vector<SymInt>{1, 32});
  p.markOutput(t);
  p.markOutput(am);
  CHECK(p.str() == R"(input buf0: f32[s0, 64]
input buf1: f32[64, 32] strided [1, 64]
buf2: f32[s0] = reduction max [s0] over [64] {
  %0 = load buf0[i0*64 + r0]
  yield %0
}
buf3: f32[s0], buf4: f32[s0], buf5: i64[s0] = reduction welford [s0] over [64] {
  %0 = load buf0[i0*64 + r0]
  %1 = load buf2[i0]
  %2 = sub %0, %1
  yield %2
}
buf6: i64[s0] = reduction argmin [s0] over [64] {
  %0 = load buf0[i0*64 + r0]
  yield %0
}
buf7: f32[s0, 32] = extern "mm"(buf0, buf1) {alpha = 1.0, transpose_b = false}
buf8: f64[32, s0] strided [1, 32] = pointwise [32, s0] {
  %0 = load buf5[i1]
  %1 = cast %0 to f64
  %2 = gt %1, 0.5:f64
  %3 = load buf7[i0 + i1*32]
  %4 = cast %3 to f64
  %5 = index i0 + 1
  %6 = cast %5 to f64
  %7 = mul %4, %6
  %8 = where %2, %7, 2.0:f64
  yield %8
}
return buf8, buf6
)");
  CHECK(p.buffer(st.count).meta.dtype == DType::Int64);
  CHECK(p.buffer(t).kind == BufferKind::Output);
  CHECK(p.buffer(mx).kind == BufferKind::Intermediate);
  CHECK(p.buffer(x).kind == BufferKind::Input);
  CHECK(p.sizeSymbols() == std::set<std::string, std::less<>>{"s0"});
}

TEST_CASE("indirect loads print their position, stride and range", "[loop][printer]") {
  LoopProgram p;
  BufferId table = p.addInput(F32, {sym("s0"), 64});
  BufferId ids = p.addInput(DType::Int32, {7});
  p.markOutput(p.pointwise({7, 64}, [&](Ops &ops, Idx i) {
    Val row = ops.cast(ops.load(ids, {i[0]}), DType::Int64);
    return ops.loadIndirect(table, {i[0], i[1]}, 0, row) +
           ops.loadIndirect(table, {i[0], i[1]}, 0, row, /*wrapNegative=*/true);
  }));
  CHECK(p.str() == R"(input buf0: f32[s0, 64]
input buf1: i32[7]
buf2: f32[7, 64] = pointwise [7, 64] {
  %0 = load buf1[i0]
  %1 = cast %0 to i64
  %2 = load buf0[i1 + %1 * 64, %1 in [0, s0)]
  %3 = load buf0[i1 + %1 * 64, %1 in [-s0, s0)]
  %4 = add %2, %3
  yield %4
}
return buf2
)");
  LoopProgram bad;
  BufferId t = bad.addInput(F32, {4});
  CHECK(errorOf(ErrorKind::Type, [&] {
          bad.pointwise({4}, [&](Ops &ops, Idx i) {
            return ops.loadIndirect(t, {i[0]}, 0, ops.load(t, {i[0]}));
          });
        }).find("i64") != std::string::npos);
}

TEST_CASE("literals carry their dtype when it is not f32, i64 or b8", "[loop][printer]") {
  LoopProgram p;
  BufferId x = p.addInput(DType::Int32, {3});
  BufferId y = p.pointwise({3}, [&](Ops &ops, Idx i) {
    Val v = ops.load(x, {i[0]});
    Val big = ops.gt(ops.cast(v, DType::Int64), ops.constant(7, DType::Int64));
    Val odd = ops.eq(ops.mod(v, ops.constant(2, DType::Int32)), ops.constant(1, DType::Int32));
    Val flag = ops.bitwiseAnd(big, ops.bitwiseNot(odd));
    Val h = ops.constant(0.1, DType::Float16);
    return ops.where(ops.bitwiseOr(flag, ops.constant(false)), h,
                     ops.constant(-1e-5, DType::Float16));
  });
  p.markOutput(y);
  CHECK(p.nodes()[0].body->str() == R"(  %0 = load buf0[i0]
  %1 = cast %0 to i64
  %2 = gt %1, 7
  %3 = mod %0, 2:i32
  %4 = eq %3, 1:i32
  %5 = not %4
  %6 = and %2, %5
  %7 = or %6, false
  %8 = where %7, 0.099975586:f16, -1.001358e-05:f16
  yield %8
)");
}

TEST_CASE("the program hash is structural and stable", "[loop][hash]") {
  LoopProgram a = addRelu(), b = addRelu();
  CHECK(a.hash() == b.hash());
  CHECK(a.hash() == 0xf022c8941f3aff23ULL); // FNV-1a of the golden text above

  LoopProgram c;
  BufferId x = c.addInput(F32, {sym("s0"), 128});
  BufferId bias = c.addInput(F32, {128});
  c.markOutput(c.pointwise({sym("s0"), 128}, [&](Ops &ops, Idx i) {
    Val sum = ops.load(x, {i[0], i[1]}) + ops.load(bias, {i[1]});
    return ops.maximum(sum, ops.constant(1e-30, F32)); // another constant
  }));
  CHECK(c.hash() != a.hash());
}

TEST_CASE("index expressions flatten with strides and simplify in range", "[loop][index]") {
  SymInt i0 = sym("i0"), i1 = sym("i1"), s0 = sym("s0"), s1 = sym("s1");
  CHECK(flatIndex(std::vector<IndexExpr>{i0, i1}, std::vector<SymInt>{128, 1}).str() ==
        "i0*128 + i1");
  CHECK(flatIndex(std::vector<IndexExpr>{i0, i1}, std::vector<SymInt>{0, 1}).str() == "i1");
  CHECK((i1 * 2 + i0 * 3 - i1 + i1 * 0).str() == "i0*3 + i1"); // SymInt's canonical form

  VarRanges r(std::vector<SymInt>{s0, 128});
  IndexExpr flat = i0 * 128 + i1;
  CHECK(floorDivInRange(flat, 128, r) == i0);
  CHECK(modInRange(flat, 128, r) == i1);
  CHECK(floorDivInRange(i1 + 128 * 3, 128, r) == SymInt(3));
  CHECK(modInRange(i1 + 130, 128, r).str() == "(i1 + 2) mod 128");  // i1 + 2 may pass 128
  CHECK(floorDivInRange(i1 * 2, 128, r).str() == "i1 floordiv 64"); // not provable: plain SymInt
  CHECK(floorDivInRange(i0 * 256 + i1, 128, r).str() == "i0*2");

  // Terms over floordiv and mod atoms of loop variables are bounded too: a head index repeated
  // by an expand (`i1 floordiv 2`) decodes without a division.
  SymInt i2 = sym("i2"), i3 = sym("i3");
  VarRanges heads(std::vector<SymInt>{8, 4, 64, 32});
  IndexExpr repeated = i0 * 4096 + floorDiv(i1, 2) * 2048 + i2 * 32 + i3;
  CHECK(floorDivInRange(repeated, 2048, heads) == i0 * 2 + floorDiv(i1, 2));
  CHECK(modInRange(floorDivInRange(repeated, 2048, heads), 2, heads) == floorDiv(i1, 2));
  CHECK(modInRange(repeated, 2048, heads) == i2 * 32 + i3);
  std::optional<IndexBounds> atoms = indexBounds(mod(i2, 3) * 5 - floorDiv(i3, 4), heads);
  REQUIRE(atoms);
  CHECK(atoms->lo == SymInt(-7));
  CHECK(atoms->hi == SymInt(10));
  CHECK_FALSE(indexBounds(i0 * i1, heads)); // a product of loop variables is not bounded here

  // A divisor that is a multiple of a term's coefficient, the rest below that coefficient: the
  // row of a [8, 64, 128] tensor read as [512, 128].
  VarRanges rows(std::vector<SymInt>{512, 128});
  CHECK(floorDivInRange(i0 * 128 + i1, 8192, rows) == floorDiv(i0, 64));
  CHECK(modInRange(i0 * 128 + i1, 8192, rows) == mod(i0, 64) * 128 + i1);
  // ... and flattened again, the floordiv and mod recombine into the variable.
  CHECK(recombineDivMod(floorDiv(i0, 64) * 8192 + mod(i0, 64) * 128 + i1) == i0 * 128 + i1);
  CHECK(recombineDivMod(floorDiv(i0, 64) * 8192 + mod(i0, 32) * 128).str() ==
        (floorDiv(i0, 64) * 8192 + mod(i0, 32) * 128).str()); // different divisors: kept

  VarRanges sr(std::vector<SymInt>{s0, s1});
  CHECK(floorDivInRange(i0 * s1 + i1, s1, sr) == i0);
  CHECK(modInRange(i0 * s1 + i1, s1, sr) == i1);
  CHECK(floorDiv(i0 * s1 + i1, s1).str() != "i0"); // SymInt alone cannot know i1 < s1

  std::optional<AffineForm> f = affineForm(i0 * s1 + i1 * 4 + s0, sr);
  REQUIRE(f);
  CHECK(f->base == s0);
  CHECK(f->coeffs.at("i0") == s1);
  CHECK(f->coeffs.at("i1") == SymInt(4));
  CHECK_FALSE(affineForm(i0 * i1, sr));
  CHECK_FALSE(affineForm(floorDiv(i0, 2), sr));
  CHECK_FALSE(affineForm(sym("r0"), sr)); // not a variable of these ranges

  std::optional<IndexBounds> b = indexBounds(i0 * 4 - i1 + 1, sr);
  REQUIRE(b);
  CHECK(b->lo.str() == "-s1 + 2");
  CHECK(b->hi.str() == "s0*4 - 3");
  CHECK_FALSE(indexBounds(i0 * s1, sr)); // symbolic coefficient: sign unknown

  // Inside a body, Ops knows the node's ranges: a reshape of [s0*4] to [s0, 4] and back.
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0, 4});
  p.pointwise({s0 * 4}, [&](Ops &ops, Idx i) {
    IndexExpr row = ops.indexFloorDiv(i[0], 4), col = ops.indexMod(i[0], 4);
    CHECK(row.str() == "i0 floordiv 4");
    return ops.load(x, {row, col});
  });
  p.pointwise({s0, 4}, [&](Ops &ops, Idx i) {
    IndexExpr flatI = i[0] * 4 + i[1];
    CHECK(ops.indexFloorDiv(flatI, 4) == i[0]);
    CHECK(ops.indexMod(flatI, 4) == i[1]);
    return ops.load(x, {ops.indexFloorDiv(flatI, 4), ops.indexMod(flatI, 4)});
  });
  CHECK(p.nodes()[1].body->str() == "  %0 = load buf0[i0*4 + i1]\n  yield %0\n");
}

TEST_CASE("recording rejects bad bodies with clear errors", "[loop][errors]") {
  LoopProgram p;
  BufferId x = p.addInput(F32, {4, 8});
  BufferId d = p.addInput(DType::Float64, {8});
  BufferId n = p.addInput(DType::Int64, {8});
  auto body = [&](auto fn) { return [fn](Ops &ops, Idx i) -> Val { return fn(ops, i); }; };

  CHECK(errorOf(ErrorKind::Index, [&] {
          p.pointwise({4, 8}, body([&](Ops &ops, Idx i) { return ops.load(x, {i[1]}); }));
        }) == "pointwise buf3: load of buf0 (f32[4, 8]) with 1 index expressions; it has rank 2");
  CHECK(errorOf(ErrorKind::Type,
                [&] {
                  p.pointwise({4, 8}, body([&](Ops &ops, Idx i) {
                                return ops.load(x, {i[0], i[1]}) + ops.load(d, {i[1]});
                              }));
                }) ==
        "pointwise buf3: add of (f32, f64): operand dtypes differ (the loop IR does not "
        "promote: insert a cast)");
  CHECK(errorOf(ErrorKind::Type, [&] {
          p.pointwise({8}, body([&](Ops &ops, Idx i) { return ops.exp(ops.load(n, {i[0]})); }));
        }) == "pointwise buf3: exp of (i64): needs a floating dtype");
  CHECK(errorOf(ErrorKind::Type, [&] {
          p.pointwise({8}, body([&](Ops &ops, Idx i) {
                        Val v = ops.load(d, {i[0]});
                        return ops.where(v, v, v);
                      }));
        }) == "pointwise buf3: where of (f64, f64, f64): the condition must be b8");
  CHECK(errorOf(ErrorKind::Type, [&] {
          p.pointwise({8}, body([&](Ops &ops, Idx) { return ops.constant(300, DType::UInt8); }));
        }) == "pointwise buf3: constant 300 does not fit u8");
  CHECK(errorOf(ErrorKind::Index,
                [&] {
                  p.pointwise({8}, body([&](Ops &ops, Idx) { return ops.load(d, {sym("r0")}); }));
                }) ==
        "pointwise buf3: load of buf1 [r0] uses 'r0', which is not a loop variable of this "
        "node (it has i0)");
  CHECK(errorOf(ErrorKind::Index, [&] {
          p.pointwise({8}, body([&](Ops &ops, Idx i) { return ops.load(BufferId{9}, {i[0]}); }));
        }).find("load of buf9, which is not defined") != std::string::npos);
  CHECK(errorOf(ErrorKind::Value, [&] {
          p.pointwise({8}, body([&](Ops &, Idx) { return Val(); }));
        }) == "pointwise buf3: the yielded value is an empty Val");
  Val escaped;
  p.pointwise({8}, body([&](Ops &ops, Idx i) { return escaped = ops.load(d, {i[0]}); }));
  CHECK(errorOf(ErrorKind::Value, [&] {
          p.pointwise({8}, body([&](Ops &, Idx) { return escaped; }));
        }).find("belongs to another loop body") != std::string::npos);

  // Program-level rules.
  CHECK(errorOf(ErrorKind::Type, [&] {
          p.welford({8}, {4}, body([&](Ops &ops, Idx i) { return ops.load(n, {i[0]}); }));
        }).find("reduces floating values, but the body yields i64") != std::string::npos);
  CHECK_THROWS_AS(p.reduction(ReductionKind::Welford, {8}, {4},
                              body([&](Ops &ops, Idx i) { return ops.load(d, {i[0]}); })),
                  Error);
  CHECK(errorOf(ErrorKind::Value, [&] { p.markOutput(x); }).find("is an input") !=
        std::string::npos);
  CHECK(errorOf(ErrorKind::Value, [&] { p.addInput(F32, {4}); }).find("inputs come first") !=
        std::string::npos);
  LoopProgram q;
  CHECK(errorOf(ErrorKind::Value, [&] {
          q.addInput(F32, {sym("i0")});
        }).find("mentions 'i0', a loop-variable name") != std::string::npos);
  CHECK(errorOf(ErrorKind::Value, [&] {
          q.pointwise({-1}, body([&](Ops &ops, Idx) { return ops.constant(true); }));
        }).find("is negative") != std::string::npos);
}
