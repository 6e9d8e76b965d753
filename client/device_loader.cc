#include "client/device_loader.h"

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cuda/copy_engine.h"
#include "client/cuda/erase_mix.h"
#include "client/erase_mix_batch.h"
#include "common/status_macros.h"

// Evaluates `expr` (a batchd::cuda::Status) and returns it as an
// absl::Status when it is not OK.
#define RETURN_IF_CUDA_ERROR(expr)                                         \
  do {                                                                     \
    const ::batchd::cuda::Status batchd_cuda_status_ = (expr);             \
    if (!batchd_cuda_status_.ok()) {                                       \
      return ::batchd::client::FromCudaStatus(batchd_cuda_status_);        \
    }                                                                      \
  } while (false)

namespace batchd::client {

absl::Status FromCudaStatus(const cuda::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code()),
                      status.message());
}

namespace {

constexpr int kMaxDepth = 64;

// Pinned memory owned by a cuda::PinnedBuffer.
class PinnedHostBuffer : public HostBuffer {
 public:
  explicit PinnedHostBuffer(std::unique_ptr<cuda::PinnedBuffer> buffer)
      : buffer_(std::move(buffer)) {}
  uint8_t* data() override { return buffer_->data(); }
  size_t size() const override { return buffer_->size(); }

 private:
  const std::unique_ptr<cuda::PinnedBuffer> buffer_;
};

class PinnedAllocator : public BufferAllocator {
 public:
  PinnedAllocator() {
    if (!cuda::ProbeDevice().ok()) heap_ = NewHeapAllocator();
  }
  absl::StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes) override {
    if (heap_ != nullptr) return heap_->Allocate(bytes);
    std::unique_ptr<cuda::PinnedBuffer> buffer;
    RETURN_IF_CUDA_ERROR(cuda::PinnedBuffer::Allocate(bytes, &buffer));
    return std::unique_ptr<HostBuffer>(new PinnedHostBuffer(std::move(buffer)));
  }
  const char* name() const override {
    return heap_ != nullptr ? "heap" : "cuda-pinned";
  }
  // Pins a shared-memory ring, so that the copy engine reads the daemon's
  // decode output straight from it.
  absl::StatusOr<std::shared_ptr<void>> Register(uint8_t* data,
                                                 size_t bytes) override {
    if (heap_ != nullptr) return std::shared_ptr<void>();
    std::unique_ptr<cuda::HostRegistration> registration;
    RETURN_IF_CUDA_ERROR(
        cuda::HostRegistration::Register(data, bytes, &registration));
    return std::shared_ptr<void>(std::move(registration));
  }

 private:
  std::unique_ptr<BufferAllocator> heap_;  // set when there is no device
};

cuda::Layout ToCudaLayout(batchd::v1::Layout layout) {
  return layout == batchd::v1::LAYOUT_NCHW ? cuda::Layout::kNCHW
                                           : cuda::Layout::kNHWC;
}

}  // namespace

std::unique_ptr<BufferAllocator> NewPinnedAllocator() {
  return std::make_unique<PinnedAllocator>();
}

namespace internal {

// State shared by a DeviceLoader and the DeviceBatches it returned.
class DeviceLoaderCore {
 public:
  // Constant after construction. The allocator is declared first so that
  // it outlives everything allocated from it.
  std::unique_ptr<BufferAllocator> allocator;
  cuda::NormalizeSpec spec;
  // The plan asked for: what a batch's erasing and mix are checked against.
  batchd::v1::Plan plan;
  cuda::StreamHandle consumer_stream = nullptr;
  int depth = 0;
  size_t max_output_bytes = 0;
  // Host path: the output slots. Empty on the device path.
  std::vector<std::unique_ptr<HostBuffer>> host_outputs;

  // Device path, consumer thread only: received batches whose pinned bytes
  // the copy stream may still be reading, oldest first. Each holds a slot
  // of the Loader's ring until its copy completes.
  struct Pending {
    Batch batch;
    cuda::EventHandle input_consumed;
  };
  std::deque<Pending> pending;
  // Device path: the copy engine. Null on the host path. Declared after
  // `pending` so that it is destroyed first: its destructor drains the copy
  // stream before the pinned batches it reads are released.
  std::unique_ptr<cuda::CopyEngine> engine;

  absl::Mutex mu;
  // Host path: which output slots a DeviceBatch holds.
  std::vector<bool> host_leased ABSL_GUARDED_BY(mu);

  bool on_device() const { return engine != nullptr; }

  // Frees the pending batches whose copy has completed; with `at_most`
  // pending left over, waits (host) for the oldest copies first.
  absl::Status ReapPending(size_t at_most) {
    while (!pending.empty()) {
      bool done = false;
      RETURN_IF_CUDA_ERROR(
          cuda::QueryEvent(pending.front().input_consumed, &done));
      if (!done && pending.size() > at_most) {
        RETURN_IF_CUDA_ERROR(
            cuda::SynchronizeEvent(pending.front().input_consumed));
        done = true;
      }
      if (!done) break;
      pending.pop_front();
    }
    return absl::OkStatus();
  }

  // Host path: leases a free output slot, or -1.
  int AcquireHostSlot() {
    absl::MutexLock lock(&mu);
    for (size_t i = 0; i < host_leased.size(); ++i) {
      if (!host_leased[i]) {
        host_leased[i] = true;
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  void ReleaseSlot(int slot, cuda::StreamHandle stream) {
    if (engine != nullptr) {
      const cuda::Status status = engine->Release(slot, stream);
      if (!status.ok()) {
        std::fprintf(stderr, "batchd: releasing device batch slot %d: %s\n",
                     slot, status.ToString().c_str());
      }
      return;
    }
    absl::MutexLock lock(&mu);
    host_leased[slot] = false;
  }

  // What Next() makes of a received batch on either path.
  struct Prepared {
    // One per view with Plan.views, else one (cuda::MakeNormalizeParts).
    std::vector<cuda::NormalizePart> parts;
    cuda::EraseMix erase_mix;
    std::vector<float> soft_labels;
  };

  // Resolves `batch`'s normalisation, erasing, mix and soft labels. The
  // daemon's answer is checked: INTERNAL for pixels that are not what the
  // shapes promise or do not fit the output slots, or erasing or mix on a
  // batch of views; INVALID_ARGUMENT for a normalisation its shape cannot
  // take.
  absl::Status Prepare(const Batch& batch, Prepared* out) const {
    std::vector<std::vector<uint64_t>> shapes;
    if (batch.views.empty()) {
      shapes.push_back(batch.shape);
    } else {
      for (const batchd::v1::ViewShape& view : batch.views) {
        shapes.emplace_back(view.shape().begin(), view.shape().end());
      }
    }
    RETURN_IF_CUDA_ERROR(cuda::MakeNormalizeParts(
        shapes, ToCudaLayout(batch.layout), spec, &out->parts));
    if (cuda::PartsInputBytes(out->parts) != batch.size() ||
        cuda::PartsOutputBytes(out->parts) > max_output_bytes) {
      return absl::InternalError(absl::StrCat(
          "batch ", batch.batch_index, " has ", batch.size(),
          " bytes, not what its shape and the plan promise"));
    }
    if (!batch.views.empty()) {
      if (!batch.erased.empty() || batch.mix.has_value()) {
        return absl::InternalError(absl::StrCat(
            "batch ", batch.batch_index,
            " has views and erased regions or a mix, which no plan gives"));
      }
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(ToEraseMix(batch, out->parts[0].params, &out->erase_mix));
    return SoftLabelsOf(batch, out->erase_mix.mix, plan, &out->soft_labels);
  }

  // Moves the metadata of `batch` into `out` and points it at a slot whose
  // output is `prepared`'s parts (one after another).
  static void Fill(Batch& batch, const std::shared_ptr<DeviceLoaderCore>& core,
                   int slot, const void* data, size_t size,
                   cuda::EventHandle ready, Prepared& prepared,
                   DeviceBatch* out) {
    static_cast<BatchInfo&>(*out) = std::move(static_cast<BatchInfo&>(batch));
    const std::vector<cuda::NormalizePart>& parts = prepared.parts;
    if (out->views.empty()) {
      out->shape = parts[0].params.output_shape();
    } else {
      // As Batch: the flat elements, and each view's shape and offset (now
      // in the output's layout and bytes).
      out->shape = {cuda::PartsOutputBytes(parts) /
                    cuda::DTypeBytes(core->spec.dtype)};
      for (size_t v = 0; v < parts.size(); ++v) {
        batchd::v1::ViewShape& view = out->views[v];
        const std::vector<uint64_t> shape = parts[v].params.output_shape();
        view.mutable_shape()->Assign(shape.begin(), shape.end());
        view.set_offset(parts[v].output_offset);
      }
    }
    out->dtype = core->spec.dtype;
    out->layout = parts[0].params.out_layout;
    out->num_classes =
        out->mix.has_value() ? out->mix->num_classes() : uint32_t{0};
    out->soft_labels = std::move(prepared.soft_labels);
    out->core_ = core;
    out->slot_ = slot;
    out->data_ = data;
    out->size_ = size;
    out->on_device_ = core->on_device();
    out->ready_ = ready;
  }
};

}  // namespace internal

DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept { *this = std::move(other); }

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  BatchInfo::operator=(std::move(other));
  shape = std::move(other.shape);
  dtype = other.dtype;
  layout = other.layout;
  soft_labels = std::move(other.soft_labels);
  num_classes = other.num_classes;
  core_ = std::move(other.core_);
  slot_ = std::exchange(other.slot_, -1);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  on_device_ = other.on_device_;
  ready_ = std::exchange(other.ready_, nullptr);
  return *this;
}

DeviceBatch::~DeviceBatch() { Release(); }

void DeviceBatch::Release() {
  if (core_ == nullptr) return;
  Release(core_->consumer_stream);
}

void DeviceBatch::Release(cuda::StreamHandle stream) {
  if (core_ == nullptr) return;
  core_->ReleaseSlot(slot_, stream);
  core_.reset();
  slot_ = -1;
  data_ = nullptr;
  size_ = 0;
  ready_ = nullptr;
}

absl::StatusOr<std::unique_ptr<DeviceLoader>> DeviceLoader::Create(
    DeviceLoaderOptions options) {
  if (options.loader.allocator != nullptr) {
    return absl::InvalidArgumentError(
        "DeviceLoaderOptions.loader.allocator must be null: the device "
        "loader allocates its own (pinned) buffers");
  }
  if (options.depth < 1 || options.depth > kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "depth must be 1..", kMaxDepth, ", got ", options.depth));
  }
  const batchd::v1::Pipeline& pipeline = options.loader.plan.pipeline();
  if (options.loader.plan.views_size() > 0 &&
      (pipeline.has_erasing() || pipeline.has_mix())) {
    // Each view is normalised on its own; erasing and mixing work on one
    // image tensor (and the daemon refuses the plan too).
    return absl::InvalidArgumentError(
        "the plan has views (Plan.views) and RandomErasing or MixUp/CutMix "
        "(pipeline.erasing, pipeline.mix), which do not work with views: "
        "leave erasing and mix unset, or the views");
  }
  if ((pipeline.has_erasing() || pipeline.has_mix()) &&
      options.normalize.dtype == cuda::DType::kUint8) {
    return absl::InvalidArgumentError(
        "the plan has RandomErasing or MixUp/CutMix (pipeline.erasing, "
        "pipeline.mix), which work on the normalised tensor: ask for a float "
        "output (normalize.dtype float32, float16 or bfloat16)");
  }
  auto core = std::make_shared<internal::DeviceLoaderCore>();
  cuda::DeviceInfo device;
  cuda::Status probe =
      options.force_host ? cuda::UnavailableError("host path forced")
                         : cuda::ProbeDevice(&device);
  const bool use_device = probe.ok();
  core->allocator = use_device ? NewPinnedAllocator() : NewHeapAllocator();
  core->spec = options.normalize;
  core->plan = options.loader.plan;
  core->consumer_stream = options.consumer_stream;
  core->depth = options.depth;
  options.loader.allocator = core->allocator.get();
  ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader,
                   Loader::Create(std::move(options.loader)));

  const batchd::v1::PlanOpened& opened = loader->opened();
  const cuda::Layout in_layout = ToCudaLayout(opened.layout());
  // Checks the normalisation against the images' shape; with views that is
  // the flat [bytes] of all of them, and every view has 3 channels.
  std::vector<uint64_t> shape(opened.shape().begin(), opened.shape().end());
  if (core->plan.views_size() > 0) {
    shape = in_layout == cuda::Layout::kNHWC ? std::vector<uint64_t>{1, 1, 1, 3}
                                             : std::vector<uint64_t>{1, 3, 1, 1};
  }
  cuda::NormalizeParams params;
  RETURN_IF_CUDA_ERROR(
      cuda::MakeNormalizeParams(shape, in_layout, core->spec, &params));
  // Views are normalised one after another (cuda::MakeNormalizeParts), so
  // their output is as large as one image tensor of the same bytes.
  core->max_output_bytes =
      opened.max_batch_bytes() * cuda::DTypeBytes(core->spec.dtype);
  const bool plain_copy = core->spec.dtype == cuda::DType::kUint8 &&
                          core->spec.layout == in_layout;

  if (use_device) {
    cuda::CopyEngineOptions engine_options;
    engine_options.depth = options.depth;
    engine_options.max_input_bytes = opened.max_batch_bytes();
    engine_options.max_output_bytes = plain_copy ? 0 : core->max_output_bytes;
    RETURN_IF_CUDA_ERROR(cuda::CopyEngine::Create(engine_options, &core->engine));
    std::fprintf(stderr,
                 "batchd: client batches on CUDA device %d (%s): %s ring "
                 "of %u, copy stream with %d slots, %s %s on the GPU\n",
                 device.device, device.name.c_str(), core->allocator->name(),
                 loader->window(), options.depth,
                 cuda::DTypeName(core->spec.dtype),
                 cuda::LayoutName(core->spec.layout));
  } else {
    for (int i = 0; i < options.depth; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<HostBuffer> buffer,
                       core->allocator->Allocate(core->max_output_bytes));
      core->host_outputs.push_back(std::move(buffer));
    }
    {
      absl::MutexLock lock(&core->mu);
      core->host_leased.assign(options.depth, false);
    }
    std::fprintf(stderr,
                 "batchd: client batches in host memory (%s): %s ring of %u, "
                 "%s %s on the CPU\n",
                 probe.message().c_str(), core->allocator->name(),
                 loader->window(), cuda::DTypeName(core->spec.dtype),
                 cuda::LayoutName(core->spec.layout));
  }
  return std::unique_ptr<DeviceLoader>(
      new DeviceLoader(std::move(core), std::move(loader)));
}

DeviceLoader::DeviceLoader(std::shared_ptr<internal::DeviceLoaderCore> core,
                           std::unique_ptr<Loader> loader)
    : core_(std::move(core)), loader_(std::move(loader)) {}

DeviceLoader::~DeviceLoader() {
  // Let in-flight copies finish reading the pinned ring before the Loader
  // (and so its reader thread) goes away.
  (void)core_->ReapPending(/*at_most=*/0);
  loader_.reset();
}

absl::Status DeviceLoader::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  return loader_->StartEpoch(epoch, first_batch);
}

absl::Status DeviceLoader::Restore(const LoaderState& state) {
  return loader_->Restore(state);
}

LoaderState DeviceLoader::state() const { return loader_->state(); }
bool DeviceLoader::on_device() const { return core_->on_device(); }
const char* DeviceLoader::path() const {
  return core_->on_device() ? "cuda" : "host";
}
int DeviceLoader::depth() const { return core_->depth; }

absl::StatusOr<DeviceBatch> DeviceLoader::Next() {
  internal::DeviceLoaderCore& core = *core_;
  internal::DeviceLoaderCore::Prepared prepared;
  DeviceBatch out;
  if (core.on_device()) {
    if (core.engine->free_slots() == 0) {
      return absl::FailedPreconditionError(
          "every device batch slot is held; release a DeviceBatch first");
    }
    // Keep a slot of the Loader's ring free for the batch we ask for.
    const size_t window = loader_->window();
    RETURN_IF_ERROR(core.ReapPending(window > 0 ? window - 1 : 0));
    ASSIGN_OR_RETURN(Batch batch, loader_->Next());
    RETURN_IF_ERROR(core.Prepare(batch, &prepared));
    // uint8 in the received layout: the copy is the output (the parts'
    // offsets are the input's).
    const bool plain_copy = core.spec.dtype == cuda::DType::kUint8 &&
                            core.spec.layout == ToCudaLayout(batch.layout) &&
                            !prepared.erase_mix.active();
    const std::vector<cuda::NormalizePart> raw_copy;
    cuda::CopyTicket ticket;
    // Reported as copy time (for the client-bound diagnosis): the enqueue
    // only. The copy and kernel run asynchronously on the copy stream, and
    // timing their completion would need a host sync (or reading events
    // later), which is what this path exists to avoid; a copy engine that
    // falls behind shows up as Submit() blocking on a free slot, which this
    // does measure.
    const absl::Time enqueue_start = absl::Now();
    RETURN_IF_CUDA_ERROR(core.engine->Submit(
        batch.data(), batch.size(),
        plain_copy ? raw_copy : prepared.parts, &ticket,
        &prepared.erase_mix));
    loader_->RecordCopy(absl::Now() - enqueue_start);
    internal::DeviceLoaderCore::Fill(batch, core_, ticket.slot, ticket.output,
                                     ticket.output_bytes, ticket.ready,
                                     prepared, &out);
    core.pending.push_back({std::move(batch), ticket.input_consumed});
    return out;
  }

  const int slot = core.AcquireHostSlot();
  if (slot < 0) {
    return absl::FailedPreconditionError(
        "every batch slot is held; release a DeviceBatch first");
  }
  absl::StatusOr<Batch> batch = loader_->Next();
  absl::Status status = batch.status();
  if (status.ok()) status = core.Prepare(*batch, &prepared);
  if (!status.ok()) {
    core.ReleaseSlot(slot, nullptr);
    return status;
  }
  void* output = core.host_outputs[slot]->data();
  // The host path's copy: received slot -> output slot, normalised on the
  // CPU. Reported as copy time, so the diagnosis sees it.
  const absl::Time copy_start = absl::Now();
  if (prepared.erase_mix.active()) {
    cuda::NormalizeEraseMixCpu(batch->data(), output, prepared.parts[0].params,
                               prepared.erase_mix);
  } else {
    cuda::NormalizePartsCpu(batch->data(), output, prepared.parts);
  }
  loader_->RecordCopy(absl::Now() - copy_start);
  internal::DeviceLoaderCore::Fill(*batch, core_, slot, output,
                                   cuda::PartsOutputBytes(prepared.parts),
                                   nullptr, prepared, &out);
  return out;
}

}  // namespace batchd::client
