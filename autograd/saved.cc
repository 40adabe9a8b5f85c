#include "autograd/saved.h"

#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "runtime/error.h"

namespace kiln::autograd {

SavedTensor::SavedTensor(const Tensor &t, const std::shared_ptr<Node> &owner, uint32_t outputNr)
    : outputNr_(outputNr) {
  if (!t.defined())
    return;
  version_ = t.version();
  if (owner) {
    data_ = detach(t);
    isOutput_ = true;
    owner_ = owner;
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const Node &user) const {
  if (released_)
    fail(ErrorKind::Runtime,
         "Trying to backward through the graph a second time (or directly access saved tensors "
         "after they have already been freed). Saved intermediate values of the graph are freed "
         "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
         "backward through the graph a second time or if you need to access saved tensors after "
         "calling backward.");
  if (!data_.defined())
    return data_;
  if (data_.version() != version_)
    fail(ErrorKind::Runtime,
         "one of the variables needed for gradient computation has been modified by an inplace "
         "operation: [kiln.{} {}], which is {} {}, is at version {}; expected version {} "
         "instead.",
         dtypeName(data_.dtype()), data_.shapeStr(), isOutput_ ? "output 0 of" : "an input of",
         user.name(), data_.version(), version_);
  if (isOutput_ && isGradEnabled()) {
    // A recorded backward (create_graph) differentiates through the output: give it back its
    // history.
    if (std::shared_ptr<Node> owner = owner_.lock()) {
      Tensor t = detach(data_);
      setHistory(t, owner, outputNr_);
      return t;
    }
  }
  return data_;
}

} // namespace kiln::autograd
