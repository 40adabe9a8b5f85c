#pragma once
/// DType: the element types of kiln tensors, and PyTorch's type-promotion rules.
///
/// KILN_DTYPES is the one table of dtypes: it generates the enum, names, sizes and C++ types.
/// Promotion follows torch.result_type: operands are ranked by category (bool < integer <
/// floating) and by priority (dimensioned tensor > zero-dim tensor > Python scalar); a
/// lower-priority operand changes the result only when its category is higher.

#include "runtime/half.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kiln {

// X(Enum, name, C++ type, itemsize)
#define KILN_DTYPES(X)                                                                             \
  X(Bool, "bool", bool, 1)                                                                         \
  X(UInt8, "uint8", uint8_t, 1)                                                                    \
  X(Int8, "int8", int8_t, 1)                                                                       \
  X(Int16, "int16", int16_t, 2)                                                                    \
  X(Int32, "int32", int32_t, 4)                                                                    \
  X(Int64, "int64", int64_t, 8)                                                                    \
  X(Float16, "float16", ::kiln::Half, 2)                                                           \
  X(BFloat16, "bfloat16", ::kiln::BFloat16, 2)                                                     \
  X(Float32, "float32", float, 4)                                                                  \
  X(Float64, "float64", double, 8)

enum class DType : uint8_t {
#define X(E, N, T, S) E,
  KILN_DTYPES(X)
#undef X
};
constexpr int kNumDTypes = 10;

std::string_view dtypeName(DType t);
std::optional<DType> dtypeFromName(std::string_view name);
int64_t itemsize(DType t);

inline bool isFloating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
inline bool isIntegral(DType t, bool includeBool) {
  return (includeBool && t == DType::Bool) || (t >= DType::UInt8 && t <= DType::Int64);
}
inline bool isReducedFloat(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

/// The smallest dtype both a and b convert to without losing range (torch.promote_types).
DType promoteTypes(DType a, DType b);

/// One operand of a promotion: its dtype and how strongly it votes.
enum class PromotionPriority : uint8_t { Scalar = 0, ZeroDim = 1, Tensor = 2 };
struct PromotionOperand {
  DType dtype;
  PromotionPriority priority;
};

/// torch.result_type over any number of operands. Python scalars are weak: a float scalar makes
/// an integer tensor's result the default float dtype; an int scalar never widens an int tensor.
DType resultType(std::span<const PromotionOperand> operands);

/// The dtype new floating tensors get (torch.get_default_dtype), float32 unless changed.
DType defaultFloatDType();
void setDefaultFloatDType(DType t);

template <DType D> struct CppTypeOf;
#define X(E, N, T, S)                                                                              \
  template <> struct CppTypeOf<DType::E> {                                                         \
    using type = T;                                                                                \
  };
KILN_DTYPES(X)
#undef X
template <DType D> using CppType = typename CppTypeOf<D>::type;

template <typename T> constexpr DType dtypeOf();
#define X(E, N, T, S)                                                                              \
  template <> constexpr DType dtypeOf<T>() { return DType::E; }
KILN_DTYPES(X)
#undef X

/// Calls fn.template operator()<T>() with T the C++ type of dtype `t`.
template <typename Fn> decltype(auto) dispatchAll(DType t, Fn &&fn) {
  switch (t) {
#define X(E, N, T, S)                                                                              \
  case DType::E:                                                                                   \
    return fn.template operator()<T>();
    KILN_DTYPES(X)
#undef X
  }
  __builtin_unreachable();
}

/// Calls fn.template operator()<U>() with U the unsigned type of `size` bytes (1, 2, 4 or 8, the
/// sizes of every dtype): pure data movement does not care about the dtype, so 4 instantiations
/// cover all of them.
template <typename Fn> decltype(auto) dispatchBySize(int64_t size, Fn &&fn) {
  switch (size) {
  case 1:
    return fn.template operator()<uint8_t>();
  case 2:
    return fn.template operator()<uint16_t>();
  case 4:
    return fn.template operator()<uint32_t>();
  case 8:
    return fn.template operator()<uint64_t>();
  default:
    __builtin_unreachable();
  }
}

/// Like dispatchAll but for the dtypes kernels compute in: float16/bfloat16 are computed in float
/// by the callers (see ops/cast), so only 8 instantiations per kernel are compiled.
template <typename Fn> decltype(auto) dispatchCompute(DType t, Fn &&fn) {
  switch (t) {
  case DType::Bool:
    return fn.template operator()<bool>();
  case DType::UInt8:
    return fn.template operator()<uint8_t>();
  case DType::Int8:
    return fn.template operator()<int8_t>();
  case DType::Int16:
    return fn.template operator()<int16_t>();
  case DType::Int32:
    return fn.template operator()<int32_t>();
  case DType::Int64:
    return fn.template operator()<int64_t>();
  case DType::Float32:
    return fn.template operator()<float>();
  case DType::Float64:
    return fn.template operator()<double>();
  default:
    __builtin_unreachable();
  }
}

/// The dtype a kernel computes `t` in: reduced floats widen to float32.
inline DType computeDType(DType t) { return isReducedFloat(t) ? DType::Float32 : t; }

} // namespace kiln
