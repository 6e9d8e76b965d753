#include "client/loader.h"

#include <time.h>

#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/diagnosis.h"
#include "common/chunk_codec.h"
#include "common/malloc_tuning.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace batchd::client {

using ::batchd::v1::BatchChunk;
using ::batchd::v1::BatchHeader;
using ::batchd::v1::PlanOpened;
using ::batchd::v1::RequestRejected;
using ::batchd::v1::StreamRequest;
using ::batchd::v1::StreamResponse;

std::shared_ptr<grpc::Channel> NewBatchdChannel(const std::string& endpoint) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::StatusOr<batchd::v1::ServerStatus> FetchServerStatus(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout) {
  auto stub = batchd::v1::AdminService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  batchd::v1::ServerStatus status;
  const grpc::Status result =
      stub->GetStatus(&context, batchd::v1::GetStatusRequest(), &status);
  if (!result.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(result.error_code()),
                        absl::StrCat("GetStatus: ", result.error_message()));
  }
  return status;
}

namespace internal {
namespace {

// CPU time used by the calling thread so far.
absl::Duration ThreadCpuTime() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return absl::DurationFromTimespec(now);
}


// How long the destructor waits for a clean end of the stream after
// half-closing it before cancelling.
constexpr absl::Duration kCloseGrace = absl::Seconds(2);

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

std::string BatchName(uint64_t epoch, uint64_t index) {
  return absl::StrCat("batch ", index, " of epoch ", epoch);
}

// How long a diagnosis waits for the daemon's status.
constexpr absl::Duration kStatusTimeout = absl::Seconds(2);

}  // namespace

// Everything a Loader and its Batches share: the stream, the reader thread
// and the ring. Owned jointly (shared_ptr) by the Loader and the Batches it
// returned, so a Batch may outlive its Loader; Shutdown() (called by
// ~Loader) stops the stream and joins the reader thread.
//
// Slot life cycle:
//   kFree --RequestMore--> kRequested --last chunk--> kReady --Next--> kLeased
//                                     --rejected---> kFailed --Next--> kFree
//   kLeased --Batch released--> kFree
// A kRequested slot whose batch is no longer wanted (StartEpoch moved on) is
// `orphaned`: it becomes kFree when the batch completes, unless a later
// request asks for the same batch and adopts it.
class LoaderCore {
 public:
  explicit LoaderCore(LoaderOptions options)
      : options_(std::move(options)), created_(absl::Now()) {}
  ~LoaderCore() { Shutdown(); }

  absl::Status Open();
  void Shutdown();
  void Cancel();

  const PlanOpened& opened() const { return opened_; }
  uint32_t window() const { return static_cast<uint32_t>(slots_.size()); }

  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch);
  // Next() with stall accounting around NextImpl().
  absl::StatusOr<Batch> Next(std::shared_ptr<LoaderCore> self);
  LoaderState state() const;
  Loader::Stats stats() const;
  void RecordCopy(absl::Duration duration);
  Diagnosis Diagnose();
  std::string epoch_diagnosis() const;
  void ReleaseSlot(int slot);

 private:
  enum class SlotState { kFree, kRequested, kReady, kFailed, kLeased };
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  struct Slot {
    // Constant after Open(). While kRequested its bytes belong to the reader
    // thread; while kLeased to the Batch.
    std::unique_ptr<HostBuffer> buffer;
    // The rest is protected by mu_.
    SlotState state = SlotState::kFree;
    Key key{0, 0};
    bool orphaned = false;         // kRequested only
    bool header_received = false;  // kRequested/kReady
    BatchHeader header;            // valid once header_received
    uint64_t received_bytes = 0;
    absl::Duration copy;           // copying this batch's chunks so far
    absl::Status error;            // kFailed: the rejection
  };

  absl::StatusOr<Batch> NextImpl(std::shared_ptr<LoaderCore> self);
  // The daemon's admin status, or nullopt when it cannot be had within
  // kStatusTimeout. Blocks; call without holding a lock.
  std::optional<batchd::v1::ServerStatus> FetchStatus();
  // Marks the start of an epoch for its diagnosis. Blocks on FetchStatus.
  void MarkEpochStart() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits as a link of max_receive_bytes_per_second would after `bytes`
  // more bytes. Reader thread only; wakes on shutdown.
  void Pace(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void ReaderLoop();
  // Handles one response. REQUIRES: called by the reader thread only.
  absl::Status HandleResponse(StreamResponse& response);
  absl::Status HandleHeader(BatchHeader& header);
  // Where a chunk's bytes go (its slot, at the next offset), or a protocol
  // error; then the bookkeeping once they are there.
  absl::StatusOr<uint8_t*> ChunkDestination(const common::ChunkInfo& chunk);
  absl::Status ChunkReceived(const common::ChunkInfo& chunk,
                             absl::Duration copy);
  absl::Status HandleRejected(const RequestRejected& rejected);
  // Maps how the stream ended to the status consumers see.
  absl::Status EndStatus(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks a kRequested slot complete. REQUIRES: called by the reader thread.
  void CompleteLocked(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int FindLocked(const Key& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks for the next batches of the current epoch that have no slot yet,
  // into free slots. Sends without holding mu_.
  void RequestMore() ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  absl::Status ProtocolError(absl::string_view what) const {
    return absl::InternalError(absl::StrCat("protocol error from batchd at ",
                                            options_.endpoint, ": ", what));
  }

  // Constant after construction.
  const LoaderOptions options_;
  const absl::Time created_;
  // Constant after Open() returns OK.
  std::unique_ptr<BufferAllocator> owned_allocator_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;  // TryCancel() is thread-safe
  // Responses are read as raw bytes so that chunk data goes straight from
  // gRPC's buffers into the slot (common/chunk_codec.h).
  std::unique_ptr<grpc::ClientReaderWriter<StreamRequest, common::RawMessage>>
      stream_;  // Read() by the reader thread; Write/WritesDone/Finish under write_mu_
  PlanOpened opened_;  // written by the reader before opened_received_ is set
  std::vector<Slot> slots_;  // size fixed in Open(); fields as documented
  std::thread reader_;

  // Reader thread only: the slot whose chunks are arriving, or -1; whether
  // handling the last response freed an orphaned slot.
  int receiving_ = -1;
  bool freed_orphan_ = false;
  // Reader thread only: when the paced link is free again.
  absl::Time link_free_ = absl::InfinitePast();

  // Serialises writes to the stream; the reader's Finish() takes it too.
  absl::Mutex write_mu_ ABSL_ACQUIRED_AFTER(mu_);
  bool writes_closed_ ABSL_GUARDED_BY(write_mu_) = false;

  mutable absl::Mutex mu_;
  bool opened_received_ ABSL_GUARDED_BY(mu_) = false;
  bool ring_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Cancel() was called: Next() returns CANCELLED from then on.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  // Sticky: the first failure of the stream. Once set, nothing is requested.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Requested/ready/failed slots by batch; at most one slot per key.
  absl::flat_hash_map<Key, int> pending_ ABSL_GUARDED_BY(mu_);
  bool epoch_started_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_batch_ ABSL_GUARDED_BY(mu_) = 0;
  Loader::Stats stats_ ABSL_GUARDED_BY(mu_);
  // When the last Next() returned; the gap to the next call is compute.
  std::optional<absl::Time> last_return_ ABSL_GUARDED_BY(mu_);
  // No batch returned since StartEpoch() yet.
  bool first_of_epoch_ ABSL_GUARDED_BY(mu_) = false;
  // The current epoch's start, for its diagnosis.
  Loader::Stats epoch_start_stats_ ABSL_GUARDED_BY(mu_);
  std::optional<batchd::v1::ServerStatus> epoch_start_status_
      ABSL_GUARDED_BY(mu_);
  // Whether the current epoch's end has been reported, and the last line.
  bool epoch_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::string epoch_diagnosis_ ABSL_GUARDED_BY(mu_);
};

absl::Status LoaderCore::Open() {
  if (options_.endpoint.empty()) {
    return absl::InvalidArgumentError("LoaderOptions.endpoint is empty");
  }
  BufferAllocator* allocator = options_.allocator;
  if (allocator == nullptr) {
    owned_allocator_ = NewHeapAllocator();
    allocator = owned_allocator_.get();
  }

  channel_ = NewBatchdChannel(options_.endpoint);
  const absl::Time connect_deadline = absl::Now() + options_.connect_timeout;
  if (!channel_->WaitForConnected(absl::ToChronoTime(connect_deadline))) {
    return absl::UnavailableError(absl::StrCat(
        "could not connect to batchd at ", options_.endpoint, " within ",
        absl::FormatDuration(options_.connect_timeout)));
  }
  const grpc::internal::RpcMethod stream_batches(
      "/batchd.v1.DataService/StreamBatches",
      grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  stream_.reset(grpc::internal::ClientReaderWriterFactory<
                 StreamRequest, common::RawMessage>::Create(channel_.get(),
                                                            stream_batches,
                                                            &context_));

  StreamRequest open;
  *open.mutable_open()->mutable_plan() = options_.plan;
  open.mutable_open()->set_window(options_.prefetch);
  {
    absl::MutexLock lock(&write_mu_);
    // On failure the reader sees the end of the stream and reports why.
    stream_->Write(open);
  }
  reader_ = std::thread([this] { ReaderLoop(); });

  // Wait for `opened`, the stream's end, or the deadline.
  uint32_t granted = 0;
  uint64_t max_batch_bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return opened_received_ || !error_.ok();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&answered),
                              options_.connect_timeout)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "batchd at ", options_.endpoint, " did not answer the plan within ",
          absl::FormatDuration(options_.connect_timeout)));
    }
    if (!opened_received_) return error_;
    granted = opened_.window();
    max_batch_bytes = opened_.max_batch_bytes();
  }
  if (granted == 0) return ProtocolError("the granted window is 0");
  if (max_batch_bytes == 0) return ProtocolError("max_batch_bytes is 0");
  if (max_batch_bytes > std::numeric_limits<size_t>::max()) {
    return ProtocolError(absl::StrCat("max_batch_bytes ", max_batch_bytes,
                                      " does not fit in memory"));
  }
  uint32_t window = granted;
  if (options_.prefetch > 0 && options_.prefetch < window) {
    window = options_.prefetch;
  }

  // The reader thread touches slots only for requested batches, and nothing
  // has been requested yet, so the ring can be built without holding mu_.
  std::vector<Slot> slots(window);
  for (Slot& slot : slots) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator->Allocate(static_cast<size_t>(max_batch_bytes));
    if (!buffer.ok()) return buffer.status();
    if (*buffer == nullptr || (*buffer)->size() < max_batch_bytes) {
      return absl::InternalError(absl::StrCat(
          "allocator '", allocator->name(), "' returned a buffer smaller than ",
          max_batch_bytes, " bytes"));
    }
    slot.buffer = *std::move(buffer);
  }
  absl::MutexLock lock(&mu_);
  slots_ = std::move(slots);
  ring_ready_ = true;
  return error_;
}

void LoaderCore::Shutdown() {
  bool nothing_outstanding;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    nothing_outstanding = true;
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kRequested) nothing_outstanding = false;
    }
  }
  if (!reader_.joinable()) return;
  if (nothing_outstanding) {
    // A clean end: half-close, and the daemon finishes the stream with OK.
    {
      absl::MutexLock lock(&write_mu_);
      if (!writes_closed_) {
        writes_closed_ = true;
        stream_->WritesDone();
      }
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&reader_done_), kCloseGrace);
  }
  context_.TryCancel();  // a no-op once the stream has ended
  reader_.join();
}

void LoaderCore::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    // Sticky, so StartEpoch() refuses too and the stream's end (CANCELLED
    // by us, below) is not reported as a lost connection.
    if (error_.ok()) error_ = absl::CancelledError("the loader was cancelled");
  }
  // Thread-safe; wakes the reader's Read() so the reader thread ends. The
  // reader is joined by Shutdown(), in the destructor.
  context_.TryCancel();
}

void LoaderCore::ReaderLoop() {
  common::RawMessage raw;
  StreamResponse response;
  while (stream_->Read(&raw)) {
    // CPU time, not wall time: on a busy host the reader thread can be
    // descheduled mid-copy, and that wait is not the copy's cost.
    const absl::Duration decode_start = ThreadCpuTime();
    common::ChunkInfo chunk;
    absl::StatusOr<StreamResponse::KindCase> kind = common::DecodeResponse(
        raw.buffer, &response,
        [this](const common::ChunkInfo& info) {
          return ChunkDestination(info);
        },
        &chunk);
    raw.buffer.Clear();
    absl::Status status = kind.status();
    if (kind.ok() && *kind == StreamResponse::kChunk) {
      status = ChunkReceived(chunk, ThreadCpuTime() - decode_start);
      if (status.ok() && chunk.length > 0) Pace(chunk.length);
    } else if (kind.ok()) {
      status = HandleResponse(response);
    }
    if (status.ok() && freed_orphan_) {
      // A slot came free without a consumer involved: use it.
      freed_orphan_ = false;
      RequestMore();
    }
    if (!status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (error_.ok()) error_ = status;
      }
      context_.TryCancel();
      while (stream_->Read(&raw)) {
      }
      break;
    }
  }
  grpc::Status end;
  {
    absl::MutexLock lock(&write_mu_);
    writes_closed_ = true;
    end = stream_->Finish();
  }
  absl::MutexLock lock(&mu_);
  reader_done_ = true;
  if (error_.ok()) error_ = EndStatus(end);
}

absl::Status LoaderCore::EndStatus(const grpc::Status& status) {
  if (cancelled_) return absl::CancelledError("the loader was cancelled");
  if (shutdown_) return absl::CancelledError("the loader is shutting down");
  const std::string where = absl::StrCat("batchd at ", options_.endpoint);
  if (status.ok()) {
    int outstanding = 0;
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kRequested) ++outstanding;
    }
    if (outstanding > 0) {
      return absl::UnavailableError(
          absl::StrCat(where, " ended the stream with ", outstanding,
                       " requested batches not delivered"));
    }
    return absl::UnavailableError(absl::StrCat(where, " ended the stream"));
  }
  switch (status.error_code()) {
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE:
      // We did not cancel: the daemon went away or dropped the stream.
      return absl::UnavailableError(absl::StrCat(
          "lost the stream to ", where, ": ", status.error_message()));
    default:
      // The daemon's own verdict; its message says what to fix.
      return FromGrpc(status);
  }
}

absl::Status LoaderCore::HandleResponse(StreamResponse& response) {
  switch (response.kind_case()) {
    case StreamResponse::kOpened: {
      absl::MutexLock lock(&mu_);
      if (opened_received_) return ProtocolError("a second `opened` message");
      opened_ = response.opened();
      opened_received_ = true;
      return absl::OkStatus();
    }
    case StreamResponse::kHeader:
      return HandleHeader(*response.mutable_header());
    case StreamResponse::kChunk:
      // Decoded and copied by the reader loop; never reaches here.
      break;
    case StreamResponse::kRejected:
      return HandleRejected(response.rejected());
    case StreamResponse::KIND_NOT_SET:
      break;
  }
  return ProtocolError("an empty or unknown response message");
}

absl::Status LoaderCore::HandleHeader(BatchHeader& header) {
  const Key key{header.epoch(), header.batch_index()};
  absl::MutexLock lock(&mu_);
  if (!opened_received_) return ProtocolError("a header before `opened`");
  if (receiving_ >= 0) {
    return ProtocolError(absl::StrCat(
        "header of ", BatchName(key.first, key.second), " while ",
        BatchName(slots_[receiving_].key.first, slots_[receiving_].key.second),
        " is incomplete"));
  }
  const int index = FindLocked(key);
  if (index < 0 || slots_[index].state != SlotState::kRequested ||
      slots_[index].header_received) {
    return ProtocolError(absl::StrCat("header of ",
                                      BatchName(key.first, key.second),
                                      ", which is not awaited"));
  }
  Slot& slot = slots_[index];
  if (header.total_bytes() > slot.buffer->size()) {
    return ProtocolError(absl::StrCat(
        BatchName(key.first, key.second), " has ", header.total_bytes(),
        " bytes, more than max_batch_bytes ", opened_.max_batch_bytes()));
  }
  if (header.shape_size() > 0) {
    uint64_t elements = 1;
    for (uint64_t dim : header.shape()) {
      if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) {
        return ProtocolError("shape overflows");
      }
      elements *= dim;
    }
    if (elements != header.total_bytes()) {
      return ProtocolError(absl::StrCat(
          BatchName(key.first, key.second), " has shape with ", elements,
          " elements but ", header.total_bytes(), " bytes"));
    }
  }
  slot.header = std::move(header);
  slot.header_received = true;
  slot.received_bytes = 0;
  if (slot.header.total_bytes() == 0) {
    CompleteLocked(index);
  } else {
    receiving_ = index;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> LoaderCore::ChunkDestination(
    const common::ChunkInfo& chunk) {
  const Key key{chunk.epoch, chunk.batch_index};
  absl::MutexLock lock(&mu_);
  if (receiving_ < 0 || slots_[receiving_].key != key) {
    return ProtocolError(absl::StrCat(
        "chunk of ", BatchName(key.first, key.second),
        ", which is not the batch being received"));
  }
  Slot& slot = slots_[receiving_];
  const uint64_t total = slot.header.total_bytes();
  if (chunk.offset != slot.received_bytes) {
    return ProtocolError(absl::StrCat(
        "chunk of ", BatchName(key.first, key.second), " at offset ",
        chunk.offset, "; expected offset ", slot.received_bytes));
  }
  if (chunk.length > total - slot.received_bytes) {
    return ProtocolError(absl::StrCat(
        "chunk of ", BatchName(key.first, key.second), " at offset ",
        chunk.offset, " with ", chunk.length, " bytes overflows the batch's ",
        total, " bytes"));
  }
  // The slot's bytes belong to the reader thread while it is kRequested.
  return slot.buffer->data() + slot.received_bytes;
}

absl::Status LoaderCore::ChunkReceived(const common::ChunkInfo& chunk,
                                       absl::Duration copy) {
  absl::MutexLock lock(&mu_);
  Slot& slot = slots_[receiving_];
  slot.received_bytes += chunk.length;
  slot.copy += copy;
  stats_.copy += copy;
  stats_.received_bytes += chunk.length;
  if (slot.received_bytes == slot.header.total_bytes()) {
    CompleteLocked(receiving_);
    receiving_ = -1;
  }
  return absl::OkStatus();
}

absl::Status LoaderCore::HandleRejected(const RequestRejected& rejected) {
  const Key key{rejected.epoch(), rejected.batch_index()};
  absl::MutexLock lock(&mu_);
  const int index = FindLocked(key);
  if (index < 0 || slots_[index].state != SlotState::kRequested) {
    return ProtocolError(absl::StrCat("rejection of ",
                                      BatchName(key.first, key.second),
                                      ", which is not awaited"));
  }
  if (receiving_ == index) receiving_ = -1;
  absl::StatusCode code = static_cast<absl::StatusCode>(rejected.code());
  if (rejected.code() <= 0 || rejected.code() > 16) {
    code = absl::StatusCode::kUnknown;
  }
  Slot& slot = slots_[index];
  slot.error = absl::Status(
      code, absl::StrCat("batchd rejected ", BatchName(key.first, key.second),
                         ": ", rejected.message()));
  slot.header_received = false;
  CompleteLocked(index);
  if (slot.state == SlotState::kReady) slot.state = SlotState::kFailed;
  return absl::OkStatus();
}

void LoaderCore::CompleteLocked(int index) {
  Slot& slot = slots_[index];
  if (slot.orphaned) {
    FreeLocked(index);
    freed_orphan_ = true;
    return;
  }
  slot.state = SlotState::kReady;
}

void LoaderCore::FreeLocked(int index) {
  Slot& slot = slots_[index];
  auto it = pending_.find(slot.key);
  if (it != pending_.end() && it->second == index) pending_.erase(it);
  slot.state = SlotState::kFree;
  slot.orphaned = false;
  slot.header_received = false;
  slot.header.Clear();
  slot.received_bytes = 0;
  slot.copy = absl::ZeroDuration();
  slot.error = absl::OkStatus();
}

int LoaderCore::FindLocked(const Key& key) const {
  auto it = pending_.find(key);
  return it == pending_.end() ? -1 : it->second;
}

void LoaderCore::RequestMore() {
  StreamRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (!epoch_started_ || !ring_ready_ || shutdown_ || !error_.ok()) return;
    const uint64_t end = opened_.batches_per_epoch();
    batchd::v1::BatchRequest* batches = request.mutable_request();
    batches->set_epoch(epoch_);
    size_t free_slot = 0;
    for (uint64_t index = next_batch_;
         index < end && index - next_batch_ < slots_.size(); ++index) {
      const Key key{epoch_, index};
      const int existing = FindLocked(key);
      if (existing >= 0) {
        slots_[existing].orphaned = false;  // wanted again
        continue;
      }
      while (free_slot < slots_.size() &&
             slots_[free_slot].state != SlotState::kFree) {
        ++free_slot;
      }
      if (free_slot == slots_.size()) break;
      Slot& slot = slots_[free_slot];
      slot.state = SlotState::kRequested;
      slot.key = key;
      pending_[key] = static_cast<int>(free_slot);
      batches->add_batch_indices(index);
    }
    if (batches->batch_indices_size() == 0) return;
  }
  absl::MutexLock lock(&write_mu_);
  if (writes_closed_) return;
  // On failure the reader thread sees the end of the stream and reports why.
  stream_->Write(request);
}

absl::Status LoaderCore::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  {
    absl::MutexLock lock(&mu_);
    if (epoch > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epoch, " is beyond 2^32-1"));
    }
    if (first_batch > opened_.batches_per_epoch()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "first batch ", first_batch, " is beyond the epoch's ",
          opened_.batches_per_epoch(), " batches"));
    }
    if (!error_.ok()) return error_;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.state == SlotState::kRequested) {
        slot.orphaned = true;
      } else if (slot.state == SlotState::kReady ||
                 slot.state == SlotState::kFailed) {
        FreeLocked(static_cast<int>(i));
      }
    }
    epoch_started_ = true;
    first_of_epoch_ = true;
    epoch_ = epoch;
    next_batch_ = first_batch;
  }
  RequestMore();
  MarkEpochStart();
  return absl::OkStatus();
}

void LoaderCore::MarkEpochStart() {
  // Fetched after the requests went out, so the daemon starts working
  // while we wait for its answer.
  std::optional<batchd::v1::ServerStatus> status = FetchStatus();
  absl::MutexLock lock(&mu_);
  epoch_start_stats_ = stats_;
  epoch_start_stats_.wall = absl::Now() - created_;
  epoch_start_status_ = std::move(status);
  epoch_reported_ = false;
}

std::optional<batchd::v1::ServerStatus> LoaderCore::FetchStatus() {
  if (channel_ == nullptr) return std::nullopt;
  absl::StatusOr<batchd::v1::ServerStatus> status =
      FetchServerStatus(channel_, kStatusTimeout);
  if (!status.ok()) return std::nullopt;
  return *std::move(status);
}

Diagnosis LoaderCore::Diagnose() {
  // The client's figures first: the status RPC below is neither waiting nor
  // compute, and must not dilute the waited share.
  Loader::Stats interval;
  std::optional<batchd::v1::ServerStatus> start;
  {
    absl::MutexLock lock(&mu_);
    Loader::Stats current = stats_;
    current.wall = absl::Now() - created_;
    interval = current.Since(epoch_start_stats_);
    start = epoch_start_status_;
  }
  std::optional<batchd::v1::ServerStatus> now = FetchStatus();
  return client::Diagnose(interval, start ? &*start : nullptr,
                          now ? &*now : nullptr);
}

std::string LoaderCore::epoch_diagnosis() const {
  absl::MutexLock lock(&mu_);
  return epoch_diagnosis_;
}

void LoaderCore::RecordCopy(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  stats_.copy += duration;
  stats_.last_step.copy += duration;
}

void LoaderCore::Pace(uint64_t bytes) {
  if (options_.max_receive_bytes_per_second == 0) return;
  const absl::Time now = absl::Now();
  link_free_ = std::max(link_free_, now) +
               absl::Seconds(static_cast<double>(bytes) /
                             options_.max_receive_bytes_per_second);
  absl::MutexLock lock(&mu_);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || cancelled_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&stopped), link_free_);
}

absl::StatusOr<Batch> LoaderCore::Next(std::shared_ptr<LoaderCore> self) {
  const absl::Time entered = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (last_return_.has_value()) stats_.compute += entered - *last_return_;
  }
  absl::StatusOr<Batch> batch = NextImpl(std::move(self));
  const absl::Time returned = absl::Now();
  bool report = false;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    stats_.waited += returned - entered;
    if (batch.ok()) {
      stats_.last_step.waited = returned - entered;
      if (first_of_epoch_) stats_.startup_waited += returned - entered;
      first_of_epoch_ = false;
      stats_.last_step.compute =
          last_return_.has_value() ? entered - *last_return_
                                   : absl::ZeroDuration();
    }
    last_return_ = returned;
    if (absl::IsOutOfRange(batch.status()) && !epoch_reported_) {
      epoch_reported_ = true;
      report = true;
      epoch = epoch_;
    }
  }
  if (report) {
    const std::string line =
        absl::StrCat("epoch ", epoch, ": ", Diagnose().line);
    {
      absl::MutexLock lock(&mu_);
      epoch_diagnosis_ = line;
    }
    if (options_.report) options_.report(line);
  }
  return batch;
}

absl::StatusOr<Batch> LoaderCore::NextImpl(std::shared_ptr<LoaderCore> self) {
  for (;;) {
    RequestMore();
    absl::MutexLock lock(&mu_);
    // Before any ready batch: a cancelled loader hands out nothing more.
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    if (!epoch_started_) {
      return absl::FailedPreconditionError(
          "Next() before StartEpoch() or Restore()");
    }
    if (next_batch_ >= opened_.batches_per_epoch()) {
      return absl::OutOfRangeError(absl::StrCat(
          "end of epoch ", epoch_, ": all ", opened_.batches_per_epoch(),
          " batches returned"));
    }
    const Key key{epoch_, next_batch_};
    auto resolved = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const int index = FindLocked(key);
      return index < 0 || slots_[index].state == SlotState::kReady ||
             slots_[index].state == SlotState::kFailed || !error_.ok() ||
             shutdown_ || cancelled_;
    };
    mu_.Await(absl::Condition(&resolved));
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    const int index = FindLocked(key);
    if (index >= 0 && slots_[index].state == SlotState::kReady) {
      Slot& slot = slots_[index];
      pending_.erase(key);
      slot.state = SlotState::kLeased;
      Batch batch;
      batch.epoch = key.first;
      batch.batch_index = key.second;
      const BatchHeader& header = slot.header;
      batch.sample_indices.assign(header.sample_indices().begin(),
                                  header.sample_indices().end());
      batch.labels.assign(header.labels().begin(), header.labels().end());
      batch.shape.assign(header.shape().begin(), header.shape().end());
      batch.layout = header.layout() == batchd::v1::LAYOUT_UNSPECIFIED
                         ? batchd::v1::LAYOUT_NHWC
                         : header.layout();
      batch.substitutions.assign(header.substitutions().begin(),
                                 header.substitutions().end());
      batch.core_ = std::move(self);
      batch.slot_ = index;
      batch.data_ = slot.buffer->data();
      batch.size_ = static_cast<size_t>(header.total_bytes());
      slot.header.Clear();
      slot.header_received = false;
      ++next_batch_;
      ++stats_.batches;
      stats_.images += batch.sample_indices.size();
      stats_.bytes += batch.size_;
      stats_.last_step.copy = slot.copy;
      slot.copy = absl::ZeroDuration();
      return batch;
    }
    if (index >= 0 && slots_[index].state == SlotState::kFailed) {
      // The position stays; the next call asks for this batch again.
      absl::Status rejection = slots_[index].error;
      FreeLocked(index);
      return rejection;
    }
    if (!error_.ok()) return error_;
    if (shutdown_) return absl::CancelledError("the loader is shutting down");
    // Not requested yet: request it, unless every slot is leased.
    bool any_free = false;
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kFree) any_free = true;
    }
    if (!any_free) {
      bool all_leased = true;
      for (const Slot& slot : slots_) {
        if (slot.state != SlotState::kLeased) all_leased = false;
      }
      if (all_leased) {
        return absl::FailedPreconditionError(absl::StrCat(
            "all ", slots_.size(),
            " ring slots are held by unreleased Batch objects; release one "
            "before calling Next()"));
      }
      // Slots are busy with orphaned batches; wait for one to free up.
      auto slot_freed = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (FindLocked(key) >= 0 || !error_.ok() || shutdown_ || cancelled_) {
          return true;
        }
        for (const Slot& slot : slots_) {
          if (slot.state == SlotState::kFree) return true;
        }
        return false;
      };
      mu_.Await(absl::Condition(&slot_freed));
    }
  }
}

void LoaderCore::ReleaseSlot(int index) {
  {
    absl::MutexLock lock(&mu_);
    if (index < 0 || static_cast<size_t>(index) >= slots_.size() ||
        slots_[index].state != SlotState::kLeased) {
      return;
    }
    FreeLocked(index);
  }
  RequestMore();
}

LoaderState LoaderCore::state() const {
  absl::MutexLock lock(&mu_);
  return LoaderState{epoch_, next_batch_};
}

Loader::Stats LoaderCore::stats() const {
  absl::MutexLock lock(&mu_);
  Loader::Stats stats = stats_;
  stats.wall = absl::Now() - created_;
  return stats;
}

}  // namespace internal

Batch::Batch(Batch&& other) noexcept { *this = std::move(other); }

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  BatchInfo::operator=(std::move(other));
  shape = std::move(other.shape);
  layout = other.layout;
  core_ = std::move(other.core_);
  slot_ = std::exchange(other.slot_, -1);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Batch::~Batch() { Release(); }

void Batch::Release() {
  if (core_ != nullptr) {
    std::shared_ptr<internal::LoaderCore> core = std::move(core_);
    core->ReleaseSlot(slot_);
  }
  slot_ = -1;
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(LoaderOptions options) {
  // Receiving 4 MiB messages without this costs ~6x the CPU (see the header).
  common::TuneMallocForLargeBuffers();
  auto core = std::make_shared<internal::LoaderCore>(std::move(options));
  absl::Status status = core->Open();
  if (!status.ok()) {
    core->Shutdown();
    return status;
  }
  return std::unique_ptr<Loader>(new Loader(std::move(core)));
}

Loader::Loader(std::shared_ptr<internal::LoaderCore> core)
    : core_(std::move(core)) {}

Loader::~Loader() { core_->Shutdown(); }

const batchd::v1::PlanOpened& Loader::opened() const { return core_->opened(); }

uint64_t Loader::batches_per_epoch() const {
  return core_->opened().batches_per_epoch();
}

uint32_t Loader::window() const { return core_->window(); }

absl::Status Loader::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  return core_->StartEpoch(epoch, first_batch);
}

absl::StatusOr<Batch> Loader::Next() { return core_->Next(core_); }

LoaderState Loader::state() const { return core_->state(); }

absl::Status Loader::Restore(const LoaderState& state) {
  return StartEpoch(state.epoch, state.next_batch);
}

Loader::Stats Loader::stats() const { return core_->stats(); }

void Loader::Cancel() { core_->Cancel(); }

void Loader::RecordCopy(absl::Duration duration) {
  core_->RecordCopy(duration);
}

Diagnosis Loader::Diagnose() { return core_->Diagnose(); }

std::string Loader::epoch_diagnosis() const {
  return core_->epoch_diagnosis();
}

namespace {
double Share(absl::Duration part, absl::Duration wall) {
  return wall <= absl::ZeroDuration() ? 0.0 : absl::FDivDuration(part, wall);
}
double Rate(double count, absl::Duration wall) {
  return wall <= absl::ZeroDuration() ? 0.0
                                      : count / absl::ToDoubleSeconds(wall);
}
}  // namespace

Loader::Stats Loader::Stats::Since(const Stats& earlier) const {
  Stats d = *this;
  d.batches -= earlier.batches;
  d.images -= earlier.images;
  d.bytes -= earlier.bytes;
  d.waited -= earlier.waited;
  d.startup_waited -= earlier.startup_waited;
  d.compute -= earlier.compute;
  d.copy -= earlier.copy;
  d.received_bytes -= earlier.received_bytes;
  d.wall -= earlier.wall;
  return d;
}

double Loader::Stats::waited_fraction() const { return Share(waited, wall); }
double Loader::Stats::steady_waited_fraction() const {
  return Share(waited - startup_waited, wall - startup_waited);
}
double Loader::Stats::compute_fraction() const { return Share(compute, wall); }
double Loader::Stats::copy_fraction() const { return Share(copy, wall); }
double Loader::Stats::batches_per_second() const {
  return Rate(static_cast<double>(batches), wall);
}
double Loader::Stats::images_per_second() const {
  return Rate(static_cast<double>(images), wall);
}
double Loader::Stats::bytes_per_second() const {
  return Rate(static_cast<double>(bytes), wall);
}
double Loader::Stats::received_bytes_per_second() const {
  return Rate(static_cast<double>(received_bytes), wall);
}

}  // namespace batchd::client
