#include "server/augment/op_call.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/augment/color_ops.h"

namespace batchd::server::augment {
namespace {

void ApplyOne(const OpCall& call, Image image, Scratch* scratch);

// AugMix's mixing: float32 throughout, in torchvision's order of
// operations (a product, then a sum, each rounded to float32: this file
// is compiled with -ffp-contract=off so that no FMA fuses them).
void ApplyAugMix(const OpCall& call, Image image, Scratch* scratch) {
  const size_t row = size_t{3} * static_cast<size_t>(image.width);
  const size_t n = row * static_cast<size_t>(image.height);
  std::vector<uint8_t>& original = scratch->original;
  std::vector<uint8_t>& chain = scratch->chain;
  std::vector<float>& mix = scratch->mix;
  original.resize(n);
  mix.resize(n);
  for (int y = 0; y < image.height; ++y) {
    std::memcpy(original.data() + static_cast<size_t>(y) * row, image.row(y),
                row);
  }
  const float w0 = call.mix_weights.empty() ? 1.0f : call.mix_weights[0];
  for (size_t i = 0; i < n; ++i) mix[i] = w0 * static_cast<float>(original[i]);
  for (size_t c = 0; c < call.chains.size(); ++c) {
    chain = original;
    const Image chain_image{chain.data(), image.width, image.height,
                            static_cast<ptrdiff_t>(row)};
    for (const OpCall& op : call.chains[c]) ApplyOne(op, chain_image, scratch);
    const float w =
        c + 1 < call.mix_weights.size() ? call.mix_weights[c + 1] : 0.0f;
    for (size_t i = 0; i < n; ++i) {
      const float term = w * static_cast<float>(chain[i]);
      mix[i] = mix[i] + term;
    }
  }
  for (int y = 0; y < image.height; ++y) {
    uint8_t* out = image.row(y);
    const float* in = mix.data() + static_cast<size_t>(y) * row;
    for (size_t i = 0; i < row; ++i) {
      // .to(torch.uint8): truncation; the weights sum to 1, so the value
      // stays in [0, 255] but for float32 rounding, clamped here.
      out[i] = static_cast<uint8_t>(std::clamp(in[i], 0.0f, 255.0f));
    }
  }
}

void ApplyOne(const OpCall& call, Image image, Scratch* scratch) {
  switch (call.fn) {
    case OpFn::kIdentity:
      return;
    case OpFn::kAffine: {
      AffineParams params = call.affine;
      params.fill_none = call.fill_none;
      Affine(image, params, &scratch->bytes);
      return;
    }
    case OpFn::kRotate: {
      // F.rotate is F.affine with the angle negated, about the centre
      // (Rotate() itself has no fill=None).
      AffineParams params;
      params.angle = -call.affine.angle;
      params.interpolation = call.affine.interpolation;
      params.fill = call.affine.fill;
      params.fill_none = call.fill_none;
      Affine(image, params, &scratch->bytes);
      return;
    }
    // The factors stay in double, as torchvision computes 1 - factor in
    // double before the float32 blend.
    case OpFn::kAdjustBrightness:
      AdjustBrightness(image, call.factor);
      return;
    case OpFn::kAdjustSaturation:
      AdjustSaturation(image, call.factor);
      return;
    case OpFn::kAdjustContrast:
      AdjustContrast(image, call.factor);
      return;
    case OpFn::kAdjustSharpness:
      AdjustSharpness(image, call.factor, &scratch->bytes);
      return;
    case OpFn::kAdjustHue:
      AdjustHue(image, static_cast<float>(call.factor));
      return;
    case OpFn::kPosterize:
      Posterize(image, call.bits);
      return;
    case OpFn::kSolarize:
      Solarize(image, static_cast<float>(call.threshold));
      return;
    case OpFn::kAutocontrast:
      Autocontrast(image);
      return;
    case OpFn::kEqualize:
      Equalize(image);
      return;
    case OpFn::kInvert:
      Invert(image);
      return;
    case OpFn::kGrayscale:
      Grayscale(image);
      return;
    case OpFn::kGaussianBlur:
      GaussianBlur(image, call.kernel_x, call.kernel_y,
                   static_cast<float>(call.sigma),
                   static_cast<float>(call.sigma), &scratch->floats);
      return;
    case OpFn::kVerticalFlip:
      VerticalFlip(image);
      return;
    case OpFn::kAugMix:
      ApplyAugMix(call, image, scratch);
      return;
  }
}

std::string F32(float v) { return absl::StrFormat("%.9g", v); }
std::string F64(double v) { return absl::StrFormat("%.17g", v); }

const char* InterpolationName(Interpolation interpolation) {
  switch (interpolation) {
    case Interpolation::kNearest:
      return "nearest";
    case Interpolation::kBilinear:
      return "bilinear";
    case Interpolation::kBicubic:
      return "bicubic";
  }
  return "nearest";
}

std::string Fill(const OpCall& call) {
  if (call.fill_none) return "None";
  return absl::StrCat("[", call.affine.fill[0], ", ", call.affine.fill[1], ", ",
                      call.affine.fill[2], "]");
}

std::string DescribeOne(const OpCall& call) {
  const AffineParams& a = call.affine;
  switch (call.fn) {
    case OpFn::kIdentity:
      return "identity()";
    case OpFn::kAffine:
      return absl::StrCat(
          "affine(angle=", F32(a.angle), ", translate=[", F32(a.translate_x),
          ", ", F32(a.translate_y), "], scale=", F32(a.scale), ", shear=[",
          F32(a.shear_x), ", ", F32(a.shear_y), "], center=",
          a.center_set
              ? absl::StrCat("[", F32(a.center_x), ", ", F32(a.center_y), "]")
              : "None",
          ", interpolation=", InterpolationName(a.interpolation),
          ", fill=", Fill(call), ")");
    case OpFn::kRotate:
      return absl::StrCat("rotate(angle=", F32(a.angle), ", interpolation=",
                          InterpolationName(a.interpolation),
                          ", fill=", Fill(call), ")");
    case OpFn::kAdjustBrightness:
      return absl::StrCat(
          "adjust_brightness(brightness_factor=", F64(call.factor), ")");
    case OpFn::kAdjustSaturation:
      return absl::StrCat(
          "adjust_saturation(saturation_factor=", F64(call.factor), ")");
    case OpFn::kAdjustContrast:
      return absl::StrCat("adjust_contrast(contrast_factor=", F64(call.factor),
                          ")");
    case OpFn::kAdjustSharpness:
      return absl::StrCat(
          "adjust_sharpness(sharpness_factor=", F64(call.factor), ")");
    case OpFn::kAdjustHue:
      return absl::StrCat("adjust_hue(hue_factor=", F64(call.factor), ")");
    case OpFn::kPosterize:
      return absl::StrCat("posterize(bits=", call.bits, ")");
    case OpFn::kSolarize:
      return absl::StrCat("solarize(threshold=", F64(call.threshold), ")");
    case OpFn::kAutocontrast:
      return "autocontrast()";
    case OpFn::kEqualize:
      return "equalize()";
    case OpFn::kInvert:
      return "invert()";
    case OpFn::kGrayscale:
      return "rgb_to_grayscale(num_output_channels=3)";
    case OpFn::kGaussianBlur:
      return absl::StrCat("gaussian_blur(kernel_size=[", call.kernel_x, ", ",
                          call.kernel_y, "], sigma=[", F64(call.sigma), ", ",
                          F64(call.sigma), "])");
    case OpFn::kVerticalFlip:
      return "vflip()";
    case OpFn::kAugMix: {
      std::vector<std::string> chains;
      for (const std::vector<OpCall>& chain : call.chains) {
        chains.push_back(absl::StrCat("[", Describe(chain), "]"));
      }
      return absl::StrCat(
          "augmix(weights=[",
          absl::StrJoin(call.mix_weights, ", ",
                        [](std::string* out, float w) { out->append(F32(w)); }),
          "], chains=[", absl::StrJoin(chains, ", "), "])");
    }
  }
  return "identity()";
}

}  // namespace

void Apply(const std::vector<OpCall>& calls, Image image, Scratch* scratch) {
  for (const OpCall& call : calls) ApplyOne(call, image, scratch);
}

std::string Describe(const std::vector<OpCall>& calls) {
  return absl::StrJoin(calls, ", ", [](std::string* out, const OpCall& call) {
    out->append(DescribeOne(call));
  });
}

}  // namespace batchd::server::augment
