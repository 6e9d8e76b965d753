// LoaderArgs: the options of a Python loader binding (NativeLoader,
// NativeDeviceLoader) as one struct, bound once as batchd._native.LoaderArgs
// (module.cc). ToLoaderOptions() checks them and builds the
// client::LoaderOptions.
//
// The loader's defaults are client::LoaderOptions's own (client/loader.h),
// read from a default-constructed one, and batchd.Loader's signature reads
// them back from _native.LoaderArgs(); the plan's defaults are written here
// only.
//
//   LoaderArgs args;
//   args.endpoint = "localhost:7070";
//   args.dataset = "imagenet";
//   args.batch_size = 64;
//   absl::StatusOr<client::LoaderOptions> options = ToLoaderOptions(args);
//
// A plain value; no Python here.
#ifndef BATCHD_PYTHON_NATIVE_LOADER_ARGS_H_
#define BATCHD_PYTHON_NATIVE_LOADER_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel_security.h"
#include "client/loader.h"

namespace batchd::python {

// A default-constructed client::LoaderOptions: where the defaults live.
const client::LoaderOptions& LoaderDefaults();

struct LoaderArgs {
  // Where and what: the daemons (client::LoaderOptions::endpoint), a
  // dataset they serve, samples per batch.
  std::string endpoint;
  std::string dataset;
  uint32_t batch_size = 0;

  // ---- The plan (batchd.v1.Plan); the daemon validates it ----
  uint64_t seed = 0;
  bool shuffle = true;
  // With shuffle, 0: the per-sample shuffle; K > 0: the shard-aware shuffle
  // with a window of K shards (batchd.v1.Plan.shuffle_window_shards).
  uint32_t shuffle_window_shards = 0;
  // Repeated augmentation: each image this many times an epoch
  // (batchd.v1.Plan.repeats); 0 or 1: none.
  uint32_t repeats = 0;
  bool drop_last = false;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  std::string job;
  // "train" (RandomResizedCrop + flip) or "eval" (resize, centre crop).
  std::string mode = "train";
  // Output height and width, pixels.
  uint32_t size = 224;
  // Train only: RandomResizedCrop's (min, max) ranges and the flip
  // probability; unset takes the daemon's defaults.
  std::optional<std::pair<float, float>> scale;
  std::optional<std::pair<float, float>> ratio;
  std::optional<float> flip;
  // Eval only: the shorter side before the crop; 0 takes the daemon's
  // default.
  uint32_t resize_shorter = 0;
  // "nchw" or "nhwc".
  std::string layout = "nchw";
  // batchd.v1.Pipeline.decoded_max_side: decode at capped resolution, then
  // crop; 0: off.
  uint32_t decoded_max_side = 0;
  // The crop's resize, "bilinear" or "bicubic", and the augmentation ops as
  // text-format Pipeline.augment entries (batchd.augment's classes write
  // them); client::ApplyAugmentOptions sets them.
  std::string interpolation = "bilinear";
  std::string augment;
  // batchd.v1.Plan.views as text-format `views { ... }` entries
  // (batchd.augment.ViewGroup writes them); "" for none. With views the
  // pipeline's crop (mode, size, scale, ratio, flip) is not sent: each
  // group has its own.
  std::string views;
  // An elastic resume (batchd.v1.Plan.resume): epoch resume_epoch starts
  // at position resume_position of its global order; 0: no resume.
  uint64_t resume_epoch = 0;
  uint64_t resume_position = 0;
  // batchd.v1.Plan.fields: (name, max_bytes) each, max_bytes 0 for the
  // default; missing_fields "empty" or "substitute"; label_field "" (cls),
  // "json:<key>" or "none".
  std::vector<std::pair<std::string, uint32_t>> sample_fields;
  std::string missing_fields = "empty";
  std::string label_field;
  // batchd.v1.Plan.sources, instead of `dataset`: (dataset, weight,
  // cursor) each; samples_per_epoch (0: the sources' sizes summed) and
  // sources_epoch (the epoch the cursors stand at).
  std::vector<std::tuple<std::string, double, uint64_t>> sources;
  uint64_t samples_per_epoch = 0;
  uint64_t sources_epoch = 0;

  // ---- The loader: client::LoaderOptions's fields, durations in seconds --
  uint32_t prefetch = LoaderDefaults().prefetch;
  bool auto_prefetch = LoaderDefaults().auto_prefetch;
  uint64_t auto_prefetch_max_bytes = LoaderDefaults().auto_prefetch_max_bytes;
  double connect_timeout =
      absl::ToDoubleSeconds(LoaderDefaults().connect_timeout);
  double unavailable_timeout =
      absl::ToDoubleSeconds(LoaderDefaults().unavailable_timeout);
  double hedge_factor = LoaderDefaults().hedge_factor;
  // 0 turns the per-batch progress deadline off.
  double batch_progress_timeout =
      absl::ToDoubleSeconds(LoaderDefaults().batch_progress_timeout);
  // The last epoch the trainer starts; unset: no limit.
  std::optional<uint64_t> last_epoch;
  bool shared_memory = LoaderDefaults().shared_memory;
  client::SecurityOptions security = LoaderDefaults().security;
};

// The client::LoaderOptions `args` stand for. INVALID_ARGUMENT, with the
// message Python shows as a ValueError, for options that do not fit
// together (an unknown mode, layout or interpolation, augment text that
// does not parse, a train-only option in eval mode, a timeout <= 0, a
// negative hedge factor).
absl::StatusOr<client::LoaderOptions> ToLoaderOptions(const LoaderArgs& args);

}  // namespace batchd::python

#endif  // BATCHD_PYTHON_NATIVE_LOADER_ARGS_H_
