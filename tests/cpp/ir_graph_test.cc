#include "ir/graph.h"
#include "ir/printer.h"
#include "ir/verifier.h"

#include <cmath>
#include <kiln_catch.h>

using namespace kiln;
using namespace kiln::ir;

namespace {
TensorMeta f32(std::vector<SymInt> sizes) { return TensorMeta::contiguous(DType::Float32, sizes); }
TensorMeta of(DType dt, std::vector<SymInt> sizes) { return TensorMeta::contiguous(dt, sizes); }
SymInt s0() { return SymInt::symbol("s0"); }

std::string verifyMessage(const Graph &g) {
  std::optional<Diagnostic> d = verify(g);
  return d ? d->message : "ok";
}

/// A graph `@t(%x: xMeta, %y: yMeta)` with one node of `op` and its result returned.
struct OneOp {
  Graph g{"t"};
  Value *x, *y;
  Node *node;
  OneOp(OpKind op, TensorMeta xMeta, TensorMeta yMeta, int numOperands, Attributes attrs,
        ValueType result) {
    x = g.addInput(xMeta, "x");
    y = g.addInput(yMeta, "y");
    std::vector<Value *> operands{x, y, x, y};
    operands.resize(numOperands);
    node = g.create(op, operands, std::move(attrs), {std::move(result)});
    g.setOutputs({node->result()});
  }
  std::string check() const { return verifyMessage(g); }
};
} // namespace

TEST_CASE("the op table drives keywords, arity and traits", "[ir][ops]") {
  CHECK(opKeyword(OpKind::Add) == "add");
  CHECK(opKindFromKeyword("log_softmax") == OpKind::LogSoftmax);
  CHECK(opKindFromKeyword("scaled_dot_product_attention") == OpKind::ScaledDotProductAttention);
  CHECK_FALSE(opKindFromKeyword("nope").has_value());
  CHECK(hasTrait(OpKind::Add, trait::Pure | trait::Elementwise | trait::Commutative));
  CHECK_FALSE(hasTrait(OpKind::Sub, trait::Commutative));
  CHECK(hasTrait(OpKind::Copy, trait::InPlace));
  CHECK_FALSE(hasTrait(OpKind::Copy, trait::Pure));
  CHECK(opInfo(OpKind::Linear).operands.accepts(2));
  CHECK(opInfo(OpKind::Linear).operands.accepts(3));
  CHECK_FALSE(opInfo(OpKind::Linear).operands.accepts(4));
  CHECK(opInfo(OpKind::Cat).operands.accepts(7));
  CHECK_FALSE(opInfo(OpKind::Cat).operands.accepts(0));
  CHECK(findAttrSpec(OpKind::View, "shape")->required);
  CHECK(findAttrSpec(OpKind::Sum, "nope") == nullptr);
  for (int i = 0; i < kNumOpKinds; ++i) { // keywords are unique
    OpKind k = static_cast<OpKind>(i);
    CHECK(opKindFromKeyword(opKeyword(k)) == k);
  }
}

TEST_CASE("attributes have one canonical form", "[ir][attr]") {
  CHECK(Attribute(std::vector<SymInt>{2, 3}).kind() == AttrKind::IntList);
  CHECK(Attribute(std::vector<SymInt>{2, 3}) == Attribute({2, 3}));
  CHECK(Attribute(std::vector<SymInt>{s0(), 3}).kind() == AttrKind::SymIntList);
  CHECK(Attribute(SymInt(4)).kind() == AttrKind::Int);
  CHECK(Attribute(s0() - 1).str() == "s0 - 1");
  CHECK(Attribute(0.0) != Attribute(-0.0));
  CHECK(Attribute(std::nan("")) == Attribute(std::nan("")));
  CHECK(Attribute(1.0).str() == "1.0");
  CHECK(Attribute(1e-5).str() == "1e-05");
  CHECK(Attribute(-INFINITY).str() == "-inf");
  CHECK(Attribute("a\"b\n").str() == "\"a\\\"b\\n\"");
  CHECK(Attribute(DType::BFloat16).str() == "bf16");
  CHECK(Attribute(int64_t{3}).matches(AttrKind::SymInt));
  CHECK(Attribute(true).matches(AttrKind::Number));
  CHECK_FALSE(Attribute(1.5).matches(AttrKind::Int));
  CHECK_THROWS_WITH(Attribute(1.5).toInt(), Catch::Contains("is a float, not an int"));
  CHECK(Attribute({1, 2}).toSymInts() == std::vector<SymInt>{1, 2});
}

TEST_CASE("tensor metas carry contiguous symbolic strides", "[ir][meta]") {
  TensorMeta m = f32({s0(), 4, 8});
  CHECK(m.strides == std::vector<SymInt>{32, 8, 1});
  TensorMeta n = f32({2, s0(), 0});
  CHECK(n.strides == std::vector<SymInt>{s0(), 1, 1}); // size 0 is clamped to 1, like torch
  CHECK(n.isContiguous());
  n.strides = {1, 2, 3};
  CHECK_FALSE(n.isContiguous());
  CHECK(printType(m) == "f32[s0, 4, 8]");
  CHECK(printType(n) == "f32[2, s0, 0] strided [1, 2, 3]");
  CHECK(printType(TensorMeta::contiguous(DType::Bool, {}, Device{DeviceType::CUDA, 1})) ==
        "b8[] on cuda:1");
  CHECK(printType(ScalarType::Float) == "float");
  CHECK_THROWS_WITH(ValueType(ScalarType::Int).meta(), Catch::Contains("not a tensor"));
}

TEST_CASE("the builder keeps nodes in order and use lists current", "[ir][graph]") {
  Graph g("f");
  Value *x = g.addInput(f32({4}), "x");
  Node *a = g.create(OpKind::Exp, {x}, {}, {f32({4})});
  Node *b = g.create(OpKind::Add, {a->result(), x}, {}, {f32({4})});
  g.setOutputs({b->result()});
  Value *y = g.addInput(f32({4}), "y");                 // inputs stay first
  Node *c = g.create(OpKind::Neg, {y}, {}, {f32({4})}); // new nodes go before the return
  CHECK(g.nodes().front() == x->definingNode());
  CHECK(g.nodes()[1] == y->definingNode());
  CHECK(g.nodes().back() == g.returnNode());
  CHECK(g.nodes()[g.numNodes() - 2] == c);
  CHECK(g.inputs() == std::vector<Value *>{x, y});
  CHECK(g.outputs() == std::vector<Value *>{b->result()});
  CHECK(x->uses().size() == 2);
  CHECK(a->result()->uses() == std::vector<Use>{{b, 0}});

  b->setOperand(1, c->result());
  CHECK(x->uses().size() == 1);
  CHECK(c->result()->uses() == std::vector<Use>{{b, 1}});
  a->result()->replaceAllUsesWith(x);
  CHECK_FALSE(a->result()->hasUses());
  CHECK(b->operand(0) == x);
  CHECK_THROWS_WITH(g.erase(c), Catch::Contains("still has 1 use"));
  g.erase(a);
  CHECK(g.numNodes() == 5);
  CHECK(verifyMessage(g) == "%0 = add: operand 1 (%1) is used before it is defined");
  g.moveBefore(c, b);
  CHECK(verifyMessage(g) == "ok");
  CHECK_THROWS_WITH(b->operand(5), Catch::Contains("has 2 operands; no operand 5"));

  Graph other("o");
  Value *z = other.addInput(f32({4}), "z");
  CHECK_THROWS_WITH(g.create(OpKind::Neg, {z}, {}, {f32({4})}),
                    Catch::Contains("belongs to another graph"));
  CHECK_THROWS_WITH(x->replaceAllUsesWith(z), Catch::Contains("belongs to another graph"));
}

TEST_CASE("the verifier checks structure and operand order", "[ir][verifier]") {
  Graph g("f");
  Value *x = g.addInput(f32({4}), "x");
  CHECK(verifyMessage(g) == "graph @f has no 'return' node");
  Node *a = g.create(OpKind::Exp, {x}, {}, {f32({4})});
  Node *b = g.create(OpKind::Neg, {a->result()}, {}, {f32({4})});
  g.setOutputs({b->result()});
  CHECK(verifyMessage(g) == "ok");
  g.moveBefore(b, a);
  CHECK(verifyMessage(g) == "%0 = neg: operand 0 (%1) is used before it is defined");
  g.moveBefore(a, b);
  g.moveBefore(g.returnNode(), b);
  CHECK(verifyMessage(g) == "'return': 'return' must be the last node of the graph");
  g.moveBefore(b, g.returnNode());
  g.moveBefore(x->definingNode(), g.returnNode());
  CHECK(verifyMessage(g) == "input %x: input nodes must come before every other node");
  Graph bad("not an identifier");
  bad.setOutputs({});
  CHECK(verifyMessage(bad) == "graph name 'not an identifier' is not an identifier");
}

TEST_CASE("the verifier checks arity, results and attributes from the table", "[ir][verifier]") {
  CHECK(OneOp(OpKind::Add, f32({4}), f32({4}), 3, {}, f32({4})).check() ==
        "%0 = add: expects 2 operands, got 3");
  CHECK(OneOp(OpKind::Linear, f32({4}), f32({4}), 1, {}, f32({4})).check() ==
        "%0 = linear: expects 2 to 3 operands, got 1");
  CHECK(OneOp(OpKind::Relu, f32({4}), f32({4}), 1, {{"foo", 1}}, f32({4})).check() ==
        "%0 = relu: unknown attribute 'foo' (it takes none)");
  CHECK(OneOp(OpKind::Sum, f32({4}), f32({4}), 1, {{"dims", 1}}, f32({})).check() ==
        "%0 = sum: unknown attribute 'dims' (it takes dim, dtype, keepdim)");
  CHECK(OneOp(OpKind::Sum, f32({4}), f32({4}), 1, {{"dim", 1.5}}, f32({})).check() ==
        "%0 = sum: attribute 'dim' must be an int list, got float 1.5");
  CHECK(OneOp(OpKind::View, f32({4}), f32({4}), 1, {}, f32({4})).check() ==
        "%0 = view: missing required attribute 'shape' (symbolic int list)");
  Graph g("f");
  Value *x = g.addInput(f32({4}), "x");
  Node *n = g.create(OpKind::Exp, {x}, {}, {f32({4}), f32({4})});
  g.setOutputs({n->result()});
  CHECK(verifyMessage(g) == "%0, %1 = exp: produces 1 result, got 2");
}

TEST_CASE("the verifier checks elementwise dtypes and broadcasting", "[ir][verifier]") {
  auto binary = [](OpKind op, TensorMeta a, TensorMeta b, ValueType out) {
    return OneOp(op, a, b, 2, {}, out).check();
  };
  CHECK(binary(OpKind::Add, f32({2, 1}), f32({3}), f32({2, 3})) == "ok");
  CHECK(binary(OpKind::Add, f32({2, 4}), f32({3}), f32({2, 4})) ==
        "%0 = add: operand shapes do not broadcast: 4 vs 3 in dim -1");
  CHECK(binary(OpKind::Add, f32({2, 3}), f32({3}), f32({3, 3})) ==
        "%0 = add: result shape [3, 3] should be [2, 3] (the broadcast of the operand shapes)");
  CHECK(binary(OpKind::Mul, f32({s0(), 3}), f32({1, 3}), f32({s0(), 3})) == "ok");
  CHECK(binary(OpKind::Mul, f32({s0()}), f32({s0() + 1}), f32({s0()})) ==
        "%0 = mul: operand shapes do not broadcast: s0 vs s0 + 1 in dim -1");
  CHECK(binary(OpKind::Add, of(DType::Int32, {4}), f32({4}), of(DType::Int32, {4})) ==
        "%0 = add: result dtype i32 should be f32 (torch.result_type of the operands)");
  CHECK(binary(OpKind::Add, of(DType::Int32, {4}), of(DType::Float64, {}), f32({4})) ==
        "%0 = add: result dtype f32 should be f64 (torch.result_type of the operands)");
  CHECK(binary(OpKind::Add, of(DType::Int32, {4}), of(DType::Float64, {}),
               of(DType::Float64, {4})) == "ok");
  CHECK(binary(OpKind::Lt, f32({4}), f32({4}), f32({4})) ==
        "%0 = lt: result dtype f32 should be b8 (comparisons produce bool)");
  CHECK(binary(OpKind::Div, of(DType::Int64, {4}), of(DType::Int64, {4}), of(DType::Int64, {4})) ==
        "%0 = div: 'div' of i64 operands produces a floating dtype, got i64");
  CHECK(binary(OpKind::Sub, of(DType::Bool, {4}), of(DType::Bool, {4}), of(DType::Bool, {4})) ==
        "%0 = sub: 'sub' is not supported on bool operands (torch rejects it too)");
  TensorMeta onCuda = f32({4});
  onCuda.device = Device{DeviceType::CUDA, 0};
  CHECK(binary(OpKind::Add, f32({4}), onCuda, f32({4})) ==
        "%0 = add: operand 1 is on cuda:0 but the result is on cpu");

  // A Python scalar operand is weak: an int tensor times a float scalar is the default float.
  Graph g("f");
  Value *x = g.addInput(of(DType::Int64, {4}), "x");
  Value *c = g.addInput(ScalarType::Float, "c");
  Node *n = g.create(OpKind::Mul, {x, c}, {}, {f32({4})});
  g.setOutputs({n->result()});
  CHECK(verifyMessage(g) == "ok");
  n->result()->setType(of(DType::Float64, {4}));
  CHECK(verifyMessage(g) ==
        "%0 = mul: result dtype f64 should be f32 (torch.result_type of the operands)");
}

TEST_CASE("the verifier checks reductions, views and library calls", "[ir][verifier]") {
  auto unary = [](OpKind op, TensorMeta in, Attributes attrs, ValueType out) {
    return OneOp(op, in, in, 1, std::move(attrs), out).check();
  };
  CHECK(unary(OpKind::Sum, f32({2, 3}), {{"dim", {1}}}, f32({2})) == "ok");
  CHECK(unary(OpKind::Sum, f32({2, 3}), {{"dim", {-1}}, {"keepdim", true}}, f32({2, 1})) == "ok");
  CHECK(unary(OpKind::Sum, of(DType::Int32, {2, 3}), {}, of(DType::Int64, {})) == "ok");
  CHECK(unary(OpKind::Sum, f32({2, 3}), {{"dim", {1}}}, f32({3})) ==
        "%0 = sum: result shape [3] should be [2] (reduced dims removed)");
  CHECK(unary(OpKind::Sum, f32({2, 3}), {{"dim", {1, -1}}}, f32({2})) ==
        "%0 = sum: dim 1 appears more than once");
  CHECK(unary(OpKind::Argmax, f32({2, 3}), {{"dim", 1}}, f32({2})) ==
        "%0 = argmax: result dtype f32 should be i64 ('argmax' of f32)");
  CHECK(unary(OpKind::Mean, of(DType::Int64, {2}), {}, of(DType::Int64, {})) ==
        "%0 = mean: 'mean' needs a floating input (or a 'dtype' attribute), got i64");
  CHECK(unary(OpKind::Softmax, f32({2, 3}), {{"dim", 2}}, f32({2, 3})) ==
        "%0 = softmax: dim 2 is out of range for a tensor of rank 2 (expected -2 to 1)");
  CHECK(unary(OpKind::View, f32({s0(), 4}), {{"shape", std::vector<SymInt>{s0() * 4}}},
              f32({s0() * 4})) == "ok");
  CHECK(unary(OpKind::View, f32({2, 4}), {{"shape", {3, -1}}}, f32({3, 3})) ==
        "%0 = view: cannot view [2, 4] (8 elements) as [3, 3] (9 elements)");
  CHECK(unary(OpKind::Permute, f32({2, 3, 4}), {{"dims", {2, 0, 1}}}, f32({4, 2, 3})) == "ok");
  CHECK(unary(OpKind::Transpose, f32({2, 3}), {{"dim0", 0}, {"dim1", 1}}, f32({2, 3})) ==
        "%0 = transpose: result shape [2, 3] should be [3, 2] ('transpose' of [2, 3])");
  CHECK(unary(OpKind::Expand, f32({1, 3}), {{"size", {4, -1}}}, f32({4, 3})) == "ok");
  CHECK(unary(OpKind::Expand, f32({2, 3}), {{"size", {4, 3}}}, f32({4, 3})) ==
        "%0 = expand: cannot expand dim 0 of size 2 to 4 (only size-1 dims expand)");
  CHECK(unary(OpKind::Slice, f32({10}), {{"start", 2}, {"end", -1}, {"step", 3}}, f32({3})) ==
        "ok");
  CHECK(unary(OpKind::Select, f32({2, 3}), {{"dim", 1}, {"index", 3}}, f32({2})) ==
        "%0 = select: select index 3 is out of range for dim 1 of size 3");
  CHECK(unary(OpKind::Unsqueeze, f32({2}), {{"dim", -1}}, f32({2, 1})) == "ok");
  CHECK(unary(OpKind::Squeeze, f32({2, 1}), {}, f32({2})) == "ok");
  CHECK(unary(OpKind::Cast, f32({2}), {{"dtype", DType::Int8}}, of(DType::Int8, {2})) == "ok");
  CHECK(unary(OpKind::Relu, f32({2}), {}, of(DType::Float16, {2})) ==
        "%0 = relu: result dtype f16 should be f32 (torch.result_type of the operands)");
  CHECK(OneOp(OpKind::Matmul, f32({5, 2, 3}), f32({3, 4}), 2, {}, f32({5, 2, 4})).check() == "ok");
  CHECK(
      OneOp(OpKind::Matmul, f32({2, 3}), of(DType::Float16, {3, 4}), 2, {}, f32({2, 4})).check() ==
      "%0 = matmul: 'matmul' needs operands of one dtype, got f32 (operand 0) "
      "and f16 (operand 1)");
  CHECK(OneOp(OpKind::Linear, f32({s0(), 8}), f32({16, 8}), 2, {}, f32({s0(), 16})).check() ==
        "ok");
  CHECK(OneOp(OpKind::Linear, f32({4, 7}), f32({16, 8}), 2, {}, f32({4, 16})).check() ==
        "%0 = linear: linear input has 7 features but the weight expects 8");
  CHECK(OneOp(OpKind::Embedding, f32({4}), f32({10, 3}), 2, {}, f32({4, 3})).check() ==
        "%0 = embedding: embedding indices (operand 0) must be i64 or i32, got f32");
  CHECK(OneOp(OpKind::Cat, f32({2, 3}), f32({4, 3}), 2, {}, f32({6, 3})).check() == "ok");
  CHECK(OneOp(OpKind::Cat, f32({2, 3}), f32({4, 2}), 2, {}, f32({6, 3})).check() ==
        "%0 = cat: cat operand 1 has size 2 in dim 1, operand 0 has 3");
  CHECK(OneOp(OpKind::Constant, f32({}), f32({}), 0, {{"value", 1.5}}, of(DType::Int32, {}))
            .check() == "%0 = constant: constant value 1.5 does not fit the result dtype i32");
  CHECK(OneOp(OpKind::Exp, f32({2}), f32({2}), 1, {}, ScalarType::Float).check() ==
        "%0 = exp: the result must be a tensor, got float");
}

TEST_CASE("printing a builder-made graph is deterministic", "[ir][printer]") {
  Graph g("forward");
  Value *x = g.addInput(f32({s0(), 128}), "x", {"m.py", 3});
  Value *w = g.addInput(f32({256, 128}), "w");
  Node *lin = g.create(OpKind::Linear, {x, w}, {}, {f32({s0(), 256})}, {"m.py", 10});
  Node *gelu =
      g.create(OpKind::Gelu, {lin->result()}, {{"approximate", "tanh"}}, {f32({s0(), 256})});
  g.setOutputs({gelu->result()});
  CHECK(printGraph(g) == "graph @forward(%x: f32[s0, 128] loc(\"m.py\":3), %w: f32[256, 128]) {\n"
                         "  %0 = linear(%x, %w) : f32[s0, 256] loc(\"m.py\":10)\n"
                         "  %1 = gelu(%0) {approximate = \"tanh\"} : f32[s0, 256]\n"
                         "  return %1\n"
                         "}\n");
  Graph h("h");
  h.addInput(f32({}), "");
  h.addInput(f32({}), "a b");
  h.addInput(f32({}), "arg0");
  h.setOutputs({});
  // Unusable or clashing input names fall back to unique %argN names.
  CHECK(printGraph(h) == "graph @h(%arg0: f32[], %arg1: f32[], %arg2: f32[]) {\n  return\n}\n");
}
