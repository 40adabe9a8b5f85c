// The interpreter's element I/O (one element of any dtype as an Elem) and its entry to the shared
// prim evaluator.

#include "ir/loop/interpreter_impl.h"

#include "runtime/error.h"

namespace kiln::ir::loop::detail {

Elem evalPrim(ExprKind kind, DType operandType, DType resultType, std::span<const Elem> args) {
  if (std::string why = primUndefined(kind, operandType, args); !why.empty())
    fail(ErrorKind::Value, "loop interpreter: {}", why);
  return loop::evalPrim(kind, operandType, resultType, args);
}

Elem readElem(const Tensor &t, int64_t offset) {
  return dispatchAll(t.dtype(), [&]<typename T>() -> Elem {
    T v = t.data<T>()[offset];
    if constexpr (std::is_integral_v<T>)
      return {0, static_cast<int64_t>(v)};
    else if constexpr (std::is_same_v<T, double>)
      return {v, 0};
    else
      return {static_cast<double>(static_cast<float>(v)), 0};
  });
}

void writeElem(const Tensor &t, int64_t offset, Elem v) {
  dispatchAll(t.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>)
      t.data<T>()[offset] = v.i != 0;
    else if constexpr (std::is_integral_v<T>)
      t.data<T>()[offset] = static_cast<T>(v.i);
    else if constexpr (std::is_same_v<T, double>)
      t.data<T>()[offset] = v.f;
    else
      t.data<T>()[offset] = T(static_cast<float>(v.f));
  });
}

} // namespace kiln::ir::loop::detail
