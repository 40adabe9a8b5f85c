// The kernel cache: keys, memory and disk hits, corrupt entries detected and rebuilt,
// concurrent builds, and CpuJit through the cache (cold vs warm compile times are printed).
#include "codegen/cpu/jit.h"
#include "codegen/cpu/kernel_cache.h"
#include "codegen/cpu/launch.h"
#include "runtime/error.h"

#include <kiln_catch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace kiln;
using namespace kiln::codegen::cpu;
namespace fs = std::filesystem;

namespace {

/// A fresh directory under the test's temporary directory, removed at exit.
std::string freshDir() {
  struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto &d : dirs)
        fs::remove_all(d, ec);
    }
  };
  static Cleanup cleanup;
  const char *base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/kiln_cache_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  REQUIRE(mkdtemp(buf.data()) != nullptr);
  cleanup.dirs.push_back(buf.data());
  return buf.data();
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const std::string &path, const std::string &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

/// Builds "object:<key>" and counts the builds.
struct FakeBuilder {
  std::atomic<int> builds{0};
  std::function<std::string()> forKey(const std::string &key) {
    return [this, key] {
      ++builds;
      return "object:" + key;
    };
  }
};

/// out[i] = a[i] * 2 + 1 over [begin, end), scalar loop. args: a, out, n.
const char *kScaleKernel = R"(
  func.func @scale(%args: !llvm.ptr, %begin: i64, %end: i64) {
    %p0 = llvm.load %args : !llvm.ptr -> !llvm.ptr
    %s1 = llvm.getelementptr %args[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
    %p1 = llvm.load %s1 : !llvm.ptr -> !llvm.ptr
    %s2 = llvm.getelementptr %args[2] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
    %n = llvm.load %s2 : !llvm.ptr -> i64
    %u = llvm.mlir.undef : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %a0 = llvm.insertvalue %p0, %u[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %a1 = llvm.insertvalue %p0, %a0[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %a2 = llvm.insertvalue %zero, %a1[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %a3 = llvm.insertvalue %n, %a2[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %a4 = llvm.insertvalue %one, %a3[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %A = builtin.unrealized_conversion_cast %a4 : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> to memref<?xf32>
    %o0 = llvm.insertvalue %p1, %u[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %o1 = llvm.insertvalue %p1, %o0[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %o2 = llvm.insertvalue %zero, %o1[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %o3 = llvm.insertvalue %n, %o2[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %o4 = llvm.insertvalue %one, %o3[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %O = builtin.unrealized_conversion_cast %o4 : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> to memref<?xf32>
    %lo = arith.index_cast %begin : i64 to index
    %hi = arith.index_cast %end : i64 to index
    %c1 = arith.constant 1 : index
    %two = arith.constant 2.0 : f32
    %onef = arith.constant 1.0 : f32
    scf.for %i = %lo to %hi step %c1 {
      %x = memref.load %A[%i] : memref<?xf32>
      %y = arith.mulf %x, %two : f32
      %z = arith.addf %y, %onef : f32
      memref.store %z, %O[%i] : memref<?xf32>
    }
    return
  })";

/// Compiles kScaleKernel through `cache` and runs it on 1031 elements: whether all are right.
/// (No Catch2 assertions inside: it runs on several threads.)
bool compileAndRun(KernelCache &cache, JitOptions options = {}) {
  options.cache = &cache;
  CpuJit jit(options);
  jit.addModule(kScaleKernel);
  const int64_t n = 1031;
  std::vector<float> a(n), out(n, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    a[i] = static_cast<float>(i) * 0.5f;
  void *args[] = {a.data(), out.data(), packSize(n)};
  launch(jit.lookupKernel("scale"), args, n, 64);
  for (int64_t i = 0; i < n; ++i)
    if (out[i] != a[i] * 2.0f + 1.0f)
      return false;
  return true;
}

std::string scaleKey(int optLevel = 3) { return cacheKey(kScaleKernel, hostTarget(), optLevel); }

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

TEST_CASE("keys hash the IR, target, opt level and version", "[kernel_cache]") {
  TargetDesc t = hostTarget();
  std::string key = cacheKey("ir", t, 3);
  CHECK(key.size() == 64);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(cacheKey("ir", t, 3) == key);
  CHECK(cacheKey("ir2", t, 3) != key);
  CHECK(cacheKey("ir", t, 2) != key);
  CHECK(cacheKey("ir", t, 3, "another-version") != key);
  TargetDesc other = t;
  other.features += ",-avx512f";
  CHECK(cacheKey("ir", other, 3) != key);
  other = t;
  other.cpu = "x86-64";
  CHECK(cacheKey("ir", other, 3) != key);
}

TEST_CASE("a miss, then memory and disk hits", "[kernel_cache]") {
  std::string dir = freshDir();
  KernelCache cache(dir);
  FakeBuilder builder;
  auto obj = cache.getOrBuild("k1", builder.forKey("k1"));
  CHECK(*obj == "object:k1");
  CHECK(cache.getOrBuild("k1", builder.forKey("k1")) == obj);
  CHECK(builder.builds == 1);
  CHECK(fs::exists(cache.entryPath("k1")));
  CHECK(cache.entryPath("k1") == dir + "/cpu/k1.o");

  cache.clearMemory();
  CHECK(*cache.getOrBuild("k1", builder.forKey("k1")) == "object:k1");
  KernelCache second(dir); // another process, same directory
  CHECK(*second.getOrBuild("k1", builder.forKey("k1")) == "object:k1");
  CHECK(builder.builds == 1);

  CacheStats s = cache.stats();
  CHECK(s.misses == 1);
  CHECK(s.count(MissReason::NotFound) == 1);
  CHECK(s.memoryHits == 1);
  CHECK(s.diskHits == 1);
  CHECK(s.str() == "hits 2 (memory 1, disk 1), misses 1 (not-found 1)");
  CHECK(second.stats().diskHits == 1);
  // No temporary files are left behind.
  int files = 0;
  for (const auto &entry : fs::directory_iterator(dir + "/cpu"))
    files += entry.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("a memory-only cache never touches the disk", "[kernel_cache]") {
  KernelCache cache("");
  FakeBuilder builder;
  cache.getOrBuild("k", builder.forKey("k"));
  cache.getOrBuild("k", builder.forKey("k"));
  CHECK(builder.builds == 1);
  CHECK(cache.entryPath("k").empty());
  cache.clearMemory();
  cache.getOrBuild("k", builder.forKey("k"));
  CHECK(builder.builds == 2);
}

TEST_CASE("corrupt entries are detected, deleted and rebuilt", "[kernel_cache]") {
  std::string dir = freshDir();
  FakeBuilder builder;
  {
    KernelCache writer(dir);
    writer.getOrBuild("k", builder.forKey("k"));
    writer.getOrBuild("other", builder.forKey("other"));
  }
  const std::string path = dir + "/cpu/k.o";
  const std::string good = readFile(path);
  REQUIRE(good.size() == 8 + 4 + 4 + 1 + 8 + 8 + std::string("object:k").size());

  struct Case {
    const char *name;
    std::string data;
    MissReason reason;
  };
  std::string flippedPayload = good;
  flippedPayload.back() ^= 0x40;
  std::string flippedMagic = good;
  flippedMagic[0] ^= 0x01;
  std::string flippedVersion = good;
  flippedVersion[8] ^= 0x01;
  std::string flippedKey = good;
  flippedKey[16] ^= 0x01;
  std::vector<Case> cases = {
      {"flipped payload byte", flippedPayload, MissReason::BadChecksum},
      {"truncated payload", good.substr(0, good.size() - 3), MissReason::Truncated},
      {"truncated header", good.substr(0, 20), MissReason::Truncated},
      {"empty file", "", MissReason::Truncated},
      {"flipped magic", flippedMagic, MissReason::BadMagic},
      {"other format version", flippedVersion, MissReason::FormatVersion},
      {"flipped key byte", flippedKey, MissReason::KeyMismatch},
      {"another key's entry", readFile(dir + "/cpu/other.o"), MissReason::KeyMismatch},
  };
  for (const Case &c : cases) {
    SECTION(c.name) {
      writeFile(path, c.data);
      KernelCache cache(dir);
      int before = builder.builds;
      CHECK(*cache.getOrBuild("k", builder.forKey("k")) == "object:k");
      CHECK(builder.builds == before + 1);
      CacheStats s = cache.stats();
      CHECK(s.misses == 1);
      CHECK(s.count(c.reason) == 1);
      CHECK(readFile(path) == good); // rebuilt entry replaced the corrupt one
      KernelCache again(dir);
      again.getOrBuild("k", builder.forKey("k"));
      CHECK(again.stats().diskHits == 1);
    }
  }
}

TEST_CASE("concurrent requests build a key once", "[kernel_cache]") {
  KernelCache cache(freshDir());
  std::atomic<int> builds{0};
  auto slowBuild = [&] {
    ++builds;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return std::string("slow");
  };
  std::vector<std::thread> threads;
  std::vector<std::string> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { results[t] = *cache.getOrBuild("same", slowBuild); });
  for (auto &t : threads)
    t.join();
  CHECK(builds == 1);
  for (const auto &r : results)
    CHECK(r == "slow");
  CHECK(cache.stats().misses == 1);
  CHECK(cache.stats().memoryHits == 3);

  // A failing build reaches its caller; the key is not poisoned.
  CHECK_THROWS_AS(
      cache.getOrBuild("bad", []() -> std::string { throw std::runtime_error("boom"); }),
      std::runtime_error);
  CHECK(*cache.getOrBuild("bad", [] { return std::string("fine"); }) == "fine");
}

TEST_CASE("CpuJit through the cache: cold, warm memory, warm disk", "[kernel_cache]") {
  std::string dir = freshDir();
  KernelCache cache(dir);
  auto start = std::chrono::steady_clock::now();
  CHECK(compileAndRun(cache));
  double cold = msSince(start);
  start = std::chrono::steady_clock::now();
  CHECK(compileAndRun(cache));
  double warmMemory = msSince(start);
  KernelCache fresh(dir);
  start = std::chrono::steady_clock::now();
  CHECK(compileAndRun(fresh));
  double warmDisk = msSince(start);
  std::printf("kernel_cache: small kernel, cold compile %.1f ms, warm (memory) %.1f ms, "
              "warm (disk) %.1f ms (each includes creating the JIT, linking and running)\n",
              cold, warmMemory, warmDisk);
  CHECK(cache.stats().misses == 1);
  CHECK(cache.stats().memoryHits == 1);
  CHECK(fresh.stats().diskHits == 1);
  CHECK(fs::exists(cache.entryPath(scaleKey())));

  // The dumps say when no stage ran.
  JitOptions options;
  options.cache = &cache;
  CpuJit jit(options);
  jit.addModule(kScaleKernel);
  CHECK(jit.dumps().fromCache);
  CHECK(jit.dumps().llvmIr.empty());
}

TEST_CASE("other features, versions or opt levels miss", "[kernel_cache]") {
  KernelCache cache(freshDir());
  CHECK(compileAndRun(cache));
  JitOptions fewerFeatures;
  fewerFeatures.target = hostTarget();
  fewerFeatures.target->features += ",-avx512f"; // still runs on this host
  CHECK(compileAndRun(cache, fewerFeatures));
  JitOptions otherVersion;
  otherVersion.version = "kiln-test/other-version";
  CHECK(compileAndRun(cache, otherVersion));
  JitOptions o1;
  o1.optLevel = 1;
  CHECK(compileAndRun(cache, o1));
  CacheStats s = cache.stats();
  CHECK(s.misses == 4);
  CHECK(s.count(MissReason::NotFound) == 4);
  CHECK(s.memoryHits + s.diskHits == 0);
  CHECK(compileAndRun(cache, otherVersion));
  CHECK(cache.stats().memoryHits == 1);
}

TEST_CASE("a corrupted object entry is rebuilt and runs correctly", "[kernel_cache]") {
  std::string dir = freshDir();
  {
    KernelCache cache(dir);
    CHECK(compileAndRun(cache));
  }
  std::string path = KernelCache(dir).entryPath(scaleKey());
  std::string good = readFile(path);
  for (int variant = 0; variant < 2; ++variant) {
    std::string bad = good;
    if (variant == 0)
      bad[bad.size() / 2] ^= 0xff; // a flipped byte in the machine code
    else
      bad.resize(bad.size() / 2);
    writeFile(path, bad);
    KernelCache cache(dir);
    CHECK(compileAndRun(cache));
    CacheStats s = cache.stats();
    CHECK(s.misses == 1);
    CHECK(s.count(variant == 0 ? MissReason::BadChecksum : MissReason::Truncated) == 1);
    CHECK(readFile(path) == good); // the rebuilt object is byte-identical
  }
}

TEST_CASE("two threads compile and run through one cache", "[kernel_cache]") {
  KernelCache cache(freshDir());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      try {
        for (int i = 0; i < 3; ++i)
          failures += !compileAndRun(cache);
      } catch (...) {
        ++failures;
      }
    });
  for (auto &t : threads)
    t.join();
  CHECK(failures == 0);
  CHECK(cache.stats().misses == 1);
  CHECK(cache.stats().memoryHits == 5);
}
