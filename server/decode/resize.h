// Antialiased separable resize of an RGB window, with the flip and the
// layout write fused into the last pass.
//
// The filter is the triangle (bilinear) kernel or Keys' cubic (bicubic,
// a = -0.5); when shrinking its support is widened by the scale factor, as
// PIL's and torchvision's `antialias=True` resize do, so every source pixel
// contributes. Weights are precomputed per axis in 14-bit fixed point and
// normalised so that they sum to exactly 1 << 14: a constant image stays
// constant, and a same-size integer window is copied exactly. Each pass
// rounds to bytes (bicubic clamps them to 0..255 as well, its weights being
// partly negative).
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
  ResizeFilter filter = ResizeFilter::kBilinear;
};

class Resizer {
 public:
  Resizer();

  // Resizes `request`'s window of `src` into `out` (out_height * out_width * 3
  // bytes, RGB in `request.layout`). REQUIRES: src non-empty, the request's
  // sizes positive.
  void Resize(const RgbView& src, const ResizeRequest& request, uint8_t* out);

  // Uses the portable code even where the CPU has AVX2 (both give the same
  // bytes; tests compare them).
  void UsePortableCodeForTesting(bool portable);

 private:
  // Per-axis filter: for output index j, taps [start[j], start[j] + count[j])
  // with fixed-point weights weights[j * max_taps + k].
  struct AxisWeights {
    std::vector<int> start;
    std::vector<int> count;
    std::vector<int16_t> weights;
    int max_taps = 0;
  };
  static void ComputeWeights(ResizeFilter filter, double window_start,
                             double window_size, int in_size, int out_size,
                             bool reverse, AxisWeights* axis);

  // The horizontal filter regrouped for the AVX2 pass: output pixels in
  // groups of 8, each tap pair of each pixel as an int32 (weight k in the low
  // half, weight k + 1 in the high half) repeated for pmaddwd. See
  // BuildPairTaps and HorizontalRowAvx2 in resize.cc.
  struct PairTaps {
    std::vector<int32_t> offset;   // per pixel: byte offset of its first tap
    std::vector<int> pairs;        // per group: tap pairs to sum
    // Per group, pair and accumulator q < 4: 8 int32 lanes, 4 for pixel q of
    // the group, then 4 for pixel q + 4.
    std::vector<int32_t> weights;
    int max_pairs = 0;
  };
  static void BuildPairTaps(const AxisWeights& axis, int out_size, int first,
                            PairTaps* taps);

  // The two implementations of Resize after the weights, given the source
  // columns [col_lo, col_hi) the horizontal pass reads.
  // Portable: the vertical pass into intermediate_, transposed, then the
  // horizontal pass as contiguous sums over it (both auto-vectorised).
  void ResizeTransposed(const RgbView& src, const ResizeRequest& request,
                        int col_lo, int col_hi, uint8_t* out);
  // x86 with AVX2: both passes per output row, with intrinsics; no
  // transposes.
  void ResizeRowsAvx2(const RgbView& src, const ResizeRequest& request,
                      int col_lo, int col_hi, uint8_t* out);

  AxisWeights horizontal_;
  AxisWeights vertical_;
  PairTaps horizontal_pairs_;
  bool use_avx2_ = false;  // set from the CPU in the constructor
  // AVX2: one output row after the vertical pass: the RGB triples of the
  // source columns the horizontal pass reads, plus zero padding that the AVX2
  // horizontal pass may read (with zero weights).
  std::vector<uint8_t> row_;
  std::vector<uint8_t> out_row_;  // one output row before its copy out
  std::vector<int32_t> vertical_pairs_;  // one row's weights, paired
  // Portable: vertically resized columns, transposed: entry (x, i) is the
  // RGB triple of source column x at output row i, at
  // intermediate_[(x * out_h + i) * 3].
  std::vector<uint8_t> intermediate_;
  std::vector<int32_t> acc_;  // one row's accumulators
  // Both: the rows of one weighted sum.
  std::vector<const uint8_t*> rows_;
};

// Fixed-point precision of the filter weights.
inline constexpr int kResizeWeightBits = 14;

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_RESIZE_H_
