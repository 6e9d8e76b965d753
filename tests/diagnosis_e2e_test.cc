// End-to-end: the one-line diagnosis on constructed situations against real
// daemons. Each situation is built with a wide margin around the thresholds
// in client/diagnosis.h, so the verdict does not depend on how loaded the
// machine is; the verdict is asserted, never a timing.
//   - a consumer much slower than the daemon       -> compute-bound
//   - 1 worker and a consumer that never waits      -> input-bound, workers
//                                                      saturated
//   - a receive link paced far below the daemon     -> network-bound
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/diagnosis.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Batch;
using batchd::client::Diagnosis;
using batchd::client::Loader;
using batchd::client::LoaderOptions;
using batchd::client::Verdict;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kImages = 160;

class DiagnosisE2eTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/4,
                          /*seed=*/9> {
 protected:
  // Streams one epoch of `plan`, sleeping `step` after each batch, and
  // returns the line reported at the epoch's end.
  static absl::StatusOr<std::string> RunEpoch(const std::string& endpoint,
                                              const v1::Plan& plan,
                                              absl::Duration step,
                                              uint64_t max_bytes_per_second) {
    std::vector<std::string> reported;
    LoaderOptions options;
    options.endpoint = endpoint;
    options.plan = plan;
    options.prefetch = 4;
    options.max_receive_bytes_per_second = max_bytes_per_second;
    // The paced link paces chunks, which only the bytes path has.
    options.shared_memory = max_bytes_per_second == 0;
    options.report = [&reported](const std::string& line) {
      reported.push_back(line);
    };
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(std::move(options));
    if (!loader.ok()) return loader.status();
    if (absl::Status s = (*loader)->StartEpoch(0); !s.ok()) return s;
    for (;;) {
      absl::StatusOr<Batch> batch = (*loader)->Next();
      if (absl::IsOutOfRange(batch.status())) break;
      if (!batch.ok()) return batch.status();
      batch->Release();
      absl::SleepFor(step);
    }
    if (reported.size() != 1) {
      return absl::InternalError("expected one report per epoch");
    }
    if (reported[0] != (*loader)->epoch_diagnosis()) {
      return absl::InternalError("epoch_diagnosis() differs from the report");
    }
    std::printf("reported: %s\n", reported[0].c_str());
    return reported[0];
  }
};

TEST_F(DiagnosisE2eTest, SlowConsumerIsComputeBound) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2"}));
  // 20 batches of 8 small images; each step sleeps 120 ms, many times what
  // the daemon needs for 8 images, so after the first batch the window
  // stays full.
  ASSERT_OK_AND_ASSIGN(
      std::string line,
      RunEpoch(daemon->endpoint(), EvalPlan("d", 8, 32, 1),
               absl::Milliseconds(120), 0));
  EXPECT_THAT(line, StartsWith("epoch 0: compute-bound: waited "));
}

TEST_F(DiagnosisE2eTest, OneWorkerAndAFastConsumerIsInputBoundOnWorkers) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "1"}));
  // 160 train crops at 224: the single worker decodes all the time (the
  // epoch is long against the idle tail after its last sample) while the
  // consumer only waits.
  ASSERT_OK_AND_ASSIGN(
      std::string line, RunEpoch(daemon->endpoint(), TrainPlan("d", 8, 224, 1),
                                 absl::ZeroDuration(), 0));
  EXPECT_THAT(line, StartsWith("epoch 0: input-bound: waited "));
  EXPECT_THAT(line, HasSubstr("(1 worker) → add workers or a daemon"));
}

TEST_F(DiagnosisE2eTest, ThrottledLinkIsNetworkBound) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2"}));
  // 10 batches of 16 x 32x32x3 = 49 KB at 200 KB/s: ~2.5 s on the link
  // for work the daemon's 2 workers do in a small fraction of that.
  ASSERT_OK_AND_ASSIGN(
      std::string line, RunEpoch(daemon->endpoint(), EvalPlan("d", 16, 32, 1),
                                 absl::ZeroDuration(), 200'000));
  EXPECT_THAT(line, StartsWith("epoch 0: network-bound: waited "));
  EXPECT_THAT(line, HasSubstr("stream at "));
}

TEST_F(DiagnosisE2eTest, OnDemandDiagnosisUsesTheDaemonStatus) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2"}));
  LoaderOptions options;
  options.endpoint = daemon->endpoint();
  options.plan = EvalPlan("d", 4, 32, 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                           Loader::Create(std::move(options)));
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  EXPECT_EQ(loader->Diagnose().verdict, Verdict::kUnknown);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader->Next().ok());
  const Diagnosis d = loader->Diagnose();
  EXPECT_NE(d.verdict, Verdict::kUnknown);
  EXPECT_EQ(d.daemon_workers, 2u);
  EXPECT_GE(d.daemon_busy_fraction, 0);
  const Loader::Stats stats = loader->stats();
  EXPECT_EQ(stats.batches, 3u);
  EXPECT_EQ(stats.images, 12u);
  EXPECT_EQ(stats.bytes, 3u * 4 * 32 * 32 * 3);
  EXPECT_GE(stats.received_bytes, stats.bytes);
  EXPECT_GT(stats.waited, absl::ZeroDuration());
  EXPECT_EQ(loader->epoch_diagnosis(), "");
}

}  // namespace
}  // namespace batchd::testing
