// Helpers that Pipeline's source files share: pipeline.cc (a batch's
// scheduling, reads, substitutes and assembly), pipeline_decode.cc (a
// sample's pixels: crop, views, augmentation) and pipeline_fields.cc (a
// sample's fields and json label). Not the pipeline's interface: nothing
// outside server/pipeline/pipeline*.cc includes it.
//
// Free functions of their arguments; thread-safe. ReadFieldsAndLabel blocks
// on I/O.
#ifndef BATCHD_SERVER_PIPELINE_PIPELINE_INTERNAL_H_
#define BATCHD_SERVER_PIPELINE_PIPELINE_INTERNAL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/sample_fields.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server::pipeline_internal {

// Nanoseconds from `start` to now (steady clock).
inline uint64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - start)
          .count());
}

// pipeline_fields.cc.

// Reads plan sample `index`'s json label into `*label` (with
// Plan.label_field; untouched otherwise) and its fields into `*fields`
// (null when the plan has none). OK with nothing to read; else the first
// read's error, and what was read before it is kept.
absl::Status ReadFieldsAndLabel(const ResolvedPlan& plan, uint64_t index,
                                int32_t* label, SampleFields* fields);

// What a substitution for missing fields says: the fields `index` lacks.
std::string MissingFieldDetail(const ResolvedPlan& plan, uint64_t index);

// The batch's field_data, field_sizes and field_counts from each
// position's `fields` (`plan`'s), sample by sample. A position without
// values (its task was cancelled) gives empty fields.
void AssembleFields(const PlanFields& plan, std::vector<SampleFields>& fields,
                    BuiltBatch* batch);

// pipeline_decode.cc.

// Writes zeros to every view of `position` in `batch` (the whole sample
// without views).
void ZeroSample(const ResolvedPlan& plan, BuiltBatch& batch, size_t position);

}  // namespace batchd::server::pipeline_internal

#endif  // BATCHD_SERVER_PIPELINE_PIPELINE_INTERNAL_H_
