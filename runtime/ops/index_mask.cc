// Mask ops: masked_fill, masked_select, nonzero and Tensor.__contains__.
#include "runtime/error.h"
#include "runtime/loops.h"
#include "runtime/ops/index.h"
#include "runtime/ops/index_impl.h"
#include "runtime/thread_pool.h"

#include <cstring>
#include <numeric>

namespace kiln::ops {

using namespace detail;

namespace {

/// The bits that make an element nonzero: all of them, except the sign bit of floats (-0.0 is
/// zero). Testing bits lets one instantiation per element size serve every dtype.
uint64_t nonzeroMask(DType t) {
  const int bits = static_cast<int>(itemsize(t)) * 8;
  uint64_t all = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  return isFloating(t) ? all & ~(uint64_t{1} << (bits - 1)) : all;
}

constexpr int64_t kNonzeroBlock = 1 << 16;

/// Writes the coordinates of the nonzero elements of contiguous `c` into out: row-major
/// [count, ndim], or [ndim, count] when byDim. Blocks are counted in parallel, then each block
/// writes from its prefix-sum offset.
template <typename U>
void nonzeroInto(const Tensor &c, U mask, Tensor &out, bool byDim, int64_t &count) {
  const U *p = reinterpret_cast<const U *>(c.rawData());
  const int64_t n = c.numel(), nd = c.dim();
  const int64_t blocks = (n + kNonzeroBlock - 1) / kNonzeroBlock;
  std::vector<int64_t> counts(blocks + 1, 0);
  parallelFor(0, blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      int64_t cnt = 0;
      for (int64_t i = blk * kNonzeroBlock, end = std::min(n, i + kNonzeroBlock); i < end; ++i)
        cnt += (p[i] & mask) != 0;
      counts[blk + 1] = cnt;
    }
  });
  std::partial_sum(counts.begin(), counts.end(), counts.begin());
  count = counts[blocks];
  out = Tensor::empty(byDim ? Shape{nd, count} : Shape{count, nd}, DType::Int64, c.device());
  int64_t *o = out.data<int64_t>();
  const Shape &sizes = c.sizes();
  parallelFor(0, blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      Shape idx(nd);
      for (int64_t d = nd - 1, rem = blk * kNonzeroBlock; d >= 0; --d) {
        idx[d] = rem % sizes[d];
        rem /= sizes[d];
      }
      int64_t row = counts[blk];
      for (int64_t i = blk * kNonzeroBlock, end = std::min(n, i + kNonzeroBlock); i < end; ++i) {
        if ((p[i] & mask) != 0) {
          for (int64_t d = 0; d < nd; ++d)
            o[byDim ? d * count + row : row * nd + d] = idx[d];
          ++row;
        }
        for (int64_t d = nd - 1; d >= 0 && ++idx[d] == sizes[d]; --d)
          idx[d] = 0;
      }
    }
  });
}

Tensor nonzeroImpl(const Tensor &self, bool byDim) {
  Tensor c = self.contiguous();
  Tensor out;
  int64_t count = 0;
  dispatchBySize(c.itemsize(), [&]<typename U>() {
    nonzeroInto<U>(c, static_cast<U>(nonzeroMask(c.dtype())), out, byDim, count);
  });
  return out;
}

void checkBoolMask(const char *op, const Tensor &mask) {
  KILN_CHECK(mask.dtype() == DType::Bool,
             "{} only supports boolean masks, but got mask with dtype {}", op,
             dtypeName(mask.dtype()));
}

} // namespace

Tensor nonzero(const Tensor &self) { return nonzeroImpl(self, false); }

std::vector<Tensor> nonzeroTuple(const Tensor &self) {
  return nonzeroImpl(self.dim() == 0 ? self.view({1}) : self, true).unbind(0);
}

Tensor &maskedFill_(Tensor &self, const Tensor &mask, const Tensor &value) {
  checkBoolMask("masked_fill_", mask);
  KILN_CHECK(value.dim() == 0,
             "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {} "
             "dimension(s).",
             value.dim());
  Shape b = broadcastShapes(self.sizes(), mask.sizes(), "masked_fill_");
  KILN_CHECK(b == self.sizes(),
             "masked_fill_: output with shape {} doesn't match the broadcast shape {} (mask shape "
             "{})",
             self.shapeStr(), shapeToString(b), mask.shapeStr());
  if (self.numel() > 0) {
    Tensor v = value.to(self.dtype());
    Tensor ops[2] = {self, mask.expand(self.sizes())};
    NdLoop loop(self.sizes(), ops);
    dispatchBySize(self.itemsize(), [&]<typename U>() {
      U bits;
      std::memcpy(&bits, v.rawData(), sizeof(U));
      loop.run([bits](char **p, const int64_t *s, int64_t n) {
        char *o = p[0];
        const char *m = p[1];
        for (int64_t i = 0; i < n; ++i, o += s[0], m += s[1])
          if (*reinterpret_cast<const bool *>(m))
            *reinterpret_cast<U *>(o) = bits;
      });
    });
  }
  self.bumpVersion();
  return self;
}

Tensor maskedFill(const Tensor &self, const Tensor &mask, const Tensor &value) {
  checkBoolMask("masked_fill", mask);
  Tensor out = self.expand(broadcastShapes(self.sizes(), mask.sizes(), "masked_fill")).clone();
  return maskedFill_(out, mask, value);
}

Tensor maskedSelect(const Tensor &self, const Tensor &mask) {
  checkBoolMask("masked_select", mask);
  Shape shape = broadcastShapes(self.sizes(), mask.sizes(), "masked_select");
  Tensor m = mask.expand(shape);
  return index(self.expand(shape), std::span<const Tensor>(&m, 1)).reshape({-1});
}

bool contains(const Tensor &self, const Tensor &elem) {
  PromotionOperand ops[2] = {
      {self.dtype(), self.dim() == 0 ? PromotionPriority::ZeroDim : PromotionPriority::Tensor},
      {elem.dtype(), elem.isWrappedNumber() ? PromotionPriority::Scalar
                     : elem.dim() == 0      ? PromotionPriority::ZeroDim
                                            : PromotionPriority::Tensor}};
  DType compute = computeDType(resultType(ops));
  Shape shape = broadcastShapes(self.sizes(), elem.sizes(), "__contains__");
  if (numelOf(shape) == 0)
    return false;
  Tensor operands[2] = {self.to(compute).expand(shape), elem.to(compute).expand(shape)};
  NdLoop loop(shape, operands);
  bool found = false;
  dispatchCompute(compute, [&]<typename T>() {
    loop.runSerial([&found](char **p, const int64_t *s, int64_t n) {
      const char *a = p[0], *b = p[1];
      for (int64_t i = 0; i < n && !found; ++i, a += s[0], b += s[1])
        found = *reinterpret_cast<const T *>(a) == *reinterpret_cast<const T *>(b);
    });
  });
  return found;
}

} // namespace kiln::ops
