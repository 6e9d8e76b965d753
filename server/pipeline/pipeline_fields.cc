// A batch's fields and json labels (Plan.fields, Plan.label_field): read
// with each sample on its reader, and assembled into the batch's header
// once every sample is done. Declared in pipeline_internal.h.
#include "server/pipeline/pipeline_internal.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace batchd::server::pipeline_internal {

absl::Status ReadFieldsAndLabel(const ResolvedPlan& plan, uint64_t index,
                                int32_t* label, SampleFields* fields) {
  if (plan.fields.label_source == LabelSource::kJson) {
    absl::StatusOr<int32_t> json_label = SampleLabel(plan, index);
    if (!json_label.ok()) return json_label.status();
    *label = *json_label;
  }
  if (fields == nullptr) return absl::OkStatus();
  absl::StatusOr<SampleFields> read = ReadSampleFields(plan, index);
  if (!read.ok()) return read.status();
  *fields = *std::move(read);
  return absl::OkStatus();
}

std::string MissingFieldDetail(const ResolvedPlan& plan, uint64_t index) {
  const ResolvedPlan::SampleRef ref = plan.At(index);
  std::string missing;
  for (const PlanField& field : ref.fields->fields) {
    if (field.key || ref.dataset->FindMember(ref.index, field.extension)) {
      continue;
    }
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", field.name);
  }
  return absl::StrCat("missing field ", missing.substr(0, 180));
}

void AssembleFields(const PlanFields& plan, std::vector<SampleFields>& fields,
                    BuiltBatch* batch) {
  const size_t n = plan.fields.size();
  batch->field_counts.resize(n);
  size_t bytes = 0;
  for (const SampleFields& sample : fields) {
    for (const std::string& value : sample.values) bytes += value.size();
  }
  batch->field_data.reserve(bytes);
  batch->field_sizes.reserve(fields.size() * n);
  for (SampleFields& sample : fields) {
    // A position whose task was cancelled has no values: empty fields.
    sample.values.resize(n);
    sample.cut.resize(n);
    sample.missing.resize(n);
    for (size_t i = 0; i < n; ++i) {
      batch->field_data.append(sample.values[i]);
      batch->field_sizes.push_back(
          static_cast<uint32_t>(sample.values[i].size()));
      batchd::v1::FieldCounts& counts = batch->field_counts[i];
      if (sample.cut[i]) counts.set_cut(counts.cut() + 1);
      if (sample.missing[i]) counts.set_missing(counts.missing() + 1);
    }
  }
}

}  // namespace batchd::server::pipeline_internal
