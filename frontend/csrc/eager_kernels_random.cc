// The eager kernels of the op table's sampling rows without a node kind (ir/ops.def
// KILN_EAGER_SPELLING: bernoulli, multinomial). Each entry reads its arguments by their position
// in the row's schema; the binding generator has already checked their types and applied the
// defaults. A generator argument is a kiln.Generator or None (bind_factory.h's toGenerator).
#include "frontend/csrc/bind_factory.h"
#include "frontend/csrc/eager_kernels.h"

#include "runtime/ops/random.h"

namespace kiln::frontend {

namespace {

// clang-format off
const EagerKernel kRandomKernels[] = {
    // bernoulli(input): each element drawn with its own probability; bernoulli(input, p): with p.
    {std::nullopt, "bernoulli", [](const BoundArgs &a) {
       return ops::bernoulli(a.tensor(0), toGenerator(a.get(1), "bernoulli"));
     }, nullptr, nullptr, 2, true},
    {std::nullopt, "bernoulli", [](const BoundArgs &a) {
       Tensor input = a.tensor(0);
       Tensor t = Tensor::empty(input.sizes(), input.dtype());
       return ops::bernoulli_(t, a.toDouble(1), toGenerator(a.get(2), "bernoulli"));
     }, nullptr, nullptr, 3, true},
    {std::nullopt, "multinomial", [](const BoundArgs &a) {
       return ops::multinomial(a.tensor(0), a.toInt(1), a.toBool(2),
                               toGenerator(a.get(3), "multinomial"));
     }, nullptr, nullptr, -1, true},
};
// clang-format on

} // namespace

std::span<const EagerKernel> randomEagerKernels() { return kRandomKernels; }

} // namespace kiln::frontend
