// batchd._native's RandomErasing and MixUp/CutMix: the parameters of a
// device batch (what the daemon drew), and the client's CPU path on
// caller-given tensors, for the parity tests against torchvision and the
// benchmark (bench/erase_mix.py). The Loader applies the same code to
// every batch of a plan with erasing or mix (client/device_loader.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "client/cuda/erase_mix.h"
#include "client/cuda/normalize.h"
#include "client/device_loader.h"
#include "python/native/module_common.h"

namespace batchd::python {
namespace {

namespace py = pybind11;

// (position, top, left, height, width, noise, noise_key)
using Rect = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                        bool, uint64_t>;
using Box = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;

cuda::Layout ParseLayout(const std::string& name) {
  if (name == "nhwc") return cuda::Layout::kNHWC;
  if (name == "nchw") return cuda::Layout::kNCHW;
  throw py::value_error("layout must be 'nhwc' or 'nchw', not '" + name + "'");
}

cuda::DType ParseFloatDType(const std::string& name) {
  if (name == "float32") return cuda::DType::kFloat32;
  if (name == "float16") return cuda::DType::kFloat16;
  if (name == "bfloat16") return cuda::DType::kBFloat16;
  throw py::value_error("dtype must be float32, float16 or bfloat16, not '" +
                        name + "'");
}

cuda::MixParams ToMix(const std::string& kind, double lambda, Box box) {
  cuda::MixKind k = cuda::MixKind::kNone;
  if (kind == "mixup") {
    k = cuda::MixKind::kMixup;
  } else if (kind == "cutmix") {
    k = cuda::MixKind::kCutmix;
  } else if (kind != "none") {
    throw py::value_error("mix kind must be none, mixup or cutmix, not '" +
                          kind + "'");
  }
  cuda::MixParams mix;
  const auto [top, left, height, width] = box;
  const cuda::Status made = cuda::MakeMixParams(
      k, lambda, {.top = top, .left = left, .height = height, .width = width},
      &mix);
  if (!made.ok()) throw py::value_error(made.message());
  return mix;
}

// Normalises, erases and mixes the uint8 batch `src` (shape in its layout)
// into `dst` (a writable buffer of the output's bytes).
void NormalizeEraseMix(py::buffer src, py::buffer dst,
                       std::vector<uint64_t> shape, const std::string& in,
                       const std::string& out, const std::string& dtype,
                       std::vector<float> mean, std::vector<float> std_dev,
                       std::vector<Rect> rects, const std::string& kind,
                       double lambda, Box box) {
  cuda::NormalizeSpec spec;
  spec.dtype = ParseFloatDType(dtype);
  spec.layout = ParseLayout(out);
  spec.mean = std::move(mean);
  spec.std = std::move(std_dev);
  cuda::NormalizeParams params;
  const cuda::Status made =
      cuda::MakeNormalizeParams(shape, ParseLayout(in), spec, &params);
  if (!made.ok()) throw py::value_error(made.message());
  cuda::EraseMix em;
  em.mix = ToMix(kind, lambda, box);
  if (!rects.empty()) em.rects.resize(params.n);
  for (const auto& [position, top, left, height, width, noise, key] : rects) {
    if (position >= params.n) throw py::value_error("rect position too large");
    em.rects[position] = {.top = top, .left = left, .height = height,
                          .width = width, .noise = noise ? 1u : 0u,
                          .noise_key = key};
  }
  const cuda::Status checked = cuda::CheckEraseMix(params, em);
  if (!checked.ok()) throw py::value_error(checked.message());
  py::buffer_info in_info = src.request();
  py::buffer_info out_info = dst.request(/*writable=*/true);
  if (static_cast<size_t>(in_info.size * in_info.itemsize) !=
          params.input_bytes() ||
      static_cast<size_t>(out_info.size * out_info.itemsize) !=
          params.output_bytes()) {
    throw py::value_error("src or dst has the wrong number of bytes");
  }
  py::gil_scoped_release release;
  cuda::NormalizeEraseMixCpu(static_cast<const uint8_t*>(in_info.ptr),
                             out_info.ptr, params, em);
}

py::bytes SoftLabels(std::vector<int32_t> labels, uint32_t num_classes,
                     float smoothing, const std::string& kind, double lambda) {
  std::vector<float> out(labels.size() * num_classes);
  const cuda::Status status =
      cuda::SoftLabels(labels.data(), labels.size(), num_classes, smoothing,
                       ToMix(kind, lambda, {}), out.data());
  if (!status.ok()) throw py::value_error(status.message());
  return py::bytes(reinterpret_cast<const char*>(out.data()),
                   out.size() * sizeof(float));
}

}  // namespace

// The parameters of one received batch, for Loader.erase_mix.
py::object EraseMixOf(const client::BatchInfo& batch) {
  py::list rects;
  for (const batchd::v1::ErasedRegion& r : batch.erased) {
    rects.append(py::make_tuple(r.position(), r.top(), r.left(), r.height(),
                                r.width(), r.noise(), r.noise_key()));
  }
  py::object mix = py::none();
  if (batch.mix.has_value()) {
    const batchd::v1::BatchMix& m = *batch.mix;
    const char* kind = m.kind() == batchd::v1::BatchMix::KIND_MIXUP ? "mixup"
                       : m.kind() == batchd::v1::BatchMix::KIND_CUTMIX
                           ? "cutmix"
                           : "none";
    mix = py::make_tuple(kind, m.lambda(),
                         py::make_tuple(m.box_top(), m.box_left(),
                                        m.box_height(), m.box_width()),
                         m.label_smoothing(), m.num_classes());
  }
  return py::make_tuple(rects, mix);
}

void BindEraseMix(py::module_& m) {
  m.def("normalize_erase_mix", &NormalizeEraseMix, py::arg("src"),
        py::arg("dst"), py::arg("shape"), py::arg("in_layout"),
        py::arg("out_layout"), py::arg("dtype"), py::arg("mean"),
        py::arg("std"), py::arg("rects"), py::arg("kind"), py::arg("lambda_"),
        py::arg("box"),
        "The client's CPU normalise + RandomErasing + MixUp/CutMix of a "
        "uint8 batch into `dst`. rects: [(position, top, left, height, "
        "width, noise, noise_key)]; kind: none, mixup or cutmix; box: (top, "
        "left, height, width).");
  m.def("soft_labels", &SoftLabels, py::arg("labels"), py::arg("num_classes"),
        py::arg("smoothing"), py::arg("kind"), py::arg("lambda_"),
        "The soft labels [n, num_classes] as float32 bytes.");
  m.def("erasing_noise", &cuda::ErasingNoise, py::arg("key"), py::arg("k"),
        "Noise value number k of an erased rectangle with noise_key `key`.");
}

}  // namespace batchd::python
