#include "aot/safetensors.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln::aot {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

using Json = nlohmann::json;

/// Headers larger than this are rejected before any allocation: real headers are kilobytes, and
/// the limit keeps a corrupt size field from reserving gigabytes.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
/// A safetensors header nests three levels (`{name: {shape: [...]}}`); deeper input is garbage,
/// and bounding it keeps the JSON parser's memory proportional to the header size.
constexpr int kMaxDepth = 16;

struct DTypeName {
  const char *name;
  DType dtype;
};
constexpr DTypeName kDTypeNames[] = {
    {"BOOL", DType::Bool},   {"U8", DType::UInt8},      {"I8", DType::Int8},
    {"I16", DType::Int16},   {"I32", DType::Int32},     {"I64", DType::Int64},
    {"F16", DType::Float16}, {"BF16", DType::BFloat16}, {"F32", DType::Float32},
    {"F64", DType::Float64},
};

[[noreturn]] void fail(const std::string &what, uint64_t offset, const std::string &problem) {
  throw SafeTensorsError(what, offset, problem);
}

/// A top-level key of the header: its decoded text and the file offset of its opening quote.
struct HeaderKey {
  std::string name;
  uint64_t offset;
};

/// Finds the top-level keys of the header in the order they are written, with their positions,
/// which nlohmann's object (a sorted map that keeps the last of duplicate keys) loses. Also
/// rejects nesting deeper than kMaxDepth before the JSON parser sees it. Runs on unvalidated
/// text, so it only trusts what it checks: keys are decoded later, after the JSON parsed.
std::vector<std::pair<size_t, size_t>> scanTopLevelKeys(std::string_view text,
                                                        const std::string &what) {
  std::vector<std::pair<size_t, size_t>> keys;
  int depth = 0;
  bool expectKey = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"')
        j += text[j] == '\\' ? 2 : 1;
      if (j >= text.size())
        return keys; // unterminated: the JSON parser reports it
      if (depth == 1 && expectKey) {
        keys.emplace_back(i, j + 1);
        expectKey = false;
      }
      i = j;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth)
        fail(what, 8 + i, fmt::format("the header nests deeper than {} levels", kMaxDepth));
      expectKey = depth == 1 && c == '{';
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expectKey = true;
    }
  }
  return keys;
}

uint64_t readU64LE(const std::byte *p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// A JSON number that is a non-negative integer fitting in int64, or nullopt.
std::optional<uint64_t> asIndex(const Json &j) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v <= static_cast<uint64_t>(INT64_MAX))
      return v;
  }
  return std::nullopt;
}

std::string typeName(const Json &j) {
  if (j.is_number_integer() && !j.is_number_unsigned())
    return fmt::format("negative integer {}", j.get<int64_t>());
  if (j.is_number_float())
    return fmt::format("non-integer number {}", j.dump());
  return j.type_name();
}

SafeTensorInfo parseEntry(const std::string &name, const Json &entry, uint64_t at,
                          uint64_t dataOffset, uint64_t dataSize, const std::string &what) {
  auto bad = [&](const std::string &problem) {
    fail(what, at, fmt::format("tensor '{}': {}", name, problem));
  };
  if (!entry.is_object())
    bad(fmt::format("the entry is a JSON {}, expected an object", entry.type_name()));
  SafeTensorInfo info;
  info.name = name;

  auto dt = entry.find("dtype");
  if (dt == entry.end())
    bad("missing field 'dtype'");
  if (!dt->is_string())
    bad(fmt::format("'dtype' is a JSON {}, expected a string", dt->type_name()));
  const auto &dtName = dt->get_ref<const std::string &>();
  auto known = std::find_if(std::begin(kDTypeNames), std::end(kDTypeNames),
                            [&](const DTypeName &d) { return dtName == d.name; });
  if (known == std::end(kDTypeNames))
    bad(fmt::format("unsupported dtype '{}' (supported: BOOL, U8, I8, I16, I32, I64, F16, BF16, "
                    "F32, F64)",
                    dtName));
  info.dtype = known->dtype;

  auto sh = entry.find("shape");
  if (sh == entry.end())
    bad("missing field 'shape'");
  if (!sh->is_array())
    bad(fmt::format("'shape' is a JSON {}, expected an array", sh->type_name()));
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < sh->size(); ++i) {
    auto d = asIndex((*sh)[i]);
    if (!d)
      bad(fmt::format("shape[{}] is a {}, expected a non-negative integer", i, typeName((*sh)[i])));
    info.shape.push_back(static_cast<int64_t>(*d));
    overflow = overflow || __builtin_mul_overflow(numel, *d, &numel);
  }
  uint64_t nbytes = 0;
  if (overflow || numel > static_cast<uint64_t>(INT64_MAX) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(itemsize(info.dtype)), &nbytes))
    bad(fmt::format("shape {} has too many elements", sh->dump()));

  auto off = entry.find("data_offsets");
  if (off == entry.end())
    bad("missing field 'data_offsets'");
  if (!off->is_array() || off->size() != 2)
    bad(fmt::format("'data_offsets' is {}, expected an array [begin, end]", off->dump()));
  auto begin = asIndex((*off)[0]), end = asIndex((*off)[1]);
  if (!begin || !end)
    bad(fmt::format("'data_offsets' {} are not non-negative integers", off->dump()));
  if (*begin > *end)
    bad(fmt::format("'data_offsets' [{}, {}] end before they begin", *begin, *end));
  if (*end > dataSize)
    bad(fmt::format("'data_offsets' [{}, {}] run past the end of the data section ({} bytes)",
                    *begin, *end, dataSize));
  if (*end - *begin != nbytes)
    bad(fmt::format("'data_offsets' [{}, {}] hold {} bytes, but {} {} needs {}", *begin, *end,
                    *end - *begin, dtName, sh->dump(), nbytes));
  info.begin = dataOffset + *begin;
  info.end = dataOffset + *end;
  return info;
}

/// Checks that the tensors tile the data section exactly, as the format requires: sorted by
/// offset, each starts where the previous one ended, and the last ends at the end of the file.
void checkCoverage(const std::vector<SafeTensorInfo> &tensors, uint64_t dataOffset,
                   uint64_t fileSize, const std::string &what) {
  std::vector<const SafeTensorInfo *> order;
  for (const auto &t : tensors)
    order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const auto *a, const auto *b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t cursor = dataOffset;
  const SafeTensorInfo *prev = nullptr;
  for (const auto *t : order) {
    if (t->begin < cursor)
      fail(what, t->begin,
           fmt::format("tensor '{}' overlaps tensor '{}'", t->name, prev ? prev->name : ""));
    if (t->begin > cursor)
      fail(what, cursor,
           fmt::format("{} unused bytes before tensor '{}' (the data section must be covered "
                       "exactly)",
                       t->begin - cursor, t->name));
    cursor = t->end;
    prev = t;
  }
  if (cursor != fileSize)
    fail(what, cursor, fmt::format("{} unused bytes after the last tensor", fileSize - cursor));
}

} // namespace

SafeTensorsError::SafeTensorsError(std::string what, uint64_t offset, const std::string &problem)
    : Error(ErrorKind::Value, fmt::format("{}: byte {}: {}", what, offset, problem)),
      source_(std::move(what)), offset_(offset) {}

std::string_view safeTensorsDTypeName(DType dtype) {
  for (const auto &d : kDTypeNames)
    if (d.dtype == dtype)
      return d.name;
  return "?";
}

SafeTensorsView SafeTensorsView::parse(std::span<const std::byte> bytes, std::string what) {
  SafeTensorsView view;
  view.bytes_ = bytes;
  view.what_ = std::move(what);
  const std::string &w = view.what_;
  if (bytes.size() < 8)
    fail(w, 0,
         fmt::format("the file is {} bytes long, shorter than its 8-byte header size field",
                     bytes.size()));
  uint64_t headerSize = readU64LE(bytes.data());
  if (headerSize > kMaxHeaderSize)
    fail(w, 0,
         fmt::format("header size {} exceeds the limit of {} bytes", headerSize, kMaxHeaderSize));
  if (headerSize > bytes.size() - 8)
    fail(w, 0,
         fmt::format("header size {} runs past the end of the file ({} bytes)", headerSize,
                     bytes.size()));
  view.dataOffset_ = 8 + headerSize;
  std::string_view text(reinterpret_cast<const char *>(bytes.data()) + 8, headerSize);

  // nlohmann stops at a NUL byte as if the input ended there, which would let anything hide
  // behind one; JSON allows none outside strings and none unescaped inside them.
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    fail(w, 8 + nul, "invalid JSON in the header: a NUL byte");
  auto keyRanges = scanTopLevelKeys(text, w);
  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::parse_error &e) {
    // nlohmann counts the bytes it read; the last one read is the offending one.
    uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
    std::string msg = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: "
    // prefix: the byte offset replaces it.
    if (auto colon = msg.find(": "); colon != std::string::npos)
      msg = msg.substr(colon + 2);
    fail(w, at, "invalid JSON in the header: " + msg);
  } catch (const Json::exception &e) {
    // Numbers out of range (`1e999`) carry no position: point at the header.
    std::string msg = e.what();
    if (auto bracket = msg.find("] "); bracket != std::string::npos)
      msg = msg.substr(bracket + 2);
    fail(w, 8, "invalid JSON in the header: " + msg);
  }
  if (!header.is_object())
    fail(w, 8, fmt::format("the header is a JSON {}, expected an object", header.type_name()));

  std::vector<HeaderKey> keys;
  for (auto [b, e] : keyRanges)
    keys.push_back({Json::parse(text.substr(b, e - b)).get<std::string>(), 8 + b});
  if (keys.size() != header.size()) {
    std::map<std::string, uint64_t> seen;
    for (const auto &k : keys)
      if (!seen.emplace(k.name, k.offset).second)
        fail(w, k.offset, fmt::format("duplicate tensor name '{}'", k.name));
    fail(w, 8, "the header's keys could not be located"); // unreachable for valid JSON
  }

  uint64_t dataSize = bytes.size() - view.dataOffset_;
  for (const auto &key : keys) {
    const Json &entry = header.at(key.name);
    if (key.name == "__metadata__") {
      if (!entry.is_object())
        fail(w, key.offset,
             fmt::format("__metadata__ is a JSON {}, expected an object", entry.type_name()));
      for (const auto &[k, v] : entry.items()) {
        if (!v.is_string())
          fail(w, key.offset,
               fmt::format("__metadata__ value of '{}' is a JSON {}, expected a string", k,
                           v.type_name()));
        view.metadata_.emplace(k, v.get<std::string>());
      }
      continue;
    }
    view.index_.emplace(key.name, view.tensors_.size());
    view.tensors_.push_back(parseEntry(key.name, entry, key.offset, view.dataOffset_, dataSize, w));
  }
  checkCoverage(view.tensors_, view.dataOffset_, bytes.size(), w);

  // A bool byte other than 0 or 1 is undefined behaviour when kernels load it as a C++ bool.
  for (const auto &t : view.tensors_) {
    if (t.dtype != DType::Bool)
      continue;
    for (uint64_t i = t.begin; i < t.end; ++i)
      if (static_cast<uint8_t>(bytes[i]) > 1)
        fail(w, i,
             fmt::format("tensor '{}': BOOL byte {} is not 0 or 1", t.name,
                         static_cast<int>(bytes[i])));
  }
  return view;
}

const SafeTensorInfo *SafeTensorsView::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafeTensorsView::bytes(const SafeTensorInfo &info) const {
  return bytes_.subspan(info.begin, info.end - info.begin);
}

Tensor SafeTensorsView::tensor(const SafeTensorInfo &info,
                               std::shared_ptr<const void> keepAlive) const {
  KILN_CHECK(info.begin <= info.end && info.end <= bytes_.size(),
             "SafeTensorsView::tensor: '{}' is not an entry of {}", info.name, what_);
  auto data = bytes(info);
  auto *ptr = const_cast<std::byte *>(data.data());
  std::shared_ptr<Storage> storage;
  if (reinterpret_cast<uintptr_t>(ptr) % itemsize(info.dtype) == 0) {
    storage = Storage::borrow(ptr, data.size(), Device{}, [keep = std::move(keepAlive)] {});
  } else {
    storage = Storage::allocate(data.size());
    if (!data.empty())
      std::memcpy(storage->data(), ptr, data.size());
  }
  return Tensor::fromStorage(std::move(storage), info.dtype, info.shape,
                             contiguousStrides(info.shape), 0);
}

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::string &path) {
  std::shared_ptr<SafeTensorsFile> file(new SafeTensorsFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    kiln::fail(ErrorKind::Runtime, "cannot open weights file '{}': {}", path, std::strerror(errno));
  struct stat st{};
  bool statted = ::fstat(fd, &st) == 0;
  int err = errno;
  if (!statted || !S_ISREG(st.st_mode)) {
    ::close(fd);
    kiln::fail(ErrorKind::Runtime, "cannot read weights file '{}': {}", path,
               statted ? "not a regular file" : std::strerror(err));
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    // Private and writable: a kernel that writes into a weight by mistake changes this
    // process's copy of the page instead of faulting, and never the file.
    void *map = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    err = errno;
    ::close(fd);
    if (map == MAP_FAILED)
      kiln::fail(ErrorKind::Runtime, "cannot map weights file '{}': {}", path, std::strerror(err));
    file->map_ = map;
  } else {
    ::close(fd);
  }
  file->view_ =
      SafeTensorsView::parse({static_cast<const std::byte *>(file->map_), file->size_}, path);
  return file;
}

SafeTensorsFile::~SafeTensorsFile() {
  if (map_)
    ::munmap(map_, size_);
}

Tensor SafeTensorsFile::tensor(std::string_view name) const {
  const SafeTensorInfo *info = view_.find(name);
  if (!info)
    kiln::fail(ErrorKind::Value, "weights file '{}' has no tensor '{}'", path_, name);
  return view_.tensor(*info, shared_from_this());
}

namespace {

/// A file descriptor closed (and its temporary file removed, unless committed) on scope exit.
class TempFile {
public:
  explicit TempFile(const std::string &path) {
    static std::atomic<uint64_t> counter{0};
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      tmp_ = fmt::format("{}.{}.tmp.{}.{}", dir, base, ::getpid(), counter++);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0 || errno != EEXIST)
        break;
    }
    if (fd_ < 0)
      kiln::fail(ErrorKind::Runtime, "cannot create '{}': {}", tmp_, std::strerror(errno));
    path_ = path;
    dir_ = dir.empty() ? "." : dir;
  }
  ~TempFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_)
      ::unlink(tmp_.c_str());
  }
  void write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        kiln::fail(ErrorKind::Runtime, "cannot write '{}': {}", tmp_, std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  /// Flushes the data to disk, then renames the file over the destination and flushes the
  /// folder, so a crash leaves either the old file or the complete new one.
  void commit() {
    if (::fsync(fd_) != 0)
      kiln::fail(ErrorKind::Runtime, "cannot flush '{}': {}", tmp_, std::strerror(errno));
    if (::close(fd_) != 0) {
      fd_ = -1;
      kiln::fail(ErrorKind::Runtime, "cannot close '{}': {}", tmp_, std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      kiln::fail(ErrorKind::Runtime, "cannot rename '{}' to '{}': {}", tmp_, path_,
                 std::strerror(errno));
    committed_ = true;
    int dirFd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
      ::fsync(dirFd);
      ::close(dirFd);
    }
  }

private:
  std::string path_, tmp_, dir_;
  int fd_ = -1;
  bool committed_ = false;
};

} // namespace

void writeSafeTensors(const std::string &path,
                      const std::vector<std::pair<std::string, Tensor>> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  // Data goes in order of decreasing element size (stable), so with an 8-aligned data section
  // every tensor starts aligned to its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors[a].second.itemsize() > tensors[b].second.itemsize();
  });
  std::vector<Tensor> data(tensors.size());
  std::vector<std::pair<uint64_t, uint64_t>> offsets(tensors.size());
  uint64_t cursor = 0;
  for (size_t i : order) {
    const auto &[name, t] = tensors[i];
    KILN_CHECK_KIND(Value, t.defined(), "writeSafeTensors: tensor '{}' is undefined", name);
    KILN_CHECK_KIND(Value, t.device().type == DeviceType::CPU,
                    "writeSafeTensors: tensor '{}' is on {}, expected the CPU", name,
                    t.device().str());
    data[i] = t.contiguous();
    uint64_t n = static_cast<uint64_t>(t.numel() * t.itemsize());
    offsets[i] = {cursor, cursor + n};
    cursor += n;
  }

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto &[name, t] = tensors[i];
    KILN_CHECK_KIND(Value, name != "__metadata__",
                    "writeSafeTensors: '__metadata__' is reserved and cannot name a tensor");
    KILN_CHECK_KIND(Value, !header.contains(name), "writeSafeTensors: duplicate tensor name '{}'",
                    name);
    header[name] = {{"dtype", std::string(safeTensorsDTypeName(t.dtype()))},
                    {"shape", t.sizes()},
                    {"data_offsets", {offsets[i].first, offsets[i].second}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error &e) {
    kiln::fail(ErrorKind::Value, "writeSafeTensors: names and metadata must be UTF-8: {}",
               e.what());
  }
  // Spaces after the JSON are allowed by the format and pad the data section to 8 bytes.
  text.append((8 - text.size() % 8) % 8, ' ');

  TempFile out(path);
  uint8_t size[8];
  uint64_t n = text.size();
  std::memcpy(size, &n, 8);
  out.write(size, 8);
  out.write(text.data(), text.size());
  for (size_t i : order)
    out.write(data[i].rawData(), offsets[i].second - offsets[i].first);
  out.commit();
}

} // namespace kiln::aot
