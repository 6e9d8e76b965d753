#include "server/plan/plan_fields.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

uint32_t DefaultBytes(const std::string& name) {
  if (name == "txt") return kDefaultTxtBytes;
  if (name == "json") return kDefaultJsonBytes;
  if (name == kKeyField) return kDefaultKeyBytes;
  return kDefaultOtherFieldBytes;
}

// An extension as ShardIndex keeps them: lowercase, 1..64 bytes of
// [a-z0-9_.-], not starting with a dot.
bool IsExtensionName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' ||
          c == '.' || c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace

uint64_t PlanFields::sample_bytes() const {
  uint64_t bytes = 0;
  for (const PlanField& field : fields) bytes += field.max_bytes;
  return bytes;
}

std::string PlanFields::Fingerprint() const {
  std::string text;
  for (const PlanField& field : fields) {
    absl::StrAppend(&text, text.empty() ? "" : ",", field.name, ":",
                    field.max_bytes);
  }
  if (!text.empty()) {
    text = absl::StrCat(" fields=[", text, "]",
                        substitute_missing ? " missing=substitute" : "");
  }
  switch (label_source) {
    case LabelSource::kDataset:
      break;
    case LabelSource::kJson:
      absl::StrAppend(&text, " label=json:", label_json_key);
      break;
    case LabelSource::kNone:
      absl::StrAppend(&text, " label=none");
      break;
  }
  return text;
}

absl::StatusOr<PlanFields> ResolveFields(const batchd::v1::Plan& plan,
                                         const Dataset& dataset,
                                         uint32_t batch_size) {
  PlanFields out;
  if (static_cast<size_t>(plan.fields_size()) > kMaxPlanFields) {
    return Invalid(absl::StrCat("fields names ", plan.fields_size(),
                                " fields; at most ", kMaxPlanFields,
                                " may be sent with each sample"));
  }
  for (int i = 0; i < plan.fields_size(); ++i) {
    const batchd::v1::FieldSpec& spec = plan.fields(i);
    const std::string where =
        absl::StrCat("fields[", i, "] '", absl::CHexEscape(spec.name()), "'");
    PlanField field;
    field.name = spec.name();
    field.key = field.name == kKeyField;
    if (!field.key && !IsExtensionName(field.name)) {
      return Invalid(absl::StrCat(
          where, " is not a field name; use \"__key__\" or a member "
          "extension as the shards name it, lowercase, 1..64 bytes of "
          "a-z 0-9 _ . - (\"txt\", \"json\")"));
    }
    for (const PlanField& earlier : out.fields) {
      if (earlier.name == field.name) {
        return Invalid(absl::StrCat(where, " is named twice; name each "
                                           "field once"));
      }
    }
    if (spec.max_bytes() > kMaxFieldBytes) {
      return Invalid(absl::StrCat(
          where, ": max_bytes is ", spec.max_bytes(), "; it must be 1..",
          kMaxFieldBytes, " (0 for the default, ", DefaultBytes(field.name),
          ")"));
    }
    field.max_bytes =
        spec.max_bytes() == 0 ? DefaultBytes(field.name) : spec.max_bytes();
    if (!field.key) field.extension = dataset.ExtensionNumber(field.name);
    out.fields.push_back(std::move(field));
  }
  const uint64_t batch_bytes = uint64_t{batch_size} * out.sample_bytes();
  if (batch_bytes > kMaxBatchFieldBytes) {
    return Invalid(absl::StrCat(
        "fields: batch_size ", batch_size, " x ", out.sample_bytes(),
        " bytes of field bounds per sample is ", batch_bytes,
        " bytes; a batch carries at most ", kMaxBatchFieldBytes,
        " (they ride in its header): lower the fields' max_bytes or "
        "batch_size"));
  }
  switch (plan.missing_fields()) {
    case batchd::v1::MISSING_FIELD_EMPTY:
      break;
    case batchd::v1::MISSING_FIELD_SUBSTITUTE:
      out.substitute_missing = !out.fields.empty();
      break;
    default:
      return Invalid(absl::StrCat(
          "missing_fields ", static_cast<int>(plan.missing_fields()),
          " is unknown; use MISSING_FIELD_EMPTY or "
          "MISSING_FIELD_SUBSTITUTE"));
  }
  const std::string& label = plan.label_field();
  if (label.empty() || label == "cls") {
    out.label_source = LabelSource::kDataset;
  } else if (label == "none") {
    out.label_source = LabelSource::kNone;
  } else if (absl::StartsWith(label, "json:") && label.size() > 5 &&
             label.size() <= 5 + 256) {
    out.label_source = LabelSource::kJson;
    out.label_json_key = label.substr(5);
    out.label_json_extension = dataset.ExtensionNumber("json");
  } else {
    return Invalid(absl::StrCat(
        "label_field '", absl::CHexEscape(label.substr(0, 300)),
        "' is not a label source; use \"cls\" (the default), "
        "\"json:<key>\" (1..256 bytes of key) or \"none\""));
  }
  return out;
}

}  // namespace batchd::server
