// batchd-client: streams a plan from a batchd daemon and reports how fast the
// batches came, where the daemon spent its time, and optionally whether each
// epoch covered exactly this shard's samples.
//
//   batchd-client --endpoint=localhost:7070 --dataset=imagenet-val \
//       --batch_size=64 --epochs=2 --verify --dump=/tmp/run1.txt
//   batchd-client --list
//   batchd-client --dataset=imagenet --auto_augment=ta_wide --size=176 \
//       --print_plan      # the plan the flags make, without a daemon
//
// Exit status: 0 on success, 1 on an error (the message is printed), 2 when
// --verify finds a coverage mismatch.
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "client/augment_options.h"
#include "client/daemon_status.h"
#include "client/diagnosis.h"
#include "client/endpoints.h"
#include "client/loader.h"
#include "client/security_flags.h"
#include "client/shard_coverage.h"
#include "google/protobuf/text_format.h"

ABSL_FLAG(std::string, endpoint, "localhost:7070",
          "the daemons: host:port or unix:/path, a comma-separated list of "
          "them, or dns:///name:port for every address of a name");
ABSL_FLAG(double, hedge_factor, 3.0,
          "with several daemons, ask a second daemon for a batch outstanding "
          "longer than this multiple of the recent median; 0 turns it off");
ABSL_FLAG(double, batch_progress_timeout, 5.0,
          "with several daemons, a batch that receives nothing for this many "
          "seconds once it started arriving is asked of another daemon (its "
          "frozen stream is dropped); 0 turns it off");
ABSL_FLAG(std::string, dataset, "", "dataset name (see --list)");
ABSL_FLAG(std::string, sources, "",
          "a weighted mixture instead of --dataset: name:weight,... "
          "(docs/datasets.md, Mixtures)");
ABSL_FLAG(uint64_t, samples_per_epoch, 0,
          "with --sources: samples of an epoch; 0: the sources' sizes "
          "summed");
ABSL_FLAG(uint32_t, batch_size, 64, "samples per batch");
ABSL_FLAG(uint32_t, epochs, 1, "epochs to stream");
ABSL_FLAG(uint64_t, first_epoch, 0, "number of the first epoch");
ABSL_FLAG(uint32_t, size, 224, "output height and width, pixels");
ABSL_FLAG(std::string, mode, "train",
          "train (RandomResizedCrop + flip) or eval (resize + centre crop)");
ABSL_FLAG(std::string, layout, "nhwc", "nhwc or nchw");
ABSL_FLAG(uint32_t, decoded_max_side, 0,
          "decode each image at capped resolution (longer side at most "
          "this, pixels) and crop that: lets jobs with different seeds "
          "share the daemon's --decoded-cache-bytes; 0: off");
ABSL_FLAG(std::string, interpolation, "bilinear",
          "how the crop is resized to --size: bilinear or bicubic");
ABSL_FLAG(std::string, auto_augment, "",
          "torchvision's classification-reference policy after the crop and "
          "flip: ta_wide, ra, augmix, imagenet, cifar10 or svhn (bilinear, "
          "as the reference passes --interpolation to it); empty: none");
ABSL_FLAG(uint32_t, ra_magnitude, batchd::client::kDefaultRaMagnitude,
          "RandAugment's magnitude with --auto_augment=ra, 0..30");
ABSL_FLAG(uint32_t, augmix_severity, batchd::client::kDefaultAugmixSeverity,
          "AugMix's severity with --auto_augment=augmix, 1..10");
ABSL_FLAG(std::string, views, "",
          "a multi-view plan: text-format Plan.views entries (docs/augment.md, "
          "\"Views\"), e.g. 'views { count: 2 crop { size: 224 } }'; each "
          "sample is decoded once and cut into every view; replaces --size "
          "and the crop");
ABSL_FLAG(std::string, augment, "",
          "augmentation ops after --auto_augment's policy, in order, as "
          "text-format Pipeline.augment entries (docs/augment.md), e.g. "
          "'augment { color_jitter { brightness: 0.4 p: 0.8 } } augment { "
          "random_grayscale { p: 0.2 } }'");
ABSL_FLAG(double, random_erase, 0,
          "torchvision's --random-erase: RandomErasing's probability after "
          "normalisation (Pipeline.erasing; the trainer's client applies it)"
          ", 0 (off) to 1");
ABSL_FLAG(double, mixup_alpha, 0,
          "torchvision's --mixup-alpha: MixUp's Beta(alpha, alpha), 0 = off "
          "(Pipeline.mix; needs --num-classes)");
ABSL_FLAG(double, cutmix_alpha, 0,
          "torchvision's --cutmix-alpha: CutMix's Beta(alpha, alpha), 0 = off "
          "(Pipeline.mix; needs --num-classes)");
ABSL_FLAG(double, label_smoothing, 0,
          "torchvision's --label-smoothing, in the mix's soft labels, 0 <= e "
          "< 1 (needs --mixup-alpha or --cutmix-alpha)");
ABSL_FLAG(uint32_t, num_classes, 0,
          "classes of the mix's soft labels (the dataset's classes)");
ABSL_FLAG(bool, print_plan, false,
          "print the plan the flags make (protobuf text format) and exit");
ABSL_FLAG(uint64_t, seed, 0, "seed for the order and augmentation");
ABSL_FLAG(bool, shuffle, true, "shuffle the order each epoch");
ABSL_FLAG(uint32_t, shuffle_window_shards, 0,
          "with --shuffle on a TAR_SHARDS dataset: the shard-aware shuffle, "
          "shards permuted and samples drawn from a window of this many "
          "shards (docs/datasets.md); 0: shuffle every sample");
ABSL_FLAG(uint32_t, repeats, 0,
          "repeated augmentation (torchvision's --ra-reps): each image of "
          "the epoch this many times, each with its own augmentation, "
          "spread over the ranks; 0 or 1: none (docs/augment.md)");
ABSL_FLAG(bool, drop_last, false, "drop each epoch's last partial batch");
ABSL_FLAG(uint32_t, rank, 0, "this client's shard, 0 <= rank < world_size");
ABSL_FLAG(uint32_t, world_size, 1, "number of shards");
ABSL_FLAG(uint32_t, prefetch, 4, "batches outstanding (ring slots)");
ABSL_FLAG(bool, shm, true,
          "with one unix: or loopback endpoint, let the daemon write batches "
          "straight into this process's ring (shared memory)");
ABSL_FLAG(bool, next_epoch_prefetch, true,
          "request the next epoch's first batches while the current one "
          "ends (never past the last of --epochs)");
ABSL_FLAG(std::string, job, "", "job name for fair sharing and metrics");
ABSL_FLAG(bool, verify, false,
          "check that each epoch covers exactly this shard's samples");
ABSL_FLAG(std::string, dump, "",
          "write 'epoch batch fnv1a64 sample_indices...' per batch to FILE");
ABSL_FLAG(bool, list, false, "list the daemon's datasets and exit");
ABSL_FLAG(uint32_t, step_ms, 0,
          "simulate a training step: sleep this many milliseconds after each "
          "batch (to see a compute-bound run)");
ABSL_FLAG(uint64_t, max_receive_bytes_per_second, 0,
          "diagnostic knob: pace receiving to this many bytes/s, as a slow "
          "link would (0: no pacing)");

namespace batchd::client {
namespace {

constexpr int kExitError = 1;
constexpr int kExitMismatch = 2;
constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

// FNV-1a, 64 bits.
uint64_t Fnv1a64(const uint8_t* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// User + system CPU of this process so far, all threads (the receive path
// runs on gRPC's threads as well as the caller's).
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// --sources "name:weight,...", into `plan`'s sources. The daemon checks
// the names and the weights' range.
absl::Status ParseSources(const std::string& flag, batchd::v1::Plan* plan) {
  for (absl::string_view item : absl::StrSplit(flag, ',')) {
    const size_t colon = item.rfind(':');
    double weight = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtod(item.substr(colon + 1), &weight)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sources: '", item, "' is not name:weight (e.g. "
          "--sources=laion:0.7,cc12m:0.3)"));
    }
    batchd::v1::MixtureSource* source = plan->add_sources();
    source->set_dataset(std::string(item.substr(0, colon)));
    source->set_weight(weight);
  }
  plan->set_samples_per_epoch(absl::GetFlag(FLAGS_samples_per_epoch));
  return absl::OkStatus();
}

absl::StatusOr<batchd::v1::Plan> PlanFromFlags() {
  batchd::v1::Plan plan;
  plan.set_dataset(absl::GetFlag(FLAGS_dataset));
  const std::string sources = absl::GetFlag(FLAGS_sources);
  if (!sources.empty()) {
    if (!plan.dataset().empty()) {
      return absl::InvalidArgumentError(
          "give --dataset or --sources, not both");
    }
    if (absl::Status s = ParseSources(sources, &plan); !s.ok()) return s;
  } else if (plan.dataset().empty()) {
    return absl::InvalidArgumentError(
        "--dataset (or --sources) is required (see --list)");
  }
  plan.set_batch_size(absl::GetFlag(FLAGS_batch_size));
  plan.set_seed(absl::GetFlag(FLAGS_seed));
  plan.set_shuffle(absl::GetFlag(FLAGS_shuffle));
  plan.set_shuffle_window_shards(absl::GetFlag(FLAGS_shuffle_window_shards));
  plan.set_repeats(absl::GetFlag(FLAGS_repeats));
  plan.set_drop_last(absl::GetFlag(FLAGS_drop_last));
  plan.set_rank(absl::GetFlag(FLAGS_rank));
  plan.set_world_size(absl::GetFlag(FLAGS_world_size));
  plan.set_job(absl::GetFlag(FLAGS_job));
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const uint32_t size = absl::GetFlag(FLAGS_size);
  if (mode == "train") {
    plan.mutable_pipeline()->mutable_train()->set_size(size);
  } else if (mode == "eval") {
    plan.mutable_pipeline()->mutable_eval()->set_size(size);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode must be train or eval, not '", mode, "'"));
  }
  plan.mutable_pipeline()->set_decoded_max_side(
      absl::GetFlag(FLAGS_decoded_max_side));
  const std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout == "nhwc") {
    plan.mutable_pipeline()->set_layout(batchd::v1::LAYOUT_NHWC);
  } else if (layout == "nchw") {
    plan.mutable_pipeline()->set_layout(batchd::v1::LAYOUT_NCHW);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--layout must be nhwc or nchw, not '", layout, "'"));
  }
  AugmentOptions augment;
  augment.interpolation = absl::GetFlag(FLAGS_interpolation);
  augment.auto_augment = absl::GetFlag(FLAGS_auto_augment);
  augment.ra_magnitude = absl::GetFlag(FLAGS_ra_magnitude);
  augment.augmix_severity = absl::GetFlag(FLAGS_augmix_severity);
  augment.augment = absl::GetFlag(FLAGS_augment);
  augment.random_erase = absl::GetFlag(FLAGS_random_erase);
  augment.mixup_alpha = absl::GetFlag(FLAGS_mixup_alpha);
  augment.cutmix_alpha = absl::GetFlag(FLAGS_cutmix_alpha);
  augment.label_smoothing = absl::GetFlag(FLAGS_label_smoothing);
  augment.num_classes = absl::GetFlag(FLAGS_num_classes);
  if (absl::Status status =
          ApplyAugmentOptions(augment, plan.mutable_pipeline());
      !status.ok()) {
    // The message starts with the option's name, the flag's.
    return absl::InvalidArgumentError(absl::StrCat("--", status.message()));
  }
  if (absl::Status status = ParseViewList(absl::GetFlag(FLAGS_views), &plan);
      !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", status.message()));
  }
  return plan;
}

void PrintStageBreakdown(const batchd::v1::ServerStatus& before,
                         const batchd::v1::ServerStatus& after,
                         uint64_t images_received) {
  const batchd::v1::StageSeconds& a = before.stage_seconds();
  const batchd::v1::StageSeconds& b = after.stage_seconds();
  uint64_t images = after.samples_decoded() - before.samples_decoded();
  const char* denominator = "decoded";
  if (after.samples_decoded() < before.samples_decoded() || images == 0) {
    images = images_received;
    denominator = "received";
  }
  const double per_image_ms = images == 0 ? 0.0 : 1e3 / images;
  // Augmentation shows once the daemon has spent time on it.
  const std::string augment =
      b.augment() > 0
          ? absl::StrFormat(", augment %.3f",
                            (b.augment() - a.augment()) * per_image_ms)
          : std::string();
  absl::PrintF(
      "daemon stages (all jobs, ms per %s image over %d images): read %.3f, "
      "decode %.3f, transform %.3f%s, send %.3f\n",
      denominator, images, (b.read() - a.read()) * per_image_ms,
      (b.decode() - a.decode()) * per_image_ms,
      (b.transform() - a.transform()) * per_image_ms, augment,
      (b.send() - a.send()) * per_image_ms);
  const double alive =
      after.worker_alive_seconds() - before.worker_alive_seconds();
  const double busy = after.worker_busy_seconds() - before.worker_busy_seconds();
  const double busy_fraction = alive > 0 ? busy / alive : after.busy_fraction();
  absl::PrintF("daemon workers: %d, busy %.1f%%, substituted samples %d\n",
               after.workers(), 100.0 * busy_fraction,
               after.samples_substituted() - before.samples_substituted());
}

int Run() {
  const std::string endpoint = absl::GetFlag(FLAGS_endpoint);
  absl::StatusOr<EndpointSpec> spec = ParseEndpoints(endpoint);
  if (!spec.ok()) {
    absl::FPrintF(stderr, "error: --endpoint: %s\n", spec.status().message());
    return kExitError;
  }
  // Dataset lists and daemon status come from each daemon of a list; a DNS
  // name is one gRPC target (its first address answers).
  const std::vector<std::string> targets =
      spec->uses_dns() ? std::vector<std::string>{endpoint} : spec->addresses;
  const SecurityOptions security_options = SecurityOptionsFromFlags();
  absl::StatusOr<ChannelSecurity> security =
      ChannelSecurity::Load(security_options);
  if (!security.ok()) {
    absl::FPrintF(stderr, "error: %s\n", security.status().message());
    return kExitError;
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& target : targets) {
    channels.push_back(NewBatchdChannel(target, *security));
  }
  const std::shared_ptr<grpc::Channel>& channel = channels.front();

  if (absl::GetFlag(FLAGS_list)) {
    absl::StatusOr<batchd::v1::ListDatasetsResponse> datasets =
        ListDatasets(channel, targets.front(), *security, kRpcTimeout);
    if (!datasets.ok()) {
      absl::FPrintF(stderr, "error: %s\n", datasets.status().ToString());
      return kExitError;
    }
    for (const batchd::v1::DatasetInfo& info : datasets->datasets()) {
      absl::PrintF("%s\t%d samples\t%d classes\n", info.name(),
                   info.num_samples(), info.class_names_size());
    }
    return 0;
  }

  absl::StatusOr<batchd::v1::Plan> plan = PlanFromFlags();
  if (!plan.ok()) {
    absl::FPrintF(stderr, "error: %s\n", plan.status().message());
    return kExitError;
  }
  if (absl::GetFlag(FLAGS_print_plan)) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(*plan, &text);
    absl::PrintF("%s", text);
    return 0;
  }

  std::optional<ShardCoverage> expectation;
  uint64_t dataset_samples = 0;  // known with --verify
  if (absl::GetFlag(FLAGS_verify) && plan->sources_size() > 0) {
    absl::FPrintF(stderr, "error: --verify checks a plan of one dataset; "
                  "drop it with --sources\n");
    return kExitError;
  }
  if (absl::GetFlag(FLAGS_verify)) {
    absl::StatusOr<batchd::v1::ListDatasetsResponse> datasets =
        ListDatasets(channel, targets.front(), *security, kRpcTimeout);
    if (!datasets.ok()) {
      absl::FPrintF(stderr, "error: %s\n", datasets.status().ToString());
      return kExitError;
    }
    for (const batchd::v1::DatasetInfo& info : datasets->datasets()) {
      if (info.name() != plan->dataset()) continue;
      absl::StatusOr<ShardCoverage> coverage =
          ShardCoverage::Create(info.num_samples(), *plan,
                                {info.shard_samples().begin(),
                                 info.shard_samples().end()});
      if (!coverage.ok()) {
        absl::FPrintF(stderr, "error: --verify: %s\n",
                      coverage.status().message());
        return kExitError;
      }
      expectation = *std::move(coverage);
      dataset_samples = info.num_samples();
    }
    if (!expectation.has_value()) {
      absl::FPrintF(stderr, "error: --verify: dataset '%s' is not served at %s\n",
                    plan->dataset(), endpoint);
      return kExitError;
    }
  }

  std::ofstream dump;
  if (!absl::GetFlag(FLAGS_dump).empty()) {
    dump.open(absl::GetFlag(FLAGS_dump), std::ios::out | std::ios::trunc);
    if (!dump) {
      absl::FPrintF(stderr, "error: cannot write --dump file %s\n",
                    absl::GetFlag(FLAGS_dump));
      return kExitError;
    }
  }

  LoaderOptions options;
  options.endpoint = endpoint;
  options.plan = *plan;
  options.security = security_options;
  options.prefetch = absl::GetFlag(FLAGS_prefetch);
  options.shared_memory = absl::GetFlag(FLAGS_shm);
  options.hedge_factor = absl::GetFlag(FLAGS_hedge_factor);
  options.batch_progress_timeout =
      absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_batch_progress_timeout)));
  options.next_epoch_prefetch = absl::GetFlag(FLAGS_next_epoch_prefetch);
  if (absl::GetFlag(FLAGS_epochs) > 0) {  // nothing read ahead past the run
    options.last_epoch =
        absl::GetFlag(FLAGS_first_epoch) + absl::GetFlag(FLAGS_epochs) - 1;
  }
  options.max_receive_bytes_per_second =
      absl::GetFlag(FLAGS_max_receive_bytes_per_second);
  options.report = [](const std::string& line) {
    absl::PrintF("diagnosis: %s\n", line);
  };
  const absl::Duration step = absl::Milliseconds(absl::GetFlag(FLAGS_step_ms));
  absl::StatusOr<std::unique_ptr<Loader>> created =
      Loader::Create(std::move(options));
  if (!created.ok()) {
    absl::FPrintF(stderr, "error: %s\n", created.status().ToString());
    return kExitError;
  }
  Loader& loader = **created;
  absl::PrintF("streaming '%s' from %s: %d batches per epoch, window %d, "
               "batch shape [%s], transport %s\n",
               plan->dataset(), endpoint, loader.batches_per_epoch(),
               loader.window(),
               absl::StrJoin(loader.opened().shape(), ", "),
               loader.stats().transport);

  std::vector<absl::StatusOr<batchd::v1::ServerStatus>> statuses_before;
  for (const auto& c : channels) {
    statuses_before.push_back(FetchServerStatus(c, kRpcTimeout));
  }
  const absl::StatusOr<batchd::v1::ServerStatus>& status_before =
      statuses_before.front();
  absl::Duration longest_wait;

  bool mismatch = false;
  uint64_t total_images = 0;
  uint64_t total_bytes = 0;
  const absl::Time run_start = absl::Now();
  const double run_cpu_start = ProcessCpuSeconds();
  const Loader::Stats run_stats = loader.stats();
  const uint64_t first_epoch = absl::GetFlag(FLAGS_first_epoch);
  for (uint64_t epoch = first_epoch;
       epoch < first_epoch + absl::GetFlag(FLAGS_epochs); ++epoch) {
    const absl::Time epoch_start = absl::Now();
    const double epoch_cpu_start = ProcessCpuSeconds();
    const Loader::Stats epoch_stats = loader.stats();
    absl::Status status = loader.StartEpoch(epoch);
    if (!status.ok()) {
      absl::FPrintF(stderr, "error: %s\n", status.ToString());
      return kExitError;
    }
    uint64_t images = 0;
    uint64_t bytes = 0;
    uint64_t batches = 0;
    std::vector<uint64_t> samples;
    for (;;) {
      absl::StatusOr<Batch> batch = loader.Next();
      if (absl::IsOutOfRange(batch.status())) break;
      if (!batch.ok()) {
        absl::FPrintF(stderr, "error: epoch %d batch %d: %s\n", epoch,
                      loader.state().next_batch, batch.status().ToString());
        return kExitError;
      }
      ++batches;
      longest_wait = std::max(longest_wait, loader.stats().last_step.waited);
      images += batch->sample_indices.size();
      bytes += batch->size();
      if (expectation.has_value()) {
        const uint64_t want = expectation->BatchSamples(batch->batch_index);
        if (batch->sample_indices.size() != want) {
          absl::FPrintF(stderr, "verify: epoch %d batch %d has %d samples, "
                        "expected %d\n", epoch, batch->batch_index,
                        batch->sample_indices.size(), want);
          mismatch = true;
        }
        // Epoch-order entries: repeat r of sample i is i + r * N.
        for (size_t i = 0; i < batch->sample_indices.size(); ++i) {
          const uint64_t repeat =
              batch->repeats.empty() ? 0 : batch->repeats[i];
          samples.push_back(batch->sample_indices[i] +
                            repeat * dataset_samples);
        }
      }
      if (dump.is_open()) {
        dump << epoch << ' ' << batch->batch_index << ' '
             << absl::StrFormat("%016x", Fnv1a64(batch->data(), batch->size()));
        for (size_t i = 0; i < batch->sample_indices.size(); ++i) {
          // With sources: "source:sample".
          dump << ' ';
          if (!batch->sources.empty()) dump << batch->sources[i] << ':';
          dump << batch->sample_indices[i];
          // With repeats: "sample@repeat".
          if (!batch->repeats.empty()) dump << '@' << batch->repeats[i];
        }
        dump << '\n';
      }
      if (step > absl::ZeroDuration()) {
        batch->Release();  // the step's input is on its way to the model
        absl::SleepFor(step);
      }
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start);
    const Loader::Stats after = loader.stats();
    const double waited = absl::ToDoubleSeconds(after.waited - epoch_stats.waited);
    absl::PrintF(
        "epoch %d: %d batches, %d images in %.2f s: %.1f images/s, %.1f MB/s, "
        "waited %.1f%% of wall time, client CPU %.3f s\n",
        epoch, batches, images, seconds, seconds > 0 ? images / seconds : 0.0,
        seconds > 0 ? bytes / seconds / 1e6 : 0.0,
        seconds > 0 ? 100.0 * waited / seconds : 0.0,
        ProcessCpuSeconds() - epoch_cpu_start);
    total_images += images;
    total_bytes += bytes;
    if (expectation.has_value()) {
      std::vector<std::string> problems = expectation->Check(epoch, samples);
      if (batches != expectation->batches() ||
          batches != loader.batches_per_epoch()) {
        problems.push_back(absl::StrCat(
            batches, " batches, expected ", expectation->batches(),
            " (daemon says ", loader.batches_per_epoch(), ")"));
      }
      for (const std::string& problem : problems) {
        absl::FPrintF(stderr, "verify: epoch %d: %s\n", epoch, problem);
      }
      if (!problems.empty()) mismatch = true;
      absl::PrintF("verify: epoch %d %s\n", epoch,
                   problems.empty() ? "ok" : "MISMATCH");
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - run_start);
  const double waited =
      absl::ToDoubleSeconds(loader.stats().waited - run_stats.waited);
  absl::PrintF(
      "total: %d images, %.1f MB in %.2f s: %.1f images/s, %.1f MB/s, waited "
      "%.1f%% of wall time, client CPU %.3f s, longest wait %.3f s\n",
      total_images, total_bytes / 1e6, seconds,
      seconds > 0 ? total_images / seconds : 0.0,
      seconds > 0 ? total_bytes / seconds / 1e6 : 0.0,
      seconds > 0 ? 100.0 * waited / seconds : 0.0,
      ProcessCpuSeconds() - run_cpu_start,
      absl::ToDoubleSeconds(longest_wait));
  const Loader::Stats final_stats = loader.stats();
  if (final_stats.daemons.size() > 1) {
    absl::PrintF("daemons: %d batches re-requested, %d hedged\n",
                 final_stats.rerequested, final_stats.hedged);
    for (const DaemonStats& d : final_stats.daemons) {
      absl::PrintF(
          "  %s: %s, served %d, lost %d, hedges %d, cancelled %d, discarded "
          "%d, latency %.1f ms%s\n",
          d.endpoint, d.state, d.served, d.lost, d.hedges, d.cancelled,
          d.discarded,
          absl::ToDoubleMilliseconds(d.latency),
          d.last_error.ok() ? "" : absl::StrCat(" (", d.last_error.message(), ")"));
    }
  }

  const Loader::Stats run_interval = loader.stats().Since(run_stats);
  std::vector<absl::StatusOr<batchd::v1::ServerStatus>> statuses_after;
  for (size_t i = 0; i < channels.size(); ++i) {
    statuses_after.push_back(FetchServerStatus(channels[i], kRpcTimeout));
    const auto& before = statuses_before[i];
    const auto& after = statuses_after[i];
    if (channels.size() > 1) absl::PrintF("daemon %s:\n", targets[i]);
    if (before.ok() && after.ok()) {
      PrintStageBreakdown(*before, *after, total_images);
    } else {
      const absl::Status& why = before.ok() ? after.status() : before.status();
      absl::PrintF("daemon stages: unavailable (%s)\n", why.ToString());
    }
  }
  const absl::StatusOr<batchd::v1::ServerStatus>& status_after =
      statuses_after.front();
  absl::PrintF(
      "client: waited %.1f%% (%.1f%% after each epoch's first batch), "
      "compute %.1f%%, copy %.1f%% of wall time over %d steps\n",
      100 * run_interval.waited_fraction(),
      100 * run_interval.steady_waited_fraction(),
      100 * run_interval.compute_fraction(),
      100 * run_interval.copy_fraction(), run_interval.batches);
  const Diagnosis diagnosis =
      Diagnose(run_interval, status_before.ok() ? &*status_before : nullptr,
               status_after.ok() ? &*status_after : nullptr);
  absl::PrintF("diagnosis: %s\n", diagnosis.line);
  if (dump.is_open()) {
    dump.close();
    if (!dump) {
      absl::FPrintF(stderr, "error: writing --dump file %s failed\n",
                    absl::GetFlag(FLAGS_dump));
      return kExitError;
    }
  }
  return mismatch ? kExitMismatch : 0;
}

}  // namespace
}  // namespace batchd::client

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Streams batches from a batchd daemon and reports throughput.\n"
      "  batchd-client --endpoint=HOST:PORT --dataset=NAME [--verify] "
      "[--dump=FILE]\n  batchd-client --list");
  batchd::client::ShowToolFlagsInHelp("client/cli.cc");
  absl::ParseCommandLine(argc, argv);
  return batchd::client::Run();
}
