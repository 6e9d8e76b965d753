#include "server/decode/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#define BATCHD_RESIZE_X86 1
#include <immintrin.h>
#endif

namespace batchd::server {
namespace {

constexpr int kOne = 1 << kResizeWeightBits;
constexpr int kHalf = 1 << (kResizeWeightBits - 1);
// The largest normalised weight (in units of one) that ComputeWeights
// keeps; int16 holds up to 2.
constexpr double kMaxWeight = 1.75;

// std::lround for 0 <= x < 2^31, without the library call: x - trunc(x)
// is exact, so comparing it with 0.5 rounds halves up as lround does.
int RoundNonNegative(double x) {
  const int truncated = static_cast<int>(x);
  return truncated + (x - truncated >= 0.5 ? 1 : 0);
}

// std::lround for |x| < 2^31: halves away from zero.
int RoundHalfAway(double x) {
  return x >= 0 ? RoundNonNegative(x) : -RoundNonNegative(-x);
}

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution kernel with a = -0.5, as PyTorch's antialiased
// bicubic (HelperInterpCubic::aa_filter) writes it.
double Cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// acc >> kResizeWeightBits clamped to a byte: what both passes store. With
// the triangle's non-negative weights (summing to one) the clamp never
// changes a value; the cubic's negative lobes need it.
inline uint8_t ToByte(int32_t acc) {
  return static_cast<uint8_t>(
      std::clamp(acc >> kResizeWeightBits, int32_t{0}, int32_t{255}));
}

}  // namespace

void Resizer::ComputeWeights(ResizeFilter filter, double window_start,
                             double window_size, int in_size, int out_size,
                             bool reverse, AxisWeights* axis) {
  const bool cubic = filter == ResizeFilter::kBicubic;
  const double scale = window_size / out_size;
  const double filter_scale = std::max(scale, 1.0);
  // The triangle's radius is 1, the cubic's 2.
  const double support = (cubic ? 2.0 : 1.0) * filter_scale;
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
      const double t = (lo + k - center + 0.5) * inv_filter_scale;
      w[k] = cubic ? Cubic(t) : Triangle(t);
      total += w[k];
    }
    // The cubic's taps can nearly cancel where the filter's centre lies
    // outside the view; normalised weights past kMaxWeight would overflow
    // int16 (inside the view they stay under 1.2).
    bool degenerate = total <= 0;
    for (int k = 0; k < n && !degenerate; ++k) {
      degenerate = std::fabs(w[k]) > kMaxWeight * total;
    }
    if (degenerate) {
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
      // Triangle: w[k] >= 0 and total > 0. Cubic: |w[k] / total| < 2.
      const int v = RoundHalfAway(w[k] / total * kOne);
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

bool CpuHasAvx2() {
#ifdef BATCHD_RESIZE_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

// acc[c] = kHalf + sum over k < taps of weights[k] * rows[k][c], c < n.
// The hot loop of both passes of the portable resize: contiguous, so the
// compiler vectorises it.
void WeightedSum(const uint8_t* const* rows, const int16_t* weights, int taps,
                 size_t n, int32_t* __restrict acc) {
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

#ifdef BATCHD_RESIZE_X86

// Both AVX2 passes multiply-add pairs of taps with pmaddwd: the two values
// widened to int16 side by side, times (weight k, weight k + 1) packed into
// an int32 (PackPair), gives the int32 sum of both products in one
// instruction (bytes times 14-bit weights cannot overflow it). They round to
// bytes as ToByte does: acc >> 14 clamped to 0..255. The vertical pass
// clamps the sums (when the weights can be negative) and then takes bits
// 14..21; the horizontal pass saturates in its packs. With the triangle's
// weights the sums are always in range and neither clamp changes a byte.

int32_t PackPair(int16_t low, int16_t high) {
  return static_cast<int32_t>(static_cast<uint16_t>(low) |
                              static_cast<uint32_t>(static_cast<uint16_t>(high))
                                  << 16);
}

#define BATCHD_AVX2_INLINE \
  __attribute__((target("avx2"), always_inline)) inline

// Adds weights w (PackPair) times the columns of 32 bytes of two rows, a and
// b, to sums s0..s3: sum s gets columns 4t + s in int32 lane t.
BATCHD_AVX2_INLINE void MultiplyAddPair(__m256i a, __m256i b, __m256i w,
                                        __m256i& s0, __m256i& s1,
                                        __m256i& s2, __m256i& s3) {
  // Int32 lane t of a holds bytes a0 a1 a2 a3 (columns 4t..4t+3), of b
  // b0 b1 b2 b3. Blending 16-bit halves gives a0 a1 b0 b1 and a2 a3 b2 b3;
  // masking or shifting their 16-bit halves gives the int16 pairs (a0, b0),
  // (a1, b1), (a2, b2), (a3, b3) for pmaddwd.
  const __m256i low_bytes = _mm256_set1_epi16(0xFF);
  const __m256i ab01 = _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xAA);
  const __m256i ab23 = _mm256_blend_epi16(_mm256_srli_epi32(a, 16), b, 0xAA);
  s0 = _mm256_add_epi32(s0,
                        _mm256_madd_epi16(_mm256_and_si256(ab01, low_bytes), w));
  s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_srli_epi16(ab01, 8), w));
  s2 = _mm256_add_epi32(s2,
                        _mm256_madd_epi16(_mm256_and_si256(ab23, low_bytes), w));
  s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_srli_epi16(ab23, 8), w));
}

// The 32 bytes of sums s0..s3 of MultiplyAddPair, rounded: byte s of lane t
// is column 4t + s. Bits 14..21 of sum s, static_cast<uint8_t>(sum >> 14),
// are shifted straight to byte s and the rest masked off.
BATCHD_AVX2_INLINE __m256i RoundColumns(__m256i s0, __m256i s1, __m256i s2,
                                        __m256i s3) {
  const __m256i byte = _mm256_set1_epi32(0xFF);
  return _mm256_or_si256(
      _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi32(s0, kResizeWeightBits), byte),
          _mm256_and_si256(_mm256_srli_epi32(s1, kResizeWeightBits - 8),
                           _mm256_slli_epi32(byte, 8))),
      _mm256_or_si256(
          _mm256_and_si256(_mm256_slli_epi32(s2, 16 - kResizeWeightBits),
                           _mm256_slli_epi32(byte, 16)),
          _mm256_and_si256(_mm256_slli_epi32(s3, 24 - kResizeWeightBits),
                           _mm256_slli_epi32(byte, 24))));
}

template <typename T>
BATCHD_AVX2_INLINE __m256i Load32(const T* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

BATCHD_AVX2_INLINE void Store32(uint8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

// Clamps sums s0..s3 to [0, 256 << 14): the range RoundColumns rounds to
// 0..255.
BATCHD_AVX2_INLINE void ClampSums(__m256i& s0, __m256i& s1, __m256i& s2,
                                  __m256i& s3) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i top = _mm256_set1_epi32((256 << kResizeWeightBits) - 1);
  s0 = _mm256_min_epi32(_mm256_max_epi32(s0, zero), top);
  s1 = _mm256_min_epi32(_mm256_max_epi32(s1, zero), top);
  s2 = _mm256_min_epi32(_mm256_max_epi32(s2, zero), top);
  s3 = _mm256_min_epi32(_mm256_max_epi32(s3, zero), top);
}

// The vertical pass for one output row: dst[c] = the rounded weighted sum of
// rows[k][c], c < n, with weights[k] (pairs: the same, paired by PackPair).
// `clamp`: some weights are negative, so sums can leave 0..255.
__attribute__((target("avx2"))) void VerticalRowAvx2(
    const uint8_t* const* rows, const int16_t* weights, const int32_t* pairs,
    int taps, size_t n, bool clamp, uint8_t* dst) {
  if (n < 32) {  // too narrow for one vector: the scalar sum
    for (size_t c = 0; c < n; ++c) {
      int32_t acc = kHalf;
      for (int k = 0; k < taps; ++k) acc += weights[k] * rows[k][c];
      dst[c] = ToByte(acc);
    }
    return;
  }
  // Rows pair up as (rows[k], rows[k + 1]) with weights pairs[k / 2]; an
  // odd last tap pairs its row with itself, at weight 0.
  auto second_row = [&](int k) { return k + 1 < taps ? rows[k + 1] : rows[k]; };
  const __m256i half = _mm256_set1_epi32(kHalf);
  // 64 bytes at a time, for fewer loads of rows and weights per byte.
  size_t c = 0;
  for (; c + 64 <= n; c += 64) {
    __m256i s0 = half, s1 = half, s2 = half, s3 = half;
    __m256i s4 = half, s5 = half, s6 = half, s7 = half;
    for (int k = 0; k < taps; k += 2) {
      const uint8_t* r0 = rows[k] + c;
      const uint8_t* r1 = second_row(k) + c;
      const __m256i w = _mm256_set1_epi32(pairs[k / 2]);
      MultiplyAddPair(Load32(r0), Load32(r1), w, s0, s1, s2, s3);
      MultiplyAddPair(Load32(r0 + 32), Load32(r1 + 32), w, s4, s5, s6, s7);
    }
    if (clamp) {
      ClampSums(s0, s1, s2, s3);
      ClampSums(s4, s5, s6, s7);
    }
    Store32(dst + c, RoundColumns(s0, s1, s2, s3));
    Store32(dst + c + 32, RoundColumns(s4, s5, s6, s7));
  }
  // Then 32 at a time; the last 32 end at n, overlapping the ones before:
  // no reads past the rows (the last may end a buffer), and the overlap is
  // rewritten with the same bytes.
  for (; c < n; c += 32) {
    const size_t at = std::min(c, n - 32);
    __m256i s0 = half, s1 = half, s2 = half, s3 = half;
    for (int k = 0; k < taps; k += 2) {
      MultiplyAddPair(Load32(rows[k] + at), Load32(second_row(k) + at),
                      _mm256_set1_epi32(pairs[k / 2]), s0, s1, s2, s3);
    }
    if (clamp) ClampSums(s0, s1, s2, s3);
    Store32(dst + at, RoundColumns(s0, s1, s2, s3));
  }
}

// 16 bytes from p + lo in the low lane and from p + hi in the high lane.
BATCHD_AVX2_INLINE __m256i LoadLanes(const uint8_t* p, int32_t lo,
                                     int32_t hi) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + hi)), 1);
}

// The horizontal pass for one output row, 8 pixels (a group) at a time:
// accumulator q holds the R, G, B (and an unused 0) sums of pixel q of the
// group in its low lane and of pixel q + 4 in its high lane. Each pixel
// reads its taps from its own offset, 16 bytes (5 pixels) for two tap pairs,
// so `row` needs readable padding past its last pixel (see
// ResizeRowsAvx2). Writes
// `groups` * 8 pixels: HWC, 24 bytes per group, or CHW, three planes `plane`
// bytes apart, 8 bytes per group in each; dst needs 8 bytes of slack after
// the last group.
__attribute__((target("avx2"))) void HorizontalRowAvx2(
    const uint8_t* row, const int32_t* offset, const int* pairs,
    const int32_t* weights, int max_pairs, int groups, PixelLayout layout,
    size_t plane, uint8_t* dst) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  // Pixels k, k + 1 (bytes R G B R G B from 0) and k + 2, k + 3 (from 6) as
  // int16 pairs R R G G B B 0 0.
  const __m256i first_pair = _mm256_setr_epi8(
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m256i second_pair = _mm256_setr_epi8(
      6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,  //
      6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  for (int g = 0; g < groups; ++g) {
    const int32_t* off = offset + g * 8;
    const int32_t* w = weights + static_cast<size_t>(g) * max_pairs * 32;
    __m256i acc[4] = {half, half, half, half};
    int m = 0;
    for (; m + 2 <= pairs[g]; m += 2, w += 64) {
      const uint8_t* r = row + 6 * m;
      for (int q = 0; q < 4; ++q) {
        const __m256i v = LoadLanes(r, off[q], off[q + 4]);
        acc[q] = _mm256_add_epi32(
            _mm256_add_epi32(
                acc[q],
                _mm256_madd_epi16(_mm256_shuffle_epi8(v, first_pair),
                                  Load32(w + 8 * q))),
            _mm256_madd_epi16(_mm256_shuffle_epi8(v, second_pair),
                              Load32(w + 32 + 8 * q)));
      }
    }
    if (m < pairs[g]) {
      const uint8_t* r = row + 6 * m;
      for (int q = 0; q < 4; ++q) {
        const __m256i v = LoadLanes(r, off[q], off[q + 4]);
        acc[q] = _mm256_add_epi32(
            acc[q], _mm256_madd_epi16(_mm256_shuffle_epi8(v, first_pair),
                                      Load32(w + 8 * q)));
      }
    }
    for (__m256i& a : acc) a = _mm256_srai_epi32(a, kResizeWeightBits);
    // Bytes R G B 0 of pixels 0..3 in the low lane, 4..7 in the high lane,
    // clamped to 0..255 by the saturating packs.
    const __m256i rgb0 =
        _mm256_packus_epi16(_mm256_packs_epi32(acc[0], acc[1]),
                            _mm256_packs_epi32(acc[2], acc[3]));
    if (layout == PixelLayout::kHWC) {
      const __m256i packed = _mm256_permutevar8x32_epi32(
          _mm256_shuffle_epi8(
              rgb0, _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14,
                                     -1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8, 9,
                                     10, 12, 13, 14, -1, -1, -1, -1)),
          _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + g * 24), packed);
    } else {
      // 8 bytes of R, then G, then B.
      const __m256i planar = _mm256_permutevar8x32_epi32(
          _mm256_shuffle_epi8(
              rgb0, _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14,
                                     -1, -1, -1, -1, 0, 4, 8, 12, 1, 5, 9, 13,
                                     2, 6, 10, 14, -1, -1, -1, -1)),
          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      const __m128i rg = _mm256_castsi256_si128(planar);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + g * 8), rg);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + plane + g * 8),
                       _mm_unpackhi_epi64(rg, rg));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 2 * plane + g * 8),
                       _mm256_extracti128_si256(planar, 1));
    }
  }
}

#endif  // BATCHD_RESIZE_X86

}  // namespace

Resizer::Resizer() : use_avx2_(CpuHasAvx2()) {}

void Resizer::UsePortableCodeForTesting(bool portable) {
  use_avx2_ = !portable && CpuHasAvx2();
}

void Resizer::Resize(const RgbView& src, const ResizeRequest& request,
                     uint8_t* out) {
  const int out_w = request.out_width;
  const int out_h = request.out_height;
  ComputeWeights(request.filter, request.x, request.width, src.width, out_w,
                 request.flip, &horizontal_);
  ComputeWeights(request.filter, request.y, request.height, src.height,
                 out_h, /*reverse=*/false, &vertical_);

  // Source columns the horizontal pass needs.
  int col_lo = src.width;
  int col_hi = 0;
  for (int j = 0; j < out_w; ++j) {
    col_lo = std::min(col_lo, horizontal_.start[j]);
    col_hi = std::max(col_hi, horizontal_.start[j] + horizontal_.count[j]);
  }
  // Both compute the same integer sums, so they give the same bytes.
#ifdef BATCHD_RESIZE_X86
  if (use_avx2_) return ResizeRowsAvx2(src, request, col_lo, col_hi, out);
#endif
  ResizeTransposed(src, request, col_lo, col_hi, out);
}

void Resizer::ResizeTransposed(const RgbView& src,
                               const ResizeRequest& request, int col_lo,
                               int col_hi, uint8_t* out) {
  // Vertical pass first, then the horizontal pass on a transposed
  // intermediate, so that both passes are contiguous weighted row sums
  // (WeightedSum) and the vertical pass reads only the output's rows:
  //   1. for each output row i: acc = weighted sum of the source rows it
  //      needs, over the columns the horizontal filter needs; stored
  //      transposed, intermediate_[x][i] (one RGB triple per entry);
  //   2. for each output column j: acc = weighted sum of the transposed
  //      rows x it needs; stored (transposed back) into `out` in the
  //      requested layout. The flip is in the horizontal weights.
  // Weights sum to exactly 1 << kResizeWeightBits; each pass's rounded
  // result is clamped to a byte (a no-op for the triangle's non-negative
  // weights, needed for the cubic's negative lobes).
  const int out_w = request.out_width;
  const int out_h = request.out_height;
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
      dst[0] = ToByte(a[0]);
      dst[1] = ToByte(a[1]);
      dst[2] = ToByte(a[2]);
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
        dst[0] = ToByte(a[0]);
        dst[1] = ToByte(a[1]);
        dst[2] = ToByte(a[2]);
        a += 3;
        dst += row_bytes;
      }
    } else {
      uint8_t* r = out + j;
      uint8_t* g = r + plane;
      uint8_t* b = g + plane;
      for (int i = 0; i < out_h; ++i) {
        const size_t at = static_cast<size_t>(i) * out_w;
        r[at] = ToByte(a[0]);
        g[at] = ToByte(a[1]);
        b[at] = ToByte(a[2]);
        a += 3;
      }
    }
  }
}

#ifdef BATCHD_RESIZE_X86

void Resizer::BuildPairTaps(const AxisWeights& axis, int out_size, int first,
                            PairTaps* taps) {
  const int groups = (out_size + 7) / 8;
  taps->max_pairs = (axis.max_taps + 1) / 2;
  // Pixels past out_size (the last group's padding) read offset 0 with
  // weight 0.
  taps->offset.assign(static_cast<size_t>(groups) * 8, 0);
  taps->pairs.assign(groups, 0);
  taps->weights.assign(static_cast<size_t>(groups) * taps->max_pairs * 32, 0);
  for (int j = 0; j < out_size; ++j) {
    const int g = j / 8;
    const int q = j % 4;          // accumulator
    const int lane = j % 8 / 4;   // its 128-bit lane
    const int count = axis.count[j];
    const int16_t* w = &axis.weights[static_cast<size_t>(j) * axis.max_taps];
    taps->offset[j] = (axis.start[j] - first) * 3;
    taps->pairs[g] = std::max(taps->pairs[g], (count + 1) / 2);
    for (int k = 0; k < count; k += 2) {
      const int32_t pair = PackPair(w[k], k + 1 < count ? w[k + 1] : 0);
      int32_t* lanes =
          &taps->weights[((static_cast<size_t>(g) * taps->max_pairs + k / 2) *
                              4 + q) * 8 + lane * 4];
      std::fill(lanes, lanes + 4, pair);
    }
  }
}

void Resizer::ResizeRowsAvx2(const RgbView& src,
                             const ResizeRequest& request, int col_lo,
                             int col_hi, uint8_t* out) {
  // Vertical pass, then horizontal pass, one output row at a time:
  //   1. row_ = the weighted sum of the source rows output row i needs,
  //      over the columns the horizontal filter needs, rounded to bytes;
  //   2. output pixel (i, j) = the weighted sum of the RGB triples of row_
  //      that pixel j needs, rounded to bytes, written in the requested
  //      layout. The flip is in the horizontal weights.
  // Weights sum to exactly 1 << kResizeWeightBits; each pass's rounded
  // result is clamped to a byte (a no-op for the triangle's non-negative
  // weights, needed for the cubic's negative lobes).
  const int out_w = request.out_width;
  const int out_h = request.out_height;
  const bool clamp = request.filter != ResizeFilter::kBilinear;
  const size_t row_bytes = static_cast<size_t>(col_hi - col_lo) * 3;
  const int groups = (out_w + 7) / 8;
  const size_t padded_w = static_cast<size_t>(groups) * 8;
  BuildPairTaps(horizontal_, out_w, col_lo, &horizontal_pairs_);
  // The last pixel's last tap pair loads 16 bytes from up to
  // 6 * (max_pairs - 1) bytes past its first tap; zeros, weighted 0.
  row_.assign(row_bytes + 6 * horizontal_pairs_.max_pairs + 16, 0);
  out_row_.resize(padded_w * 3 + 8);
  rows_.resize(vertical_.max_taps);
  vertical_pairs_.resize((vertical_.max_taps + 1) / 2);

  const int v_taps = vertical_.max_taps;
  const uint8_t* src_cols = src.data + static_cast<ptrdiff_t>(col_lo) * 3;
  const size_t out_row_bytes = static_cast<size_t>(out_w) * 3;
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  for (int i = 0; i < out_h; ++i) {
    // 1. Vertical pass into row_.
    const int n = vertical_.count[i];
    for (int k = 0; k < n; ++k) {
      rows_[k] = src_cols +
                 static_cast<ptrdiff_t>(vertical_.start[i] + k) * src.stride;
    }
    const int16_t* v_weights =
        &vertical_.weights[static_cast<size_t>(i) * v_taps];
    // 2. Horizontal pass into output row i.
    uint8_t* dst = request.layout == PixelLayout::kHWC
                       ? out + i * out_row_bytes
                       : out + static_cast<size_t>(i) * out_w;
    for (int k = 0; k < n; k += 2) {
      vertical_pairs_[k / 2] =
          PackPair(v_weights[k], k + 1 < n ? v_weights[k + 1] : int16_t{0});
    }
    VerticalRowAvx2(rows_.data(), v_weights, vertical_pairs_.data(), n,
                    row_bytes, clamp, row_.data());
    HorizontalRowAvx2(row_.data(), horizontal_pairs_.offset.data(),
                      horizontal_pairs_.pairs.data(),
                      horizontal_pairs_.weights.data(),
                      horizontal_pairs_.max_pairs, groups, request.layout,
                      padded_w, out_row_.data());
    // Written whole groups into out_row_; copy out the row's pixels.
    if (request.layout == PixelLayout::kHWC) {
      std::memcpy(dst, out_row_.data(), out_row_bytes);
    } else {
      for (int c = 0; c < 3; ++c) {
        std::memcpy(dst + c * plane, out_row_.data() + c * padded_w, out_w);
      }
    }
  }
}

#endif  // BATCHD_RESIZE_X86

}  // namespace batchd::server
