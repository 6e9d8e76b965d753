#include "common/daemon_verdict.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

batchd::v1::ServerStatus Status(double busy, uint32_t workers) {
  batchd::v1::ServerStatus status;
  status.set_busy_fraction(busy);
  status.set_workers(workers);
  return status;
}

void AddJob(batchd::v1::ServerStatus* status, const std::string& name,
            uint32_t streams, uint32_t reporting, double wait) {
  batchd::v1::JobStatus* job = status->add_jobs();
  job->set_job(name);
  job->set_streams(streams);
  job->mutable_trainer()->set_reporting_streams(reporting);
  job->mutable_trainer()->set_wait_ratio(wait);
}

TEST(DaemonVerdictTest, IdleWithoutStreamsUnknownWithoutReports) {
  batchd::v1::ServerStatus status = Status(0.0, 2);
  EXPECT_EQ(JudgeDaemon(status).line,
            "idle: no streams; workers 0.0 % busy (2 workers)");
  AddJob(&status, "a", 3, 0, 0);
  const DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "unknown");
  EXPECT_EQ(v.line,
            "unknown: 3 streams, none with trainer reports; workers 0.0 % "
            "busy (2 workers)");
}

TEST(DaemonVerdictTest, AFailingOrSlowStoreIsNamedFirst) {
  batchd::v1::ServerStatus status = Status(0.1, 2);
  AddJob(&status, "a", 1, 1, 0.9);
  batchd::v1::StoreFaultStatus* fault =
      status.mutable_object_store()->add_recent_faults();
  fault->set_dataset("imagenet");
  fault->set_slow(true);
  fault->set_count(3);
  fault->set_seconds_since_latest(1.25);
  fault->set_latest("dataset \"imagenet\": GET http://s/x.tar bytes=0-9: "
                    "too slow");
  DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "store-slow");
  EXPECT_THAT(v.line,
              HasSubstr("store-slow: the object store for dataset "
                        "\"imagenet\" is slow (3 failed requests in the last "
                        "minute, the latest 1.2 s ago: dataset \"imagenet\": "
                        "GET http://s/x.tar"));
  fault->set_slow(false);
  EXPECT_EQ(JudgeDaemon(status).kind, "store-failing");
  // Without streams nobody waits on it.
  batchd::v1::ServerStatus idle = status;
  idle.clear_jobs();
  EXPECT_EQ(JudgeDaemon(idle).kind, "idle");
}

TEST(DaemonVerdictTest, TheMostWaitingJobDecides) {
  batchd::v1::ServerStatus status = Status(0.97, 1);
  AddJob(&status, "fast", 1, 1, 0.02);
  EXPECT_EQ(JudgeDaemon(status).line,
            "compute-bound: job \"fast\" waits 2.0 %; workers 97 % busy (1 "
            "worker)");
  AddJob(&status, "slow", 1, 1, 0.43);
  const DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "input-bound");
  EXPECT_EQ(v.line,
            "input-bound: job \"slow\" waits 43 %; workers 97 % busy (1 "
            "worker) → add workers or a daemon");
}

TEST(DaemonVerdictTest, SpareWorkersAndWaitingTrainersAreNetworkBound) {
  batchd::v1::ServerStatus status = Status(0.30, 4);
  AddJob(&status, "a", 1, 1, 0.5);
  const DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "network-bound");
  EXPECT_THAT(v.line, HasSubstr("job \"a\" waits 50 %; workers 30 % busy"));
}

TEST(DaemonVerdictTest, WorkersWaitingOnReadsAreStorageBound) {
  batchd::v1::ServerStatus status = Status(0.30, 2);
  AddJob(&status, "a", 1, 1, 0.4);
  status.mutable_stage_seconds()->set_read(3.0);
  status.mutable_stage_seconds()->set_decode(4.0);
  status.mutable_stage_seconds()->set_transform(1.0);
  EXPECT_EQ(JudgeDaemon(status).kind, "network-bound");  // reads 37.5 %
  status.mutable_stage_seconds()->set_read(6.0);         // reads 55 %
  DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "storage-bound");
  EXPECT_THAT(v.line, HasSubstr("job \"a\" waits 40 %; workers 30 % busy "
                                "(2 workers), reading samples 55 % of their "
                                "time"));
  EXPECT_THAT(v.line, HasSubstr("--read-cache-bytes"));
  // Remote shards: the advice is the shard cache's.
  status.mutable_object_store()->set_requests(120);
  v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "storage-bound");
  EXPECT_THAT(v.line, HasSubstr("--cache-bytes"));
  EXPECT_THAT(v.line, HasSubstr("shuffle_window_shards"));
  // Saturated workers are the limit, however long the (overlapping)
  // reads took.
  status.set_busy_fraction(0.95);
  EXPECT_EQ(JudgeDaemon(status).kind, "input-bound");
  // Trainers that do not wait are not storage-bound, whatever the reads.
  status.mutable_jobs(0)->mutable_trainer()->set_wait_ratio(0.05);
  EXPECT_EQ(JudgeDaemon(status).kind, "compute-bound");
}

TEST(DaemonVerdictTest, SaturatedWorkersThatMostlyAugmentNameAugmentation) {
  batchd::v1::ServerStatus status = Status(0.97, 1);
  AddJob(&status, "a", 1, 1, 0.43);
  batchd::v1::StageSeconds* stages = status.mutable_stage_seconds();
  stages->set_read(0.5);
  stages->set_decode(3.0);
  stages->set_transform(0.5);
  // No augmentation: the line is the plain input-bound one.
  EXPECT_EQ(JudgeDaemon(status).line,
            "input-bound: job \"a\" waits 43 %; workers 97 % busy (1 "
            "worker) → add workers or a daemon");
  // 6 s of 10 augmenting: dropping it would more than cover the wait.
  stages->set_augment(6.0);
  EXPECT_DOUBLE_EQ(AugmentShare(*stages), 0.6);
  EXPECT_DOUBLE_EQ(ReadShare(*stages), 0.05);
  DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "input-bound");
  EXPECT_EQ(v.line,
            "input-bound: job \"a\" waits 43 %; workers 97 % busy (1 "
            "worker); augmentation takes 60 % of the workers' time per image "
            "→ add workers or a daemon, or a lighter augmentation policy");
  // Under --workers auto the autoscaler's advice comes first.
  status.mutable_autoscale()->set_enabled(true);
  status.mutable_autoscale()->set_max_workers(4);
  EXPECT_THAT(JudgeDaemon(status).line,
              HasSubstr("→ --workers auto is adding workers (up to 4), or a "
                        "lighter augmentation policy"));
  status.clear_autoscale();
  // 1 s of 5 (20 %): below the named share, but it covers a 15 % wait.
  stages->set_augment(1.0);
  status.mutable_jobs(0)->mutable_trainer()->set_wait_ratio(0.15);
  EXPECT_THAT(JudgeDaemon(status).line,
              HasSubstr("; augmentation takes 20 % of the workers' time per "
                        "image → "));
  // ... but not a 43 % wait: the workers are short whatever the policy.
  status.mutable_jobs(0)->mutable_trainer()->set_wait_ratio(0.43);
  EXPECT_EQ(JudgeDaemon(status).line,
            "input-bound: job \"a\" waits 43 %; workers 97 % busy (1 "
            "worker) → add workers or a daemon");
  // Workers with time to spare are not limited by augmentation.
  stages->set_augment(6.0);
  status.set_busy_fraction(0.3);
  EXPECT_THAT(JudgeDaemon(status).line, Not(HasSubstr("augmentation")));
}

TEST(DaemonVerdictTest, AugmentationMakesInputBoundRule) {
  EXPECT_FALSE(AugmentationMakesInputBound(0.0, 0.0));
  EXPECT_TRUE(AugmentationMakesInputBound(0.12, 0.11));
  EXPECT_FALSE(AugmentationMakesInputBound(0.12, 0.30));
  EXPECT_TRUE(AugmentationMakesInputBound(kAugmentNamedShare, 0.9));
  EXPECT_EQ(AugmentationNote(0.055),
            "augmentation takes 5.5 % of the workers' time per image");
}

TEST(DaemonVerdictTest, AutoscaleAdviceAndDraining) {
  batchd::v1::ServerStatus status = Status(0.9, 2);
  AddJob(&status, "a", 1, 1, 0.5);
  status.mutable_autoscale()->set_enabled(true);
  status.mutable_autoscale()->set_max_workers(4);
  EXPECT_THAT(JudgeDaemon(status).line,
              HasSubstr("→ --workers auto is adding workers (up to 4)"));
  status.set_capacity_demand_ratio(1.5);
  EXPECT_THAT(JudgeDaemon(status).line,
              HasSubstr("→ add a daemon: this one runs up to 4 workers "
                        "(--max-workers) and its trainers ask 1.5x"));
  status.set_draining(true);
  EXPECT_EQ(JudgeDaemon(status).kind, "draining");
}

TEST(DaemonVerdictTest, SharingSummaryAndAdviceForSeveralPlans) {
  batchd::v1::ServerStatus status = Status(0.97, 2);
  EXPECT_EQ(SharingSummary(status), "");
  batchd::v1::SharedBatchStatus* shared = status.mutable_shared_batches();
  shared->set_enabled(true);
  shared->set_retained_bytes(400'000);
  shared->set_retention_limit_bytes(512'000'000);
  batchd::v1::PlanSharing* plan = shared->add_plans();
  plan->set_plan("0123456789abcdef");
  plan->set_built(24);
  plan->set_attached(15);
  plan->set_retained(39);
  EXPECT_EQ(SharingSummary(status),
            "sharing: 78 requests of 1 plan from 24 builds (3.25 each), 15 "
            "attached, 39 retained; retained 0.4/512.0 MB, 0 evicted");
  EXPECT_THAT(InputBoundAdvice(status), Not(HasSubstr("plans build")));
  shared->add_plans()->set_built(5);
  EXPECT_THAT(InputBoundAdvice(status),
              HasSubstr("; 2 plans build their own batches here (jobs with "
                        "the same dataset, pipeline and seed share them)"));
}

// 8 shards of about 29 MB (235 MB) read by a per-sample shuffle through a
// cache of two shards, part of the way into an epoch.
batchd::v1::ServerStatus ThrashingCache() {
  batchd::v1::ServerStatus status = Status(0.30, 2);
  AddJob(&status, "a", 1, 1, 0.4);
  status.mutable_object_store()->set_requests(3000);
  batchd::v1::ShardCacheStatus& cache = *status.mutable_shard_cache();
  cache.set_disk_bytes(64'000'000);
  cache.set_disk_limit_bytes(70'000'000);
  cache.set_hits(290);
  cache.set_misses(1'482);
  cache.set_uncached_reads(210);
  cache.set_whole_choices(1'482);
  cache.set_range_choices(200);
  cache.set_downloaded_bytes(440'000'000);
  cache.set_range_bytes(15'000'000);
  cache.set_served_bytes(235'000'000);
  cache.set_forecast_shard_bytes(234'600'000);
  cache.set_forecast_reads(4'096);
  cache.set_prefetches_in_flight(2);
  cache.set_prefetch_depth_reads(150);
  return status;
}

TEST(DaemonVerdictTest, ShardCacheHitRateAndAmplification) {
  batchd::v1::ShardCacheStatus cache;
  EXPECT_EQ(ShardCacheHitRate(cache), 0);
  EXPECT_EQ(ShardCacheAmplification(cache), 0);
  cache = ThrashingCache().shard_cache();
  EXPECT_DOUBLE_EQ(ShardCacheHitRate(cache), 290.0 / 1982.0);
  EXPECT_DOUBLE_EQ(ShardCacheAmplification(cache), 455.0 / 235.0);
  EXPECT_EQ(FormatBytes(234'600'000), "235 MB");
  EXPECT_EQ(FormatBytes(5'240'000), "5.2 MB");
  EXPECT_EQ(FormatBytes(45'600'000'000), "45.6 GB");
  EXPECT_EQ(FormatBytes(512'000), "512 kB");
  EXPECT_EQ(FormatBytes(800), "800 B");
}

TEST(DaemonVerdictTest, ShardCacheSummaryForTopAndTheLivePage) {
  batchd::v1::ServerStatus status = ThrashingCache();
  EXPECT_EQ(ShardCacheSummary(status),
            "shard cache: hit 15 %, fetched 1.94x served, 1482 whole / 200 "
            "ranges; prefetch 150 reads ahead (2 in flight); holds 64 MB of "
            "70 MB, the plans read 235 MB");
  status.mutable_shard_cache()->clear_hits();
  status.mutable_shard_cache()->clear_misses();
  status.mutable_shard_cache()->clear_uncached_reads();
  EXPECT_THAT(ShardCacheSummary(status),
              HasSubstr("shard cache: no reads yet; prefetch 150"));
  status.clear_shard_cache();
  EXPECT_EQ(ShardCacheSummary(status), "");
}

TEST(DaemonVerdictTest, AShardCacheTooSmallForThePlansSaysByHowMuch) {
  batchd::v1::ServerStatus status = ThrashingCache();
  status.mutable_stage_seconds()->set_read(6.0);
  status.mutable_stage_seconds()->set_decode(4.0);
  const std::string too_small =
      "shard cache too small for the plans: they read 235 MB of shards "
      "within the forecast, the cache holds 70 MB; --cache-bytes 235000000 "
      "would fetch each shard once (now 1.94x the bytes served are fetched)";
  EXPECT_EQ(ShardCacheTooSmall(status), too_small);
  // Storage-bound: it is the advice, instead of the general one.
  DaemonVerdict v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "storage-bound");
  EXPECT_THAT(v.line, HasSubstr("reading samples 60 % of their time → " +
                                too_small + ", or the shard-aware shuffle"));
  EXPECT_THAT(v.line, Not(HasSubstr("more --cache-prefetch-batches")));
  // Elsewhere a note after the verdict's own line: the kinds and their
  // order do not change.
  status.mutable_stage_seconds()->set_read(1.0);
  v = JudgeDaemon(status);
  EXPECT_EQ(v.kind, "network-bound");
  EXPECT_THAT(v.line, HasSubstr("says which); " + too_small));
  status.set_busy_fraction(0.95);
  EXPECT_EQ(JudgeDaemon(status).kind, "input-bound");
  EXPECT_THAT(JudgeDaemon(status).line,
              HasSubstr("add workers or a daemon; shard cache too small"));
  status.mutable_jobs(0)->mutable_trainer()->set_wait_ratio(0.05);
  EXPECT_EQ(JudgeDaemon(status).kind, "compute-bound");
  EXPECT_THAT(JudgeDaemon(status).line, HasSubstr("; " + too_small));
  // An idle daemon says nothing of it.
  batchd::v1::ServerStatus idle = status;
  idle.clear_jobs();
  EXPECT_EQ(JudgeDaemon(idle).line,
            "idle: no streams; workers 95 % busy (2 workers)");
}

TEST(DaemonVerdictTest, AShardCacheIsTooSmallOnlyWhenItShows) {
  const batchd::v1::ServerStatus thrashing = ThrashingCache();
  ASSERT_NE(ShardCacheTooSmall(thrashing), "");
  // The plans' shards fit: Belady keeps them, whatever the cold misses.
  batchd::v1::ServerStatus status = thrashing;
  status.mutable_shard_cache()->set_forecast_shard_bytes(70'000'000);
  EXPECT_EQ(ShardCacheTooSmall(status), "");
  // A cold cache that has served less than it holds: its first downloads
  // are not yet read.
  status = thrashing;
  status.mutable_shard_cache()->set_served_bytes(60'000'000);
  EXPECT_EQ(ShardCacheTooSmall(status), "");
  // Fetching about what it serves, mostly by downloads (a shard-aware
  // shuffle with a small cache): fine.
  status = thrashing;
  status.mutable_shard_cache()->set_downloaded_bytes(250'000'000);
  EXPECT_LT(ShardCacheAmplification(status.shard_cache()),
            kCacheTooSmallAmplification);
  EXPECT_EQ(ShardCacheTooSmall(status), "");
  // The same bytes, but most misses read by member ranges: one request a
  // member, because the shards leave the cache before enough is read.
  status.mutable_shard_cache()->set_whole_choices(100);
  status.mutable_shard_cache()->set_range_choices(1'500);
  EXPECT_THAT(ShardCacheTooSmall(status),
              HasSubstr("(now 1.13x the bytes served are fetched, 1500 of "
                        "1600 misses by member ranges)"));
  // No shard cache, or no bound known.
  status.clear_shard_cache();
  EXPECT_EQ(ShardCacheTooSmall(status), "");
  status = thrashing;
  status.mutable_shard_cache()->set_disk_limit_bytes(0);
  EXPECT_EQ(ShardCacheTooSmall(status), "");
}

}  // namespace
}  // namespace batchd::common
