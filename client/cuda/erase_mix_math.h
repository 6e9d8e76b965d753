// The per-element arithmetic of RandomErasing and MixUp/CutMix
// (erase_mix.h), written once for the CPU path (erase_mix.cc) and the
// kernel (erase_mix_kernel.cu). Every operation is a single IEEE-754
// operation rounded to nearest (fma, mul, add, div, sqrt and exact integer
// conversions; no library log or cos), spelled through the macros below,
// which call the _rn intrinsics on the device (never contracted) and plain
// operators on the host (erase_mix.cc is compiled with -ffp-contract=off):
// both sides give bit-identical floats, noise included.
//
// Include only from erase_mix.cc and erase_mix_kernel.cu.
#ifndef BATCHD_CLIENT_CUDA_ERASE_MIX_MATH_H_
#define BATCHD_CLIENT_CUDA_ERASE_MIX_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "client/cuda/erase_mix.h"

#ifdef __CUDACC__
#define BATCHD_HD __host__ __device__ __forceinline__
#else
#define BATCHD_HD inline
#endif

namespace batchd::cuda::erase_mix_math {

#ifdef __CUDA_ARCH__
BATCHD_HD float Fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
BATCHD_HD float Mul(float a, float b) { return __fmul_rn(a, b); }
BATCHD_HD float Add(float a, float b) { return __fadd_rn(a, b); }
BATCHD_HD float Div(float a, float b) { return __fdiv_rn(a, b); }
BATCHD_HD float Sqrt(float a) { return __fsqrt_rn(a); }
#else
BATCHD_HD float Fma(float a, float b, float c) { return std::fma(a, b, c); }
BATCHD_HD float Mul(float a, float b) { return a * b; }
BATCHD_HD float Add(float a, float b) { return a + b; }
BATCHD_HD float Div(float a, float b) { return a / b; }
BATCHD_HD float Sqrt(float a) { return std::sqrt(a); }
#endif

// Philox4x32-10 (common/random.h's generator, repeated here because this
// library depends on nothing of batchd).
BATCHD_HD void Philox(uint32_t counter[4], uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * counter[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * counter[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(p1);
    const uint32_t c1 = counter[1], c3 = counter[3];
    counter[0] = hi1 ^ c1 ^ key0;
    counter[1] = lo1;
    counter[2] = hi0 ^ c3 ^ key1;
    counter[3] = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
}

// ln(u) for u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, to s^9.
BATCHD_HD float Log(float u) {
  uint32_t bits;
  memcpy(&bits, &u, 4);
  int e = static_cast<int>((bits >> 23) & 0xff) - 127;
  bits = (bits & 0x7fffffu) | 0x3f800000u;  // m in [1, 2)
  float m;
  memcpy(&m, &bits, 4);
  if (m > 1.41421356f) {
    m = Mul(m, 0.5f);  // exact
    ++e;
  }
  const float s = Div(Add(m, -1.0f), Add(m, 1.0f));
  const float s2 = Mul(s, s);
  float poly = Fma(s2, 2.0f / 9.0f, 2.0f / 7.0f);
  poly = Fma(s2, poly, 2.0f / 5.0f);
  poly = Fma(s2, poly, 2.0f / 3.0f);
  poly = Fma(s2, poly, 2.0f);
  return Fma(static_cast<float>(e), 0.693147180559945f, Mul(s, poly));
}

// sin(x) and cos(x) for x in [0, pi/4], Taylor to x^9 and x^10.
BATCHD_HD float Sin(float x) {
  const float x2 = Mul(x, x);
  float poly = Fma(x2, 1.0f / 362880.0f, -1.0f / 5040.0f);
  poly = Fma(x2, poly, 1.0f / 120.0f);
  poly = Fma(x2, poly, -1.0f / 6.0f);
  return Fma(Mul(x, x2), poly, x);
}
BATCHD_HD float Cos(float x) {
  const float x2 = Mul(x, x);
  float poly = Fma(x2, -1.0f / 3628800.0f, 1.0f / 40320.0f);
  poly = Fma(x2, poly, -1.0f / 720.0f);
  poly = Fma(x2, poly, 1.0f / 24.0f);
  poly = Fma(x2, poly, -0.5f);
  return Fma(x2, poly, 1.0f);
}

// cos(2 pi t) for t = k / 2^24, k = `t24` in [0, 2^24): quadrant from the
// top two bits, the rest folded into [0, pi/4] exactly.
BATCHD_HD float CosTurn(uint32_t t24) {
  const uint32_t quadrant = t24 >> 22;
  uint32_t rest = t24 & 0x3fffffu;  // angle within the quadrant, / 2^22
  const bool fold = rest > 0x200000u;
  if (fold) rest = 0x400000u - rest;
  const float x = Mul(static_cast<float>(rest) * (1.0f / 4194304.0f),
                      1.57079632679490f);
  // cos(q pi/2 + y): q 0 cos y, 1 -sin y, 2 -cos y, 3 sin y; folding swaps
  // sin and cos (y = pi/2 - x).
  const bool use_sin = (quadrant & 1) != fold;
  const float v = use_sin ? Sin(x) : Cos(x);
  return (quadrant == 1 || quadrant == 2) ? -v : v;
}

// ErasedRegion's noise: value number `k` of the rectangle under `key`.
BATCHD_HD float Noise(uint64_t key, uint64_t k) {
  uint32_t counter[4] = {static_cast<uint32_t>(k >> 1),
                         static_cast<uint32_t>(k >> 33), 0, 0};
  Philox(counter, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  const uint32_t w0 = (k & 1) ? counter[2] : counter[0];
  const uint32_t w1 = (k & 1) ? counter[3] : counter[1];
  // u1 in (0, 1] and t in [0, 1), 24 bits each (exact in float).
  const float u1 = static_cast<float>((w0 >> 8) + 1) * (1.0f / 16777216.0f);
  const float radius = Sqrt(Mul(-2.0f, Log(u1)));
  return Mul(radius, CosTurn(w1 >> 8));
}

// Normalised (and erased) value of sample `n`, channel `c`, pixel (y, x).
BATCHD_HD float Value(const uint8_t* src, const EraseMixElementParams& p,
                      const EraseRect* rects, uint64_t n, uint64_t c,
                      uint64_t y, uint64_t x) {
  if (rects != nullptr) {
    const EraseRect& r = rects[n];
    if (y >= r.top && y < uint64_t{r.top} + r.height && x >= r.left &&
        x < uint64_t{r.left} + r.width) {
      if (!r.noise) return 0.0f;
      const uint64_t k =
          (c * r.height + (y - r.top)) * r.width + (x - r.left);
      return Noise(r.noise_key, k);
    }
  }
  const uint64_t hw = p.h * p.w;
  const uint64_t in = p.in_nhwc ? (n * hw + y * p.w + x) * p.c + c
                                : (n * p.c + c) * hw + y * p.w + x;
  return Fma(static_cast<float>(src[in]), p.scale[c], p.bias[c]);
}

// The output value of (n, c, y, x): Value, mixed with sample n - 1 (the
// last for n = 0), as torch computes x * lambda + rolled * (1 - lambda).
BATCHD_HD float Mixed(const uint8_t* src, const EraseMixElementParams& p,
                      const EraseRect* rects, uint64_t n, uint64_t c,
                      uint64_t y, uint64_t x) {
  const uint64_t rolled = n == 0 ? p.n - 1 : n - 1;
  switch (p.mix.kind) {
    case MixKind::kMixup:
      return Add(Mul(Value(src, p, rects, n, c, y, x), p.mix.lambda_self),
                 Mul(Value(src, p, rects, rolled, c, y, x),
                     p.mix.lambda_rolled));
    case MixKind::kCutmix:
      if (y >= p.mix.box_top && y < uint64_t{p.mix.box_top} + p.mix.box_height &&
          x >= p.mix.box_left &&
          x < uint64_t{p.mix.box_left} + p.mix.box_width) {
        return Value(src, p, rects, rolled, c, y, x);
      }
      return Value(src, p, rects, n, c, y, x);
    case MixKind::kNone:
      break;
  }
  return Value(src, p, rects, n, c, y, x);
}

}  // namespace batchd::cuda::erase_mix_math

#endif  // BATCHD_CLIENT_CUDA_ERASE_MIX_MATH_H_
