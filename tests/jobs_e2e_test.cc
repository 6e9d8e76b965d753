// End-to-end: sharing one daemon. Two jobs streaming different plans at the
// same time each get exactly their solo bytes and are accounted separately;
// changing the worker count mid-stream changes nothing in the bytes.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;
using ::testing::ElementsAre;

constexpr int kImages = 60;

class JobsTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/6,
                          /*seed=*/33> {};

TEST_F(JobsTest, ConcurrentJobsGetTheirSoloBytesAndSeparateCounts) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2"}));
  // Different batch sizes, output sizes, transforms and layouts.
  v1::Plan train = TrainPlan("d", 8, 32, 1);
  v1::Plan eval = EvalPlan("d", 5, 48, 2);
  eval.mutable_pipeline()->set_layout(v1::LAYOUT_NCHW);
  constexpr uint64_t kEpochs = 2;

  // Alone, one after the other, under other job names.
  train.set_job("alpha-solo");
  eval.set_job("beta-solo");
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> train_solo,
                           ReadEpochs(daemon->endpoint(), train, 0, kEpochs));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> eval_solo,
                           ReadEpochs(daemon->endpoint(), eval, 0, kEpochs));
  ASSERT_EQ(train_solo.size(), kEpochs * 8);   // ceil(60 / 8)
  ASSERT_EQ(eval_solo.size(), kEpochs * 12);   // 60 / 5
  EXPECT_THAT(train_solo[0].shape, ElementsAre(8, 32, 32, 3));
  EXPECT_THAT(eval_solo[0].shape, ElementsAre(5, 3, 48, 48));

  // Together, starting at the same moment.
  train.set_job("alpha");
  eval.set_job("beta");
  absl::StatusOr<std::vector<BatchRecord>> train_shared, eval_shared;
  absl::Barrier* start = new absl::Barrier(2);
  std::thread t1([&] {
    if (start->Block()) delete start;
    train_shared = ReadEpochs(daemon->endpoint(), train, 0, kEpochs, 0, 2);
  });
  std::thread t2([&] {
    if (start->Block()) delete start;
    eval_shared = ReadEpochs(daemon->endpoint(), eval, 0, kEpochs, 0, 3);
  });
  t1.join();
  t2.join();
  ASSERT_TRUE(train_shared.ok()) << train_shared.status();
  ASSERT_TRUE(eval_shared.ok()) << eval_shared.status();
  EXPECT_EQ(*train_shared, train_solo);
  EXPECT_EQ(*eval_shared, eval_solo);

  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                           GetServerStatus(daemon->endpoint()));
  struct Expected {
    std::string job;
    uint64_t batches;
    uint64_t bytes_per_image;
  };
  for (const Expected& e : {Expected{"alpha", 16, 32 * 32 * 3},
                            Expected{"alpha-solo", 16, 32 * 32 * 3},
                            Expected{"beta", 24, 48 * 48 * 3},
                            Expected{"beta-solo", 24, 48 * 48 * 3}}) {
    const v1::JobStatus* job = FindJob(status, e.job);
    ASSERT_NE(job, nullptr) << e.job << " missing in "
                            << status.ShortDebugString();
    EXPECT_EQ(job->batches_sent(), e.batches) << e.job;
    EXPECT_EQ(job->images_sent(), kEpochs * kImages) << e.job;
    EXPECT_EQ(job->bytes_sent(), kEpochs * kImages * e.bytes_per_image)
        << e.job;
    EXPECT_EQ(job->substitutions(), 0u) << e.job;
  }
  EXPECT_EQ(status.jobs_size(), 4);
  EXPECT_EQ(status.samples_substituted(), 0u);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(JobsTest, ChangingWorkersMidStreamKeepsTheBytes) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "1",
                            "--max-workers", "4"}));
  const v1::Plan plan = TrainPlan("d", 4, 32, 9);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                           ReadEpochs(daemon->endpoint(), plan, 0));
  ASSERT_EQ(reference.size(), 15u);

  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                           GetServerStatus(daemon->endpoint()));
  EXPECT_EQ(status.workers(), 1u);

  std::vector<BatchRecord> got;
  {
    LoaderOptions options;
    options.endpoint = daemon->endpoint();
    options.plan = plan;
    options.prefetch = 4;  // batches are in flight at each change
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                             Loader::Create(std::move(options)));
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> part,
                             ReadFrom(*loader, 5));
    got.insert(got.end(), part.begin(), part.end());

    ASSERT_OK_AND_ASSIGN(v1::SetWorkersResponse grown,
                             SetWorkers(daemon->endpoint(), 3));
    EXPECT_EQ(grown.previous(), 1u);
    EXPECT_EQ(grown.workers(), 3u);
    ASSERT_OK_AND_ASSIGN(status, GetServerStatus(daemon->endpoint()));
    EXPECT_EQ(status.workers(), 3u);
    ASSERT_OK_AND_ASSIGN(part, ReadFrom(*loader, 5));
    got.insert(got.end(), part.begin(), part.end());

    ASSERT_OK_AND_ASSIGN(v1::SetWorkersResponse shrunk,
                             SetWorkers(daemon->endpoint(), 1));
    EXPECT_EQ(shrunk.previous(), 3u);
    EXPECT_EQ(shrunk.workers(), 1u);
    ASSERT_OK_AND_ASSIGN(status, GetServerStatus(daemon->endpoint()));
    EXPECT_EQ(status.workers(), 1u);
    ASSERT_OK_AND_ASSIGN(part, ReadFrom(*loader));
    got.insert(got.end(), part.begin(), part.end());
  }
  EXPECT_EQ(got, reference);

  // Over --max-workers is refused and changes nothing.
  absl::StatusOr<v1::SetWorkersResponse> too_many =
      SetWorkers(daemon->endpoint(), 5);
  EXPECT_TRUE(absl::IsInvalidArgument(too_many.status())) << too_many.status();
  ASSERT_OK_AND_ASSIGN(status, GetServerStatus(daemon->endpoint()));
  EXPECT_EQ(status.workers(), 1u);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

}  // namespace
}  // namespace batchd::testing
