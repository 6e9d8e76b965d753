// Normalisation of uint8 image batches to the network's input type, on the
// GPU (NormalizeOnDevice) or on the CPU (NormalizeCpu, the reference and the
// no-device fallback). Both compute, per channel c,
//
//   out = fma(x, scale[c], bias[c])   with  scale[c] = 1 / (255 * std[c]),
//                                          bias[c]  = -mean[c] / std[c]
//
// i.e. (x / 255 - mean) / std with torchvision-style mean/std in [0, 1]
// units. scale and bias are rounded to float once, on the host, and the fma
// is a single correctly rounded operation on both sides, so float32 outputs
// are bit-identical; float16 and bfloat16 are rounded to nearest even from
// that float on both sides. uint8 output copies the bytes (mean/std unused),
// which makes a layout change (NHWC <-> NCHW) available without conversion.
//
// One pass reads each input byte once and writes each output once: the
// kernel is memory-bound.
#ifndef BATCHD_CLIENT_CUDA_NORMALIZE_H_
#define BATCHD_CLIENT_CUDA_NORMALIZE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/cuda/runtime.h"
#include "client/cuda/status.h"

namespace batchd::cuda {

// Memory order of a batch. NHWC is channels-last.
enum class Layout { kNHWC, kNCHW };
enum class DType { kUint8, kFloat32, kFloat16, kBFloat16 };

inline constexpr int kMaxChannels = 4;

size_t DTypeBytes(DType dtype);
const char* DTypeName(DType dtype);
const char* LayoutName(Layout layout);

// What the consumer wants.
struct NormalizeSpec {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  // Per channel, in [0, 1] units (ImageNet: {0.485, 0.456, 0.406} and
  // {0.229, 0.224, 0.225}). Empty means mean 0 and std 1 (x / 255). One value
  // applies to every channel. Ignored for uint8 output.
  std::vector<float> mean;
  std::vector<float> std;
};

// A resolved normalisation for one batch shape. Build with
// MakeNormalizeParams.
struct NormalizeParams {
  uint64_t n = 0, c = 0, h = 0, w = 0;
  Layout in_layout = Layout::kNHWC;
  Layout out_layout = Layout::kNCHW;
  DType out_dtype = DType::kFloat32;
  float scale[kMaxChannels] = {};
  float bias[kMaxChannels] = {};

  uint64_t elements() const { return n * c * h * w; }
  size_t input_bytes() const { return static_cast<size_t>(elements()); }
  size_t output_bytes() const {
    return static_cast<size_t>(elements()) * DTypeBytes(out_dtype);
  }
  // Output shape in the output layout: [n, c, h, w] or [n, h, w, c].
  std::vector<uint64_t> output_shape() const;
};

// Validates and resolves: `shape` is [n, h, w, c] for NHWC input or
// [n, c, h, w] for NCHW. INVALID_ARGUMENT for a shape of the wrong rank, 0
// or more than kMaxChannels channels, a mean/std list whose length is
// neither 0, 1 nor c, a std that is not finite and positive, or a mean that
// is not finite.
Status MakeNormalizeParams(const std::vector<uint64_t>& shape,
                           Layout in_layout, const NormalizeSpec& spec,
                           NormalizeParams* params);

// The CPU implementation. `src` holds params.input_bytes() bytes, `dst`
// params.output_bytes() bytes; they must not overlap.
void NormalizeCpu(const uint8_t* src, void* dst, const NormalizeParams& params);

// One part of a batch, normalised with its own parameters: a multi-view
// batch (Plan.views) is one part per view, each view with its own shape;
// any other batch is one part. Its input starts `input_offset` bytes into
// the batch's pixels and its output `output_offset` bytes into the output.
struct NormalizePart {
  size_t input_offset = 0;
  size_t output_offset = 0;
  NormalizeParams params;
};

// The parts of a batch whose pixels are `shapes` (each as
// MakeNormalizeParams takes it) one after another: each part's input starts
// where the previous one's ends, and so does its output, so a view of
// input bytes [a, b) is output bytes [a, b) x DTypeBytes(spec.dtype).
// INVALID_ARGUMENT for no shapes, or as MakeNormalizeParams (naming the
// part when there are several).
Status MakeNormalizeParts(const std::vector<std::vector<uint64_t>>& shapes,
                          Layout in_layout, const NormalizeSpec& spec,
                          std::vector<NormalizePart>* parts);

// Where the input and the output of `parts` end: the bytes a batch of
// them reads and writes.
size_t PartsInputBytes(const std::vector<NormalizePart>& parts);
size_t PartsOutputBytes(const std::vector<NormalizePart>& parts);

// NormalizeCpu on each part: `src` holds PartsInputBytes(parts) bytes, `dst`
// PartsOutputBytes(parts) bytes.
void NormalizePartsCpu(const uint8_t* src, void* dst,
                       const std::vector<NormalizePart>& parts);

// Enqueues the same computation on `stream` (device pointers). Returns at
// once; the result is ready when work enqueued on `stream` before a later
// event completes. UNAVAILABLE when built without CUDA.
Status NormalizeOnDevice(const uint8_t* device_src, void* device_dst,
                         const NormalizeParams& params, StreamHandle stream);

// Runs the GPU kernel's fast path (NHWC RGB -> NCHW, h*w % 4 == 0, 16-byte
// aligned buffers) on the host, to check its indexing without a device.
// False, writing nothing, when the fast path does not apply or the library
// was built without CUDA.
bool NormalizeGroupsOnHostForTest(const uint8_t* src, void* dst,
                                  const NormalizeParams& params);

// Rounding to nearest even, as __float2half_rn and __float2bfloat16_rn do.
uint16_t FloatToHalfBits(float value);
uint16_t FloatToBFloat16Bits(float value);
float HalfBitsToFloat(uint16_t bits);
float BFloat16BitsToFloat(uint16_t bits);

}  // namespace batchd::cuda

#endif  // BATCHD_CLIENT_CUDA_NORMALIZE_H_
