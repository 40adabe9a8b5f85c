#pragma once
/// Random sampling ops (torch.rand, randn, randint, randperm, normal, bernoulli, dropout,
/// multinomial and the in-place Tensor samplers). All draw from a Generator (the default one when
/// `gen` is null) and are reproducible: element i of a result depends only on the generator's
/// seed, its offset when the op started and i (see [Note: counter-based random numbers]), never
/// on the thread count. In-place samplers on non-contiguous tensors number elements in row-major
/// order, as if the tensor were contiguous.

#include "runtime/generator.h"
#include "runtime/tensor.h"

#include <optional>

namespace kiln::ops {

/// Uniform samples in [0, 1); dtype must be floating.
Tensor rand(IntList sizes, DType dtype, Generator *gen = nullptr);
/// Standard normal samples (Box-Muller); dtype must be floating.
Tensor randn(IntList sizes, DType dtype, Generator *gen = nullptr);
/// Uniform integers in [low, high), stored as dtype (any dtype but in its range).
Tensor randint(int64_t low, int64_t high, IntList sizes, DType dtype, Generator *gen = nullptr);
/// A random permutation of 0..n-1 (Fisher-Yates).
Tensor randperm(int64_t n, DType dtype, Generator *gen = nullptr);
/// randperm's permutation from `n` counters already reserved (`stream`): what a compiled
/// randperm computes from its philox_state.
Tensor randpermFrom(const PhiloxStream &stream, int64_t n, DType dtype);

/// In place: uniform in [from, to).
Tensor &uniform_(Tensor &self, double from, double to, Generator *gen = nullptr);
/// In place: normal with the given mean and standard deviation.
Tensor &normal_(Tensor &self, double mean, double std, Generator *gen = nullptr);
/// In place: exponential with rate lambd.
Tensor &exponential_(Tensor &self, double lambd, Generator *gen = nullptr);
/// In place: integers in [from, to); without `to`, [from, the dtype's largest exact integer].
Tensor &random_(Tensor &self, int64_t from, std::optional<int64_t> to, Generator *gen = nullptr);
/// In place: 1 with probability p, else 0 (any dtype).
Tensor &bernoulli_(Tensor &self, double p, Generator *gen = nullptr);
/// In place: element i is 1 with probability p[i] (p broadcast to self's shape).
Tensor &bernoulli_(Tensor &self, const Tensor &p, Generator *gen = nullptr);

/// Samples of Bernoulli(probs[i]) in probs' (floating) dtype.
Tensor bernoulli(const Tensor &probs, Generator *gen = nullptr);
/// Normal samples with broadcast mean and std tensors (wrapped numbers allowed).
Tensor normal(const Tensor &mean, const Tensor &std, Generator *gen = nullptr);

/// The mask dropout multiplies by: 0 with probability p, else 1 / (1 - p), in input's dtype
/// (the same draws as dropout's for the same generator state).
Tensor dropoutMask(const Tensor &input, double p, Generator *gen = nullptr);
/// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when `train`.
Tensor dropout(const Tensor &input, double p, bool train, Generator *gen = nullptr);
/// In-place dropout.
Tensor &dropout_(Tensor &input, double p, bool train, Generator *gen = nullptr);

/// numSamples category indices per row of a 1-D or 2-D tensor of non-negative weights.
Tensor multinomial(const Tensor &probs, int64_t numSamples, bool replacement,
                   Generator *gen = nullptr);

} // namespace kiln::ops
