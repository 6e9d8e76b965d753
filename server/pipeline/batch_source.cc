#include "server/pipeline/batch_source.h"

#include <utility>

namespace batchd::server {

absl::Status PipelineBatches::Get(std::shared_ptr<const ResolvedPlan> plan,
                                  uint64_t epoch, uint64_t batch_index,
                                  BatchCancellation cancelled, Done done,
                                  BatchDestination slot) {
  return pipeline_->BuildBatch(
      std::move(plan), epoch, batch_index, std::move(cancelled),
      [done = std::move(done)](std::unique_ptr<BuiltBatch> batch) {
        done(std::move(batch));
      },
      std::move(slot));
}

}  // namespace batchd::server
