#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

#include <kiln_catch.h>
#include <random>

using namespace kiln;
using namespace kiln::ir;

namespace {
constexpr std::string_view kExample =
    R"(graph @forward(%x: f32[s0, 128] loc("m.py":3), %w: f32[256, 128], %b: f32[256], %n: int, %d: bf16[2] on cuda:1) {
  %0 = linear(%x, %w, %b) : f32[s0, 256] loc("m.py":10)
  %1 = gelu(%0) {approximate = "tanh"} : f32[s0, 256]
  %2 = sum(%1) {dim = [-1], dtype = f64, keepdim = true} : f64[s0, 1]
  %3 = view(%1) {shape = [s0*256]} : f32[s0*256]
  %4 = transpose(%1) {dim0 = 0, dim1 = 1} : f32[256, s0] strided [1, 256]
  %5 = slice(%1) {dim = 0, end = s0 - 1, start = 1} : f32[s0 - 2, 256]
  %6 = constant() {value = 1e-05} : f32[]
  %7 = mul(%1, %n) : f32[s0, 256]
  %8 = cast(%7) {dtype = bf16} : bf16[s0, 256]
  %9 = constant() {value = -inf} : float
  return %2, %3, %4, %5, %6, %8, %9, %d
}
)";

std::string roundTrip(std::string_view text) { return printGraph(*parseGraph(text)); }

std::string parseError(std::string_view text) {
  try {
    parseModule(text, "in.kir");
  } catch (const DiagnosticError &e) {
    return e.what();
  }
  return "parsed";
}
} // namespace

TEST_CASE("printer output parses back to the same text", "[ir][parser]") {
  CHECK(roundTrip(kExample) == kExample);
  std::unique_ptr<Graph> g = parseGraph(kExample);
  CHECK(g->name() == "forward");
  CHECK(g->inputs().size() == 5);
  CHECK(g->inputs()[3]->type() == ValueType(ScalarType::Int));
  CHECK(g->outputs().size() == 8);
  CHECK(g->nodes()[5]->loc() == SourceLoc{"m.py", 10});
  CHECK(g->inputs()[0]->definingNode()->loc() == SourceLoc{"m.py", 3});
  CHECK(verify(*g) == std::nullopt);
}

TEST_CASE("hand-written text is normalized by one print", "[ir][parser]") {
  std::string text = R"(
// comments and any value names are fine
graph @g(%input: f32[2,3]) {
  %a = exp(%input) : f32[2,3]   // trailing comment
  %b, %c = exp(%a) : f32[2, 3], f32[2, 3]
  %d = add(%a,%b) : f32[2,3]
  %e = copy_(%d, %a) : f32[2, 3]
  return %d
}
graph @h() {
  return
}
)";
  ParsedModule m = parseModule(text, "hand.kir");
  REQUIRE(m.graphs.size() == 2);
  CHECK(printGraph(*m.graphs[0]) == "graph @g(%input: f32[2, 3]) {\n"
                                    "  %0 = exp(%input) : f32[2, 3]\n"
                                    "  %1, %2 = exp(%0) : f32[2, 3], f32[2, 3]\n"
                                    "  %3 = add(%0, %1) : f32[2, 3]\n"
                                    "  %4 = copy_(%3, %0) : f32[2, 3]\n"
                                    "  return %3\n"
                                    "}\n");
  CHECK(printGraph(*m.graphs[1]) == "graph @h() {\n  return\n}\n");
  Node *exp2 = m.graphs[0]->nodes()[2];
  CHECK(m.positions.at(exp2) == TextPos{5, 3});
  CHECK(m.positions.at(m.graphs[0]->returnNode()) == TextPos{8, 3});
  // Parsing is syntactic: the verifier is what rejects exp's second result.
  CHECK(verify(*m.graphs[0])->message == "%1, %2 = exp: produces 1 result, got 2");
}

TEST_CASE("a builder-made graph round-trips", "[ir][parser]") {
  Graph g("model");
  SymInt s0 = SymInt::symbol("s0"), s1 = SymInt::symbol("s1");
  Value *x = g.addInput(TensorMeta::contiguous(DType::Float16, {s0, s1 * 2}), "x", {"a.py", 1});
  Value *idx = g.addInput(TensorMeta::contiguous(DType::Int64, {s0}), "idx");
  Value *flag = g.addInput(ScalarType::Bool, "flag");
  Node *e = g.create(OpKind::Embedding, {idx, x}, {{"padding_idx", -1}},
                     {TensorMeta::contiguous(DType::Float16, {s0, s1 * 2})}, {"a.py", 5});
  Node *m = g.create(OpKind::Mean, {e->result()},
                     {{"dim", {0}}, {"keepdim", false}, {"dtype", DType::Float32}},
                     {TensorMeta::contiguous(DType::Float32, {s1 * 2})});
  Node *c = g.create(OpKind::Constant, {}, {{"value", true}}, {ScalarType::Bool});
  Node *w = g.create(OpKind::Where, {flag, m->result(), c->result()}, {},
                     {TensorMeta::contiguous(DType::Float32, {s1 * 2})});
  Node *sel = g.create(OpKind::Select, {x}, {{"dim", 1}, {"index", floorDiv(s1, 2) + s0}},
                       {TensorMeta::contiguous(DType::Float16, {s0})});
  g.setOutputs({w->result(), sel->result()}, {"a.py", 9});
  REQUIRE(verify(g) == std::nullopt);
  std::string text = printGraph(g);
  std::unique_ptr<Graph> back = parseGraph(text, "built.kir");
  CHECK(printGraph(*back) == text);
  CHECK(verify(*back) == std::nullopt);
  CHECK(back->nodes()[7]->attr("index")->toSymInt() == floorDiv(s1, 2) + s0);
  CHECK(back->returnNode()->loc() == SourceLoc{"a.py", 9});
  CHECK(text.find("{index = s0 + s1 floordiv 2, dim = 1}") == std::string::npos); // sorted
  CHECK(text.find("{dim = 1, index = s0 + s1 floordiv 2}") != std::string::npos);
}

TEST_CASE("malformed input gives line:col and the expected token", "[ir][parser]") {
  struct Case {
    std::string_view text;
    std::string_view error;
  };
  const Case cases[] = {
      {"", "parsed"},
      {"graph", "in.kir:1:6: error: expected a graph name like '@forward' after 'graph', got end "
                "of input"},
      {"grap @f() {}", "in.kir:1:1: error: expected 'graph' at the start of a graph, got 'grap'"},
      {"graph @f( {", "in.kir:1:11: error: expected a value name like '%x' as a graph parameter, "
                      "got '{'"},
      {"graph @f(%x f32[2]) {", "in.kir:1:13: error: expected ':' after the parameter name, got "
                                "'f32'"},
      {"graph @f(%x: float32[2]) {", "in.kir:1:14: error: unknown type 'float32' (did you mean "
                                     "'f32[...]'?)"},
      {"graph @f(%x: f33[2]) {", "in.kir:1:14: error: expected a type ('f32[2, s0]', 'i64[]', "
                                 "'int', 'float' or 'bool'), got 'f33'"},
      {"graph @f(%x: f32[2) {", "in.kir:1:19: error: expected ']' after the sizes, got ')'"},
      {"graph @f(%x: f32[2] strided [1, 1]) {",
       "in.kir:1:21: error: 2 strides given for a tensor of rank 1"},
      {"graph @f(%x: f32[2] on gpu) {", "in.kir:1:24: error: expected a device ('cpu' or "
                                        "'cuda:<index>') after 'on', got 'gpu'"},
      {"graph @f() {\n  return\n", "in.kir:3:1: error: expected '}' after 'return' (it ends the "
                                   "graph body), got end of input"},
      {"graph @f() {\n  %0 = frobnicate() : f32[]\n  return\n}",
       "in.kir:2:8: error: unknown op 'frobnicate'"},
      {"graph @f() {\n  %0 = input() : f32[]\n  return\n}",
       "in.kir:2:8: error: graph inputs are written as parameters of the graph, not 'input'"},
      {"graph @f(%x: f32[]) {\n  %0 = neg(%y) : f32[]\n  return %0\n}",
       "in.kir:2:12: error: use of undefined value %y"},
      {"graph @f(%x: f32[]) {\n  %x = neg(%x) : f32[]\n  return %x\n}",
       "in.kir:2:3: error: value %x is defined twice"},
      {"graph @f(%x: f32[]) {\n  %0 = neg(%0) : f32[]\n  return %0\n}",
       "in.kir:2:12: error: use of undefined value %0"},
      {"graph @f(%x: f32[]) {\n  %0 = neg(%x)\n  return %0\n}",
       "in.kir:3:3: error: expected ':' and the result type after 'neg(...)', got 'return'"},
      {"graph @f(%x: f32[]) {\n  %0, %1 = neg(%x) : f32[]\n  return %0\n}",
       "in.kir:2:3: error: 'neg' defines 2 result(s) but lists 1 type(s)"},
      {"graph @f(%x: f32[]) {\n  neg(%x) : f32[]\n  return\n}",
       "in.kir:2:11: error: 'neg' lists result types but names no results (write '%0 = "
       "neg(...) : type')"},
      {"graph @f(%x: f32[]) {\n  %0 = neg(%x,) : f32[]\n  return %0\n}",
       "in.kir:2:15: error: expected a value name like '%x' as an operand, got ')'"},
      {"graph @f(%x: f32[]) {\n  %0 = sum(%x) {dim = } : f32[]\n  return %0\n}",
       "in.kir:2:23: error: expected an attribute value (a number, 'true', 'false', a string, a "
       "dtype, a symbolic int or a list), got '}'"},
      {"graph @f(%x: f32[]) {\n  %0 = sum(%x) {dim = [1.5]} : f32[]\n  return %0\n}",
       "in.kir:2:24: error: expected a symbolic integer (a number, a symbol like 's0', or '('), "
       "got '1.5'"},
      {"graph @f(%x: f32[]) {\n  %0 = sum(%x) {dim = 1, dim = 2} : f32[]\n  return %0\n}",
       "in.kir:2:26: error: attribute 'dim' is given twice"},
      {"graph @f(%x: f32[]) {\n  %0 = sum(%x) {dim 1} : f32[]\n  return %0\n}",
       "in.kir:2:21: error: expected '=' after the attribute name 'dim', got '1'"},
      {"graph @f(%x: f32[]) {\n  %0 = gelu(%x) {approximate = \"tanh} : f32[]\n}",
       "in.kir:2:32: error: unterminated string literal"},
      {"graph @f(%x: f32[]) {\n  %0 = gelu(%x) {approximate = \"\\q\"} : f32[]\n}",
       "in.kir:2:33: error: unknown escape sequence in string literal (use \\\\, \\\", \\n, \\t "
       "or \\xHH)"},
      {"graph @f(%x: f32[]) {\n  %0 = neg(%x) : f32[] loc(\"m.py\" 3)\n  return %0\n}",
       "in.kir:2:35: error: expected ':' between the file name and the line in loc(...), got "
       "'3'"},
      {"graph @f(%x: f32[]) {\n  return %x\n  %0 = neg(%x) : f32[]\n}",
       "in.kir:3:3: error: expected '}' after 'return' (it ends the graph body), got '%0'"},
      {"graph @f(%x: f32[99999999999999999999]) {", "in.kir:1:18: error: integer literal "
                                                    "'99999999999999999999' is out of the int64 "
                                                    "range"},
      {"graph @f(%x: f32[2]) {\n  %0 = view(%x) {shape = [s0 floordiv 0]} : f32[2]\n}",
       "in.kir:2:30: error: symbolic int floordiv: division by zero (s0 floordiv 0)"},
      {"graph @f(%x: f32[2]) {\n  %0 = neg(%x) : f32[2] # no\n}",
       "in.kir:2:25: error: unexpected character '#'"},
      {"graph @f(%x: f32[2]) {\n  %0 = neg(%x) : f32[2] \x01\n}",
       "in.kir:2:25: error: unexpected byte 0x01"},
      {"graph @f(% : f32[2]) {", "in.kir:1:10: error: expected a name after '%'"},
      {"graph @f() {\n  return\n}\ngraph @f() {\n  return\n}",
       "in.kir:4:1: error: graph @f is defined twice"},
      {"graph @f(%x: f32[12abc]) {", "in.kir:1:18: error: malformed number '12a'"},
  };
  for (const Case &c : cases) {
    INFO("input: " << c.text);
    CHECK(parseError(c.text) == c.error);
  }
}

TEST_CASE("chunks keep the line numbers of their file", "[ir][parser]") {
  try {
    parseModule("graph @f() {\n  retur\n}", "big.kir", 40);
    FAIL("expected an error");
  } catch (const DiagnosticError &e) {
    CHECK(e.diagnostic().pos == TextPos{41, 3});
    CHECK(e.diagnostic().message == "unknown op 'retur'");
    CHECK(e.diagnostic().buffer == "big.kir");
  }
  CHECK_THROWS_WITH(parseGraph("", "e.kir"), "e.kir: error: expected exactly one graph, found 0");
}

TEST_CASE("mutated text never crashes the parser or the verifier", "[ir][parser]") {
  std::mt19937 rng(7);
  std::string alphabet = "%@()[]{},:=+-*\"<>!/ \n0123456789.eabsxfmi_";
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text(kExample);
    int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 3) {
      case 0:
        text.erase(pos, 1 + rng() % 8);
        break;
      case 1:
        text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
        break;
      default:
        text[pos] = alphabet[rng() % alphabet.size()];
      }
      if (text.empty())
        text = "x";
    }
    try {
      ParsedModule m = parseModule(text, "fuzz.kir");
      for (auto &g : m.graphs) {
        (void)verify(*g);
        std::string printed = printGraph(*g);
        CHECK(printGraph(*parseGraph(printed)) == printed);
      }
      ++parsed;
    } catch (const DiagnosticError &) {
    }
  }
  CHECK(parsed > 0);
}
