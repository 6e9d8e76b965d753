#include "client/diagnosis.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// An interval of `wall_s` seconds with `waited_s` spent in Next() over 100
// steps of 1 MB, `copy_s` copying.
LoaderStats Interval(double wall_s, double waited_s, double copy_s = 0) {
  LoaderStats s;
  s.batches = 100;
  s.images = 6400;
  s.bytes = 100'000'000;
  s.received_bytes = 100'000'000;
  s.wall = absl::Seconds(wall_s);
  s.waited = absl::Seconds(waited_s);
  s.compute = absl::Seconds(wall_s - waited_s);
  s.copy = absl::Seconds(copy_s);
  return s;
}

batchd::v1::ServerStatus Daemon(uint32_t workers, double busy_s,
                                double alive_s) {
  batchd::v1::ServerStatus status;
  status.set_workers(workers);
  status.set_worker_busy_seconds(busy_s);
  status.set_worker_alive_seconds(alive_s);
  status.set_busy_fraction(alive_s > 0 ? busy_s / alive_s : 0);
  return status;
}

TEST(DiagnosisTest, LittleWaitingIsComputeBound) {
  const auto before = Daemon(4, 0, 0);
  const auto after = Daemon(4, 14, 40);
  const Diagnosis d = Diagnose(Interval(10, 0.04), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kComputeBound);
  EXPECT_EQ(d.line,
            "compute-bound: waited 0.4 % of wall time; daemon workers 35 % "
            "busy (4 workers); input keeps up");
}

TEST(DiagnosisTest, WaitingWithSaturatedWorkersIsInputBound) {
  const auto before = Daemon(1, 100, 100);
  const auto after = Daemon(1, 110, 110);
  const Diagnosis d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(d.line,
            "input-bound: waited 43 % of wall time; daemon workers 100 % busy "
            "(1 worker) → add workers or a daemon");
  EXPECT_DOUBLE_EQ(d.daemon_busy_fraction, 1.0);
}

TEST(DiagnosisTest, UnderAutoscalingSaysWhetherWorkersOrDaemonsAreNeeded) {
  const auto before = Daemon(2, 100, 100);
  auto after = Daemon(2, 110, 110);
  after.mutable_autoscale()->set_enabled(true);
  after.mutable_autoscale()->set_min_workers(1);
  after.mutable_autoscale()->set_max_workers(4);
  Diagnosis d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_THAT(d.line, HasSubstr("→ --workers auto is adding workers (up to "
                                "4)"));
  // At its most workers: only another daemon helps.
  after.set_workers(4);
  d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_THAT(d.line, HasSubstr("→ add a daemon: this one runs up to 4 "
                                "workers (--max-workers)"));
  // Below them, but the trainers ask more than 4 workers could decode.
  after.set_workers(2);
  after.set_capacity_demand_ratio(1.8);
  d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_THAT(d.line, HasSubstr("→ add a daemon: this one runs up to 4 "
                                "workers (--max-workers) and its trainers "
                                "ask 1.8x what those decode"));
}

TEST(DiagnosisTest, SaturatedWorkersSpendingTheirTimeAugmentingNameIt) {
  auto before = Daemon(1, 100, 100);
  auto after = Daemon(1, 110, 110);
  // Before the interval: a plan without augmentation (excluded).
  before.mutable_stage_seconds()->set_decode(80);
  before.mutable_stage_seconds()->set_read(20);
  // Over it: 6 of 10 worker seconds augmenting.
  after.mutable_stage_seconds()->set_decode(83);
  after.mutable_stage_seconds()->set_read(21);
  after.mutable_stage_seconds()->set_augment(6);
  Diagnosis d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_DOUBLE_EQ(d.daemon_augment_share, 0.6);
  EXPECT_EQ(d.line,
            "input-bound: waited 43 % of wall time; daemon workers 100 % busy "
            "(1 worker); augmentation takes 60 % of the workers' time per "
            "image → add workers or a daemon, or a lighter augmentation "
            "policy");
  // 1 of 5 s (20 %) does not explain a 43 % wait: the plain line.
  after.mutable_stage_seconds()->set_augment(1);
  d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_DOUBLE_EQ(d.daemon_augment_share, 0.2);
  EXPECT_EQ(d.line,
            "input-bound: waited 43 % of wall time; daemon workers 100 % busy "
            "(1 worker) → add workers or a daemon");
  // It does a 15 % one.
  d = Diagnose(Interval(10, 1.5), &before, &after);
  EXPECT_THAT(d.line, HasSubstr("(1 worker); augmentation takes 20 % of the "
                                "workers' time per image → add workers or a "
                                "daemon, or a lighter augmentation policy"));
  // Workers with time to spare: augmentation is not the limit.
  after.set_worker_busy_seconds(102);
  after.mutable_stage_seconds()->set_augment(6);
  d = Diagnose(Interval(10, 4.3), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kNetworkBound);
  EXPECT_THAT(d.line, ::testing::Not(HasSubstr("augmentation")));
}

TEST(DiagnosisTest, WaitingWithIdleWorkersIsNetworkBound) {
  const auto before = Daemon(8, 0, 0);
  const auto after = Daemon(8, 28, 80);
  LoaderStats interval = Interval(10, 6);
  interval.received_bytes = 11'000'000'000;
  const Diagnosis d = Diagnose(interval, &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kNetworkBound);
  EXPECT_THAT(d.line, StartsWith("network-bound: waited 60 % of wall time; "
                                 "daemon workers 35 % busy (8 workers), "
                                 "stream at 1.1 GB/s"));
}

TEST(DiagnosisTest, SamplesWaitingOnReadsAreStorageBound) {
  auto before = Daemon(2, 0, 0);
  auto after = Daemon(2, 2, 20);  // workers 10 % busy
  before.mutable_stage_seconds()->set_read(100);  // a cold start, excluded
  after.mutable_stage_seconds()->set_read(130);
  after.mutable_stage_seconds()->set_decode(8);
  after.mutable_stage_seconds()->set_transform(2);
  after.mutable_object_store()->set_requests(4000);
  const Diagnosis d = Diagnose(Interval(10, 9), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kStorageBound);
  EXPECT_STREQ(VerdictName(d.verdict), "storage-bound");
  EXPECT_THAT(d.line, StartsWith("storage-bound: waited 90 % of wall time; "
                                 "daemon workers 10 % busy (2 workers), its "
                                 "samples spent 75 % of their time being "
                                 "read → "));
  EXPECT_THAT(d.line, HasSubstr("--cache-bytes"));
  // Saturated workers are the limit, however long the overlapping reads.
  auto saturated = after;
  saturated.set_worker_busy_seconds(19);
  EXPECT_EQ(Diagnose(Interval(10, 9), &before, &saturated).verdict,
            Verdict::kInputBound);
  // Reads that are a small share over the interval are not the limit,
  // whatever they were before it.
  before.mutable_stage_seconds()->set_read(129);
  EXPECT_EQ(Diagnose(Interval(10, 9), &before, &after).verdict,
            Verdict::kNetworkBound);
}

TEST(DiagnosisTest, CopyDominatingIsClientBound) {
  const auto after = Daemon(8, 10, 80);
  const Diagnosis d = Diagnose(Interval(10, 5, 7), nullptr, &after);
  EXPECT_EQ(d.verdict, Verdict::kClientBound);
  EXPECT_THAT(d.line, StartsWith("client-bound: waited 50 % of wall time; "
                                 "copy into buffers dominates (70 %"));
}

TEST(DiagnosisTest, WithoutDaemonStatusTheCauseIsUnknown) {
  const Diagnosis d = Diagnose(Interval(10, 5), nullptr, nullptr);
  EXPECT_EQ(d.verdict, Verdict::kInputBoundUnknownCause);
  EXPECT_STREQ(VerdictName(d.verdict), "input-bound");
  EXPECT_THAT(d.line, HasSubstr("daemon status unavailable"));
  EXPECT_LT(d.daemon_busy_fraction, 0);
}

TEST(DiagnosisTest, OnlyTheLaterStatusUsesItsRecentBusyFraction) {
  batchd::v1::ServerStatus after = Daemon(2, 0, 0);
  after.set_busy_fraction(0.9);
  EXPECT_EQ(Diagnose(Interval(10, 5), nullptr, &after).verdict,
            Verdict::kInputBound);
  after.set_busy_fraction(0.2);
  EXPECT_EQ(Diagnose(Interval(10, 5), nullptr, &after).verdict,
            Verdict::kNetworkBound);
}

TEST(DiagnosisTest, ARestartedDaemonFallsBackToTheRecentFraction) {
  batchd::v1::ServerStatus before = Daemon(2, 500, 600);
  batchd::v1::ServerStatus after = Daemon(2, 5, 6);
  after.set_busy_fraction(0.1);
  EXPECT_EQ(Diagnose(Interval(10, 5), &before, &after).verdict,
            Verdict::kNetworkBound);
}

TEST(DiagnosisTest, TheFirstBatchOfAnEpochDoesNotMakeItInputBound) {
  // 1 s filling the pipeline, then 0.1 s of waiting over 9 s of steps.
  LoaderStats interval = Interval(10, 1.1);
  interval.startup_waited = absl::Seconds(1);
  const auto after = Daemon(2, 1, 20);
  const Diagnosis d = Diagnose(interval, nullptr, &after);
  EXPECT_EQ(d.verdict, Verdict::kComputeBound);
  EXPECT_THAT(d.line, StartsWith("compute-bound: waited 1.1 % of wall time"));
}

TEST(DiagnosisTest, NoStepsIsUnknown) {
  LoaderStats empty;
  empty.wall = absl::Seconds(3);
  const Diagnosis d = Diagnose(empty, nullptr, nullptr);
  EXPECT_EQ(d.verdict, Verdict::kUnknown);
  EXPECT_STREQ(VerdictName(d.verdict), "unknown");
}

TEST(DiagnosisTest, StatsSinceAndRates) {
  LoaderStats a = Interval(10, 4, 1);
  LoaderStats b = Interval(30, 6, 2);
  b.batches = 300;
  b.bytes = 300'000'000;
  const LoaderStats d = b.Since(a);
  EXPECT_EQ(d.batches, 200u);
  EXPECT_EQ(d.wall, absl::Seconds(20));
  EXPECT_DOUBLE_EQ(d.waited_fraction(), 0.1);
  EXPECT_DOUBLE_EQ(d.copy_fraction(), 0.05);
  EXPECT_DOUBLE_EQ(d.batches_per_second(), 10);
  EXPECT_DOUBLE_EQ(d.bytes_per_second(), 10e6);
  EXPECT_DOUBLE_EQ(LoaderStats().waited_fraction(), 0);
}

TEST(DiagnosisTest, FormatsRates) {
  EXPECT_EQ(FormatBytesPerSecond(1.1e9), "1.1 GB/s");
  EXPECT_EQ(FormatBytesPerSecond(35.2e6), "35.2 MB/s");
  EXPECT_EQ(FormatBytesPerSecond(800), "800 B/s");
}

DaemonStats Up(const std::string& endpoint, int latency_ms, uint64_t served) {
  DaemonStats d;
  d.endpoint = endpoint;
  d.state = "up";
  d.latency = absl::Milliseconds(latency_ms);
  d.served = served;
  return d;
}

TEST(DiagnosisTest, SeveralDaemonsNameTheSlowOne) {
  LoaderStats s = Interval(10, 0.1);
  s.daemons = {Up("a:1", 100, 40), Up("b:2", 320, 9), Up("c:3", 120, 35)};
  s.daemons.push_back(Up("d:4", 0, 0));
  s.daemons.back().state = "down";
  s.rerequested = 3;
  s.hedged = 2;
  const Diagnosis d = Diagnose(s, nullptr, nullptr);
  EXPECT_EQ(d.verdict, Verdict::kComputeBound);
  EXPECT_EQ(d.slow_daemon, "b:2");
  EXPECT_DOUBLE_EQ(d.slow_daemon_latency_ratio, 3.2);
  EXPECT_THAT(d.line, HasSubstr("daemons: 3 of 4 up, b:2 slow (batch latency "
                                "3.2x the fastest's, served 9), 3 batches "
                                "re-requested, 2 hedged"));
}

TEST(DiagnosisTest, EvenDaemonsNameNone) {
  LoaderStats s = Interval(10, 5);
  s.daemons = {Up("a:1", 100, 40), Up("b:2", 140, 30)};
  const Diagnosis d = Diagnose(s, nullptr, nullptr);
  EXPECT_TRUE(d.slow_daemon.empty());
  EXPECT_THAT(d.line, HasSubstr("daemons: 2 of 2 up, 0 batches re-requested"));
  // One daemon: no per-daemon view.
  s.daemons.resize(1);
  EXPECT_THAT(Diagnose(s, nullptr, nullptr).line,
              ::testing::Not(HasSubstr("daemons:")));
}

// A per-sample shuffle through a cache of two of eight shards.
void AddThrashingCache(batchd::v1::ServerStatus* status) {
  status->mutable_object_store()->set_requests(4000);
  batchd::v1::ShardCacheStatus* cache = status->mutable_shard_cache();
  cache->set_disk_limit_bytes(70'000'000);
  cache->set_hits(290);
  cache->set_misses(1'482);
  cache->set_whole_choices(1'482);
  cache->set_downloaded_bytes(45'600'000'000);
  cache->set_served_bytes(235'000'000);
  cache->set_forecast_shard_bytes(235'000'000);
}

TEST(DiagnosisTest, SaysWhenTheShardCacheIsTooSmallForThePlans) {
  const char* kTooSmall =
      "shard cache too small for the plans: they read 235 MB of shards "
      "within the forecast, the cache holds 70 MB; --cache-bytes 235000000 "
      "would fetch each shard once (now 194.04x the bytes served are "
      "fetched)";
  // Storage-bound: the advice.
  auto before = Daemon(2, 0, 0);
  auto after = Daemon(2, 2, 20);
  after.mutable_stage_seconds()->set_read(30);
  after.mutable_stage_seconds()->set_decode(8);
  after.mutable_stage_seconds()->set_transform(2);
  AddThrashingCache(&after);
  Diagnosis d = Diagnose(Interval(10, 9), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kStorageBound);
  EXPECT_THAT(d.line, HasSubstr(std::string("being read → ") + kTooSmall +
                                ", or the shard-aware shuffle"));
  // Compute-bound: a note, the verdict unchanged.
  d = Diagnose(Interval(10, 0.04), &before, &after);
  EXPECT_EQ(d.verdict, Verdict::kComputeBound);
  EXPECT_THAT(d.line, HasSubstr(std::string("input keeps up; ") + kTooSmall));
  // A cache that holds the plans' shards: nothing said.
  after.mutable_shard_cache()->set_disk_limit_bytes(300'000'000);
  after.mutable_shard_cache()->set_served_bytes(300'000'000);
  d = Diagnose(Interval(10, 0.04), &before, &after);
  EXPECT_THAT(d.line, Not(HasSubstr("shard cache")));
}

}  // namespace
}  // namespace batchd::client
