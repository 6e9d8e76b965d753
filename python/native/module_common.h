// Pieces shared by the bindings of batchd._native (module.cc and, when the
// client's DeviceLoader is built, device_module.cc): status to exception,
// GIL release and signal checks for FetchingLoader, the Python object of a
// batch, loader options from LoaderArgs, and the methods every loader
// binding has.
#ifndef BATCHD_PYTHON_NATIVE_MODULE_COMMON_H_
#define BATCHD_PYTHON_NATIVE_MODULE_COMMON_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/diagnosis.h"
#include "client/loader.h"
#include "python/native/loader_args.h"
#include "python/native/native_loader.h"

namespace batchd::python {

namespace py = pybind11;

// Raises the Python exception for a non-OK `status`: a Python error already
// pending (KeyboardInterrupt from CheckSignals), or the exception that
// batchd.errors.from_status(code, message) builds.
[[noreturn]] void ThrowStatus(const absl::Status& status);

// Runs `f` with the GIL released.
void RunWithoutGil(const std::function<void()>& f);

// Between waiting slices: lets Python's signal handlers run, so Ctrl-C
// raises KeyboardInterrupt while we wait for data. The exception stays
// pending and ThrowStatus() raises it.
absl::Status CheckSignals();

// client::SecurityOptions from the Python Loader's `security` dict (keys
// tls_ca, tls_cert, tls_key, tls_server_name, token_file; None is unset).
// Raises ValueError for another key.
client::SecurityOptions SecurityOptionsFromDict(const py::dict& security);

// ToLoaderOptions(`args`), raising ValueError with its message when the
// options do not fit together.
client::LoaderOptions LoaderOptionsOrThrow(const LoaderArgs& args);

const char* LayoutName(batchd::v1::Layout layout);

// The Python object of one batch. Releasing the slot may send a request on
// the stream, so it is done without the GIL when the interpreter allows.
template <typename BatchT>
class PyBatch {
 public:
  explicit PyBatch(std::unique_ptr<NativeBatch<BatchT>> batch)
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
  NativeBatch<BatchT>& get() {
    if (batch_ == nullptr || batch_->released()) {
      throw py::value_error("the batch has been released");
    }
    return *batch_;
  }
  // Hands the batch over (e.g. to a DLPack capsule).
  std::unique_ptr<NativeBatch<BatchT>> Take() {
    get();
    return std::move(batch_);
  }
  bool released() const { return batch_ == nullptr || batch_->released(); }

 private:
  std::unique_ptr<NativeBatch<BatchT>> batch_;
};

// Binds what every loader binding shares: the opened plan's figures, the
// ring, start_epoch, stats, diagnose, epoch_diagnosis and close.
template <typename L>
void BindLoaderCommon(py::class_<L>& cls) {
  cls.def_property_readonly(
         "batches_per_epoch",
         [](L& self) { return self.opened().batches_per_epoch(); })
      .def_property_readonly(
          "samples_per_epoch",
          [](L& self) { return self.opened().samples_per_epoch(); })
      .def_property_readonly(
          "dataset_samples",
          [](L& self) { return self.opened().dataset_samples(); },
          "Samples in the dataset: the length of an epoch's global order.")
      .def_property_readonly(
          "resumed_epoch_batches",
          [](L& self) { return self.opened().resumed_epoch_batches(); },
          "With an elastic resume, the batches left of the resumed epoch.")
      .def_property_readonly(
          "max_batch_bytes",
          [](L& self) { return self.opened().max_batch_bytes(); })
      .def_property_readonly("shape",
                             [](L& self) {
                               const auto& shape = self.opened().shape();
                               py::tuple out(shape.size());
                               for (int i = 0; i < shape.size(); ++i) {
                                 out[i] = py::int_(shape[i]);
                               }
                               return out;
                             })
      .def_property_readonly(
          "layout", [](L& self) { return LayoutName(self.opened().layout()); })
      .def_property_readonly("window", &L::window,
                             "Ring slots: the daemon's granted window capped "
                             "at prefetch.")
      .def_property_readonly("live_batches", &L::LiveBatches,
                             "Batches handed out and not yet released.")
      .def_property_readonly("closed", &L::closed)
      .def(
          "start_epoch",
          [](L& self, uint64_t epoch, uint64_t first_batch) {
            absl::Status status = self.StartEpoch(epoch, first_batch,
                                                  RunWithoutGil, CheckSignals);
            if (!status.ok()) ThrowStatus(status);
          },
          py::arg("epoch"), py::arg("first_batch") = 0)
      .def(
          "stats",
          [](L& self) {
            const client::Loader::Stats stats = self.Stats();
            auto seconds = [](absl::Duration d) {
              return absl::ToDoubleSeconds(d);
            };
            py::dict out;
            out["batches"] = stats.batches;
            out["images"] = stats.images;
            out["bytes"] = stats.bytes;
            out["received_bytes"] = stats.received_bytes;
            out["waited_s"] = seconds(stats.waited);
            out["startup_waited_s"] = seconds(stats.startup_waited);
            out["compute_s"] = seconds(stats.compute);
            out["copy_s"] = seconds(stats.copy);
            out["wall_s"] = seconds(stats.wall);
            out["last_step_waited_s"] = seconds(stats.last_step.waited);
            out["last_step_compute_s"] = seconds(stats.last_step.compute);
            out["last_step_copy_s"] = seconds(stats.last_step.copy);
            out["waited_fraction"] = stats.waited_fraction();
            out["steady_waited_fraction"] = stats.steady_waited_fraction();
            out["compute_fraction"] = stats.compute_fraction();
            out["copy_fraction"] = stats.copy_fraction();
            out["batches_per_second"] = stats.batches_per_second();
            out["images_per_second"] = stats.images_per_second();
            out["bytes_per_second"] = stats.bytes_per_second();
            out["received_bytes_per_second"] =
                stats.received_bytes_per_second();
            out["rerequested"] = stats.rerequested;
            out["hedged"] = stats.hedged;
            out["prefetch"] = stats.prefetch;
            out["prefetch_grows"] = stats.prefetch_grows;
            out["reports_sent"] = stats.reports_sent;
            out["reports_rejected"] = stats.reports_rejected;
            out["transport"] = stats.transport;
            out["transport_note"] = stats.transport_note;
            py::list daemons;
            for (const client::DaemonStats& d : stats.daemons) {
              py::dict daemon;
              daemon["endpoint"] = d.endpoint;
              daemon["state"] = d.state;
              daemon["requested"] = d.requested;
              daemon["served"] = d.served;
              daemon["lost"] = d.lost;
              daemon["hedges"] = d.hedges;
              daemon["cancelled"] = d.cancelled;
              daemon["discarded"] = d.discarded;
              daemon["latency_s"] = seconds(d.latency);
              daemon["last_error"] = std::string(d.last_error.message());
              daemon["transport"] = d.transport;
              daemons.append(daemon);
            }
            out["daemons"] = daemons;
            return out;
          },
          "client::Loader::Stats since the loader was created: totals "
          "(durations in seconds, keys ending in _s), the last step's "
          "times, and shares of wall time and rates.")
      .def(
          "timeline",
          [](L& self) {
            py::list epoch, batch, start, waited, copy, compute, ring_copy;
            for (const client::TimelineStep& step : self.Timeline()) {
              epoch.append(step.epoch);
              batch.append(step.batch_index);
              start.append(absl::ToDoubleSeconds(step.start -
                                                 absl::UnixEpoch()));
              waited.append(absl::ToDoubleSeconds(step.waited));
              copy.append(absl::ToDoubleSeconds(step.copy));
              compute.append(absl::ToDoubleSeconds(step.compute));
              ring_copy.append(absl::ToDoubleSeconds(step.ring_copy));
            }
            py::dict out;
            out["epoch"] = epoch;
            out["batch"] = batch;
            out["start_s"] = start;
            out["wait_s"] = waited;
            out["copy_s"] = copy;
            out["compute_s"] = compute;
            out["ring_copy_s"] = ring_copy;
            return out;
          },
          "client::Loader::timeline(): the last finished steps, oldest "
          "first, as a dict of equal-length lists (start_s in Unix "
          "seconds; durations in seconds).")
      .def(
          "diagnose",
          [](L& self) {
            absl::StatusOr<client::Diagnosis> diagnosis;
            {
              py::gil_scoped_release release;
              diagnosis = self.Diagnose();
            }
            if (!diagnosis.ok()) ThrowStatus(diagnosis.status());
            py::dict out;
            out["verdict"] = client::VerdictName(diagnosis->verdict);
            out["line"] = diagnosis->line;
            out["waited_fraction"] = diagnosis->waited_fraction;
            out["copy_fraction"] = diagnosis->copy_fraction;
            out["daemon_busy_fraction"] =
                diagnosis->daemon_busy_fraction < 0
                    ? py::object(py::none())
                    : py::object(py::float_(diagnosis->daemon_busy_fraction));
            out["daemon_workers"] = diagnosis->daemon_workers;
            out["daemon_augment_share"] = diagnosis->daemon_augment_share;
            out["stream_bytes_per_second"] =
                diagnosis->stream_bytes_per_second;
            return out;
          },
          "client::Loader::Diagnose(): the current epoch so far, with the "
          "daemon's status (fetched now, up to 2 s).")
      .def_property_readonly(
          "epoch_diagnosis", &L::EpochDiagnosis,
          "The last ended epoch's diagnosis line, or '' if none has ended.")
      .def("close", &L::Close, py::call_guard<py::gil_scoped_release>(),
           "Ends the stream. Batches already handed out stay valid.");
}

// The batch metadata every batch binding shares.
template <typename BatchT>
void BindBatchCommon(py::class_<PyBatch<BatchT>>& cls) {
  using P = PyBatch<BatchT>;
  cls.def_property_readonly("epoch",
                            [](P& self) { return self.get().batch().epoch; })
      .def_property_readonly(
          "batch_index", [](P& self) { return self.get().batch().batch_index; })
      .def_property_readonly(
          "sample_indices",
          [](P& self) { return self.get().batch().sample_indices; })
      .def_property_readonly("labels",
                             [](P& self) { return self.get().batch().labels; })
      .def_property_readonly(
          "repeats", [](P& self) { return self.get().batch().repeats; },
          "With Plan.repeats: which repeat of its image each sample is; "
          "empty otherwise.")
      .def_property_readonly(
          "sources", [](P& self) { return self.get().batch().sources; },
          "With Plan.sources: each sample's source (its number in the "
          "plan's sources); empty otherwise.")
      .def_property_readonly("shape",
                             [](P& self) {
                               const auto& shape = self.get().batch().shape;
                               py::tuple out(shape.size());
                               for (size_t i = 0; i < shape.size(); ++i) {
                                 out[i] = py::int_(shape[i]);
                               }
                               return out;
                             })
      .def_property_readonly(
          "views",
          [](P& self) {
            py::list out;
            for (const batchd::v1::ViewShape& view : self.get().batch().views) {
              py::tuple shape(view.shape_size());
              for (int i = 0; i < view.shape_size(); ++i) {
                shape[i] = py::int_(view.shape(i));
              }
              out.append(py::make_tuple(view.offset(), shape));
            }
            return out;
          },
          "With Plan.views: [(byte offset, shape)] of each view: in the "
          "received pixels (NativeBatch), or in the output, in its dtype "
          "and layout (NativeDeviceBatch); empty otherwise.")
      .def_property_readonly(
          "substitutions",
          [](P& self) {
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
          "field_values",
          [](P& self) {
            const auto& batch = self.get().batch();
            py::list out;
            const size_t samples =
                batch.field_count == 0 ? 0
                                       : batch.fields.size() / batch.field_count;
            for (size_t j = 0; j < batch.field_count; ++j) {
              py::list values;
              for (size_t i = 0; i < samples; ++i) {
                const absl::string_view v = batch.field(i, j);
                values.append(py::bytes(v.data(), v.size()));
              }
              out.append(values);
            }
            return out;
          },
          "per requested field, in the plan's order, each sample's bytes")
      .def_property_readonly(
          "field_counts",
          [](P& self) {
            py::list out;
            for (const auto& c : self.get().batch().field_counts) {
              out.append(py::make_tuple(c.cut(), c.missing()));
            }
            return out;
          },
          "(cut, missing) per requested field")
      .def_property_readonly(
          "address",
          [](P& self) { return reinterpret_cast<uintptr_t>(self.get().data()); },
          "Address of the first byte (the slot's memory).")
      .def_property_readonly("nbytes", [](P& self) { return self.get().size(); })
      .def_property_readonly("released", &P::released)
      .def("release", &P::Release,
           "Returns the slot now. Views of the memory taken before must not "
           "be used afterwards.");
}

}  // namespace batchd::python

#endif  // BATCHD_PYTHON_NATIVE_MODULE_COMMON_H_
