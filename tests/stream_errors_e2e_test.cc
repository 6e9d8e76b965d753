// End-to-end: invalid requests against a real daemon get the right status
// codes and messages, while other streams keep going and the daemon stays
// up.
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "batchd/v1/data.grpc.pb.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"

namespace batchd::testing {
namespace {

using ::testing::HasSubstr;
using v1::StreamRequest;
using v1::StreamResponse;
using Stream = grpc::ClientReaderWriter<StreamRequest, StreamResponse>;

class StreamErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dataset_ = new std::string(MakeTempDir("dataset"));
    CommandResult made = RunCommand({BuiltBinary("tools/make_dataset"),
                                     "--out", *dataset_, "--images", "24",
                                     "--classes", "3", "--seed", "4"});
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static void TearDownTestSuite() { delete dataset_; }

  void SetUp() override {
    auto daemon = DaemonProcess::Start(
        {"--dataset", "small=" + *dataset_, "--workers", "2",
         "--max-batch-size", "64", "--max-window", "4",
         "--max-buffer-bytes", std::to_string(8 * 3 * 64 * 64 * 5),
         // These tests' streams are all one job from one host, and are
         // about the whole budget; the per-job share is
         // job_limits_e2e_test's, the per-identity share
         // adversarial_fair_admission_test's.
         "--max-job-buffer-share", "1", "--max-identity-buffer-share", "1"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    channel_ = grpc::CreateChannel(daemon_->endpoint(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::DataService::NewStub(channel_);
  }

  void TearDown() override {
    // Idle connections hold a stopping server until its grace period ends;
    // close them first so the drain is immediate.
    stub_.reset();
    channel_.reset();
    if (daemon_) EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Log();
  }

  static v1::Plan GoodPlan() {
    v1::Plan plan;
    plan.set_dataset("small");
    plan.set_batch_size(8);
    plan.set_seed(1);
    plan.set_shuffle(true);
    plan.mutable_pipeline()->mutable_train()->set_size(64);
    return plan;
  }

  // Opens a stream with `plan` and `window`; returns the stream's final
  // status if the plan is refused.
  grpc::Status OpenAndExpectFailure(const v1::Plan& plan, uint32_t window = 2) {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = stub_->StreamBatches(&context);
    StreamRequest open;
    open.mutable_open()->set_window(window);
    *open.mutable_open()->mutable_plan() = plan;
    stream->Write(open);
    stream->WritesDone();
    StreamResponse response;
    while (stream->Read(&response)) {
      ADD_FAILURE() << "unexpected response " << response.ShortDebugString();
    }
    return stream->Finish();
  }

  static std::string* dataset_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DataService::Stub> stub_;
};

std::string* StreamErrorsTest::dataset_ = nullptr;

TEST_F(StreamErrorsTest, BadPlansAreRefusedWithInvalidArgument) {
  struct Case {
    std::string name;
    v1::Plan plan;
    std::string message;
  };
  std::vector<Case> cases;
  {
    v1::Plan p = GoodPlan();
    p.set_dataset("nope");
    cases.push_back({"unknown dataset", p, "unknown dataset 'nope'"});
  }
  {
    v1::Plan p = GoodPlan();
    p.set_batch_size(0);
    cases.push_back({"batch size 0", p, "batch_size is 0; it must be 1..64"});
  }
  {
    v1::Plan p = GoodPlan();
    p.set_batch_size(65);
    cases.push_back({"batch size over limit", p, "batch_size is 65"});
  }
  {
    v1::Plan p = GoodPlan();
    p.mutable_pipeline()->mutable_train()->set_size(0);
    cases.push_back({"crop size 0", p, "pipeline.train.size is 0"});
  }
  {
    v1::Plan p = GoodPlan();
    p.mutable_pipeline()->mutable_eval()->set_size(0);
    cases.push_back({"eval size 0", p, "pipeline.eval.size is 0"});
  }
  {
    v1::Plan p = GoodPlan();
    p.set_rank(3);
    p.set_world_size(3);
    cases.push_back({"rank >= world_size", p, "rank 3 is out of range"});
  }
  {
    v1::Plan p = GoodPlan();
    p.clear_pipeline();
    cases.push_back({"no transform", p, "pipeline has no transform"});
  }
  {
    v1::Plan p = GoodPlan();
    p.mutable_pipeline()->mutable_eval()->set_size(64);
    p.mutable_pipeline()->mutable_eval()->set_resize_shorter(4294967295u);
    cases.push_back({"resize_shorter 2^32-1", p,
                     "pipeline.eval.resize_shorter is 4294967295"});
  }
  {
    // Job names reach terminals (batchd top) and logs.
    v1::Plan p = GoodPlan();
    p.set_job("\x1b[2J\x1b[31mEVIL\x1b[0m");
    cases.push_back({"escape sequence in job", p,
                     "job name has byte 0x1b at offset 0"});
  }
  {
    v1::Plan p = GoodPlan();
    p.set_job("_other");
    cases.push_back({"daemon's own job name", p,
                     "job name has byte 0x5f at offset 0"});
  }
  {
    v1::Plan p = GoodPlan();
    p.set_job(std::string(129, 'j'));
    cases.push_back({"job name too long", p, "job name is 129 characters"});
  }
  for (const Case& c : cases) {
    grpc::Status status = OpenAndExpectFailure(c.plan);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
}

TEST_F(StreamErrorsTest, RequestBeforePlanIsFailedPrecondition) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->StreamBatches(&context);
  StreamRequest request;
  request.mutable_request()->set_epoch(0);
  request.mutable_request()->add_batch_indices(0);
  stream->Write(request);
  stream->WritesDone();
  StreamResponse response;
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("send `open`"));
}

TEST_F(StreamErrorsTest, BufferBudgetRefusesStreamsWithResourceExhausted) {
  // The budget holds 5 batches of 8 x 64x64x3: a stream asking for 4 gets 4,
  // the next gets 1, and the one after that is refused.
  grpc::ClientContext c1, c2;
  std::unique_ptr<Stream> s1 = stub_->StreamBatches(&c1);
  std::unique_ptr<Stream> s2 = stub_->StreamBatches(&c2);
  StreamRequest open;
  *open.mutable_open()->mutable_plan() = GoodPlan();
  open.mutable_open()->set_window(4);
  StreamResponse response;
  ASSERT_TRUE(s1->Write(open));
  ASSERT_TRUE(s1->Read(&response));
  EXPECT_EQ(response.opened().window(), 4u);
  ASSERT_TRUE(s2->Write(open));
  ASSERT_TRUE(s2->Read(&response));
  EXPECT_EQ(response.opened().window(), 1u);

  grpc::Status status = OpenAndExpectFailure(GoodPlan(), 4);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("--max-buffer-bytes"));

  // Closing a stream gives its budget back.
  s1->WritesDone();
  EXPECT_TRUE(s1->Finish().ok());
  grpc::ClientContext c3;
  std::unique_ptr<Stream> s3 = stub_->StreamBatches(&c3);
  ASSERT_TRUE(s3->Write(open));
  ASSERT_TRUE(s3->Read(&response));
  EXPECT_EQ(response.opened().window(), 4u);
  s2->WritesDone();
  s3->WritesDone();
  EXPECT_TRUE(s2->Finish().ok());
  EXPECT_TRUE(s3->Finish().ok());
}

TEST_F(StreamErrorsTest, BadBatchRequestsAreRejectedInBandAndTheStreamGoesOn) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->StreamBatches(&context);
  StreamRequest open;
  *open.mutable_open()->mutable_plan() = GoodPlan();
  open.mutable_open()->set_window(2);
  ASSERT_TRUE(stream->Write(open));
  StreamResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_opened());
  EXPECT_EQ(response.opened().batches_per_epoch(), 3u);  // 24 / 8

  // Batch 3 is beyond the epoch; batches 0 and 1 fill the window, so 2 is
  // over it.
  StreamRequest request;
  request.mutable_request()->set_epoch(0);
  for (uint64_t b : {3, 0}) request.mutable_request()->add_batch_indices(b);
  ASSERT_TRUE(stream->Write(request));
  request.mutable_request()->clear_batch_indices();
  for (uint64_t b : {1, 2}) request.mutable_request()->add_batch_indices(b);
  ASSERT_TRUE(stream->Write(request));

  std::map<uint64_t, int> rejected_codes;
  std::map<uint64_t, std::string> rejected_messages;
  std::map<uint64_t, uint64_t> bytes;
  while (rejected_codes.size() + bytes.size() < 4 ||
         bytes[0] < 8 * 64 * 64 * 3 || bytes[1] < 8 * 64 * 64 * 3) {
    ASSERT_TRUE(stream->Read(&response));
    if (response.has_rejected()) {
      rejected_codes[response.rejected().batch_index()] =
          response.rejected().code();
      rejected_messages[response.rejected().batch_index()] =
          response.rejected().message();
    } else if (response.has_header()) {
      bytes[response.header().batch_index()] += 0;
    } else if (response.has_chunk()) {
      bytes[response.chunk().batch_index()] += response.chunk().data().size();
    }
  }
  EXPECT_EQ(rejected_codes[3], grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rejected_messages[3], HasSubstr("beyond the epoch"));
  EXPECT_EQ(rejected_codes[2], grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(rejected_messages[2], HasSubstr("window=2"));

  // The window is free again: batch 2 now succeeds on the same stream.
  request.mutable_request()->clear_batch_indices();
  request.mutable_request()->add_batch_indices(2);
  ASSERT_TRUE(stream->Write(request));
  uint64_t got = 0;
  while (got < 8 * 64 * 64 * 3) {
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_FALSE(response.has_rejected()) << response.ShortDebugString();
    if (response.has_chunk()) {
      EXPECT_EQ(response.chunk().batch_index(), 2u);
      got += response.chunk().data().size();
    }
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Opens `plan` with `window` on a new stream of `context`.
std::unique_ptr<Stream> OpenStream(v1::DataService::Stub& stub,
                                   grpc::ClientContext* context,
                                   const v1::Plan& plan, uint32_t window,
                                   v1::PlanOpened* opened) {
  std::unique_ptr<Stream> stream = stub.StreamBatches(context);
  StreamRequest open;
  *open.mutable_open()->mutable_plan() = plan;
  open.mutable_open()->set_window(window);
  EXPECT_TRUE(stream->Write(open));
  StreamResponse response;
  EXPECT_TRUE(stream->Read(&response));
  EXPECT_TRUE(response.has_opened()) << response.ShortDebugString();
  *opened = response.opened();
  return stream;
}

StreamRequest Request(bool cancel, std::initializer_list<uint64_t> indices) {
  StreamRequest r;
  v1::BatchRequest* request = cancel ? nullptr : r.mutable_request();
  v1::CancelBatches* withdraw = cancel ? r.mutable_cancel() : nullptr;
  for (uint64_t i : indices) {
    if (cancel) {
      withdraw->add_batch_indices(i);
    } else {
      request->add_batch_indices(i);
    }
  }
  return r;
}

TEST_F(StreamErrorsTest, OverlongRequestEndsTheStreamWithOneStatus) {
  grpc::ClientContext context;
  v1::PlanOpened opened;
  std::unique_ptr<Stream> stream =
      OpenStream(*stub_, &context, GoodPlan(), 2, &opened);
  // 100,000 indices (~0.3 MB) against a window of 2: refused as a whole,
  // not answered index by index.
  StreamRequest request;
  for (uint64_t i = 0; i < 100000; ++i) {
    request.mutable_request()->add_batch_indices(i % 3);
  }
  ASSERT_TRUE(stream->Write(request));
  StreamResponse response;
  int answers = 0;
  while (stream->Read(&response)) ++answers;
  EXPECT_EQ(answers, 0);
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("names 100000 batches but the window is 2"));
}

TEST_F(StreamErrorsTest, DuplicateIndexIsRejectedAndEmptyRequestIsANoOp) {
  grpc::ClientContext context;
  v1::PlanOpened opened;
  std::unique_ptr<Stream> stream =
      OpenStream(*stub_, &context, GoodPlan(), 4, &opened);
  ASSERT_TRUE(stream->Write(Request(false, {})));  // asks for nothing
  ASSERT_TRUE(stream->Write(Request(false, {1, 1})));
  StreamResponse response;
  int headers = 0, rejections = 0;
  uint64_t bytes = 0;
  while (bytes < 8 * 64 * 64 * 3) {
    ASSERT_TRUE(stream->Read(&response));
    if (response.has_rejected()) {
      ++rejections;
      EXPECT_EQ(response.rejected().batch_index(), 1u);
      EXPECT_EQ(response.rejected().code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(response.rejected().message(),
                  HasSubstr("already outstanding"));
    } else if (response.has_header()) {
      ++headers;
      EXPECT_EQ(response.header().batch_index(), 1u);
    } else if (response.has_chunk()) {
      bytes += response.chunk().data().size();
    }
  }
  EXPECT_EQ(headers, 1);
  EXPECT_EQ(rejections, 1);
  stream->WritesDone();
  while (stream->Read(&response)) ADD_FAILURE() << response.ShortDebugString();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(StreamErrorsTest, CancelAnswersEachBatchOnceAndFreesTheWindow) {
  grpc::ClientContext context;
  v1::PlanOpened opened;
  std::unique_ptr<Stream> stream =
      OpenStream(*stub_, &context, GoodPlan(), 4, &opened);
  const uint64_t batch_bytes = 8 * 64 * 64 * 3;
  // Withdrawn at once: each batch is answered exactly once, by CANCELLED
  // (not started or not yet sent) or whole (its header was already out).
  // Then the same batches are asked again on the same stream and arrive.
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(stream->Write(Request(false, {0, 1, 2})));
    if (round == 0) ASSERT_TRUE(stream->Write(Request(true, {0, 1, 2, 7})));
    std::map<uint64_t, int> answers;
    std::map<uint64_t, uint64_t> bytes;
    int answered = 0;
    while (answered < 3) {
      StreamResponse response;
      ASSERT_TRUE(stream->Read(&response));
      if (response.has_rejected()) {
        EXPECT_EQ(response.rejected().code(), grpc::StatusCode::CANCELLED)
            << response.ShortDebugString();
        ++answers[response.rejected().batch_index()];
        ++answered;
      } else if (response.has_header()) {
        ++answers[response.header().batch_index()];
      } else if (response.has_chunk()) {
        const uint64_t b = response.chunk().batch_index();
        bytes[b] += response.chunk().data().size();
        if (bytes[b] == batch_bytes) ++answered;
      }
    }
    EXPECT_EQ(answers, (std::map<uint64_t, int>{{0, 1}, {1, 1}, {2, 1}}));
    if (round == 1) {
      EXPECT_EQ(bytes.size(), 3u) << "nothing was cancelled in round 2";
    }
  }
  stream->WritesDone();
  StreamResponse response;
  while (stream->Read(&response)) ADD_FAILURE() << response.ShortDebugString();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(StreamErrorsTest, MaxBatchBytesIsWhatTheShardHolds) {
  // 24 samples, batch_size 64: the one batch holds 24.
  v1::Plan plan = GoodPlan();
  plan.set_batch_size(64);
  grpc::ClientContext context;
  v1::PlanOpened opened;
  std::unique_ptr<Stream> stream = OpenStream(*stub_, &context, plan, 1, &opened);
  EXPECT_EQ(opened.max_batch_bytes(), 24u * 64 * 64 * 3);
  EXPECT_EQ(opened.batches_per_epoch(), 1u);
  stream->WritesDone();
  StreamResponse response;
  while (stream->Read(&response)) ADD_FAILURE() << response.ShortDebugString();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(StreamErrorsTest, ErrorsDoNotDisturbAHealthyStream) {
  // A healthy stream reads a whole epoch while bad streams come and go.
  std::thread healthy([&] {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = stub_->StreamBatches(&context);
    StreamRequest open;
    *open.mutable_open()->mutable_plan() = GoodPlan();
    open.mutable_open()->set_window(1);
    ASSERT_TRUE(stream->Write(open));
    StreamResponse response;
    ASSERT_TRUE(stream->Read(&response));
    for (uint64_t b = 0; b < 3; ++b) {
      StreamRequest request;
      request.mutable_request()->set_epoch(0);
      request.mutable_request()->add_batch_indices(b);
      ASSERT_TRUE(stream->Write(request));
      uint64_t got = 0;
      while (got < 8 * 64 * 64 * 3) {
        ASSERT_TRUE(stream->Read(&response));
        ASSERT_FALSE(response.has_rejected());
        if (response.has_chunk()) got += response.chunk().data().size();
      }
    }
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  });
  for (int i = 0; i < 10; ++i) {
    v1::Plan bad = GoodPlan();
    bad.set_dataset("missing");
    EXPECT_EQ(OpenAndExpectFailure(bad).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  healthy.join();

  // The admin service refuses a worker count of 0 and still answers.
  auto admin = v1::AdminService::NewStub(channel_);
  grpc::ClientContext context;
  v1::SetWorkersRequest set;
  set.set_workers(0);
  v1::SetWorkersResponse set_response;
  grpc::Status status = admin->SetWorkers(&context, set, &set_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("must be 1.."));
  grpc::ClientContext status_context;
  v1::ServerStatus server_status;
  ASSERT_TRUE(admin->GetStatus(&status_context, {}, &server_status).ok());
  EXPECT_EQ(server_status.workers(), 2u);
  ASSERT_EQ(server_status.jobs_size(), 1);
  EXPECT_EQ(server_status.jobs(0).batches_sent(), 3u);
  EXPECT_EQ(server_status.jobs(0).images_sent(), 24u);
}

}  // namespace
}  // namespace batchd::testing
