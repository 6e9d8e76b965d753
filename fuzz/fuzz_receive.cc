// Fuzz target: the client's receive path against a hostile server. An
// in-process fake daemon (testing/fake_data_service.h) plays the
// input as a script of headers, chunks, rejections and stream ends, valid
// or forged (wrong offsets, sizes, batch numbers, duplicates, reordering,
// rejections of reports);
// a real Loader reads the epoch. The oracle: every batch the Loader hands
// out holds exactly the bytes the fake defines for it; anything else
// traps. Errors are expected; wrong bytes, crashes and hangs are not.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/loader.h"
#include "testing/fake_data_service.h"

namespace {

using batchd::client::testing::FakeDataService;
using batchd::client::testing::FakePixel;
using batchd::client::testing::FakeStream;

// The input being played; one at a time (libFuzzer runs inputs in turn).
absl::Mutex script_mu;
std::string script_bytes ABSL_GUARDED_BY(script_mu);

grpc::Status Play(FakeStream& stream) {
  std::string ops;
  {
    absl::MutexLock lock(&script_mu);
    ops.swap(script_bytes);  // a reconnect's stream gets an empty script
  }
  size_t i = 0;
  auto next = [&]() -> uint8_t { return i < ops.size() ? ops[i++] : 0; };
  while (i < ops.size()) {
    const uint8_t op = next();
    const uint8_t arg = next();
    auto& pending = stream.pending();
    if (op % 7 == 0 || pending.empty()) {
      if (!stream.ReadRequest()) return grpc::Status::OK;
      continue;
    }
    const FakeStream::Key key = pending[arg % pending.size()];
    switch (op % 7) {
      case 1:  // a whole valid batch, in any order
        if (!stream.SendBatch(key)) return grpc::Status::OK;
        break;
      case 2: {  // a forged header
        batchd::v1::StreamResponse response;
        *response.mutable_header() = stream.Header(key);
        batchd::v1::BatchHeader& h = *response.mutable_header();
        const uint8_t how = next();
        if (how & 1) h.set_total_bytes(h.total_bytes() + next() - 128);
        if (how & 2) h.set_batch_index(h.batch_index() + next());
        if (how & 4) h.set_epoch(h.epoch() + 1);
        if (how & 8) h.add_shape(next());
        if (how & 16) h.clear_labels();
        if (!stream.SendRaw(response)) return grpc::Status::OK;
        break;
      }
      case 3: {  // a forged chunk
        batchd::v1::StreamResponse response;
        batchd::v1::BatchChunk& c = *response.mutable_chunk();
        c.set_epoch(key.first);
        c.set_batch_index(key.second + (next() & 1));
        c.set_offset(next() * 37);
        c.set_data(std::string(next() * 7, static_cast<char>(next())));
        if (!stream.SendRaw(response)) return grpc::Status::OK;
        break;
      }
      case 4:  // an in-band rejection with any code
        if (!stream.Reject(key, arg % 17, "fuzz")) return grpc::Status::OK;
        break;
      case 5: {  // a rejection of a batch never requested, or of a report
        batchd::v1::StreamResponse response;
        if (arg & 0x80) {
          response.mutable_report_rejected()->set_message("fuzz");
        } else {
          response.mutable_rejected()->set_epoch(key.first);
          response.mutable_rejected()->set_batch_index(key.second + 100 + arg);
          response.mutable_rejected()->set_code(arg % 17);
        }
        if (!stream.SendRaw(response)) return grpc::Status::OK;
        break;
      }
      case 6:  // the stream ends; not UNAVAILABLE, which the Loader retries
        return grpc::Status(arg % 2 ? grpc::StatusCode::INTERNAL
                                    : grpc::StatusCode::OK,
                            "fuzz");
    }
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, "script ended");
}

batchd::client::testing::FakeServer& Server() {
  static auto* server = [] {
    FakeDataService::Options options;
    options.batches_per_epoch = 6;
    options.batch_size = 2;
    options.last_batch_size = 1;
    options.height = 4;
    options.width = 5;
    options.chunk_bytes = 40;
    return new batchd::client::testing::FakeServer(options, Play);
  }();
  return *server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 512) return 0;  // longer scripts add nothing but time
  {
    absl::MutexLock lock(&script_mu);
    script_bytes.assign(reinterpret_cast<const char*>(data), size);
  }
  batchd::client::LoaderOptions options;
  options.endpoint = Server().endpoint();
  options.plan.set_dataset("fake");
  options.plan.set_batch_size(2);
  options.prefetch = 3;
  options.connect_timeout = absl::Seconds(5);
  options.stall_timeout = absl::Milliseconds(100);
  options.unavailable_timeout = absl::Milliseconds(100);
  options.reconnect_backoff_min = absl::Milliseconds(10);
  options.reconnect_backoff_max = absl::Milliseconds(20);
  auto loader = batchd::client::Loader::Create(options);
  if (!loader.ok()) return 0;
  if (!(*loader)->StartEpoch(0).ok()) return 0;
  for (int n = 0; n < 16; ++n) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) break;
    // The oracle: a delivered batch is exactly the fake's bytes.
    for (uint64_t offset = 0; offset < batch->size(); ++offset) {
      if (batch->data()[offset] !=
          FakePixel(batch->epoch, batch->batch_index, offset)) {
        std::abort();
      }
    }
  }
  return 0;
}
