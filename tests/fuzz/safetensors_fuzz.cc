/// Fuzz target for the safetensors reader: arbitrary bytes must either be rejected with a
/// SafeTensorsError or yield tensors whose every element can be read, in place or copied when
/// unaligned (the input is parsed a second time one byte off its allocation to reach that path).
///
/// Built by tests/fuzz/run.sh with clang's libFuzzer, and by Bazel (with KILN_FUZZ_ENTRY
/// renaming the entry point) into tests/cpp:fuzz_corpus_test.

#include "aot/safetensors.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef KILN_FUZZ_ENTRY
#define KILN_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace {

[[noreturn]] void failCheck(const char *what, const std::string &name) {
  std::fprintf(stderr, "safetensors_fuzz: tensor '%s': %s\n", name.c_str(), what);
  std::abort();
}

/// Loads every element with its own C++ type, so the sanitizers see misaligned loads and bool
/// bytes other than 0 and 1.
double readAll(const kiln::Tensor &t) {
  return kiln::dispatchAll(t.dtype(), [&]<typename T>() {
    double sum = 0;
    const T *p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      sum += static_cast<double>(static_cast<float>(p[i]));
    return sum;
  });
}

void readEverything(std::span<const std::byte> bytes) {
  auto view = kiln::aot::SafeTensorsView::parse(bytes, "fuzz.safetensors");
  for (const auto &info : view.tensors()) {
    if (view.find(info.name) != &info)
      failCheck("find() does not return the listed entry", info.name);
    if (info.begin < view.dataOffset() || info.end > bytes.size() || info.begin > info.end)
      failCheck("the entry's bytes lie outside the data section", info.name);
    kiln::Tensor t = view.tensor(info, nullptr);
    if (static_cast<uint64_t>(t.numel() * t.itemsize()) != info.end - info.begin)
      failCheck("the tensor's size disagrees with its data offsets", info.name);
    if (t.numel() > 0 &&
        std::memcmp(t.rawData(), bytes.data() + info.begin, info.end - info.begin) != 0)
      failCheck("the tensor's bytes differ from the file's", info.name);
    volatile double sink = readAll(t);
    (void)sink;
  }
}

} // namespace

extern "C" int KILN_FUZZ_ENTRY(const uint8_t *data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte *>(data), size);
  try {
    readEverything(bytes);
  } catch (const kiln::aot::SafeTensorsError &) {
    return 0; // the documented way to reject a malformed file
  }
  // Once more one byte off, so aligned data in the first pass is misaligned here.
  std::vector<std::byte> shifted(size + 1);
  if (size > 0)
    std::memcpy(shifted.data() + 1, data, size);
  readEverything(std::span<const std::byte>(shifted).subspan(1));
  return 0;
}
