#pragma once
/// Scalar: a Python-style number (bool, int64 or double) passed to ops as a weakly typed operand.

#include "runtime/dtype.h"

#include <cstdint>

namespace kiln {

class Scalar {
public:
  Scalar() : Scalar(int64_t{0}) {}
  Scalar(bool v) : kind_(DType::Bool) { i_ = v; }          // NOLINT
  Scalar(int v) : kind_(DType::Int64) { i_ = v; }          // NOLINT
  Scalar(int64_t v) : kind_(DType::Int64) { i_ = v; }      // NOLINT
  Scalar(double v) : kind_(DType::Float64) { d_ = v; }     // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}       // NOLINT

  /// Bool, Int64 or Float64: the category this scalar votes for in type promotion.
  DType dtype() const { return kind_; }
  bool isFloating() const { return kind_ == DType::Float64; }
  bool isIntegral() const { return kind_ != DType::Float64; }
  double toDouble() const { return isFloating() ? d_ : static_cast<double>(i_); }
  int64_t toInt() const { return isFloating() ? static_cast<int64_t>(d_) : i_; }
  bool toBool() const { return isFloating() ? d_ != 0.0 : i_ != 0; }
  template <typename T> T to() const {
    if constexpr (std::is_same_v<T, bool>)
      return toBool();
    else if constexpr (std::is_integral_v<T>)
      return static_cast<T>(toInt());
    else
      return static_cast<T>(static_cast<float>(toDouble()) == toDouble()
                                ? static_cast<float>(toDouble())
                                : toDouble());
  }

private:
  DType kind_;
  union {
    int64_t i_;
    double d_;
  };
};

} // namespace kiln
