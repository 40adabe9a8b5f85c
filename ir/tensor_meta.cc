#include "ir/tensor_meta.h"

#include "runtime/error.h"

#include <array>
#include <fmt/format.h>

namespace kiln::ir {

namespace {
// In KILN_DTYPES order.
constexpr std::array<std::string_view, kNumDTypes> kShortNames = {
    "b8", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
};

std::string joinSymInts(std::span<const SymInt> values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i)
    out += (i ? ", " : "") + values[i].str();
  return out;
}
} // namespace

std::string_view dtypeShortName(DType t) { return kShortNames[static_cast<int>(t)]; }

std::optional<DType> dtypeFromShortName(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kShortNames[i] == name)
      return static_cast<DType>(i);
  return std::nullopt;
}

std::string_view scalarTypeName(ScalarType t) {
  switch (t) {
  case ScalarType::Int:
    return "int";
  case ScalarType::Float:
    return "float";
  case ScalarType::Bool:
    return "bool";
  }
  return "?";
}

std::vector<SymInt> contiguousStrides(std::span<const SymInt> sizes) {
  std::vector<SymInt> strides(sizes.size());
  SymInt running = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = running;
    std::optional<int64_t> c = sizes[i].constant();
    running = running * (c ? SymInt(std::max<int64_t>(*c, 1)) : sizes[i]);
  }
  return strides;
}

TensorMeta TensorMeta::contiguous(DType dtype, std::vector<SymInt> sizes, Device device) {
  std::vector<SymInt> strides = contiguousStrides(sizes);
  return TensorMeta{dtype, std::move(sizes), std::move(strides), device};
}

bool TensorMeta::isContiguous() const { return strides == contiguousStrides(sizes); }

size_t TensorMeta::hash() const {
  size_t h = std::hash<int>()(static_cast<int>(dtype));
  for (const SymInt &s : sizes)
    h = detail::hashCombine(h, s.hash());
  h = detail::hashCombine(h, sizes.size());
  for (const SymInt &s : strides)
    h = detail::hashCombine(h, s.hash());
  h = detail::hashCombine(h, static_cast<size_t>(device.type) * 131 + device.index);
  return h;
}

const TensorMeta &ValueType::meta() const {
  KILN_CHECK(isTensor(), "ValueType::meta: the value is a {}, not a tensor",
             scalarTypeName(std::get<ScalarType>(type_)));
  return std::get<TensorMeta>(type_);
}

TensorMeta &ValueType::meta() {
  KILN_CHECK(isTensor(), "ValueType::meta: the value is a {}, not a tensor",
             scalarTypeName(std::get<ScalarType>(type_)));
  return std::get<TensorMeta>(type_);
}

ScalarType ValueType::scalar() const {
  KILN_CHECK(!isTensor(), "ValueType::scalar: the value is a tensor, not a scalar");
  return std::get<ScalarType>(type_);
}

size_t ValueType::hash() const {
  return isTensor() ? meta().hash() : 0x51ed27 + static_cast<size_t>(scalar());
}

std::string printSizes(std::span<const SymInt> sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i)
    out += (i ? ", " : "") + sizes[i].str();
  return "[" + out + "]";
}

std::string printType(const ValueType &type) {
  if (!type.isTensor())
    return std::string(scalarTypeName(type.scalar()));
  const TensorMeta &m = type.meta();
  std::string out = fmt::format("{}[{}]", dtypeShortName(m.dtype), joinSymInts(m.sizes));
  if (!m.isContiguous())
    out += fmt::format(" strided [{}]", joinSymInts(m.strides));
  if (m.device != Device{})
    out += " on " + m.device.str();
  return out;
}

} // namespace kiln::ir
