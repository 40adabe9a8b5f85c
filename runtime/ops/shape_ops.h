#pragma once
/// Eager shape ops with PyTorch semantics: joining (cat, stack), splitting (split, chunk,
/// tensor_split), repetition (repeat, tile, repeat_interleave), reordering (flip, roll, movedim),
/// triangles and diagonals, broadcasting helpers, padding, one_hot and embedding.
///
/// Ops that torch defines as views (split, chunk, movedim, diagonal, broadcast_to, meshgrid)
/// return views sharing storage; the others return new contiguous tensors.

#include "runtime/tensor.h"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln::ops {

// ---- joining and splitting (shape_ops.cc) ------------------------------------------------------

/// torch.cat: joins tensors along an existing dim, promoting their dtypes together. 1-D empty
/// tensors (shape [0]) are skipped, as torch's legacy rule allows.
Tensor cat(std::span<const Tensor> tensors, int64_t dim = 0);
/// torch.stack: joins same-shape tensors along a new dim.
Tensor stack(std::span<const Tensor> tensors, int64_t dim = 0);
/// torch.split with an int: views of `splitSize` along dim (the last one may be smaller).
std::vector<Tensor> split(const Tensor &self, int64_t splitSize, int64_t dim = 0);
/// torch.split with a list: views of the given sizes, which must sum to the dim's size.
std::vector<Tensor> splitWithSizes(const Tensor &self, IntList sizes, int64_t dim = 0);
/// torch.chunk: at most `chunks` views of ceil(size / chunks) along dim.
std::vector<Tensor> chunk(const Tensor &self, int64_t chunks, int64_t dim = 0);
/// torch.tensor_split with a number of sections (sizes differ by at most one).
std::vector<Tensor> tensorSplit(const Tensor &self, int64_t sections, int64_t dim = 0);
/// torch.tensor_split with split indices.
std::vector<Tensor> tensorSplitIndices(const Tensor &self, IntList indices, int64_t dim = 0);
/// torch.movedim: a permuted view moving dims `source` to positions `destination`.
Tensor movedim(const Tensor &self, IntList source, IntList destination);
/// torch.broadcast_to: an expanded view; throws when shape is not a broadcast of self's shape.
Tensor broadcastTo(const Tensor &self, IntList shape);
/// torch.broadcast_tensors: expanded views of all inputs at their common broadcast shape.
std::vector<Tensor> broadcastTensors(std::span<const Tensor> tensors);
/// torch.meshgrid over 0-d or 1-D tensors; indexing is "ij" or "xy".
std::vector<Tensor> meshgrid(std::span<const Tensor> tensors, const std::string &indexing = "ij");

// ---- copies with a new layout (shape_ops_layout.cc) --------------------------------------------

/// torch.Tensor.repeat: tiles self `repeats[i]` times along each dim (len(repeats) >= ndim).
Tensor repeat(const Tensor &self, IntList repeats);
/// torch.tile: repeat that left-pads `reps` with ones when it is shorter than ndim.
Tensor tile(const Tensor &self, IntList reps);
/// torch.repeat_interleave with one repeat count; dim none flattens self first.
Tensor repeatInterleave(const Tensor &self, int64_t repeats, std::optional<int64_t> dim = {});
/// torch.repeat_interleave with per-element repeats (a 0-d or 1-D integer tensor).
Tensor repeatInterleave(const Tensor &self, const Tensor &repeats, std::optional<int64_t> dim = {});
/// torch.repeat_interleave(repeats): index i repeated repeats[i] times.
Tensor repeatInterleaveIndices(const Tensor &repeats);
/// torch.flip: reverses the order of elements along each of `dims`.
Tensor flip(const Tensor &self, IntList dims);
/// torch.roll: shifts elements circularly; empty `dims` rolls the flattened tensor.
Tensor roll(const Tensor &self, IntList shifts, IntList dims);
/// torch.tril / torch.triu: the lower / upper triangle of the last two dims (others zeroed).
Tensor tril(const Tensor &self, int64_t diagonal = 0);
Tensor triu(const Tensor &self, int64_t diagonal = 0);
/// torch.diagonal: a view of the diagonal of dims (dim1, dim2), appended as the last dim.
Tensor diagonal(const Tensor &self, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
/// torch.diag: a 1-D input becomes a square matrix; a 2-D input gives a copy of its diagonal.
Tensor diag(const Tensor &self, int64_t diagonal = 0);
/// torch.diag_embed: the last dim of self becomes the diagonal of new dims (dim1, dim2).
Tensor diagEmbed(const Tensor &self, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);

// ---- padding and lookup tables (shape_ops_pad.cc) ----------------------------------------------

/// torch.nn.functional.pad. `pad` lists (left, right) pairs starting at the last dim; mode is
/// "constant" (negative pads crop), "reflect", "replicate" or "circular".
Tensor pad(const Tensor &self, IntList pad, const std::string &mode = "constant",
           std::optional<double> value = {});
/// torch.nn.functional.one_hot: int64 classes -> int64 one-hot vectors in a new last dim;
/// numClasses -1 means max(self) + 1.
Tensor oneHot(const Tensor &self, int64_t numClasses = -1);
/// torch.nn.functional.embedding: rows of `weight` selected by integer `indices`.
Tensor embedding(const Tensor &indices, const Tensor &weight,
                 std::optional<int64_t> paddingIdx = {});

} // namespace kiln::ops
