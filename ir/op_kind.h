#pragma once
/// OpKind: the vocabulary of graph-IR ops, generated from the one table in ir/ops.def.
///
/// Semantics: an op kind fixes its keyword in the .kir text, how many operands and results a node
/// of that kind has, its traits (what passes may assume about it) and the attributes it accepts.
/// Nothing else about an op lives outside ops.def except the dtype/shape rules of the verifier,
/// which are written per trait class (elementwise, reduction, view, extern).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kiln::ir {

/// The op kinds, one per KILN_OP row.
enum class OpKind : uint16_t {
#define KILN_OP(Enum, Keyword, Operands, Results, Traits) Enum,
#include "ir/ops.def"
};

/// Trait flags of an op kind, combined with `|` in ops.def.
namespace trait {
enum OpTrait : uint32_t {
  None = 0,
  /// No side effects; the result depends only on operands and attributes, so DCE may delete an
  /// unused node and CSE may merge two equal ones.
  Pure = 1u << 0,
  /// Computes each output element from the same-index elements of its broadcast operands.
  Elementwise = 1u << 1,
  /// Operands may be swapped (CSE canonicalizes their order).
  Commutative = 1u << 2,
  /// The result may alias operand 0's storage.
  View = 1u << 3,
  /// Computes across one or more dims (`dim`/`keepdim` attributes).
  Reduction = 1u << 4,
  /// Lowered to a library call rather than a generated loop.
  Extern = 1u << 5,
  /// Mutates operand 0.
  InPlace = 1u << 6,
  /// Ends the graph; its operands are the graph's outputs.
  Terminator = 1u << 7,
  /// Integer and bool inputs produce a floating result (torch's int-to-float promotion).
  FloatResult = 1u << 8,
  /// Produces a bool tensor.
  Comparison = 1u << 9,
  /// Takes integer and bool operands only (the bitwise ops).
  Integral = 1u << 10,
  /// Its results never carry a gradient (random draws, indices, sizes, factories, all/any):
  /// autograd treats them as constants, as it does Comparison and Integral ops.
  NoGradient = 1u << 11,
};
} // namespace trait
using OpTraits = uint32_t;

/// Any number of operands (or results).
inline constexpr int kVariadic = -1;

/// How many operands an op takes: [min, max], max == kVariadic meaning unbounded.
struct Arity {
  int min;
  int max;
  constexpr Arity(int exact) : min(exact < 0 ? 0 : exact), max(exact) {} // NOLINT: table syntax
  constexpr Arity(int lo, int hi) : min(lo), max(hi) {}
  constexpr bool accepts(int n) const { return n >= min && (max == kVariadic || n <= max); }
};

/// The kinds of attribute values; SymInt and SymIntList also accept their constant forms (Int,
/// IntList), Number accepts Int, Float and Bool.
enum class AttrKind : uint8_t {
  Int,
  Float,
  Bool,
  String,
  IntList,
  DType,
  SymInt,
  SymIntList,
  Number
};
/// `int list`, `dtype`, ...: the kind's name in messages.
std::string_view attrKindName(AttrKind kind);
/// The name with its article, `an int list`, `a dtype`, for "must be ..." messages.
std::string attrKindWithArticle(AttrKind kind);

/// One row of KILN_ATTR: an attribute an op accepts.
struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required;
};

/// One row of KILN_OP.
struct OpInfo {
  std::string_view keyword;
  Arity operands;
  int numResults; ///< kVariadic when the count depends on the node.
  OpTraits traits;
};

/// One row of KILN_SPELLING: a user-facing op a node kind stands for (see ops.def).
struct OpSpelling {
  OpKind op;
  std::string_view schema;    ///< torch's signature, `name(Tensor input, ...) -> Tensor`
  std::string_view spellings; ///< space-separated callables (`sin Tensor.sin F.relu ...`)
  std::string_view fixed;     ///< attributes every call has (`min_val=0.0, max_val=6.0`), or ""
};

/// One row of KILN_EAGER_SPELLING: a user-facing op no node kind stands for (see ops.def).
struct EagerSpelling {
  std::string_view schema;
  std::string_view spellings;
};

/// The number of op kinds.
inline constexpr int kNumOpKinds = 0
#define KILN_OP(Enum, Keyword, Operands, Results, Traits) +1
#include "ir/ops.def"
    ;

/// The KILN_OP row of `kind`.
const OpInfo &opInfo(OpKind kind);
inline std::string_view opKeyword(OpKind kind) { return opInfo(kind).keyword; }
inline bool hasTrait(OpKind kind, OpTraits t) { return (opInfo(kind).traits & t) == t; }
/// The op kind printed as `keyword`, if any.
std::optional<OpKind> opKindFromKeyword(std::string_view keyword);
/// The attributes `kind` accepts, in name order.
std::span<const AttrSpec> attrSpecs(OpKind kind);
/// The spec of attribute `name` of `kind`, or null when the op does not accept it.
const AttrSpec *findAttrSpec(OpKind kind, std::string_view name);
/// Every KILN_SPELLING row, in table order.
std::span<const OpSpelling> opSpellings();
/// Every KILN_EAGER_SPELLING row, in table order.
std::span<const EagerSpelling> eagerSpellings();

/// How a spelling of a row applies the op (the one rule the eager bindings and the capture
/// share): in place writes the result into the first operand (`add_`, `Tensor.__iadd__`,
/// `operator.iadd`, `operator.iand`), reflected swaps the first two operands
/// (`Tensor.__radd__`). `__invert__` and `__rshift__` are neither.
struct SpellingForm {
  bool inplace = false;
  bool reflected = false;
};
SpellingForm spellingForm(std::string_view spelling);

} // namespace kiln::ir
