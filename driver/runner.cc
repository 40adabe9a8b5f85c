// Runner: input checks once, weights, in-place outputs, write-backs (see runner.h).

#include "driver/runner.h"

#include <array>
#include <cstring>

namespace kiln::driver {

namespace {

/// The bytes of `t`'s storage (whole storages: views of one array overlap conservatively).
std::pair<uintptr_t, uintptr_t> storageRange(const Tensor &t) {
  auto begin = reinterpret_cast<uintptr_t>(t.storage()->address());
  return {begin, begin + t.storage()->nbytes()};
}

/// writeRegion for host tensors of one dtype, a contiguous value of exactly the region's shape
/// and no overlap: the region's address and strides computed, the elements copied with no view
/// tensors made (a time loop stores a row per step). False when any of that does not hold.
bool copyIntoRegion(const Tensor &target, std::span<const passes::lower::Region> region,
                    const Tensor &value, const ir::SymbolValues &values) {
  constexpr size_t kMaxRank = 8;
  if (!value.defined() || !target.isCpu() || !value.isCpu() || value.dtype() != target.dtype() ||
      !value.isContiguous() || target.sizes().size() > kMaxRank)
    return false;
  std::array<int64_t, kMaxRank> sizes{}, strides{};
  size_t rank = target.sizes().size();
  std::copy(target.sizes().begin(), target.sizes().end(), sizes.begin());
  std::copy(target.strides().begin(), target.strides().end(), strides.begin());
  int64_t offset = 0;
  for (const passes::lower::Region &r : region) {
    auto d = static_cast<size_t>(r.dim);
    int64_t start = r.start.evaluate(values);
    int64_t len = r.select ? 1 : r.len.evaluate(values);
    if (d >= rank || start < 0 || len < 1 || start + (len - 1) * r.step >= sizes[d])
      return false; // the view path names the error
    offset += start * strides[d];
    if (r.select) {
      std::copy(sizes.begin() + d + 1, sizes.begin() + rank, sizes.begin() + d);
      std::copy(strides.begin() + d + 1, strides.begin() + rank, strides.begin() + d);
      --rank;
    } else {
      sizes[d] = len;
      strides[d] *= r.step;
    }
  }
  if (!std::equal(sizes.begin(), sizes.begin() + rank, value.sizes().begin(), value.sizes().end()))
    return false;
  int64_t item = target.itemsize();
  char *dst = target.rawData() + offset * item;
  const char *src = value.rawData();
  auto [lo, hi] = storageRange(target);
  auto [a, b] = storageRange(value);
  if (a < hi && lo < b)
    return false;
  // rows along the last dim (one memcpy when its stride is 1), the outer dims as a counter
  int64_t inner = rank ? sizes[rank - 1] : 1, innerStride = rank ? strides[rank - 1] : 1;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    rows *= sizes[d];
  std::array<int64_t, kMaxRank> at{};
  for (int64_t row = 0; row < rows; ++row) {
    int64_t base = 0;
    for (size_t d = 0; d + 1 < rank; ++d)
      base += at[d] * strides[d];
    char *out = dst + base * item;
    if (innerStride == 1) {
      std::memcpy(out, src, inner * item);
    } else {
      for (int64_t k = 0; k < inner; ++k)
        std::memcpy(out + k * innerStride * item, src + k * item, item);
    }
    src += inner * item;
    for (size_t d = rank > 1 ? rank - 1 : 0; d-- > 0;) { // the next row's index
      if (++at[d] < sizes[d])
        break;
      at[d] = 0;
    }
  }
  target.bumpVersion(); // as copy_ does: a write the array's version counter sees
  return true;
}

/// Throws IndexError when `region` does not lie inside `target`: checked for every region
/// before any is written, so a failing call leaves its arguments as they were (the caller may
/// run the code again eagerly for the error).
void checkRegion(const Tensor &target, std::span<const passes::lower::Region> region,
                 const ir::SymbolValues &values) {
  Shape sizes = target.sizes();
  for (const passes::lower::Region &r : region) {
    auto d = static_cast<size_t>(r.dim);
    int64_t start = r.start.evaluate(values);
    int64_t len = r.select ? 1 : r.len.evaluate(values);
    if (d >= sizes.size() || start < 0 || len < 0 ||
        (len > 0 && start + (len - 1) * r.step >= sizes[d]))
      fail(ErrorKind::Index, "index {} is out of bounds for dimension {} with size {}", start, d,
           d < sizes.size() ? sizes[d] : 0);
    if (r.select)
      sizes.erase(sizes.begin() + static_cast<int64_t>(d));
    else
      sizes[d] = len;
  }
}

/// Stores `value` into `region` of `target` (WriteBack::region), in place.
void writeRegion(const Tensor &target, std::span<const passes::lower::Region> region,
                 const Tensor &value, const ir::SymbolValues &values) {
  if (copyIntoRegion(target, region, value, values))
    return;
  Tensor into = target;
  for (const passes::lower::Region &r : region) {
    int64_t start = r.start.evaluate(values);
    if (r.select) {
      into = into.select(r.dim, start);
      continue;
    }
    int64_t len = r.len.evaluate(values);
    if (len == 0)
      return;
    into = into.slice(r.dim, start, start + (len - 1) * r.step + 1, r.step);
  }
  auto [lo, hi] = storageRange(into);
  auto [a, b] = value.defined() ? storageRange(value) : std::pair<uintptr_t, uintptr_t>{0, 0};
  // a value that is a view of the target itself (`h[1:] = h[:-1]`) is copied out first
  into.copy_(a < hi && lo < b ? value.clone() : value);
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
  for (const WriteBack &w : inPlace_) {
    const Tensor &target = tensors[w.input];
    if (!target.defined() || !target.isCpu())
      continue;
    // Only when no other input shares its memory: the program would read what it overwrote.
    auto [lo, hi] = storageRange(target);
    bool shared = false;
    for (size_t k = 0; k < tensors.size() && !shared; ++k) {
      if (static_cast<int>(k) == w.input || !tensors[k].defined() || !tensors[k].isCpu())
        continue;
      auto [a, b] = storageRange(tensors[k]);
      shared = a < hi && lo < b;
    }
    if (shared)
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
                                bool writeBack) const {
  std::vector<Tensor> tensors(inputs.begin(), inputs.end());
  tensors.insert(tensors.end(), weights_.begin(), weights_.end());
  std::vector<Tensor> results = executable_->run(tensors, values, computeInPlace(tensors));
  if (writeBack)
    for (const WriteBack &w : graph_.writeBacks)
      if (!w.region.empty())
        checkRegion(tensors[w.input], w.region, values);
  if (writeBack)
    for (const WriteBack &w : graph_.writeBacks)
      if (!w.region.empty())
        writeRegion(tensors[w.input], w.region, results[w.result], values);
      else if (results[w.result].rawData() != tensors[w.input].rawData())
        tensors[w.input].copy_(results[w.result]);
  return results;
}

} // namespace kiln::driver
