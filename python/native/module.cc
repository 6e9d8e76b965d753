// batchd._native: pybind11 bindings of the C++ client for the `batchd`
// package (python/batchd). The torch-facing logic lives in Python; this
// module only streams batches and exposes each one's memory without a copy:
// NativeBatch through the buffer protocol, NativeDeviceBatch (when the
// client's DeviceLoader is built) through DLPack.
//
//   native = _native.NativeLoader("localhost:7070", "imagenet", 64, size=224)
//   native.start_epoch(0, 0)
//   batch = native.next()               # None at the end of the epoch
//   pixels = torch.frombuffer(batch, dtype=torch.uint8)  # wraps the slot
//
// Errors come out as the exception that batchd.errors.from_status(code,
// message) builds, so Python sees the daemon's status code and message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "python/native/module_common.h"
#include "python/native/native_loader.h"

namespace batchd::python {

void ThrowStatus(const absl::Status& status) {
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  py::object from_status =
      py::module_::import("batchd.errors").attr("from_status");
  py::object error = from_status(static_cast<int>(status.code()),
                                 std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                  error.ptr());
  throw py::error_already_set();
}

void RunWithoutGil(const std::function<void()>& f) {
  py::gil_scoped_release release;
  f();
}

absl::Status CheckSignals() {
  if (PyErr_CheckSignals() != 0) {
    return absl::CancelledError("interrupted by a signal");
  }
  return absl::OkStatus();
}

const char* LayoutName(batchd::v1::Layout layout) {
  return layout == batchd::v1::LAYOUT_NCHW ? "nchw" : "nhwc";
}

namespace {

batchd::v1::Layout ParseLayout(const std::string& layout) {
  if (layout == "nhwc") return batchd::v1::LAYOUT_NHWC;
  if (layout == "nchw") return batchd::v1::LAYOUT_NCHW;
  throw py::value_error("layout must be 'nchw' or 'nhwc', not '" + layout +
                        "'");
}

}  // namespace

client::SecurityOptions SecurityOptionsFromDict(const py::dict& security) {
  client::SecurityOptions options;
  const std::pair<const char*, std::string*> fields[] = {
      {"tls_ca", &options.tls_ca},
      {"tls_cert", &options.tls_cert},
      {"tls_key", &options.tls_key},
      {"tls_server_name", &options.tls_server_name},
      {"token_file", &options.token_file}};
  size_t known = 0;
  for (const auto& [name, value] : fields) {
    if (!security.contains(name)) continue;
    ++known;
    py::object field = security[name];
    if (!field.is_none()) *value = py::cast<std::string>(py::str(field));
  }
  if (known != security.size()) {
    throw py::value_error(
        "security takes tls_ca, tls_cert, tls_key, tls_server_name and "
        "token_file only");
  }
  return options;
}

client::LoaderOptions LoaderOptionsFromArgs(
    const std::string& endpoint, const std::string& dataset,
    uint32_t batch_size, uint64_t seed, bool shuffle, bool drop_last,
    uint32_t rank, uint32_t world_size, const std::string& job,
    const std::string& mode, uint32_t size,
    std::optional<std::pair<float, float>> scale,
    std::optional<std::pair<float, float>> ratio, std::optional<float> flip,
    uint32_t resize_shorter, const std::string& layout, uint32_t prefetch,
    double connect_timeout, double unavailable_timeout, double hedge_factor,
    uint64_t prefetch_max_bytes, std::optional<uint64_t> last_epoch,
    bool shared_memory,
    const py::dict& security) {
  client::LoaderOptions options;
  options.shared_memory = shared_memory;
  options.endpoint = endpoint;
  options.prefetch = prefetch;
  // A memory cap turns on the growing ring (prefetch="auto").
  options.auto_prefetch = prefetch_max_bytes > 0;
  if (options.auto_prefetch) options.auto_prefetch_max_bytes = prefetch_max_bytes;
  if (!(connect_timeout > 0)) {
    throw py::value_error("connect_timeout must be > 0 seconds");
  }
  options.connect_timeout = absl::Seconds(connect_timeout);
  if (!(unavailable_timeout > 0)) {
    throw py::value_error("unavailable_timeout must be > 0 seconds");
  }
  options.unavailable_timeout = absl::Seconds(unavailable_timeout);
  if (!(hedge_factor >= 0)) {
    throw py::value_error("hedge_factor must be >= 0 (0 turns hedging off)");
  }
  options.hedge_factor = hedge_factor;
  if (last_epoch.has_value()) options.last_epoch = *last_epoch;
  options.security = SecurityOptionsFromDict(security);
  batchd::v1::Plan& plan = options.plan;
  plan.set_dataset(dataset);
  plan.set_batch_size(batch_size);
  plan.set_seed(seed);
  plan.set_shuffle(shuffle);
  plan.set_drop_last(drop_last);
  plan.set_rank(rank);
  plan.set_world_size(world_size);
  plan.set_job(job);
  batchd::v1::Pipeline* pipeline = plan.mutable_pipeline();
  pipeline->set_layout(ParseLayout(layout));
  if (mode == "train") {
    batchd::v1::RandomResizedCrop* train = pipeline->mutable_train();
    train->set_size(size);
    if (scale.has_value()) {
      train->set_scale_min(scale->first);
      train->set_scale_max(scale->second);
    }
    if (ratio.has_value()) {
      train->set_ratio_min(ratio->first);
      train->set_ratio_max(ratio->second);
    }
    if (flip.has_value()) train->set_flip_probability(*flip);
    if (resize_shorter != 0) {
      throw py::value_error("resize_shorter applies to mode='eval' only");
    }
  } else if (mode == "eval") {
    batchd::v1::ResizeCenterCrop* eval = pipeline->mutable_eval();
    eval->set_size(size);
    eval->set_resize_shorter(resize_shorter);
    if (scale.has_value() || ratio.has_value() || flip.has_value()) {
      throw py::value_error("scale, ratio and flip apply to mode='train' only");
    }
  } else {
    throw py::value_error("mode must be 'train' or 'eval', not '" + mode + "'");
  }
  return options;
}

#if BATCHD_PY_DEVICE_LOADER
void BindDeviceLoader(py::module_& m);  // device_module.cc
#endif

namespace {

using PyHostBatch = PyBatch<client::Batch>;

std::unique_ptr<NativeLoader> MakeLoader(
    const std::string& endpoint, const std::string& dataset,
    uint32_t batch_size, uint64_t seed, bool shuffle, bool drop_last,
    uint32_t rank, uint32_t world_size, const std::string& job,
    const std::string& mode, uint32_t size,
    std::optional<std::pair<float, float>> scale,
    std::optional<std::pair<float, float>> ratio, std::optional<float> flip,
    uint32_t resize_shorter, const std::string& layout, uint32_t prefetch,
    double connect_timeout, double unavailable_timeout, double hedge_factor,
    uint64_t prefetch_max_bytes, std::optional<uint64_t> last_epoch,
    bool shared_memory,
    const py::dict& security) {
  client::LoaderOptions options = LoaderOptionsFromArgs(
      endpoint, dataset, batch_size, seed, shuffle, drop_last, rank,
      world_size, job, mode, size, scale, ratio, flip, resize_shorter, layout,
      prefetch, connect_timeout, unavailable_timeout, hedge_factor,
      prefetch_max_bytes, last_epoch, shared_memory, security);
  absl::StatusOr<std::unique_ptr<NativeLoader>> loader;
  {
    py::gil_scoped_release release;
    loader = CreateNativeLoader(std::move(options));
  }
  if (!loader.ok()) ThrowStatus(loader.status());
  return *std::move(loader);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "C++ client of batchd (see the batchd package)";

  py::class_<PyHostBatch> batch(
      m, "NativeBatch", py::buffer_protocol(),
      "One batch leasing a ring slot; exports its uint8 pixels through the "
      "buffer protocol, writable, without a copy.");
  batch.def_buffer([](PyHostBatch& self) -> py::buffer_info {
    NativeBatch<client::Batch>& b = self.get();
    std::vector<py::ssize_t> shape;
    for (uint64_t dim : b.batch().shape) {
      shape.push_back(static_cast<py::ssize_t>(dim));
    }
    if (shape.empty()) shape.push_back(static_cast<py::ssize_t>(b.size()));
    std::vector<py::ssize_t> strides(shape.size());
    py::ssize_t stride = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= shape[i];
    }
    return py::buffer_info(b.data(), /*itemsize=*/1,
                           py::format_descriptor<uint8_t>::format(),
                           static_cast<py::ssize_t>(shape.size()), shape,
                           strides, /*readonly=*/false);
  });
  batch.def_property_readonly("layout", [](PyHostBatch& self) {
    return LayoutName(self.get().batch().layout);
  });
  BindBatchCommon(batch);

  py::class_<NativeLoader> loader(m, "NativeLoader",
                                  "Streams one plan's batches from one "
                                  "daemon into a ring of host buffers.");
  loader.def(py::init(&MakeLoader), py::arg("endpoint"), py::arg("dataset"),
             py::arg("batch_size"), py::kw_only(), py::arg("seed") = 0,
             py::arg("shuffle") = true, py::arg("drop_last") = false,
             py::arg("rank") = 0, py::arg("world_size") = 1,
             py::arg("job") = "", py::arg("mode") = "train",
             py::arg("size") = 224, py::arg("scale") = py::none(),
             py::arg("ratio") = py::none(), py::arg("flip") = py::none(),
             py::arg("resize_shorter") = 0, py::arg("layout") = "nchw",
             py::arg("prefetch") = 4, py::arg("connect_timeout") = 10.0,
             py::arg("unavailable_timeout") = 30.0,
             py::arg("hedge_factor") = 3.0, py::arg("prefetch_max_bytes") = 0,
             py::arg("last_epoch") = py::none(),
             py::arg("shared_memory") = true,
             py::arg("security") = py::dict());
  BindLoaderCommon(loader);
  loader.def(
      "next",
      [](NativeLoader& self) -> py::object {
        auto next = self.Next(RunWithoutGil, CheckSignals);
        if (!next.ok()) ThrowStatus(next.status());
        if (*next == nullptr) return py::none();
        return py::cast(std::make_unique<PyHostBatch>(*std::move(next)));
      },
      "The next batch in order, or None at the end of the epoch. Waits "
      "without the GIL; Ctrl-C interrupts the wait.");

  m.def(
      "list_datasets",
      [](const std::string& endpoint, double timeout,
         const py::dict& security) {
        const client::SecurityOptions options =
            SecurityOptionsFromDict(security);
        absl::StatusOr<batchd::v1::ListDatasetsResponse> response;
        {
          py::gil_scoped_release release;
          response = ListDatasets(endpoint, options, absl::Seconds(timeout));
        }
        if (!response.ok()) ThrowStatus(response.status());
        py::list out;
        for (const auto& info : response->datasets()) {
          std::vector<std::string> classes(info.class_names().begin(),
                                           info.class_names().end());
          out.append(py::make_tuple(info.name(), info.num_samples(), classes));
        }
        return out;
      },
      py::arg("endpoint"), py::arg("timeout") = 10.0,
      py::arg("security") = py::dict(),
      "[(name, num_samples, class_names)] of the daemon's datasets.");

#if BATCHD_PY_DEVICE_LOADER
  BindDeviceLoader(m);
  m.attr("HAVE_DEVICE_LOADER") = true;
#else
  m.attr("HAVE_DEVICE_LOADER") = false;
#endif
}

}  // namespace batchd::python
