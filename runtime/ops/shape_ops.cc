// Joining, splitting and broadcasting shape ops. Splits, movedim, broadcast_to and meshgrid are
// views; cat and stack copy each input into a slice of one new tensor.
#include "runtime/ops/shape_ops.h"
#include "runtime/copy.h"
#include "runtime/device_ops.h"
#include "runtime/error.h"

#include <algorithm>

namespace kiln::ops {

namespace {

/// torch's legacy rule: a 1-D tensor of size 0 may be concatenated with anything (it is skipped).
bool isLegacyEmpty(const Tensor &t) { return t.dim() == 1 && t.size(0) == 0; }

void checkCatShapes(std::span<const Tensor> tensors, const Tensor &ref, int64_t dim) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor &t = tensors[i];
    if (isLegacyEmpty(t))
      continue;
    KILN_CHECK(t.dim() == ref.dim(),
               "cat(): Tensors must have same number of dimensions: got {} and {} (tensor number "
               "{} has shape {})",
               ref.dim(), t.dim(), i, t.shapeStr());
    for (int64_t d = 0; d < t.dim(); ++d)
      KILN_CHECK(d == dim || t.size(d) == ref.size(d),
                 "cat(): Sizes of tensors must match except in dimension {}. Expected size {} but "
                 "got size {} for tensor number {} in the list.",
                 dim, ref.size(d), t.size(d), i);
  }
}

} // namespace

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  KILN_CHECK_KIND(Value, !tensors.empty(), "cat(): expected a non-empty list of Tensors");
  for (const Tensor &t : tensors)
    if (onDevice({&t})) {
      std::vector<DeviceOperand> operands(tensors.begin(), tensors.end());
      return runDeviceOp("cat", operands, fmt::format("dim = {}", dim)).at(0);
    }
  DType dtype = tensors[0].dtype();
  const Tensor *ref = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor &t = tensors[i];
    KILN_CHECK(t.dim() > 0,
               "cat(): zero-dimensional tensor (at position {}) cannot be concatenated", i);
    dtype = promoteTypes(dtype, t.dtype());
    if (!ref && !isLegacyEmpty(t))
      ref = &t;
  }
  if (!ref)
    return Tensor::empty({0}, dtype, tensors[0].device());
  dim = wrapDim(dim, ref->dim(), "cat()");
  checkCatShapes(tensors, *ref, dim);
  Shape sizes = ref->sizes();
  sizes[dim] = 0;
  for (const Tensor &t : tensors)
    sizes[dim] += isLegacyEmpty(t) ? 0 : t.size(dim);
  Tensor out = Tensor::empty(sizes, dtype, ref->device());
  int64_t offset = 0;
  for (const Tensor &t : tensors) {
    if (isLegacyEmpty(t))
      continue;
    copyInto(out.narrow(dim, offset, t.size(dim)), t);
    offset += t.size(dim);
  }
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  KILN_CHECK_KIND(Value, !tensors.empty(), "stack(): expected a non-empty list of Tensors");
  dim = wrapDim(dim, tensors[0].dim() + 1, "stack()");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].sizes() == tensors[0].sizes(),
               "stack expects each tensor to be equal size, but got {} at entry 0 and {} at entry "
               "{}",
               tensors[0].shapeStr(), tensors[i].shapeStr(), i);
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor &self, int64_t splitSize, int64_t dim) {
  KILN_CHECK(self.dim() > 0, "split expects at least a 1-dimensional tensor");
  dim = wrapDim(dim, self.dim(), "split");
  const int64_t n = self.size(dim);
  KILN_CHECK(splitSize >= 0, "split expects split_size be non-negative, but got split_size={}",
             splitSize);
  KILN_CHECK(splitSize > 0 || n == 0,
             "split_size can only be 0 if dimension size is 0, but got dimension size of {}", n);
  std::vector<Tensor> out;
  if (n == 0) {
    out.push_back(self.narrow(dim, 0, 0));
    return out;
  }
  for (int64_t start = 0; start < n; start += splitSize)
    out.push_back(self.narrow(dim, start, std::min(splitSize, n - start)));
  return out;
}

std::vector<Tensor> splitWithSizes(const Tensor &self, IntList sizes, int64_t dim) {
  KILN_CHECK(self.dim() > 0, "split_with_sizes expects at least a 1-dimensional tensor");
  dim = wrapDim(dim, self.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0,
               "split_with_sizes expects split_sizes have only non-negative entries, but "
               "got split_sizes={}",
               shapeToString(sizes));
    total += s;
  }
  KILN_CHECK(total == self.size(dim),
             "split_with_sizes expects split_sizes to sum exactly to {} (input tensor's size at "
             "dimension {}), but got split_sizes={}",
             self.size(dim), dim, shapeToString(sizes));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(self.narrow(dim, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor &self, int64_t chunks, int64_t dim) {
  KILN_CHECK(self.dim() > 0, "chunk expects at least a 1-dimensional tensor");
  KILN_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: {}", chunks);
  dim = wrapDim(dim, self.dim(), "chunk");
  const int64_t n = self.size(dim);
  if (n == 0) // split would lose the count of empty chunks
    return splitWithSizes(self, Shape(chunks, 0), dim);
  return split(self, (n + chunks - 1) / chunks, dim);
}

std::vector<Tensor> tensorSplit(const Tensor &self, int64_t sections, int64_t dim) {
  KILN_CHECK(self.dim() > 0,
             "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims");
  KILN_CHECK(sections > 0, "number of sections must be larger than 0, got {}", sections);
  dim = wrapDim(dim, self.dim(), "tensor_split");
  const int64_t n = self.size(dim), base = n / sections, extra = n % sections;
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t i = 0; i < sections; ++i) {
    int64_t len = base + (i < extra ? 1 : 0);
    out.push_back(self.narrow(dim, start, len));
    start += len;
  }
  return out;
}

std::vector<Tensor> tensorSplitIndices(const Tensor &self, IntList indices, int64_t dim) {
  KILN_CHECK(self.dim() > 0,
             "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims");
  dim = wrapDim(dim, self.dim(), "tensor_split");
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t idx : indices) {
    out.push_back(self.slice(dim, start, idx));
    start = idx;
  }
  out.push_back(self.slice(dim, start, std::nullopt));
  return out;
}

Tensor movedim(const Tensor &self, IntList source, IntList destination) {
  KILN_CHECK(source.size() == destination.size(),
             "movedim: Invalid source or destination dims: source ({} dims) should contain the "
             "same number of dims as destination ({} dims)",
             shapeToString(source), shapeToString(destination));
  const int64_t nd = self.dim();
  Shape order(nd, -1);
  std::vector<bool> srcUsed(std::max<int64_t>(nd, 1), false);
  for (size_t i = 0; i < source.size(); ++i) {
    int64_t s = wrapDim(source[i], nd, "movedim");
    int64_t d = wrapDim(destination[i], nd, "movedim");
    KILN_CHECK(!srcUsed[s], "movedim: repeated dim in `source` ({})", shapeToString(source));
    KILN_CHECK(nd == 0 || order[d] == -1, "movedim: repeated dim in `destination` ({})",
               shapeToString(destination));
    srcUsed[s] = true;
    if (nd > 0)
      order[d] = s;
  }
  int64_t next = 0;
  for (int64_t &o : order) {
    if (o != -1)
      continue;
    while (srcUsed[next])
      ++next;
    o = next++;
  }
  return self.permute(order);
}

Tensor broadcastTo(const Tensor &self, IntList shape) {
  try {
    return self.expand(shape);
  } catch (const Error &e) {
    fail(e.kind(), "broadcast_to: cannot broadcast a tensor of shape {} to shape {} ({})",
         self.shapeStr(), shapeToString(shape), e.what());
  }
}

std::vector<Tensor> broadcastTensors(std::span<const Tensor> tensors) {
  Shape shape;
  for (const Tensor &t : tensors)
    shape = broadcastShapes(shape, t.sizes(), "broadcast_tensors");
  std::vector<Tensor> out;
  for (const Tensor &t : tensors)
    out.push_back(t.expand(shape));
  return out;
}

std::vector<Tensor> meshgrid(std::span<const Tensor> tensors, const std::string &indexing) {
  KILN_CHECK(!tensors.empty(), "meshgrid expects a non-empty TensorList");
  KILN_CHECK(indexing == "ij" || indexing == "xy",
             "torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {}",
             indexing);
  const int64_t n = static_cast<int64_t>(tensors.size());
  // "xy" is "ij" with the roles of the first two inputs swapped in the output's dims.
  bool swap = indexing == "xy" && n >= 2;
  auto position = [&](int64_t i) { return swap && i < 2 ? 1 - i : i; };
  Shape shape(n);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor &t = tensors[i];
    KILN_CHECK(t.dim() <= 1,
               "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of "
               "shape {} at position {}",
               t.shapeStr(), i);
    KILN_CHECK(t.dtype() == tensors[0].dtype(),
               "meshgrid expects all tensors to have the same dtype (got {} and {})",
               dtypeName(tensors[0].dtype()), dtypeName(t.dtype()));
    shape[position(i)] = t.numel();
  }
  std::vector<Tensor> out;
  for (int64_t i = 0; i < n; ++i) {
    Shape view(n, 1);
    view[position(i)] = shape[position(i)];
    out.push_back(tensors[i].reshape(view).expand(shape));
  }
  return out;
}

} // namespace kiln::ops
