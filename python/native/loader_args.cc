#include "python/native/loader_args.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/augment_options.h"

namespace batchd::python {

const client::LoaderOptions& LoaderDefaults() {
  static const client::LoaderOptions* const defaults =
      new client::LoaderOptions();
  return *defaults;
}

namespace {

absl::StatusOr<batchd::v1::Layout> ParseLayout(const std::string& layout) {
  if (layout == "nhwc") return batchd::v1::LAYOUT_NHWC;
  if (layout == "nchw") return batchd::v1::LAYOUT_NCHW;
  return absl::InvalidArgumentError(
      absl::StrCat("layout must be 'nchw' or 'nhwc', not '", layout, "'"));
}

}  // namespace

absl::StatusOr<client::LoaderOptions> ToLoaderOptions(const LoaderArgs& args) {
  client::LoaderOptions options;
  options.endpoint = args.endpoint;
  options.shared_memory = args.shared_memory;
  options.prefetch = args.prefetch;
  options.auto_prefetch = args.auto_prefetch;
  options.auto_prefetch_max_bytes = args.auto_prefetch_max_bytes;
  if (!(args.connect_timeout > 0)) {
    return absl::InvalidArgumentError("connect_timeout must be > 0 seconds");
  }
  options.connect_timeout = absl::Seconds(args.connect_timeout);
  if (!(args.unavailable_timeout > 0)) {
    return absl::InvalidArgumentError(
        "unavailable_timeout must be > 0 seconds");
  }
  options.unavailable_timeout = absl::Seconds(args.unavailable_timeout);
  if (!(args.hedge_factor >= 0)) {
    return absl::InvalidArgumentError(
        "hedge_factor must be >= 0 (0 turns hedging off)");
  }
  options.hedge_factor = args.hedge_factor;
  if (!(args.batch_progress_timeout >= 0)) {
    return absl::InvalidArgumentError(
        "batch_progress_timeout must be >= 0 seconds (0 turns it off)");
  }
  options.batch_progress_timeout = absl::Seconds(args.batch_progress_timeout);
  if (args.last_epoch.has_value()) options.last_epoch = *args.last_epoch;
  options.security = args.security;

  batchd::v1::Plan& plan = options.plan;
  plan.set_dataset(args.dataset);
  plan.set_batch_size(args.batch_size);
  plan.set_seed(args.seed);
  plan.set_shuffle(args.shuffle);
  plan.set_shuffle_window_shards(args.shuffle_window_shards);
  plan.set_repeats(args.repeats);
  plan.set_drop_last(args.drop_last);
  plan.set_rank(args.rank);
  plan.set_world_size(args.world_size);
  plan.set_job(args.job);
  for (const auto& [name, max_bytes] : args.sample_fields) {
    batchd::v1::FieldSpec* field = plan.add_fields();
    field->set_name(name);
    field->set_max_bytes(max_bytes);
  }
  if (args.missing_fields == "substitute") {
    plan.set_missing_fields(batchd::v1::MISSING_FIELD_SUBSTITUTE);
  } else if (args.missing_fields != "empty") {
    return absl::InvalidArgumentError(absl::StrCat(
        "missing_fields must be 'empty' or 'substitute', not '",
        args.missing_fields, "'"));
  }
  plan.set_label_field(args.label_field);
  for (const auto& [dataset, weight, cursor] : args.sources) {
    batchd::v1::MixtureSource* source = plan.add_sources();
    source->set_dataset(dataset);
    source->set_weight(weight);
    source->set_cursor(cursor);
  }
  if (!args.sources.empty()) {
    plan.set_samples_per_epoch(args.samples_per_epoch);
    plan.set_sources_epoch(args.sources_epoch);
  }
  if (args.resume_position > 0) {
    plan.mutable_resume()->set_epoch(args.resume_epoch);
    plan.mutable_resume()->set_position(args.resume_position);
  }
  batchd::v1::Pipeline* pipeline = plan.mutable_pipeline();
  absl::StatusOr<batchd::v1::Layout> layout = ParseLayout(args.layout);
  if (!layout.ok()) return layout.status();
  pipeline->set_layout(*layout);
  pipeline->set_decoded_max_side(args.decoded_max_side);
  if (args.mode == "train") {
    if (args.resize_shorter != 0) {
      return absl::InvalidArgumentError(
          "resize_shorter applies to mode='eval' only");
    }
    batchd::v1::RandomResizedCrop* train = pipeline->mutable_train();
    train->set_size(args.size);
    if (args.scale.has_value()) {
      train->set_scale_min(args.scale->first);
      train->set_scale_max(args.scale->second);
    }
    if (args.ratio.has_value()) {
      train->set_ratio_min(args.ratio->first);
      train->set_ratio_max(args.ratio->second);
    }
    if (args.flip.has_value()) train->set_flip_probability(*args.flip);
  } else if (args.mode == "eval") {
    if (args.scale.has_value() || args.ratio.has_value() ||
        args.flip.has_value()) {
      return absl::InvalidArgumentError(
          "scale, ratio and flip apply to mode='train' only");
    }
    batchd::v1::ResizeCenterCrop* eval = pipeline->mutable_eval();
    eval->set_size(args.size);
    eval->set_resize_shorter(args.resize_shorter);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode must be 'train' or 'eval', not '", args.mode, "'"));
  }
  client::AugmentOptions augment;
  augment.interpolation = args.interpolation;
  augment.augment = args.augment;
  if (absl::Status status = client::ApplyAugmentOptions(augment, pipeline);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = client::ParseViewList(args.views, &plan);
      !status.ok()) {
    return status;
  }
  return options;
}

}  // namespace batchd::python
