// The per-job limits through real daemon processes on localhost: a job
// over --max-streams-per-job or over its --max-job-buffer-share of the
// batch buffers is refused with RESOURCE_EXHAUSTED, and other jobs still
// stream.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/channel_security.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "testing/status_matchers.h"
#include "tests/security_suite.h"

namespace batchd::testing {
namespace {

using ::batchd::client::NewBatchdChannel;
using ::testing::HasSubstr;

// The suite's daemons and plan, without certificates or tokens.
using SecurityTest = SecuritySuite;

// Streams of `job` that open and then never read: they hold their
// reservation until cancelled.
class GreedyStreams {
 public:
  GreedyStreams(const std::string& endpoint, const std::string& job, int n)
      : stub_(v1::DataService::NewStub(NewBatchdChannel(endpoint))) {
    for (int i = 0; i < n; ++i) {
      auto context = std::make_unique<grpc::ClientContext>();
      auto stream = stub_->StreamBatches(context.get());
      v1::StreamRequest open;
      *open.mutable_open()->mutable_plan() = TrainPlan("d", kBatch, kSize, 5);
      open.mutable_open()->mutable_plan()->set_job(job);
      open.mutable_open()->set_window(4);
      stream->Write(open);
      v1::StreamResponse response;
      if (stream->Read(&response) && response.has_opened()) {
        granted_ += response.opened().window();
        open_.push_back({std::move(context), std::move(stream)});
      } else {
        refusals_.push_back(stream->Finish());
      }
    }
  }
  ~GreedyStreams() {
    for (auto& [context, stream] : open_) context->TryCancel();
    for (auto& [context, stream] : open_) stream->Finish().IgnoreError();
  }
  int opened() const { return static_cast<int>(open_.size()); }
  uint32_t granted() const { return granted_; }
  const std::vector<grpc::Status>& refusals() const { return refusals_; }

 private:
  using Stream =
      grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;
  std::unique_ptr<v1::DataService::Stub> stub_;
  std::vector<std::pair<std::unique_ptr<grpc::ClientContext>,
                        std::unique_ptr<Stream>>>
      open_;
  uint32_t granted_ = 0;
  std::vector<grpc::Status> refusals_;
};

TEST_F(SecurityTest, AJobOverItsStreamLimitIsRefusedAndOthersStream) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon({"--max-streams-per-job", "2"}));
  GreedyStreams greedy(daemon->endpoint(), "greedy", 3);
  EXPECT_EQ(greedy.opened(), 2);
  ASSERT_EQ(greedy.refusals().size(), 1u);
  EXPECT_EQ(greedy.refusals()[0].error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(greedy.refusals()[0].error_message(),
              HasSubstr("job \"greedy\" already has 2 streams open"));
  EXPECT_THAT(greedy.refusals()[0].error_message(),
              HasSubstr("--max-streams-per-job"));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> records,
      ReadEpoch(Options(daemon->endpoint(), {}, "well-behaved")));
  EXPECT_EQ(records.size(), 3u);
}

// The measured failure, scaled down: four jobs of 16 streams that never
// consume, against a budget of 64 batches. Each job may hold 20 % of the
// buffers, so a fifth job still streams; with the share off it is refused.
TEST_F(SecurityTest, AJobOverItsBufferShareIsRefusedAndAnotherJobStreams) {
  const std::vector<BatchRecord> reference = Reference();
  const uint64_t batch_bytes = uint64_t{kBatch} * kSize * kSize * 3;
  const std::string budget = std::to_string(64 * batch_bytes);
  for (const char* share : {"1", "0.2"}) {
    SCOPED_TRACE(absl::StrCat("--max-job-buffer-share ", share));
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<DaemonProcess> daemon,
        // Every job here comes from one host: the identity's share is off.
        StartDaemon({"--max-buffer-bytes", budget, "--max-window", "4",
                     "--max-job-buffer-share", share,
                     "--max-identity-buffer-share", "1"}));
    std::vector<std::unique_ptr<GreedyStreams>> jobs;
    uint32_t granted = 0;
    for (int j = 0; j < 4; ++j) {
      jobs.push_back(std::make_unique<GreedyStreams>(
          daemon->endpoint(), absl::StrCat("greedy-", j), 16));
      granted += jobs.back()->granted();
    }
    absl::StatusOr<std::vector<BatchRecord>> fifth =
        ReadEpoch(Options(daemon->endpoint(), {}, "well-behaved"));
    if (std::string(share) == "1") {
      // The first jobs take everything.
      EXPECT_EQ(granted, 64u);
      ASSERT_FALSE(fifth.ok());
      EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(fifth.status().message(),
                  HasSubstr("batch buffers are full"));
    } else {
      // 64 * 0.2 = 12.8 batches a job: 12 each, 48 in all.
      EXPECT_EQ(granted, 48u);
      for (const auto& job : jobs) {
        ASSERT_FALSE(job->refusals().empty());
        EXPECT_EQ(job->refusals()[0].error_code(),
                  grpc::StatusCode::RESOURCE_EXHAUSTED);
        EXPECT_THAT(job->refusals()[0].error_message(),
                    HasSubstr("--max-job-buffer-share"));
      }
      ASSERT_TRUE(fifth.ok()) << fifth.status();
      EXPECT_EQ(*fifth, reference);
    }
  }
}

}  // namespace
}  // namespace batchd::testing
