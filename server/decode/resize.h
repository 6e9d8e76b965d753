// Antialiased separable resize of an RGB window, with the flip and the
// layout write fused into the last pass.
//
// The filter is the triangle (bilinear) kernel; when shrinking its support is
// widened by the scale factor, as PIL's and torchvision's `antialias=True`
// resize do, so every source pixel contributes. Weights are precomputed per
// axis in 14-bit fixed point and normalised so that they sum to exactly
// 1 << 14: a constant image stays constant, and a same-size integer window
// is copied exactly.
//
// Coordinates are continuous: source pixel i covers [i, i + 1). Filter taps
// are clamped to the bounds of `src` (not to the window), so pass a view that
// holds exactly the pixels that should contribute; the decoder passes the
// crop window rounded out to whole pixels, which matches torchvision's
// crop-then-resize for integer windows.
//
// Thread-compatible: a Resizer holds scratch buffers; use one per thread.
#ifndef BATCHD_SERVER_DECODE_RESIZE_H_
#define BATCHD_SERVER_DECODE_RESIZE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/decode/crop_spec.h"

namespace batchd::server {

// A read-only RGB image, 3 interleaved bytes per pixel, rows `stride` bytes
// apart. Not owned.
struct RgbView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  ptrdiff_t stride = 0;  // bytes between row starts, >= 3 * width
};

// Where in `src` to read and what to write.
struct ResizeRequest {
  // Window in continuous source coordinates of the view (0 = its left edge).
  double x = 0;
  double y = 0;
  double width = 0;   // > 0
  double height = 0;  // > 0
  int out_width = 0;   // > 0
  int out_height = 0;  // > 0
  bool flip = false;   // mirror left-right
  PixelLayout layout = PixelLayout::kHWC;
};

class Resizer {
 public:
  Resizer() = default;

  // Resizes `request`'s window of `src` into `out` (out_height * out_width * 3
  // bytes, RGB in `request.layout`). REQUIRES: src non-empty, the request's
  // sizes positive.
  void Resize(const RgbView& src, const ResizeRequest& request, uint8_t* out);

 private:
  // Per-axis filter: for output index j, taps [start[j], start[j] + count[j])
  // with fixed-point weights weights[j * max_taps + k].
  struct AxisWeights {
    std::vector<int> start;
    std::vector<int> count;
    std::vector<int16_t> weights;
    int max_taps = 0;
  };
  static void ComputeWeights(double window_start, double window_size,
                             int in_size, int out_size, bool reverse,
                             AxisWeights* axis);

  AxisWeights horizontal_;
  AxisWeights vertical_;
  // Vertically resized columns, transposed: entry (x, i) is the RGB triple
  // of source column x at output row i, at intermediate_[(x * out_h + i) * 3].
  std::vector<uint8_t> intermediate_;
  std::vector<int32_t> acc_;            // one row's accumulators
  std::vector<const uint8_t*> rows_;    // the rows of one weighted sum
};

// Fixed-point precision of the filter weights.
inline constexpr int kResizeWeightBits = 14;

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_RESIZE_H_
