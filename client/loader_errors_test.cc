// Loader tests of failures: rejections, lost and misbehaving daemons,
// protocol violations and Cancel().
#include "client/loader.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/buffer.h"
#include "client/loader_test_util.h"
#include "testing/fake_data_service.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

// The fake service and matchers come with client/loader_test_util.h.

TEST(LoaderTest, RejectedBatchIsAnErrorAndIsAskedForAgain) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 6;
  std::atomic<int> rejections{0};
  FakeServer server(fake, [&rejections](FakeStream& stream) {
    while (stream.ReadRequest()) {
      while (!stream.pending().empty()) {
        const FakeStream::Key key = stream.pending().front();
        if (key == FakeStream::Key{0, 2} && rejections.fetch_add(1) == 0) {
          stream.Reject(key, grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "daemon is busy, try later");
        } else if (!stream.SendBatch(key)) {
          return grpc::Status::OK;  // the client has gone
        }
      }
    }
    return grpc::Status::OK;
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ASSERT_OK((*loader)->Next());
  ASSERT_OK((*loader)->Next());
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("daemon is busy, try later")));
  EXPECT_EQ((*loader)->state().next_batch, 2u);
  ExpectRestOfEpoch(**loader, 0, 2, server.service());
  EXPECT_EQ(rejections.load(), 2);  // batch 2 was asked for twice
}

TEST(LoaderTest, BadPlanFailsCreateWithTheServersStatus) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.plan.set_dataset("bad");
  EXPECT_THAT(Loader::Create(std::move(options)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.dataset: unknown dataset \"bad\"")));
}

// A daemon that refuses the stream for want of room (RESOURCE_EXHAUSTED) is
// asked again with backoff within connect_timeout.
TEST(LoaderTest, AFullDaemonIsAskedAgainUntilItMakesRoom) {
  FakeDataService::Options fake;
  fake.refuse_first = 2;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.connect_timeout = absl::Seconds(20);
  ASSERT_OK(Loader::Create(std::move(options)));
  EXPECT_EQ(server.service().streams_refused(), 2);
  EXPECT_EQ(server.service().streams_opened(), 1);
}

TEST(LoaderTest, ADaemonThatStaysFullFailsCreateWithItsMessage) {
  FakeDataService::Options fake;
  fake.refuse_first = -1;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.connect_timeout = absl::Seconds(2);
  options.reconnect_backoff_min = absl::Milliseconds(100);
  options.reconnect_backoff_max = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      Loader::Create(std::move(options)),
      StatusIs(absl::StatusCode::kResourceExhausted,
               ::testing::AllOf(
                   HasSubstr("refused the stream: identity peer host "
                             "127.0.0.1 has 2 of its 2 streams "
                             "(--max-streams-per-identity)"),
                   HasSubstr("asked again with backoff for 2s"))));
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(2) + absl::Seconds(3)) << took;
  // Asked again, with backoff (0.1, 0.2, 0.4, 0.4, ... s, +-20 %), not in a
  // loop: about 6 refusals in 2 s.
  EXPECT_GE(server.service().streams_refused(), 3);
  EXPECT_LE(server.service().streams_refused(), 12);
}

TEST(LoaderTest, UnreachableDaemonIsUnavailable) {
  std::string endpoint;
  {
    FakeServer server(FakeDataService::Options{},
                      FakeDataService::ServeInOrder());
    endpoint = server.endpoint();
  }
  LoaderOptions options;
  options.endpoint = endpoint;
  options.plan.set_dataset("fake");
  options.connect_timeout = absl::Milliseconds(300);
  EXPECT_THAT(Loader::Create(std::move(options)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("could not connect")));
  LoaderOptions empty;
  EXPECT_THAT(Loader::Create(std::move(empty)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("endpoint")));
}

TEST(LoaderTest, ServerShutdownMidEpochIsUnavailable) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 20;
  FakeServer server(fake, [](FakeStream& stream) {
    int served = 0;
    while (stream.ReadRequest()) {
      while (!stream.pending().empty() && served < 2) {
        stream.SendBatch(stream.pending().front());
        ++served;
      }
    }
    return grpc::Status::OK;
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ASSERT_OK((*loader)->Next());
  ASSERT_OK((*loader)->Next());
  std::thread killer([&server] { server.Shutdown(); });
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("lost the stream")));
  killer.join();
  // Sticky.
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT((*loader)->StartEpoch(1),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST(LoaderTest, ServerEndingTheStreamEarlyIsUnavailable) {
  FakeServer server(FakeDataService::Options{}, [](FakeStream& stream) {
    if (!stream.ReadBatchRequest()) return grpc::Status::OK;
    stream.SendBatch(stream.pending().front());
    return grpc::Status::OK;  // with three batches still outstanding
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::StatusOr<Batch> first = (*loader)->Next();
  ASSERT_OK(first);
  ExpectFakeBatch(*first, 0, 0, server.service());
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not delivered")));
}

// Found by fuzz/fuzz_receive.cc: a daemon that opens every stream and then
// fails it (a retryable code) kept the loader reconnecting forever, each
// open resetting the unavailable clock, and Next() never returned.
TEST(LoaderTest, DaemonFailingEveryStreamAfterOpeningIsUnavailable) {
  std::atomic<int> streams{0};
  FakeServer server(FakeDataService::Options{}, [&streams](FakeStream& stream) {
    ++streams;
    stream.ReadRequest();
    return grpc::Status(grpc::StatusCode::INTERNAL, "broken daemon");
  });
  LoaderOptions options = OptionsFor(server);
  options.reconnect_backoff_min = absl::Milliseconds(10);
  options.reconnect_backoff_max = absl::Milliseconds(50);
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::StatusOr<Batch> next = (*loader)->Next();
  EXPECT_THAT(next, StatusIs(absl::StatusCode::kUnavailable,
                             HasSubstr("no batchd daemon was up and delivering")));
  EXPECT_THAT(next.status().message(), HasSubstr("broken daemon"));
  EXPECT_GE(streams.load(), 2);  // it was retried, with backoff, then given up
}

// Found by fuzz/fuzz_receive.cc: a daemon that says it is draining (an
// in-band UNAVAILABLE) and then never ends its stream left no daemon to ask
// and Next() waiting forever.
TEST(LoaderTest, DrainingDaemonThatNeverEndsItsStreamIsUnavailable) {
  absl::Notification done;
  FakeServer server(FakeDataService::Options{}, [&done](FakeStream& stream) {
    if (!stream.ReadBatchRequest()) return grpc::Status::OK;
    stream.Reject(stream.pending().front(), /*code=*/14, "draining");
    // Holds the stream open, as a stuck daemon would, until the test ends.
    done.WaitForNotificationWithTimeout(absl::Seconds(20));
    return grpc::Status::OK;
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("no batchd daemon was up and delivering")));
  done.Notify();
}

TEST(LoaderTest, StreamErrorIsSurfacedAfterCompleteBatches) {
  FakeServer server(FakeDataService::Options{}, [](FakeStream& stream) {
    if (!stream.ReadBatchRequest()) return grpc::Status::OK;
    stream.SendBatch(stream.pending().front());
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "buffer budget spent");
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ASSERT_OK((*loader)->Next());
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("buffer budget spent")));
}

// A protocol violation: what the fake sends after the first request.
struct Violation {
  std::string name;
  std::function<std::vector<batchd::v1::StreamResponse>(FakeStream&)> messages;
  std::string expected;
};

batchd::v1::StreamResponse Chunk(uint64_t index, uint64_t offset, size_t bytes) {
  batchd::v1::StreamResponse response;
  response.mutable_chunk()->set_batch_index(index);
  response.mutable_chunk()->set_offset(offset);
  response.mutable_chunk()->set_data(std::string(bytes, 'x'));
  return response;
}

batchd::v1::StreamResponse HeaderOf(FakeStream& stream, uint64_t index) {
  batchd::v1::StreamResponse response;
  *response.mutable_header() = stream.Header({0, index});
  return response;
}

class ProtocolViolationTest : public ::testing::TestWithParam<Violation> {};

TEST_P(ProtocolViolationTest, IsInternalAndSticky) {
  const Violation& violation = GetParam();
  FakeServer server(FakeDataService::Options{}, [&violation](FakeStream& stream) {
    if (!stream.ReadBatchRequest()) return grpc::Status::OK;
    for (const batchd::v1::StreamResponse& response :
         violation.messages(stream)) {
      stream.SendRaw(response);
    }
    while (stream.ReadRequest()) {
    }
    return grpc::Status::OK;
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  // The violation may arrive before StartEpoch returns, which then reports
  // it; otherwise the first Next() does.
  const absl::Status started = (*loader)->StartEpoch(0);
  EXPECT_THAT(started.ok() ? (*loader)->Next().status() : started,
              StatusIs(absl::StatusCode::kInternal,
                       ::testing::AllOf(HasSubstr("protocol error"),
                                        HasSubstr(violation.expected))));
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kInternal, ::testing::_));
}

INSTANTIATE_TEST_SUITE_P(
    Violations, ProtocolViolationTest,
    ::testing::Values(
        Violation{"ChunkOverflowsTheBatch",
                  [](FakeStream& stream) {
                    return std::vector<batchd::v1::StreamResponse>{
                        HeaderOf(stream, 0), Chunk(0, 0, 1000),
                        Chunk(0, 1000, 201)};
                  },
                  "overflows"},
        Violation{"ChunkAtTheWrongOffset",
                  [](FakeStream& stream) {
                    return std::vector<batchd::v1::StreamResponse>{
                        HeaderOf(stream, 0), Chunk(0, 1190, 10)};
                  },
                  "expected offset 0"},
        Violation{"ChunkWithoutHeader",
                  [](FakeStream&) {
                    return std::vector<batchd::v1::StreamResponse>{
                        Chunk(0, 0, 10)};
                  },
                  "not the batch being received"},
        Violation{"ChunkOfAnotherBatchInterleaved",
                  [](FakeStream& stream) {
                    return std::vector<batchd::v1::StreamResponse>{
                        HeaderOf(stream, 0), Chunk(0, 0, 100),
                        Chunk(1, 0, 100)};
                  },
                  "not the batch being received"},
        Violation{"HeaderOfUnrequestedBatch",
                  [](FakeStream& stream) {
                    return std::vector<batchd::v1::StreamResponse>{
                        HeaderOf(stream, 7)};
                  },
                  "not awaited"},
        Violation{"HeaderBiggerThanMaxBatchBytes",
                  [](FakeStream& stream) {
                    batchd::v1::StreamResponse response = HeaderOf(stream, 0);
                    response.mutable_header()->set_total_bytes(1201);
                    return std::vector<batchd::v1::StreamResponse>{response};
                  },
                  "more than max_batch_bytes"},
        Violation{"ShapeDisagreesWithBytes",
                  [](FakeStream& stream) {
                    batchd::v1::StreamResponse response = HeaderOf(stream, 0);
                    response.mutable_header()->set_shape(0, 3);
                    return std::vector<batchd::v1::StreamResponse>{response};
                  },
                  "shape"},
        Violation{"EmptyMessage",
                  [](FakeStream&) {
                    return std::vector<batchd::v1::StreamResponse>{
                        batchd::v1::StreamResponse()};
                  },
                  "empty or unknown"},
        Violation{"SecondOpened",
                  [](FakeStream&) {
                    batchd::v1::StreamResponse response;
                    response.mutable_opened()->set_window(9);
                    return std::vector<batchd::v1::StreamResponse>{response};
                  },
                  "second `opened`"},
        Violation{"RejectionOfUnrequestedBatch",
                  [](FakeStream&) {
                    batchd::v1::StreamResponse response;
                    response.mutable_rejected()->set_batch_index(6);
                    response.mutable_rejected()->set_code(8);
                    return std::vector<batchd::v1::StreamResponse>{response};
                  },
                  "not awaited"}),
    [](const ::testing::TestParamInfo<Violation>& info) {
      return info.param.name;
    });

// A daemon that answers the plan and then never sends a batch: a Next()
// blocked on it is woken by Cancel() from another thread, and every later
// call fails the same way.
TEST(LoaderTest, CancelWakesABlockedNextWithCancelled) {
  FakeServer server(FakeDataService::Options{}, [](FakeStream& stream) {
    while (stream.ReadRequest()) {
    }
    return grpc::Status::OK;
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::Notification entered;
  absl::StatusOr<Batch> blocked(absl::UnknownError("not returned"));
  std::thread consumer([&] {
    entered.Notify();
    blocked = (*loader)->Next();
  });
  entered.WaitForNotification();
  // Whether the consumer is inside Next() yet or not, it returns CANCELLED.
  (*loader)->Cancel();
  consumer.join();
  EXPECT_THAT(blocked, StatusIs(absl::StatusCode::kCancelled,
                                HasSubstr("the loader was cancelled")));
  EXPECT_THAT((*loader)->Next(), StatusIs(absl::StatusCode::kCancelled,
                                          HasSubstr("cancelled")));
  EXPECT_THAT((*loader)->StartEpoch(1),
              StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  (*loader)->Cancel();  // idempotent
  loader->reset();
}

TEST(LoaderTest, CancelKeepsReturnedBatchesValidAndStopsTheRest) {
  FakeServer server(FakeDataService::Options{},
                    FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::StatusOr<Batch> first = (*loader)->Next();
  ASSERT_OK(first);
  (*loader)->Cancel();
  // Ready batches are not handed out after Cancel().
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  ExpectFakeBatch(*first, 0, 0, server.service());
  loader->reset();
  ExpectFakeBatch(*first, 0, 0, server.service());
}

TEST(LoaderTest, ZeroWindowFromServerFailsCreate) {
  FakeDataService::Options fake;
  fake.window = 0;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  EXPECT_THAT(Loader::Create(OptionsFor(server, /*prefetch=*/0)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("window is 0")));
}


}  // namespace
}  // namespace batchd::client
