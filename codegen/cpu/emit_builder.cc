// The emitter's text builder: SSA names, indentation, typed op helpers, scf.for; dtype → MLIR
// element types.

#include "codegen/cpu/emit_impl.h"

#include "runtime/error.h"

#include <bit>
#include <cstring>

namespace kiln::codegen::cpu::detail {

std::string memElem(DType t) {
  switch (t) {
  case DType::Bool:
  case DType::UInt8:
  case DType::Int8:
    return "i8";
  case DType::Int16:
  case DType::BFloat16:
    return "i16";
  case DType::Int32:
    return "i32";
  case DType::Int64:
    return "i64";
  case DType::Float16:
    return "f16";
  case DType::Float32:
    return "f32";
  case DType::Float64:
    return "f64";
  }
  fail(ErrorKind::Runtime, "cpu emitter: unknown dtype");
}

std::string computeElem(DType t) {
  if (t == DType::Bool)
    return "i1";
  if (isReducedFloat(t))
    return "f32";
  return memElem(t);
}

int computeBits(DType t) { return t == DType::Bool ? 8 : elemBits(computeElem(t)); }

bool isUnsignedDType(DType t) { return t == DType::Bool || t == DType::UInt8; }

bool isFloatElem(std::string_view elem) { return !elem.empty() && elem[0] == 'f'; }

int elemBits(std::string_view elem) {
  if (elem == "index")
    return 64;
  return std::stoi(std::string(elem.substr(1)));
}

std::string Builder::fresh(std::string_view hint) { return fmt::format("%{}{}", hint, next_++); }

void Builder::line(std::string_view text) {
  out_.append(static_cast<size_t>(depth_) * 2, ' ');
  out_.append(text);
  out_.push_back('\n');
}

void Builder::open(std::string_view header) {
  line(header);
  ++depth_;
}

void Builder::close(std::string_view footer) {
  --depth_;
  line(footer);
}

std::string Builder::indexConst(int64_t v) {
  std::string r = fresh("c");
  emit("{} = arith.constant {} : index", r, v);
  return r;
}

std::string Builder::indexOp(std::string_view op, const std::string &a, const std::string &b) {
  std::string r = fresh("x");
  emit("{} = {} {}, {} : index", r, op, a, b);
  return r;
}

Value Builder::indexToI64(const std::string &index) {
  Value r{fresh(), "i64"};
  emit("{} = arith.index_cast {} : index to i64", r.name, index);
  return r;
}

Value Builder::floatConst(double v, const std::string &elem, int lanes) {
  Value r{fresh("k"), elem};
  // Hexadecimal bit patterns: exact for every value, NaN and infinities included.
  if (elem == "f32")
    emit("{} = arith.constant 0x{:08X} : f32", r.name,
         std::bit_cast<uint32_t>(static_cast<float>(v)));
  else if (elem == "f64")
    emit("{} = arith.constant 0x{:016X} : f64", r.name, std::bit_cast<uint64_t>(v));
  else
    fail(ErrorKind::Runtime, "cpu emitter: no float constant of type {}", elem);
  return broadcast(r, lanes);
}

Value Builder::intConst(int64_t v, const std::string &elem, int lanes) {
  Value r{fresh("k"), elem};
  if (elem == "i1")
    emit("{} = arith.constant {}", r.name, v != 0 ? "true" : "false");
  else
    emit("{} = arith.constant {} : {}", r.name, v, elem);
  return broadcast(r, lanes);
}

Value Builder::broadcast(const Value &v, int lanes) {
  if (lanes == 0 || v.lanes == lanes)
    return v;
  KILN_CHECK(v.lanes == 0, "cpu emitter: cannot broadcast {} to {} lanes", v.type(), lanes);
  Value r{fresh("b"), v.elem, lanes};
  emit("{} = vector.broadcast {} : {} to {}", r.name, v.name, v.type(), r.type());
  return r;
}

Value Builder::unary(std::string_view op, const Value &a) {
  Value r{fresh(), a.elem, a.lanes};
  emit("{} = {} {} : {}", r.name, op, a.name, a.type());
  return r;
}

Value Builder::binary(std::string_view op, Value a, Value b) {
  int lanes = std::max(a.lanes, b.lanes);
  a = broadcast(a, lanes);
  b = broadcast(b, lanes);
  Value r{fresh(), a.elem, lanes};
  emit("{} = {} {}, {} : {}", r.name, op, a.name, b.name, r.type());
  return r;
}

Value Builder::compare(std::string_view op, std::string_view pred, Value a, Value b) {
  int lanes = std::max(a.lanes, b.lanes);
  a = broadcast(a, lanes);
  b = broadcast(b, lanes);
  Value r{fresh(), "i1", lanes};
  emit("{} = {} {}, {}, {} : {}", r.name, op, pred, a.name, b.name, a.type());
  return r;
}

Value Builder::select(Value cond, Value a, Value b) {
  int lanes = std::max({cond.lanes, a.lanes, b.lanes});
  a = broadcast(a, lanes);
  b = broadcast(b, lanes);
  Value r{fresh(), a.elem, lanes};
  if (cond.lanes == 0) // a scalar condition selects whole vectors
    emit("{} = arith.select {}, {}, {} : {}", r.name, cond.name, a.name, b.name, r.type());
  else
    emit("{} = arith.select {}, {}, {} : {}, {}", r.name, cond.name, a.name, b.name, cond.type(),
         r.type());
  return r;
}

Value Builder::convert(std::string_view op, const Value &a, const std::string &toElem) {
  Value r{fresh(), toElem, a.lanes};
  emit("{} = {} {} : {} to {}", r.name, op, a.name, a.type(), r.type());
  return r;
}

Value Builder::result(const std::string &name, size_t k, size_t count, const Value &like) {
  return Value{count == 1 ? name : fmt::format("{}#{}", name, k), like.elem, like.lanes};
}

std::vector<Value> Builder::forLoop(const std::string &lo, const std::string &hi,
                                    const std::string &step, const std::vector<Value> &inits,
                                    const LoopBody &body) {
  std::string iv = fresh("i");
  if (inits.empty()) {
    open(fmt::format("scf.for {} = {} to {} step {} {{", iv, lo, hi, step));
    body(iv, {});
    close();
    return {};
  }
  std::string res = fresh("r");
  std::vector<Value> args;
  std::string bindings, types;
  for (const Value &init : inits) {
    args.push_back(Value{fresh("a"), init.elem, init.lanes});
    bindings += fmt::format("{}{} = {}", bindings.empty() ? "" : ", ", args.back().name, init.name);
    types += fmt::format("{}{}", types.empty() ? "" : ", ", init.type());
  }
  std::string count = inits.size() == 1 ? "" : fmt::format(":{}", inits.size());
  open(fmt::format("{}{} = scf.for {} = {} to {} step {} iter_args({}) -> ({}) {{", res, count, iv,
                   lo, hi, step, bindings, types));
  std::vector<Value> yields = body(iv, args);
  KILN_CHECK(yields.size() == inits.size(), "cpu emitter: a loop yields {} values for {}",
             yields.size(), inits.size());
  std::string names;
  for (size_t k = 0; k < yields.size(); ++k) {
    yields[k] = broadcast(yields[k], inits[k].lanes);
    KILN_CHECK(yields[k].type() == inits[k].type(), "cpu emitter: a loop yields {} for {}",
               yields[k].type(), inits[k].type());
    names += fmt::format("{}{}", k ? ", " : "", yields[k].name);
  }
  emit("scf.yield {} : {}", names, types);
  close();
  std::vector<Value> results;
  for (size_t k = 0; k < inits.size(); ++k)
    results.push_back(result(res, k, inits.size(), inits[k]));
  return results;
}

} // namespace kiln::codegen::cpu::detail
