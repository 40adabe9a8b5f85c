#include "ir/diagnostic.h"
#include "ir/sym_int.h"
#include "ir/sym_int_walk.h"

#include <functional>
#include <kiln_catch.h>
#include <limits>
#include <random>

using namespace kiln;
using namespace kiln::ir;

namespace {
SymInt s(std::string_view name) { return SymInt::symbol(name); }
SymInt p(std::string_view text) { return SymInt::parse(text); }

// A random expression, evaluated directly on integers (Python semantics) and built as a SymInt.
struct Expr {
  std::function<int64_t(const SymbolValues &)> eval;
  SymInt sym;
  std::string text;
};

int64_t pyFloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t pyMod(int64_t a, int64_t b) { return a - pyFloorDiv(a, b) * b; }

Expr randomExpr(std::mt19937 &rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth <= 0 ? 1 : 8);
  int k = pick(rng);
  if (k == 0) {
    int64_t c = std::uniform_int_distribution<int64_t>(-6, 6)(rng);
    return {[c](const SymbolValues &) { return c; }, SymInt(c), std::to_string(c)};
  }
  if (k == 1) {
    std::string name = "s" + std::to_string(std::uniform_int_distribution<int>(0, 2)(rng));
    return {[name](const SymbolValues &v) { return v.at(name); }, s(name), name};
  }
  Expr a = randomExpr(rng, depth - 1), b = randomExpr(rng, depth - 1);
  auto ea = a.eval, eb = b.eval;
  std::string t = "(" + a.text + ") ? (" + b.text + ")";
  switch (k) {
  case 2:
  case 3:
    return {[=](const SymbolValues &v) { return ea(v) + eb(v); }, a.sym + b.sym, t};
  case 4:
    return {[=](const SymbolValues &v) { return ea(v) - eb(v); }, a.sym - b.sym, t};
  case 5:
    return {[=](const SymbolValues &v) { return ea(v) * eb(v); }, a.sym * b.sym, t};
  case 6: { // divide by a nonzero constant so evaluation is defined everywhere
    int64_t c = std::uniform_int_distribution<int64_t>(1, 5)(rng) * (rng() % 2 ? 1 : -1);
    bool isMod = rng() % 2;
    return {[=](const SymbolValues &v) { return isMod ? pyMod(ea(v), c) : pyFloorDiv(ea(v), c); },
            isMod ? mod(a.sym, c) : floorDiv(a.sym, c), t};
  }
  case 7:
    return {[=](const SymbolValues &v) { return std::max(ea(v), eb(v)); }, max(a.sym, b.sym), t};
  default:
    return {[=](const SymbolValues &v) { return std::min(ea(v), eb(v)); }, min(a.sym, b.sym), t};
  }
}
} // namespace

TEST_CASE("constants fold and stay constants", "[symint]") {
  CHECK((SymInt(3) + 4).constant() == 7);
  CHECK((SymInt(3) * -4).constant() == -12);
  CHECK(floorDiv(7, -2).constant() == -4); // Python rounds toward -inf
  CHECK(mod(7, -2).constant() == -1);      // and takes the divisor's sign
  CHECK(mod(-7, 2).constant() == 1);
  CHECK(max(3, 9).constant() == 9);
  CHECK(min(3, 9).constant() == 3);
  CHECK(SymInt(5).str() == "5");
  CHECK(SymInt(-5).str() == "-5");
}

TEST_CASE("identities simplify", "[symint]") {
  SymInt x = s("s0");
  CHECK(x + 0 == x);
  CHECK(x * 1 == x);
  CHECK((x * 0).constant() == 0);
  CHECK((x - x).constant() == 0);
  CHECK(floorDiv(x, 1) == x);
  CHECK(floorDiv(x, x).constant() == 1);
  CHECK(mod(x, x).constant() == 0);
  CHECK(mod(x, 1).constant() == 0);
  CHECK(max(x, x) == x);
  CHECK(max(x + 1, x) == x + 1);
  CHECK(min(x + 1, x) == x);
  // an integer multiple of a polynomial divides to the integer (a view's -1 over a symbolic dim)
  CHECK(floorDiv(x * 64 + 64, x * 8 + 8).constant() == 8);
  CHECK(floorDiv(-x * 6 - 12, x + 2).constant() == -6);
  CHECK(mod(x * 64 + 64, x * 8 + 8).constant() == 0);
  CHECK(!floorDiv(x * 64 + 65, x * 8 + 8).isConstant());
}

TEST_CASE("like terms collect into one canonical form", "[symint]") {
  SymInt x = s("s0"), y = s("s1");
  CHECK(x * 2 + x == x * 3);
  CHECK(x * 2 + x == 3 * x);
  CHECK((x * 2 + x).str() == "s0*3");
  CHECK(x * y == y * x);
  CHECK((x + y) * (x - y) == x * x - y * y);
  CHECK((x + 1) * 2 + 3 == 2 * x + 5);
  CHECK((x * 2 + 1).str() == "s0*2 + 1");
  CHECK((y - x * 2).str() == "-s0*2 + s1");
  CHECK((x * y * x).str() == "s0*s0*s1");
  CHECK(x.hash() == SymInt::parse("s0").hash());
  CHECK((x * 2 + x).hash() == (x * 3).hash());
  CHECK(x != y);
  CHECK(x + 1 != x);
}

TEST_CASE("floordiv and mod by constants normalize", "[symint]") {
  SymInt x = s("s0"), y = s("s1");
  CHECK(floorDiv(x * 4, 2) == 2 * x);
  CHECK(mod(x * 4, 2).constant() == 0);
  CHECK(floorDiv(x * 4 + 2, 2) == 2 * x + 1);
  CHECK(floorDiv(x * 4 + 3, 2) == 2 * x + 1);
  CHECK(mod(x * 4 + 3, 2).constant() == 1);
  CHECK(floorDiv(x + 3, 2) == floorDiv(x + 1, 2) + 1);
  CHECK(floorDiv(2 * x + 2 * y, 4) == floorDiv(x + y, 2));
  CHECK(mod(3 * x, 2) == mod(x, 2));
  CHECK(floorDiv(x * y, y) == x);
  CHECK(mod(x * y * 3, y).constant() == 0);
  CHECK(floorDiv(SymInt(0), x).constant() == 0);
  CHECK(floorDiv(x, 2).str() == "s0 floordiv 2");
  CHECK((floorDiv(x + 1, 2) * 3).str() == "((s0 + 1) floordiv 2)*3");
  CHECK((-floorDiv(x, 2)).str() == "-(s0 floordiv 2)");
  CHECK(mod(y, 8).str() == "s1 mod 8");
  CHECK(max(x, 4).str() == "max(s0, 4)");
  CHECK(max(x, y) == max(y, x));
}

TEST_CASE("text round-trips through parse", "[symint]") {
  for (std::string_view text :
       {"s0", "s0*2 + 1", "-s0*2 + s1", "s0*s0*s1 - 7", "(s0 + 1) floordiv 2 + 1",
        "-(s0 floordiv 2)", "((s0 + 1) mod 2)*2", "max(s0, s1)*2 + min(s2, 4)", "s0 - s1 mod 8",
        "-9223372036854775808", "9223372036854775807", "x_1 + batch"}) {
    SymInt v = p(text);
    CHECK(v.str() == text);
    CHECK(p(v.str()) == v);
  }
  CHECK(p("s0 * 2 + s0") == p("3*s0"));
  CHECK(p("(s0*4) floordiv 2") == p("2*s0"));
  CHECK(p("-(-s0)") == s("s0"));
  CHECK(p("s0 floordiv -2") == floorDiv(s("s0"), -2));
}

TEST_CASE("random expressions keep their value through simplification", "[symint]") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 400; ++trial) {
    Expr e = randomExpr(rng, 4);
    SymInt reparsed = p(e.sym.str());
    INFO("expr " << e.text << " -> " << e.sym.str());
    CHECK(reparsed == e.sym);
    CHECK(reparsed.str() == e.sym.str());
    for (int v = 0; v < 6; ++v) {
      SymbolValues values{{"s0", v * 3 - 7}, {"s1", v - 2}, {"s2", 11 - v * 2}};
      CHECK(e.sym.evaluate(values) == e.eval(values));
    }
  }
}

TEST_CASE("evaluate, substitute and collect symbols", "[symint]") {
  SymInt e = p("s0*s1 + max(s0, 3) - s1 floordiv 2");
  CHECK(e.evaluate({{"s0", 4}, {"s1", 5}}) == 20 + 4 - 2);
  CHECK(e.substitute({{"s1", SymInt(2)}}) == p("s0*2 + max(s0, 3) - 1"));
  CHECK(e.substitute({{"s0", SymInt(10)}, {"s1", SymInt(4)}}).constant() == 40 + 10 - 2);
  std::set<std::string, std::less<>> names;
  e.collectSymbols(names);
  CHECK(names == std::set<std::string, std::less<>>{"s0", "s1"});
  CHECK(s("s3").symbolName() == "s3");
  CHECK((s("s3") + 1).symbolName().empty());
  CHECK_THROWS_WITH(e.evaluate({{"s0", 1}}), Catch::Contains("symbol 's1' has no value"));
  CHECK_THROWS_WITH(p("s0 floordiv s1").evaluate({{"s0", 1}, {"s1", 0}}),
                    Catch::Contains("division by zero"));
}

TEST_CASE("overflow and division by zero are errors, never wraps", "[symint]") {
  SymInt big = INT64_MAX;
  CHECK_THROWS_WITH(big + 1, Catch::Contains("overflows int64"));
  CHECK_THROWS_WITH(big * 2, Catch::Contains("overflows int64"));
  CHECK_THROWS_WITH(s("s0") * big * 2, Catch::Contains("overflows int64"));
  CHECK_THROWS_WITH(floorDiv(s("s0"), 0), Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(mod(3, 0), Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(floorDiv(INT64_MIN, -1), Catch::Contains("overflows int64"));
  CHECK(mod(INT64_MIN, -1).constant() == 0);
  CHECK_THROWS_WITH(SymInt::symbol("floordiv"), Catch::Contains("invalid symbol name"));
  CHECK_THROWS_WITH(SymInt::symbol("f32"), Catch::Contains("invalid symbol name"));
  CHECK_THROWS_WITH(SymInt::symbol("1x"), Catch::Contains("invalid symbol name"));
}

TEST_CASE("malformed SymInt text gives a positioned error", "[symint]") {
  auto message = [](std::string_view text) {
    try {
      SymInt::parse(text);
    } catch (const DiagnosticError &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("") == "1:1: error: expected a symbolic integer (a number, a symbol like 's0', "
                       "or '('), got end of input");
  CHECK(message("s0 +") == "1:5: error: expected a symbolic integer (a number, a symbol like "
                           "'s0', or '('), got end of input");
  CHECK(message("(s0") == "1:4: error: expected ')' to close '(', got end of input");
  CHECK(message("s0 s1") == "1:4: error: expected end of input after the expression, got 's1'");
  CHECK(message("s0 floordiv 0") == "1:4: error: symbolic int floordiv: division by zero "
                                    "(s0 floordiv 0)");
  CHECK(message("9223372036854775808") ==
        "1:1: error: integer literal '9223372036854775808' is out of the int64 range");
  CHECK(message("max(s0)") == "1:7: error: expected ',' between the two operands, got ')'");
  CHECK(message("s0 $") == "1:4: error: unexpected character '$'");
  CHECK(message("1.5") == "1:1: error: expected a symbolic integer (a number, a symbol like "
                          "'s0', or '('), got '1.5'");
  CHECK(message(std::string(500, '(') + "1" + std::string(500, ')')).find("nested too deeply") !=
        std::string::npos);
}

TEST_CASE("relations print, parse and evaluate like guards", "[symint]") {
  SymRelation r{s("s0"), RelOp::Ge, 2};
  CHECK(r.str() == "s0 >= 2");
  CHECK(r.evaluate({{"s0", 2}}));
  CHECK_FALSE(r.evaluate({{"s0", 1}}));
  CHECK_FALSE(r.staticValue().has_value());
  SymRelation m = SymRelation::parse("s1 mod 8 == 0");
  CHECK(m == SymRelation{mod(s("s1"), 8), RelOp::Eq, 0});
  CHECK(m.str() == "s1 mod 8 == 0");
  CHECK(m.evaluate({{"s1", 24}}));
  CHECK_FALSE(m.evaluate({{"s1", 25}}));
  for (std::string_view text : {"s0 != s1", "s0 < 4", "s0*2 <= s1 + 1", "s0 > 0", "s0 == 3"})
    CHECK(SymRelation::parse(text).str() == text);
  CHECK(SymRelation::parse("s0 + 1 > s0").staticValue() == true);
  CHECK(SymRelation::parse("s0*2 == s0 + s0").staticValue() == true);
  CHECK(SymRelation::parse("s0 < s0").staticValue() == false);
  CHECK_THROWS_WITH(SymRelation::parse("s0 = 1"),
                    Catch::Contains("expected a comparison ('==', '!=', '<', '<=', '>' or '>=')"));
}

// The structural walk (ir/sym_int_walk.h), checked two ways: a visitor that evaluates each
// operation (its operands are decimal numbers) against SymInt::evaluate, and one that prints
// every operation fully parenthesized, to pin the documented order of the calls.
namespace {

/// Evaluates with Python semantics; counts its calls so tests can check what was emitted.
class EvalVisitor final : public SymIntVisitor {
public:
  explicit EvalVisitor(const SymbolValues &values) : values_(values) {}
  std::string constant(int64_t v) override { return count(std::to_string(v)); }
  std::string symbol(std::string_view name) override {
    ++symbols;
    return count(std::to_string(values_.at(std::string(name))));
  }
  std::string add(const std::string &a, const std::string &b) override {
    return count(std::to_string(n(a) + n(b)));
  }
  std::string sub(const std::string &a, const std::string &b) override {
    return count(std::to_string(n(a) - n(b)));
  }
  std::string mul(const std::string &a, const std::string &b) override {
    return count(std::to_string(n(a) * n(b)));
  }
  std::string floorDiv(const std::string &a, const std::string &b) override {
    return count(std::to_string(pyFloorDiv(n(a), n(b))));
  }
  std::string mod(const std::string &a, const std::string &b) override {
    return count(std::to_string(pyMod(n(a), n(b))));
  }
  std::string max(const std::string &a, const std::string &b) override {
    return count(std::to_string(std::max(n(a), n(b))));
  }
  std::string min(const std::string &a, const std::string &b) override {
    return count(std::to_string(std::min(n(a), n(b))));
  }
  int calls = 0, symbols = 0;

private:
  static int64_t n(const std::string &s) { return std::stoll(s); }
  std::string count(std::string s) {
    ++calls;
    return s;
  }
  const SymbolValues &values_;
};

/// Prints each operation as `(a op b)` or `op(a, b)`; symbols by name, constants as literals.
class TextVisitor final : public SymIntVisitor {
public:
  std::string constant(int64_t v) override { return std::to_string(v); }
  std::string symbol(std::string_view name) override {
    ++symbolCalls[std::string(name)];
    return std::string(name);
  }
  std::string add(const std::string &a, const std::string &b) override {
    return "(" + a + " + " + b + ")";
  }
  std::string sub(const std::string &a, const std::string &b) override {
    return "(" + a + " - " + b + ")";
  }
  std::string mul(const std::string &a, const std::string &b) override {
    return "(" + a + " * " + b + ")";
  }
  std::string floorDiv(const std::string &a, const std::string &b) override {
    ++atomCalls;
    return "fdiv(" + a + ", " + b + ")";
  }
  std::string mod(const std::string &a, const std::string &b) override {
    ++atomCalls;
    return "mod(" + a + ", " + b + ")";
  }
  std::string max(const std::string &a, const std::string &b) override {
    ++atomCalls;
    return "max(" + a + ", " + b + ")";
  }
  std::string min(const std::string &a, const std::string &b) override {
    ++atomCalls;
    return "min(" + a + ", " + b + ")";
  }
  std::map<std::string, int> symbolCalls;
  int atomCalls = 0;
};

std::string walked(const SymInt &e) {
  TextVisitor v;
  return walkSymInt(e, v);
}

} // namespace

TEST_CASE("walk: sums start positive, subtract negative terms, fold the constant last",
          "[symint][walk]") {
  SymInt x = s("s0"), y = s("s1");
  CHECK(walked(SymInt(7)) == "7");
  CHECK(walked(SymInt(-5)) == "-5");
  CHECK(walked(x) == "s0");
  CHECK(walked(x + y) == "(s0 + s1)"); // coefficient 1: no multiplication
  CHECK(walked(x * 2 + 1) == "((s0 * 2) + 1)");
  CHECK(walked(x * 2 - 1) == "((s0 * 2) - 1)");  // a negative constant is subtracted
  CHECK(walked(y - x * 2) == "(s1 - (s0 * 2))"); // canonical -s0*2 + s1 starts with s1
  CHECK(walked(4 - x) == "(4 - s0)");            // no positive term: the constant first
  CHECK(walked(-x - 3) == "(-3 - s0)");
  CHECK(walked(-x - y) == "((0 - s0) - s1)"); // nothing positive at all: from 0
  CHECK(walked(-x * 3) == "(0 - (s0 * 3))");
  CHECK(walked(x - y + 5) == "((s0 - s1) + 5)");
}

TEST_CASE("walk: powers multiply repeatedly and each atom is emitted once", "[symint][walk]") {
  SymInt x = s("s0"), y = s("s1");
  TextVisitor v;
  CHECK(walkSymInt(x * x * x * y * 3, v) == "((((s0 * s0) * s0) * s1) * 3)");
  CHECK(v.symbolCalls == std::map<std::string, int>{{"s0", 1}, {"s1", 1}});
  TextVisitor w;
  SymInt q = floorDiv(x, y);
  CHECK(walkSymInt(q * y + q * 2 + q * q, w) ==
        "(((s1 * fdiv(s0, s1)) + (fdiv(s0, s1) * 2)) + (fdiv(s0, s1) * fdiv(s0, s1)))");
  CHECK(w.atomCalls == 1);
  CHECK(w.symbolCalls == std::map<std::string, int>{{"s0", 1}, {"s1", 1}});
}

TEST_CASE("walk: every atom kind, nested, with operands walked left first", "[symint][walk]") {
  SymInt x = s("s0"), y = s("s1");
  CHECK(walked(floorDiv(x + 1, 2)) == "fdiv((s0 + 1), 2)");
  CHECK(walked(mod(y, 8)) == "mod(s1, 8)");
  CHECK(walked(mod(x * 2, 6)) == "(mod(s0, 3) * 2)"); // canonical: 2 * (s0 mod 3)
  // canonical: -s0 + s0 floordiv 2, so the positive atom term starts the sum
  CHECK(walked(floorDiv(x, -2)) == "(fdiv(s0, 2) - s0)");
  CHECK(walked(max(x, -1)) == "max(s0, -1)");
  CHECK(walked(min(x, y)) == "min(s0, s1)");
  CHECK(walked(max(floorDiv(x, y), mod(y, 4)) - 1) == "(max(fdiv(s0, s1), mod(s1, 4)) - 1)");
  CHECK(walked(floorDiv(x * y + 3, min(x, 2))) == "fdiv(((s0 * s1) + 3), min(s0, 2))");
  CHECK(walked(y - mod(x, y) * 5) == "(s1 - (mod(s0, s1) * 5))");
}

TEST_CASE("walk: INT64_MIN coefficients and constants are added as themselves", "[symint][walk]") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  SymInt x = s("s0");
  CHECK(walked(x * kMin) == "(s0 * -9223372036854775808)");
  CHECK(walked(x + kMin) == "(s0 + -9223372036854775808)");
  CHECK(walked(SymInt(kMin)) == "-9223372036854775808");
  SymbolValues one{{"s0", 1}};
  EvalVisitor v(one);
  CHECK(walkSymInt(x * kMin, v) == std::to_string(kMin));
}

TEST_CASE("walk: random expressions evaluate like SymInt::evaluate", "[symint][walk]") {
  std::mt19937 rng(4321);
  SymInt x = s("s0"), y = s("s1"), z = s("s2");
  std::vector<SymInt> exprs = {floorDiv(x, y),
                               mod(x, y) * -3,
                               floorDiv(x * y - z, y) + mod(z, x + 1) * x,
                               max(x, y) * min(y, z) - 4,
                               floorDiv(max(x, -2), min(y, -1)) - mod(-x, z) * x * x,
                               x * x * y * y * -2 + z * z * z + 9};
  for (int trial = 0; trial < 600; ++trial)
    exprs.push_back(randomExpr(rng, 4).sym);
  int checked = 0;
  for (const SymInt &e : exprs) {
    INFO(e.str());
    for (int v = 0; v < 9; ++v) {
      SymbolValues values{{"s0", v * 3 - 11}, {"s1", 5 - v * 2}, {"s2", v * v - 10}};
      int64_t expected;
      try {
        expected = e.evaluate(values);
      } catch (const Error &) { // a symbolic divisor that is zero at these values
        continue;
      }
      EvalVisitor visitor(values);
      CHECK(walkSymInt(e, visitor) == std::to_string(expected));
      ++checked;
    }
  }
  CHECK(checked > 5000);
}
