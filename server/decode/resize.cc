#include "server/decode/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace batchd::server {
namespace {

constexpr int kOne = 1 << kResizeWeightBits;
constexpr int kHalf = 1 << (kResizeWeightBits - 1);

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

}  // namespace

void Resizer::ComputeWeights(double window_start, double window_size,
                             int in_size, int out_size, bool reverse,
                             AxisWeights* axis) {
  const double scale = window_size / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // triangle radius is 1
  const double inv_filter_scale = 1.0 / filter_scale;
  axis->max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  axis->start.assign(out_size, 0);
  axis->count.assign(out_size, 0);
  axis->weights.assign(static_cast<size_t>(out_size) * axis->max_taps, 0);
  std::vector<double> w(axis->max_taps);
  for (int j = 0; j < out_size; ++j) {
    const double center = window_start + (j + 0.5) * scale;
    int lo = static_cast<int>(std::floor(center - support + 0.5));
    int hi = static_cast<int>(std::floor(center + support + 0.5));
    lo = std::clamp(lo, 0, in_size - 1);
    hi = std::clamp(hi, lo + 1, in_size);
    int n = std::min(hi - lo, axis->max_taps);
    double total = 0;
    for (int k = 0; k < n; ++k) {
      w[k] = Triangle((lo + k - center + 0.5) * inv_filter_scale);
      total += w[k];
    }
    if (total <= 0) {
      // The window lies outside the view (can only happen for degenerate
      // windows at the edge): use the nearest pixel.
      n = 1;
      w[0] = 1;
      total = 1;
    }
    // Trim zero-weight taps at both ends.
    int first = 0;
    while (first < n - 1 && w[first] == 0) ++first;
    int last = n;
    while (last > first + 1 && w[last - 1] == 0) --last;
    const int out_j = reverse ? out_size - 1 - j : j;
    int16_t* fixed = &axis->weights[static_cast<size_t>(out_j) * axis->max_taps];
    int sum = 0;
    int largest = first;
    for (int k = first; k < last; ++k) {
      const int v = static_cast<int>(std::lround(w[k] / total * kOne));
      fixed[k - first] = static_cast<int16_t>(v);
      sum += v;
      if (w[k] > w[largest]) largest = k;
    }
    // Make the weights sum to exactly one, so constants stay constant.
    fixed[largest - first] = static_cast<int16_t>(fixed[largest - first] +
                                                  (kOne - sum));
    axis->start[out_j] = lo + first;
    axis->count[out_j] = last - first;
  }
}

void Resizer::Resize(const RgbView& src, const ResizeRequest& request,
                     uint8_t* out) {
  const int out_w = request.out_width;
  const int out_h = request.out_height;
  ComputeWeights(request.x, request.width, src.width, out_w, request.flip,
                 &horizontal_);
  ComputeWeights(request.y, request.height, src.height, out_h,
                 /*reverse=*/false, &vertical_);

  // Source rows the vertical pass needs.
  int row_lo = src.height;
  int row_hi = 0;
  for (int j = 0; j < out_h; ++j) {
    row_lo = std::min(row_lo, vertical_.start[j]);
    row_hi = std::max(row_hi, vertical_.start[j] + vertical_.count[j]);
  }
  const size_t out_row_bytes = static_cast<size_t>(out_w) * 3;
  intermediate_.resize(out_row_bytes * (row_hi - row_lo));

  // Horizontal pass: rows [row_lo, row_hi) of src -> intermediate_.
  const int h_taps = horizontal_.max_taps;
  for (int y = row_lo; y < row_hi; ++y) {
    const uint8_t* in = src.data + static_cast<ptrdiff_t>(y) * src.stride;
    uint8_t* dst = &intermediate_[out_row_bytes * (y - row_lo)];
    for (int j = 0; j < out_w; ++j) {
      const uint8_t* p = in + 3 * horizontal_.start[j];
      const int16_t* w = &horizontal_.weights[static_cast<size_t>(j) * h_taps];
      const int n = horizontal_.count[j];
      int r = kHalf, g = kHalf, b = kHalf;
      for (int k = 0; k < n; ++k) {
        r += w[k] * p[3 * k];
        g += w[k] * p[3 * k + 1];
        b += w[k] * p[3 * k + 2];
      }
      // Weights are non-negative and sum to one: no clamping needed.
      dst[3 * j] = static_cast<uint8_t>(r >> kResizeWeightBits);
      dst[3 * j + 1] = static_cast<uint8_t>(g >> kResizeWeightBits);
      dst[3 * j + 2] = static_cast<uint8_t>(b >> kResizeWeightBits);
    }
  }

  // Vertical pass, writing HWC rows (directly, or via row_ for kCHW).
  const int v_taps = vertical_.max_taps;
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  if (request.layout == PixelLayout::kCHW) row_.resize(out_row_bytes);
  acc_.resize(out_row_bytes);
  for (int i = 0; i < out_h; ++i) {
    uint8_t* dst = request.layout == PixelLayout::kHWC
                       ? out + out_row_bytes * i
                       : row_.data();
    const int16_t* w = &vertical_.weights[static_cast<size_t>(i) * v_taps];
    const int n = vertical_.count[i];
    const uint8_t* first =
        &intermediate_[out_row_bytes * (vertical_.start[i] - row_lo)];
    std::fill(acc_.begin(), acc_.end(), kHalf);
    for (int k = 0; k < n; ++k) {
      const uint8_t* in = first + out_row_bytes * k;
      const int wk = w[k];
      int* a = acc_.data();
      for (size_t c = 0; c < out_row_bytes; ++c) a[c] += wk * in[c];
    }
    for (size_t c = 0; c < out_row_bytes; ++c) {
      dst[c] = static_cast<uint8_t>(acc_[c] >> kResizeWeightBits);
    }
    if (request.layout == PixelLayout::kCHW) {
      uint8_t* r = out + static_cast<size_t>(i) * out_w;
      uint8_t* g = r + plane;
      uint8_t* b = g + plane;
      for (int j = 0; j < out_w; ++j) {
        r[j] = dst[3 * j];
        g[j] = dst[3 * j + 1];
        b[j] = dst[3 * j + 2];
      }
    }
  }
}

}  // namespace batchd::server
