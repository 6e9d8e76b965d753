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

// Calls `fn(row, width)` for each row; `row` holds 3 * width bytes.
template <typename Fn>
void ForEachRow(Image image, Fn fn) {
  if (image.stride == ptrdiff_t{3} * image.width) {
    fn(image.data, image.width * image.height);
    return;
  }
  for (int y = 0; y < image.height; ++y) fn(image.row(y), image.width);
}

void ApplyLut(Image image, const uint8_t* lut) {
  ForEachRun(image, [lut](uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = lut[p[i]];
  });
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

}  // namespace

void AdjustBrightness(Image image, double factor) {
  // _blend(img, zeros, factor): the second term is (1 - factor) * 0 = 0,
  // so the result depends on the value alone: a table.
  const BlendWeights w(factor);
  uint8_t lut[256];
  for (int x = 0; x < 256; ++x) {
    lut[x] = ClampTruncate(w.own * static_cast<float>(x) + w.other * 0.0f);
  }
  ApplyLut(image, lut);
}

void AdjustContrast(Image image, double factor) {
  if (image.width <= 0 || image.height <= 0) return;
  // mean(rgb_to_grayscale(img).to(float32)): torch sums the truncated
  // grays in float32, exactly while the sum stays under 2^24 (images up
  // to 65,793 pixels); the integer sum is that exact value.
  uint64_t sum = 0;
  ForEachRow(image, [&sum](const uint8_t* p, int pixels) {
    uint32_t row_sum = 0;
    for (int i = 0; i < pixels; ++i) {
      const float gray =
          GrayFloat(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
      row_sum += static_cast<uint32_t>(static_cast<int>(gray));
    }
    sum += row_sum;
  });
  const float mean = static_cast<float>(sum) /
                     static_cast<float>(int64_t{image.width} * image.height);
  const BlendWeights w(factor);
  const float offset = w.other * mean;
  uint8_t lut[256];
  for (int x = 0; x < 256; ++x) {
    lut[x] = ClampTruncate(w.own * static_cast<float>(x) + offset);
  }
  ApplyLut(image, lut);
}

void AdjustSaturation(Image image, double factor) {
  const BlendWeights w(factor);
  ForEachRow(image, [w](uint8_t* p, int pixels) {
    for (int i = 0; i < pixels; ++i) {
      const float r = p[3 * i], g = p[3 * i + 1], b = p[3 * i + 2];
      const float gray = static_cast<float>(static_cast<int>(GrayFloat(r, g, b)));
      const float other = w.other * gray;
      p[3 * i + 0] = ClampTruncate(w.own * r + other);
      p[3 * i + 1] = ClampTruncate(w.own * g + other);
      p[3 * i + 2] = ClampTruncate(w.own * b + other);
    }
  });
}

void AdjustHue(Image image, float hue_factor) {
  // img.to(float32) / 255.0, per value.
  float unit[256];
  for (int x = 0; x < 256; ++x) unit[x] = static_cast<float>(x) / 255.0f;
  ForEachRow(image, [&unit, hue_factor](uint8_t* p, int pixels) {
    for (int i = 0; i < pixels; ++i) {
      const float r = unit[p[3 * i]];
      const float g = unit[p[3 * i + 1]];
      const float b = unit[p[3 * i + 2]];
      // _rgb2hsv.
      const float maxc = std::max(std::max(r, g), b);
      const float minc = std::min(std::min(r, g), b);
      const bool eqc = maxc == minc;
      const float cr = maxc - minc;
      const float s = cr / (eqc ? 1.0f : maxc);
      const float cr_divisor = eqc ? 1.0f : cr;
      const float rc = (maxc - r) / cr_divisor;
      const float gc = (maxc - g) / cr_divisor;
      const float bc = (maxc - b) / cr_divisor;
      // The masks are 0 or 1; 0 * x adds only a zero.
      const float hr = maxc == r ? bc - gc : 0.0f;
      const float hg = (maxc == g && maxc != r) ? 2.0f + rc - bc : 0.0f;
      const float hb = (maxc != g && maxc != r) ? 4.0f + gc - rc : 0.0f;
      float h = hr + hg + hb;
      h = std::fmod(h / 6.0f + 1.0f, 1.0f);
      // (h + hue_factor) % 1.0: torch.remainder.
      h = std::fmod(h + hue_factor, 1.0f);
      if (h < 0.0f) h += 1.0f;
      // _hsv2rgb.
      const float v = maxc;
      const float h6 = h * 6.0f;
      const float fi = std::floor(h6);
      const float f = h6 - fi;
      const float pv = std::min(std::max(v * (1.0f - s), 0.0f), 1.0f);
      const float qv = std::min(std::max(v * (1.0f - s * f), 0.0f), 1.0f);
      const float tv =
          std::min(std::max(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
      float out_r, out_g, out_b;
      switch (static_cast<int>(fi) % 6) {
        case 0: out_r = v; out_g = tv; out_b = pv; break;
        case 1: out_r = qv; out_g = v; out_b = pv; break;
        case 2: out_r = pv; out_g = v; out_b = tv; break;
        case 3: out_r = pv; out_g = qv; out_b = v; break;
        case 4: out_r = tv; out_g = pv; out_b = v; break;
        default: out_r = v; out_g = pv; out_b = qv; break;
      }
      // (img * 255.0).to(torch.uint8).
      p[3 * i + 0] = static_cast<uint8_t>(static_cast<int>(out_r * 255.0f));
      p[3 * i + 1] = static_cast<uint8_t>(static_cast<int>(out_g * 255.0f));
      p[3 * i + 2] = static_cast<uint8_t>(static_cast<int>(out_b * 255.0f));
    }
  });
}

void AdjustSharpness(Image image, double factor,
                     std::vector<uint8_t>* scratch) {
  const int width = image.width, height = image.height;
  if (width <= 2 || height <= 2) return;
  const BlendWeights w(factor);
  const size_t row_bytes = size_t{3} * width;
  // The unmodified rows y - 1 and y, since rows are blended in place.
  scratch->resize(2 * row_bytes);
  uint8_t* above = scratch->data();
  uint8_t* here = above + row_bytes;
  std::memcpy(here, image.row(0), row_bytes);
  // Border pixels blend with themselves (the degenerate image keeps them).
  auto blend_row = [w](uint8_t* p, const uint8_t* blurred, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      p[i] = ClampTruncate(w.own * static_cast<float>(p[i]) +
                           w.other * static_cast<float>(blurred[i]));
    }
  };
  blend_row(image.row(0), here, row_bytes);
  for (int y = 1; y < height - 1; ++y) {
    std::swap(above, here);
    uint8_t* p = image.row(y);
    std::memcpy(here, p, row_bytes);
    const uint8_t* below = image.row(y + 1);
    const size_t last = row_bytes - 3;
    p[0] = ClampTruncate(w.own * static_cast<float>(here[0]) +
                         w.other * static_cast<float>(here[0]));
    p[1] = ClampTruncate(w.own * static_cast<float>(here[1]) +
                         w.other * static_cast<float>(here[1]));
    p[2] = ClampTruncate(w.own * static_cast<float>(here[2]) +
                         w.other * static_cast<float>(here[2]));
    for (size_t i = 3; i < last; ++i) {
      // conv2d with [[1,1,1],[1,5,1],[1,1,1]] / 13 is k / 13 for the
      // integer k below; torch.round of it never meets a tie (k / 13 is
      // at least 1/26 away from n + 0.5), so the float32 conv rounds to
      // floor((2k + 13) / 26).
      const int k = above[i - 3] + above[i] + above[i + 3] + here[i - 3] +
                    5 * here[i] + here[i + 3] + below[i - 3] + below[i] +
                    below[i + 3];
      const int blurred = (2 * k + 13) / 26;
      p[i] = ClampTruncate(w.own * static_cast<float>(here[i]) +
                           w.other * static_cast<float>(blurred));
    }
    for (size_t i = last; i < row_bytes; ++i) {
      p[i] = ClampTruncate(w.own * static_cast<float>(here[i]) +
                           w.other * static_cast<float>(here[i]));
    }
  }
  uint8_t* bottom = image.row(height - 1);
  blend_row(bottom, bottom, row_bytes);
}

void Posterize(Image image, int bits) {
  // img & -int(2 ** (8 - bits)), the mask cast to uint8 (bits 0: 0).
  const uint8_t mask = static_cast<uint8_t>(-(1 << (8 - bits)));
  ForEachRun(image, [mask](uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] &= mask;
  });
}

void Solarize(Image image, float threshold) {
  // `img >= threshold` compares in float32: the first integer at or
  // above the threshold is where inversion starts.
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
  });
  uint8_t luts[3][256];
  bool identity = true;
  for (int c = 0; c < 3; ++c) {
    if (hi[c] <= lo[c]) {
      // scale = 255 / 0 is not finite: minimum 0, scale 1.
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
  uint32_t hist[3][256] = {};
  ForEachRow(image, [&hist](const uint8_t* p, int pixels) {
    for (int i = 0; i < pixels; ++i) {
      ++hist[0][p[3 * i]];
      ++hist[1][p[3 * i + 1]];
      ++hist[2][p[3 * i + 2]];
    }
  });
  uint8_t luts[3][256];
  bool identity = true;
  for (int c = 0; c < 3; ++c) {
    // _scale_channel: step = (sum of the histogram without its last
    // non-zero bin) // 255.
    int last = 255;
    while (last >= 0 && hist[c][last] == 0) --last;
    uint64_t total = 0;
    for (int x = 0; x < last; ++x) total += hist[c][x];
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
      cumsum += hist[c][x - 1];
      luts[c][x] = static_cast<uint8_t>(
          std::min<uint64_t>((cumsum + step / 2) / step, 255));
    }
  }
  if (!identity) ApplyChannelLuts(image, luts);
}

void Grayscale(Image image) {
  ForEachRow(image, [](uint8_t* p, int pixels) {
    for (int i = 0; i < pixels; ++i) {
      const float r = p[3 * i], g = p[3 * i + 1], b = p[3 * i + 2];
      const uint8_t gray =
          static_cast<uint8_t>(static_cast<int>(GrayFloat(r, g, b)));
      p[3 * i + 0] = gray;
      p[3 * i + 1] = gray;
      p[3 * i + 2] = gray;
    }
  });
}

void GaussianBlur(Image image, int kernel_x, int kernel_y, float sigma_x,
                  float sigma_y, std::vector<float>* scratch) {
  const int width = image.width, height = image.height;
  if (width <= 0 || height <= 0) return;
  const int half_x = kernel_x / 2, half_y = kernel_y / 2;
  const int row_values = 3 * width;
  const int padded_values = 3 * (width + 2 * half_x);
  // Scratch: the kernels, one padded source row, one accumulator row and
  // the horizontally blurred image.
  scratch->resize(static_cast<size_t>(kernel_x + kernel_y + padded_values +
                                      row_values) +
                  static_cast<size_t>(row_values) * height);
  float* kx = scratch->data();
  float* ky = kx + kernel_x;
  float* padded = ky + kernel_y;
  float* acc = padded + padded_values;
  float* rows = acc + row_values;
  GaussianKernel(kernel_x, sigma_x, kx);
  GaussianKernel(kernel_y, sigma_y, ky);

  // Horizontal pass: each row, reflect-padded, into `rows` as float.
  for (int y = 0; y < height; ++y) {
    const uint8_t* src = image.row(y);
    for (int x = -half_x; x < width + half_x; ++x) {
      const uint8_t* pixel = src + 3 * Reflect(x, width);
      float* out = padded + 3 * (x + half_x);
      out[0] = pixel[0];
      out[1] = pixel[1];
      out[2] = pixel[2];
    }
    float* dst = rows + static_cast<size_t>(row_values) * y;
    for (int i = 0; i < row_values; ++i) dst[i] = 0.0f;
    for (int j = 0; j < kernel_x; ++j) {
      const float k = kx[j];
      const float* in = padded + 3 * j;
      for (int i = 0; i < row_values; ++i) dst[i] += k * in[i];
    }
  }
  // Vertical pass into the image, rounded as torch rounds before the cast.
  for (int y = 0; y < height; ++y) {
    for (int i = 0; i < row_values; ++i) acc[i] = 0.0f;
    for (int j = 0; j < kernel_y; ++j) {
      const float k = ky[j];
      const float* in =
          rows + static_cast<size_t>(row_values) * Reflect(y + j - half_y, height);
      for (int i = 0; i < row_values; ++i) acc[i] += k * in[i];
    }
    uint8_t* out = image.row(y);
    for (int i = 0; i < row_values; ++i) {
      const float v = std::min(std::max(RoundHalfEven(acc[i]), 0.0f), 255.0f);
      out[i] = static_cast<uint8_t>(static_cast<int>(v));
    }
  }
}

}  // namespace batchd::server::augment
