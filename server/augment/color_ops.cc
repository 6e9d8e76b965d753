#include "server/augment/color_ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

// The float expressions below are written in torchvision's order, one
// rounding per tensor operation; this file is built with -ffp-contract=off
// (server/augment/CMakeLists.txt) so that no compiler fuses them into FMAs.

namespace batchd::server::augment {
namespace {

// torchvision's weights of rgb_to_grayscale, as float32 (the Python
// doubles cast to float, as torch casts a scalar operand).
constexpr float kGrayR = static_cast<float>(0.2989);
constexpr float kGrayG = static_cast<float>(0.587);
constexpr float kGrayB = static_cast<float>(0.114);

// Calls `fn(values, count)` on runs of the image's bytes: once for the
// whole image when its rows are contiguous, else once per row.
template <typename Fn>
void ForEachRun(Image image, Fn fn) {
  const size_t row_bytes = size_t{3} * static_cast<size_t>(image.width);
  if (image.stride == static_cast<ptrdiff_t>(row_bytes)) {
    fn(image.data, row_bytes * static_cast<size_t>(image.height));
    return;
  }
  for (int y = 0; y < image.height; ++y) fn(image.row(y), row_bytes);
}

// Calls `fn(pixels, count)` on runs of whole RGB pixels: once for the
// whole image when its rows are contiguous, else once per row.
template <typename Fn>
void ForEachRow(Image image, Fn fn) {
  if (image.stride == ptrdiff_t{3} * image.width) {
    fn(image.data, image.width * image.height);
    return;
  }
  for (int y = 0; y < image.height; ++y) fn(image.row(y), image.width);
}

// `luts` holds 3 tables of 256 entries, one per channel.
void ApplyChannelLuts(Image image, const uint8_t (*luts)[256]) {
  const uint8_t* lut_r = luts[0];
  const uint8_t* lut_g = luts[1];
  const uint8_t* lut_b = luts[2];
  ForEachRow(image, [=](uint8_t* p, int pixels) {
    for (int i = 0; i < pixels; ++i) {
      p[3 * i + 0] = lut_r[p[3 * i + 0]];
      p[3 * i + 1] = lut_g[p[3 * i + 1]];
      p[3 * i + 2] = lut_b[p[3 * i + 2]];
    }
  });
}

// `.clamp(0, 255).to(torch.uint8)` of a float32 value.
inline uint8_t ClampTruncate(float v) {
  v = std::min(std::max(v, 0.0f), 255.0f);
  return static_cast<uint8_t>(static_cast<int>(v));
}

// rgb_to_grayscale's `(0.2989 * r + 0.587 * g + 0.114 * b)`, still float.
inline float GrayFloat(float r, float g, float b) {
  return kGrayR * r + kGrayG * g + kGrayB * b;
}

// The two float32 weights of `_blend(img1, img2, ratio)`:
// `ratio * img1 + (1.0 - ratio) * img2`, with `1.0 - ratio` computed in
// double (Python) and both cast to float32 by torch.
struct BlendWeights {
  explicit BlendWeights(double ratio)
      : own(static_cast<float>(ratio)),
        other(static_cast<float>(1.0 - ratio)) {}
  float own;
  float other;
};

// Reflects `i` into [0, n): torch's "reflect" padding (the edge is not
// repeated), extended periodically for offsets past the far edge.
int Reflect(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// torchvision's _get_gaussian_kernel1d in float32.
void GaussianKernel(int size, float sigma, float* kernel) {
  const float half = static_cast<float>((size - 1) * 0.5);
  float sum = 0.0f;
  for (int i = 0; i < size; ++i) {
    // linspace(-half, half, size): integers (step exactly 1), exact.
    const float x = -half + static_cast<float>(i);
    const float q = x / sigma;
    kernel[i] = std::exp(-0.5f * (q * q));
    sum += kernel[i];
  }
  for (int i = 0; i < size; ++i) kernel[i] = kernel[i] / sum;
}

// Rounds `v` (0 <= v < 2^22) half to even, as torch.round: adding and
// removing 2^23 leaves the float's integer part, rounded in the current
// (round-to-nearest-even) mode.
inline float RoundHalfEven(float v) {
  constexpr float kMagic = 8388608.0f;  // 2^23
  return (v + kMagic) - kMagic;
}

// `condition ? a : b` computed with bit masks, which the compiler cannot
// turn back into branches (a chain of ?: on one integer becomes a switch,
// and a loop with a switch does not vectorise).
inline float BitSelect(bool condition, float a, float b) {
  uint32_t bits_a, bits_b;
  std::memcpy(&bits_a, &a, sizeof(a));
  std::memcpy(&bits_b, &b, sizeof(b));
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  const uint32_t bits = (bits_a & mask) | (bits_b & ~mask);
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// torch.max / torch.min of two values (neither is NaN here).
inline float Max(float a, float b) { return BitSelect(a < b, b, a); }
inline float Min(float a, float b) { return BitSelect(b < a, b, a); }

// The per-pixel loops are compiled twice, for AVX2 and for the baseline,
// and the loader picks one by the CPU (an ifunc). Baseline x86-64 (SSE2)
// has no byte shuffle, so the compiler leaves loops over interleaved RGB
// scalar there; AVX2's shuffles vectorise them. The clones compute the
// same IEEE float32 operations (AVX2 does not bring FMA), so they give the
// same bytes.
// Defining BATCHD_AUGMENT_BASELINE_ONLY builds the baseline alone (to
// check that it gives the same bytes, or for tools that dislike ifuncs).
#if defined(__x86_64__) && defined(__has_attribute) && \
    !defined(BATCHD_AUGMENT_BASELINE_ONLY)
#if __has_attribute(target_clones)
#define BATCHD_PIXEL_LOOP __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef BATCHD_PIXEL_LOOP
#define BATCHD_PIXEL_LOOP
#endif

// `(scale * x + offset).clamp(0, 255).to(uint8)` for `n` values: a blend
// whose second term is the same for every value.
BATCHD_PIXEL_LOOP void AffineRun(uint8_t* p, size_t n, float scale,
                                 float offset) {
  for (size_t i = 0; i < n; ++i) {
    p[i] = ClampTruncate(scale * static_cast<float>(p[i]) + offset);
  }
}

// Sum over `pixels` RGB pixels of rgb_to_grayscale's truncated value.
BATCHD_PIXEL_LOOP uint32_t GraySum(const uint8_t* p, int pixels) {
  uint32_t sum = 0;
  for (int i = 0; i < pixels; ++i) {
    const float gray = GrayFloat(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
    sum += static_cast<uint32_t>(static_cast<int>(gray));
  }
  return sum;
}

BATCHD_PIXEL_LOOP void GrayscaleRow(uint8_t* p, int pixels) {
  for (int i = 0; i < pixels; ++i) {
    const float r = p[3 * i], g = p[3 * i + 1], b = p[3 * i + 2];
    const uint8_t gray =
        static_cast<uint8_t>(static_cast<int>(GrayFloat(r, g, b)));
    p[3 * i + 0] = gray;
    p[3 * i + 1] = gray;
    p[3 * i + 2] = gray;
  }
}

BATCHD_PIXEL_LOOP void SaturationRow(uint8_t* p, int pixels, float own,
                                     float other) {
  for (int i = 0; i < pixels; ++i) {
    const float r = p[3 * i], g = p[3 * i + 1], b = p[3 * i + 2];
    const float gray =
        static_cast<float>(static_cast<int>(GrayFloat(r, g, b)));
    const float other_term = other * gray;
    p[3 * i + 0] = ClampTruncate(own * r + other_term);
    p[3 * i + 1] = ClampTruncate(own * g + other_term);
    p[3 * i + 2] = ClampTruncate(own * b + other_term);
  }
}

// adjust_hue on one row, with bit-mask selects so that it vectorises.
// Every expression is torchvision's, in its order; where torchvision calls
// fmod, floor or a modulo, the comment gives the range that makes the
// simpler expression here exact.
BATCHD_PIXEL_LOOP void HueRow(uint8_t* p, int pixels, float hue_factor) {
  for (int i = 0; i < pixels; ++i) {
    // img.to(float32) / 255.0.
    const float r = static_cast<float>(p[3 * i]) / 255.0f;
    const float g = static_cast<float>(p[3 * i + 1]) / 255.0f;
    const float b = static_cast<float>(p[3 * i + 2]) / 255.0f;
    // _rgb2hsv.
    const float maxc = Max(Max(r, g), b);
    const float minc = Min(Min(r, g), b);
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / BitSelect(eqc, 1.0f, maxc);
    const float cr_divisor = BitSelect(eqc, 1.0f, cr);
    const float rc = (maxc - r) / cr_divisor;
    const float gc = (maxc - g) / cr_divisor;
    const float bc = (maxc - b) / cr_divisor;
    // The masks are 0 or 1; a masked-out term adds only a zero.
    const bool is_r = maxc == r, is_g = maxc == g;
    const float hr = BitSelect(is_r, bc - gc, 0.0f);
    const float hg = BitSelect(is_g & !is_r, 2.0f + rc - bc, 0.0f);
    const float hb = BitSelect(!is_g & !is_r, 4.0f + gc - rc, 0.0f);
    const float h0 = hr + hg + hb;
    // fmod(h0 / 6.0 + 1.0, 1.0): the sum lies in [5/6, 11/6], and for a
    // in [1, 2) a - 1 is exact (Sterbenz), as fmod is.
    const float a = h0 / 6.0f + 1.0f;
    const float h1 = BitSelect(a >= 1.0f, a - 1.0f, a);
    // (h1 + hue_factor) % 1.0 (torch.remainder: fmod, plus 1 when
    // negative); the sum lies in [-0.5, 1.5).
    const float sum = h1 + hue_factor;
    const float h = BitSelect(sum >= 1.0f, sum - 1.0f,
                              BitSelect(sum < 0.0f, sum + 1.0f, sum));
    // _hsv2rgb. h * 6 lies in [0, 6], where floor is truncation.
    const float v = maxc;
    const float h6 = h * 6.0f;
    const int sector = static_cast<int>(h6);
    const float f = h6 - static_cast<float>(sector);
    const float pv = Min(Max(v * (1.0f - s), 0.0f), 1.0f);
    const float qv = Min(Max(v * (1.0f - s * f), 0.0f), 1.0f);
    const float tv = Min(Max(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    // i % 6 with i in [0, 6]: sector 6 is sector 0. Sector i takes
    // (r, g, b) from (v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v),
    // (v, p, q).
    const bool s0 = (sector == 0) | (sector == 6), s1 = sector == 1,
               s2 = sector == 2, s3 = sector == 3, s4 = sector == 4,
               s5 = sector == 5;
    const float out_r =
        BitSelect(s0 | s5, v, BitSelect(s1, qv, BitSelect(s4, tv, pv)));
    const float out_g =
        BitSelect(s1 | s2, v, BitSelect(s0, tv, BitSelect(s3, qv, pv)));
    const float out_b =
        BitSelect(s3 | s4, v, BitSelect(s2, tv, BitSelect(s5, qv, pv)));
    // (img * 255.0).to(torch.uint8).
    p[3 * i + 0] = static_cast<uint8_t>(static_cast<int>(out_r * 255.0f));
    p[3 * i + 1] = static_cast<uint8_t>(static_cast<int>(out_g * 255.0f));
    p[3 * i + 2] = static_cast<uint8_t>(static_cast<int>(out_b * 255.0f));
  }
}

// Per-channel minimum and maximum over `pixels` pixels, folded into
// `lo` and `hi`.
BATCHD_PIXEL_LOOP void MinMaxRow(const uint8_t* p, int pixels, uint8_t* lo,
                                 uint8_t* hi) {
  uint8_t lo0 = lo[0], lo1 = lo[1], lo2 = lo[2];
  uint8_t hi0 = hi[0], hi1 = hi[1], hi2 = hi[2];
  for (int i = 0; i < pixels; ++i) {
    lo0 = std::min(lo0, p[3 * i]);
    hi0 = std::max(hi0, p[3 * i]);
    lo1 = std::min(lo1, p[3 * i + 1]);
    hi1 = std::max(hi1, p[3 * i + 1]);
    lo2 = std::min(lo2, p[3 * i + 2]);
    hi2 = std::max(hi2, p[3 * i + 2]);
  }
  lo[0] = lo0, lo[1] = lo1, lo[2] = lo2;
  hi[0] = hi0, hi[1] = hi1, hi[2] = hi2;
}

// _blend(x, x, ...) for `n` values: the sharpness blend where the
// degenerate image is the image itself.
BATCHD_PIXEL_LOOP void BlendSelf(uint8_t* p, size_t n, float own,
                                 float other) {
  for (size_t i = 0; i < n; ++i) {
    const float x = p[i];
    p[i] = ClampTruncate(own * x + other * x);
  }
}

// adjust_sharpness on the interior values [3, n - 3) of one row: `out`
// gets the blend of `here` (the row's original values) with the 3x3
// smoothing of `above`, `here` and `below`.
BATCHD_PIXEL_LOOP void SharpnessRow(uint8_t* out, const uint8_t* above,
                                    const uint8_t* here, const uint8_t* below,
                                    size_t n, float own, float other) {
  for (size_t i = 3; i + 3 < n; ++i) {
    // conv2d with [[1,1,1],[1,5,1],[1,1,1]] / 13 is k / 13 for the
    // integer k below; torch.round of it never meets a tie (k / 13 is at
    // least 1/26 from n + 0.5, far beyond float error), so the float32
    // conv rounds to floor((2k + 13) / 26).
    const int k = above[i - 3] + above[i] + above[i + 3] + here[i - 3] +
                  5 * here[i] + here[i + 3] + below[i - 3] + below[i] +
                  below[i + 3];
    const float blurred = static_cast<float>((2 * k + 13) / 26);
    out[i] = ClampTruncate(own * static_cast<float>(here[i]) +
                           other * blurred);
  }
}

// dst[i] = sum over taps j of kernel[j] * src[i + j * step], i < n,
// summed in tap order. Blocks of 32 outputs stay in registers across the
// taps.
BATCHD_PIXEL_LOOP void Convolve(const float* src, ptrdiff_t step,
                                const float* kernel, int taps, int n,
                                float* dst) {
  constexpr int kBlock = 32;
  int i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float acc[kBlock];
    for (int t = 0; t < kBlock; ++t) acc[t] = kernel[0] * src[i + t];
    for (int j = 1; j < taps; ++j) {
      const float k = kernel[j];
      const float* in = src + j * step + i;
      for (int t = 0; t < kBlock; ++t) acc[t] += k * in[t];
    }
    for (int t = 0; t < kBlock; ++t) dst[i + t] = acc[t];
  }
  for (; i < n; ++i) {
    float acc = kernel[0] * src[i];
    for (int j = 1; j < taps; ++j) acc += kernel[j] * src[i + j * step];
    dst[i] = acc;
  }
}

BATCHD_PIXEL_LOOP void RoundRow(const float* acc, int n, uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const float v = std::min(std::max(RoundHalfEven(acc[i]), 0.0f), 255.0f);
    out[i] = static_cast<uint8_t>(static_cast<int>(v));
  }
}

BATCHD_PIXEL_LOOP void WidenRow(const uint8_t* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace

void AdjustBrightness(Image image, double factor) {
  // _blend(img, zeros, factor): the second term is (1 - factor) * 0.
  // (Computed rather than looked up: 8 values per AVX2 instruction beat a
  // 256-entry table, one byte load per value.)
  const BlendWeights w(factor);
  const float offset = w.other * 0.0f;
  ForEachRun(image, [&w, offset](uint8_t* p, size_t n) {
    AffineRun(p, n, w.own, offset);
  });
}

void AdjustContrast(Image image, double factor) {
  if (image.width <= 0 || image.height <= 0) return;
  // mean(rgb_to_grayscale(img).to(float32)): torch sums the truncated
  // grays in float32, exactly while the sum stays under 2^24 (images up
  // to 65,793 pixels); the integer sum is that exact value. Then
  // sum / N in float32.
  uint64_t sum = 0;
  ForEachRow(image, [&sum](const uint8_t* p, int pixels) {
    // 2^24 pixels of at most 255 fit a uint32_t partial sum.
    constexpr int kChunk = 1 << 24;
    for (int start = 0; start < pixels; start += kChunk) {
      sum += GraySum(p + size_t{3} * start, std::min(kChunk, pixels - start));
    }
  });
  const float mean = static_cast<float>(sum) /
                     static_cast<float>(int64_t{image.width} * image.height);
  const BlendWeights w(factor);
  const float offset = w.other * mean;
  ForEachRun(image, [&w, offset](uint8_t* p, size_t n) {
    AffineRun(p, n, w.own, offset);
  });
}

void AdjustSaturation(Image image, double factor) {
  const BlendWeights w(factor);
  ForEachRow(image, [w](uint8_t* p, int pixels) {
    SaturationRow(p, pixels, w.own, w.other);
  });
}

void AdjustHue(Image image, float hue_factor) {
  ForEachRow(image, [hue_factor](uint8_t* p, int pixels) {
    HueRow(p, pixels, hue_factor);
  });
}

void AdjustSharpness(Image image, double factor,
                     std::vector<uint8_t>* scratch) {
  const int width = image.width, height = image.height;
  if (width <= 2 || height <= 2) return;
  const BlendWeights w(factor);
  const size_t row_bytes = size_t{3} * width;
  // The original rows y - 1 and y, since rows are blended in place.
  scratch->resize(2 * row_bytes);
  uint8_t* above = scratch->data();
  uint8_t* here = above + row_bytes;
  // The degenerate image keeps the border: those pixels blend with
  // themselves.
  std::memcpy(here, image.row(0), row_bytes);
  BlendSelf(image.row(0), row_bytes, w.own, w.other);
  for (int y = 1; y < height - 1; ++y) {
    std::swap(above, here);
    uint8_t* p = image.row(y);
    std::memcpy(here, p, row_bytes);
    SharpnessRow(p, above, here, image.row(y + 1), row_bytes, w.own,
                 w.other);
    BlendSelf(p, 3, w.own, w.other);
    BlendSelf(p + row_bytes - 3, 3, w.own, w.other);
  }
  BlendSelf(image.row(height - 1), row_bytes, w.own, w.other);
}

void Posterize(Image image, int bits) {
  // img & -int(2 ** (8 - bits)), the mask cast to uint8 (bits 0: 0).
  const uint8_t mask = static_cast<uint8_t>(-(1 << (8 - bits)));
  ForEachRun(image, [mask](uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] &= mask;
  });
}

void Solarize(Image image, float threshold) {
  // `img >= threshold` compares in float32: inversion starts at the first
  // integer at or above the threshold.
  int first = 0;
  while (first < 256 && !(static_cast<float>(first) >= threshold)) ++first;
  if (first == 256) return;
  const uint8_t cut = static_cast<uint8_t>(first);
  ForEachRun(image, [cut](uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      p[i] = p[i] >= cut ? static_cast<uint8_t>(255 - p[i]) : p[i];
    }
  });
}

void Invert(Image image) {
  ForEachRun(image, [](uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(255 - p[i]);
  });
}

void Autocontrast(Image image) {
  uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
  ForEachRow(image, [&lo, &hi](const uint8_t* p, int pixels) {
    MinMaxRow(p, pixels, lo, hi);
  });
  uint8_t luts[3][256];
  bool identity = true;
  for (int c = 0; c < 3; ++c) {
    if (hi[c] <= lo[c]) {
      // scale = 255 / 0 is not finite: minimum 0, scale 1, the identity.
      for (int x = 0; x < 256; ++x) luts[c][x] = static_cast<uint8_t>(x);
      continue;
    }
    identity = false;
    const float minimum = lo[c];
    // `bound / (maximum - minimum)` is torch's __rtruediv__:
    // (maximum - minimum).reciprocal() * bound.
    const float scale =
        (1.0f / (static_cast<float>(hi[c]) - minimum)) * 255.0f;
    for (int x = 0; x < 256; ++x) {
      luts[c][x] = ClampTruncate((static_cast<float>(x) - minimum) * scale);
    }
  }
  if (!identity) ApplyChannelLuts(image, luts);
}

void Equalize(Image image) {
  // Two histograms per channel, for even and odd pixels, so that runs of
  // equal values do not serialise on one counter.
  uint32_t hist[2][3][256] = {};
  ForEachRow(image, [&hist](const uint8_t* p, int pixels) {
    int i = 0;
    for (; i + 1 < pixels; i += 2) {
      ++hist[0][0][p[3 * i]];
      ++hist[0][1][p[3 * i + 1]];
      ++hist[0][2][p[3 * i + 2]];
      ++hist[1][0][p[3 * i + 3]];
      ++hist[1][1][p[3 * i + 4]];
      ++hist[1][2][p[3 * i + 5]];
    }
    if (i < pixels) {
      ++hist[0][0][p[3 * i]];
      ++hist[0][1][p[3 * i + 1]];
      ++hist[0][2][p[3 * i + 2]];
    }
  });
  uint8_t luts[3][256];
  bool identity = true;
  for (int c = 0; c < 3; ++c) {
    uint64_t channel[256];
    for (int x = 0; x < 256; ++x) {
      channel[x] = uint64_t{hist[0][c][x]} + hist[1][c][x];
    }
    // _scale_channel: step = (sum of the histogram without its last
    // non-zero bin) // 255.
    int last = 255;
    while (last >= 0 && channel[last] == 0) --last;
    uint64_t total = 0;
    for (int x = 0; x < last; ++x) total += channel[x];
    const uint64_t step = total / 255;
    if (step == 0) {
      for (int x = 0; x < 256; ++x) luts[c][x] = static_cast<uint8_t>(x);
      continue;
    }
    identity = false;
    // lut = (cumsum(hist) + step // 2) // step, shifted one bin right
    // (lut[0] = 0) and clamped to 255.
    uint64_t cumsum = 0;
    luts[c][0] = 0;
    for (int x = 1; x < 256; ++x) {
      cumsum += channel[x - 1];
      luts[c][x] = static_cast<uint8_t>(
          std::min<uint64_t>((cumsum + step / 2) / step, 255));
    }
  }
  if (!identity) ApplyChannelLuts(image, luts);
}

void Grayscale(Image image) {
  ForEachRow(image, [](uint8_t* p, int pixels) { GrayscaleRow(p, pixels); });
}

void GaussianBlur(Image image, int kernel_x, int kernel_y, float sigma_x,
                  float sigma_y, std::vector<float>* scratch) {
  const int width = image.width, height = image.height;
  if (width <= 0 || height <= 0) return;
  const int half_x = kernel_x / 2, half_y = kernel_y / 2;
  const int row_values = 3 * width;
  const int padded_values = 3 * (width + 2 * half_x);
  const int padded_rows = height + 2 * half_y;
  // Scratch: the kernels, one padded source row, one output row and the
  // horizontally blurred image with half_y reflected rows above and below.
  scratch->resize(static_cast<size_t>(kernel_x + kernel_y + padded_values +
                                      row_values) +
                  static_cast<size_t>(row_values) * padded_rows);
  float* kx = scratch->data();
  float* ky = kx + kernel_x;
  float* padded = ky + kernel_y;
  float* out_row = padded + padded_values;
  float* rows = out_row + row_values;
  auto blurred_row = [rows, row_values, half_y](int y) {
    return rows + static_cast<ptrdiff_t>(row_values) * (y + half_y);
  };
  GaussianKernel(kernel_x, sigma_x, kx);
  GaussianKernel(kernel_y, sigma_y, ky);

  // Horizontal pass: each row, reflect-padded, into `rows` as float.
  for (int y = 0; y < height; ++y) {
    const uint8_t* src = image.row(y);
    WidenRow(src, row_values, padded + 3 * half_x);
    for (int x = 1; x <= half_x; ++x) {
      const int left = Reflect(-x, width), right = Reflect(width - 1 + x, width);
      for (int c = 0; c < 3; ++c) {
        padded[3 * (half_x - x) + c] = src[3 * left + c];
        padded[3 * (half_x + width - 1 + x) + c] = src[3 * right + c];
      }
    }
    Convolve(padded, 3, kx, kernel_x, row_values, blurred_row(y));
  }
  const size_t row_bytes = sizeof(float) * row_values;
  for (int y = 1; y <= half_y; ++y) {
    std::memcpy(blurred_row(-y), blurred_row(Reflect(-y, height)), row_bytes);
    std::memcpy(blurred_row(height - 1 + y),
                blurred_row(Reflect(height - 1 + y, height)), row_bytes);
  }
  // Vertical pass into the image, rounded as torch rounds before the cast.
  for (int y = 0; y < height; ++y) {
    Convolve(blurred_row(y - half_y), row_values, ky, kernel_y, row_values,
             out_row);
    RoundRow(out_row, row_values, image.row(y));
  }
}

}  // namespace batchd::server::augment
