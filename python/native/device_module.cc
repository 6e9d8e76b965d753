// Bindings of client::DeviceLoader (client/device_loader.h) for batchd._native:
// NativeDeviceLoader and NativeDeviceBatch. Built only when the client's
// DeviceLoader is (target batchd_client_device).
//
// A NativeDeviceBatch is handed to torch through DLPack (to_dlpack()): the
// capsule takes over the batch, and torch's deleter releases its output
// slot, on the loader's consumer stream, when the last tensor using it is
// freed. On the device path next(stream) makes `stream` (the caller's
// current CUDA stream) wait for the batch's ready event, so the tensor is
// ready for work enqueued on that stream and the host never waits.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "client/device_loader.h"
#include "python/native/module_common.h"
#include "python/native/native_loader.h"

namespace batchd::python {

// DeviceLoader under the plain loader's queries.
template <>
struct LoaderTraits<client::DeviceLoader> {
  static const client::Loader& Base(const client::DeviceLoader& loader) {
    return loader.loader();
  }
};

namespace {

using DeviceFetchingLoader =
    FetchingLoader<client::DeviceLoader, client::DeviceBatch>;
using PyDeviceBatch = PyBatch<client::DeviceBatch>;

// The DLPack ABI (dlpack.h, v0.6+), as torch.utils.dlpack.from_dlpack
// reads it from a "dltensor" capsule.
struct DLDevice {
  int32_t device_type;  // 1 = kDLCPU, 2 = kDLCUDA
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 1 = kDLUInt, 2 = kDLFloat, 4 = kDLBfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// Owns the batch for as long as torch's tensor lives.
struct DlpackContext {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  std::unique_ptr<NativeBatch<client::DeviceBatch>> batch;
};

void DeleteDlpack(DLManagedTensor* managed) {
  // Releasing records an event on the consumer stream; no Python involved.
  delete static_cast<DlpackContext*>(managed->manager_ctx);
}

DLDataType ToDl(cuda::DType dtype) {
  switch (dtype) {
    case cuda::DType::kUint8:
      return {1, 8, 1};
    case cuda::DType::kFloat32:
      return {2, 32, 1};
    case cuda::DType::kFloat16:
      return {2, 16, 1};
    case cuda::DType::kBFloat16:
      return {4, 16, 1};
  }
  return {1, 8, 1};
}

cuda::DType ParseDType(const std::string& name) {
  if (name == "uint8") return cuda::DType::kUint8;
  if (name == "float32") return cuda::DType::kFloat32;
  if (name == "float16") return cuda::DType::kFloat16;
  if (name == "bfloat16") return cuda::DType::kBFloat16;
  throw py::value_error("dtype must be uint8, float32, float16 or bfloat16, "
                        "not '" + name + "'");
}

py::capsule ToDlpack(PyDeviceBatch& self, int device_id) {
  auto context = std::make_unique<DlpackContext>();
  context->batch = self.Take();
  const client::DeviceBatch& batch = context->batch->batch();
  for (uint64_t dim : batch.shape) {
    context->shape.push_back(static_cast<int64_t>(dim));
  }
  DLTensor& tensor = context->managed.dl_tensor;
  tensor.data = context->batch->data();
  tensor.device = batch.on_device() ? DLDevice{2, device_id} : DLDevice{1, 0};
  tensor.ndim = static_cast<int32_t>(context->shape.size());
  tensor.dtype = ToDl(batch.dtype);
  tensor.shape = context->shape.data();
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  context->managed.manager_ctx = context.get();
  context->managed.deleter = DeleteDlpack;
  DLManagedTensor* managed = &context.release()->managed;
  // An unconsumed capsule still frees the batch; a consumer renames it
  // "used_dltensor" and calls the deleter itself.
  return py::capsule(managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(
          PyCapsule_GetPointer(capsule, "dltensor"));
      m->deleter(m);
    }
  });
}

std::unique_ptr<DeviceFetchingLoader> MakeDeviceLoader(
    const LoaderArgs& args, const std::string& dtype, std::vector<float> mean,
    std::vector<float> std, int depth, uintptr_t consumer_stream,
    bool force_host) {
  client::DeviceLoaderOptions options;
  options.loader = LoaderOptionsOrThrow(args);
  options.normalize.dtype = ParseDType(dtype);
  options.normalize.layout =
      args.layout == "nchw" ? cuda::Layout::kNCHW : cuda::Layout::kNHWC;
  options.normalize.mean = std::move(mean);
  options.normalize.std = std::move(std);
  options.depth = depth;
  options.consumer_stream = reinterpret_cast<cuda::StreamHandle>(consumer_stream);
  options.force_host = force_host;
  absl::StatusOr<std::unique_ptr<client::DeviceLoader>> loader;
  {
    py::gil_scoped_release release;
    loader = client::DeviceLoader::Create(std::move(options));
  }
  if (!loader.ok()) ThrowStatus(loader.status());
  return std::make_unique<DeviceFetchingLoader>(*std::move(loader));
}

}  // namespace

void BindEraseMix(py::module_& m);                     // erase_mix_module.cc
py::object EraseMixOf(const client::BatchInfo& batch);  // erase_mix_module.cc

void BindDeviceLoader(py::module_& m) {
  BindEraseMix(m);
  py::class_<PyDeviceBatch> batch(
      m, "NativeDeviceBatch",
      "One batch in its final dtype and layout, leasing an output slot of a "
      "NativeDeviceLoader; on the GPU or in host memory.");
  BindBatchCommon(batch);
  batch
      .def_property_readonly(
          "on_device",
          [](PyDeviceBatch& self) { return self.get().batch().on_device(); })
      .def_property_readonly("dtype",
                             [](PyDeviceBatch& self) {
                               return cuda::DTypeName(self.get().batch().dtype);
                             })
      .def_property_readonly(
          "erase_mix",
          [](PyDeviceBatch& self) { return EraseMixOf(self.get().batch()); },
          "What the daemon drew for this batch: ([(position, top, left, "
          "height, width, noise, noise_key)], None or (kind, lambda, (top, "
          "left, height, width), label_smoothing, num_classes)).")
      .def_property_readonly(
          "num_classes",
          [](PyDeviceBatch& self) { return self.get().batch().num_classes; },
          "Columns of soft_labels; 0 without a mix in the plan.")
      .def_property_readonly(
          "soft_labels",
          [](PyDeviceBatch& self) {
            const std::vector<float>& soft = self.get().batch().soft_labels;
            return py::bytes(reinterpret_cast<const char*>(soft.data()),
                             soft.size() * sizeof(float));
          },
          "With a mix in the plan: the soft labels, [n, num_classes] "
          "float32 in native byte order; empty bytes otherwise.")
      .def("to_dlpack", &ToDlpack, py::arg("device_id") = 0,
           "A DLPack capsule that takes the batch over: the slot is released "
           "when the tensor made from it is freed. The batch object is "
           "released by this call.");

  py::class_<DeviceFetchingLoader> loader(
      m, "NativeDeviceLoader",
      "Streams one plan through client::DeviceLoader: pinned ring, copy "
      "stream and normalisation kernel on a CUDA device; normalisation on "
      "the CPU otherwise.");
  loader.def(py::init(&MakeDeviceLoader), py::arg("args"), py::kw_only(),
             py::arg("dtype") = "float32",
             py::arg("mean") = std::vector<float>(),
             py::arg("std") = std::vector<float>(),
             py::arg("depth") = client::DeviceLoaderOptions().depth,
             py::arg("consumer_stream") = 0, py::arg("force_host") = false,
             "Opens the plan `args` (a LoaderArgs) describes, with the "
             "DeviceLoader's output dtype, normalisation and depth.");
  BindLoaderCommon(loader);
  loader
      .def_property_readonly("path",
                             [](DeviceFetchingLoader& self) -> std::string {
                               const client::DeviceLoader* l = self.loader();
                               return l == nullptr ? "closed" : l->path();
                             })
      .def(
          "next",
          [](DeviceFetchingLoader& self, uintptr_t stream) -> py::object {
            auto next = self.Next(RunWithoutGil, CheckSignals);
            if (!next.ok()) ThrowStatus(next.status());
            if (*next == nullptr) return py::none();
            cuda::EventHandle ready = (*next)->batch().ready_event();
            if (ready != nullptr) {
              cuda::Status waited = cuda::StreamWaitEvent(
                  reinterpret_cast<cuda::StreamHandle>(stream), ready);
              if (!waited.ok()) {
                ThrowStatus(client::FromCudaStatus(waited));
              }
            }
            return py::cast(std::make_unique<PyDeviceBatch>(*std::move(next)));
          },
          py::arg("stream") = 0,
          "The next batch, or None at the end of the epoch. On the device, "
          "`stream` (a cudaStream_t as an int) is made to wait for the "
          "batch's copy and normalisation.");
}

}  // namespace batchd::python
