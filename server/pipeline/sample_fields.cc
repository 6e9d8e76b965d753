#include "server/pipeline/sample_fields.h"

#include <algorithm>
#include <cmath>

#include "common/utf8_fields.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace batchd::server {
namespace {

// Bytes of the UTF-8 character whose lead byte is `lead`; 0 if `lead` is
// not a lead byte.
size_t CharacterBytes(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `rest` is the start of one UTF-8 character that the bound cut:
// a lead byte and fewer continuation bytes than it needs.
bool IsCutCharacter(absl::string_view rest) {
  if (rest.empty()) return false;
  const size_t needed = CharacterBytes(static_cast<unsigned char>(rest[0]));
  if (needed < 2 || rest.size() >= needed) return false;
  for (size_t i = 1; i < rest.size(); ++i) {
    if ((static_cast<unsigned char>(rest[i]) & 0xC0) != 0x80) return false;
  }
  return true;
}

}  // namespace

size_t FieldCutLength(absl::string_view prefix, uint64_t member_size,
                      size_t max_bytes) {
  if (member_size <= max_bytes) return std::min<size_t>(prefix.size(), member_size);
  prefix = prefix.substr(0, max_bytes);
  const size_t valid = common::ValidUtf8Prefix(prefix);
  if (valid == prefix.size()) return valid;
  if (IsCutCharacter(prefix.substr(valid))) return valid;
  return prefix.size();
}

bool HasAllFields(const ResolvedPlan& plan, uint64_t sample) {
  const ResolvedPlan::SampleRef ref = plan.At(sample);
  for (const PlanField& field : ref.fields->fields) {
    if (field.key) continue;
    if (ref.dataset->FindMember(ref.index, field.extension) == nullptr) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<SampleFields> ReadSampleFields(const ResolvedPlan& plan,
                                              uint64_t sample) {
  const ResolvedPlan::SampleRef ref = plan.At(sample);
  const Dataset& dataset = *ref.dataset;
  const uint64_t index = ref.index;
  SampleFields out;
  const size_t n = ref.fields->fields.size();
  out.values.resize(n);
  out.cut.resize(n);
  out.missing.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const PlanField& field = ref.fields->fields[i];
    if (field.key) {
      const std::string key = dataset.Key(index);
      const size_t keep = FieldCutLength(key, key.size(), field.max_bytes);
      out.values[i] = key.substr(0, keep);
      out.cut[i] = keep < key.size();
      continue;
    }
    const SampleMember* member = dataset.FindMember(index, field.extension);
    if (member == nullptr) {
      out.missing[i] = true;
      continue;
    }
    absl::StatusOr<FileBytes> bytes =
        dataset.ReadMember(index, *member, field.max_bytes);
    if (!bytes.ok()) return bytes.status();
    const size_t keep =
        FieldCutLength(bytes->text(), member->size, field.max_bytes);
    out.values[i] = std::string(bytes->text().substr(0, keep));
    out.cut[i] = keep < member->size;
  }
  return out;
}

int32_t JsonLabel(absl::string_view json, const std::string& key) {
  google::protobuf::Struct object;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(
           google::protobuf::StringPiece(json.data(), json.size()), &object,
           options)
           .ok()) {
    return -1;
  }
  auto it = object.fields().find(key);
  if (it == object.fields().end() ||
      it->second.kind_case() != google::protobuf::Value::kNumberValue) {
    return -1;
  }
  const double value = it->second.number_value();
  if (!std::isfinite(value) || value != std::floor(value) || value < -1 ||
      value > 2147483647.0) {
    return -1;
  }
  return static_cast<int32_t>(value);
}

absl::StatusOr<int32_t> SampleLabel(const ResolvedPlan& plan,
                                    uint64_t sample) {
  const ResolvedPlan::SampleRef ref = plan.At(sample);
  const uint64_t index = ref.index;
  switch (ref.fields->label_source) {
    case LabelSource::kDataset:
      return ref.dataset->sample(index).label;
    case LabelSource::kNone:
      return -1;
    case LabelSource::kJson:
      break;
  }
  const SampleMember* json =
      ref.dataset->FindMember(index, ref.fields->label_json_extension);
  if (json == nullptr) return -1;
  if (json->size > kMaxLabelJsonBytes) return -1;
  absl::StatusOr<FileBytes> bytes =
      ref.dataset->ReadMember(index, *json, kMaxLabelJsonBytes);
  if (!bytes.ok()) return bytes.status();
  return JsonLabel(bytes->text(), ref.fields->label_json_key);
}

}  // namespace batchd::server
