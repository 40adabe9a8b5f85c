// Replays the fuzz targets' seed corpora (tests/fuzz/corpus) and a few thousand deterministic
// mutations of them through the fuzz entry points, so every build exercises the targets with
// the ordinary compiler even where clang's libFuzzer (tests/fuzz/run.sh) is not installed. An
// entry point aborts on any failure it detects, which fails this test.

#include "aot/safetensors.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"

#include <kiln_catch.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern "C" int kilnFuzzKirParser(const uint8_t *data, size_t size);
extern "C" int kilnFuzzSafeTensors(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

struct Seed {
  std::string name;
  Bytes bytes;
  bool bad() const { return name.rfind("bad_", 0) == 0; }
};

/// The seed files of one corpus, sorted by name (runfiles paths, relative to the workspace).
std::vector<Seed> loadCorpus(const std::string &kind) {
  fs::path dir = fs::path("tests/fuzz/corpus") / kind;
  std::vector<Seed> seeds;
  for (const auto &entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    seeds.push_back({entry.path().filename().string(), std::move(bytes)});
  }
  std::sort(seeds.begin(), seeds.end(),
            [](const Seed &a, const Seed &b) { return a.name < b.name; });
  return seeds;
}

/// splitmix64: a fixed sequence, so every run tests the same inputs.
class Rng {
public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

private:
  uint64_t state_;
};

/// Bytes and numbers the formats give meaning to, which random bytes rarely hit.
const char *const kTokens[] = {
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "%",
    "@",
    "\\",
    "(",
    ")",
    "-",
    "*",
    "=",
    "0",
    "-1",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "4294967296",
    "1e999",
    "2.5",
    "null",
    "\"F32\"",
    "\"BOOL\"",
    "\\u0000",
    "\\xff",
    "s0",
    "floordiv",
    "mod",
    "max(",
    "strided [",
    "on cuda:",
    "graph @g() {\n  return\n}\n",
};

/// One random edit: a bit flip, an interesting byte or token, a deletion, a duplication, a
/// truncation, a splice with another seed, or a replaced number.
void mutateOnce(Bytes &b, const std::vector<Seed> &corpus, Rng &rng) {
  auto token = [&] {
    const char *t = kTokens[rng.below(std::size(kTokens))];
    return Bytes(t, t + std::strlen(t));
  };
  switch (rng.below(8)) {
  case 0: // flip a bit
    if (!b.empty())
      b[rng.below(b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
    break;
  case 1: // overwrite a byte
    if (!b.empty())
      b[rng.below(b.size())] = static_cast<uint8_t>(rng.next());
    break;
  case 2: { // insert a token
    Bytes t = token();
    b.insert(b.begin() + static_cast<ptrdiff_t>(rng.below(b.size() + 1)), t.begin(), t.end());
    break;
  }
  case 3: { // delete a range
    size_t at = rng.below(b.size() + 1), n = std::min(b.size() - at, rng.below(64) + 1);
    b.erase(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at + n));
    break;
  }
  case 4: { // duplicate a range
    size_t at = rng.below(b.size() + 1), n = std::min(b.size() - at, rng.below(64) + 1);
    Bytes copy(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at + n));
    b.insert(b.begin() + static_cast<ptrdiff_t>(rng.below(b.size() + 1)), copy.begin(), copy.end());
    break;
  }
  case 5: // truncate
    b.resize(rng.below(b.size() + 1));
    break;
  case 6: { // splice: this seed's head, another's tail
    const Bytes &other = corpus[rng.below(corpus.size())].bytes;
    size_t cut = rng.below(b.size() + 1), from = rng.below(other.size() + 1);
    b.resize(cut);
    b.insert(b.end(), other.begin() + static_cast<ptrdiff_t>(from), other.end());
    break;
  }
  default: { // replace a run of digits with an interesting number
    std::vector<size_t> starts;
    for (size_t i = 0; i < b.size(); ++i)
      if (std::isdigit(b[i]) && (i == 0 || !std::isdigit(b[i - 1])))
        starts.push_back(i);
    if (starts.empty())
      break;
    size_t at = starts[rng.below(starts.size())], end = at;
    while (end < b.size() && std::isdigit(b[end]))
      ++end;
    Bytes t = token();
    b.erase(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(end));
    b.insert(b.begin() + static_cast<ptrdiff_t>(at), t.begin(), t.end());
  }
  }
}

/// `perSeed` inputs per seed, each 1 to 4 stacked edits away from it.
template <typename Fn>
void forEachMutation(const std::vector<Seed> &corpus, int perSeed, uint64_t seed, Fn &&fn) {
  Rng rng(seed);
  for (const Seed &s : corpus)
    for (int i = 0; i < perSeed; ++i) {
      Bytes b = s.bytes;
      for (size_t k = 0, n = rng.below(4) + 1; k < n; ++k)
        mutateOnce(b, corpus, rng);
      fn(b);
    }
}

bool kirParses(const Bytes &b) {
  try {
    kiln::ir::parseModule(std::string_view(reinterpret_cast<const char *>(b.data()), b.size()));
    return true;
  } catch (const kiln::ir::DiagnosticError &) {
    return false;
  }
}

bool safeTensorsParses(const Bytes &b) {
  try {
    kiln::aot::SafeTensorsView::parse({reinterpret_cast<const std::byte *>(b.data()), b.size()},
                                      "seed");
    return true;
  } catch (const kiln::aot::SafeTensorsError &) {
    return false;
  }
}

} // namespace

TEST_CASE("kir seeds: good ones parse, bad ones are rejected, all pass the target", "[fuzz]") {
  auto corpus = loadCorpus("kir");
  REQUIRE(corpus.size() >= 10);
  for (const Seed &s : corpus) {
    INFO(s.name);
    CHECK(kirParses(s.bytes) == !s.bad());
    CHECK(kilnFuzzKirParser(s.bytes.data(), s.bytes.size()) == 0);
  }
}

TEST_CASE("safetensors seeds: good ones parse, bad ones are rejected, all pass the target",
          "[fuzz]") {
  auto corpus = loadCorpus("safetensors");
  REQUIRE(corpus.size() >= 10);
  for (const Seed &s : corpus) {
    INFO(s.name);
    CHECK(safeTensorsParses(s.bytes) == !s.bad());
    CHECK(kilnFuzzSafeTensors(s.bytes.data(), s.bytes.size()) == 0);
  }
}

TEST_CASE("regression: sizes whose product overflows are a parse error, not a crash", "[fuzz]") {
  std::string text = "graph @f(%x: f32[9223372036854775807, 2]) {\n  return %x\n}\n";
  try {
    kiln::ir::parseModule(text, "t.kir");
    FAIL("parsed");
  } catch (const kiln::ir::DiagnosticError &e) {
    CHECK(std::string(e.what()).find("t.kir:1:14: error: the sizes of this tensor type: "
                                     "symbolic int arithmetic overflows int64") == 0);
  }
}

TEST_CASE("regression: negating INT64_MIN is a parse error, not a crash", "[fuzz]") {
  std::string text = "graph @f(%x: f32[--9223372036854775808]) {\n  return %x\n}\n";
  try {
    kiln::ir::parseModule(text, "t.kir");
    FAIL("parsed");
  } catch (const kiln::ir::DiagnosticError &e) {
    CHECK(std::string(e.what()).find("t.kir:1:18: error: symbolic int arithmetic overflows") == 0);
  }
}

TEST_CASE("regression: 'return' cannot be written as an op with results", "[fuzz]") {
  std::string text = "graph @f(%x: f32[2]) {\n  %0 = return(%x) : f32[2]\n  return %x\n}\n";
  try {
    kiln::ir::parseModule(text, "t.kir");
    FAIL("parsed");
  } catch (const kiln::ir::DiagnosticError &e) {
    CHECK(std::string(e.what()) ==
          "t.kir:2:8: error: 'return' ends the graph body and defines no values");
  }
}

TEST_CASE("mutated kir seeds never crash the parser or break the round trip", "[fuzz]") {
  auto corpus = loadCorpus("kir");
  int accepted = 0, total = 0;
  forEachMutation(corpus, 250, 0x6b69726b, [&](const Bytes &b) {
    ++total;
    accepted += kirParses(b);
    REQUIRE(kilnFuzzKirParser(b.data(), b.size()) == 0);
  });
  // The mutations must reach past the parser's first error, and must break it too.
  CHECK(accepted > total / 20);
  CHECK(accepted < total);
}

TEST_CASE("mutated safetensors seeds never crash the reader", "[fuzz]") {
  auto corpus = loadCorpus("safetensors");
  int accepted = 0, total = 0;
  forEachMutation(corpus, 200, 0x73616665, [&](const Bytes &b) {
    ++total;
    accepted += safeTensorsParses(b);
    REQUIRE(kilnFuzzSafeTensors(b.data(), b.size()) == 0);
  });
  CHECK(accepted > 0);
  CHECK(accepted < total);
  // The header size field and the offsets get their own targeted edits: random and boundary
  // values in the first 8 bytes.
  Rng rng(7);
  for (const Seed &s : corpus) {
    if (s.bytes.size() < 8)
      continue;
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{7}, s.bytes.size() - 8,
                       s.bytes.size() - 7, uint64_t{100'000'000}, uint64_t{100'000'001},
                       ~uint64_t{0}, rng.next(), rng.next() % 256}) {
      Bytes b = s.bytes;
      std::memcpy(b.data(), &v, 8);
      CHECK(kilnFuzzSafeTensors(b.data(), b.size()) == 0);
    }
  }
}
