#include "client/daemon_stream.h"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <utility>

namespace batchd::client {

using ::batchd::v1::StreamRequest;
using ::batchd::v1::StreamResponse;

namespace {

constexpr char kStreamBatches[] = "/batchd.v1.DataService/StreamBatches";

// Completion-queue tags.
enum Tag : intptr_t { kStart = 1, kRead, kWrite, kFinish, kWake };
void* AsTag(Tag tag) { return reinterpret_cast<void*>(tag); }

// CPU time used by the calling thread so far. CPU, not wall time: on a busy
// host the reader can be descheduled mid-copy, and that wait is not the
// copy's cost.
absl::Duration ThreadCpuTime() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return absl::DurationFromTimespec(now);
}

}  // namespace

DaemonStream::DaemonStream(int daemon, std::shared_ptr<grpc::Channel> channel,
                           StreamRequest open, StreamSink* sink)
    : daemon_(daemon), channel_(std::move(channel)), sink_(sink) {
  reader_ = std::thread([this, open = std::move(open)]() mutable {
    ReaderLoop(std::move(open));
  });
}

DaemonStream::~DaemonStream() {
  Cancel();
  reader_.join();
}

void DaemonStream::WakeLocked() {
  if (wake_pending_) return;
  wake_pending_ = true;
  wake_.Set(&cq_, std::chrono::system_clock::now(), AsTag(kWake));
}

bool DaemonStream::Send(const StreamRequest& request) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return writes_closed_ || writes_.size() < kMaxQueuedWrites;
  };
  mu_.Await(absl::Condition(&room));
  if (!prepared_ || writes_closed_) return false;
  writes_.push_back(common::EncodeMessage(request));
  WakeLocked();
  return true;
}

void DaemonStream::WritesDone() {
  absl::MutexLock lock(&mu_);
  if (!prepared_ || writes_closed_) return;
  writes_closed_ = true;
  half_close_ = true;
  WakeLocked();
}

void DaemonStream::Cancel() { context_.TryCancel(); }

bool DaemonStream::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void DaemonStream::PumpWrites() {
  if (!started_ || write_in_flight_ || writes_done_sent_) return;
  bool half_close = false;
  {
    absl::MutexLock lock(&mu_);
    if (!writes_.empty()) {
      writing_ = std::move(writes_.front());
      writes_.pop_front();
      write_in_flight_ = true;
    } else if (half_close_) {
      half_close = true;
    }
  }
  if (write_in_flight_) {
    call_->Write(writing_, AsTag(kWrite));
  } else if (half_close) {
    writes_done_sent_ = true;
    write_in_flight_ = true;
    call_->WritesDone(AsTag(kWrite));
  }
}

void DaemonStream::ReaderLoop(StreamRequest open) {
  grpc::GenericStub stub(channel_);
  call_ = stub.PrepareCall(&context_, kStreamBatches, &cq_);
  {
    absl::MutexLock lock(&mu_);
    prepared_ = true;
    writes_.push_front(common::EncodeMessage(open));
  }
  call_->StartCall(AsTag(kStart));

  absl::Status error;
  grpc::ByteBuffer incoming;
  StreamResponse response;
  grpc::Status end;
  bool reading = false;    // a Read is in flight
  bool finishing = false;  // Finish is in flight
  bool finished = false;
  void* tag = nullptr;
  bool ok = false;
  while (!finished && cq_.Next(&tag, &ok)) {
    switch (static_cast<Tag>(reinterpret_cast<intptr_t>(tag))) {
      case kStart:
        started_ = true;
        break;
      case kRead:
        reading = false;
        if (!ok) break;
        // After a sink error, read past the rest until the cancel takes.
        if (error.ok()) {
          const absl::Duration start = ThreadCpuTime();
          common::ChunkInfo chunk;
          absl::StatusOr<StreamResponse::KindCase> kind =
              common::DecodeResponse(
                  incoming, &response,
                  [this](const common::ChunkInfo& info) {
                    return sink_->ChunkDestination(daemon_, info);
                  },
                  &chunk);
          error = kind.status();
          if (kind.ok() && *kind == StreamResponse::kChunk) {
            error = sink_->OnChunk(daemon_, chunk, ThreadCpuTime() - start);
          } else if (kind.ok()) {
            error = sink_->OnResponse(daemon_, response);
          }
          if (!error.ok()) context_.TryCancel();
        }
        incoming.Clear();
        call_->Read(&incoming, AsTag(kRead));
        reading = true;
        break;
      case kWrite:
        write_in_flight_ = false;
        if (!ok) {
          // The stream has ended; the reads say why.
          absl::MutexLock lock(&mu_);
          writes_closed_ = true;
          writes_.clear();
          writes_done_sent_ = true;  // nothing more is written
        }
        break;
      case kWake: {
        absl::MutexLock lock(&mu_);
        wake_pending_ = false;
        break;
      }
      case kFinish:
        finished = true;
        break;
    }
    if (started_ && !reading && !finishing && tag == AsTag(kStart)) {
      if (ok) {
        call_->Read(&incoming, AsTag(kRead));
        reading = true;
      }
    }
    // The reads are over (or the call never started): finish the call.
    if (!reading && !finishing &&
        (tag == AsTag(kRead) || (tag == AsTag(kStart) && !ok))) {
      {
        absl::MutexLock lock(&mu_);
        writes_closed_ = true;
      }
      call_->Finish(&end, AsTag(kFinish));
      finishing = true;
    }
    if (!finishing) PumpWrites();
  }
  // Wait for what is still in flight (a write, the alarm), then close.
  {
    absl::MutexLock lock(&mu_);
    writes_closed_ = true;
  }
  cq_.Shutdown();
  while (cq_.Next(&tag, &ok)) {
  }
  sink_->OnStreamEnd(daemon_, end, error);
  absl::MutexLock lock(&mu_);
  done_ = true;
}

}  // namespace batchd::client
