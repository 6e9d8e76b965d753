// The geometric ops and the crop's resize for batchd-augment-replay:
//
//   op=affine angle= translate_x= translate_y= scale= shear_x= shear_y=
//      interpolation=nearest|bilinear [fill_r= fill_g= fill_b=]
//      [center_x= center_y=]
//   op=rotate angle= interpolation= [fill_r= fill_g= fill_b=]
//   op=vflip
//   op=resize_bilinear|resize_bicubic out_width= out_height= x= y= w= h=
//
// Without fill_* the op is torchvision's fill=None. The resize ops resize
// the integer window (x, y, w, h) of the image to out_width x out_height,
// as F.resized_crop(img, top=y, left=x, height=h, width=w, size,
// interpolation, antialias=True) does, and write the result into the
// image's top-left corner (the rest keeps the input): the output must fit
// in the input.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/augment/geometry_ops.h"
#include "server/decode/resize.h"
#include "tools/augment_replay.h"

namespace batchd::tools {
namespace {

using server::augment::AffineParams;
using server::augment::Image;
using server::augment::Interpolation;

absl::StatusOr<Interpolation> ParseInterpolation(const ReplayArgs& args) {
  const std::string name = args.Text("interpolation");
  if (name.empty() || name == "nearest") return Interpolation::kNearest;
  if (name == "bilinear") return Interpolation::kBilinear;
  return absl::InvalidArgumentError(
      absl::StrCat("interpolation=", name, ": nearest or bilinear"));
}

// fill_r, fill_g, fill_b; false in `fill_none` when none is given.
absl::Status ParseFill(const ReplayArgs& args, std::array<uint8_t, 3>* fill,
                       bool* fill_none) {
  const char* keys[3] = {"fill_r", "fill_g", "fill_b"};
  *fill_none = args.Text(keys[0]).empty() && args.Text(keys[1]).empty() &&
               args.Text(keys[2]).empty();
  if (*fill_none) return absl::OkStatus();
  for (int c = 0; c < 3; ++c) {
    absl::StatusOr<double> v = args.Number(keys[c]);
    if (!v.ok()) return v.status();
    if (*v < 0 || *v > 255) {
      return absl::InvalidArgumentError(
          absl::StrCat(keys[c], " must be in 0..255"));
    }
    (*fill)[c] = static_cast<uint8_t>(*v);
  }
  return absl::OkStatus();
}

absl::Status ReplayAffine(const ReplayArgs& args, Image image) {
  AffineParams params;
  absl::StatusOr<double> angle = args.Number("angle");
  if (!angle.ok()) return angle.status();
  params.angle = static_cast<float>(*angle);
  params.translate_x = static_cast<float>(args.NumberOr("translate_x", 0));
  params.translate_y = static_cast<float>(args.NumberOr("translate_y", 0));
  params.scale = static_cast<float>(args.NumberOr("scale", 1));
  params.shear_x = args.NumberOr("shear_x", 0);
  params.shear_y = args.NumberOr("shear_y", 0);
  if (params.scale <= 0) return absl::InvalidArgumentError("scale <= 0");
  if (!args.Text("center_x").empty() || !args.Text("center_y").empty()) {
    absl::StatusOr<double> cx = args.Number("center_x");
    absl::StatusOr<double> cy = args.Number("center_y");
    if (!cx.ok()) return cx.status();
    if (!cy.ok()) return cy.status();
    params.center_set = true;
    params.center_x = static_cast<float>(*cx);
    params.center_y = static_cast<float>(*cy);
  }
  absl::StatusOr<Interpolation> interpolation = ParseInterpolation(args);
  if (!interpolation.ok()) return interpolation.status();
  params.interpolation = *interpolation;
  absl::Status fill = ParseFill(args, &params.fill, &params.fill_none);
  if (!fill.ok()) return fill;
  std::vector<uint8_t> scratch;
  server::augment::Affine(image, params, &scratch);
  return absl::OkStatus();
}

absl::Status ReplayRotate(const ReplayArgs& args, Image image) {
  absl::StatusOr<double> angle = args.Number("angle");
  if (!angle.ok()) return angle.status();
  absl::StatusOr<Interpolation> interpolation = ParseInterpolation(args);
  if (!interpolation.ok()) return interpolation.status();
  std::array<uint8_t, 3> fill = {0, 0, 0};
  bool fill_none = true;
  absl::Status status = ParseFill(args, &fill, &fill_none);
  if (!status.ok()) return status;
  std::vector<uint8_t> scratch;
  if (fill_none) {
    // F.rotate(fill=None): Affine with the angle negated (geometry_ops.h).
    AffineParams params;
    params.angle = -static_cast<float>(*angle);
    params.interpolation = *interpolation;
    params.fill_none = true;
    server::augment::Affine(image, params, &scratch);
  } else {
    server::augment::Rotate(image, static_cast<float>(*angle),
                            *interpolation, fill, &scratch);
  }
  return absl::OkStatus();
}

absl::Status ReplayResize(const ReplayArgs& args, server::ResizeFilter filter,
                          Image image) {
  int v[6];
  const char* keys[6] = {"out_width", "out_height", "x", "y", "w", "h"};
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<double> n = args.Number(keys[i]);
    if (!n.ok()) return n.status();
    v[i] = static_cast<int>(*n);
  }
  const int out_w = v[0], out_h = v[1], x = v[2], y = v[3], w = v[4], h = v[5];
  if (out_w <= 0 || out_h <= 0 || out_w > image.width ||
      out_h > image.height) {
    return absl::InvalidArgumentError(
        "out_width x out_height must fit in the input image");
  }
  if (w <= 0 || h <= 0 || x < 0 || y < 0 || x + w > image.width ||
      y + h > image.height) {
    return absl::InvalidArgumentError("window outside the image");
  }
  // The view holds exactly the window, as the decoder's crop does.
  const server::RgbView src{image.row(y) + ptrdiff_t{3} * x, w, h,
                            image.stride};
  server::ResizeRequest request;
  request.width = w;
  request.height = h;
  request.out_width = out_w;
  request.out_height = out_h;
  request.filter = filter;
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * 3);
  server::Resizer resizer;
  resizer.Resize(src, request, out.data());
  for (int row = 0; row < out_h; ++row) {
    std::copy_n(&out[static_cast<size_t>(row) * out_w * 3], out_w * 3,
                image.row(row));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> ReplayGeometryOp(const std::string& op,
                                      const ReplayArgs& args,
                                      server::augment::Image image) {
  absl::Status status;
  if (op == "affine") {
    status = ReplayAffine(args, image);
  } else if (op == "rotate") {
    status = ReplayRotate(args, image);
  } else if (op == "vflip") {
    server::augment::VerticalFlip(image);
  } else if (op == "resize_bilinear") {
    status = ReplayResize(args, server::ResizeFilter::kBilinear, image);
  } else if (op == "resize_bicubic") {
    status = ReplayResize(args, server::ResizeFilter::kBicubic, image);
  } else {
    return false;
  }
  if (!status.ok()) return status;
  return true;
}

}  // namespace batchd::tools
