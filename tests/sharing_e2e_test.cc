// Batches shared between jobs with the same plan (server/pipeline/shared_batches.h):
// every job still gets exactly the batches a lone job gets, whatever its
// speed, start time or restarts, and while jobs overlap the daemon builds
// a batch once for all of them.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

constexpr int kImages = 48;
constexpr uint32_t kBatch = 4;
constexpr uint64_t kBatchesPerEpoch = kImages / kBatch;

class SharingTest : public DatasetSuite<kImages, /*classes=*/4, /*seed=*/41> {
 protected:
  static v1::Plan JobPlan(const std::string& job) {
    v1::Plan plan = TrainPlan("d", kBatch, /*size=*/48, /*seed=*/3);
    plan.set_job(job);
    return plan;
  }

  // The batches of epochs 0 and 1 from a daemon that shares nothing.
  std::vector<BatchRecord> LoneJobBatches() {
    auto daemon = DaemonProcess::Start({"--dataset", "d=" + *dataset_,
                                        "--workers", "2",
                                        "--share-batches=false"});
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    absl::StatusOr<std::vector<BatchRecord>> records =
        ReadEpochs((*daemon)->endpoint(), JobPlan("lone"), 0, 2);
    EXPECT_TRUE(records.ok()) << records.status();
    EXPECT_EQ((*daemon)->Stop(), 0);
    return records.ok() ? *records : std::vector<BatchRecord>{};
  }

  static uint64_t Requests(const v1::PlanSharing& plan) {
    return plan.built() + plan.attached() + plan.retained();
  }
};

TEST_F(SharingTest, JobsWithOnePlanGetTheLoneJobsBatchesAndShareBuilds) {
  const std::vector<BatchRecord> lone = LoneJobBatches();
  ASSERT_EQ(lone.size(), 2 * kBatchesPerEpoch);
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2"}));
  const std::string endpoint = daemon->endpoint();

  // Three jobs: a fast one (deep prefetch), a slow one (prefetch 1) started
  // later, and one that stops mid-epoch and comes back from where it was.
  std::vector<BatchRecord> fast, slow, restarted;
  absl::Status fast_status, slow_status, restarted_status;
  std::thread fast_job([&] {
    absl::StatusOr<std::vector<BatchRecord>> r =
        ReadEpochs(endpoint, JobPlan("fast"), 0, 2, 0, /*prefetch=*/8);
    fast_status = r.status();
    if (r.ok()) fast = *r;
  });
  std::thread slow_job([&] {
    absl::SleepFor(absl::Milliseconds(300));
    absl::StatusOr<std::vector<BatchRecord>> r =
        ReadEpochs(endpoint, JobPlan("slow"), 0, 2, 0, /*prefetch=*/1);
    slow_status = r.status();
    if (r.ok()) slow = *r;
  });
  std::thread restarted_job([&] {
    const uint64_t half = kBatchesPerEpoch / 2;
    absl::StatusOr<std::vector<BatchRecord>> first_half =
        ReadEpochs(endpoint, JobPlan("restarted"), 0, 1, 0, 2);
    if (!first_half.ok()) {
      restarted_status = first_half.status();
      return;
    }
    first_half->resize(half);  // as if it died here
    absl::StatusOr<std::vector<BatchRecord>> rest =
        ReadEpochs(endpoint, JobPlan("restarted"), 0, 1, half, 2);
    absl::StatusOr<std::vector<BatchRecord>> next =
        ReadEpochs(endpoint, JobPlan("restarted"), 1, 1, 0, 2);
    restarted_status = rest.ok() ? next.status() : rest.status();
    if (!restarted_status.ok()) return;
    restarted = *first_half;
    restarted.insert(restarted.end(), rest->begin(), rest->end());
    restarted.insert(restarted.end(), next->begin(), next->end());
  });
  fast_job.join();
  slow_job.join();
  restarted_job.join();
  ASSERT_TRUE(fast_status.ok()) << fast_status;
  ASSERT_TRUE(slow_status.ok()) << slow_status;
  ASSERT_TRUE(restarted_status.ok()) << restarted_status;
  EXPECT_EQ(fast, lone);
  EXPECT_EQ(slow, lone);
  EXPECT_EQ(restarted, lone);

  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status, GetServerStatus(endpoint));
  ASSERT_TRUE(status.shared_batches().enabled());
  ASSERT_EQ(status.shared_batches().plans_size(), 1);
  const v1::PlanSharing& plan = status.shared_batches().plans(0);
  // Every job is charged its own batches...
  for (const char* job : {"fast", "slow", "restarted"}) {
    const v1::JobStatus* j = FindJob(status, job);
    ASSERT_NE(j, nullptr) << job;
    EXPECT_GE(j->batches_sent(), 2 * kBatchesPerEpoch) << job;
  }
  // ... while the daemon built fewer batches than it sent: while two or
  // more streams of the plan are open they share builds (a stream alone
  // builds its own, so how many depends on how the jobs overlapped).
  EXPECT_GE(Requests(plan), 3 * 2 * kBatchesPerEpoch);
  EXPECT_GE(plan.built(), 2 * kBatchesPerEpoch);
  EXPECT_LT(plan.built(), Requests(plan));
  EXPECT_GT(plan.attached() + plan.retained(), 0u);
  std::printf("3 jobs, one plan: %llu requests, %llu built, %llu attached, "
              "%llu retained\n",
              static_cast<unsigned long long>(Requests(plan)),
              static_cast<unsigned long long>(plan.built()),
              static_cast<unsigned long long>(plan.attached()),
              static_cast<unsigned long long>(plan.retained()));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// A job far behind the others finds its batches evicted and gets them
// rebuilt, byte for byte; the retention never holds more than its bound.
TEST_F(SharingTest, JobBehindTheRetentionGetsRebuiltBatches) {
  const std::vector<BatchRecord> lone = LoneJobBatches();
  const uint64_t batch_bytes = uint64_t{kBatch} * 48 * 48 * 3;
  const std::string port_file = MakeTempDir("sharing") + "/metrics-port";
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2",
                            "--shared-batch-bytes",
                            std::to_string(3 * batch_bytes), "--metrics-port",
                            "0", "--metrics-port-file", port_file}));
  // A slow job, and a fast one that runs ahead of it by more than the
  // retention.
  const std::string endpoint = daemon->endpoint();
  std::vector<BatchRecord> ahead, behind;
  absl::Status ahead_status, behind_status;
  std::thread behind_job([&] {
    // A trainer that takes 20 ms a step: the fast job overtakes it however
    // the two threads are scheduled.
    behind_status = [&]() -> absl::Status {
      batchd::client::LoaderOptions options;
      options.endpoint = endpoint;
      options.plan = JobPlan("behind");
      options.prefetch = 1;
      options.last_epoch = 1;
      ASSIGN_OR_RETURN(std::unique_ptr<batchd::client::Loader> loader,
                       batchd::client::Loader::Create(std::move(options)));
      for (uint64_t epoch = 0; epoch < 2; ++epoch) {
        RETURN_IF_ERROR(loader->StartEpoch(epoch, 0));
        for (;;) {
          absl::StatusOr<batchd::client::Batch> batch = loader->Next();
          if (absl::IsOutOfRange(batch.status())) break;
          if (!batch.ok()) return batch.status();
          behind.push_back(ToRecord(*batch));
          absl::SleepFor(absl::Milliseconds(20));
        }
      }
      return absl::OkStatus();
    }();
  });
  absl::SleepFor(absl::Milliseconds(100));
  std::thread ahead_job([&] {
    absl::StatusOr<std::vector<BatchRecord>> r =
        ReadEpochs(endpoint, JobPlan("ahead"), 0, 2, 0, /*prefetch=*/8);
    ahead_status = r.status();
    if (r.ok()) ahead = *r;
  });
  ahead_job.join();
  behind_job.join();
  ASSERT_TRUE(ahead_status.ok()) << ahead_status;
  ASSERT_TRUE(behind_status.ok()) << behind_status;
  EXPECT_EQ(ahead, lone);
  EXPECT_EQ(behind, lone);
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                       GetServerStatus(daemon->endpoint()));
  const v1::SharedBatchStatus& shared = status.shared_batches();
  EXPECT_LE(shared.retained_bytes(), 3 * batch_bytes);
  EXPECT_EQ(shared.retention_limit_bytes(), 3 * batch_bytes);
  EXPECT_GT(shared.evictions(), 0u);
  ASSERT_EQ(shared.plans_size(), 1);
  // Some batches were built twice: the slow job's, after eviction.
  EXPECT_GT(shared.plans(0).built(), 2 * kBatchesPerEpoch);

  ASSERT_OK_AND_ASSIGN(
      Page page, ScrapeWithPrometheusParser(absl::StrCat(
                     "http://127.0.0.1:", ReadPortFile(port_file),
                     "/metrics")));
  EXPECT_EQ(page["batchd_shared_batch_retention_limit_bytes{}"],
            static_cast<double>(3 * batch_bytes));
  EXPECT_GT(page["batchd_shared_batch_evictions_total{}"], 0);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// Over the wire (no shared memory) the streams share the encoded buffer
// itself.
TEST_F(SharingTest, BytesStreamsShareToo) {
  const std::vector<BatchRecord> lone = LoneJobBatches();
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2",
                            "--shm=false"}));
  const std::string endpoint = daemon->endpoint();
  std::vector<std::vector<BatchRecord>> got(3);
  std::vector<absl::Status> statuses(3);
  std::vector<std::thread> jobs;
  for (int j = 0; j < 3; ++j) {
    jobs.emplace_back([&, j] {
      absl::StatusOr<std::vector<BatchRecord>> r = ReadEpochs(
          endpoint, JobPlan(absl::StrCat("wire-", j)), 0, 2, 0, 2 + 2 * j);
      statuses[j] = r.status();
      if (r.ok()) got[j] = *r;
    });
  }
  for (std::thread& t : jobs) t.join();
  for (int j = 0; j < 3; ++j) {
    ASSERT_TRUE(statuses[j].ok()) << statuses[j];
    EXPECT_EQ(got[j], lone) << "job " << j;
  }
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status, GetServerStatus(endpoint));
  ASSERT_EQ(status.shared_batches().plans_size(), 1);
  const v1::PlanSharing& plan = status.shared_batches().plans(0);
  EXPECT_EQ(Requests(plan), 3 * 2 * kBatchesPerEpoch);
  EXPECT_LT(plan.built(), Requests(plan));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// Two jobs of one plan over two sharing daemons, one of which is killed
// (SIGKILL) mid-epoch: each job re-requests what the dead daemon owed it
// from the other, and both still get the lone job's batches exactly once.
TEST_F(SharingTest, TwoJobsOfOnePlanSurviveAKillNine) {
  const std::vector<BatchRecord> lone = LoneJobBatches();
  const std::vector<BatchRecord> epoch0(lone.begin(),
                                        lone.begin() + kBatchesPerEpoch);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<DaemonProcess> daemon,
        DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "1"}));
    daemons.push_back(std::move(daemon));
  }
  std::vector<std::unique_ptr<client::Loader>> loaders;
  for (const char* job : {"kill-a", "kill-b"}) {
    client::LoaderOptions options;
    options.endpoint = daemons[0]->endpoint() + "," + daemons[1]->endpoint();
    options.plan = JobPlan(job);
    options.prefetch = 4;
    options.last_epoch = 0;
    options.reconnect_backoff_max = absl::Milliseconds(500);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::Loader> loader,
                         batchd::client::Loader::Create(std::move(options)));
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    loaders.push_back(std::move(loader));
  }
  std::vector<std::vector<BatchRecord>> got(2);
  for (int j = 0; j < 2; ++j) {
    ASSERT_OK_AND_ASSIGN(got[j], ReadFrom(*loaders[j], /*max_batches=*/4));
  }
  daemons[0]->Kill();  // both jobs have batches outstanding on it
  for (int j = 0; j < 2; ++j) {
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> rest,
                         ReadFrom(*loaders[j]));
    got[j].insert(got[j].end(), rest.begin(), rest.end());
    EXPECT_EQ(got[j], epoch0) << "job " << j;
    EXPECT_GT(loaders[j]->stats().daemons[1].served, 0u) << "job " << j;
    std::printf("job %d: %llu batches re-requested after the kill\n", j,
                static_cast<unsigned long long>(loaders[j]->stats().rerequested));
  }
}

}  // namespace
}  // namespace batchd::testing
