// DataServiceImpl: the gRPC adapter for batchd.v1.DataService. It validates
// requests, turns them into Pipeline work, and streams finished batches in
// chunks. Batch content is decided entirely by the Pipeline and the plan;
// this layer only does protocol, flow control and status conversion.
//
// One BatchStream reactor per StreamBatches call (callback API): reactions
// never block, and exactly one write is in flight per stream.
//
// Thread-safe. Must outlive the grpc::Server it is registered with.
#ifndef BATCHD_SERVER_DATA_SERVICE_H_
#define BATCHD_SERVER_DATA_SERVICE_H_

#include <cstdint>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "batchd/v1/data.grpc.pb.h"
#include "server/job_stats.h"
#include "server/pipeline.h"
#include "server/resolved_plan.h"
#include "server/server_metrics.h"

namespace batchd::server {

// Largest `data` of one BatchChunk, bytes: keeps every message within 4 MiB,
// which gRPC moves an order of magnitude faster than larger ones.
inline constexpr uint64_t kMaxChunkBytes = (uint64_t{4} << 20) - 1024;

struct DataServiceOptions {
  PlanLimits limits;
  // Window granted when the client asks for 0, and the most granted.
  uint32_t default_window = 4;
  uint32_t max_window = 64;
  // Bound on batch buffer memory over all streams: a stream reserves
  // window * max_batch_bytes when it opens.
  uint64_t max_buffer_bytes = uint64_t{2} << 30;
  // Where send times, outstanding batches and rejections are recorded;
  // nullptr records nothing. Not owned; must outlive the service.
  ServerMetrics* metrics = nullptr;
};

// Counts reserved batch-buffer bytes against a limit. Thread-safe.
class BufferBudget {
 public:
  explicit BufferBudget(uint64_t limit) : limit_(limit) {}
  // The largest n <= `wanted` such that n * `unit` bytes fit; reserves them.
  uint32_t ReserveUpTo(uint32_t wanted, uint64_t unit);
  void Release(uint64_t bytes);
  uint64_t reserved() const;
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  mutable absl::Mutex mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
};

// StreamBatches is served raw (ByteBuffer in and out) so that batch chunks
// go out as slices of the batch buffer; the bytes are the same StreamRequest
// and StreamResponse messages as in the proto.
class DataServiceImpl final
    : public batchd::v1::DataService::WithCallbackMethod_ListDatasets<
          batchd::v1::DataService::WithRawCallbackMethod_StreamBatches<
              batchd::v1::DataService::Service>> {
 public:
  // `pipeline` and `stats` are not owned and must outlive this.
  DataServiceImpl(DatasetMap datasets, DataServiceOptions options,
                  Pipeline* pipeline, JobStats* stats);

  grpc::ServerUnaryReactor* ListDatasets(
      grpc::CallbackServerContext* context,
      const batchd::v1::ListDatasetsRequest* request,
      batchd::v1::ListDatasetsResponse* response) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context) override;

  const BufferBudget& budget() const { return budget_; }
  // Send stage time summed over batches: from a batch finished to its last
  // chunk written, seconds.
  double send_seconds() const;

 private:
  class BatchStream;

  // Constant after construction.
  const DatasetMap datasets_;
  const DataServiceOptions options_;
  Pipeline* const pipeline_;
  JobStats* const stats_;

  BufferBudget budget_;
  std::atomic<uint64_t> send_nanos_{0};
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATA_SERVICE_H_
