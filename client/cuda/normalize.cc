#include "client/cuda/normalize.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

namespace batchd::cuda {

size_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return 1;
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return "uint8";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

const char* LayoutName(Layout layout) {
  return layout == Layout::kNHWC ? "NHWC" : "NCHW";
}

std::vector<uint64_t> NormalizeParams::output_shape() const {
  if (out_layout == Layout::kNHWC) return {n, h, w, c};
  return {n, c, h, w};
}

Status MakeNormalizeParams(const std::vector<uint64_t>& shape,
                           Layout in_layout, const NormalizeSpec& spec,
                           NormalizeParams* params) {
  if (shape.size() != 4) {
    return InvalidArgumentError("batch shape must have 4 dimensions, got " +
                                std::to_string(shape.size()));
  }
  NormalizeParams p;
  p.n = shape[0];
  if (in_layout == Layout::kNHWC) {
    p.h = shape[1];
    p.w = shape[2];
    p.c = shape[3];
  } else {
    p.c = shape[1];
    p.h = shape[2];
    p.w = shape[3];
  }
  p.in_layout = in_layout;
  p.out_layout = spec.layout;
  p.out_dtype = spec.dtype;
  if (p.c == 0 || p.c > kMaxChannels) {
    return InvalidArgumentError("batch has " + std::to_string(p.c) +
                                " channels; normalisation supports 1 to " +
                                std::to_string(kMaxChannels));
  }
  // Guard the byte counts against overflow.
  const double elements = static_cast<double>(p.n) * p.c * p.h * p.w;
  if (elements * 4 > 9.0e18) {
    return InvalidArgumentError("batch shape is too large");
  }
  auto list_ok = [&](const std::vector<float>& v) {
    return v.empty() || v.size() == 1 || v.size() == p.c;
  };
  if (!list_ok(spec.mean) || !list_ok(spec.std)) {
    return InvalidArgumentError(
        "mean and std need 0, 1 or one value per channel (" +
        std::to_string(p.c) + "), got " + std::to_string(spec.mean.size()) +
        " and " + std::to_string(spec.std.size()));
  }
  for (uint64_t c = 0; c < p.c; ++c) {
    const double mean =
        spec.mean.empty() ? 0.0 : spec.mean[spec.mean.size() == 1 ? 0 : c];
    const double std =
        spec.std.empty() ? 1.0 : spec.std[spec.std.size() == 1 ? 0 : c];
    if (!std::isfinite(mean)) {
      return InvalidArgumentError("mean of channel " + std::to_string(c) +
                                  " is not finite");
    }
    if (!std::isfinite(std) || !(std > 0)) {
      return InvalidArgumentError("std of channel " + std::to_string(c) +
                                  " must be finite and positive");
    }
    p.scale[c] = static_cast<float>(1.0 / (255.0 * std));
    p.bias[c] = static_cast<float>(-mean / std);
  }
  *params = p;
  return OkStatus();
}

uint16_t FloatToHalfBits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (abs >= 0x38800000u) {                       // normal half
    const uint32_t rebased = abs - 0x38000000u;   // exponent 127 -> 15
    const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
    return sign | static_cast<uint16_t>(rounded >> 13);
  }
  if (abs <= 0x33000000u) return sign;  // below half the smallest subnormal
  // Subnormal half: value / 2^-24, rounded to nearest even.
  const uint32_t exponent = abs >> 23;              // 102..112
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;            // 14..24
  const uint32_t kept = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t up = rest > half || (rest == half && (kept & 1u));
  return sign | static_cast<uint16_t>(kept + up);
}

uint16_t FloatToBFloat16Bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u),
                           static_cast<int>(exponent) - 25);
  }
  uint32_t x;
  std::memcpy(&x, &magnitude, sizeof(x));
  x |= sign;
  float out;
  std::memcpy(&out, &x, sizeof(out));
  return out;
}

float BFloat16BitsToFloat(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &x, sizeof(out));
  return out;
}

namespace {

// Every output is a function of (channel, input byte): a 256-entry table per
// channel makes the CPU path one lookup per element.
template <typename T>
void Apply(const uint8_t* src, T* dst, const NormalizeParams& p,
           const T (&table)[kMaxChannels][256]) {
  const uint64_t hw = p.h * p.w;
  const uint64_t c_count = p.c;
  for (uint64_t n = 0; n < p.n; ++n) {
    const uint8_t* in = src + n * hw * c_count;
    T* out = dst + n * hw * c_count;
    if (p.in_layout == p.out_layout) {
      if (p.in_layout == Layout::kNHWC) {
        for (uint64_t i = 0; i < hw; ++i) {
          for (uint64_t c = 0; c < c_count; ++c) {
            out[i * c_count + c] = table[c][in[i * c_count + c]];
          }
        }
      } else {
        for (uint64_t c = 0; c < c_count; ++c) {
          for (uint64_t i = 0; i < hw; ++i) {
            out[c * hw + i] = table[c][in[c * hw + i]];
          }
        }
      }
    } else if (p.in_layout == Layout::kNHWC) {  // -> NCHW
      for (uint64_t i = 0; i < hw; ++i) {
        for (uint64_t c = 0; c < c_count; ++c) {
          out[c * hw + i] = table[c][in[i * c_count + c]];
        }
      }
    } else {  // NCHW -> NHWC
      for (uint64_t i = 0; i < hw; ++i) {
        for (uint64_t c = 0; c < c_count; ++c) {
          out[i * c_count + c] = table[c][in[c * hw + i]];
        }
      }
    }
  }
}

template <typename T, typename Convert>
void Run(const uint8_t* src, void* dst, const NormalizeParams& p,
         Convert convert) {
  T table[kMaxChannels][256];
  for (uint64_t c = 0; c < p.c; ++c) {
    for (int x = 0; x < 256; ++x) {
      table[c][x] = convert(std::fma(static_cast<float>(x), p.scale[c],
                                     p.bias[c]),
                            x);
    }
  }
  Apply<T>(src, static_cast<T*>(dst), p, table);
}

}  // namespace

void NormalizeCpu(const uint8_t* src, void* dst, const NormalizeParams& p) {
  switch (p.out_dtype) {
    case DType::kUint8:
      Run<uint8_t>(src, dst, p,
                   [](float, int x) { return static_cast<uint8_t>(x); });
      break;
    case DType::kFloat32:
      Run<float>(src, dst, p, [](float v, int) { return v; });
      break;
    case DType::kFloat16:
      Run<uint16_t>(src, dst, p,
                    [](float v, int) { return FloatToHalfBits(v); });
      break;
    case DType::kBFloat16:
      Run<uint16_t>(src, dst, p,
                    [](float v, int) { return FloatToBFloat16Bits(v); });
      break;
  }
}

Status MakeNormalizeParts(const std::vector<std::vector<uint64_t>>& shapes,
                          Layout in_layout, const NormalizeSpec& spec,
                          std::vector<NormalizePart>* parts) {
  if (shapes.empty()) return InvalidArgumentError("a batch has no parts");
  std::vector<NormalizePart> out(shapes.size());
  size_t input_offset = 0;
  size_t output_offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Status status =
        MakeNormalizeParams(shapes[i], in_layout, spec, &out[i].params);
    if (!status.ok()) {
      if (shapes.size() == 1) return status;
      return Status(status.code(),
                    "view " + std::to_string(i) + ": " + status.message());
    }
    out[i].input_offset = input_offset;
    out[i].output_offset = output_offset;
    input_offset += out[i].params.input_bytes();
    output_offset += out[i].params.output_bytes();
  }
  *parts = std::move(out);
  return OkStatus();
}

size_t PartsInputBytes(const std::vector<NormalizePart>& parts) {
  if (parts.empty()) return 0;
  return parts.back().input_offset + parts.back().params.input_bytes();
}

size_t PartsOutputBytes(const std::vector<NormalizePart>& parts) {
  if (parts.empty()) return 0;
  return parts.back().output_offset + parts.back().params.output_bytes();
}

void NormalizePartsCpu(const uint8_t* src, void* dst,
                       const std::vector<NormalizePart>& parts) {
  for (const NormalizePart& part : parts) {
    NormalizeCpu(src + part.input_offset,
                 static_cast<uint8_t*>(dst) + part.output_offset, part.params);
  }
}

}  // namespace batchd::cuda
