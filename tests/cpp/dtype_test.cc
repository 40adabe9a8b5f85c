#include "runtime/dtype.h"

#include <kiln_catch.h>

using namespace kiln;

namespace {
DType rt(std::initializer_list<PromotionOperand> ops) {
  return resultType(std::span<const PromotionOperand>(ops.begin(), ops.size()));
}
constexpr auto kT = PromotionPriority::Tensor;
constexpr auto kZ = PromotionPriority::ZeroDim;
constexpr auto kS = PromotionPriority::Scalar;
} // namespace

TEST_CASE("promote_types matches torch's table", "[dtype]") {
  CHECK(promoteTypes(DType::UInt8, DType::Int8) == DType::Int16);
  CHECK(promoteTypes(DType::Float16, DType::BFloat16) == DType::Float32);
  CHECK(promoteTypes(DType::Bool, DType::Float16) == DType::Float16);
  CHECK(promoteTypes(DType::Int64, DType::Float16) == DType::Float16);
  CHECK(promoteTypes(DType::Int32, DType::Float64) == DType::Float64);
  for (int i = 0; i < kNumDTypes; ++i)
    for (int j = 0; j < kNumDTypes; ++j)
      CHECK(promoteTypes(DType(i), DType(j)) == promoteTypes(DType(j), DType(i)));
}

TEST_CASE("python scalars are weak operands", "[dtype]") {
  CHECK(rt({{DType::Int32, kT}, {DType::Int64, kS}}) == DType::Int32);
  CHECK(rt({{DType::Int32, kT}, {DType::Float64, kS}}) == DType::Float32);
  CHECK(rt({{DType::Float16, kT}, {DType::Float64, kS}}) == DType::Float16);
  CHECK(rt({{DType::Bool, kT}, {DType::Int64, kS}}) == DType::Int64);
  CHECK(rt({{DType::UInt8, kT}, {DType::Bool, kS}}) == DType::UInt8);
}

TEST_CASE("zero-dim tensors win only by category", "[dtype]") {
  CHECK(rt({{DType::Int8, kT}, {DType::Int64, kZ}}) == DType::Int8);
  CHECK(rt({{DType::Int32, kT}, {DType::Float64, kZ}}) == DType::Float64);
  CHECK(rt({{DType::Float16, kT}, {DType::Float64, kZ}}) == DType::Float16);
  CHECK(rt({{DType::Float32, kZ}, {DType::Float64, kS}}) == DType::Float32);
  CHECK(rt({{DType::Int64, kZ}, {DType::Float64, kS}}) == DType::Float32);
}

TEST_CASE("dtype names round-trip", "[dtype]") {
  for (int i = 0; i < kNumDTypes; ++i)
    CHECK(dtypeFromName(dtypeName(DType(i))) == DType(i));
  CHECK_FALSE(dtypeFromName("float128").has_value());
}

TEST_CASE("half and bfloat16 round to nearest even", "[dtype]") {
  CHECK(float(Half(1.0f)) == 1.0f);
  CHECK(float(Half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(float(Half(70000.0f))));
  CHECK(float(Half(1.0f + 1.0f / 2048)) == 1.0f); // tie rounds to even
  CHECK(float(Half(5.9604644775390625e-8f)) == 5.9604644775390625e-8f); // smallest subnormal
  CHECK(float(BFloat16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(float(BFloat16(3.0f)) == 3.0f);
  CHECK(std::isnan(float(BFloat16(std::nanf("")))));
}
