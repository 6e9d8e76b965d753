#include "server/augment/distributions.h"

#include <cfloat>
#include <cmath>
#include <utility>

namespace batchd::server::augment {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// Uniform in (0, 1]: never 0, so that its logarithm is finite.
double OpenZeroUniform(common::SampleRandom& rng) {
  return 1.0 - rng.Uniform();
}

// Marsaglia-Tsang for shape >= 1.
double GammaAtLeastOne(common::SampleRandom& rng, double shape) {
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x = 0;
    double v = 0;
    do {
      x = StandardNormal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = OpenZeroUniform(rng);
    // The squeeze test first, then the exact one.
    if (u < 1.0 - 0.0331 * (x * x) * (x * x)) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace

float UniformFloat(common::SampleRandom& rng, double lo, double hi) {
  return static_cast<float>(lo + (hi - lo) * rng.Uniform());
}

bool Bernoulli(common::SampleRandom& rng, double p) {
  return rng.Uniform() < p;
}

double StandardNormal(common::SampleRandom& rng) {
  const double u1 = OpenZeroUniform(rng);
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

double Gamma(common::SampleRandom& rng, double shape) {
  double value = 0;
  if (shape >= 1.0) {
    value = GammaAtLeastOne(rng, shape);
  } else {
    // Gamma(a) = Gamma(a + 1) * U^(1/a), computed in logarithms so that a
    // small shape underflows to the clamp below rather than to NaN.
    const double boosted = GammaAtLeastOne(rng, shape + 1.0);
    value =
        std::exp(std::log(boosted) + std::log(OpenZeroUniform(rng)) / shape);
  }
  return value > DBL_MIN ? value : DBL_MIN;
}

std::vector<double> SymmetricDirichlet(common::SampleRandom& rng, double alpha,
                                       int n) {
  std::vector<double> out(static_cast<size_t>(n));
  double sum = 0;
  for (double& x : out) {
    x = Gamma(rng, alpha);
    sum += x;
  }
  for (double& x : out) x /= sum;
  return out;
}

std::vector<int> Permutation(common::SampleRandom& rng, int n) {
  std::vector<int> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  for (int i = n - 1; i > 0; --i) {
    const int j =
        static_cast<int>(rng.UniformInt(static_cast<uint64_t>(i) + 1));
    std::swap(out[static_cast<size_t>(i)], out[static_cast<size_t>(j)]);
  }
  return out;
}

}  // namespace batchd::server::augment
