#include "runtime/dtype.h"

#include "runtime/error.h"

#include <array>

namespace kiln {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {
#define X(E, N, T, S) N,
    KILN_DTYPES(X)
#undef X
};
constexpr std::array<int64_t, kNumDTypes> kSizes = {
#define X(E, N, T, S) S,
    KILN_DTYPES(X)
#undef X
};

DType gDefaultFloat = DType::Float32;

} // namespace

std::string_view dtypeName(DType t) { return kNames[static_cast<int>(t)]; }

std::optional<DType> dtypeFromName(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kNames[i] == name)
      return static_cast<DType>(i);
  return std::nullopt;
}

int64_t itemsize(DType t) { return kSizes[static_cast<int>(t)]; }

DType promoteTypes(DType a, DType b) {
  // Table copied in spirit from c10/core/ScalarType.cpp; order: b1 u1 i1 i2 i4 i8 f2 bf f4 f8.
  using D = DType;
  constexpr D b1 = D::Bool, u1 = D::UInt8, i1 = D::Int8, i2 = D::Int16, i4 = D::Int32,
              i8 = D::Int64, f2 = D::Float16, bf = D::BFloat16, f4 = D::Float32,
              f8 = D::Float64;
  static constexpr D kTable[kNumDTypes][kNumDTypes] = {
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  return kTable[static_cast<int>(a)][static_cast<int>(b)];
}

namespace {
// c10's combine_categories: `lower` (a weaker class) matters only through a higher category.
std::optional<DType> combineCategories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher)
    return lower;
  if (!lower || isFloating(*higher))
    return higher;
  if (*higher == DType::Bool || isFloating(*lower))
    return promoteTypes(*higher, *lower);
  return higher;
}
} // namespace

DType resultType(std::span<const PromotionOperand> operands) {
  KILN_CHECK(!operands.empty(), "result_type: no operands");
  std::optional<DType> byPriority[3];
  for (const auto &op : operands) {
    auto &slot = byPriority[static_cast<int>(op.priority)];
    DType t = op.dtype;
    if (op.priority == PromotionPriority::Scalar) // a Python scalar is only a category
      t = t == DType::Bool ? DType::Bool : isFloating(t) ? defaultFloatDType() : DType::Int64;
    slot = slot ? promoteTypes(*slot, t) : t;
  }
  return *combineCategories(byPriority[2], combineCategories(byPriority[1], byPriority[0]));
}

DType defaultFloatDType() { return gDefaultFloat; }
void setDefaultFloatDType(DType t) {
  KILN_CHECK_KIND(Type, isFloating(t), "set_default_dtype: only floating dtypes, got {}",
                  dtypeName(t));
  gDefaultFloat = t;
}

} // namespace kiln
