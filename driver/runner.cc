// Runner: input checks once, weights, in-place outputs, write-backs (see runner.h).

#include "driver/runner.h"

#include <algorithm>
#include <cstring>

namespace kiln::driver {

namespace {

/// The bytes of `t`'s storage (whole storages: views of one array overlap conservatively).
std::pair<uintptr_t, uintptr_t> storageRange(const Tensor &t) {
  auto begin = reinterpret_cast<uintptr_t>(t.storage()->address());
  return {begin, begin + t.storage()->nbytes()};
}

/// Where a region of a tensor lies: its sizes and strides, and its offset in elements from the
/// tensor's first element.
struct RegionView {
  Shape sizes, strides;
  int64_t offset = 0;
};

/// The view `region` (WriteBack::region) makes of `target`; throws IndexError when it does not
/// lie inside. Every region of a call is resolved before any is written, so a failing call
/// leaves its arguments as they were (the caller may run the code again eagerly for the error).
RegionView resolveRegion(const Tensor &target, std::span<const passes::lower::Region> region,
                         const ir::SymbolValues &values) {
  RegionView v{target.sizes(), target.strides(), 0};
  for (const passes::lower::Region &r : region) {
    auto d = static_cast<size_t>(r.dim);
    int64_t start = r.start.evaluate(values);
    int64_t len = r.select ? 1 : r.len.evaluate(values);
    if (d >= v.sizes.size() || start < 0 || len < 0 ||
        (len > 0 && start + (len - 1) * r.step >= v.sizes[d]))
      fail(ErrorKind::Index, "index {} is out of bounds for dimension {} with size {}", start, d,
           d < v.sizes.size() ? v.sizes[d] : 0);
    v.offset += start * v.strides[d];
    if (r.select) {
      v.sizes.erase(v.sizes.begin() + static_cast<int64_t>(d));
      v.strides.erase(v.strides.begin() + static_cast<int64_t>(d));
    } else {
      v.sizes[d] = len;
      v.strides[d] *= r.step;
    }
  }
  return v;
}

/// Copies a contiguous host `value` into `v` of host tensor `dst` of the same dtype, whose last
/// dim is contiguous: one memcpy per row, the outer dims as a counter, no view tensors made (a
/// time loop stores a row per step).
void copyRows(const Tensor &dst, const RegionView &v, const Tensor &value) {
  size_t rank = v.sizes.size();
  int64_t item = dst.itemsize(), inner = rank ? v.sizes.back() : 1, rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    rows *= v.sizes[d];
  char *first = dst.rawData() + v.offset * item;
  const char *src = value.rawData();
  Shape at(rank, 0);
  for (int64_t row = 0; row < rows; ++row, src += inner * item) {
    int64_t base = 0;
    for (size_t d = 0; d + 1 < rank; ++d)
      base += at[d] * v.strides[d];
    std::memcpy(first + base * item, src, inner * item);
    for (size_t d = rank > 1 ? rank - 1 : 0; d-- > 0;) { // the next row's index
      if (++at[d] < v.sizes[d])
        break;
      at[d] = 0;
    }
  }
}

/// Stores `value` into region `v` of `target`, in place: copyRows where it applies, else a view
/// of the region and copy_ (which casts, broadcasts, and reads a value overlapping the target
/// first: `h[1:] = h[:-1]`).
void writeRegion(const Tensor &target, const RegionView &v, const Tensor &value) {
  if (numelOf(v.sizes) == 0)
    return;
  auto [lo, hi] = storageRange(target);
  auto [a, b] = storageRange(value);
  if (!(a < hi && lo < b) && target.isCpu() && value.isCpu() && value.dtype() == target.dtype() &&
      value.isContiguous() && value.sizes() == v.sizes &&
      (v.strides.empty() || v.strides.back() == 1)) {
    copyRows(target, v, value);
    target.bumpVersion(); // as copy_ does: a write the array's version counter sees
    return;
  }
  target.asStrided(v.sizes, v.strides, target.storageOffset() + v.offset).copy_(value);
}

} // namespace

Runner::Runner(PreparedGraph graph, std::vector<Tensor> weights,
               std::unique_ptr<codegen::Executable> executable)
    : graph_(std::move(graph)), weights_(std::move(weights)), executable_(std::move(executable)) {
  Device device = executable_->device();
  for (Tensor &w : weights_)
    if (w.device() != device)
      w = w.to(device);
  for (const WriteBack &w : graph_.writeBacks)
    if (w.region.empty() &&
        executable_->canComputeInPlace(static_cast<size_t>(w.result), static_cast<size_t>(w.input)))
      inPlace_.push_back(w);
}

std::vector<Tensor> Runner::computeInPlace(std::span<const Tensor> tensors) const {
  std::vector<Tensor> into;
  if (inPlace_.empty())
    return into;
  // A result may be computed in its argument only when no other argument shares that memory
  // (the program would read what it overwrote). Every CPU argument's storage bytes, once,
  // sorted by start: an argument overlaps an earlier one when the furthest end before it passes
  // its start, and a later one when the next start comes before its end. (An optimizer step
  // writes back dozens of parameters and moments: one pass, not one per pair.)
  struct Span {
    uintptr_t lo, hi;
    size_t k;
  };
  std::vector<Span> spans;
  spans.reserve(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k)
    if (tensors[k].defined() && tensors[k].isCpu()) {
      auto [lo, hi] = storageRange(tensors[k]);
      if (lo < hi)
        spans.push_back({lo, hi, k});
    }
  std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) { return a.lo < b.lo; });
  std::vector<bool> shared(tensors.size(), false);
  uintptr_t furthest = 0;
  for (size_t j = 0; j < spans.size(); ++j) {
    bool before = j > 0 && furthest > spans[j].lo;
    bool after = j + 1 < spans.size() && spans[j + 1].lo < spans[j].hi;
    shared[spans[j].k] = before || after;
    furthest = std::max(furthest, spans[j].hi);
  }
  for (const WriteBack &w : inPlace_) {
    const Tensor &target = tensors[w.input];
    if (!target.defined() || !target.isCpu() || shared[w.input])
      continue;
    if (into.size() <= static_cast<size_t>(w.result))
      into.resize(w.result + 1);
    into[w.result] = target;
  }
  return into;
}

ir::SymbolValues Runner::bind(std::span<const Tensor> inputs,
                              std::span<const std::optional<int64_t>> ints) const {
  return graph_.bindSymbols(inputs, ints);
}

std::vector<Tensor> Runner::run(std::span<const Tensor> inputs, const ir::SymbolValues &values,
                                bool writeBack, std::span<const Tensor> spare) const {
  std::vector<Tensor> tensors(inputs.begin(), inputs.end());
  tensors.insert(tensors.end(), weights_.begin(), weights_.end());
  std::vector<Tensor> into = computeInPlace(tensors);
  for (size_t k = 0; k < spare.size(); ++k) {
    if (!spare[k].defined() || (k < into.size() && into[k].defined()))
      continue;
    if (into.size() <= k)
      into.resize(k + 1);
    into[k] = spare[k];
  }
  std::vector<Tensor> results = executable_->run(tensors, values, into);
  if (!writeBack)
    return results;
  std::vector<RegionView> regions; // all resolved (bounds-checked) before any write
  for (const WriteBack &w : graph_.writeBacks)
    if (!w.region.empty())
      regions.push_back(resolveRegion(tensors[w.input], w.region, values));
  auto region = regions.begin();
  for (const WriteBack &w : graph_.writeBacks)
    if (!w.region.empty())
      writeRegion(tensors[w.input], *region++, results[w.result]);
    else if (results[w.result].rawData() != tensors[w.input].rawData())
      tensors[w.input].copy_(results[w.result]);
  return results;
}

} // namespace kiln::driver
