#include "ir/parser.h"

#include "ir/lexer.h"
#include "ir/sym_int_impl.h"

#include <fmt/format.h>
#include <limits>

namespace kiln::ir {

namespace {

class Parser {
public:
  Parser(std::string_view text, std::string buffer, int firstLine, NodePositions &positions)
      : lex_(text, std::move(buffer), firstLine), positions_(positions) {}

  std::vector<std::unique_ptr<Graph>> parseModule() {
    std::vector<std::unique_ptr<Graph>> graphs;
    while (lex_.peek().kind != Tok::Eof) {
      TextPos pos = lex_.peek().pos;
      graphs.push_back(parseGraph());
      for (size_t i = 0; i + 1 < graphs.size(); ++i)
        if (graphs[i]->name() == graphs.back()->name())
          lex_.errorAt(pos, fmt::format("graph @{} is defined twice", graphs.back()->name()));
    }
    return graphs;
  }

private:
  std::unique_ptr<Graph> parseGraph();
  void parseParam(Graph &g);
  /// Parses one statement; returns true for the `return` that ends the body.
  bool parseStatement(Graph &g);
  void parseReturn(Graph &g);
  Value *parseOperand();
  std::vector<Value *> parseOperandList(Tok close, std::string_view context);
  void define(const Token &name, Value *v);

  ValueType parseType();
  TensorMeta parseTensorType(const Token &dtypeTok, DType dtype);
  std::vector<SymInt> parseSymIntList(std::string_view context);
  Device parseDevice();
  Attributes parseAttrDict();
  Attribute parseAttrValue();
  SourceLoc parseOptionalLoc();

  Lexer lex_;
  NodePositions &positions_;
  std::unordered_map<std::string, Value *> values_; ///< of the graph being parsed
};

std::unique_ptr<Graph> Parser::parseGraph() {
  lex_.expectWord("graph", "at the start of a graph");
  Token name = lex_.expect(Tok::GraphId, "after 'graph'");
  auto g = std::make_unique<Graph>(std::string(name.text));
  values_.clear();
  lex_.expect(Tok::LParen, "before the graph parameters");
  if (!lex_.consumeIf(Tok::RParen)) {
    do
      parseParam(*g);
    while (lex_.consumeIf(Tok::Comma));
    lex_.expect(Tok::RParen, "after the graph parameters");
  }
  lex_.expect(Tok::LBrace, "to open the graph body");
  while (!parseStatement(*g)) {
  }
  lex_.expect(Tok::RBrace, "after 'return' (it ends the graph body)");
  return g;
}

void Parser::define(const Token &name, Value *v) {
  if (!values_.emplace(std::string(name.text), v).second)
    lex_.errorAt(name.pos, fmt::format("value %{} is defined twice", name.text));
}

void Parser::parseParam(Graph &g) {
  Token name = lex_.expect(Tok::ValueId, "as a graph parameter");
  lex_.expect(Tok::Colon, "after the parameter name");
  ValueType type = parseType();
  SourceLoc loc = parseOptionalLoc();
  Value *v = g.addInput(std::move(type), std::string(name.text), std::move(loc));
  positions_[v->definingNode()] = name.pos;
  define(name, v);
}

bool Parser::parseStatement(Graph &g) {
  const Token &first = lex_.peek();
  TextPos start = first.pos;
  if (first.kind == Tok::Ident && first.text == "return") {
    parseReturn(g);
    return true;
  }
  std::vector<Token> results;
  if (first.kind == Tok::ValueId) {
    do
      results.push_back(lex_.expect(Tok::ValueId, "as a result name"));
    while (lex_.consumeIf(Tok::Comma));
    lex_.expect(Tok::Assign, "after the result names");
  } else if (first.kind != Tok::Ident) {
    lex_.errorExpected("a statement ('%name = op(...)' or 'return')", first);
  }
  Token opTok = lex_.expect(Tok::Ident, "(an op name)");
  std::optional<OpKind> op = opKindFromKeyword(opTok.text);
  if (!op)
    lex_.errorAt(opTok.pos, fmt::format("unknown op '{}'", opTok.text));
  if (*op == OpKind::Input)
    lex_.errorAt(opTok.pos, "graph inputs are written as parameters of the graph, not 'input'");
  if (*op == OpKind::Output) // only `return %a, %b` as the last statement, never with results
    lex_.errorAt(opTok.pos, "'return' ends the graph body and defines no values");
  lex_.expect(Tok::LParen, "after the op name");
  std::vector<Value *> operands = parseOperandList(Tok::RParen, "after the operands");
  Attributes attrs = parseAttrDict();
  std::vector<ValueType> types;
  if (!results.empty()) {
    lex_.expect(Tok::Colon, fmt::format("and the result type{} after '{}(...)'",
                                        results.size() > 1 ? "s" : "", opTok.text));
    do
      types.push_back(parseType());
    while (lex_.consumeIf(Tok::Comma));
    if (types.size() != results.size())
      lex_.errorAt(start, fmt::format("'{}' defines {} result(s) but lists {} type(s)", opTok.text,
                                      results.size(), types.size()));
  } else if (lex_.peek().kind == Tok::Colon) {
    lex_.errorAt(lex_.peek().pos, fmt::format("'{}' lists result types but names no results "
                                              "(write '%0 = {}(...) : type')",
                                              opTok.text, opTok.text));
  }
  SourceLoc loc = parseOptionalLoc();
  Node *node = g.create(*op, std::move(operands), std::move(attrs), std::move(types), loc);
  positions_[node] = start;
  for (size_t i = 0; i < results.size(); ++i)
    define(results[i], node->result(static_cast<int>(i)));
  return false;
}

void Parser::parseReturn(Graph &g) {
  TextPos start = lex_.next().pos;
  std::vector<Value *> operands;
  if (lex_.peek().kind == Tok::ValueId) {
    do
      operands.push_back(parseOperand());
    while (lex_.consumeIf(Tok::Comma));
  }
  Attributes attrs = parseAttrDict();
  SourceLoc loc = parseOptionalLoc();
  Node *ret = g.setOutputs(std::move(operands), std::move(loc));
  ret->attrs() = std::move(attrs);
  positions_[ret] = start;
}

Value *Parser::parseOperand() {
  Token tok = lex_.expect(Tok::ValueId, "as an operand");
  auto it = values_.find(std::string(tok.text));
  if (it == values_.end())
    lex_.errorAt(tok.pos, fmt::format("use of undefined value %{}", tok.text));
  return it->second;
}

std::vector<Value *> Parser::parseOperandList(Tok close, std::string_view context) {
  std::vector<Value *> out;
  if (lex_.consumeIf(close))
    return out;
  do
    out.push_back(parseOperand());
  while (lex_.consumeIf(Tok::Comma));
  lex_.expect(close, context);
  return out;
}

ValueType Parser::parseType() {
  Token tok = lex_.next();
  if (tok.kind == Tok::Ident) {
    if (tok.text == "int")
      return ScalarType::Int;
    if (tok.text == "float")
      return ScalarType::Float;
    if (tok.text == "bool")
      return ScalarType::Bool;
    if (std::optional<DType> dt = dtypeFromShortName(tok.text))
      return parseTensorType(tok, *dt);
    if (std::optional<DType> dt = dtypeFromName(tok.text))
      lex_.errorAt(tok.pos, fmt::format("unknown type '{}' (did you mean '{}[...]'?)", tok.text,
                                        dtypeShortName(*dt)));
  }
  lex_.errorExpected("a type ('f32[2, s0]', 'i64[]', 'int', 'float' or 'bool')", tok);
}

TensorMeta Parser::parseTensorType(const Token &dtypeTok, DType dtype) {
  lex_.expect(Tok::LBracket, fmt::format("after the dtype '{}'", dtypeTok.text));
  TensorMeta meta;
  meta.dtype = dtype;
  meta.sizes = parseSymIntList("after the sizes");
  try {
    meta.strides = contiguousStrides(meta.sizes);
  } catch (const Error &e) { // the product of the sizes overflows
    lex_.errorAt(dtypeTok.pos, fmt::format("the sizes of this tensor type: {}", e.what()));
  }
  if (lex_.peek().kind == Tok::Ident && lex_.peek().text == "strided") {
    TextPos pos = lex_.next().pos;
    lex_.expect(Tok::LBracket, "after 'strided'");
    meta.strides = parseSymIntList("after the strides");
    if (meta.strides.size() != meta.sizes.size())
      lex_.errorAt(pos, fmt::format("{} strides given for a tensor of rank {}", meta.strides.size(),
                                    meta.sizes.size()));
  }
  if (lex_.consumeIfWord("on"))
    meta.device = parseDevice();
  return meta;
}

// Parses `a, b, ...]`: the opening bracket is already consumed.
std::vector<SymInt> Parser::parseSymIntList(std::string_view context) {
  std::vector<SymInt> out;
  if (lex_.consumeIf(Tok::RBracket))
    return out;
  do
    out.push_back(detail::parseSymIntExpr(lex_));
  while (lex_.consumeIf(Tok::Comma));
  lex_.expect(Tok::RBracket, context);
  return out;
}

Device Parser::parseDevice() {
  Token tok = lex_.next();
  if (tok.kind == Tok::Ident && tok.text == "cpu")
    return Device{};
  if (tok.kind != Tok::Ident || tok.text != "cuda")
    lex_.errorExpected("a device ('cpu' or 'cuda:<index>') after 'on'", tok);
  Device d{DeviceType::CUDA, 0};
  if (lex_.consumeIf(Tok::Colon)) {
    Token index = lex_.expect(Tok::Int, "as the CUDA device index");
    int64_t v = lex_.intValue(index, false);
    if (v > std::numeric_limits<int>::max())
      lex_.errorAt(index.pos, "CUDA device index out of range");
    d.index = static_cast<int>(v);
  }
  return d;
}

Attributes Parser::parseAttrDict() {
  Attributes attrs;
  if (!lex_.consumeIf(Tok::LBrace))
    return attrs;
  if (lex_.consumeIf(Tok::RBrace))
    return attrs;
  do {
    Token name = lex_.next();
    if (name.kind != Tok::Ident && name.kind != Tok::String)
      lex_.errorExpected("an attribute name", name);
    std::string key = name.kind == Tok::String ? name.str : std::string(name.text);
    lex_.expect(Tok::Assign, fmt::format("after the attribute name '{}'", key));
    Attribute value = parseAttrValue();
    if (!attrs.emplace(key, std::move(value)).second)
      lex_.errorAt(name.pos, fmt::format("attribute '{}' is given twice", key));
  } while (lex_.consumeIf(Tok::Comma));
  lex_.expect(Tok::RBrace, "after the attributes");
  return attrs;
}

Attribute Parser::parseAttrValue() {
  const Token &tok = lex_.peek();
  const Token &after = lex_.peek(1);
  bool negative = tok.kind == Tok::Minus &&
                  (after.kind == Tok::Float || (after.kind == Tok::Ident && after.text == "inf"));
  if (negative)
    lex_.next();
  const Token &t = lex_.peek();
  if (t.kind == Tok::Float)
    return lex_.floatValue(lex_.next(), negative);
  if (t.kind == Tok::String)
    return lex_.next().str;
  if (t.kind == Tok::LBracket) {
    lex_.next();
    return parseSymIntList("to close the list");
  }
  if (t.kind == Tok::Ident) {
    if (t.text == "inf" || t.text == "nan") {
      double v = t.text == "inf" ? std::numeric_limits<double>::infinity()
                                 : std::numeric_limits<double>::quiet_NaN();
      lex_.next();
      return negative ? -v : v;
    }
    if (t.text == "true" || t.text == "false")
      return lex_.next().text == "true";
    if (std::optional<DType> dt = dtypeFromShortName(t.text)) {
      lex_.next();
      return *dt;
    }
  }
  if (t.kind == Tok::Int || t.kind == Tok::Minus || t.kind == Tok::LParen ||
      (t.kind == Tok::Ident && SymInt::isValidSymbolName(t.text)) ||
      (t.kind == Tok::Ident && (t.text == "max" || t.text == "min")))
    return detail::parseSymIntExpr(lex_);
  lex_.errorExpected("an attribute value (a number, 'true', 'false', a string, a dtype, a "
                     "symbolic int or a list)",
                     t);
}

SourceLoc Parser::parseOptionalLoc() {
  if (!lex_.consumeIfWord("loc"))
    return {};
  lex_.expect(Tok::LParen, "after 'loc'");
  Token file = lex_.expect(Tok::String, "(the file name) in loc(...)");
  lex_.expect(Tok::Colon, "between the file name and the line in loc(...)");
  Token line = lex_.expect(Tok::Int, "(the line number) in loc(...)");
  int64_t n = lex_.intValue(line, false);
  if (n > std::numeric_limits<int>::max())
    lex_.errorAt(line.pos, "line number out of range");
  lex_.expect(Tok::RParen, "to close loc(...)");
  return SourceLoc{file.str, static_cast<int>(n)};
}

} // namespace

ParsedModule parseModule(std::string_view text, std::string buffer, int firstLine) {
  ParsedModule module;
  Parser parser(text, std::move(buffer), firstLine, module.positions);
  module.graphs = parser.parseModule();
  return module;
}

std::unique_ptr<Graph> parseGraph(std::string_view text, std::string buffer) {
  ParsedModule module = parseModule(text, buffer);
  if (module.graphs.size() != 1)
    throw DiagnosticError(Diagnostic{
        fmt::format("expected exactly one graph, found {}", module.graphs.size()), buffer, {}});
  return std::move(module.graphs[0]);
}

} // namespace kiln::ir
