#pragma once
/// The safetensors weights format (https://github.com/huggingface/safetensors): reading files
/// without copying their data, and writing them atomically.
///
/// Layout: an 8-byte little-endian header size N, N bytes of UTF-8 JSON
/// `{"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
/// "__metadata__": {"key": "value"}}`, then the data section; `data_offsets` are relative to the
/// first byte after the header. Exported programs keep their weights in this format so that
/// Python tools and the C++ runtime share one file, and so that loading maps the file instead of
/// reading it.
///
/// Reading trusts nothing in the file: every size, offset and type is checked before any byte of
/// data is touched, and every problem is a SafeTensorsError naming the file and the byte offset
/// it was found at.

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::aot {

/// A malformed safetensors file. The message reads `WHAT: byte OFFSET: problem`; `offset()` is
/// the byte of the file the problem was found at (0 for problems of the file as a whole).
class SafeTensorsError : public Error {
public:
  SafeTensorsError(std::string what, uint64_t offset, const std::string &problem);
  uint64_t offset() const { return offset_; }
  /// The file path (or "embedded weights") the error is about.
  const std::string &source() const { return source_; }

private:
  std::string source_;
  uint64_t offset_;
};

/// One tensor of a safetensors file: its dtype, shape and bytes inside the file's buffer.
/// `begin` and `end` are absolute offsets from the start of the buffer (header included), so
/// `bytes.subspan(begin, end - begin)` is the tensor's data.
struct SafeTensorInfo {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// The safetensors dtype name of `dtype` ("F32", "BF16", "BOOL", ...).
std::string_view safeTensorsDTypeName(DType dtype);

/// A parsed safetensors file over memory it does not own (a mapped file, an embedded array).
/// The memory must outlive the view; tensors made by `tensor()` keep it alive through their
/// `keepAlive` argument instead.
class SafeTensorsView {
public:
  /// Validates the whole file: the header size, the JSON, every entry's fields, that the data
  /// section is covered exactly (no overlaps, holes or trailing bytes), unique names, string
  /// metadata values, and that BOOL data holds only 0 and 1. Throws SafeTensorsError naming
  /// `what` (the file path or "embedded weights") and the byte offset of the problem.
  static SafeTensorsView parse(std::span<const std::byte> bytes, std::string what);

  /// The tensors in the order the header lists them.
  const std::vector<SafeTensorInfo> &tensors() const { return tensors_; }
  /// The tensor called `name`, or null.
  const SafeTensorInfo *find(std::string_view name) const;
  /// The `__metadata__` map (empty when the file has none).
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  /// The raw bytes of one tensor (little-endian, row-major).
  std::span<const std::byte> bytes(const SafeTensorInfo &info) const;
  /// Where the data section starts in the buffer (8 + the header size).
  uint64_t dataOffset() const { return dataOffset_; }
  /// The file path or "embedded weights", as given to parse().
  const std::string &what() const { return what_; }

  /// A contiguous CPU tensor over the file's bytes, for read-only use: no copy when the data is
  /// aligned to the dtype's size (the storage borrows the memory and holds `keepAlive`, which
  /// must own it), a private copy when it is not, since kernels load elements as aligned values.
  Tensor tensor(const SafeTensorInfo &info, std::shared_ptr<const void> keepAlive) const;

private:
  std::span<const std::byte> bytes_;
  std::string what_;
  uint64_t dataOffset_ = 0;
  std::vector<SafeTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// A file mapped (mmap, private: writes to its tensors stay in this process and never reach the
/// file) and parsed; keeps the mapping alive as long as any tensor from it. The file must not be
/// truncated while mapped (reading past its new end would fault); writeSafeTensors replaces
/// files by renaming, which leaves existing mappings intact.
class SafeTensorsFile : public std::enable_shared_from_this<SafeTensorsFile> {
public:
  /// Maps and validates `path`; throws kiln::Error when it cannot be opened or mapped, and
  /// SafeTensorsError when its contents are malformed.
  static std::shared_ptr<SafeTensorsFile> open(const std::string &path);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile &) = delete;
  SafeTensorsFile &operator=(const SafeTensorsFile &) = delete;

  const SafeTensorsView &view() const { return view_; }
  const std::string &path() const { return path_; }
  /// The tensor called `name` (see SafeTensorsView::tensor); throws kiln::Error (Value) naming
  /// the file when there is none.
  Tensor tensor(std::string_view name) const;

private:
  SafeTensorsFile() = default;
  std::string path_;
  void *map_ = nullptr;
  size_t size_ = 0;
  SafeTensorsView view_;
};

/// Writes `tensors` (any layout and dtype, on the CPU; written contiguous and little-endian, in
/// the header in the given order) with optional `metadata`, atomically: a temporary file in the
/// same folder is written, flushed to disk and renamed over `path`, so readers see either the
/// old file or the complete new one. The header is padded to a multiple of 8 bytes and the data
/// ordered by decreasing element size, so every tensor's data is aligned when the file is mapped
/// and reading it never copies. Throws kiln::Error on duplicate or reserved names and I/O errors.
void writeSafeTensors(const std::string &path,
                      const std::vector<std::pair<std::string, Tensor>> &tensors,
                      const std::map<std::string, std::string> &metadata = {});

} // namespace kiln::aot
