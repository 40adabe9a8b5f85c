#pragma once
/// Attribute: a compile-time constant argument of a node (`dim = [1]`, `eps = 1e-05`).
///
/// Semantics:
/// - A value is an int64, a double, a bool, a string, an int64 list, a DType, a SymInt or a
///   SymInt list. Each has one canonical form: a SymInt that is constant is stored as an int64 and
///   a SymInt list whose elements are all constant as an int64 list, so equal values compare,
///   hash and print identically and the text round-trips.
/// - Doubles compare by bit pattern, so `0.0` and `-0.0` differ and a NaN equals itself: CSE may
///   merge two nodes only when their attributes are indistinguishable.
/// - Attributes of a node live in a map sorted by name; the printer writes them in that order.
/// - Text: `3`, `-1`, `1.0`, `1e-05`, `inf`, `nan`, `true`, `"tanh"`, `[0, 1]`, `f32`, `s0 - 1`,
///   `[s0, 256]`.

#include "ir/op_kind.h"
#include "ir/sym_int.h"
#include "runtime/dtype.h"

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace kiln::ir {

/// One attribute value, in its canonical form (see above).
class Attribute {
public:
  using Storage = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DType,
                               SymInt, std::vector<SymInt>>;

  Attribute() : value_(int64_t{0}) {}
  Attribute(int v) : value_(int64_t{v}) {}                    // NOLINT: attributes are values
  Attribute(int64_t v) : value_(v) {}                         // NOLINT
  Attribute(double v) : value_(v) {}                          // NOLINT
  Attribute(bool v) : value_(v) {}                            // NOLINT
  Attribute(const char *v) : value_(std::string(v)) {}        // NOLINT
  Attribute(std::string v) : value_(std::move(v)) {}          // NOLINT
  Attribute(std::vector<int64_t> v) : value_(std::move(v)) {} // NOLINT
  Attribute(std::initializer_list<int64_t> v) : value_(std::vector<int64_t>(v)) {} // NOLINT
  Attribute(DType v) : value_(v) {}                                                // NOLINT
  Attribute(const SymInt &v);                                                      // NOLINT
  Attribute(const std::vector<SymInt> &v);                                         // NOLINT

  /// The kind of the stored value (Int, Float, Bool, String, IntList, DType, SymInt or
  /// SymIntList; never Number).
  AttrKind kind() const;
  /// Whether the value is acceptable where `expected` is required (see AttrKind).
  bool matches(AttrKind expected) const;

  template <typename T> bool is() const { return std::holds_alternative<T>(value_); }
  /// The stored value; throws kiln::Error when it has another kind.
  int64_t toInt() const;
  double toDouble() const; ///< also accepts an int
  bool toBool() const;
  const std::string &toString() const;
  DType toDType() const;
  /// An int or a SymInt, as a SymInt.
  SymInt toSymInt() const;
  /// An int list or a SymInt list, as int64s; throws kiln::Error for symbolic elements.
  std::vector<int64_t> toInts() const;
  /// An int list or a SymInt list, as SymInts.
  std::vector<SymInt> toSymInts() const;
  const Storage &storage() const { return value_; }

  bool operator==(const Attribute &other) const;
  size_t hash() const;
  /// The .kir spelling of the value.
  std::string str() const;

private:
  Storage value_;
};

/// A node's attributes, sorted by name.
using Attributes = std::map<std::string, Attribute, std::less<>>;
size_t hashAttributes(const Attributes &attrs);

/// The spelling of a double that reads back to the same bits (`1.0`, `1e-05`, `-inf`, `nan`).
std::string formatDouble(double v);
/// A double-quoted string literal with `\\`, `\"`, `\n`, `\t` and `\xHH` escapes.
std::string quoteString(std::string_view s);

} // namespace kiln::ir
