#include "server/stream/stream_session.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/pipeline/shared_batches.h"
#include "server/stream/stream_session_test_util.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::batchd::v1::StreamRequest;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Message = StreamSession::Message;

// The test plan: 16 samples, batches of 4 at 32x32 RGB.
constexpr uint64_t kBatchBytes = kTestBatchBytes;
constexpr uint64_t kBudgetBytes = uint64_t{1} << 30;

// An ImageFolder of 16 files that are not JPEGs: enough to resolve plans,
// and for the pipeline to build (deterministically substituted) batches.
const DatasetMap& Datasets() {
  static const DatasetMap* datasets = [] {
    const std::string root =
        absl::StrCat(::testing::TempDir(), "/stream-session-", getpid());
    for (int i = 0; i < 16; ++i) {
      const std::string dir = absl::StrCat(root, "/class", i % 2);
      std::filesystem::create_directories(dir);
      std::ofstream(absl::StrCat(dir, "/", i, ".jpg")) << "not a jpeg";
    }
    absl::StatusOr<std::shared_ptr<const Dataset>> dataset =
        Dataset::LoadImageFolder("tiny", root);
    EXPECT_OK(dataset);
    return new DatasetMap{{"tiny", *dataset}};
  }();
  return *datasets;
}

StreamRequest Open(const std::string& job, uint32_t window,
                   const std::string& dataset = "tiny") {
  StreamRequest request;
  batchd::v1::Plan* plan = request.mutable_open()->mutable_plan();
  plan->set_dataset(dataset);
  plan->set_batch_size(4);
  plan->set_seed(7);
  plan->set_job(job);
  plan->mutable_pipeline()->mutable_train()->set_size(32);
  request.mutable_open()->set_window(window);
  return request;
}

StreamRequest Ask(std::vector<uint64_t> indices, uint64_t epoch = 0) {
  StreamRequest request;
  request.mutable_request()->set_epoch(epoch);
  for (uint64_t index : indices)
    request.mutable_request()->add_batch_indices(index);
  return request;
}

StreamRequest Withdraw(std::vector<uint64_t> indices) {
  StreamRequest request;
  for (uint64_t index : indices)
    request.mutable_cancel()->add_batch_indices(index);
  return request;
}

// What a session wrote, writing each message as Next hands it out, until
// it has nothing more to write for now.
struct Written {
  std::vector<Message> messages;
  std::optional<absl::Status> finish;

  std::vector<batchd::v1::RequestRejected> Rejections() const {
    std::vector<batchd::v1::RequestRejected> out;
    for (const Message& m : messages) {
      if (m.response.has_rejected()) out.push_back(m.response.rejected());
    }
    return out;
  }
  // Batch indices whose header was written.
  std::vector<uint64_t> Headers() const {
    std::vector<uint64_t> out;
    for (const Message& m : messages) {
      if (m.batch == nullptr && m.response.has_header()) {
        out.push_back(m.response.header().batch_index());
      }
    }
    return out;
  }
  // Chunk bytes written, in all.
  uint64_t ChunkBytes() const {
    uint64_t bytes = 0;
    for (const Message& m : messages) bytes += m.length;
    return bytes;
  }
};

class StreamSessionTest : public ::testing::Test {
 protected:
  StreamSessionTest() {
    context_.datasets = &Datasets();
    context_.default_window = 2;
    context_.max_window = 8;
    context_.batches = &source_;
    context_.stats = &stats_;
    context_.reports = &reports_;
    context_.budget = &budget_;
    context_.admission = &admission_;
  }

  // A session for a caller whose token is bound to `bound_job` (empty: any
  // job), using `context`.
  std::unique_ptr<StreamSession> NewSession(
      const std::string& bound_job = "",
      const StreamSessionContext* context = nullptr) {
    return std::make_unique<StreamSession>(
        context != nullptr ? context : &context_, "ipv4:10.1.2.3:4567",
        "peer host 10.1.2.3",
        [bound_job](absl::string_view job) {
          if (bound_job.empty() || job == bound_job) return absl::OkStatus();
          return absl::PermissionDeniedError(
              absl::StrCat("this token streams only for ", bound_job));
        },
        [this] {
          absl::MutexLock lock(&mu_);
          ++wakes_;
        });
  }

  absl::Status Handle(StreamSession& session, const StreamRequest& request) {
    return session.Handle(request, /*owner=*/nullptr, now_);
  }

  Written WriteAll(StreamSession& session) {
    Written written;
    for (;;) {
      StreamSession::Action next = session.Next();
      if (next.write) {
        written.messages.push_back(std::move(*next.write));
        session.WriteDone(/*ok=*/true, now_);
        continue;
      }
      written.finish = std::move(next.finish);
      return written;
    }
  }

  int wakes() {
    absl::MutexLock lock(&mu_);
    return wakes_;
  }
  void AwaitWakes(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return wakes_ >= n;
    };
    mu_.Await(absl::Condition(&reached));
  }

  const absl::Time now_ = absl::Now();
  FakeAdmission admission_;
  FakeSource source_;
  JobStats stats_;
  TrainerReports reports_;
  BufferBudget budget_{kBudgetBytes, kBudgetBytes};
  StreamSessionContext context_;
  absl::Mutex mu_;
  int wakes_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(StreamSessionTest, OpenAnswersPlanOpenedAndReservesTheWindow) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", /*window=*/3)));
  Written written = WriteAll(*session);
  ASSERT_EQ(written.messages.size(), 1u);
  const batchd::v1::PlanOpened& opened = written.messages[0].response.opened();
  EXPECT_EQ(opened.window(), 3u);
  EXPECT_EQ(opened.batches_per_epoch(), 4u);
  EXPECT_EQ(opened.max_batch_bytes(), kBatchBytes);
  EXPECT_FALSE(written.finish.has_value());
  EXPECT_EQ(budget_.reserved("job"), 3 * kBatchBytes);
  EXPECT_EQ(admission_.job_streams["job"], 1);
  EXPECT_EQ(source_.opened, 1);

  session->Close();
  EXPECT_EQ(budget_.reserved(), 0u);
  EXPECT_EQ(admission_.job_streams["job"], 0);
  EXPECT_EQ(source_.closed, 1);
}

// Each refusal ends the stream with its status: Next finishes with it.
TEST_F(StreamSessionTest, OpenIsRefusedForEachReason) {
  struct Case {
    std::string name;
    std::function<void()> arrange;
    StreamRequest open;
    std::string bound_job;
    absl::StatusCode code;
    std::string message;
  };
  StreamSessionContext small = context_;
  BufferBudget tiny_budget(kBatchBytes - 1, kBatchBytes - 1);
  small.budget = &tiny_budget;
  const std::vector<Case> cases = {
      {"draining", [this] { admission_.draining_now = true; }, Open("job", 2),
       "", absl::StatusCode::kUnavailable,
       "batchd is draining (test); connect to another daemon"},
      {"bad plan", [] {}, Open("job", 2, "nope"), "",
       absl::StatusCode::kInvalidArgument, "unknown dataset 'nope'"},
      {"job not allowed", [] {}, Open("job", 2), "other",
       absl::StatusCode::kPermissionDenied,
       "this token streams only for other"},
      {"job full", [this] { admission_.max_job_streams = 0; }, Open("job", 2),
       "", absl::StatusCode::kResourceExhausted, "job limit"},
      {"no budget", [] {}, Open("job", 2), "",
       absl::StatusCode::kResourceExhausted, "--max-buffer-bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    admission_ = FakeAdmission();
    c.arrange();
    auto session =
        NewSession(c.bound_job, c.name == "no budget" ? &small : &context_);
    EXPECT_THAT(Handle(*session, c.open),
                StatusIs(c.code, HasSubstr(c.message)));
    Written written = WriteAll(*session);
    EXPECT_THAT(written.messages, IsEmpty());
    ASSERT_TRUE(written.finish.has_value());
    EXPECT_THAT(*written.finish, StatusIs(c.code, HasSubstr(c.message)));
    session->Close();
    EXPECT_EQ(budget_.reserved(), 0u);
    EXPECT_EQ(tiny_budget.reserved(), 0u);
    EXPECT_EQ(admission_.job_streams["job"], 0);  // uncounted if counted
  }
  EXPECT_EQ(source_.opened, source_.closed);
}

TEST_F(StreamSessionTest, ASecondPlanIsRefused) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  EXPECT_THAT(Handle(*session, Open("job", 2)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the plan is already open")));
  Written written = WriteAll(*session);
  ASSERT_TRUE(written.finish.has_value());
  EXPECT_EQ(written.finish->code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StreamSessionTest, RequestsBeforeThePlanEndTheStream) {
  for (const StreamRequest& request : {Ask({0}), Withdraw({0}), [] {
                                         StreamRequest report;
                                         report.mutable_report();
                                         return report;
                                       }()}) {
    auto session = NewSession();
    EXPECT_THAT(Handle(*session, request),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("came before the plan")));
  }
  auto session = NewSession();
  EXPECT_THAT(Handle(*session, StreamRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("empty StreamRequest")));
}

TEST_F(StreamSessionTest, ABatchIsSentAsHeaderThenChunks) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  WriteAll(*session);
  ASSERT_OK(Handle(*session, Ask({0, 1})));
  ASSERT_EQ(source_.asked.size(), 2u);
  EXPECT_EQ(session->outstanding(), 2u);
  source_.Build(0);
  source_.Build(1, /*bytes=*/kMaxChunkBytes + 10);
  EXPECT_EQ(wakes(), 2);

  Written written = WriteAll(*session);
  EXPECT_EQ(written.Headers(), (std::vector<uint64_t>{0, 1}));
  ASSERT_EQ(written.messages.size(), 5u);  // header, chunk, header, 2 chunks
  EXPECT_EQ(written.messages[0].response.header().total_bytes(), kBatchBytes);
  EXPECT_EQ(written.messages[1].length, kBatchBytes);
  EXPECT_EQ(written.messages[3].offset, 0u);
  EXPECT_EQ(written.messages[3].length, kMaxChunkBytes);
  EXPECT_EQ(written.messages[4].offset, kMaxChunkBytes);
  EXPECT_EQ(written.messages[4].length, 10u);
  EXPECT_EQ(session->outstanding(), 0u);
  EXPECT_EQ(admission_.batches_sent, 2);
  EXPECT_FALSE(written.finish.has_value());
}

TEST_F(StreamSessionTest, OneWriteIsInFlightAtATime) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  ASSERT_OK(Handle(*session, Ask({7})));  // beyond the epoch: rejected
  StreamSession::Action first = session->Next();
  ASSERT_TRUE(first.write.has_value());
  EXPECT_TRUE(first.write->response.has_opened());
  EXPECT_FALSE(session->Next().write.has_value());
  session->WriteDone(/*ok=*/true, now_);
  StreamSession::Action second = session->Next();
  ASSERT_TRUE(second.write.has_value());
  EXPECT_EQ(second.write->response.rejected().code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
}

TEST_F(StreamSessionTest, AFullWindowIsRejectedInBandUntilABatchIsSent) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  ASSERT_OK(Handle(*session, Ask({0, 1})));
  ASSERT_OK(Handle(*session, Ask({2})));
  Written written = WriteAll(*session);
  ASSERT_EQ(written.Rejections().size(), 1u);
  EXPECT_EQ(written.Rejections()[0].batch_index(), 2u);
  EXPECT_EQ(written.Rejections()[0].code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(written.Rejections()[0].message(),
              HasSubstr("more than window=2"));
  EXPECT_EQ(source_.asked.size(), 2u);

  source_.Build(0);
  WriteAll(*session);
  ASSERT_OK(Handle(*session, Ask({2})));
  EXPECT_EQ(source_.asked.size(), 3u);
  // A request for more than the window is refused whole.
  EXPECT_THAT(Handle(*session, Ask({3, 0, 1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("names 3 batches but the window is 2")));
}

// The client withdraws a batch being built: its grant's flag stops the
// work, and when the source gives the batch back it is answered CANCELLED
// and its window place is free again.
TEST_F(StreamSessionTest, ARevokedGrantIsAnsweredCancelled) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 1)));
  WriteAll(*session);
  ASSERT_OK(Handle(*session, Ask({0})));
  EXPECT_FALSE(source_.asked[0].cancelled.cancelled());
  ASSERT_OK(Handle(*session, Withdraw({0})));
  EXPECT_TRUE(source_.asked[0].cancelled.cancelled());
  EXPECT_THAT(WriteAll(*session).messages, IsEmpty());  // still building

  source_.GiveBack(0);
  EXPECT_EQ(wakes(), 1);
  Written written = WriteAll(*session);
  ASSERT_EQ(written.Rejections().size(), 1u);
  EXPECT_EQ(written.Rejections()[0].code(),
            static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(written.Rejections()[0].message(),
            "cancelled at the client's request");
  ASSERT_OK(Handle(*session, Ask({1})));
  EXPECT_EQ(source_.asked.size(), 2u);
}

TEST_F(StreamSessionTest, ACancelActsByTheBatchsStage) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 3)));
  WriteAll(*session);
  ASSERT_OK(Handle(*session, Ask({0, 1, 2})));
  source_.Build(0);
  source_.Build(1);
  // Batch 0's header goes out; batch 1 waits whole in the queue.
  StreamSession::Action header = session->Next();
  ASSERT_TRUE(header.write.has_value());
  ASSERT_EQ(header.write->response.header().batch_index(), 0u);
  session->WriteDone(/*ok=*/true, now_);

  // Sent whole (header out), withdrawn (queued), unknown (never asked).
  ASSERT_OK(Handle(*session, Withdraw({0, 1, 9})));
  Written written = WriteAll(*session);
  EXPECT_THAT(written.Headers(), IsEmpty());     // batch 1's never goes out
  EXPECT_EQ(written.ChunkBytes(), kBatchBytes);  // batch 0's chunk does
  ASSERT_EQ(written.Rejections().size(), 1u);
  EXPECT_EQ(written.Rejections()[0].batch_index(), 1u);
  EXPECT_EQ(session->outstanding(), 1u);  // batch 2, still building

  // Building: answered when the source gives it back, even built.
  ASSERT_OK(Handle(*session, Withdraw({2})));
  source_.Build(2);
  written = WriteAll(*session);
  ASSERT_EQ(written.Rejections().size(), 1u);
  EXPECT_EQ(written.Rejections()[0].batch_index(), 2u);
  EXPECT_EQ(session->outstanding(), 0u);
}

// A batch that comes back after the stream ended is dropped: nothing is
// queued and nothing wakes the reactor.
TEST_F(StreamSessionTest, ALateBatchIsDropped) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  WriteAll(*session);
  ASSERT_OK(Handle(*session, Ask({0, 1})));
  session->End(absl::CancelledError("stream cancelled"));
  EXPECT_TRUE(source_.asked[0].cancelled.cancelled());  // the stream's flag
  Written written = WriteAll(*session);
  EXPECT_THAT(written.messages, IsEmpty());
  ASSERT_TRUE(written.finish.has_value());
  EXPECT_THAT(*written.finish, StatusIs(absl::StatusCode::kCancelled,
                                        HasSubstr("stream cancelled")));

  source_.Build(0);
  EXPECT_EQ(wakes(), 0);
  EXPECT_FALSE(session->Next().write.has_value());
  session->Close();
  source_.Build(1);  // after the call is over
  EXPECT_EQ(wakes(), 0);
  EXPECT_EQ(session->outstanding(), 0u);
  EXPECT_EQ(budget_.reserved(), 0u);
}

TEST_F(StreamSessionTest, TheClientGoingAwayEndsTheStream) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  ASSERT_TRUE(session->Next().write.has_value());
  session->WriteDone(/*ok=*/false, now_);
  Written written = WriteAll(*session);
  ASSERT_TRUE(written.finish.has_value());
  EXPECT_THAT(*written.finish, StatusIs(absl::StatusCode::kCancelled,
                                        HasSubstr("the client went away")));
  EXPECT_FALSE(session->ReadDone(/*ok=*/true));  // read no further
}

TEST_F(StreamSessionTest, AReportIsKeptOrAnsweredInBand) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  WriteAll(*session);
  StreamRequest report;
  report.mutable_report()->set_wait_seconds(0.5);
  report.mutable_report()->set_compute_seconds(0.5);
  ASSERT_OK(session->Handle(report, nullptr, now_ + absl::Seconds(5)));
  EXPECT_THAT(WriteAll(*session).messages, IsEmpty());  // kept

  report.mutable_report()->set_batches(3);  // none was sent
  ASSERT_OK(session->Handle(report, nullptr, now_ + absl::Seconds(6)));
  Written written = WriteAll(*session);
  ASSERT_EQ(written.messages.size(), 1u);
  EXPECT_THAT(written.messages[0].response.report_rejected().message(),
              HasSubstr("3 batches consumed, but 0 were sent"));
  EXPECT_FALSE(written.finish.has_value());  // the stream goes on
}

// A plan that asks for almost nothing is charged the budget's minimum per
// stream, against its job and its caller's identity, and gives it back.
TEST_F(StreamSessionTest, ATinyPlanIsChargedTheMinimumPerStream) {
  StreamSessionContext charged = context_;
  BufferBudget budget(/*limit=*/100 * kBatchBytes, /*job_limit=*/100 *
                      kBatchBytes, /*identity_limit=*/10 * kBatchBytes,
                      /*min_stream_bytes=*/5 * kBatchBytes);
  charged.budget = &budget;
  auto first = NewSession("", &charged);
  ASSERT_OK(Handle(*first, Open("job", 1)));
  EXPECT_EQ(budget.reserved("job"), 5 * kBatchBytes);
  EXPECT_EQ(budget.reserved_by_identity("peer host 10.1.2.3"),
            5 * kBatchBytes);
  auto second = NewSession("", &charged);
  ASSERT_OK(Handle(*second, Open("job", 1)));
  // The identity's share (10 batches' bytes) holds two such streams.
  auto third = NewSession("", &charged);
  EXPECT_THAT(Handle(*third, Open("job", 1)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("identity peer host 10.1.2.3 holds")));
  third->Close();
  first->Close();
  second->Close();
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_EQ(budget.reserved_by_identity("peer host 10.1.2.3"), 0u);
}

// A stream's reservation goes back once: when it ends idle (before the
// client sees the status) or else when the call is over, never both.
TEST_F(StreamSessionTest, TheBudgetIsReturnedExactlyOnce) {
  auto other = NewSession();
  ASSERT_OK(Handle(*other, Open("job", 2)));

  auto idle = NewSession();
  ASSERT_OK(Handle(*idle, Open("job", 2)));
  EXPECT_EQ(budget_.reserved("job"), 4 * kBatchBytes);
  EXPECT_FALSE(idle->ReadDone(/*ok=*/false));  // the client closed its side
  Written written = WriteAll(*idle);
  ASSERT_TRUE(written.finish.has_value());
  EXPECT_OK(*written.finish);
  EXPECT_EQ(budget_.reserved("job"), 2 * kBatchBytes);
  idle->Close();
  EXPECT_EQ(budget_.reserved("job"), 2 * kBatchBytes);

  auto busy = NewSession();
  ASSERT_OK(Handle(*busy, Open("job", 2)));
  ASSERT_OK(Handle(*busy, Ask({0})));
  busy->End(absl::CancelledError("stream cancelled"));
  ASSERT_TRUE(WriteAll(*busy).finish.has_value());
  EXPECT_EQ(budget_.reserved("job"), 4 * kBatchBytes);  // still building
  busy->Close();
  EXPECT_EQ(budget_.reserved("job"), 2 * kBatchBytes);
  source_.GiveBack(0);
  EXPECT_EQ(budget_.reserved("job"), 2 * kBatchBytes);

  other->Close();
  EXPECT_EQ(budget_.reserved(), 0u);
}

TEST_F(StreamSessionTest, ADrainRejectsNewBatchesAndEndsTheIdleStream) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  WriteAll(*session);
  admission_.draining_now = true;
  ASSERT_OK(Handle(*session, Ask({0})));
  EXPECT_THAT(source_.asked, IsEmpty());
  Written written = WriteAll(*session);
  ASSERT_EQ(written.Rejections().size(), 1u);
  EXPECT_EQ(written.Rejections()[0].code(),
            static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(written.Rejections()[0].message(),
            "batchd is draining (test) and starts no new batches; request "
            "this one from another daemon");
  ASSERT_TRUE(written.finish.has_value());
  EXPECT_THAT(*written.finish,
              StatusIs(absl::StatusCode::kUnavailable,
                       "batchd is draining (test): every batch requested "
                       "before the drain was sent; request further batches "
                       "from another daemon"));
  EXPECT_EQ(budget_.reserved(), 0u);
}

TEST_F(StreamSessionTest, ASourceWithNoMemoryEndsTheStream) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  source_.refusal = absl::ResourceExhaustedError("no memory for the batch");
  EXPECT_THAT(Handle(*session, Ask({0})),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "no memory for the batch"));
}

TEST_F(StreamSessionTest, ReadingPausesAtTheBacklogAndResumesAtHalf) {
  auto session = NewSession();
  ASSERT_OK(Handle(*session, Open("job", 2)));
  for (uint32_t i = 1; i < kMaxQueuedMessages; ++i) {
    ASSERT_OK(Handle(*session, Ask({100 + i})));  // each one rejected
  }
  EXPECT_TRUE(session->PauseReading());  // PlanOpened + 63 rejections
  uint32_t writes = 0;
  for (;;) {
    StreamSession::Action next = session->Next();
    if (next.resume_reading) break;
    ASSERT_TRUE(next.write.has_value());
    ++writes;
    session->WriteDone(/*ok=*/true, now_);
  }
  EXPECT_EQ(writes, kMaxQueuedMessages / 2);
  EXPECT_FALSE(session->PauseReading());
}

// Sharing is the batch source's business: the session makes the same call
// whether its plan's batches are built for it alone or shared.
TEST_F(StreamSessionTest, SharingAndNotSharingThroughTheSameCall) {
  Pipeline pipeline(PipelineOptions{.workers = 1, .readers = 1});
  SharedBatches shared(&pipeline, {.retention_bytes = 1 << 20});
  StreamSessionContext context = context_;
  context.batches = &shared;
  // The pixels' owner of the batch a session sends, whole.
  auto sent = [this](StreamSession& session) {
    Written written = WriteAll(session);
    EXPECT_EQ(written.ChunkBytes(), kBatchBytes);
    for (const Message& m : written.messages) {
      if (m.batch != nullptr) return m.batch;
    }
    return std::shared_ptr<const BuiltBatch>();
  };

  auto alone = NewSession("", &context);
  ASSERT_OK(Handle(*alone, Open("job-a", 2)));
  WriteAll(*alone);
  ASSERT_OK(Handle(*alone, Ask({0})));
  AwaitWakes(1);
  std::shared_ptr<const BuiltBatch> own = sent(*alone);
  EXPECT_EQ(shared.counts().begin()->second.built, 1u);
  EXPECT_EQ(shared.retained_bytes(), 0u);  // nobody to share with

  auto second = NewSession("", &context);
  ASSERT_OK(Handle(*second, Open("job-b", 2)));
  WriteAll(*second);
  ASSERT_OK(Handle(*alone, Ask({1})));
  AwaitWakes(2);
  std::shared_ptr<const BuiltBatch> first = sent(*alone);
  ASSERT_OK(Handle(*second, Ask({1})));  // retained: answered inline
  EXPECT_EQ(wakes(), 3);
  std::shared_ptr<const BuiltBatch> again = sent(*second);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first, again);  // one build, one buffer for both streams
  EXPECT_NE(own, first);
  const SharingCounts counts = shared.counts().begin()->second;
  EXPECT_EQ(counts.built, 2u);
  EXPECT_EQ(counts.retained, 1u);
  alone->Close();
  second->Close();
}

}  // namespace
}  // namespace batchd::server
