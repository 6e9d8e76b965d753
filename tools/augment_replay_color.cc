#include "tools/augment_replay.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/augment/color_ops.h"

namespace batchd::tools {
namespace {

namespace augment = server::augment;

// `key`'s value when it lies in [lo, hi], else an error naming the key.
absl::StatusOr<double> NumberIn(const ReplayArgs& args, const std::string& key,
                                double lo, double hi) {
  absl::StatusOr<double> value = args.Number(key);
  if (!value.ok()) return value.status();
  if (!(*value >= lo && *value <= hi)) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, "=", *value, " is outside [", lo, ", ", hi, "]"));
  }
  return value;
}

// `key`'s value when it is an odd integer >= 1.
absl::StatusOr<int> OddSize(const ReplayArgs& args, const std::string& key) {
  absl::StatusOr<double> value = NumberIn(args, key, 1, 1023);
  if (!value.ok()) return value.status();
  const int size = static_cast<int>(*value);
  if (size != *value || size % 2 == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, "=", *value, " is not an odd integer"));
  }
  return size;
}

}  // namespace

absl::StatusOr<bool> ReplayColorOp(const std::string& op,
                                   const ReplayArgs& args,
                                   augment::Image image) {
  constexpr double kMaxFactor = 1e6;
  if (op == "adjust_brightness" || op == "adjust_contrast" ||
      op == "adjust_saturation" || op == "adjust_sharpness") {
    absl::StatusOr<double> factor = NumberIn(args, "factor", 0, kMaxFactor);
    if (!factor.ok()) return factor.status();
    if (op == "adjust_brightness") {
      augment::AdjustBrightness(image, *factor);
    } else if (op == "adjust_contrast") {
      augment::AdjustContrast(image, *factor);
    } else if (op == "adjust_saturation") {
      augment::AdjustSaturation(image, *factor);
    } else {
      std::vector<uint8_t> scratch;
      augment::AdjustSharpness(image, *factor, &scratch);
    }
    return true;
  }
  if (op == "adjust_hue") {
    absl::StatusOr<double> factor = NumberIn(args, "factor", -0.5, 0.5);
    if (!factor.ok()) return factor.status();
    augment::AdjustHue(image, static_cast<float>(*factor));
    return true;
  }
  if (op == "posterize") {
    absl::StatusOr<double> bits = NumberIn(args, "bits", 0, 8);
    if (!bits.ok()) return bits.status();
    if (*bits != std::floor(*bits)) {
      return absl::InvalidArgumentError("bits= is not an integer");
    }
    augment::Posterize(image, static_cast<int>(*bits));
    return true;
  }
  if (op == "solarize") {
    // torchvision refuses a threshold above the uint8 bound.
    absl::StatusOr<double> threshold = NumberIn(args, "threshold", -1e9, 255);
    if (!threshold.ok()) return threshold.status();
    augment::Solarize(image, static_cast<float>(*threshold));
    return true;
  }
  if (op == "invert") {
    augment::Invert(image);
    return true;
  }
  if (op == "autocontrast") {
    augment::Autocontrast(image);
    return true;
  }
  if (op == "equalize") {
    augment::Equalize(image);
    return true;
  }
  if (op == "grayscale") {
    augment::Grayscale(image);
    return true;
  }
  if (op == "gaussian_blur") {
    absl::StatusOr<int> kernel_x = OddSize(args, "kernel_x");
    if (!kernel_x.ok()) return kernel_x.status();
    absl::StatusOr<int> kernel_y = OddSize(args, "kernel_y");
    if (!kernel_y.ok()) return kernel_y.status();
    absl::StatusOr<double> sigma_x = args.Number("sigma_x");
    if (!sigma_x.ok()) return sigma_x.status();
    absl::StatusOr<double> sigma_y = args.Number("sigma_y");
    if (!sigma_y.ok()) return sigma_y.status();
    if (!(*sigma_x > 0 && *sigma_y > 0)) {
      return absl::InvalidArgumentError("sigma_x= and sigma_y= must be > 0");
    }
    std::vector<float> scratch;
    augment::GaussianBlur(image, *kernel_x, *kernel_y,
                          static_cast<float>(*sigma_x),
                          static_cast<float>(*sigma_y), &scratch);
    return true;
  }
  return false;
}

}  // namespace batchd::tools
