// The fields a plan wants beside each sample's image (Plan.fields): read
// from the sample's members, cut to their bounds at a UTF-8 character
// boundary, and the label from a json member (Plan.label_field).
//
//   absl::StatusOr<SampleFields> got = ReadSampleFields(plan, index);
//   // got->values[0]: the caption, at most plan.fields.fields[0].max_bytes
//
// Pure functions over an immutable Dataset; thread-safe. ReadSampleFields
// and ReadJsonLabel block on I/O.
#ifndef BATCHD_SERVER_PIPELINE_SAMPLE_FIELDS_H_
#define BATCHD_SERVER_PIPELINE_SAMPLE_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {

// How many of `prefix`'s bytes to keep of a member of `member_size` bytes
// whose first bytes are `prefix` (at most `max_bytes` of them), so that at
// most `max_bytes` are kept: all of a member that fits; else the bytes
// before the last character when `prefix` is UTF-8 but ends inside one
// (a cut never splits a character); else `max_bytes` (a member that is not
// UTF-8 up to the bound is cut at the bound).
size_t FieldCutLength(absl::string_view prefix, uint64_t member_size,
                      size_t max_bytes);

// One sample's requested fields, in the plan's order.
struct SampleFields {
  std::vector<std::string> values;
  std::vector<bool> cut;      // longer than its bound, cut
  std::vector<bool> missing;  // the sample has no such member: empty
};

// Whether sample `index` has every field `plan` requests (no I/O).
bool HasAllFields(const ResolvedPlan& plan, uint64_t index);

// Reads `plan`'s fields of sample `index`. A member's read error is the
// error (the caller substitutes the sample, as for its image).
absl::StatusOr<SampleFields> ReadSampleFields(const ResolvedPlan& plan,
                                              uint64_t index);

// The integer at top-level key `key` of `json` (a JSON object), or -1 when
// `json` is not an object, has no such key, or its value is not an integer
// in int32 range.
int32_t JsonLabel(absl::string_view json, const std::string& key);

// Sample `index`'s label under `plan`'s label source: the dataset's label,
// -1, or JsonLabel of its json member (its first kMaxLabelJsonBytes; -1
// without one). A read error is the error.
absl::StatusOr<int32_t> SampleLabel(const ResolvedPlan& plan, uint64_t index);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_SAMPLE_FIELDS_H_
