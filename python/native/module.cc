// batchd._native: pybind11 bindings of the C++ client for the `batchd`
// package (python/batchd). The torch-facing logic lives in Python; this
// module only streams batches and exposes each one's pixels, without a copy,
// through the buffer protocol.
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
#include "python/native/native_loader.h"

namespace py = pybind11;

namespace batchd::python {
namespace {

// Raises the Python exception for a non-OK `status`: a Python error already
// pending (KeyboardInterrupt from CheckSignals), or the batchd error.
[[noreturn]] void ThrowStatus(const absl::Status& status) {
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  py::object from_status =
      py::module_::import("batchd.errors").attr("from_status");
  py::object error = from_status(static_cast<int>(status.code()),
                                 std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                  error.ptr());
  throw py::error_already_set();
}

void WithoutGil(std::function<void()> f) {
  py::gil_scoped_release release;
  f();
}

// Between waiting slices: lets Python's signal handlers run, so Ctrl-C
// raises KeyboardInterrupt while we wait for data. The exception stays
// pending and ThrowStatus() raises it.
absl::Status CheckSignals() {
  if (PyErr_CheckSignals() != 0) {
    return absl::CancelledError("interrupted by a signal");
  }
  return absl::OkStatus();
}

// The Python object for one batch. Releasing the slot may send a request on
// the stream, so it is done without the GIL when the interpreter allows.
class PyBatch {
 public:
  explicit PyBatch(std::unique_ptr<NativeBatch> batch)
      : batch_(std::move(batch)) {}
  ~PyBatch() { Release(); }

  void Release() {
    if (batch_ == nullptr) return;
    if (PyGILState_Check() && !_Py_IsFinalizing()) {
      py::gil_scoped_release release;
      batch_.reset();
    } else {
      batch_.reset();
    }
  }
  NativeBatch& get() {
    if (batch_ == nullptr || batch_->released()) {
      throw py::value_error("the batch has been released");
    }
    return *batch_;
  }
  bool released() const { return batch_ == nullptr || batch_->released(); }

 private:
  std::unique_ptr<NativeBatch> batch_;
};

batchd::v1::Layout ParseLayout(const std::string& layout) {
  if (layout == "nhwc") return batchd::v1::LAYOUT_NHWC;
  if (layout == "nchw") return batchd::v1::LAYOUT_NCHW;
  throw py::value_error("layout must be 'nchw' or 'nhwc', not '" + layout +
                        "'");
}

const char* LayoutName(batchd::v1::Layout layout) {
  return layout == batchd::v1::LAYOUT_NCHW ? "nchw" : "nhwc";
}

std::unique_ptr<NativeLoader> MakeLoader(
    const std::string& endpoint, const std::string& dataset,
    uint32_t batch_size, uint64_t seed, bool shuffle, bool drop_last,
    uint32_t rank, uint32_t world_size, const std::string& job,
    const std::string& mode, uint32_t size,
    std::optional<std::pair<float, float>> scale,
    std::optional<std::pair<float, float>> ratio,
    std::optional<float> flip, uint32_t resize_shorter,
    const std::string& layout, uint32_t prefetch, double connect_timeout) {
  NativeLoaderOptions options;
  options.endpoint = endpoint;
  options.prefetch = prefetch;
  if (!(connect_timeout > 0)) {
    throw py::value_error("connect_timeout must be > 0 seconds");
  }
  options.connect_timeout = absl::Seconds(connect_timeout);
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
  absl::StatusOr<std::unique_ptr<NativeLoader>> loader;
  {
    py::gil_scoped_release release;
    loader = NativeLoader::Create(std::move(options));
  }
  if (!loader.ok()) ThrowStatus(loader.status());
  return *std::move(loader);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "C++ client of batchd (see the batchd package)";

  py::class_<PyBatch>(m, "NativeBatch", py::buffer_protocol(),
                      "One batch leasing a ring slot; exports its uint8 "
                      "pixels through the buffer protocol, writable, "
                      "without a copy.")
      .def_buffer([](PyBatch& self) -> py::buffer_info {
        NativeBatch& batch = self.get();
        std::vector<py::ssize_t> shape;
        for (uint64_t dim : batch.batch().shape) {
          shape.push_back(static_cast<py::ssize_t>(dim));
        }
        if (shape.empty()) shape.push_back(static_cast<py::ssize_t>(batch.size()));
        std::vector<py::ssize_t> strides(shape.size());
        py::ssize_t stride = 1;
        for (size_t i = shape.size(); i-- > 0;) {
          strides[i] = stride;
          stride *= shape[i];
        }
        return py::buffer_info(batch.data(), /*itemsize=*/1,
                               py::format_descriptor<uint8_t>::format(),
                               static_cast<py::ssize_t>(shape.size()), shape,
                               strides, /*readonly=*/false);
      })
      .def_property_readonly(
          "epoch", [](PyBatch& self) { return self.get().batch().epoch; })
      .def_property_readonly(
          "batch_index",
          [](PyBatch& self) { return self.get().batch().batch_index; })
      .def_property_readonly(
          "sample_indices",
          [](PyBatch& self) { return self.get().batch().sample_indices; })
      .def_property_readonly(
          "labels", [](PyBatch& self) { return self.get().batch().labels; })
      .def_property_readonly("shape",
                             [](PyBatch& self) {
                               const auto& shape = self.get().batch().shape;
                               py::tuple out(shape.size());
                               for (size_t i = 0; i < shape.size(); ++i) {
                                 out[i] = py::int_(shape[i]);
                               }
                               return out;
                             })
      .def_property_readonly(
          "layout",
          [](PyBatch& self) { return LayoutName(self.get().batch().layout); })
      .def_property_readonly(
          "substitutions",
          [](PyBatch& self) {
            py::list out;
            for (const auto& s : self.get().batch().substitutions) {
              out.append(py::make_tuple(
                  s.position(), s.original_index(), s.substitute_index(),
                  batchd::v1::SubstitutionReason_Name(s.reason()), s.detail()));
            }
            return out;
          },
          "(position, original_index, substitute_index, reason, detail) per "
          "substituted sample")
      .def_property_readonly(
          "address",
          [](PyBatch& self) {
            return reinterpret_cast<uintptr_t>(self.get().data());
          },
          "Address of the first pixel byte (the slot's memory).")
      .def_property_readonly("nbytes",
                             [](PyBatch& self) { return self.get().size(); })
      .def_property_readonly("released", &PyBatch::released)
      .def("release", &PyBatch::Release,
           "Returns the slot to the ring now. Views of the pixels taken "
           "before must not be used afterwards.");

  py::class_<NativeLoader>(m, "NativeLoader",
                           "Streams one plan's batches from one daemon.")
      .def(py::init(&MakeLoader), py::arg("endpoint"), py::arg("dataset"),
           py::arg("batch_size"), py::kw_only(), py::arg("seed") = 0,
           py::arg("shuffle") = true, py::arg("drop_last") = false,
           py::arg("rank") = 0, py::arg("world_size") = 1,
           py::arg("job") = "", py::arg("mode") = "train",
           py::arg("size") = 224, py::arg("scale") = py::none(),
           py::arg("ratio") = py::none(), py::arg("flip") = py::none(),
           py::arg("resize_shorter") = 0, py::arg("layout") = "nchw",
           py::arg("prefetch") = 4, py::arg("connect_timeout") = 10.0)
      .def_property_readonly("batches_per_epoch",
                             [](NativeLoader& self) {
                               return self.opened().batches_per_epoch();
                             })
      .def_property_readonly("samples_per_epoch",
                             [](NativeLoader& self) {
                               return self.opened().samples_per_epoch();
                             })
      .def_property_readonly("max_batch_bytes",
                             [](NativeLoader& self) {
                               return self.opened().max_batch_bytes();
                             })
      .def_property_readonly("shape",
                             [](NativeLoader& self) {
                               const auto& shape = self.opened().shape();
                               py::tuple out(shape.size());
                               for (int i = 0; i < shape.size(); ++i) {
                                 out[i] = py::int_(shape[i]);
                               }
                               return out;
                             })
      .def_property_readonly("layout",
                             [](NativeLoader& self) {
                               return LayoutName(self.opened().layout());
                             })
      .def_property_readonly("window", &NativeLoader::window,
                             "Ring slots: the daemon's granted window capped "
                             "at prefetch.")
      .def_property_readonly("live_batches", &NativeLoader::LiveBatches,
                             "NativeBatches handed out and not yet released.")
      .def_property_readonly("closed", &NativeLoader::closed)
      .def(
          "start_epoch",
          [](NativeLoader& self, uint64_t epoch, uint64_t first_batch) {
            absl::Status status =
                self.StartEpoch(epoch, first_batch, WithoutGil, CheckSignals);
            if (!status.ok()) ThrowStatus(status);
          },
          py::arg("epoch"), py::arg("first_batch") = 0)
      .def(
          "next",
          [](NativeLoader& self) -> py::object {
            absl::StatusOr<std::unique_ptr<NativeBatch>> batch =
                self.Next(WithoutGil, CheckSignals);
            if (!batch.ok()) ThrowStatus(batch.status());
            if (*batch == nullptr) return py::none();
            return py::cast(std::make_unique<PyBatch>(*std::move(batch)));
          },
          "The next batch in order, or None at the end of the epoch. Waits "
          "without the GIL; Ctrl-C interrupts the wait.")
      .def("stats",
           [](NativeLoader& self) {
             client::Loader::Stats stats = self.Stats();
             py::dict out;
             out["batches"] = stats.batches;
             out["bytes"] = stats.bytes;
             out["waited_s"] = absl::ToDoubleSeconds(stats.waited);
             out["wall_s"] = absl::ToDoubleSeconds(stats.wall);
             return out;
           })
      .def("close", &NativeLoader::Close,
           py::call_guard<py::gil_scoped_release>(),
           "Ends the stream. Batches already handed out stay valid.");

  m.def(
      "list_datasets",
      [](const std::string& endpoint, double timeout) {
        absl::StatusOr<batchd::v1::ListDatasetsResponse> response;
        {
          py::gil_scoped_release release;
          response = ListDatasets(endpoint, absl::Seconds(timeout));
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
      "[(name, num_samples, class_names)] of the daemon's datasets.");
}

}  // namespace batchd::python
