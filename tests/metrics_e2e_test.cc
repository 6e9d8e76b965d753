// End-to-end: the daemon's /metrics page, parsed by the real Prometheus
// parser (python3-prometheus-client, via testing/metrics_page.py), carries the
// known numbers of a run: batches, images, bytes, substitutions by reason,
// rejected requests by code, stage sample counts.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/loader.h"
#include "gmock/gmock.h"
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

constexpr int kImages = 40;
constexpr uint32_t kBatchSize = 8;
constexpr uint32_t kSize = 32;
constexpr uint64_t kEpochs = 2;

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class MetricsE2eTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/4,
                          /*seed=*/5> {
 protected:
  static void SetUpTestSuite() {
    DatasetSuite::SetUpTestSuite();
    ASSERT_NE(dataset_, nullptr);
    // Bad samples whose verdict does not depend on the crop.
    const std::vector<std::string> order = ImageFolderOrder(*dataset_);
    WriteFile(order[3], "");
    WriteFile(order[17], "");
    WriteFile(order[30], "not a JPEG at all\n");
  }
};

TEST_F(MetricsE2eTest, PageParsesAndMatchesTheRun) {
  const std::string dir = MakeTempDir("metrics-port");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2",
                            "--metrics-port", "0", "--metrics-port-file",
                            dir + "/metrics-port"}));
  const std::string port = ReadPortFile(dir + "/metrics-port");
  ASSERT_FALSE(port.empty()) << daemon->Log();
  const std::string url = "http://127.0.0.1:" + port + "/metrics";
  EXPECT_THAT(daemon->Log(), HasSubstr(":" + port + "/metrics"));

  // A refused plan: one rejection with INVALID_ARGUMENT.
  LoaderOptions refused;
  refused.endpoint = daemon->endpoint();
  refused.plan = EvalPlan("no-such-dataset", kBatchSize, kSize, 1);
  EXPECT_EQ(Loader::Create(std::move(refused)).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::Plan plan = EvalPlan("d", kBatchSize, kSize, 1);
  plan.set_job("metrics-job");
  uint64_t batches = 0, images = 0, bytes = 0, substitutions = 0;
  {
    LoaderOptions options;
    options.endpoint = daemon->endpoint();
    options.plan = plan;
    // The bytes path: its batch buffers are what the idle pool counts.
    options.shared_memory = false;
    // The page must count exactly the run's batches: no read-ahead past
    // the last epoch.
    options.last_epoch = kEpochs - 1;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                             Loader::Create(std::move(options)));
    for (uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
      ASSERT_TRUE(loader->StartEpoch(epoch).ok());
      for (;;) {
        absl::StatusOr<Batch> batch = loader->Next();
        if (absl::IsOutOfRange(batch.status())) break;
        ASSERT_TRUE(batch.ok()) << batch.status();
        ++batches;
        images += batch->sample_indices.size();
        bytes += batch->size();
        substitutions += batch->substitutions.size();
      }
    }
  }
  ASSERT_EQ(batches, kEpochs * kImages / kBatchSize);
  ASSERT_EQ(substitutions, kEpochs * 3);

  // The daemon counts a batch once its last chunk is handed to gRPC, which
  // may be just after the client has it: wait for the count to settle.
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<v1::ServerStatus> status =
        GetServerStatus(daemon->endpoint());
    ASSERT_TRUE(status.ok()) << status.status();
    const v1::JobStatus* job = FindJob(*status, "metrics-job");
    if (job != nullptr && job->batches_sent() == batches &&
        job->streams() == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  ASSERT_OK_AND_ASSIGN(Page page, ScrapeWithPrometheusParser(url));
  const std::string job = "{batchd_job=\"metrics-job\"}";
  EXPECT_EQ(page["batchd_job_batches_total" + job], batches);
  EXPECT_EQ(page["batchd_job_images_total" + job], images);
  EXPECT_EQ(page["batchd_job_bytes_total" + job], bytes);
  EXPECT_EQ(page["batchd_job_substitutions_total" + job], substitutions);
  EXPECT_EQ(page["batchd_job_streams" + job], 0);
  EXPECT_EQ(page["batchd_substitutions_total{reason=\"empty_file\"}"],
            kEpochs * 2);
  EXPECT_EQ(page["batchd_substitutions_total{reason=\"not_jpeg\"}"], kEpochs);
  EXPECT_EQ(page["batchd_rejected_requests_total{code=\"INVALID_ARGUMENT\"}"],
            1);
  EXPECT_EQ(page["batchd_samples_decoded_total{}"], images);
  // One observation per batch for the per-batch stages.
  EXPECT_EQ(page["batchd_stage_seconds_count{stage=\"assemble\"}"], batches);
  EXPECT_EQ(page["batchd_stage_seconds_count{stage=\"send\"}"], batches);
  // Per sample: at least every sample read once; every good sample decoded.
  EXPECT_GE(page["batchd_stage_seconds_count{stage=\"read\"}"], images);
  EXPECT_GE(page["batchd_stage_seconds_count{stage=\"decode\"}"],
            images - substitutions);
  EXPECT_GT(page["batchd_stage_seconds_sum{stage=\"decode\"}"], 0);
  EXPECT_EQ(page["batchd_batches_outstanding{}"], 0);
  EXPECT_EQ(page["batchd_workers{}"], 2);
  EXPECT_EQ(page.count("batchd_worker_busy_ratio{}"), 1u);
  EXPECT_GT(page["batchd_worker_busy_seconds_total{}"], 0);
  EXPECT_EQ(page["batchd_queue_depth{queue=\"decode\"}"], 0);
  EXPECT_EQ(page["batchd_queue_depth{queue=\"read\"}"], 0);
  EXPECT_GT(page["batchd_process_resident_memory_bytes{}"], 1 << 20);
  EXPECT_GT(page["batchd_buffer_limit_bytes{}"], 0);
  // Batches were sent and their buffers released: some stay for reuse, or
  // are kept whole for later jobs of the same plan.
  EXPECT_GT(page["batchd_buffer_idle_bytes{}"] +
                page["batchd_shared_batch_retained_bytes{}"],
            0);
  EXPECT_EQ(daemon->Stop(), 0);
}

TEST_F(MetricsE2eTest, BadMetricsPortsAreClearErrors) {
  CommandResult bad = RunCommand({BuiltBinary("server/batchd"), "--dataset",
                                  "d=" + *dataset_, "--port", "0",
                                  "--metrics-port", "70000"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("--metrics-port is 70000"));

  // A metrics port already in use: a clear error, not a silent share.
  const std::string dir = MakeTempDir("metrics-busy");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> first,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--metrics-port",
                            "0", "--metrics-port-file", dir + "/port"}));
  const std::string port = ReadPortFile(dir + "/port");
  ASSERT_FALSE(port.empty());
  CommandResult busy = RunCommand({BuiltBinary("server/batchd"), "--dataset",
                                   "d=" + *dataset_, "--port", "0",
                                   "--metrics-port", port});
  EXPECT_EQ(busy.exit_code, 2);
  EXPECT_THAT(busy.output, HasSubstr("cannot listen for metrics"));
}

// GET `url` with `authorization` (none when empty): "STATUS\nBODY".
std::string HttpGet(const std::string& url, const std::string& authorization) {
  static constexpr char kGet[] =
      "import sys, urllib.request as u, urllib.error as e\n"
      "r = u.Request(sys.argv[1])\n"
      "if sys.argv[2]: r.add_header('Authorization', sys.argv[2])\n"
      "try:\n"
      "    a = u.urlopen(r, timeout=10); print(a.status); "
      "print(a.read().decode())\n"
      "except e.HTTPError as x:\n"
      "    print(x.code)\n";
  return RunCommand({"/usr/bin/python3", "-c", kGet, url, authorization})
      .output;
}

TEST_F(MetricsE2eTest, TheLivePageAndItsDataAreServed) {
  const std::string dir = MakeTempDir("metrics-page");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--metrics-port",
                            "0", "--metrics-port-file", dir + "/port"}));
  const std::string base = "http://127.0.0.1:" + ReadPortFile(dir + "/port");
  EXPECT_THAT(HttpGet(base + "/", ""),
              HasSubstr("<script src=\"static/live_page.js\">"));
  EXPECT_THAT(HttpGet(base + "/static/live_page.js", ""),
              HasSubstr("api/timeline"));
  // The sampler adds a point a second; the first comes at start.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::string timeline = HttpGet(base + "/api/timeline", "");
  EXPECT_THAT(timeline, HasSubstr("200\n{\"since\":null,\"next\":"));
  EXPECT_THAT(timeline, HasSubstr("\"interval_seconds\":1,\"capacity\":900,"
                                  "\"max_jobs\":32,"));
  // The points after a time only; a since that is not a time: 400.
  EXPECT_THAT(HttpGet(base + "/api/timeline?since=1", ""),
              HasSubstr("200\n{\"since\":1.000,\"next\":"));
  EXPECT_EQ(HttpGet(base + "/api/timeline?since=soon", ""), "400\n");
  EXPECT_THAT(timeline,
              HasSubstr("\"kind\":\"idle\",\"line\":\"idle: no streams"));
}

TEST_F(MetricsE2eTest, MetricsAuthGuardsEveryRoute) {
  const std::string dir = MakeTempDir("metrics-auth");
  const std::string token = "metrics-e2e-token-0123456789";
  WriteFile(dir + "/tokens", token + "\n");
  CommandResult no_file = RunCommand({BuiltBinary("server/batchd"),
                                      "--dataset", "d=" + *dataset_,
                                      "--port", "0", "--metrics-port", "0",
                                      "--metrics-auth"});
  EXPECT_EQ(no_file.exit_code, 2);
  EXPECT_THAT(no_file.output, HasSubstr("--metrics-auth checks the tokens"));

  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--metrics-port",
                            "0", "--metrics-port-file", dir + "/port",
                            "--auth-token-file", dir + "/tokens",
                            "--metrics-auth"}));
  const std::string base = "http://127.0.0.1:" + ReadPortFile(dir + "/port");
  for (const std::string path : {"/", "/api/timeline", "/metrics"}) {
    EXPECT_EQ(HttpGet(base + path, ""), "401\n") << path;
    EXPECT_EQ(HttpGet(base + path, "Bearer not-the-token-0123456789"),
              "401\n")
        << path;
    EXPECT_THAT(HttpGet(base + path, "Bearer " + token), HasSubstr("200\n"))
        << path;
  }
}

}  // namespace
}  // namespace batchd::testing
