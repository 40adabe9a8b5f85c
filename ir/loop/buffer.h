#pragma once
/// Buffers of the loop IR: the memory a loop program reads and writes.
///
/// Semantics:
/// - A buffer is named `buf<N>` by its position in the program (so names never collide and a
///   program's text does not depend on how its builder named things), and is typed by an
///   ir::TensorMeta: dtype, symbolic sizes, strides in elements (contiguous unless given) and
///   device.
/// - Kinds: an Input is bound to a tensor by the caller; an Intermediate is written by exactly one
///   loop node and read by later ones; an Output is an intermediate the program returns.

#include "ir/tensor_meta.h"

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::ir::loop {

/// A buffer's handle: its position in the program.
struct BufferId {
  int32_t index = -1;
  bool valid() const { return index >= 0; }
  auto operator<=>(const BufferId &) const = default;
};

enum class BufferKind : uint8_t { Input, Intermediate, Output };
std::string_view bufferKindName(BufferKind kind);

/// `buf<N>`.
std::string bufferName(BufferId id);

struct Buffer {
  BufferId id;
  BufferKind kind = BufferKind::Intermediate;
  TensorMeta meta;

  std::string name() const { return bufferName(id); }
  int64_t rank() const { return meta.rank(); }
};

} // namespace kiln::ir::loop
