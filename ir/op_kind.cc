#include "ir/op_kind.h"

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
std::span<const EagerSpelling> eagerSpellings() { return kEagerSpellings; }

const AttrSpec *findAttrSpec(OpKind kind, std::string_view name) {
  for (const AttrSpec &spec : attrSpecs(kind))
    if (spec.name == name)
      return &spec;
  return nullptr;
}

} // namespace kiln::ir
