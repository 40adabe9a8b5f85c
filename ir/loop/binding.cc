// Input binding and buffer layouts shared by the executors of loop programs.

#include "ir/loop/binding.h"

#include "runtime/error.h"

#include <algorithm>

namespace kiln::ir::loop {

namespace {

Shape evaluateAll(std::span<const SymInt> syms, const SymbolValues &values) {
  Shape out;
  for (const SymInt &s : syms)
    out.push_back(s.evaluate(values));
  return out;
}

} // namespace

bool BufferLayout::matches(const Tensor &t) const {
  if (t.sizes() != sizes)
    return false;
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end())
    return true; // no element: no stride is ever used
  for (size_t k = 0; k < sizes.size(); ++k)
    if (sizes[k] > 1 && strides[k] != t.stride(static_cast<int64_t>(k)))
      return false;
  return true;
}

BufferLayout layoutOf(const Buffer &b, const SymbolValues &values, std::string_view who) {
  BufferLayout l{evaluateAll(b.meta.sizes, values), evaluateAll(b.meta.strides, values)};
  for (size_t k = 0; k < l.sizes.size(); ++k) {
    KILN_CHECK_KIND(Value, l.sizes[k] >= 0 && l.strides[k] >= 0,
                    "{}: {} has sizes {} and strides {} here", who, b.name(),
                    shapeToString(l.sizes), shapeToString(l.strides));
    l.extent = l.sizes[k] == 0 || l.extent == 0 ? 0 : l.extent + (l.sizes[k] - 1) * l.strides[k];
  }
  return l;
}

Tensor allocateBuffer(const Buffer &b, const SymbolValues &values, std::string_view who) {
  BufferLayout l = layoutOf(b, values, who);
  return Tensor::empty({l.extent}, b.meta.dtype).asStrided(l.sizes, l.strides, 0);
}

void placeInputs(const LoopProgram &program, std::span<const Tensor> inputs,
                 bool contiguousFallback, std::vector<Tensor> &bound) {
  std::span<const BufferId> ids = program.inputs();
  for (size_t n = 0; n < ids.size() && n < inputs.size(); ++n) {
    const Tensor &t = inputs[n];
    bool copy =
        contiguousFallback && !t.isContiguous() && program.buffer(ids[n]).meta.isContiguous();
    bound[ids[n].index] = copy ? t.contiguous() : t;
  }
}

SymbolValues bindInputs(const LoopProgram &program, std::span<const Tensor> inputs,
                        const SymbolValues &given, const InputBinding &how,
                        std::vector<Tensor> &bound) {
  std::span<const BufferId> ids = program.inputs();
  std::string_view who = how.who;
  KILN_CHECK_KIND(Value, inputs.size() == ids.size(), "{}: the program takes {} inputs, got {}",
                  who, ids.size(), inputs.size());
  if (how.checked) {
    placeInputs(program, inputs, how.contiguousFallback, bound);
    return given;
  }
  SymbolValues values = given;
  for (size_t n = 0; n < ids.size(); ++n) {
    const Buffer &b = program.buffer(ids[n]);
    const Tensor &t = inputs[n];
    KILN_CHECK_KIND(Value, t.defined(), "{}: input {} is undefined", who, b.name());
    KILN_CHECK_KIND(Type, t.dtype() == b.meta.dtype,
                    "{}: input {} is {} but the tensor bound to it has dtype {}", who, b.name(),
                    printType(b.meta), dtypeName(t.dtype()));
    KILN_CHECK_KIND(Value, t.dim() == b.rank(),
                    "{}: input {} is {} but the tensor bound to it has shape {}", who, b.name(),
                    printType(b.meta), t.shapeStr());
    for (int64_t k = 0; k < b.rank(); ++k)
      if (std::string_view s = b.meta.sizes[k].symbolName(); !s.empty())
        values.try_emplace(std::string(s), t.size(k));
  }
  for (const std::string &s : program.sizeSymbols())
    KILN_CHECK_KIND(Value, values.count(s),
                    "{}: symbol '{}' has no value: {} with a dimension of size {}", who, s,
                    how.symbolHint, s);
  for (size_t n = 0; n < ids.size(); ++n) {
    const Buffer &b = program.buffer(ids[n]);
    Tensor t = inputs[n];
    BufferLayout l = layoutOf(b, values, who);
    KILN_CHECK_KIND(Value, l.sizes == t.sizes(),
                    "{}: input {} is {} = {} here, but the tensor bound to it has shape {}", who,
                    b.name(), printType(b.meta), shapeToString(l.sizes), t.shapeStr());
    if (how.contiguousFallback && !l.matches(t) && b.meta.isContiguous())
      t = t.contiguous();
    KILN_CHECK_KIND(Value, l.matches(t),
                    "{}: input {} has strides {} here, but the tensor bound to it has strides {}",
                    who, b.name(), shapeToString(l.strides), shapeToString(t.strides()));
    bound[ids[n].index] = t;
  }
  return values;
}

const ir::Attributes &bindAttributes(const ir::Attributes &attrs, const SymbolValues &values,
                                     ir::Attributes &storage) {
  auto symbolic = [](const auto &entry) {
    return entry.second.template is<SymInt>() || entry.second.template is<std::vector<SymInt>>();
  };
  if (std::none_of(attrs.begin(), attrs.end(), symbolic))
    return attrs;
  storage = attrs;
  for (auto &[name, a] : storage) {
    if (a.is<SymInt>()) {
      a = a.toSymInt().evaluate(values);
    } else if (a.is<std::vector<SymInt>>()) {
      std::vector<int64_t> v;
      for (const SymInt &s : a.toSymInts())
        v.push_back(s.evaluate(values));
      a = v;
    }
  }
  return storage;
}

std::vector<Tensor> runExtern(const ExternTable &table, const LoopProgram &program,
                              const LoopNode &node, std::span<const Tensor> inputs,
                              const SymbolValues &values, std::string_view who) {
  auto it = table.find(node.externOp);
  KILN_CHECK_KIND(NotImplemented, it != table.end(),
                  "{}: no implementation of extern \"{}\" (registerExtern it)", who, node.externOp);
  ir::Attributes storage;
  std::vector<Tensor> results =
      it->second(inputs, bindAttributes(node.attributes, values, storage));
  KILN_CHECK_KIND(Value, results.size() == node.outputs.size(),
                  "{}: extern \"{}\" returned {} tensors for {} buffers", who, node.externOp,
                  results.size(), node.outputs.size());
  for (size_t n = 0; n < results.size(); ++n) {
    const Buffer &b = program.buffer(node.outputs[n]);
    Shape sizes;
    for (const SymInt &s : b.meta.sizes)
      sizes.push_back(s.evaluate(values));
    KILN_CHECK_KIND(Value, results[n].sizes() == sizes && results[n].dtype() == b.meta.dtype,
                    "{}: extern \"{}\" result {} is {} {}, but {} is {}", who, node.externOp, n,
                    dtypeName(results[n].dtype()), results[n].shapeStr(), bufferName(b.id),
                    printType(b.meta));
  }
  return results;
}

} // namespace kiln::ir::loop
