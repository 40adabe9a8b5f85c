// CompiledProgram's run-time memory plan: slots shared by buffers whose lifetimes do not overlap,
// in-place epilogues, the arena's size against the plan's peak, growing it when symbolic sizes
// grow, random programs against the interpreter, concurrent calls, and extern results (adopted,
// copied when they alias other memory or have another layout).
#include "codegen/cpu/compile_program.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"
#include "runtime/ops/unary_math.h"
#include "tests/cpp/cpu_emit_test_util.h"

#include <kiln_catch.h>

#include <algorithm>
#include <random>
#include <thread>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;
using namespace kiln::codegen::cpu;
using namespace kiln::test::cpu;

namespace {

size_t align64(int64_t bytes) { return (static_cast<size_t>(bytes) + 63) / 64 * 64; }

/// The slot holding `id` (-1: none).
int slotOf(const CompiledProgram &c, BufferId id) {
  const std::vector<CompiledProgram::MemorySlot> &slots = c.memorySlots();
  for (size_t s = 0; s < slots.size(); ++s)
    if (std::count(slots[s].buffers.begin(), slots[s].buffers.end(), id))
      return static_cast<int>(s);
  return -1;
}

/// x: f32[s0]; b_k = tanh(b_{k-1}) + b_{k-2} / 2 for k < n (b_{-1} = b_{-2} = x), b_{n-1}
/// returned. Each b_k is read by the next two nodes, so three slots suffice for all of them.
LoopProgram chainProgram(int n, std::vector<BufferId> &chain) {
  LoopProgram p;
  BufferId x = p.addInput(F32, {sym("s0")});
  BufferId prev = x, prev2 = x;
  for (int k = 0; k < n; ++k) {
    BufferId b = p.pointwise({sym("s0")}, [&](Ops &ops, Idx i) {
      return ops.tanh(ops.load(prev, {i[0]})) + ops.load(prev2, {i[0]}) * ops.constant(0.5, F32);
    });
    chain.push_back(b);
    prev2 = prev;
    prev = b;
  }
  p.markOutput(prev);
  return p;
}

} // namespace

TEST_CASE("a chain of intermediates runs in three reused slots", "[cpu_memory]") {
  std::vector<BufferId> chain;
  CompiledProgram c = compileAsWritten(chainProgram(12, chain));
  REQUIRE(c.memorySlots().size() == 3);
  for (size_t k = 0; k + 1 < chain.size(); ++k) {
    INFO("buf " << chain[k].index);
    // b_k takes the slot of b_{k-3}, whose last reader (b_{k-1}) ran just before it.
    CHECK(slotOf(c, chain[k]) == static_cast<int>(k % 3));
  }
  CHECK(slotOf(c, chain.back()) == -1); // a program output: fresh memory
  for (const CompiledProgram::MemorySlot &s : c.memorySlots())
    CHECK(s.bytes == sym("s0") * SymInt(4));
  CHECK(c.arenaStats().arenas == 0);
  for (int64_t n : {1, 7, 1000, 1031}) {
    checkAgainstInterpreter(c, {randn({n})});
    // The arena holds exactly the plan's peak: three slots, each rounded up to 64 bytes.
    CHECK(c.arenaBytes({{"s0", n}}) == 3 * align64(4 * n));
  }
  // Sizes went up and down: the arena grew to the largest call and kept that size.
  CHECK(c.arenaStats().arenas == 1);
  CHECK(c.arenaStats().bytes == c.arenaBytes({{"s0", 1031}}));
}

TEST_CASE("slots of different sizes share arena bytes when their lifetimes are disjoint",
          "[cpu_memory]") {
  // a: [s0] (unit 0, read in 1), b: [2, s0] (1, read in 2), c: [3, s0] (2, read in 3): a and c
  // never live together, so c goes at offset 0, b after it, a over c's first bytes.
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0});
  BufferId a = p.pointwise({s0}, [&](Ops &ops, Idx i) { return ops.exp(ops.load(x, {i[0]})); });
  BufferId b = p.pointwise({2, s0}, [&](Ops &ops, Idx i) {
    return ops.load(a, {i[1]}) * (ops.cast(ops.indexValue(i[0]), F32) + ops.constant(1.0, F32));
  });
  BufferId cc = p.pointwise({3, s0}, [&](Ops &ops, Idx i) {
    return ops.tanh(ops.load(b, {0, i[1]}) - ops.load(b, {1, i[1]}) +
                    ops.cast(ops.indexValue(i[0]), F32));
  });
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
    return ops.load(cc, {0, i[0]}) + ops.load(cc, {1, i[0]}) * ops.load(cc, {2, i[0]});
  }));
  CompiledProgram c = compileAsWritten(p);
  REQUIRE(c.memorySlots().size() == 3);
  CHECK(slotOf(c, a) != slotOf(c, b));
  CHECK(slotOf(c, b) != slotOf(c, cc));
  for (int64_t n : {5, 100, 1000}) {
    checkAgainstInterpreter(c, {randn({n})});
    size_t sum = align64(4 * n) + align64(8 * n) + align64(12 * n);
    CHECK(c.arenaBytes({{"s0", n}}) == align64(12 * n) + align64(8 * n));
    CHECK(c.arenaBytes({{"s0", n}}) < sum);
    CHECK(c.arenaStats().bytes == c.arenaBytes({{"s0", n}})); // grows with each larger call
  }
  CHECK_THROWS_AS(c.arenaBytes({}), Error); // s0 has no value
}

TEST_CASE("random programs of many intermediates equal the interpreter", "[cpu_memory]") {
  // Buffers of shapes [rows, s0] (rows 1..3) and [s0], each node reading two earlier ones at a
  // fixed row: lifetimes of every length, slots of mixed sizes shared and packed, some nodes
  // in fused runs, some alone. Growing and shrinking s0 between calls.
  std::mt19937 rng(7);
  SymInt s0 = sym("s0");
  for (int trial = 0; trial < 12; ++trial) {
    LoopProgram p;
    std::vector<BufferId> bufs{p.addInput(F32, {3, s0})};
    std::vector<int64_t> rowsOf{3};
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    for (int k = 0; k < 14; ++k) {
      // Mostly recent buffers, sometimes an old one: long and short lifetimes.
      size_t a = bufs.size() - 1 - pick(std::min<size_t>(bufs.size(), 3));
      size_t b = pick(bufs.size());
      int64_t rows = static_cast<int64_t>(pick(4)); // 0: a 1-D node
      auto at = [&](Ops &ops, size_t src, Idx i) {
        IndexExpr col = rows == 0 ? i[0] : i[1];
        if (rowsOf[src] == 0)
          return ops.load(bufs[src], {col});
        return ops.load(bufs[src], {static_cast<int64_t>(k) % rowsOf[src], col});
      };
      auto body = [&](Ops &ops, Idx i) {
        return ops.tanh(at(ops, a, i)) * ops.constant(0.75, F32) + at(ops, b, i);
      };
      bufs.push_back(rows == 0 ? p.pointwise({s0}, body) : p.pointwise({rows, s0}, body));
      rowsOf.push_back(rows);
    }
    p.markOutput(bufs.back());
    p.markOutput(bufs[bufs.size() - 4]);
    CompiledProgram c = compileAsWritten(p);
    INFO("trial " << trial << ": " << c.memorySlots().size() << " slots\n" << p.str());
    size_t held = 0; // the arena only grows: it holds the largest need so far
    for (int64_t n : {1000, 17, 1031, 1}) {
      checkAgainstInterpreter(c, {randn({3, n})});
      held = std::max(held, c.arenaBytes({{"s0", n}}));
      CHECK(c.arenaStats().bytes == held);
    }
  }
}

TEST_CASE("a GEMM's result is adopted and its epilogue overwrites it in place", "[cpu_memory]") {
  // mm -> e = tanh(mm) + 1 -> peek(e): e is written over mm's result, which the program took
  // over from the extern without a copy; peek sees that very storage.
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0, 24});
  BufferId w = p.addInput(F32, {24, 16});
  BufferId mm = p.external("mm", {x, w}, {TensorMeta::contiguous(F32, {s0, 16})})[0];
  BufferId e = p.pointwise({s0, 16}, [&](Ops &ops, Idx i) {
    return ops.tanh(ops.load(mm, {i[0], i[1]})) + ops.constant(1.0, F32);
  });
  p.markOutput(p.external("peek", {e}, {TensorMeta::contiguous(F32, {s0})})[0]);
  CompiledProgram c = compileAsWritten(p);
  std::weak_ptr<Storage> product;
  bool same = false;
  c.registerExtern("mm", [&](std::span<const Tensor> in, const ir::Attributes &) {
    Tensor r = ops::mm(in[0], in[1]);
    product = r.storage();
    return std::vector<Tensor>{r};
  });
  c.registerExtern("peek", [&](std::span<const Tensor> in, const ir::Attributes &) {
    same = in[0].storage() == product.lock();
    return std::vector<Tensor>{ops::sum(in[0], std::vector<int64_t>{-1}, false)};
  });
  REQUIRE(slotOf(c, mm) >= 0);
  CHECK(slotOf(c, mm) == slotOf(c, e));
  REQUIRE(c.memorySlots().size() == 1);
  CHECK(c.memorySlots()[0].external);
  Tensor one = Tensor::wrapScalar(Scalar(1.0));
  for (int64_t n : {1, 33, 300}) {
    Tensor tx = randn({n, 24}), tw = randn({24, 16});
    Tensor want =
        ops::sum(ops::add(ops::tanh(ops::mm(tx, tw)), one), std::vector<int64_t>{-1}, false);
    same = false;
    checkClose(c.run({tx, tw})[0], want, 1e-5);
    CHECK(same);
    CHECK(product.expired()); // freed after its last reader, not kept in an arena
    CHECK(c.arenaBytes({{"s0", n}}) == 0);
  }
}

TEST_CASE("no in-place write after a reduction of the same run (softmax's stash)", "[cpu_memory]") {
  // out = softmax(x) * mm(a, w): out reads mm point by point and is its only reader, but the
  // exp-sum reduction before it in its fused run may store exp(x - max) where out goes, so out
  // must not take mm's slot.
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0, 64});
  BufferId a = p.addInput(F32, {s0, 8});
  BufferId w = p.addInput(F32, {8, 64});
  BufferId mm = p.external("mm", {a, w}, {TensorMeta::contiguous(F32, {s0, 64})})[0];
  BufferId mx = p.reduction(ReductionKind::Max, {s0}, {64},
                            [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  BufferId sum = p.reduction(ReductionKind::Sum, {s0}, {64}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]}));
  });
  BufferId out = p.pointwise({s0, 64}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]})) / ops.load(sum, {i[0]}) *
           ops.load(mm, {i[0], i[1]});
  });
  p.markOutput(p.reduction(ReductionKind::Sum, {s0}, {64},
                           [&](Ops &ops, Idx i) { return ops.load(out, {i[0], i[1]}); }));
  CompiledProgram c = compileAsWritten(p);
  REQUIRE(slotOf(c, mm) >= 0);
  REQUIRE(slotOf(c, out) >= 0);
  CHECK(slotOf(c, mm) != slotOf(c, out));
  for (int64_t n : {1, 17, 200}) {
    Tensor tx = randn({n, 64}), ta = randn({n, 8}), tw = randn({8, 64});
    Tensor want =
        ops::sum(ops::mul(ops::softmax(tx, -1), ops::mm(ta, tw)), std::vector<int64_t>{-1}, false);
    checkClose(c.run({tx, ta, tw})[0], want, 1e-5);
  }
}

TEST_CASE("extern results that alias arena memory are copied", "[cpu_memory]") {
  // alias(a) returns its input: a view of a's slot. It is copied into its own slot, so the
  // in-place epilogue over it leaves `a` (read again later) intact; returned as a program
  // output it is copied into fresh memory, which the next call must not overwrite.
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0});
  BufferId a = p.pointwise({s0}, [&](Ops &ops, Idx i) { return ops.exp(ops.load(x, {i[0]})); });
  BufferId e = p.external("alias", {a}, {TensorMeta::contiguous(F32, {s0})})[0];
  BufferId o1 = p.pointwise(
      {s0}, [&](Ops &ops, Idx i) { return ops.load(e, {i[0]}) * ops.constant(2.0, F32); });
  BufferId tail = p.pointwise({s0}, [&](Ops &ops, Idx i) {
    return ops.load(o1, {i[0]}) + ops.load(a, {i[0]}) * ops.constant(10.0, F32);
  });
  p.markOutput(tail);
  p.markOutput(p.external("alias", {a}, {TensorMeta::contiguous(F32, {s0})})[0]);
  CompiledProgram c = compileAsWritten(p);
  c.registerExtern("alias", [](std::span<const Tensor> in, const ir::Attributes &) {
    return std::vector<Tensor>{in[0]};
  });
  CHECK(slotOf(c, e) == slotOf(c, o1)); // the epilogue writes over the copy, in place
  CHECK(slotOf(c, e) != slotOf(c, a));
  Tensor t1 = randn({50}), t2 = randn({50});
  std::vector<Tensor> first = c.run({t1});
  Tensor kept = first[1].clone();
  std::vector<Tensor> second = c.run({t2});
  for (auto [tx, out] : {std::pair{t1, first}, std::pair{t2, second}}) {
    Tensor ea = ops::exp(tx);
    checkClose(out[0], ops::mul(ea, Tensor::wrapScalar(Scalar(12.0))), 1e-5);
    checkClose(out[1], ea, 1e-6);
  }
  checkClose(first[1], kept, 0); // not arena memory: the second call left it alone
}

TEST_CASE("extern results of another layout are copied into fresh memory", "[cpu_memory]") {
  // x -> a = x * 2 -> probe(a) (a column-major copy: copied into a fresh row-major tensor) ->
  // b = +1 over it in place -> check(b) (returns b: adopted as the output). a is arena memory,
  // kept for the next call; b and the output never are.
  LoopProgram p;
  BufferId x = p.addInput(F32, {6, 5});
  BufferId a = p.pointwise(
      {6, 5}, [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}) * ops.constant(2.0, F32); });
  BufferId probed = p.external("probe", {a}, {TensorMeta::contiguous(F32, {6, 5})})[0];
  BufferId b = p.pointwise({6, 5}, [&](Ops &ops, Idx i) {
    return ops.load(probed, {i[0], i[1]}) + ops.constant(1.0, F32);
  });
  p.markOutput(p.external("check", {b}, {TensorMeta::contiguous(F32, {6, 5})})[0]);
  CompiledProgram c = compileAsWritten(p);
  std::weak_ptr<Storage> arena;
  bool outsideArena = false;
  c.registerExtern("probe", [&](std::span<const Tensor> in, const ir::Attributes &) {
    arena = in[0].storage();
    Tensor r = in[0].t().contiguous().t(); // same values, column-major
    REQUIRE(r.strides() != in[0].strides());
    return std::vector<Tensor>{r};
  });
  c.registerExtern("check", [&](std::span<const Tensor> in, const ir::Attributes &) {
    outsideArena = in[0].storage() != arena.lock() && in[0].strides() == Shape{5, 1};
    return std::vector<Tensor>{in[0]};
  });
  CHECK(slotOf(c, probed) == slotOf(c, b));
  Tensor tx = randn({6, 5});
  std::vector<Tensor> out = c.run({tx});
  CHECK(outsideArena);
  CHECK_FALSE(arena.expired()); // pooled for the next call
  REQUIRE(out.size() == 1);
  CHECK(out[0].storage() != arena.lock());
  CHECK(out[0].strides() == std::vector<int64_t>{5, 1});
  Tensor two = Tensor::wrapScalar(Scalar(2.0)), one = Tensor::wrapScalar(Scalar(1.0));
  checkClose(out[0], ops::add(ops::mul(tx, two), one), 0);
}

TEST_CASE("concurrent calls with different sizes each get their own arena", "[cpu_memory]") {
  std::vector<BufferId> chain;
  CompiledProgram c = compileAsWritten(chainProgram(9, chain));
  const int64_t sizes[] = {3, 64, 1000, 257};
  std::vector<Tensor> inputs, wants;
  for (int64_t n : sizes) {
    inputs.push_back(randn({n}));
    wants.push_back(interpret(c.program(), std::vector<Tensor>{inputs.back()})[0]);
  }
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 40; ++k) {
        size_t which = (t + k) % 4;
        Tensor got = c.run({inputs[which]})[0];
        std::vector<double> g = values(got), w = values(wants[which]);
        for (size_t i = 0; i < g.size(); ++i)
          bad[t] += std::abs(g[i] - w[i]) > 1e-5 * std::max(1.0, std::abs(w[i]));
      }
    });
  for (std::thread &th : threads)
    th.join();
  CHECK(bad == std::vector<int>(4, 0));
  CompiledProgram::ArenaStats stats = c.arenaStats();
  CHECK(stats.arenas >= 1);
  CHECK(stats.arenas <= 4);
  CHECK(stats.bytes <= stats.arenas * c.arenaBytes({{"s0", 1000}}));
}
