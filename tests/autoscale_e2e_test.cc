// End-to-end: --workers auto against real consumers on this machine. A fast
// consumer grows the pool to --max-workers; a consumer with --step_ms 400
// (batchd-client, its own process) brings it back to --min-workers; the
// trainers' reports reach GetStatus and /metrics; bad reports are refused
// in-band and move nothing.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Batch;
using batchd::client::Loader;
using batchd::client::LoaderOptions;
using ::testing::HasSubstr;

// Polls the daemon's status until `done` holds or `bound` passes; returns
// how long it took, or nullopt with the last status in `last`.
template <typename Predicate>
std::optional<absl::Duration> WaitFor(const std::string& endpoint,
                                      absl::Duration bound, Predicate done,
                                      v1::ServerStatus* last) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < bound) {
    absl::StatusOr<v1::ServerStatus> status = GetServerStatus(endpoint);
    if (status.ok()) {
      *last = *status;
      if (done(*status)) return absl::Now() - start;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return std::nullopt;
}

class AutoscaleTest
    : public DatasetSuite</*images=*/160, /*classes=*/4,
                          /*seed=*/12> {};

TEST_F(AutoscaleTest, FastConsumerGrowsThePoolAndASlowOneShrinksIt) {
  const std::string dir = MakeTempDir("autoscale");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "auto",
                            "--min-workers", "1", "--max-workers", "2",
                            "--metrics-port", "0", "--metrics-port-file",
                            dir + "/metrics-port"}));
  v1::ServerStatus status;
  ASSERT_OK_AND_ASSIGN(status, GetServerStatus(daemon->endpoint()));
  EXPECT_EQ(status.workers(), 1u);  // auto starts at --min-workers
  EXPECT_TRUE(status.autoscale().enabled());
  EXPECT_EQ(status.autoscale().min_workers(), 1u);
  EXPECT_EQ(status.autoscale().max_workers(), 2u);
  EXPECT_THAT(daemon->Log(), HasSubstr("1 workers (auto, 1..2)"));

  // A consumer that never computes: always waiting on one worker.
  LoaderOptions options;
  options.endpoint = daemon->endpoint();
  options.plan = TrainPlan("d", 16, 64, 3);
  options.plan.set_job("fast");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> fast,
                           Loader::Create(std::move(options)));
  std::atomic<bool> stop{false};
  std::atomic<int> fast_batches{0};
  std::thread fast_thread([&] {
    for (uint64_t epoch = 0; !stop.load(); ++epoch) {
      if (!fast->StartEpoch(epoch).ok()) return;
      for (;;) {
        absl::StatusOr<Batch> batch = fast->Next();
        if (!batch.ok()) break;
        ++fast_batches;
      }
    }
  });

  // Reports every 1 s, summed over 3 s; 2 s input-bound before a growth:
  // about 3-4 s here. 30 s leaves room for a machine loaded by other tests.
  std::optional<absl::Duration> grown = WaitFor(
      daemon->endpoint(), absl::Seconds(30),
      [](const v1::ServerStatus& s) { return s.workers() == 2; }, &status);
  ASSERT_TRUE(grown.has_value()) << status.ShortDebugString() << "\n"
                                 << daemon->Log();
  std::printf("grew to 2 workers %s after the fast consumer started\n",
              absl::FormatDuration(*grown).c_str());
  EXPECT_GE(status.autoscale().grows(), 1u);
  EXPECT_THAT(status.autoscale().last_change(), HasSubstr("grow 1 -> 2"));
  EXPECT_THAT(status.autoscale().last_change(), HasSubstr("job \"fast\""));
  EXPECT_THAT(daemon->Log(), HasSubstr("batchd: autoscale: grow 1 -> 2: job "
                                       "\"fast\" waits"));
  const v1::JobStatus* job = FindJob(status, "fast");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->trainer().reporting_streams(), 1u);
  EXPECT_GT(job->trainer().wait_ratio(), 0.05);
  EXPECT_GT(job->trainer().demand_images_per_second(), 0);
  EXPECT_GT(status.capacity_demand_ratio(), 0);
  EXPECT_GT(fast->stats().reports_sent, 0u);
  EXPECT_EQ(fast->stats().reports_rejected, 0u);

  // The same figures on /metrics.
  const std::string port = ReadPortFile(dir + "/metrics-port");
  ASSERT_FALSE(port.empty());
  ASSERT_OK_AND_ASSIGN(
      Page page,
      ScrapeWithPrometheusParser("http://127.0.0.1:" + port + "/metrics"));
  EXPECT_GT(page["batchd_job_trainer_wait_ratio{batchd_job=\"fast\"}"], 0);
  EXPECT_GT(
      page["batchd_job_trainer_demand_images_per_second{batchd_job=\"fast\"}"],
      0);
  EXPECT_EQ(page["batchd_job_trainer_streams{batchd_job=\"fast\"}"], 1);
  EXPECT_GE(page["batchd_autoscale_changes_total{kind=\"grow\"}"], 1);
  EXPECT_EQ(page["batchd_autoscale_enabled{}"], 1);
  EXPECT_EQ(page["batchd_autoscale_max_workers{}"], 2);
  EXPECT_GT(page["batchd_capacity_demand_ratio{}"], 0);

  // A slow trainer (400 ms a step, batchd-client in its own process) takes
  // over from the fast one: 2 images a step is ~5 images/s, a few percent
  // of one worker.
  CommandResult slow;
  std::thread slow_thread([&] {
    slow = RunCommand({BuiltBinary("client/batchd-client"), "--endpoint",
                       daemon->endpoint(), "--dataset", "d", "--job", "slow",
                       "--batch_size", "2", "--size", "64", "--epochs", "1",
                       "--step_ms", "400"});
  });
  ASSERT_TRUE(WaitFor(daemon->endpoint(), absl::Seconds(20),
                      [](const v1::ServerStatus& s) {
                        const v1::JobStatus* j = FindJob(s, "slow");
                        return j != nullptr && j->trainer().reporting_streams() > 0;
                      },
                      &status)
                  .has_value())
      << status.ShortDebugString();
  stop = true;
  fast->Cancel();
  fast_thread.join();
  fast.reset();
  EXPECT_GT(fast_batches.load(), 0);

  // The fast job's reports stop; the slow one waits almost never and the
  // workers idle: 8 s idle, after the window of old reports (3 s) and any
  // cooldown (4 s), is ~10-15 s. Its 80 steps take 32 s, so it is still
  // reporting when the pool shrinks.
  std::optional<absl::Duration> shrunk = WaitFor(
      daemon->endpoint(), absl::Seconds(25),
      [](const v1::ServerStatus& s) { return s.workers() == 1; }, &status);
  ASSERT_TRUE(shrunk.has_value()) << status.ShortDebugString() << "\n"
                                  << daemon->Log();
  std::printf("shrank to 1 worker %s after the fast consumer stopped\n",
              absl::FormatDuration(*shrunk).c_str());
  EXPECT_GE(status.autoscale().shrinks(), 1u);
  EXPECT_THAT(status.autoscale().last_change(), HasSubstr("shrink 2 -> 1"));
  job = FindJob(status, "slow");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->streams(), 1u);
  EXPECT_EQ(job->trainer().reporting_streams(), 1u);
  EXPECT_LT(job->trainer().wait_ratio(), 0.05);
  slow_thread.join();
  EXPECT_EQ(slow.exit_code, 0) << slow.output;
  EXPECT_THAT(daemon->Log(), HasSubstr("batchd: autoscale: shrink 2 -> 1"));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

using RawStream =
    grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;

v1::StreamRequest Report(double wait, double compute, uint64_t batches) {
  v1::StreamRequest request;
  v1::TrainerReport* report = request.mutable_report();
  report->set_wait_seconds(wait);
  report->set_compute_seconds(compute);
  report->set_batches(batches);
  return request;
}

TEST_F(AutoscaleTest, BadReportsAreRefusedInBandAndMoveNothing) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "auto",
                            "--max-workers", "2"}));
  auto channel = grpc::CreateChannel(daemon->endpoint(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::DataService::NewStub(channel);
  {
    // A report before the plan ends the stream, like a request would.
    grpc::ClientContext context;
    std::unique_ptr<RawStream> stream = stub->StreamBatches(&context);
    ASSERT_TRUE(stream->Write(Report(0, 0, 0)));
    stream->WritesDone();
    v1::StreamResponse response;
    while (stream->Read(&response)) {
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("a report came before the plan"));
  }

  grpc::ClientContext context;
  std::unique_ptr<RawStream> stream = stub->StreamBatches(&context);
  v1::StreamRequest open;
  *open.mutable_open()->mutable_plan() = EvalPlan("d", 8, 32, 1);
  open.mutable_open()->mutable_plan()->set_job("liar");
  ASSERT_TRUE(stream->Write(open));
  v1::StreamResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_opened());

  struct Bad {
    v1::StreamRequest report;
    std::string why;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Bad> bad = {
      {Report(-1, 0.5, 0), "must be finite and >= 0"},
      {Report(nan, 0.5, 0), "must be finite and >= 0"},
      {Report(0, std::numeric_limits<double>::infinity(), 0),
       "must be finite and >= 0"},
      {Report(0, 1e9, 0), "account for 1e+09 s"},
      {Report(0, 0.1, 5), "5 batches consumed, but 0 were sent"},
  };
  for (const Bad& b : bad) {
    ASSERT_TRUE(stream->Write(b.report));
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_TRUE(response.has_report_rejected()) << response.ShortDebugString();
    EXPECT_THAT(response.report_rejected().message(), HasSubstr(b.why));
    EXPECT_THAT(response.report_rejected().message(),
                HasSubstr("the report is ignored"));
  }
  // None of them counted.
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                           GetServerStatus(daemon->endpoint()));
  const v1::JobStatus* job = FindJob(status, "liar");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->trainer().reporting_streams(), 0u);
  EXPECT_EQ(status.workers(), 1u);
  EXPECT_EQ(status.autoscale().grows(), 0u);

  // The stream goes on: a batch arrives whole, and a true report counts.
  v1::StreamRequest request;
  request.mutable_request()->set_epoch(0);
  request.mutable_request()->add_batch_indices(0);
  ASSERT_TRUE(stream->Write(request));
  uint64_t bytes = 0, total = 0;
  do {
    ASSERT_TRUE(stream->Read(&response));
    if (response.has_header()) total = response.header().total_bytes();
    if (response.has_chunk()) bytes += response.chunk().data().size();
  } while (total == 0 || bytes < total);
  ASSERT_TRUE(stream->Write(Report(0.1, 0.3, 1)));
  v1::ServerStatus after;
  ASSERT_TRUE(WaitFor(daemon->endpoint(), absl::Seconds(10),
                      [](const v1::ServerStatus& s) {
                        const v1::JobStatus* j = FindJob(s, "liar");
                        return j != nullptr &&
                               j->trainer().reporting_streams() == 1;
                      },
                      &after)
                  .has_value())
      << after.ShortDebugString();
  EXPECT_DOUBLE_EQ(FindJob(after, "liar")->trainer().wait_ratio(), 0.25);
  stream->WritesDone();
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(AutoscaleTest, BadWorkerFlagsAreClearErrors) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--workers", "many"}, "--workers is \"many\"; give a number"},
      {{"--workers", "auto", "--min-workers", "3", "--max-workers", "2"},
       "need 1 <= --min-workers <= --max-workers"},
      {{"--workers", "auto", "--min-workers", "0"}, "--min-workers is 0"},
      {{"--max-workers", "-1"}, "--max-workers is -1"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BuiltBinary("server/batchd"), "--dataset",
                                     "d=" + *dataset_, "--port", "0"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const CommandResult run = RunCommand(argv);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace batchd::testing
