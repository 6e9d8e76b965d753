// PlanFields: a plan's members wanted beside each sample's image
// (Plan.fields), its missing-field policy and its label source, checked
// against the dataset and the daemon's limits (docs/datasets.md,
// "Image-text samples").
//
//   absl::StatusOr<PlanFields> fields = ResolveFields(plan, *dataset, 4096);
//   // fields->fields[0]: {"txt", 4096 bytes, extension number 0}
//
// Plain data, immutable once resolved; thread-compatible.
#ifndef BATCHD_SERVER_PLAN_PLAN_FIELDS_H_
#define BATCHD_SERVER_PLAN_PLAN_FIELDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "server/dataset/dataset.h"

namespace batchd::server {

// The most fields one plan may name.
inline constexpr size_t kMaxPlanFields = 8;
// The largest FieldSpec.max_bytes accepted, bytes: the daemon's maximum.
inline constexpr uint32_t kMaxFieldBytes = 1 << 20;
// The most field bytes one batch may carry (batch size x the sum of the
// bounds): they ride in the batch's header, and every message the daemon
// sends stays under 4 MiB with the rest of the header beside them.
inline constexpr uint64_t kMaxBatchFieldBytes = uint64_t{2} << 20;
// FieldSpec.max_bytes when 0, bytes.
inline constexpr uint32_t kDefaultTxtBytes = 4 << 10;
inline constexpr uint32_t kDefaultJsonBytes = 16 << 10;
inline constexpr uint32_t kDefaultKeyBytes = 4 << 10;
inline constexpr uint32_t kDefaultOtherFieldBytes = 64 << 10;
// The most bytes of a json member read for Plan.label_field "json:<key>".
inline constexpr uint64_t kMaxLabelJsonBytes = 1 << 20;
// The name of the sample-key field.
inline constexpr char kKeyField[] = "__key__";

struct PlanField {
  std::string name;        // "txt", "__key__"
  uint32_t max_bytes = 0;  // resolved: never 0
  bool key = false;        // "__key__"
  // The dataset's number of the member extension (Dataset::ExtensionNumber);
  // -1 when no sample has it (every sample misses it) or for __key__.
  int extension = -1;
};

enum class LabelSource {
  kDataset,  // the dataset's label (cls, class directory, list file)
  kJson,     // an integer in the sample's json member
  kNone,     // -1
};

struct PlanFields {
  std::vector<PlanField> fields;
  // MISSING_FIELD_SUBSTITUTE: a sample without a field is substituted.
  bool substitute_missing = false;
  LabelSource label_source = LabelSource::kDataset;
  std::string label_json_key;  // kJson: the top-level key
  int label_json_extension = -1;  // kJson: the dataset's "json" number

  // The most field bytes one sample carries: the sum of the bounds.
  uint64_t sample_bytes() const;
  // Canonical text of everything here that decides a batch's bytes (part
  // of the plan's fingerprint); "" with no fields and the default label.
  std::string Fingerprint() const;
};

// Checks `plan`'s fields, missing_fields and label_field against `dataset`
// (batch size `batch_size`, already checked). INVALID_ARGUMENT naming the
// field (`fields[1]`, `label_field`) and what is accepted: a name that is
// neither __key__ nor a lowercase extension, a name given twice, more than
// kMaxPlanFields, a bound above kMaxFieldBytes, batch_size x the bounds
// above kMaxBatchFieldBytes, an unknown policy or label source.
absl::StatusOr<PlanFields> ResolveFields(const batchd::v1::Plan& plan,
                                         const Dataset& dataset,
                                         uint32_t batch_size);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PLAN_PLAN_FIELDS_H_
