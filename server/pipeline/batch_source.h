// BatchSource: where a stream gets its batches. A stream asks it for each
// batch it accepted, with one call (Get), and says when a stream of a plan
// opens and closes; whether the batch is built for that stream alone or
// shared with other streams of the same plan is the source's business.
//
//   PipelineBatches  builds every batch for the stream that asks
//                    (--share-batches=false);
//   SharedBatches    shares builds between streams of identical plans
//                    (server/pipeline/shared_batches.h), and builds a lone
//                    stream's batches as PipelineBatches does.
//
// Implementations are thread-safe.
#ifndef BATCHD_SERVER_PIPELINE_BATCH_SOURCE_H_
#define BATCHD_SERVER_PIPELINE_BATCH_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "server/pipeline/pipeline.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {

class BatchSource {
 public:
  using Done = std::function<void(std::shared_ptr<const BuiltBatch>)>;

  virtual ~BatchSource() = default;

  // A stream of `plan` opened, or closed.
  virtual void StreamOpened(const ResolvedPlan& plan) = 0;
  virtual void StreamClosed(const ResolvedPlan& plan) = 0;

  // Calls `done` once with batch `batch_index` of `epoch` of `plan`: inline,
  // before Get returns, or later on a pool thread. With nullptr when
  // `cancelled` was set before the batch was ready. With a `slot` (a
  // client's shared memory; empty for none) the batch's pixels are in the
  // slot. Errors as Pipeline::BuildBatch (`done` is then never called).
  virtual absl::Status Get(std::shared_ptr<const ResolvedPlan> plan,
                           uint64_t epoch, uint64_t batch_index,
                           BatchCancellation cancelled, Done done,
                           BatchDestination slot) = 0;
};

// Builds each batch on the pipeline for the stream that asks: no sharing.
// `done` always runs on a pool thread. Thread-safe.
class PipelineBatches final : public BatchSource {
 public:
  // `pipeline` is not owned and must outlive this.
  explicit PipelineBatches(Pipeline* pipeline) : pipeline_(pipeline) {}

  void StreamOpened(const ResolvedPlan& /*plan*/) override {}
  void StreamClosed(const ResolvedPlan& /*plan*/) override {}
  absl::Status Get(std::shared_ptr<const ResolvedPlan> plan, uint64_t epoch,
                   uint64_t batch_index, BatchCancellation cancelled,
                   Done done, BatchDestination slot) override;

 private:
  Pipeline* const pipeline_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_BATCH_SOURCE_H_
