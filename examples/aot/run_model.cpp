// run_model: runs any kilnc-compiled model from files, with no Python.
//
//   run_model LIB NAME OUT_DIR IN0.kt [IN1.kt ...] [--weights FILE] [--threads N] [--repeat R]
//
// dlopens LIB (libNAME.so), creates the model with NAME_create, reads each input from a `.kt`
// file, runs, and writes output k to OUT_DIR/out<k>.kt. With --threads N, N threads run the
// same inputs concurrently on one model and every result must be bit-identical (run() is
// thread-safe). A failing call prints `error <status>: <message>` and exits with the status.
//
// A `.kt` file: the 4 bytes "KT01", int32 dtype (kiln_dtype), int32 rank, int64 sizes[rank],
// then the row-major data (little-endian, as in memory here).

#include "kiln_aot.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using CreateFn = kiln_status (*)(const char *, kiln_model **);

size_t itemSize(int32_t dtype) {
  static const size_t kSizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return dtype >= 0 && dtype < 10 ? kSizes[dtype] : 0;
}

size_t byteSize(const kiln_tensor &t) {
  size_t n = itemSize(t.dtype);
  for (int d = 0; d < t.rank; ++d)
    n *= static_cast<size_t>(t.sizes[d]);
  return n;
}

[[noreturn]] void die(const std::string &message, int code = 1) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::exit(code);
}

void check(kiln_status status, const char *what) {
  if (status != KILN_OK) {
    std::printf("error %d: %s: %s\n", static_cast<int>(status), what, kiln_last_error());
    std::exit(static_cast<int>(status));
  }
}

/// Reads a .kt file; the tensor owns `storage`.
kiln_tensor readTensor(const std::string &path, std::vector<char> &storage) {
  std::ifstream in(path, std::ios::binary);
  char magic[4];
  kiln_tensor t{};
  if (!in.read(magic, 4) || std::memcmp(magic, "KT01", 4) != 0)
    die(path + ": not a .kt file");
  in.read(reinterpret_cast<char *>(&t.dtype), 4);
  in.read(reinterpret_cast<char *>(&t.rank), 4);
  if (!in || t.rank < 0 || t.rank > KILN_MAX_RANK || itemSize(t.dtype) == 0)
    die(path + ": bad header");
  in.read(reinterpret_cast<char *>(t.sizes), 8 * t.rank);
  storage.resize(byteSize(t) + 1);
  in.read(storage.data(), static_cast<std::streamsize>(byteSize(t)));
  if (!in)
    die(path + ": truncated");
  t.data = storage.data();
  return t;
}

void writeTensor(const std::string &path, const kiln_tensor &t) {
  std::ofstream out(path, std::ios::binary);
  out.write("KT01", 4);
  out.write(reinterpret_cast<const char *>(&t.dtype), 4);
  out.write(reinterpret_cast<const char *>(&t.rank), 4);
  out.write(reinterpret_cast<const char *>(t.sizes), 8 * t.rank);
  out.write(static_cast<const char *>(t.data), static_cast<std::streamsize>(byteSize(t)));
  if (!out)
    die("cannot write " + path);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 4)
    die("usage: run_model LIB NAME OUT_DIR IN.kt... [--weights FILE] [--threads N] [--repeat R]",
        2);
  std::string lib = argv[1], name = argv[2], outDir = argv[3];
  const char *weights = nullptr;
  int threads = 1, repeat = 1;
  std::vector<std::string> inputPaths;
  for (int i = 4; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--weights" && i + 1 < argc)
      weights = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else
      inputPaths.push_back(a);
  }
  void *handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    die(std::string("dlopen: ") + dlerror());
  auto create = reinterpret_cast<CreateFn>(dlsym(handle, (name + "_create").c_str()));
  if (!create)
    die("no " + name + "_create in " + lib);

  kiln_model *model = nullptr;
  check(create(weights, &model), "create");
  size_t numOutputs = kiln_model_num_outputs(model);
  for (size_t k = 0; k < kiln_model_num_inputs(model); ++k) {
    kiln_io_info info;
    check(kiln_model_input_info(model, k, &info), "input_info");
    std::printf("input %zu: %s %s rank %d\n", k, info.name, kiln_dtype_name(info.dtype), info.rank);
  }
  std::vector<std::vector<char>> storage(inputPaths.size());
  std::vector<kiln_tensor> inputs;
  for (size_t k = 0; k < inputPaths.size(); ++k)
    inputs.push_back(readTensor(inputPaths[k], storage[k]));

  // Every thread runs `repeat` times into its own outputs; thread 0's are written.
  std::vector<std::vector<kiln_tensor>> outputs(threads, std::vector<kiln_tensor>(numOutputs));
  std::vector<kiln_status> statuses(threads, KILN_OK);
  std::vector<std::string> messages(threads);
  auto work = [&](int t) {
    for (int r = 0; r < repeat; ++r) {
      for (kiln_tensor &o : outputs[t]) {
        kiln_free(o.data);
        o = kiln_tensor{};
      }
      statuses[t] =
          kiln_model_run(model, inputs.data(), inputs.size(), outputs[t].data(), numOutputs);
      if (statuses[t] != KILN_OK) {
        messages[t] = kiln_last_error();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(work, t);
  work(0);
  for (std::thread &th : pool)
    th.join();
  for (int t = 0; t < threads; ++t)
    if (statuses[t] != KILN_OK) {
      std::printf("error %d: run: %s\n", static_cast<int>(statuses[t]), messages[t].c_str());
      return static_cast<int>(statuses[t]);
    }
  for (int t = 1; t < threads; ++t)
    for (size_t k = 0; k < numOutputs; ++k)
      if (byteSize(outputs[t][k]) != byteSize(outputs[0][k]) ||
          std::memcmp(outputs[t][k].data, outputs[0][k].data, byteSize(outputs[0][k])) != 0)
        die("thread " + std::to_string(t) + " computed a different output " + std::to_string(k));
  for (size_t k = 0; k < numOutputs; ++k)
    writeTensor(outDir + "/out" + std::to_string(k) + ".kt", outputs[0][k]);
  std::printf("ok: %zu outputs\n", numOutputs);
  for (auto &per : outputs)
    for (kiln_tensor &o : per)
      kiln_free(o.data);
  kiln_model_destroy(model);
  return 0;
}
