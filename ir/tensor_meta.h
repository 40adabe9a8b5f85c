#pragma once
/// TensorMeta and ValueType: what the graph IR knows about a value without running anything.
///
/// Semantics:
/// - A tensor value has a dtype, sizes and strides in elements (SymInts, so they may be
///   symbolic) and a device. Strides are always explicit in memory; the text form leaves them
///   out when they are the contiguous (row-major) strides of the sizes.
/// - Contiguous strides follow torch: stride[i] = stride[i+1] * size[i+1] with constant sizes
///   clamped to at least 1 (so zero-size tensors keep nonzero strides); a symbolic size is used as
///   is, since sizes that can be 0 or 1 are specialized to constants before they become symbols.
/// - A non-tensor value (a Python int, float or bool the graph takes or computes) has a
///   ScalarType instead.
/// - Text: `f32[s0, 128]`, `f32[4, 8] strided [1, 4]`, `bf16[2] on cuda:0`, `int`, `float`,
///   `bool`. DType short names follow Inductor: b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64.

#include "ir/sym_int.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace kiln::ir {

/// `f32`, `bf16`, `b8`, ...: the dtype's name in .kir text.
std::string_view dtypeShortName(DType t);
std::optional<DType> dtypeFromShortName(std::string_view name);

/// The type of a non-tensor value.
enum class ScalarType : uint8_t { Int, Float, Bool };
std::string_view scalarTypeName(ScalarType t);

/// The row-major strides of `sizes` (see the semantics note).
std::vector<SymInt> contiguousStrides(std::span<const SymInt> sizes);

/// What the IR knows about a tensor value: dtype, symbolic sizes and strides, device.
struct TensorMeta {
  DType dtype = DType::Float32;
  std::vector<SymInt> sizes;
  std::vector<SymInt> strides;
  Device device;

  /// A tensor with contiguous strides.
  static TensorMeta contiguous(DType dtype, std::vector<SymInt> sizes, Device device = {});
  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  /// Whether the strides are exactly contiguousStrides(sizes).
  bool isContiguous() const;
  bool operator==(const TensorMeta &) const = default;
  size_t hash() const;
};

/// The type of a value: a TensorMeta or a ScalarType.
class ValueType {
public:
  ValueType(TensorMeta meta) : type_(std::move(meta)) {} // NOLINT: a meta is a type
  ValueType(ScalarType scalar) : type_(scalar) {}        // NOLINT

  bool isTensor() const { return std::holds_alternative<TensorMeta>(type_); }
  /// The tensor meta; throws kiln::Error for a scalar type.
  const TensorMeta &meta() const;
  TensorMeta &meta();
  /// The scalar type; throws kiln::Error for a tensor type.
  ScalarType scalar() const;
  bool operator==(const ValueType &) const = default;
  size_t hash() const;

private:
  std::variant<TensorMeta, ScalarType> type_;
};

/// `f32[s0, 128]`, `int`: the .kir spelling of a type.
std::string printType(const ValueType &type);
/// Sizes as `[s0, 128]` (what printType writes inside the brackets).
std::string printSizes(std::span<const SymInt> sizes);

} // namespace kiln::ir
