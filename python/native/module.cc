// batchd._native: pybind11 bindings of the C++ client for the `batchd`
// package (python/batchd). The torch-facing logic lives in Python; this
// module only streams batches and exposes each one's memory without a copy:
// NativeBatch through the buffer protocol, NativeDeviceBatch (when the
// client's DeviceLoader is built) through DLPack.
//
//   args = _native.LoaderArgs(endpoint="localhost:7070", dataset="imagenet",
//                              batch_size=64, size=224)
//   native = _native.NativeLoader(args)
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
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/text_format.h"
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

namespace {

py::dict SecurityOptionsToDict(const client::SecurityOptions& options) {
  py::dict out;
  const std::pair<const char*, const std::string*> fields[] = {
      {"tls_ca", &options.tls_ca},
      {"tls_cert", &options.tls_cert},
      {"tls_key", &options.tls_key},
      {"tls_server_name", &options.tls_server_name},
      {"token_file", &options.token_file}};
  for (const auto& [name, value] : fields) {
    out[name] = value->empty() ? py::object(py::none()) : py::str(*value);
  }
  return out;
}

}  // namespace

client::LoaderOptions LoaderOptionsOrThrow(const LoaderArgs& args) {
  absl::StatusOr<client::LoaderOptions> options = ToLoaderOptions(args);
  if (!options.ok()) {
    throw py::value_error(std::string(options.status().message()));
  }
  return *std::move(options);
}

#if BATCHD_PY_DEVICE_LOADER
void BindDeviceLoader(py::module_& m);  // device_module.cc
#endif

namespace {

using PyHostBatch = PyBatch<client::Batch>;

std::unique_ptr<NativeLoader> MakeLoader(const LoaderArgs& args) {
  client::LoaderOptions options = LoaderOptionsOrThrow(args);
  absl::StatusOr<std::unique_ptr<NativeLoader>> loader;
  {
    py::gil_scoped_release release;
    loader = CreateNativeLoader(std::move(options));
  }
  if (!loader.ok()) ThrowStatus(loader.status());
  return *std::move(loader);
}

// batchd._native.LoaderArgs: every field of LoaderArgs, readable and
// writable, and a constructor taking any of them by keyword. Its defaults
// are the ones batchd.Loader shows.
void BindLoaderArgs(py::module_& m) {
  py::class_<LoaderArgs> cls(
      m, "LoaderArgs",
      "The options of a NativeLoader or NativeDeviceLoader, by keyword; "
      "fields not given keep their defaults, which are the C++ "
      "client::LoaderOptions defaults (client/loader.h) and the plan's.");
  std::vector<std::string> fields;
  auto field = [&](const char* name, auto member, const char* doc) {
    cls.def_readwrite(name, member, doc);
    fields.push_back(name);
  };
  field("endpoint", &LoaderArgs::endpoint,
        "the daemons: 'host:port', 'unix:/path', a comma-separated list, or "
        "'dns:///name:port'");
  field("dataset", &LoaderArgs::dataset, "a dataset the daemons serve");
  field("batch_size", &LoaderArgs::batch_size, "samples per batch");
  field("seed", &LoaderArgs::seed, "seed of the order and augmentation");
  field("shuffle", &LoaderArgs::shuffle, "");
  field("shuffle_window_shards", &LoaderArgs::shuffle_window_shards,
        "with shuffle: 0 shuffles every sample; K > 0 permutes a TAR_SHARDS "
        "dataset's shards and draws samples from a window of K shards");
  field("repeats", &LoaderArgs::repeats,
        "repeated augmentation: each image of the epoch this many times, "
        "each with its own augmentation; 0 or 1: none");
  field("drop_last", &LoaderArgs::drop_last, "");
  field("rank", &LoaderArgs::rank, "this process's shard");
  field("world_size", &LoaderArgs::world_size, "shards in all");
  field("job", &LoaderArgs::job, "job name for fair sharing and metrics");
  field("mode", &LoaderArgs::mode, "'train' or 'eval'");
  field("size", &LoaderArgs::size, "output height and width, pixels");
  field("scale", &LoaderArgs::scale, "train: (min, max) or None");
  field("ratio", &LoaderArgs::ratio, "train: (min, max) or None");
  field("flip", &LoaderArgs::flip, "train: flip probability or None");
  field("resize_shorter", &LoaderArgs::resize_shorter,
        "eval: shorter side before the crop; 0: the daemon's default");
  field("layout", &LoaderArgs::layout, "'nchw' or 'nhwc'");
  field("interpolation", &LoaderArgs::interpolation,
        "the crop's resize: 'bilinear' or 'bicubic'");
  field("augment", &LoaderArgs::augment,
        "augmentation ops, text-format Pipeline.augment entries");
  field("views", &LoaderArgs::views,
        "Plan.views as text-format `views { ... }` entries; '' for none");
  field("decoded_max_side", &LoaderArgs::decoded_max_side,
        "decode at capped resolution (longer side, pixels), then crop; 0: "
        "off");
  field("resume_epoch", &LoaderArgs::resume_epoch,
        "elastic resume: the epoch that starts at resume_position");
  field("resume_position", &LoaderArgs::resume_position,
        "elastic resume: position in that epoch's global order; 0: none");
  field("sample_fields", &LoaderArgs::sample_fields,
        "members sent with each sample: [(name, max_bytes)], max_bytes 0 "
        "for the default");
  field("missing_fields", &LoaderArgs::missing_fields,
        "a sample without a field: 'empty' or 'substitute'");
  field("label_field", &LoaderArgs::label_field,
        "'' (cls), 'json:<key>' or 'none'");
  field("sources", &LoaderArgs::sources,
        "a weighted mixture instead of dataset: [(dataset, weight, "
        "cursor)]");
  field("samples_per_epoch", &LoaderArgs::samples_per_epoch,
        "with sources: samples of an epoch; 0: the sources' sizes summed");
  field("sources_epoch", &LoaderArgs::sources_epoch,
        "with sources: the epoch at which the sources stand at their "
        "cursors");
  field("prefetch", &LoaderArgs::prefetch, "ring slots requested");
  field("auto_prefetch", &LoaderArgs::auto_prefetch,
        "grow the ring while waits are bursty");
  field("auto_prefetch_max_bytes", &LoaderArgs::auto_prefetch_max_bytes,
        "the growing ring's cap, bytes of slots");
  field("connect_timeout", &LoaderArgs::connect_timeout, "seconds");
  field("unavailable_timeout", &LoaderArgs::unavailable_timeout, "seconds");
  field("hedge_factor", &LoaderArgs::hedge_factor, "0 turns hedging off");
  field("batch_progress_timeout", &LoaderArgs::batch_progress_timeout,
        "seconds a batch may make no progress on its daemon before it is "
        "asked of another; 0: off");
  field("last_epoch", &LoaderArgs::last_epoch, "None: no limit");
  field("shared_memory", &LoaderArgs::shared_memory,
        "offer a same-host daemon the ring as shared memory");
  cls.def_property(
      "security",
      [](const LoaderArgs& self) {
        return SecurityOptionsToDict(self.security);
      },
      [](LoaderArgs& self, const py::dict& security) {
        self.security = SecurityOptionsFromDict(security);
      },
      "dict of tls_ca, tls_cert, tls_key, tls_server_name, token_file (None: "
      "unset)");
  fields.push_back("security");
  // Keywords go through the fields' own setters (and their type checks).
  cls.def(py::init([](const py::kwargs& kwargs) {
    if (kwargs.empty()) return LoaderArgs();
    py::object self = py::type::of<LoaderArgs>()();
    py::tuple names = self.attr("fields");
    for (const auto& [key, value] : kwargs) {
      if (!names.contains(key)) {
        throw py::type_error("LoaderArgs() got an unexpected keyword "
                             "argument '" +
                             py::cast<std::string>(py::str(key)) + "'");
      }
      py::setattr(self, key, value);
    }
    return self.cast<LoaderArgs>();
  }));
  cls.attr("fields") = py::tuple(py::cast(fields));
  cls.def(
      "plan",
      [](const LoaderArgs& self) {
        std::string text;
        google::protobuf::TextFormat::PrintToString(
            LoaderOptionsOrThrow(self).plan, &text);
        return text;
      },
      "The batchd.v1.Plan these arguments ask for, in protobuf text "
      "format; ValueError when they do not fit together.");
  cls.def("__repr__", [](const py::object& self) {
    std::string out = "LoaderArgs(";
    const char* separator = "";
    for (const py::handle name : py::tuple(self.attr("fields"))) {
      out += separator + py::cast<std::string>(py::str(name)) + "=" +
             py::cast<std::string>(py::repr(self.attr(name)));
      separator = ", ";
    }
    return out + ")";
  });
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "C++ client of batchd (see the batchd package)";

  BindLoaderArgs(m);

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
  loader.def(py::init(&MakeLoader), py::arg("args"),
             "Opens the plan `args` (a LoaderArgs) describes.");
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
