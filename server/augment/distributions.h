// Continuous and combinatorial draws built on the counter-based generator
// (common/random.h), for the augmentation policies: torchvision draws
// them from torch's global generator, batchd from the sample's own stream,
// with the same distributions. Each function consumes a number of draws
// from `rng` that depends only on the values drawn, so a sample's draws
// are a pure function of its generator's key.
//
// Pure functions of `rng`'s state; thread-compatible like SampleRandom.
#ifndef BATCHD_SERVER_AUGMENT_DISTRIBUTIONS_H_
#define BATCHD_SERVER_AUGMENT_DISTRIBUTIONS_H_

#include <vector>

#include "common/random.h"

namespace batchd::server::augment {

// torch.empty(1).uniform_(lo, hi) as torchvision's get_params use it: a
// float32 value in [lo, hi] (drawn in double, rounded to float32).
float UniformFloat(common::SampleRandom& rng, double lo, double hi);

// Whether an op applied with probability `p` runs: U[0, 1) < p, as
// torchvision's `torch.rand(1) < p` (p 0: never, p 1: always).
bool Bernoulli(common::SampleRandom& rng, double p);

// Standard normal, Box-Muller from two uniform draws (the cosine branch;
// the sine branch is discarded so that every call consumes the same
// draws).
double StandardNormal(common::SampleRandom& rng);

// Gamma(shape, 1). Marsaglia and Tsang, "A Simple Method for Generating
// Gamma Variables" (2000), for shape >= 1; for shape < 1 the boosted form
// Gamma(shape + 1) * U^(1 / shape). Clamped below at the smallest positive
// double, as torch's sampler clamps, so that a Dirichlet's sum is never 0.
// REQUIRES: shape > 0.
double Gamma(common::SampleRandom& rng, double shape);

// Dirichlet(alpha, ..., alpha) of `n` components: n Gamma(alpha) draws over
// their sum (torch._sample_dirichlet). Beta(a, a) is the first component of
// a 2-component one. REQUIRES: alpha > 0, n >= 1.
std::vector<double> SymmetricDirichlet(common::SampleRandom& rng, double alpha,
                                       int n);

// torch.randperm(n): a uniform permutation of 0..n-1 (Fisher-Yates).
std::vector<int> Permutation(common::SampleRandom& rng, int n);

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_DISTRIBUTIONS_H_
