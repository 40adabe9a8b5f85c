// The text side of the emitter: indented lines, fresh names, C types and literals per dtype.

#include "codegen/cuda/emit_impl.h"

#include "runtime/error.h"

#include <cmath>
#include <limits>

namespace kiln::codegen::cuda::detail {

void Writer::line(std::string_view text) {
  out_.append(static_cast<size_t>(depth_) * 2, ' ');
  out_ += text;
  out_ += '\n';
}

void Writer::open(std::string_view header) {
  line(header.empty() ? std::string("{") : fmt::format("{} {{", header));
  ++depth_;
}

void Writer::close(std::string_view footer) {
  --depth_;
  line(footer);
}

std::string Writer::fresh(std::string_view prefix) {
  auto it = next_.find(prefix);
  if (it == next_.end())
    it = next_.emplace(std::string(prefix), 0).first;
  return fmt::format("{}{}", prefix, it->second++);
}

std::string_view memType(DType t) {
  switch (t) {
  case DType::Bool:
  case DType::UInt8:
    return "unsigned char";
  case DType::Int8:
    return "signed char";
  case DType::Int16:
    return "short";
  case DType::Int32:
    return "int";
  case DType::Int64:
    return "long long";
  case DType::Float16:
  case DType::BFloat16:
    return "unsigned short";
  case DType::Float32:
    return "float";
  case DType::Float64:
    return "double";
  }
  fail(ErrorKind::NotImplemented, "cuda emitter: no CUDA type for dtype {}", dtypeName(t));
}

std::string_view computeType(DType t) {
  switch (t) {
  case DType::Bool:
    return "bool";
  case DType::Float16:
  case DType::BFloat16:
    return "float";
  default:
    return memType(t);
  }
}

std::string floatLiteral(double v, DType t) {
  bool isDouble = t == DType::Float64;
  if (std::isnan(v))
    return isDouble ? "kiln::nan()" : "kiln::nanf()";
  if (std::isinf(v))
    return std::string(v < 0 ? "-" : "") + (isDouble ? "kiln::inf()" : "kiln::inff()");
  std::string s = isDouble ? fmt::format("{}", v) : fmt::format("{}", static_cast<float>(v));
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  if (!isDouble)
    s += "f";
  return std::signbit(v) ? "(" + s + ")" : s;
}

std::string intLiteral(int64_t v, DType t) {
  switch (t) {
  case DType::Bool:
    return v ? "true" : "false";
  case DType::Int32: // -2147483648 would be a long: minus applied to a literal that fits no int
    if (v == std::numeric_limits<int32_t>::min())
      return "(-2147483647 - 1)";
    return v < 0 ? fmt::format("({})", v) : fmt::format("{}", v);
  case DType::Int64:
    if (v == std::numeric_limits<int64_t>::min())
      return "(-9223372036854775807LL - 1)";
    return v < 0 ? fmt::format("({}LL)", v) : fmt::format("{}LL", v);
  default:
    return fmt::format("(({}){})", computeType(t), v);
  }
}

std::string fromMemory(const std::string &raw, DType t) {
  switch (t) {
  case DType::Float16:
    return fmt::format("kiln::h2f({})", raw);
  case DType::BFloat16:
    return fmt::format("kiln::bf2f({})", raw);
  case DType::Bool:
    return fmt::format("({} != 0)", raw);
  default:
    return raw;
  }
}

std::string toMemory(const std::string &value, DType t) {
  switch (t) {
  case DType::Float16:
    return fmt::format("kiln::f2h({})", value);
  case DType::BFloat16:
    return fmt::format("kiln::f2bf({})", value);
  case DType::Bool:
    return fmt::format("(unsigned char)({})", value);
  default:
    return value;
  }
}

std::string sizeName(std::string_view symbol) { return fmt::format("sz_{}", symbol); }

} // namespace kiln::codegen::cuda::detail
