// AugmentPlan::Create: the checks and defaults of augment.proto, and the
// fingerprint. Draw is in policy_draw.cc.
#include "server/augment/policy.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace batchd::server::augment {
namespace {

namespace v1 = batchd::v1;

constexpr int kMaxBins = 1024;

// Checks one entry; `path` is e.g. "pipeline.augment[1].rand_augment".
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  const absl::Status& status() const { return status_; }

  // `value` within lo..hi; `note` explains the bound, e.g.
  // "num_magnitude_bins - 1".
  template <typename T>
  void Range(const char* name, T value, T lo, T hi, const char* note = "") {
    if (!status_.ok()) return;
    if (value >= lo && value <= hi) return;  // false for NaN
    Fail(name, absl::StrCat(value, " is out of range ", lo, "..", hi,
                            *note ? absl::StrCat(" (", note, ")") : ""));
  }
  // A probability, 0..1.
  void Probability(const char* name, double p) { Range(name, p, 0.0, 1.0); }
  // A [min, max] range of two fields.
  void Ordered(const char* min_name, double min, const char* max_name,
               double max) {
    if (!status_.ok() || min <= max) return;
    Fail(min_name, absl::StrCat(min, " is above ", max_name, " (", max,
                                "); give min <= max"));
  }
  void Fail(const char* name, const std::string& what) {
    if (!status_.ok()) return;
    status_ = absl::InvalidArgumentError(
        absl::StrCat(path_, *name ? "." : "", name, ": ", what));
  }

  // The geometric ops' interpolation; `fallback` for UNSPECIFIED.
  Interpolation CheckInterpolation(v1::Interpolation value,
                                   Interpolation fallback) {
    switch (value) {
      case v1::INTERPOLATION_UNSPECIFIED:
        return fallback;
      case v1::INTERPOLATION_NEAREST:
        return Interpolation::kNearest;
      case v1::INTERPOLATION_BILINEAR:
        return Interpolation::kBilinear;
      case v1::INTERPOLATION_BICUBIC:
        Fail("interpolation",
             "INTERPOLATION_BICUBIC is for the crop's resize only "
             "(torchvision's tensor affine has no bicubic); use "
             "INTERPOLATION_NEAREST or INTERPOLATION_BILINEAR");
        return fallback;
      default:
        Fail("interpolation",
             absl::StrCat(static_cast<int>(value),
                          " is unknown; use INTERPOLATION_NEAREST or "
                          "INTERPOLATION_BILINEAR"));
        return fallback;
    }
  }

  // 0 values (fill_none) or 3, each 0..255.
  void CheckFill(const google::protobuf::RepeatedField<uint32_t>& fill,
                 AugmentOp* op) {
    if (fill.empty()) return;
    if (fill.size() != 3) {
      Fail("fill", absl::StrCat(fill.size(),
                                " values; give none (black, "
                                "torchvision's fill=None) or 3 "
                                "(R, G, B)"));
      return;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = absl::StrCat("fill[", i, "]");
      Range(name.c_str(), fill[i], 0u, 255u);
      op->fill[static_cast<size_t>(i)] = static_cast<uint8_t>(fill[i]);
    }
    op->fill_none = false;
  }

 private:
  const std::string path_;
  absl::Status status_;
};

template <typename M>
double Or(bool has, M value, double fallback) {
  return has ? static_cast<double>(value) : fallback;
}

void ResolveBins(Checker& c, bool has, uint32_t bins, AugmentOp* op) {
  c.Range("num_magnitude_bins", has ? bins : 31u, 2u,
          static_cast<uint32_t>(kMaxBins));
  op->num_magnitude_bins = has ? static_cast<int>(bins) : 31;
}

void Resolve(const v1::TrivialAugmentWide& in, Checker& c, AugmentOp* op) {
  ResolveBins(c, in.has_num_magnitude_bins(), in.num_magnitude_bins(), op);
  op->interpolation =
      c.CheckInterpolation(in.interpolation(), Interpolation::kNearest);
  c.CheckFill(in.fill(), op);
}

void Resolve(const v1::RandAugment& in, Checker& c, AugmentOp* op) {
  op->num_ops = in.has_num_ops() ? static_cast<int>(in.num_ops()) : 2;
  c.Range("num_ops", in.has_num_ops() ? in.num_ops() : 2u, 0u,
          static_cast<uint32_t>(kMaxAugmentOps));
  ResolveBins(c, in.has_num_magnitude_bins(), in.num_magnitude_bins(), op);
  const uint32_t magnitude = in.has_magnitude() ? in.magnitude() : 9u;
  if (c.status().ok()) {
    c.Range("magnitude", magnitude, 0u,
            static_cast<uint32_t>(op->num_magnitude_bins - 1),
            "num_magnitude_bins - 1");
  }
  op->magnitude = static_cast<int>(magnitude);
  op->magnitude_std = in.magnitude_std();
  c.Range("magnitude_std", op->magnitude_std, 0.0, 100.0);
  op->interpolation =
      c.CheckInterpolation(in.interpolation(), Interpolation::kNearest);
  c.CheckFill(in.fill(), op);
}

void Resolve(const v1::AutoAugment& in, Checker& c, AugmentOp* op) {
  switch (in.policy()) {
    case v1::AutoAugment::POLICY_UNSPECIFIED:
    case v1::AutoAugment::POLICY_IMAGENET:
      op->policy = AutoAugmentPolicy::kImageNet;
      break;
    case v1::AutoAugment::POLICY_CIFAR10:
      op->policy = AutoAugmentPolicy::kCifar10;
      break;
    case v1::AutoAugment::POLICY_SVHN:
      op->policy = AutoAugmentPolicy::kSvhn;
      break;
    default:
      c.Fail("policy", absl::StrCat(static_cast<int>(in.policy()),
                                    " is unknown; use POLICY_IMAGENET, "
                                    "POLICY_CIFAR10 or POLICY_SVHN"));
  }
  op->interpolation =
      c.CheckInterpolation(in.interpolation(), Interpolation::kNearest);
  c.CheckFill(in.fill(), op);
}

void Resolve(const v1::AugMix& in, Checker& c, AugmentOp* op) {
  const uint32_t severity = in.has_severity() ? in.severity() : 3u;
  const uint32_t width = in.has_mixture_width() ? in.mixture_width() : 3u;
  c.Range("severity", severity, 1u, static_cast<uint32_t>(kAugMixBins));
  c.Range("mixture_width", width, 1u, 16u);
  c.Range("chain_depth", in.chain_depth(), 0u, 16u, "0 draws 1..3 per chain");
  op->severity = static_cast<int>(severity);
  op->mixture_width = static_cast<int>(width);
  op->chain_depth = static_cast<int>(in.chain_depth());
  op->alpha = Or(in.has_alpha(), in.alpha(), 1.0);
  if (c.status().ok() && !(op->alpha > 0 && op->alpha <= 100)) {
    c.Fail("alpha", absl::StrCat(op->alpha, " is out of range (0, 100]"));
  }
  op->all_ops = in.has_all_ops() ? in.all_ops() : true;
  // torchvision's AugMix defaults to bilinear, unlike the other policies.
  op->interpolation =
      c.CheckInterpolation(in.interpolation(), Interpolation::kBilinear);
  c.CheckFill(in.fill(), op);
}

void Resolve(const v1::ColorJitter& in, Checker& c, AugmentOp* op) {
  const double values[4] = {in.brightness(), in.contrast(), in.saturation(),
                            in.hue()};
  const char* names[4] = {"brightness", "contrast", "saturation", "hue"};
  for (int i = 0; i < 3; ++i) {
    c.Range(names[i], values[i], 0.0, 1e6);
    op->jitter_enabled[i] = values[i] != 0;
    op->jitter_min[i] = std::max(0.0, 1.0 - values[i]);
    op->jitter_max[i] = 1.0 + values[i];
  }
  c.Range("hue", values[3], 0.0, 0.5);
  op->jitter_enabled[3] = values[3] != 0;
  op->jitter_min[3] = -values[3];
  op->jitter_max[3] = values[3];
  op->p = Or(in.has_p(), in.p(), 1.0);
  c.Probability("p", op->p);
}

void Resolve(const v1::GaussianBlur& in, int image_side, Checker& c,
             AugmentOp* op) {
  const uint32_t kx = in.kernel_size();
  const uint32_t ky = in.has_kernel_size_y() ? in.kernel_size_y() : kx;
  // Reflect padding of (size - 1) / 2 needs fewer pixels than the side.
  const uint32_t most =
      image_side > 0
          ? std::min(255u, 2u * static_cast<uint32_t>(image_side) - 1)
          : 255u;
  const std::string note =
      most < 255 ? absl::StrCat("at most 2 * the ", image_side,
                                "-pixel output - 1, for reflect padding")
                 : "";
  c.Range("kernel_size", kx, 1u, most, note.c_str());
  if (c.status().ok() && kx % 2 == 0)
    c.Fail("kernel_size", absl::StrCat(kx, " is even; give an odd size"));
  c.Range("kernel_size_y", ky, 1u, most, note.c_str());
  if (c.status().ok() && ky % 2 == 0)
    c.Fail("kernel_size_y", absl::StrCat(ky, " is even; give an odd size"));
  op->kernel_x = static_cast<int>(kx);
  op->kernel_y = static_cast<int>(ky);
  op->sigma_min = Or(in.has_sigma_min(), in.sigma_min(), 0.1);
  op->sigma_max = Or(in.has_sigma_max(), in.sigma_max(), 2.0);
  if (c.status().ok() && !(op->sigma_min > 0 && op->sigma_min <= 100)) {
    c.Fail("sigma_min",
           absl::StrCat(op->sigma_min, " is out of range (0, 100]"));
  }
  c.Range("sigma_max", op->sigma_max, 0.0, 100.0);
  c.Ordered("sigma_min", op->sigma_min, "sigma_max", op->sigma_max);
  op->p = Or(in.has_p(), in.p(), 1.0);
  c.Probability("p", op->p);
}

void ResolveDegrees(double lo, double hi, Checker& c, AugmentOp* op) {
  c.Range("degrees_min", lo, -360.0, 360.0);
  c.Range("degrees_max", hi, -360.0, 360.0);
  c.Ordered("degrees_min", lo, "degrees_max", hi);
  op->degrees_min = lo;
  op->degrees_max = hi;
}

void Resolve(const v1::RandomAffine& in, Checker& c, AugmentOp* op) {
  ResolveDegrees(in.degrees_min(), in.degrees_max(), c, op);
  op->translate_x = in.translate_x();
  op->translate_y = in.translate_y();
  c.Range("translate_x", op->translate_x, 0.0, 1.0);
  c.Range("translate_y", op->translate_y, 0.0, 1.0);
  if (in.has_scale_min() != in.has_scale_max()) {
    c.Fail(in.has_scale_min() ? "scale_max" : "scale_min",
           "is unset while the other end of the scale range is set; give "
           "both, or neither for no scaling");
  }
  op->scale_set = in.has_scale_min() && in.has_scale_max();
  if (op->scale_set) {
    op->scale_min = in.scale_min();
    op->scale_max = in.scale_max();
    if (c.status().ok() && !(op->scale_min > 0 && op->scale_min <= 100)) {
      c.Fail("scale_min",
             absl::StrCat(op->scale_min, " is out of range (0, 100]"));
    }
    c.Range("scale_max", op->scale_max, 0.0, 100.0);
    c.Ordered("scale_min", op->scale_min, "scale_max", op->scale_max);
  }
  op->shear_x_min = in.shear_x_min();
  op->shear_x_max = in.shear_x_max();
  op->shear_y_min = in.shear_y_min();
  op->shear_y_max = in.shear_y_max();
  c.Range("shear_x_min", op->shear_x_min, -180.0, 180.0);
  c.Range("shear_x_max", op->shear_x_max, -180.0, 180.0);
  c.Ordered("shear_x_min", op->shear_x_min, "shear_x_max", op->shear_x_max);
  c.Range("shear_y_min", op->shear_y_min, -180.0, 180.0);
  c.Range("shear_y_max", op->shear_y_max, -180.0, 180.0);
  c.Ordered("shear_y_min", op->shear_y_min, "shear_y_max", op->shear_y_max);
  op->interpolation =
      c.CheckInterpolation(in.interpolation(), Interpolation::kNearest);
  // RandomAffine and RandomRotation pass fill=[0.0] * channels by default.
  op->fill_none = false;
  c.CheckFill(in.fill(), op);
}

// One entry. REQUIRES: `in` has an op (checked by the caller).
absl::Status ResolveOne(const v1::Augment& in, const std::string& path,
                        int image_side, AugmentOp* op) {
  Checker c(path);
  op->kind = in.op_case();
  switch (in.op_case()) {
    case v1::Augment::kTrivialAugmentWide:
      Resolve(in.trivial_augment_wide(), c, op);
      break;
    case v1::Augment::kRandAugment:
      Resolve(in.rand_augment(), c, op);
      break;
    case v1::Augment::kAutoAugment:
      Resolve(in.auto_augment(), c, op);
      break;
    case v1::Augment::kAugMix:
      Resolve(in.aug_mix(), c, op);
      break;
    case v1::Augment::kColorJitter:
      Resolve(in.color_jitter(), c, op);
      break;
    case v1::Augment::kRandomGrayscale:
      op->p = Or(in.random_grayscale().has_p(), in.random_grayscale().p(), 0.1);
      c.Probability("p", op->p);
      break;
    case v1::Augment::kGaussianBlur:
      Resolve(in.gaussian_blur(), image_side, c, op);
      break;
    case v1::Augment::kRandomSolarize: {
      const v1::RandomSolarize& s = in.random_solarize();
      op->threshold = Or(s.has_threshold(), s.threshold(), 128.0);
      c.Range("threshold", op->threshold, 0.0, 256.0);
      op->p = Or(s.has_p(), s.p(), 0.5);
      c.Probability("p", op->p);
      break;
    }
    case v1::Augment::kRandomPosterize: {
      const v1::RandomPosterize& s = in.random_posterize();
      const uint32_t bits = s.has_bits() ? s.bits() : 4u;
      c.Range("bits", bits, 0u, 8u);
      op->bits = static_cast<int>(bits);
      op->p = Or(s.has_p(), s.p(), 0.5);
      c.Probability("p", op->p);
      break;
    }
    case v1::Augment::kRandomAutocontrast:
      op->p = Or(in.random_autocontrast().has_p(), in.random_autocontrast().p(),
                 0.5);
      c.Probability("p", op->p);
      break;
    case v1::Augment::kRandomEqualize:
      op->p = Or(in.random_equalize().has_p(), in.random_equalize().p(), 0.5);
      c.Probability("p", op->p);
      break;
    case v1::Augment::kRandomInvert:
      op->p = Or(in.random_invert().has_p(), in.random_invert().p(), 0.5);
      c.Probability("p", op->p);
      break;
    case v1::Augment::kRandomVerticalFlip:
      op->p = Or(in.random_vertical_flip().has_p(),
                 in.random_vertical_flip().p(), 0.5);
      c.Probability("p", op->p);
      break;
    case v1::Augment::kRandomRotation: {
      const v1::RandomRotation& r = in.random_rotation();
      ResolveDegrees(r.degrees_min(), r.degrees_max(), c, op);
      op->interpolation =
          c.CheckInterpolation(r.interpolation(), Interpolation::kNearest);
      op->fill_none = false;
      c.CheckFill(r.fill(), op);
      break;
    }
    case v1::Augment::kRandomAffine:
      Resolve(in.random_affine(), c, op);
      break;
    case v1::Augment::OP_NOT_SET:
      break;
  }
  return c.status();
}

// The canonical text of one resolved op: its kind and every field (the
// fields a kind ignores keep their defaults, so they never differ).
std::string Fingerprint(const AugmentOp& op) {
  auto d = [](double v) { return absl::StrFormat("%a", v); };
  std::string jitter;
  for (size_t i = 0; i < 4; ++i) {
    absl::StrAppend(&jitter, op.jitter_enabled[i] ? 1 : 0, ":",
                    d(op.jitter_min[i]), ":", d(op.jitter_max[i]), ",");
  }
  return absl::StrCat(
      static_cast<int>(op.kind), "{i=", static_cast<int>(op.interpolation),
      " fill=", op.fill_none ? "none" : absl::StrJoin(op.fill, ","),
      " bins=", op.num_magnitude_bins, " ops=", op.num_ops, " m=", op.magnitude,
      " mstd=", d(op.magnitude_std), " policy=", static_cast<int>(op.policy),
      " severity=", op.severity, " width=", op.mixture_width,
      " depth=", op.chain_depth, " alpha=", d(op.alpha), " all=", op.all_ops,
      " jitter=", jitter, " p=", d(op.p), " k=", op.kernel_x, "x", op.kernel_y,
      " sigma=", d(op.sigma_min), "..", d(op.sigma_max),
      " threshold=", d(op.threshold), " bits=", op.bits,
      " degrees=", d(op.degrees_min), "..", d(op.degrees_max),
      " translate=", d(op.translate_x), ",", d(op.translate_y),
      " scale=", op.scale_set, ":", d(op.scale_min), "..", d(op.scale_max),
      " shear=", d(op.shear_x_min), "..", d(op.shear_x_max), ",",
      d(op.shear_y_min), "..", d(op.shear_y_max), "}");
}

}  // namespace

absl::StatusOr<AugmentPlan> AugmentPlan::Create(
    const google::protobuf::RepeatedPtrField<batchd::v1::Augment>& ops,
    const std::string& field, int image_side) {
  if (ops.size() > kMaxAugmentOps) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", ops.size(), " ops; at most ",
                     kMaxAugmentOps, " are allowed"));
  }
  AugmentPlan plan;
  std::vector<std::string> texts;
  for (int i = 0; i < ops.size(); ++i) {
    const v1::Augment& in = ops.Get(i);
    if (in.op_case() == v1::Augment::OP_NOT_SET) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i,
                       "]: no op is set; set one of the Augment oneof "
                       "(e.g. trivial_augment_wide, color_jitter)"));
    }
    const std::string path = absl::StrCat(
        field, "[", i, "].",
        v1::Augment::descriptor()->FindFieldByNumber(in.op_case())->name());
    AugmentOp op;
    if (absl::Status s = ResolveOne(in, path, image_side, &op); !s.ok()) {
      return s;
    }
    texts.push_back(Fingerprint(op));
    plan.ops_.push_back(op);
  }
  plan.fingerprint_ = absl::StrJoin(texts, ";");
  return plan;
}

}  // namespace batchd::server::augment
