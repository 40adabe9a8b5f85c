#include "ir/attribute.h"

#include "ir/tensor_meta.h"
#include "runtime/error.h"

#include <bit>
#include <cmath>
#include <fmt/format.h>

namespace kiln::ir {

namespace {
template <typename... Ts> struct Overloaded : Ts... {
  using Ts::operator()...;
};

std::string joinInts(const std::vector<int64_t> &values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i)
    out += (i ? ", " : "") + std::to_string(values[i]);
  return out;
}
} // namespace

Attribute::Attribute(const SymInt &v) {
  if (std::optional<int64_t> c = v.constant())
    value_ = *c;
  else
    value_ = v;
}

Attribute::Attribute(const std::vector<SymInt> &v) {
  std::vector<int64_t> ints;
  for (const SymInt &s : v) {
    if (!s.isConstant()) {
      value_ = v;
      return;
    }
    ints.push_back(*s.constant());
  }
  value_ = std::move(ints);
}

AttrKind Attribute::kind() const {
  static constexpr AttrKind kKinds[] = {AttrKind::Int,    AttrKind::Float,     AttrKind::Bool,
                                        AttrKind::String, AttrKind::IntList,   AttrKind::DType,
                                        AttrKind::SymInt, AttrKind::SymIntList};
  return kKinds[value_.index()];
}

bool Attribute::matches(AttrKind expected) const {
  AttrKind k = kind();
  switch (expected) {
  case AttrKind::SymInt:
    return k == AttrKind::SymInt || k == AttrKind::Int;
  case AttrKind::SymIntList:
    return k == AttrKind::SymIntList || k == AttrKind::IntList;
  case AttrKind::Number:
    return k == AttrKind::Int || k == AttrKind::Float || k == AttrKind::Bool;
  default:
    return k == expected;
  }
}

namespace {
[[noreturn]] void wrongKind(const Attribute &a, AttrKind wanted) {
  fail(ErrorKind::Type, "attribute value {} is {}, not {}", a.str(), attrKindWithArticle(a.kind()),
       attrKindWithArticle(wanted));
}
} // namespace

int64_t Attribute::toInt() const {
  if (!is<int64_t>())
    wrongKind(*this, AttrKind::Int);
  return std::get<int64_t>(value_);
}

double Attribute::toDouble() const {
  if (is<int64_t>())
    return static_cast<double>(std::get<int64_t>(value_));
  if (!is<double>())
    wrongKind(*this, AttrKind::Float);
  return std::get<double>(value_);
}

bool Attribute::toBool() const {
  if (!is<bool>())
    wrongKind(*this, AttrKind::Bool);
  return std::get<bool>(value_);
}

const std::string &Attribute::toString() const {
  if (!is<std::string>())
    wrongKind(*this, AttrKind::String);
  return std::get<std::string>(value_);
}

DType Attribute::toDType() const {
  if (!is<DType>())
    wrongKind(*this, AttrKind::DType);
  return std::get<DType>(value_);
}

SymInt Attribute::toSymInt() const {
  if (is<int64_t>())
    return std::get<int64_t>(value_);
  if (!is<SymInt>())
    wrongKind(*this, AttrKind::SymInt);
  return std::get<SymInt>(value_);
}

std::vector<int64_t> Attribute::toInts() const {
  if (!is<std::vector<int64_t>>())
    wrongKind(*this, AttrKind::IntList);
  return std::get<std::vector<int64_t>>(value_);
}

std::vector<SymInt> Attribute::toSymInts() const {
  if (is<std::vector<SymInt>>())
    return std::get<std::vector<SymInt>>(value_);
  std::vector<SymInt> out;
  for (int64_t v : toInts())
    out.emplace_back(v);
  return out;
}

bool Attribute::operator==(const Attribute &other) const {
  if (is<double>() && other.is<double>())
    return std::bit_cast<uint64_t>(std::get<double>(value_)) ==
           std::bit_cast<uint64_t>(std::get<double>(other.value_));
  return value_ == other.value_;
}

size_t Attribute::hash() const {
  size_t h = value_.index();
  std::visit(
      Overloaded{
          [&](int64_t v) { h = detail::hashCombine(h, std::hash<int64_t>()(v)); },
          [&](double v) { h = detail::hashCombine(h, std::bit_cast<uint64_t>(v)); },
          [&](bool v) { h = detail::hashCombine(h, v); },
          [&](const std::string &v) { h = detail::hashCombine(h, std::hash<std::string>()(v)); },
          [&](const std::vector<int64_t> &v) {
            for (int64_t x : v)
              h = detail::hashCombine(h, std::hash<int64_t>()(x));
          },
          [&](DType v) { h = detail::hashCombine(h, static_cast<size_t>(v)); },
          [&](const SymInt &v) { h = detail::hashCombine(h, v.hash()); },
          [&](const std::vector<SymInt> &v) {
            for (const SymInt &x : v)
              h = detail::hashCombine(h, x.hash());
          },
      },
      value_);
  return h;
}

std::string Attribute::str() const {
  return std::visit(Overloaded{
                        [](int64_t v) { return std::to_string(v); },
                        [](double v) { return formatDouble(v); },
                        [](bool v) { return std::string(v ? "true" : "false"); },
                        [](const std::string &v) { return quoteString(v); },
                        [](const std::vector<int64_t> &v) { return "[" + joinInts(v) + "]"; },
                        [](DType v) { return std::string(dtypeShortName(v)); },
                        [](const SymInt &v) { return v.str(); },
                        [](const std::vector<SymInt> &v) {
                          std::string out;
                          for (size_t i = 0; i < v.size(); ++i)
                            out += (i ? ", " : "") + v[i].str();
                          return "[" + out + "]";
                        },
                    },
                    value_);
}

size_t hashAttributes(const Attributes &attrs) {
  size_t h = attrs.size();
  for (const auto &[name, value] : attrs)
    h = detail::hashCombine(detail::hashCombine(h, std::hash<std::string>()(name)), value.hash());
  return h;
}

std::string formatDouble(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", v); // shortest text that reads back to the same double
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string quoteString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (u < 0x20 || u >= 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out + "\"";
}

} // namespace kiln::ir
