#include "client/loader.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/daemon_set.h"
#include "client/daemon_status.h"
#include "client/diagnosis.h"
#include "client/step_timeline.h"
#include "common/malloc_tuning.h"
#include "common/sampler.h"

namespace batchd::client {
namespace internal {
namespace {

// How long a diagnosis waits for a daemon's status.
constexpr absl::Duration kStatusTimeout = absl::Seconds(2);
// A step that spent longer than this in Next() waited for its batch; less
// is the cost of the call itself.
constexpr absl::Duration kWaitedStep = absl::Milliseconds(1);
// Steps kept for timeline(): the last kTimelineSteps.
constexpr size_t kTimelineSteps = 1024;

// The header's fields as views of one shared copy of their bytes (moved
// out of the header, which the ring's lease owns). The header was checked
// (BatchReceipts::CheckHeader): the sizes sum to the bytes.
void SetFields(batchd::v1::BatchHeader& header, BatchInfo* batch) {
  batch->field_counts.assign(header.field_counts().begin(),
                             header.field_counts().end());
  batch->field_count = batch->field_counts.size();
  if (header.field_sizes_size() == 0) return;
  auto data = std::make_shared<std::string>(
      std::move(*header.mutable_field_data()));
  batch->fields.reserve(header.field_sizes_size());
  size_t offset = 0;
  for (uint32_t size : header.field_sizes()) {
    batch->fields.push_back(absl::string_view(*data).substr(offset, size));
    offset += size;
  }
  batch->field_data = std::move(data);
}

}  // namespace

// What a Loader and its Batches share: the DaemonSet (the daemons, their
// streams and the ring) and the consumer's own figures: step times, the
// epoch's diagnosis. Owned jointly (shared_ptr) by the Loader and the
// Batches it returned, so a Batch may outlive its Loader; Shutdown()
// (called by ~Loader) stops the streams and joins every thread.
//
// The data path: Next() asks the DaemonSet for the batch at the consumer's
// position (DaemonSet::TakeNext: reserve slots, send requests, wait for the
// streams to fill the slot), then wraps the leased slot in a Batch, whose
// destruction gives the slot back (DaemonSet::Release).
//
// Lock order: mu_ is never held while calling the DaemonSet; the
// DaemonSet's supervisor reads the clock (Read) without its own lock.
class LoaderCore : public TrainerClock {
 public:
  explicit LoaderCore(LoaderOptions options)
      : report_(options.report),
        created_(absl::Now()),
        daemons_(std::move(options), this) {}
  ~LoaderCore() override { Shutdown(); }

  absl::Status Open() { return daemons_.Start(); }
  void Shutdown() { daemons_.Shutdown(); }
  void Cancel() { daemons_.Cancel(); }
  DaemonSet& daemons() { return daemons_; }
  const DaemonSet& daemons() const { return daemons_; }

  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch);
  absl::StatusOr<Batch> Next(std::shared_ptr<LoaderCore> self);
  Loader::Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<TimelineStep> timeline() const ABSL_LOCKS_EXCLUDED(mu_);
  void RecordCopy(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mu_);
  Diagnosis Diagnose() ABSL_LOCKS_EXCLUDED(mu_);
  std::string epoch_diagnosis() const ABSL_LOCKS_EXCLUDED(mu_);

  // TrainerClock, for the DaemonSet's reports and auto_prefetch.
  Reading Read(absl::Time now) const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A Batch of the leased slot.
  static Batch MakeBatch(SlotRing::Lease lease,
                         std::shared_ptr<LoaderCore> self);
  // Counts the step that returned `batch` (or an error) between `entered`
  // and `returned`; `copy` is the time its chunks took to copy. Returns
  // whether the epoch's end is to be reported.
  bool CountStep(const absl::StatusOr<Batch>& batch, absl::Duration copy,
                 absl::Time entered, absl::Time returned)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Marks the start of the epoch's diagnosis: the figures now and a
  // daemon's status.
  void MarkEpochStart() ABSL_LOCKS_EXCLUDED(mu_);
  // A daemon's admin status, or nullopt when none answers within
  // kStatusTimeout. Blocks; call without holding a lock.
  std::optional<batchd::v1::ServerStatus> FetchStatus() const;
  // The consumer's figures with the DaemonSet's added, now.
  Loader::Stats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::function<void(const std::string&)> report_;
  const absl::Time created_;
  DaemonSet daemons_;  // thread-safe

  mutable absl::Mutex mu_;
  // The consumer's figures: steps, images, bytes, waited, compute, and
  // copies from RecordCopy(). The DaemonSet adds its own in stats().
  Loader::Stats stats_ ABSL_GUARDED_BY(mu_);
  // When the last Next() returned; the gap to the next call is compute.
  std::optional<absl::Time> last_return_ ABSL_GUARDED_BY(mu_);
  // When the Next() in progress was called; nullopt outside Next().
  std::optional<absl::Time> inside_next_since_ ABSL_GUARDED_BY(mu_);
  // The last steps, for timeline().
  StepTimeline timeline_ ABSL_GUARDED_BY(mu_) = StepTimeline(kTimelineSteps);
  // Steps that returned a batch, and those that waited (> kWaitedStep),
  // epochs' first batches left out.
  uint64_t steady_steps_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t waited_steps_ ABSL_GUARDED_BY(mu_) = 0;
  // No batch returned since StartEpoch() yet.
  bool first_of_epoch_ ABSL_GUARDED_BY(mu_) = false;
  // The current epoch's start, for its diagnosis.
  Loader::Stats epoch_start_stats_ ABSL_GUARDED_BY(mu_);
  std::optional<batchd::v1::ServerStatus> epoch_start_status_
      ABSL_GUARDED_BY(mu_);
  // Whether the current epoch's end has been reported, and the last line.
  bool epoch_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::string epoch_diagnosis_ ABSL_GUARDED_BY(mu_);
};

absl::Status LoaderCore::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  absl::Status started = daemons_.StartEpoch(epoch, first_batch);
  if (!started.ok()) return started;
  {
    absl::MutexLock lock(&mu_);
    first_of_epoch_ = true;
  }
  MarkEpochStart();
  return absl::OkStatus();
}

absl::StatusOr<Batch> LoaderCore::Next(std::shared_ptr<LoaderCore> self) {
  const absl::Time entered = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (last_return_.has_value()) stats_.compute += entered - *last_return_;
    inside_next_since_ = entered;
    timeline_.Close(entered);
  }
  absl::StatusOr<SlotRing::Lease> lease = daemons_.TakeNext();
  const absl::Duration copy = lease.ok() ? lease->copy : absl::ZeroDuration();
  absl::StatusOr<Batch> batch =
      lease.ok() ? MakeBatch(*std::move(lease), std::move(self))
                 : absl::StatusOr<Batch>(lease.status());
  if (CountStep(batch, copy, entered, absl::Now())) {
    const std::string line = absl::StrCat(
        "epoch ", daemons_.position().first, ": ", Diagnose().line);
    {
      absl::MutexLock lock(&mu_);
      epoch_diagnosis_ = line;
    }
    if (report_) report_(line);
  }
  return batch;
}

Batch LoaderCore::MakeBatch(SlotRing::Lease lease,
                            std::shared_ptr<LoaderCore> self) {
  const batchd::v1::BatchHeader& header = lease.header;
  Batch batch;
  batch.epoch = lease.key.first;
  batch.batch_index = lease.key.second;
  batch.sample_indices.assign(header.sample_indices().begin(),
                              header.sample_indices().end());
  batch.labels.assign(header.labels().begin(), header.labels().end());
  batch.repeats.assign(header.repeats().begin(), header.repeats().end());
  batch.sources.assign(header.sources().begin(), header.sources().end());
  batch.shape.assign(header.shape().begin(), header.shape().end());
  batch.layout = header.layout() == batchd::v1::LAYOUT_UNSPECIFIED
                     ? batchd::v1::LAYOUT_NHWC
                     : header.layout();
  batch.substitutions.assign(header.substitutions().begin(),
                             header.substitutions().end());
  SetFields(lease.header, &batch);
  batch.erased.assign(header.erased().begin(), header.erased().end());
  if (header.has_mix()) batch.mix = header.mix();
  batch.views.assign(header.views().begin(), header.views().end());
  batch.core_ = std::move(self);
  batch.slot_ = lease.slot;
  batch.data_ = lease.data;
  batch.size_ = static_cast<size_t>(header.total_bytes());
  return batch;
}

bool LoaderCore::CountStep(const absl::StatusOr<Batch>& batch,
                           absl::Duration copy, absl::Time entered,
                           absl::Time returned) {
  absl::MutexLock lock(&mu_);
  stats_.waited += returned - entered;
  inside_next_since_.reset();
  if (batch.ok()) {
    ++stats_.batches;
    stats_.images += batch->sample_indices.size();
    stats_.bytes += batch->size();
    stats_.last_step.copy = copy;
    stats_.last_step.waited = returned - entered;
    if (first_of_epoch_) stats_.startup_waited += returned - entered;
    if (!first_of_epoch_) {
      ++steady_steps_;
      if (returned - entered > kWaitedStep) ++waited_steps_;
    }
    first_of_epoch_ = false;
    timeline_.Open(batch->epoch, batch->batch_index, entered, returned, copy);
    stats_.last_step.compute = last_return_.has_value()
                                   ? entered - *last_return_
                                   : absl::ZeroDuration();
  }
  last_return_ = returned;
  if (absl::IsOutOfRange(batch.status()) && !epoch_reported_) {
    epoch_reported_ = true;
    return true;
  }
  return false;
}

TrainerClock::Reading LoaderCore::Read(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  Reading reading;
  // Counting the call or the compute in progress, so that a trainer stuck
  // in Next() reports its wait now, not when the batch finally comes.
  reading.waited = stats_.waited;
  reading.compute = stats_.compute;
  if (inside_next_since_.has_value()) {
    reading.waited += now - *inside_next_since_;
  } else if (last_return_.has_value()) {
    reading.compute += now - *last_return_;
  }
  reading.steady_steps = steady_steps_;
  reading.waited_steps = waited_steps_;
  reading.steady_waited = stats_.waited - stats_.startup_waited;
  return reading;
}

// ---- Stats and the diagnosis ----

void LoaderCore::RecordCopy(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  stats_.copy += duration;
  stats_.last_step.copy += duration;
  timeline_.AddCopy(duration);
}

std::vector<TimelineStep> LoaderCore::timeline() const {
  absl::MutexLock lock(&mu_);
  return timeline_.Steps();
}

Loader::Stats LoaderCore::stats() const {
  Loader::Stats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  stats.wall = absl::Now() - created_;
  daemons_.AddStats(stats);
  return stats;
}

void LoaderCore::MarkEpochStart() {
  // Fetched after the requests went out, so the daemons start working
  // while we wait for the answer.
  std::optional<batchd::v1::ServerStatus> status = FetchStatus();
  Loader::Stats start = stats();
  absl::MutexLock lock(&mu_);
  epoch_start_stats_ = std::move(start);
  epoch_start_status_ = std::move(status);
  epoch_reported_ = false;
}

std::optional<batchd::v1::ServerStatus> LoaderCore::FetchStatus() const {
  // The daemon that served the most batches speaks for the run: with one
  // daemon that is it, with several the diagnosis adds the others' shares.
  std::shared_ptr<grpc::Channel> channel = daemons_.BusiestChannel();
  if (channel == nullptr) return std::nullopt;
  absl::StatusOr<batchd::v1::ServerStatus> status =
      FetchServerStatus(channel, kStatusTimeout);
  if (!status.ok()) return std::nullopt;
  return *std::move(status);
}

Diagnosis LoaderCore::Diagnose() {
  // The client's figures first: the status RPC below is neither waiting nor
  // compute, and must not dilute the waited share.
  const Loader::Stats current = stats();
  Loader::Stats interval;
  std::optional<batchd::v1::ServerStatus> start;
  {
    absl::MutexLock lock(&mu_);
    interval = current.Since(epoch_start_stats_);
    start = epoch_start_status_;
  }
  std::optional<batchd::v1::ServerStatus> now = FetchStatus();
  return client::Diagnose(interval, start ? &*start : nullptr,
                          now ? &*now : nullptr);
}

std::string LoaderCore::epoch_diagnosis() const {
  absl::MutexLock lock(&mu_);
  return epoch_diagnosis_;
}

}  // namespace internal

Batch::Batch(Batch&& other) noexcept { *this = std::move(other); }

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  BatchInfo::operator=(std::move(other));
  shape = std::move(other.shape);
  layout = other.layout;
  core_ = std::move(other.core_);
  slot_ = std::exchange(other.slot_, -1);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Batch::~Batch() { Release(); }

void Batch::Release() {
  if (core_ != nullptr) {
    std::shared_ptr<internal::LoaderCore> core = std::move(core_);
    core->daemons().Release(slot_);
  }
  slot_ = -1;
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(LoaderOptions options) {
  // Receiving 4 MiB messages without this costs ~6x the CPU (see the header).
  common::TuneMallocForLargeBuffers();
  auto core = std::make_shared<internal::LoaderCore>(std::move(options));
  absl::Status status = core->Open();
  if (!status.ok()) {
    core->Shutdown();
    return status;
  }
  return std::unique_ptr<Loader>(new Loader(std::move(core)));
}

Loader::Loader(std::shared_ptr<internal::LoaderCore> core)
    : core_(std::move(core)) {}

Loader::~Loader() { core_->Shutdown(); }

const batchd::v1::PlanOpened& Loader::opened() const {
  return core_->daemons().opened();
}

uint64_t Loader::batches_per_epoch() const {
  return core_->daemons().opened().batches_per_epoch();
}

uint32_t Loader::window() const { return core_->daemons().window(); }

absl::Status Loader::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  return core_->StartEpoch(epoch, first_batch);
}

absl::StatusOr<Batch> Loader::Next() { return core_->Next(core_); }

LoaderState Loader::state() const {
  const auto [epoch, next_batch] = core_->daemons().position();
  const batchd::v1::Plan& plan = core_->daemons().plan();
  common::ShardSpec shard;
  shard.num_samples = core_->daemons().opened().dataset_samples();
  shard.drop_last = plan.drop_last();
  shard.rank = plan.rank();
  shard.world_size = std::max<uint32_t>(plan.world_size(), 1);
  shard.batch_size = plan.batch_size();
  shard.repeats = std::max<uint32_t>(plan.repeats(), 1);
  if (plan.sources_size() > 0) {
    // A mixture's epoch length is all the position needs.
    auto mixture = std::make_shared<common::MixtureSpec>();
    mixture->samples_per_epoch = plan.samples_per_epoch() > 0
                                     ? plan.samples_per_epoch()
                                     : shard.num_samples;
    shard.mixture = std::move(mixture);
  }
  if (plan.resume().position() > 0 && plan.resume().epoch() == epoch) {
    shard.start_position = plan.resume().position();
  }
  return LoaderState{epoch, next_batch,
                     common::GlobalPosition(shard, next_batch)};
}

absl::Status Loader::Restore(const LoaderState& state) {
  return StartEpoch(state.epoch, state.next_batch);
}

Loader::Stats Loader::stats() const { return core_->stats(); }

std::vector<TimelineStep> Loader::timeline() const {
  return core_->timeline();
}

void Loader::Cancel() { core_->Cancel(); }

void Loader::RecordCopy(absl::Duration duration) {
  core_->RecordCopy(duration);
}

Diagnosis Loader::Diagnose() { return core_->Diagnose(); }

std::string Loader::epoch_diagnosis() const {
  return core_->epoch_diagnosis();
}

}  // namespace batchd::client
