// An in-process fake of the batchd DataService for client tests.
//
// It speaks the StreamBatches protocol with synthetic batches whose bytes are
// a pure function of (epoch, batch index, offset) (FakePixel), so tests can
// check every received byte. What the fake does after `opened` is a Script
// run on the gRPC handler thread, so each test decides the order of batches,
// rejections, protocol violations and how the stream ends. The fake records
// what clients did (outstanding batches, requests) for tests to assert on.
//
//   FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
//   LoaderOptions options;
//   options.endpoint = server.endpoint();
//
// Thread-safety: the observation methods are thread-safe.
#ifndef BATCHD_TESTING_FAKE_DATA_SERVICE_H_
#define BATCHD_TESTING_FAKE_DATA_SERVICE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/data.grpc.pb.h"
#include "batchd/v1/data.pb.h"
#include "grpcpp/server.h"
#include "grpcpp/server_context.h"

namespace batchd::client::testing {

// Byte `offset` of the pixels of batch (`epoch`, `index`).
uint8_t FakePixel(uint64_t epoch, uint64_t index, uint64_t offset);

// Dataset index of sample `position` of batch `index` in `epoch`.
uint64_t FakeSampleIndex(uint64_t epoch, uint64_t index, uint64_t position,
                         uint32_t batch_size);

class FakeDataService;

// The handler side of one StreamBatches call, handed to a Script. Used by
// the handler thread only.
class FakeStream {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  // Reads one client message. Appends a request's batches to pending();
  // rejects (in-band) indices beyond the epoch and batches beyond the
  // window, recording the latter as violations. False when the client has
  // half-closed or the call is cancelled.
  bool ReadRequest();
  // Reads client messages until a batch is pending (a report or a stray
  // `open` adds none). False when the stream ends first.
  bool ReadBatchRequest();
  // Requested batches not yet answered, in arrival order.
  std::deque<Key>& pending() { return pending_; }
  // Sends the header and chunks of a batch and removes it from pending().
  bool SendBatch(const Key& key);
  // Sends a rejection and removes the batch from pending().
  bool Reject(const Key& key, int code, const std::string& message);
  // Sends any message as is (for protocol violations).
  bool SendRaw(const batchd::v1::StreamResponse& response);
  // The header the fake would send for `key`.
  batchd::v1::BatchHeader Header(const Key& key) const;
  uint64_t batches_per_epoch() const;
  uint32_t window() const { return window_; }
  grpc::ServerContext* context() { return context_; }

 private:
  friend class FakeDataService;
  FakeStream(FakeDataService* service, grpc::ServerContext* context,
             grpc::ServerReaderWriter<batchd::v1::StreamResponse,
                                      batchd::v1::StreamRequest>* stream,
             uint32_t window)
      : service_(service), context_(context), stream_(stream), window_(window) {}
  void Answered(const Key& key);

  FakeDataService* const service_;
  grpc::ServerContext* const context_;
  grpc::ServerReaderWriter<batchd::v1::StreamResponse,
                           batchd::v1::StreamRequest>* const stream_;
  const uint32_t window_;
  std::deque<Key> pending_;
  uint64_t outstanding_ = 0;
};

class FakeDataService final : public batchd::v1::DataService::Service {
 public:
  struct Options {
    // Most batches a stream may have outstanding (granted window is the
    // smaller of this and the client's request).
    uint32_t window = 4;
    uint64_t batches_per_epoch = 8;
    uint32_t batch_size = 4;
    // Samples in the epoch's last batch; 0 means batch_size.
    uint32_t last_batch_size = 0;
    // Each sample is height x width x 3 bytes.
    uint32_t height = 10;
    uint32_t width = 10;
    // Multi-view batches (Plan.views) when not empty: each sample is one
    // side x side x 3 view per entry instead of height x width x 3, and a
    // batch's pixels are the views one after another, view-major
    // (BatchHeader.views).
    std::vector<uint32_t> view_sides;
    // Pixel bytes per chunk message.
    uint64_t chunk_bytes = 500;
    // The first this many StreamBatches calls are refused with
    // RESOURCE_EXHAUSTED and `refusal` (as a full daemon refuses them);
    // -1: every call.
    int refuse_first = 0;
    std::string refusal =
        "identity peer host 127.0.0.1 has 2 of its 2 streams "
        "(--max-streams-per-identity)";
  };
  // Runs after `opened` was sent; its status ends the stream.
  using Script = std::function<grpc::Status(FakeStream&)>;

  // Serves every request at once, in request order, until the client
  // half-closes.
  static Script ServeInOrder();
  // Collects requests until `group` are pending (or the epoch's last batch
  // is), then serves them in reverse order.
  static Script ServeReversedGroups(size_t group);

  FakeDataService(Options options, Script script)
      : options_(options), script_(std::move(script)) {}

  const Options& options() const { return options_; }
  uint64_t BatchBytes(uint64_t index) const;
  // Pixel bytes of one sample (all its views with view_sides).
  uint64_t SampleBytes() const;

  grpc::Status ListDatasets(grpc::ServerContext* context,
                            const batchd::v1::ListDatasetsRequest* request,
                            batchd::v1::ListDatasetsResponse* response) override;
  // Plans naming the dataset "bad" fail with INVALID_ARGUMENT.
  grpc::Status StreamBatches(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<batchd::v1::StreamResponse,
                               batchd::v1::StreamRequest>* stream) override;

  // The most batches any stream had outstanding at once, as the fake counts
  // them (a batch stops being outstanding once its last chunk is written).
  uint64_t max_outstanding() const;
  void ResetMaxOutstanding();
  // Batch requests beyond the window.
  uint64_t window_violations() const;
  // Batches requested and sent, over all streams.
  uint64_t requested_total() const;
  uint64_t sent_total() const;
  // Every batch requested, in arrival order.
  std::vector<FakeStream::Key> requested() const;
  // Every TrainerReport received, over all streams, in arrival order.
  std::vector<batchd::v1::TrainerReport> reports() const;
  // Streams that sent `open`.
  int streams_opened() const;
  // Streams refused with RESOURCE_EXHAUSTED (Options::refuse_first).
  int streams_refused() const;
  // Blocks until at least `n` batches were requested; false after 20 s.
  bool WaitForRequested(uint64_t n) const;

 private:
  friend class FakeStream;

  const Options options_;
  const Script script_;

  mutable absl::Mutex mu_;
  uint64_t max_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t window_violations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<FakeStream::Key> requested_ ABSL_GUARDED_BY(mu_);
  std::vector<batchd::v1::TrainerReport> reports_ ABSL_GUARDED_BY(mu_);
  int streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  int streams_refused_ ABSL_GUARDED_BY(mu_) = 0;
};

// A FakeDataService listening on a free localhost port.
class FakeServer {
 public:
  FakeServer(FakeDataService::Options options, FakeDataService::Script script);
  ~FakeServer();
  // "localhost:<port>".
  const std::string& endpoint() const { return endpoint_; }
  FakeDataService& service() { return service_; }
  // Stops the server now, cancelling open streams. Idempotent.
  void Shutdown();

 private:
  FakeDataService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string endpoint_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace batchd::client::testing

#endif  // BATCHD_TESTING_FAKE_DATA_SERVICE_H_
