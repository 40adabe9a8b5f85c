#pragma once
/// The backward engine: runs the nodes reachable from some outputs in reverse topological order,
/// summing the gradients that meet at a node, and either accumulates into leaves' `.grad`
/// (backward) or returns the gradients of chosen inputs (grad).
///
/// Nodes run on the calling thread, one at a time; among ready nodes the most recently created
/// runs first. Without keepGraph every node that ran frees its saved tensors, so a second
/// backward through them raises. With createGraph the rules run with grad mode on, so the
/// backward is itself recorded and can be differentiated again.

#include "runtime/tensor.h"

#include <span>
#include <vector>

namespace kiln::autograd {

/// Tensor.backward / autograd.backward: gradOutputs[i] (undefined: ones, for a one-element
/// output) flows back from outputs[i]. A non-empty `inputs` accumulates only into those leaves.
void backward(std::span<const Tensor> outputs, std::span<const Tensor> gradOutputs, bool keepGraph,
              bool createGraph, std::span<const Tensor> inputs = {});

/// autograd.grad: the gradients of `inputs`, without touching any `.grad`. An input the outputs
/// do not depend on raises unless allowUnused (its result is then undefined).
std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> gradOutputs,
                         std::span<const Tensor> inputs, bool keepGraph, bool createGraph,
                         bool allowUnused);

} // namespace kiln::autograd
