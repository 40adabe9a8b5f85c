#include "runtime/error.h"
#include "runtime/tensor.h"

#include <kiln_catch.h>

#include <numeric>

using namespace kiln;

namespace {
Tensor iota(Shape sizes) {
  Tensor t = Tensor::empty(sizes, DType::Float32);
  float *p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(i);
  return t;
}
float at(const Tensor &t, Shape idx) {
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); ++i)
    off += idx[i] * t.strides()[i];
  return t.data<float>()[off];
}
} // namespace

TEST_CASE("views share storage and compute strides", "[tensor]") {
  Tensor a = iota({2, 3, 4});
  CHECK(a.isContiguous());
  Tensor t = a.transpose(0, 2);
  CHECK(t.sizes() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK_FALSE(t.isContiguous());
  CHECK(t.storage() == a.storage());
  CHECK(at(t, {3, 1, 1}) == at(a, {1, 1, 3}));

  Tensor s = a.slice(2, 1, std::nullopt, 2);
  CHECK(s.sizes() == Shape{2, 3, 2});
  CHECK(s.storageOffset() == 1);
  CHECK(at(s, {1, 2, 1}) == at(a, {1, 2, 3}));

  Tensor e = a.select(0, 1).unsqueeze(0).expand({5, 3, 4});
  CHECK(e.strides()[0] == 0);
  CHECK(at(e, {4, 2, 3}) == 23.0f);
}

TEST_CASE("view fails across non-contiguous dims, reshape copies", "[tensor]") {
  Tensor a = iota({4, 6});
  Tensor t = a.t();
  CHECK_THROWS_AS(t.view({24}), Error);
  Tensor r = t.reshape({24});
  CHECK(r.storage() != a.storage());
  CHECK(r.data<float>()[1] == 6.0f);
  Tensor v = a.view({2, -1, 3});
  CHECK(v.sizes() == Shape{2, 4, 3});
  CHECK(v.storage() == a.storage());
  CHECK_THROWS_AS(a.view({5, -1}), Error);
}

TEST_CASE("contiguous copies a permuted tensor in row-major order", "[tensor]") {
  Tensor a = iota({2, 3, 4});
  Tensor p = a.permute({2, 0, 1}).contiguous();
  CHECK(p.isContiguous());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k)
        CHECK(at(p, {i, j, k}) == at(a, {j, k, i}));
}

TEST_CASE("copy_ casts, broadcasts and bumps the version", "[tensor]") {
  Tensor dst = Tensor::empty({3, 2}, DType::Int32);
  Tensor src = iota({2});
  int64_t v0 = dst.version();
  dst.copy_(src);
  CHECK(dst.version() == v0 + 1);
  CHECK(dst.data<int32_t>()[4] == 0);
  CHECK(dst.data<int32_t>()[5] == 1);
  CHECK_THROWS_AS(dst.copy_(iota({3})), Error);
  // A source overlapping the destination broadcasts too (x[1, :] = x[1, 0]).
  Tensor x = iota({2, 3});
  x.select(0, 1).copy_(x.select(0, 1).select(0, 2));
  for (int64_t k = 0; k < 3; ++k)
    CHECK(x.data<float>()[3 + k] == 5);
  CHECK(x.data<float>()[2] == 2);
}

TEST_CASE("zero-size and 0-d tensors", "[tensor]") {
  Tensor z = Tensor::empty({0, 3}, DType::Float32);
  CHECK(z.numel() == 0);
  CHECK(z.isContiguous());
  CHECK(z.clone().sizes() == Shape{0, 3});
  CHECK(z.reshape({3, 0}).sizes() == Shape{3, 0});
  Tensor s = Tensor::scalarTensor(Scalar(2.5), DType::Float64);
  CHECK(s.dim() == 0);
  CHECK(s.item().toDouble() == 2.5);
  CHECK(s.reshape({1, 1}).sizes() == Shape{1, 1});
  CHECK_THROWS_AS(Tensor::empty({-1}, DType::Float32), Error);
}

TEST_CASE("dims are bounds checked", "[tensor]") {
  Tensor a = iota({2, 3});
  CHECK(a.size(-1) == 3);
  CHECK_THROWS_AS(a.size(2), Error);
  CHECK_THROWS_AS(a.select(1, 3), Error);
  CHECK_THROWS_AS(a.permute({0, 0}), Error);
  CHECK_THROWS_AS(a.expand({3, 3}), Error);
  CHECK(a.expand({4, 2, 3}).sizes() == Shape{4, 2, 3});
}
