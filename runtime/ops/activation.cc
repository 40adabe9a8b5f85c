// Activation functions. Float-only ones reject other dtypes as torch does; relu, relu6,
// hardtanh and threshold also run on integers (in the input's own dtype, never promoting).
#include "runtime/ops/activation.h"
#include "runtime/device_ops.h"

#include "runtime/fast_math.h"
#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {
/// out = f(a) in a's floating dtype; other dtypes are rejected with op's name.
template <typename F> Tensor floatActivation(const char *op, const Tensor &a, F f) {
  checkFloating(op, a.dtype());
  return floatUnaryKernel(a, a.dtype(), f);
}

constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

/// torch's elu family: x > 0 ? scale * x : alpha * scale * (exp(x * inputScale) - 1).
Tensor eluFamily(const char *op, const Tensor &a, double alpha, double scale, double inputScale) {
  return floatActivation(op, a, [alpha, scale, inputScale]<typename T>(T x) -> T {
    const T positive = x * static_cast<T>(scale);
    const T negative = fastExpm1(x * static_cast<T>(inputScale)) * static_cast<T>(alpha * scale);
    if constexpr (std::is_same_v<T, float>) // a bitwise select: the float loop vectorizes
      return selectBits(-static_cast<int32_t>(x > 0.0f), positive, negative);
    else
      return x > T(0) ? positive : negative;
  });
}
} // namespace

Tensor relu(const Tensor &a) {
  KILN_CHECK(a.dtype() != DType::Bool, "relu: boolean inputs are not supported");
  if (onDevice({&a}))
    return deviceOp("relu", {a});
  return sameTypeUnaryKernel(a, []<typename T>(T x) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return (x > T(0) || x != x) ? x : T(0);
  });
}

Tensor relu6(const Tensor &a) { return hardtanh(a, Scalar(int64_t{0}), Scalar(int64_t{6})); }

Tensor hardtanh(const Tensor &a, const Scalar &minVal, const Scalar &maxVal) {
  KILN_CHECK(a.dtype() != DType::Bool, "hardtanh: bool inputs are not supported");
  KILN_CHECK_KIND(Value, minVal.toDouble() <= maxVal.toDouble(),
                  "hardtanh: min_val ({}) cannot be greater than max_val ({})", minVal.toDouble(),
                  maxVal.toDouble());
  KILN_CHECK(a.dtype() != DType::UInt8 || minVal.toDouble() >= 0,
             "hardtanh: cannot do hardtanh on an unsigned type (uint8) with negative limits");
  return clampToScalars("hardtanh", a, a.dtype(), minVal, maxVal);
}

Tensor threshold(const Tensor &a, const Scalar &threshold, const Scalar &value) {
  checkNotBool("threshold", a.dtype());
  DType compute = computeDType(a.dtype());
  Tensor in[1] = {a.to(compute)};
  Tensor out = Tensor::empty(a.sizes(), compute, a.device());
  dispatchCompute(compute, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      T th = castScalarChecked<T>("threshold", threshold, a.dtype());
      T v = castScalarChecked<T>("threshold", value, a.dtype());
      cpuKernel<T, T>(out, in, [th, v](T x) -> T { return x <= th ? v : x; });
    }
  });
  return compute == a.dtype() ? out : out.to(a.dtype());
}

Tensor gelu(const Tensor &a, const std::string &approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh",
             "gelu: approximate argument must be either 'none' or 'tanh', got '{}'", approximate);
  if (onDevice({&a}))
    return deviceOp("gelu", {a}, approximate == "tanh" ? "approximate = \"tanh\"" : "");
  if (approximate == "tanh")
    return floatActivation("gelu", a, []<typename T>(T x) -> T {
      const T k = static_cast<T>(0.7978845608028654); // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + fastTanh(k * (x + T(0.044715) * x * x * x)));
    });
  return floatActivation("gelu", a, []<typename T>(T x) -> T {
    return T(0.5) * x * (T(1) + fastErfAbsolute(x * static_cast<T>(0.7071067811865476)));
  });
}

Tensor geluBackward(const Tensor &grad, const Tensor &x, const std::string &approximate) {
  DType dt = promoteTypes(grad.dtype(), x.dtype());
  KILN_CHECK(isFloating(dt), "gelu_backward: expected floating tensors, got {}", dtypeName(dt));
  if (approximate == "tanh")
    return floatBinaryKernel("gelu_backward", grad, x, dt, []<typename T>(T g, T v) -> T {
      const T k = static_cast<T>(0.7978845608028654), kappa = static_cast<T>(0.044715);
      T x2 = v * v;
      T t = fastTanh(k * (v + kappa * x2 * v));
      T inner = k * (T(1) + T(3) * kappa * x2);
      return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * inner);
    });
  return floatBinaryKernel("gelu_backward", grad, x, dt, []<typename T>(T g, T v) -> T {
    T cdf = T(0.5) * (T(1) + fastErfAbsolute(v * static_cast<T>(0.7071067811865476)));
    T pdf = fastExp(T(-0.5) * v * v) * static_cast<T>(0.3989422804014327);
    return g * (cdf + v * pdf);
  });
}

Tensor silu(const Tensor &a) {
  if (onDevice({&a}))
    return deviceOp("silu", {a});
  return floatActivation("silu", a, []<typename T>(T x) -> T { return x / (T(1) + fastExp(-x)); });
}

Tensor softplus(const Tensor &a, double beta, double threshold) {
  return floatActivation("softplus", a, [beta, threshold]<typename T>(T x) -> T {
    const T b = static_cast<T>(beta);
    return x * b > static_cast<T>(threshold) ? x : std::log1p(std::exp(x * b)) / b;
  });
}

Tensor leakyRelu(const Tensor &a, double negativeSlope) {
  return floatActivation("leaky_relu", a, [negativeSlope]<typename T>(T x) -> T {
    return x > T(0) ? x : x * static_cast<T>(negativeSlope);
  });
}

Tensor elu(const Tensor &a, double alpha) { return eluFamily("elu", a, alpha, 1.0, 1.0); }

Tensor selu(const Tensor &a) { return eluFamily("selu", a, kSeluAlpha, kSeluScale, 1.0); }

Tensor celu(const Tensor &a, double alpha) {
  KILN_CHECK(alpha != 0, "celu: ZeroDivisionError: alpha cannot be 0 for CELU");
  return eluFamily("celu", a, alpha, 1.0, 1.0 / alpha);
}

Tensor hardsigmoid(const Tensor &a) {
  return floatActivation("hardsigmoid", a, []<typename T>(T x) -> T {
    return std::min(std::max(x + T(3), T(0)), T(6)) / T(6);
  });
}

Tensor hardswish(const Tensor &a) {
  return floatActivation("hardswish", a, []<typename T>(T x) -> T {
    return x * std::min(std::max(x + T(3), T(0)), T(6)) / T(6);
  });
}

Tensor mish(const Tensor &a) {
  return floatActivation(
      "mish", a, []<typename T>(T x) -> T { return x * std::tanh(std::log1p(std::exp(x))); });
}

Tensor logsigmoid(const Tensor &a) {
  return floatActivation("logsigmoid", a, []<typename T>(T x) -> T {
    return std::min(x, T(0)) - std::log1p(std::exp(-std::abs(x)));
  });
}

Tensor softsign(const Tensor &a) {
  checkNotBool("softsign", a.dtype());
  return floatUnaryKernel(a, floatResult(a.dtype()),
                          []<typename T>(T x) -> T { return x / (T(1) + std::abs(x)); });
}

Tensor tanhshrink(const Tensor &a) {
  checkNotBool("tanhshrink", a.dtype());
  return floatUnaryKernel(a, floatResult(a.dtype()),
                          []<typename T>(T x) -> T { return x - std::tanh(x); });
}

Tensor hardshrink(const Tensor &a, double lambd) {
  return floatActivation("hardshrink", a, [lambd]<typename T>(T x) -> T {
    const T l = static_cast<T>(lambd);
    return (x >= -l && x <= l) ? T(0) : x;
  });
}

Tensor softshrink(const Tensor &a, double lambd) {
  KILN_CHECK(lambd >= 0, "softshrink: lambda must be greater or equal to 0, but found {}", lambd);
  return floatActivation("softshrink", a, [lambd]<typename T>(T x) -> T {
    const T l = static_cast<T>(lambd);
    return x > l ? x - l : (x < -l ? x + l : (x != x ? x : T(0)));
  });
}

} // namespace kiln::ops
