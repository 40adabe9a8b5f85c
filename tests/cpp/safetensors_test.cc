#include "aot/safetensors.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

#include <fmt/format.h>
#include <kiln_catch.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace kiln;
using namespace kiln::aot;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::byte>;

/// A safetensors file from its header text and data bytes, as any writer would lay it out.
Bytes makeFile(const std::string &header, const Bytes &data = {}) {
  Bytes out(8);
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  for (char c : header)
    out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes zeros(size_t n) { return Bytes(n, std::byte{0}); }

/// A fresh folder under the test's temporary directory.
fs::path tempDir(const std::string &name) {
  const char *base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Bytes readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

/// A contiguous tensor of `dtype` whose bytes follow a fixed pattern (0/1 for bool).
Tensor patterned(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto *p = reinterpret_cast<uint8_t *>(t.rawData());
  size_t n = static_cast<size_t>(t.numel() * t.itemsize());
  for (size_t i = 0; i < n; ++i)
    p[i] = dtype == DType::Bool ? static_cast<uint8_t>((i + seed) % 3 == 0)
                                : static_cast<uint8_t>(i * 37 + seed * 11 + 5);
  return t;
}

bool sameBytes(const Tensor &a, const Tensor &b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes())
    return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(ca.numel() * ca.itemsize());
  return n == 0 || std::memcmp(ca.rawData(), cb.rawData(), n) == 0;
}

/// Parses `file` expecting a SafeTensorsError at byte `offset` whose message contains `text`.
void expectError(const Bytes &file, uint64_t offset, const std::string &text) {
  INFO("expecting '" << text << "' at byte " << offset);
  try {
    SafeTensorsView::parse(file, "w.safetensors");
    FAIL("parsed without error");
  } catch (const SafeTensorsError &e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(e.offset() == offset);
    CHECK(e.kind() == ErrorKind::Value);
    CHECK(msg.find("w.safetensors: byte " + std::to_string(offset) + ": ") == 0);
    CHECK(msg.find(text) != std::string::npos);
  }
}

/// Byte offset in the file of the first occurrence of `needle` in `header`.
uint64_t at(const std::string &header, const std::string &needle) {
  auto pos = header.find(needle);
  REQUIRE(pos != std::string::npos);
  return 8 + pos;
}

} // namespace

TEST_CASE("every dtype round-trips through a file, incl. 0-d and empty tensors", "[safetensors]") {
  fs::path dir = tempDir("roundtrip");
  std::vector<std::pair<std::string, Tensor>> tensors;
  int seed = 0;
  for (DType dt : {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                   DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    std::string name(dtypeName(dt));
    tensors.emplace_back(name + ".m", patterned(dt, {3, 5}, ++seed));
    tensors.emplace_back(name + ".scalar", patterned(dt, {}, ++seed));
    tensors.emplace_back(name + ".empty", patterned(dt, {0, 4}, ++seed));
  }
  std::map<std::string, std::string> meta = {{"format", "kiln"}, {"note", "ünïcode \"q\""}};
  writeSafeTensors((dir / "w.safetensors").string(), tensors, meta);

  auto file = SafeTensorsFile::open((dir / "w.safetensors").string());
  const auto &view = file->view();
  REQUIRE(view.tensors().size() == tensors.size());
  CHECK(view.metadata() == meta);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto &[name, t] = tensors[i];
    INFO(name);
    CHECK(view.tensors()[i].name == name); // the header keeps the written order
    const SafeTensorInfo *info = view.find(name);
    REQUIRE(info);
    CHECK(info->dtype == t.dtype());
    CHECK(info->shape == t.sizes());
    // The writer aligns every tensor, so reading borrows the mapping.
    CHECK(info->begin % t.itemsize() == 0);
    Tensor r = file->tensor(name);
    CHECK(r.isContiguous());
    CHECK(sameBytes(r, t));
    if (t.numel() > 0)
      CHECK(static_cast<const void *>(r.rawData()) ==
            static_cast<const void *>(view.bytes(*info).data()));
  }
  CHECK(view.find("nope") == nullptr);
  CHECK_THROWS_WITH(file->tensor("nope"), Catch::Contains("has no tensor 'nope'"));
  // Nothing but the final file is left in the folder.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
}

TEST_CASE("non-contiguous inputs are written contiguous", "[safetensors]") {
  fs::path dir = tempDir("noncontig");
  Tensor base = Tensor::empty({4, 6}, DType::Float32);
  for (int i = 0; i < 24; ++i)
    base.data<float>()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  Tensor t = base.transpose(0, 1);                          // strides [1, 6]
  Tensor s = base.slice(1, 1, 5, 2);                        // offset 1, strides [6, 2]
  Tensor e = base.select(0, 2).unsqueeze(0).expand({3, 6}); // stride 0
  writeSafeTensors((dir / "v.safetensors").string(), {{"t", t}, {"s", s}, {"e", e}});
  auto file = SafeTensorsFile::open((dir / "v.safetensors").string());
  for (auto [name, ref] : {std::pair<std::string, Tensor>{"t", t}, {"s", s}, {"e", e}}) {
    INFO(name);
    Tensor r = file->tensor(name);
    CHECK(r.sizes() == ref.sizes());
    CHECK(r.strides() == contiguousStrides(ref.sizes()));
    CHECK(sameBytes(r, ref));
  }
}

TEST_CASE("tensors keep the mapping alive after the file handle is gone", "[safetensors]") {
  fs::path dir = tempDir("keepalive");
  Tensor t = patterned(DType::Int32, {100}, 7);
  writeSafeTensors((dir / "k.safetensors").string(), {{"x", t}});
  Tensor r = SafeTensorsFile::open((dir / "k.safetensors").string())->tensor("x");
  CHECK(sameBytes(r, t));
  // Writes through a mapped tensor stay private to the process.
  Tensor w = SafeTensorsFile::open((dir / "k.safetensors").string())->tensor("x");
  w.fill_(Scalar(int64_t{42}));
  CHECK(sameBytes(r, t));
  CHECK(sameBytes(SafeTensorsFile::open((dir / "k.safetensors").string())->tensor("x"), t));
  // Overwriting the path replaces the file atomically; the old mapping stays valid.
  writeSafeTensors((dir / "k.safetensors").string(), {{"y", patterned(DType::Int32, {1}, 1)}});
  CHECK(sameBytes(r, t));
  CHECK(SafeTensorsFile::open((dir / "k.safetensors").string())->view().find("x") == nullptr);
}

TEST_CASE("a file in the layout of the reference Python writer", "[safetensors]") {
  // Byte for byte what `safetensors.torch.save_file({"weight": w, "bias": b, "steps": s},
  // metadata={"format": "pt"})` writes for w = [[1, 2], [3, 4]] (F32), b = [0.5, -2] (F16) and
  // s = 7 (I64, 0-d): metadata first, tensors ordered by alignment then name, the header padded
  // with spaces to a multiple of 8.
  std::string header = R"({"__metadata__":{"format":"pt"},"steps":{"dtype":"I64","shape":[],)"
                       R"("data_offsets":[0,8]},"weight":{"dtype":"F32","shape":[2,2],)"
                       R"("data_offsets":[8,24]},"bias":{"dtype":"F16","shape":[2],)"
                       R"("data_offsets":[24,28]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  REQUIRE(header.size() % 8 == 0);
  Bytes data;
  auto put = [&](const void *p, size_t n) {
    auto *b = static_cast<const std::byte *>(p);
    data.insert(data.end(), b, b + n);
  };
  int64_t steps = 7;
  float weight[] = {1, 2, 3, 4};
  uint16_t bias[] = {0x3800, 0xc000}; // 0.5, -2.0 in IEEE half
  put(&steps, 8);
  put(weight, 16);
  put(bias, 4);
  // An 8-aligned buffer stands in for a mapped file.
  Bytes file = makeFile(header, data);
  std::vector<uint64_t> storage((file.size() + 7) / 8);
  std::memcpy(storage.data(), file.data(), file.size());
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte *>(storage.data()),
                                   file.size());
  auto view = SafeTensorsView::parse(bytes, "embedded weights");
  REQUIRE(view.tensors().size() == 3);
  CHECK(view.tensors()[0].name == "steps");
  CHECK(view.tensors()[1].name == "weight");
  CHECK(view.tensors()[2].name == "bias");
  CHECK(view.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(view.dataOffset() == 8 + header.size());
  CHECK(view.find("weight")->begin == view.dataOffset() + 8);

  Tensor w = view.tensor(*view.find("weight"), nullptr);
  CHECK(w.sizes() == Shape{2, 2});
  CHECK(w.data<float>()[3] == 4.0f);
  CHECK(w.to(DType::Float64).data<double>()[1] == 2.0);
  Tensor b = view.tensor(*view.find("bias"), nullptr);
  CHECK(b.dtype() == DType::Float16);
  Tensor bf = b.to(DType::Float32);
  CHECK(bf.data<float>()[0] == 0.5f);
  CHECK(bf.data<float>()[1] == -2.0f);
  Tensor s = view.tensor(*view.find("steps"), nullptr);
  CHECK(s.dim() == 0);
  CHECK(s.item().toInt() == 7);
}

TEST_CASE("unaligned tensor data is copied, aligned data is borrowed", "[safetensors]") {
  // F32 data starting at an odd data offset: legal in the format, but not loadable in place.
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  Bytes data = {std::byte{9}};
  float vals[] = {1.5f, -7.25f};
  auto *vb = reinterpret_cast<const std::byte *>(vals);
  data.insert(data.end(), vb, vb + 8);
  Bytes file = makeFile(header, data);
  for (size_t shift : {0, 1, 2, 3}) {
    INFO("buffer shifted by " << shift);
    std::vector<uint64_t> storage(file.size() / 8 + 2);
    auto *base = reinterpret_cast<std::byte *>(storage.data()) + shift;
    std::memcpy(base, file.data(), file.size());
    auto view = SafeTensorsView::parse({base, file.size()}, "embedded weights");
    const SafeTensorInfo &b = *view.find("b");
    Tensor t = view.tensor(b, nullptr);
    CHECK(t.data<float>()[0] == 1.5f);
    CHECK(t.data<float>()[1] == -7.25f);
    CHECK(reinterpret_cast<uintptr_t>(t.rawData()) % 4 == 0);
    bool aligned = reinterpret_cast<uintptr_t>(base + b.begin) % 4 == 0;
    CHECK((t.rawData() == reinterpret_cast<const char *>(base + b.begin)) == aligned);
  }
}

TEST_CASE("a keepAlive handle lives exactly as long as the tensors", "[safetensors]") {
  Bytes file = makeFile(R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})",
                        {std::byte{1}, std::byte{2}, std::byte{3}});
  auto owner = std::make_shared<Bytes>(file);
  std::weak_ptr<Bytes> weak = owner;
  auto view = SafeTensorsView::parse(*owner, "embedded weights");
  Tensor t = view.tensor(view.tensors()[0], owner);
  SafeTensorInfo foreign{"y", DType::UInt8, {1000}, 0, 1000};
  CHECK_THROWS_WITH(view.tensor(foreign, nullptr),
                    Catch::Contains("'y' is not an entry of embedded weights"));
  owner.reset();
  CHECK(!weak.expired());
  CHECK(t.data<uint8_t>()[2] == 3);
  t = Tensor();
  CHECK(weak.expired()); // `view` now points at freed memory and must not be used again
}

TEST_CASE("empty files and files with only metadata", "[safetensors]") {
  Bytes empty = makeFile("{}"), padded = makeFile(R"({"__metadata__": {}}   )");
  auto v = SafeTensorsView::parse(empty, "e");
  CHECK(v.tensors().empty());
  CHECK(v.metadata().empty());
  v = SafeTensorsView::parse(padded, "e");
  CHECK(v.tensors().empty());
  fs::path dir = tempDir("empty");
  writeSafeTensors((dir / "e.safetensors").string(), {}, {{"k", "v"}});
  auto f = SafeTensorsFile::open((dir / "e.safetensors").string());
  CHECK(f->view().tensors().empty());
  CHECK(f->view().metadata().at("k") == "v");
  Bytes raw = readFile(dir / "e.safetensors");
  CHECK((raw.size() - 8) % 8 == 0); // header padded so data starts 8-aligned
}

TEST_CASE("file-level errors: size field, header size, JSON", "[safetensors][errors]") {
  expectError(Bytes(5, std::byte{0}), 0, "5 bytes long, shorter than its 8-byte header size");
  expectError({}, 0, "0 bytes long");
  Bytes past = makeFile("{}");
  past[0] = std::byte{100};
  expectError(past, 0, "header size 100 runs past the end of the file (10 bytes)");
  Bytes huge = makeFile("{}");
  huge[5] = std::byte{1}; // 2^40 + 2
  expectError(huge, 0, "header size 1099511627778 exceeds the limit of 100000000 bytes");

  // nlohmann's position of the offending byte, shifted past the size field.
  expectError(makeFile(R"({"a": })"), 8 + 6, "invalid JSON in the header");
  expectError(makeFile(R"({"a": {"dtype": "F32",)"), 8 + 22, "invalid JSON");
  expectError(makeFile("{\"a\xff\": 1}"), 8 + 3, "invalid JSON"); // not UTF-8
  expectError(makeFile(""), 8, "invalid JSON");
  expectError(makeFile(std::string("{}\0{\"a\": 1}", 10)), 8 + 2, "a NUL byte");
  // Out-of-range numbers have no position in nlohmann's report: the header start stands in.
  expectError(makeFile(R"({"a": {"shape": [1e999]}})"), 8,
              "invalid JSON in the header: number overflow parsing '1e999'");
  expectError(makeFile("[1, 2]"), 8, "the header is a JSON array, expected an object");
  std::string deep = R"({"a": )" + std::string(20, '[') + std::string(20, ']') + "}";
  expectError(makeFile(deep), 8 + 6 + 15, "nests deeper than 16 levels");
}

TEST_CASE("entry errors name the tensor and point at its key", "[safetensors][errors]") {
  auto entry = [](const std::string &body) {
    return R"({"ok": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "bad": )" + body + "}";
  };
  auto check = [&](const std::string &body, const std::string &text, size_t dataSize = 1) {
    std::string h = entry(body);
    expectError(makeFile(h, zeros(dataSize)), at(h, "\"bad\""), "tensor 'bad': " + text);
  };
  check("3", "the entry is a JSON number, expected an object");
  check("[]", "the entry is a JSON array, expected an object");
  check(R"({"shape": [1], "data_offsets": [1, 2]})", "missing field 'dtype'");
  check(R"({"dtype": 4, "shape": [1], "data_offsets": [1, 2]})",
        "'dtype' is a JSON number, expected a string");
  check(R"({"dtype": "F8_E4M3", "shape": [1], "data_offsets": [1, 2]})",
        "unsupported dtype 'F8_E4M3'");
  check(R"({"dtype": "U8", "data_offsets": [1, 2]})", "missing field 'shape'");
  check(R"({"dtype": "U8", "shape": 2, "data_offsets": [1, 3]})",
        "'shape' is a JSON number, expected an array");
  check(R"({"dtype": "U8", "shape": [2, -1], "data_offsets": [1, 3]})",
        "shape[1] is a negative integer -1, expected a non-negative integer");
  check(R"({"dtype": "U8", "shape": [2.5], "data_offsets": [1, 3]})",
        "shape[0] is a non-integer number 2.5");
  check(R"({"dtype": "U8", "shape": ["2"], "data_offsets": [1, 3]})", "shape[0] is a string");
  check(R"({"dtype": "U8", "shape": [9223372036854775808], "data_offsets": [1, 3]})",
        "shape[0] is a number");
  check(R"({"dtype": "F64", "shape": [4294967296, 4294967296, 4], "data_offsets": [1, 3]})",
        "shape [4294967296,4294967296,4] has too many elements");
  // 2^62 elements fit in int64, their 2^65 bytes do not.
  check(R"({"dtype": "F64", "shape": [4294967296, 1073741824], "data_offsets": [1, 3]})",
        "shape [4294967296,1073741824] has too many elements");
  check(R"({"dtype": "U8", "shape": [1]})", "missing field 'data_offsets'");
  check(R"({"dtype": "U8", "shape": [1], "data_offsets": [1]})",
        "'data_offsets' is [1], expected an array [begin, end]");
  check(R"({"dtype": "U8", "shape": [1], "data_offsets": {"a": 1}})",
        "'data_offsets' is {\"a\":1}, expected an array");
  check(R"({"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]})",
        "'data_offsets' [-1,0] are not non-negative integers");
  check(R"({"dtype": "U8", "shape": [0], "data_offsets": [2, 1]})",
        "'data_offsets' [2, 1] end before they begin", 2);
  check(R"({"dtype": "U8", "shape": [99], "data_offsets": [1, 100]})",
        "'data_offsets' [1, 100] run past the end of the data section (4 bytes)", 4);
  check(R"({"dtype": "I32", "shape": [2, 3], "data_offsets": [1, 21]})",
        "'data_offsets' [1, 21] hold 20 bytes, but I32 [2,3] needs 24", 21);
}

TEST_CASE("the data section must be covered exactly", "[safetensors][errors]") {
  auto two = [](int b0, int e0, int b1, int e1) {
    return fmt::format(R"({{"a": {{"dtype": "F32", "shape": [2], "data_offsets": [{}, {}]}}, )"
                       R"("b": {{"dtype": "F32", "shape": [2], "data_offsets": [{}, {}]}}}})",
                       b0, e0, b1, e1);
  };
  std::string h = two(0, 8, 4, 12);
  expectError(makeFile(h, zeros(12)), 8 + h.size() + 4, "tensor 'b' overlaps tensor 'a'");
  h = two(0, 8, 0, 8);
  expectError(makeFile(h, zeros(8)), 8 + h.size(), "tensor 'b' overlaps tensor 'a'");
  h = two(0, 8, 12, 20);
  expectError(makeFile(h, zeros(20)), 8 + h.size() + 8,
              "4 unused bytes before tensor 'b' (the data section must be covered exactly)");
  h = two(4, 12, 12, 20);
  expectError(makeFile(h, zeros(20)), 8 + h.size(), "4 unused bytes before tensor 'a'");
  h = two(0, 8, 8, 16);
  expectError(makeFile(h, zeros(19)), 8 + h.size() + 16, "3 unused bytes after the last tensor");
  CHECK(SafeTensorsView::parse(makeFile(h, zeros(16)), "ok").tensors().size() == 2);
  // Listed out of data order is fine: coverage is about offsets, not header order.
  h = two(8, 16, 0, 8);
  CHECK(SafeTensorsView::parse(makeFile(h, zeros(16)), "ok").tensors()[0].name == "a");
  expectError(makeFile("{}", zeros(2)), 8 + 2, "2 unused bytes after the last tensor");
}

TEST_CASE("names, metadata and bool data are validated", "[safetensors][errors]") {
  std::string h = R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, )"
                  R"("a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})";
  expectError(makeFile(h, zeros(2)),
              at(h, R"("a": {"dtype": "U8", "shape": [1], "data_offsets": [1)"),
              "duplicate tensor name 'a'");
  // Escaped spellings of the same name are the same name.
  h = R"({"\u0061": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}, )"
      R"("a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})";
  expectError(makeFile(h), at(h, R"("a")"), "duplicate tensor name 'a'");
  h = R"({"__metadata__": {"format": "pt", "n": 3}})";
  expectError(makeFile(h), 9, "__metadata__ value of 'n' is a JSON number, expected a string");
  h = R"({"x": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}, "__metadata__": [1]})";
  expectError(makeFile(h), at(h, "\"__metadata__\""),
              "__metadata__ is a JSON array, expected an object");
  h = R"({"__metadata__": {"a": null}})";
  expectError(makeFile(h), 9, "value of 'a' is a JSON null");
  h = R"({"m": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}})";
  expectError(makeFile(h, {std::byte{0}, std::byte{1}, std::byte{2}, std::byte{0}}),
              8 + h.size() + 2, "tensor 'm': BOOL byte 2 is not 0 or 1");
}

TEST_CASE("opening and writing report I/O errors", "[safetensors][errors]") {
  fs::path dir = tempDir("io");
  CHECK_THROWS_WITH(SafeTensorsFile::open((dir / "missing.safetensors").string()),
                    Catch::Contains("cannot open weights file") &&
                        Catch::Contains("missing.safetensors"));
  CHECK_THROWS_WITH(SafeTensorsFile::open(dir.string()), Catch::Contains("not a regular file"));
  std::ofstream((dir / "short.safetensors").string()) << "abc";
  try {
    SafeTensorsFile::open((dir / "short.safetensors").string());
    FAIL("opened a 3-byte file");
  } catch (const SafeTensorsError &e) {
    CHECK(e.source() == (dir / "short.safetensors").string());
    CHECK(e.offset() == 0);
  }
  std::ofstream((dir / "empty.safetensors").string());
  CHECK_THROWS_AS(SafeTensorsFile::open((dir / "empty.safetensors").string()), SafeTensorsError);

  Tensor t = patterned(DType::Float32, {2}, 1);
  CHECK_THROWS_WITH(writeSafeTensors((dir / "no/such/dir/w.safetensors").string(), {{"t", t}}),
                    Catch::Contains("cannot create"));
  CHECK_THROWS_WITH(writeSafeTensors((dir / "d.safetensors").string(), {{"t", t}, {"t", t}}),
                    Catch::Contains("duplicate tensor name 't'"));
  CHECK_THROWS_WITH(writeSafeTensors((dir / "d.safetensors").string(), {{"__metadata__", t}}),
                    Catch::Contains("reserved"));
  CHECK_THROWS_WITH(writeSafeTensors((dir / "d.safetensors").string(), {{"bad\xff", t}}),
                    Catch::Contains("must be UTF-8"));
  // Failed writes leave nothing behind.
  CHECK(!fs::exists(dir / "d.safetensors"));
  for (const auto &e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}
