#include "runtime/error.h"
#include "runtime/host_cache.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"

#include <kiln_catch.h>

#include <cstdint>
#include <cstring>

using namespace kiln;

TEST_CASE("allocations are 64-byte aligned and sized", "[storage]") {
  for (size_t n : {1, 3, 64, 1000, 1 << 20}) {
    auto s = Storage::allocate(n);
    CHECK(s->nbytes() == n);
    CHECK(reinterpret_cast<uintptr_t>(s->data()) % 64 == 0);
  }
  CHECK(Storage::allocate(0)->data() == nullptr);
}

TEST_CASE("borrowed memory is released exactly once, after the last view", "[storage]") {
  float buf[8] = {};
  int released = 0;
  {
    auto s = Storage::borrow(buf, sizeof(buf), Device{}, [&] { ++released; });
    Tensor t = Tensor::fromStorage(s, DType::Float32, {2, 4}, {4, 1}, 0);
    Tensor v = t.select(0, 1);
    s.reset();
    t = Tensor();
    CHECK(released == 0);
    v.fill_(Scalar(3.0));
  }
  CHECK(released == 1);
  CHECK(buf[4] == 3.0f);
  CHECK(buf[0] == 0.0f);
}

TEST_CASE("the version counter is shared by views of one storage", "[storage]") {
  Tensor a = Tensor::empty({4}, DType::Int64);
  Tensor v = a.slice(0, 1, 3);
  int64_t before = a.version();
  v.fill_(Scalar(int64_t{7}));
  CHECK(a.version() == before + 1);
  CHECK(a.data<int64_t>()[1] == 7);
}

TEST_CASE("devices parse and reject nonsense", "[storage]") {
  CHECK(Device::parse("cpu").type == DeviceType::CPU);
  CHECK(Device::parse("cuda:1").index == 1);
  CHECK_THROWS_AS(Device::parse("tpu"), Error);
  CHECK_THROWS_AS(Storage::allocate(16, Device::parse("cuda")), Error);
}

TEST_CASE("impossible sizes fail cleanly instead of wrapping around", "[storage]") {
  CHECK_THROWS_AS(Tensor::empty({int64_t{1} << 62}, DType::Float32), Error);
  CHECK_THROWS_AS(Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}, DType::Int8), Error);
  CHECK_THROWS_AS(Storage::allocate(size_t{1} << 63), Error);
}

TEST_CASE("large host blocks are reused by the next allocation of their size class", "[storage]") {
  using namespace kiln::hostcache;
  CHECK(sizeClass(kMinBytes) == kMinBytes);
  CHECK(sizeClass(kMinBytes + 1) == kMinBytes + kMinBytes / 8);
  CHECK(sizeClass(3 * kMinBytes - 1) == 3 * kMinBytes); // step 256 KiB in [2, 4) MiB
  for (size_t b : {kMinBytes, kMinBytes + 7, 5 * kMinBytes + 12345, 64 * kMinBytes - 1}) {
    size_t c = sizeClass(b);
    CHECK(c >= b);
    CHECK(c - b <= c / 8);
  }
  clear();
  HostCacheStats before = stats();
  void *first;
  {
    auto s = Storage::allocate(3 * kMinBytes + 100);
    first = s->data();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    std::memset(first, 1, s->nbytes()); // the whole block is usable
  }
  CHECK(stats().cachedBytes == sizeClass(3 * kMinBytes + 100));
  {
    auto same = Storage::allocate(3 * kMinBytes + 200); // same class: the same block
    CHECK(same->data() == first);
    CHECK(stats().cachedBytes == 0);
    auto other = Storage::allocate(9 * kMinBytes); // another class: a new block
    CHECK(other->data() != first);
    auto small = Storage::allocate(kMinBytes - 64); // below the cache: plain allocation
  }
  HostCacheStats after = stats();
  CHECK(after.hits - before.hits == 1);
  CHECK(after.misses - before.misses == 2);
  CHECK(after.cachedBytes == sizeClass(3 * kMinBytes + 100) + sizeClass(9 * kMinBytes));
  clear();
  CHECK(stats().cachedBytes == 0);
}
