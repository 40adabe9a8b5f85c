// GraphBuilder: nodes typed by their shape rules as they are added, rejected nodes leave the
// graph unchanged, rollback, positions, and cloneGraph.

#include "ir/graph_builder.h"
#include "ir/printer.h"
#include "ir/verifier.h"

#include <functional>
#include <kiln_catch.h>

using namespace kiln;
using namespace kiln::ir;

namespace {
TensorMeta f32(std::vector<SymInt> sizes) { return TensorMeta::contiguous(DType::Float32, sizes); }
SymInt s0() { return SymInt::symbol("s0"); }

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "no error";
}
} // namespace

TEST_CASE("GraphBuilder types each node by its rule as it is added") {
  GraphBuilder b("f");
  Value *x = b.input(f32({s0(), 8}), "x");
  Value *w = b.input(f32({16, 8}), "w");
  Value *y = b.add(OpKind::Linear, {x, w}, {})[0];
  CHECK(y->meta().sizes == std::vector<SymInt>{s0(), 16});
  Value *t = b.add(OpKind::Transpose, {y}, {{"dim0", 0}, {"dim1", 1}})[0];
  CHECK(t->meta().sizes == std::vector<SymInt>{16, s0()});
  CHECK(t->meta().strides == std::vector<SymInt>{1, 16}); // a view keeps eager's strides
  Value *n = b.add(OpKind::Constant, {}, {{"value", int64_t{2}}}, {},
                   std::vector<ValueType>{ScalarType::Int})[0];
  Value *m = b.add(OpKind::Mul, {y, n}, {})[0];
  CHECK(m->meta().dtype == DType::Float32); // a Python int is weak
  std::unique_ptr<Graph> g = b.finish({m});
  CHECK(!verify(*g));
  CHECK(printGraph(*g) ==
        "graph @f(%x: f32[s0, 8], %w: f32[16, 8]) {\n"
        "  %0 = linear(%x, %w) : f32[s0, 16]\n"
        "  %1 = transpose(%0) {dim0 = 0, dim1 = 1} : f32[16, s0] strided [1, 16]\n"
        "  %2 = constant() {value = 2} : int\n"
        "  %3 = mul(%0, %2) : f32[s0, 16]\n"
        "  return %3\n"
        "}\n");
}

TEST_CASE("GraphBuilder rejects a node the op table or its rule forbids, leaving the graph") {
  GraphBuilder b("f");
  Value *x = b.input(f32({4}), "x");
  Value *y = b.input(f32({3}), "y");
  CHECK_THAT(errorOf([&] { b.add(OpKind::Add, {x, y}, {}); }),
             Catch::Matchers::Contains("add: operand shapes do not broadcast: 4 vs 3"));
  CHECK_THAT(errorOf([&] { b.add(OpKind::Exp, {x, y}, {}); }),
             Catch::Matchers::Contains("exp: expects 1 operand, got 2"));
  CHECK_THAT(errorOf([&] { b.add(OpKind::Sum, {x}, {{"axis", 0}}); }),
             Catch::Matchers::Contains("sum: unknown attribute 'axis'"));
  CHECK_THAT(errorOf([&] { b.add(OpKind::SymSize, {x}, {}); }),
             Catch::Matchers::Contains("missing required attribute 'dim'"));
  CHECK_THAT(errorOf([&] { b.add(OpKind::Call, {x}, {{"target", "f"}}); }),
             Catch::Matchers::Contains("give the result types"));
  CHECK(b.mark() == 2);
  CHECK(b.graph().numNodes() == 2);
}

TEST_CASE("GraphBuilder rollback erases what was added after the mark; positions number nodes") {
  GraphBuilder b("f");
  Value *x = b.input(f32({4}), "x");
  Value *e = b.add(OpKind::Exp, {x}, {})[0];
  size_t mark = b.mark();
  Value *s = b.add(OpKind::Sin, {e}, {})[0];
  b.add(OpKind::Cos, {s}, {});
  b.rollback(mark);
  CHECK(b.mark() == 2);
  NodePositions positions = b.positions();
  CHECK(positions.at(e->definingNode()).line == 2);
  CHECK(b.numberOf(x->definingNode()) == 0);
  std::unique_ptr<Graph> g = b.finish({e});
  CHECK(printGraph(*g) == "graph @f(%x: f32[4]) {\n  %0 = exp(%x) : f32[4]\n  return %0\n}\n");
}

TEST_CASE("cloneGraph copies nodes, attributes, names and locations") {
  GraphBuilder b("f");
  Value *x = b.input(f32({s0(), 8}), "x", {"model.py", 3});
  Value *y = b.add(OpKind::Sum, {x}, {{"dim", std::vector<int64_t>{1}}}, {"model.py", 4})[0];
  std::unique_ptr<Graph> g = b.finish({y, x});
  std::unordered_map<const Node *, Node *> map;
  std::unique_ptr<Graph> copy = cloneGraph(*g, &map);
  CHECK(printGraph(*copy) == printGraph(*g));
  CHECK(!verify(*copy));
  CHECK(map.size() == g->numNodes());
  CHECK(map.at(y->definingNode())->loc() == SourceLoc{"model.py", 4});
  CHECK(map.at(y->definingNode()) != y->definingNode());
}

TEST_CASE("GraphBuilder keeps what the rules assumed about the symbols, until rolled back") {
  GraphBuilder b("f");
  Value *x = b.input(f32({s0(), 2}), "x");
  b.add(OpKind::Exp, {x}, {});
  CHECK(b.assumptions().empty());
  size_t mark = b.mark();
  Value *w = b.add(OpKind::Slice, {x},
                   {{"dim", int64_t{0}}, {"start", int64_t{9}}, {"end", int64_t{12}}})[0];
  CHECK(w->meta().sizes == std::vector<SymInt>{3, 2}); // the end taken to be within s0
  std::vector<std::string> texts;
  for (const SymRelation &r : b.assumptions())
    texts.push_back(r.str());
  CHECK(texts == std::vector<std::string>{"12 <= s0"});
  b.rollback(mark);
  CHECK(b.assumptions().empty());
}
