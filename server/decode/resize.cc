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

namespace {

// acc[c] = kHalf + sum over k < taps of weights[k] * rows[k][c], c < n.
// The hot loop of both passes: contiguous, so the compiler vectorises it;
// built for AVX2 as well as the baseline ISA and picked at run time
// (integer arithmetic: both give the same bytes).
__attribute__((target_clones("avx2", "default"))) void WeightedSum(
    const uint8_t* const* rows, const int16_t* weights, int taps, size_t n,
    int32_t* __restrict acc) {
  for (size_t c = 0; c < n; ++c) acc[c] = kHalf;
  int k = 0;
  for (; k + 1 < taps; k += 2) {
    const uint8_t* __restrict r0 = rows[k];
    const uint8_t* __restrict r1 = rows[k + 1];
    const int32_t w0 = weights[k], w1 = weights[k + 1];
    for (size_t c = 0; c < n; ++c) acc[c] += w0 * r0[c] + w1 * r1[c];
  }
  if (k < taps) {
    const uint8_t* __restrict r0 = rows[k];
    const int32_t w0 = weights[k];
    for (size_t c = 0; c < n; ++c) acc[c] += w0 * r0[c];
  }
}

}  // namespace

void Resizer::Resize(const RgbView& src, const ResizeRequest& request,
                     uint8_t* out) {
  // Vertical pass first, then the horizontal pass on a transposed
  // intermediate, so that both passes are contiguous weighted row sums
  // (WeightedSum) and the vertical pass reads only the output's rows:
  //   1. for each output row i: acc = weighted sum of the source rows it
  //      needs, over the columns the horizontal filter needs; stored
  //      transposed, intermediate_[x][i] (one RGB triple per entry);
  //   2. for each output column j: acc = weighted sum of the transposed
  //      rows x it needs; stored (transposed back) into `out` in the
  //      requested layout. The flip is in the horizontal weights.
  // Weights sum to exactly 1 << kResizeWeightBits and are non-negative, so
  // each pass's rounded result fits in a byte without clamping.
  const int out_w = request.out_width;
  const int out_h = request.out_height;
  ComputeWeights(request.x, request.width, src.width, out_w, request.flip,
                 &horizontal_);
  ComputeWeights(request.y, request.height, src.height, out_h,
                 /*reverse=*/false, &vertical_);

  // Source columns the horizontal pass needs.
  int col_lo = src.width;
  int col_hi = 0;
  for (int j = 0; j < out_w; ++j) {
    col_lo = std::min(col_lo, horizontal_.start[j]);
    col_hi = std::max(col_hi, horizontal_.start[j] + horizontal_.count[j]);
  }
  const int cols = col_hi - col_lo;
  const size_t column_bytes = static_cast<size_t>(out_h) * 3;  // one x of 1.
  intermediate_.resize(column_bytes * cols);
  acc_.resize(std::max(column_bytes, static_cast<size_t>(cols) * 3));
  rows_.resize(std::max(vertical_.max_taps, horizontal_.max_taps));

  // 1. Vertical pass into intermediate_, transposed.
  const int v_taps = vertical_.max_taps;
  const uint8_t* src_cols = src.data + static_cast<ptrdiff_t>(col_lo) * 3;
  for (int i = 0; i < out_h; ++i) {
    const int n = vertical_.count[i];
    for (int k = 0; k < n; ++k) {
      rows_[k] = src_cols +
                 static_cast<ptrdiff_t>(vertical_.start[i] + k) * src.stride;
    }
    WeightedSum(rows_.data(),
                &vertical_.weights[static_cast<size_t>(i) * v_taps], n,
                static_cast<size_t>(cols) * 3, acc_.data());
    uint8_t* dst = &intermediate_[static_cast<size_t>(i) * 3];
    const int32_t* a = acc_.data();
    for (int x = 0; x < cols; ++x) {
      dst[0] = static_cast<uint8_t>(a[0] >> kResizeWeightBits);
      dst[1] = static_cast<uint8_t>(a[1] >> kResizeWeightBits);
      dst[2] = static_cast<uint8_t>(a[2] >> kResizeWeightBits);
      a += 3;
      dst += column_bytes;
    }
  }

  // 2. Horizontal pass over the transposed rows, written out transposed
  // back.
  const int h_taps = horizontal_.max_taps;
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  for (int j = 0; j < out_w; ++j) {
    const int n = horizontal_.count[j];
    for (int k = 0; k < n; ++k) {
      rows_[k] = &intermediate_[column_bytes *
                                (horizontal_.start[j] + k - col_lo)];
    }
    WeightedSum(rows_.data(),
                &horizontal_.weights[static_cast<size_t>(j) * h_taps], n,
                column_bytes, acc_.data());
    const int32_t* a = acc_.data();
    if (request.layout == PixelLayout::kHWC) {
      uint8_t* dst = out + static_cast<size_t>(j) * 3;
      const size_t row_bytes = static_cast<size_t>(out_w) * 3;
      for (int i = 0; i < out_h; ++i) {
        dst[0] = static_cast<uint8_t>(a[0] >> kResizeWeightBits);
        dst[1] = static_cast<uint8_t>(a[1] >> kResizeWeightBits);
        dst[2] = static_cast<uint8_t>(a[2] >> kResizeWeightBits);
        a += 3;
        dst += row_bytes;
      }
    } else {
      uint8_t* r = out + j;
      uint8_t* g = r + plane;
      uint8_t* b = g + plane;
      for (int i = 0; i < out_h; ++i) {
        const size_t at = static_cast<size_t>(i) * out_w;
        r[at] = static_cast<uint8_t>(a[0] >> kResizeWeightBits);
        g[at] = static_cast<uint8_t>(a[1] >> kResizeWeightBits);
        b[at] = static_cast<uint8_t>(a[2] >> kResizeWeightBits);
        a += 3;
      }
    }
  }
}

}  // namespace batchd::server
