#include "ir/op_kind.h"

#include <algorithm>
#include <array>
#include <utility>

namespace kiln::ir {

namespace {
using namespace trait;
using enum AttrKind;
constexpr bool Required = true;
constexpr bool Optional = false;

constexpr OpInfo kOpInfos[] = {
#define KILN_OP(Enum, Keyword, Operands, Results, Traits)                                          \
  {Keyword, Arity(Operands), Results, Traits},
#include "ir/ops.def"
};
static_assert(std::size(kOpInfos) == kNumOpKinds);

constexpr OpKind kAttrOps[] = {
#define KILN_ATTR(Enum, Name, Kind, Presence) OpKind::Enum,
#include "ir/ops.def"
};
constexpr AttrSpec kAttrSpecs[] = {
#define KILN_ATTR(Enum, Name, Kind, Presence) {Name, Kind, Presence},
#include "ir/ops.def"
};
constexpr int kNumAttrRows = static_cast<int>(std::size(kAttrSpecs));

constexpr OpSpelling kSpellings[] = {
#define KILN_SPELLING(Enum, Schema, Spellings, Fixed) {OpKind::Enum, Schema, Spellings, Fixed},
#include "ir/ops.def"
};

constexpr EagerSpelling kEagerSpellings[] = {
#define KILN_EAGER_SPELLING(Schema, Spellings) {Schema, Spellings},
#include "ir/ops.def"
};

// [begin, end) of each op's rows in kAttrSpecs; ops.def lists an op's attributes together.
constexpr auto kAttrRanges = [] {
  std::array<std::pair<int, int>, kNumOpKinds> ranges{};
  for (int i = 0; i < kNumAttrRows; ++i) {
    auto &r = ranges[static_cast<int>(kAttrOps[i])];
    if (r.first == r.second)
      r = {i, i};
    ++r.second;
  }
  return ranges;
}();

constexpr bool attrTableIsGroupedAndSorted() {
  for (int i = 1; i < kNumAttrRows; ++i) {
    if (kAttrOps[i] != kAttrOps[i - 1]) {
      for (int j = 0; j < i - 1; ++j)
        if (kAttrOps[j] == kAttrOps[i])
          return false;
    } else if (!(kAttrSpecs[i - 1].name < kAttrSpecs[i].name)) {
      return false;
    }
  }
  return true;
}
static_assert(attrTableIsGroupedAndSorted(),
              "ops.def: list each op's KILN_ATTR rows together, in name order");
} // namespace

std::string_view attrKindName(AttrKind kind) {
  switch (kind) {
  case Int:
    return "int";
  case Float:
    return "float";
  case Bool:
    return "bool";
  case String:
    return "string";
  case IntList:
    return "int list";
  case DType:
    return "dtype";
  case SymInt:
    return "symbolic int";
  case SymIntList:
    return "symbolic int list";
  case Number:
    return "number";
  }
  return "?";
}

std::string attrKindWithArticle(AttrKind kind) {
  std::string_view name = attrKindName(kind);
  return std::string(name[0] == 'i' ? "an " : "a ") + std::string(name);
}

const OpInfo &opInfo(OpKind kind) { return kOpInfos[static_cast<int>(kind)]; }

std::optional<OpKind> opKindFromKeyword(std::string_view keyword) {
  for (int i = 0; i < kNumOpKinds; ++i)
    if (kOpInfos[i].keyword == keyword)
      return static_cast<OpKind>(i);
  return std::nullopt;
}

std::span<const AttrSpec> attrSpecs(OpKind kind) {
  auto [begin, end] = kAttrRanges[static_cast<int>(kind)];
  return std::span<const AttrSpec>(kAttrSpecs + begin, kAttrSpecs + end);
}

std::span<const OpSpelling> opSpellings() { return kSpellings; }

namespace {

/// The binary operators with reflected and augmented forms (`__add__`, `__radd__`, `__iadd__`).
constexpr std::string_view kBinaryOperators[] = {"add",    "sub",    "mul",   "truediv", "floordiv",
                                                 "mod",    "pow",    "and",   "or",      "xor",
                                                 "lshift", "rshift", "matmul"};

bool isBinaryOperator(std::string_view op) {
  return std::find(std::begin(kBinaryOperators), std::end(kBinaryOperators), op) !=
         std::end(kBinaryOperators);
}

bool isDunder(std::string_view n) {
  return n.size() > 4 && n.substr(0, 2) == "__" && n.substr(n.size() - 2) == "__";
}

} // namespace

SpellingForm spellingForm(std::string_view spelling) {
  size_t dot = spelling.rfind('.');
  std::string_view module = dot == std::string_view::npos ? "" : spelling.substr(0, dot);
  std::string_view name = dot == std::string_view::npos ? spelling : spelling.substr(dot + 1);
  if (module == "operator") { // iadd ... iand, ior (whose pure forms are and_, or_)
    std::string_view op = name.size() > 1 && name[0] == 'i' ? name.substr(1) : "";
    if (!op.empty() && op.back() == '_')
      op.remove_suffix(1);
    return {isBinaryOperator(op), false};
  }
  if (isDunder(name)) { // __iadd__, __radd__; not __invert__, __rshift__
    std::string_view op = name.substr(3, name.size() - 5);
    return {name[2] == 'i' && isBinaryOperator(op), name[2] == 'r' && isBinaryOperator(op)};
  }
  return {!name.empty() && name.back() == '_', false};
}
std::span<const EagerSpelling> eagerSpellings() { return kEagerSpellings; }

const AttrSpec *findAttrSpec(OpKind kind, std::string_view name) {
  for (const AttrSpec &spec : attrSpecs(kind))
    if (spec.name == name)
      return &spec;
  return nullptr;
}

} // namespace kiln::ir
