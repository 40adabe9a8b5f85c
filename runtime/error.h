#pragma once
/// kiln::Error: the one exception type the runtime throws on bad input.
///
/// The kind maps onto a Python exception class in the frontend (TypeError, ValueError,
/// IndexError, RuntimeError, NotImplementedError). Messages name the op, the offending shapes or
/// dtypes and the rule that was broken.

#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace kiln {

/// LinAlg: a factorization met a singular or indefinite matrix (Python's kiln.linalg.LinAlgError,
/// a RuntimeError as torch's). Shape: shapes that do not broadcast or multiply (kiln.ShapeError,
/// a RuntimeError as torch raises and a ValueError as NumPy raises).
enum class ErrorKind { Runtime, Type, Value, Index, NotImplemented, LinAlg, Shape };

class Error : public std::runtime_error {
public:
  Error(ErrorKind kind, const std::string &msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args &&...args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

} // namespace kiln

#define KILN_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::kiln::fail(::kiln::ErrorKind::Runtime, __VA_ARGS__);                                       \
  } while (0)
#define KILN_CHECK_KIND(kind, cond, ...)                                                           \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::kiln::fail(::kiln::ErrorKind::kind, __VA_ARGS__);                                          \
  } while (0)
