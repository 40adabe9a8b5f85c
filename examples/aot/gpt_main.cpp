// gpt_main: a GPT-style model compiled by kilnc, run from C++ with no Python.
//
//   gpt_main [BATCH] [OUT.kt]
//
// Creates the model from libgpt.so (weights from gpt.safetensors beside it), prints its
// inputs and outputs, feeds BATCH rows of deterministic tokens ((b*131 + t*17 + 3) mod vocab),
// prints each row's most likely next token and the mean time of a run, and optionally writes
// the logits to OUT.kt (run_model.cpp's format) so a test can compare them with Python. Last,
// it shows an error: a float tensor where tokens are expected.

#include "gpt.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace {

int fail(const char *what) {
  std::fprintf(stderr, "%s failed: %s\n", what, kiln_last_error());
  return 1;
}

void printInfo(const char *kind, size_t k, const kiln_io_info &info) {
  std::printf("%s %zu: %s %s [", kind, k, info.name, kiln_dtype_name(info.dtype));
  for (int d = 0; d < info.rank; ++d) {
    if (info.dims[d])
      std::printf("%s%s", d ? ", " : "", info.dims[d]);
    else
      std::printf("%s%lld", d ? ", " : "", static_cast<long long>(info.sizes[d]));
  }
  std::printf("]\n");
}

} // namespace

int main(int argc, char **argv) {
  int64_t batch = argc > 1 ? std::atoll(argv[1]) : 2;
  const char *outPath = argc > 2 ? argv[2] : nullptr;

  kiln_model *model = nullptr;
  if (gpt_create(nullptr, &model) != KILN_OK)
    return fail("gpt_create");
  kiln_io_info in, out;
  kiln_model_input_info(model, 0, &in);
  kiln_model_output_info(model, 0, &out);
  printInfo("input", 0, in);
  printInfo("output", 0, out);

  // idx: int64 [batch, T]; T and the vocabulary are constants of the exported program.
  int64_t seq = in.sizes[1], vocab = out.sizes[2];
  std::vector<int64_t> tokens(batch * seq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t)
      tokens[b * seq + t] = (b * 131 + t * 17 + 3) % vocab;
  kiln_tensor idx = {tokens.data(), KILN_INT64, 2, {batch, seq}};
  std::vector<float> logits(batch * seq * vocab);
  kiln_tensor result = {logits.data(), KILN_FLOAT32, 3, {batch, seq, vocab}};

  if (kiln_model_run(model, &idx, 1, &result, 1) != KILN_OK)
    return fail("kiln_model_run");
  const int runs = 20;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < runs; ++r)
    kiln_model_run(model, &idx, 1, &result, 1);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count() /
              runs;
  for (int64_t b = 0; b < batch; ++b) {
    const float *last = &logits[(b * seq + seq - 1) * vocab];
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      best = last[v] > last[best] ? v : best;
    std::printf("row %lld: next token %lld\n", static_cast<long long>(b),
                static_cast<long long>(best));
  }
  std::printf("batch %lld x %lld tokens: %.3f ms per run\n", static_cast<long long>(batch),
              static_cast<long long>(seq), ms);

  if (outPath) {
    std::ofstream f(outPath, std::ios::binary);
    int32_t header[2] = {KILN_FLOAT32, 3};
    f.write("KT01", 4);
    f.write(reinterpret_cast<const char *>(header), sizeof header);
    f.write(reinterpret_cast<const char *>(result.sizes), 3 * sizeof(int64_t));
    f.write(reinterpret_cast<const char *>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  }

  // The exported specs are checked natively: floats are not tokens.
  std::vector<float> notTokens(batch * seq);
  kiln_tensor wrong = {notTokens.data(), KILN_FLOAT32, 2, {batch, seq}};
  kiln_status status = kiln_model_run(model, &wrong, 1, &result, 1);
  std::printf("float input: status %d: %s\n", static_cast<int>(status), kiln_last_error());

  kiln_model_destroy(model);
  return status == KILN_ERROR_DTYPE ? 0 : 1;
}
