#pragma once
/// SavedTensor: a tensor a node keeps for backward, checked against later in-place writes.
///
/// An input is kept as is. An output of the node itself is kept as an alias without history
/// (holding the tensor would make the node own itself) plus a weak reference to the node, from
/// which unpack() restores the history when the backward itself is recorded (create_graph).
/// unpack() throws torch's "modified by an inplace operation" error when the storage's version
/// moved since the save, and "backward through the graph a second time" after release.

#include "autograd/node.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <memory>

namespace kiln::autograd {

class SavedTensor {
public:
  SavedTensor() = default;
  /// Saves t (undefined allowed); `owner` is set when t is an output of that node.
  explicit SavedTensor(const Tensor &t, const std::shared_ptr<Node> &owner = nullptr,
                       uint32_t outputNr = 0);

  /// The saved tensor; `user` names the node for error messages.
  Tensor unpack(const Node &user) const;
  bool defined() const { return data_.defined(); }
  void release() {
    data_ = Tensor();
    released_ = true;
  }

private:
  Tensor data_;
  int64_t version_ = 0;
  bool isOutput_ = false;
  bool released_ = false;
  uint32_t outputNr_ = 0;
  std::weak_ptr<Node> owner_;
};

} // namespace kiln::autograd
