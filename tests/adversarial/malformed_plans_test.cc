// Adversarial: plans whose string fields are not valid UTF-8. libprotobuf
// used to log one ~209-byte ERROR line for each such message it parsed
// ("String field 'batchd.v1.Plan.job' contains invalid UTF-8 data ..."), so
// any client (with tokens on, any token) could write the daemon's log at
// the rate it could open streams. Each such plan is now refused with
// INVALID_ARGUMENT naming the field, and the daemon's log stays within a
// few kilobytes whatever the number of plans.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"
#include "testing/status_matchers.h"

namespace batchd::testing {
namespace {

using ::testing::HasSubstr;

// 16,000 plans over kCallers connections, one call after another on each.
constexpr int kCallers = 4;
constexpr int kPlansPerCaller = 4000;
// What the daemon may add to its log during the attack: a handful of
// rate-limited lines. Before, 16,000 plans wrote 16,000 lines (3.4 MB).
constexpr size_t kMaxLogGrowthBytes = 4096;

constexpr char kStreamMethod[] = "/batchd.v1.DataService/StreamBatches";

// One StreamBatches call that sends `request` (raw bytes) and reads until
// the daemon ends the call.
class OneMessageCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  OneMessageCall(grpc::GenericStub* stub, const std::string& request) {
    grpc::Slice slice(request);
    request_ = grpc::ByteBuffer(&slice, 1);
    context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    stub->PrepareBidiStreamingCall(&context_, kStreamMethod,
                                   grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&response_);
    StartCall();
  }

  // Blocks until the call ends; returns its status and how many messages
  // the daemon sent before it.
  grpc::Status Await(int* responses) {
    done_.WaitForNotification();
    *responses = responses_;
    return status_;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++responses_;
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  int responses_ = 0;  // read only after done_
  grpc::Status status_;
  absl::Notification done_;
};

// A channel of its own (gRPC would otherwise share one connection between
// channels with the same target and arguments).
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& target, int id) {
  grpc::ChannelArguments args;
  args.SetInt("batchd.test.channel", id);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

class MalformedPlansTest
    : public DatasetSuite</*images=*/16, /*classes=*/2, /*seed=*/61> {
 protected:
  // A serialized StreamRequest opening a good plan whose job is "evi"
  // followed by byte 0xff: not UTF-8 from offset 3. Built from protobuf's
  // own bytes with the job's bytes replaced, so this process's protobuf
  // never serializes (and logs) invalid UTF-8 itself.
  static std::string BadOpenBytes() {
    v1::StreamRequest open;
    v1::Plan* plan = open.mutable_open()->mutable_plan();
    *plan = TrainPlan("d", /*batch_size=*/4, /*size=*/32, /*seed=*/1);
    plan->set_job("evil");
    open.mutable_open()->set_window(2);
    std::string bytes = open.SerializeAsString();
    const size_t at = bytes.find("evil");
    EXPECT_NE(at, std::string::npos);
    EXPECT_EQ(bytes.find("evil", at + 1), std::string::npos);
    bytes[at + 3] = '\xff';
    return bytes;
  }
};

TEST_F(MalformedPlansTest, InvalidUtf8PlansAreRefusedWithoutFillingTheLog) {
  const std::string dir = MakeTempDir("adv-utf8");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      // One planless stream per connection, and each caller has a
      // connection of its own: a refused stream gives its place back
      // before its status reaches the caller, so the caller's next call
      // never finds its connection at the cap (before, each refused stream
      // held its place until gRPC's OnDone, and a loaded daemon refused
      // some with RESOURCE_EXHAUSTED; the bound's hits are asserted 0).
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "1",
                            "--max-planless-streams-per-connection", "1",
                            "--metrics-port", "0",
                            "--metrics-port-file", dir + "/metrics-port"}));
  const std::string metrics_port = ReadPortFile(dir + "/metrics-port");
  ASSERT_FALSE(metrics_port.empty()) << daemon->Log();
  const std::string request = BadOpenBytes();
  // The daemon is up and has written what it writes at start.
  ASSERT_OK(GetServerStatus(daemon->endpoint()).status());
  const size_t log_before = daemon->Log().size();

  absl::Mutex mu;
  int refused = 0;            // INVALID_ARGUMENT naming the field
  std::vector<std::string> others;  // anything else, for the failure message
  const absl::Time start = absl::Now();
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      grpc::GenericStub stub(OwnChannel(daemon->endpoint(), c));
      int mine = 0;
      std::vector<std::string> odd;
      for (int i = 0; i < kPlansPerCaller; ++i) {
        OneMessageCall call(&stub, request);
        int responses = 0;
        const grpc::Status status = call.Await(&responses);
        if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
            absl::StrContains(status.error_message(),
                              "plan.job is not valid UTF-8 (byte 0xff at "
                              "offset 3)") &&
            responses == 0) {
          ++mine;
        } else if (odd.size() < 3) {
          odd.push_back(absl::StrCat(status.error_code(), " \"",
                                     status.error_message(), "\" after ",
                                     responses, " messages"));
        }
      }
      absl::MutexLock lock(&mu);
      refused += mine;
      others.insert(others.end(), odd.begin(), odd.end());
    });
  }
  for (std::thread& t : callers) t.join();
  const absl::Duration took = absl::Now() - start;
  const std::string log = daemon->Log();
  const size_t grown = log.size() - log_before;
  std::fprintf(stderr,
               "%d plans with an invalid UTF-8 job in %.1f s: %d refused "
               "naming the field; the daemon's log grew by %zu bytes\n",
               kCallers * kPlansPerCaller, absl::ToDoubleSeconds(took),
               refused, grown);
  EXPECT_EQ(refused, kCallers * kPlansPerCaller)
      << "first other outcomes: " << absl::StrJoin(others, "; ");
  EXPECT_LE(grown, kMaxLogGrowthBytes) << log.substr(log_before, 2048);
  // Each one counted.
  ASSERT_OK_AND_ASSIGN(Page page,
                       ScrapeWithPrometheusParser("http://127.0.0.1:" +
                                                  metrics_port + "/metrics"));
  EXPECT_EQ(page["batchd_rejected_requests_total{code=\"INVALID_ARGUMENT\"}"],
            kCallers * kPlansPerCaller);
  EXPECT_EQ(page["batchd_bound_hits_total{bound=\"planless_streams_per_"
                 "connection\"}"],
            0);

  // The daemon still serves a good plan.
  v1::Plan good = TrainPlan("d", /*batch_size=*/4, /*size=*/32, /*seed=*/1);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> batches,
                       ReadEpochs(daemon->endpoint(), good, /*first_epoch=*/0));
  EXPECT_EQ(batches.size(), 4u);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// The other way round: a string the daemon serves that is not UTF-8 (a
// class directory named in Latin-1) makes libprotobuf log one line each
// time it serializes it, so every ListDatasets call used to write one.
// libprotobuf's lines are now rate-limited.
TEST_F(MalformedPlansTest, ServedStringsThatAreNotUtf8LogAFewLines) {
  ASSERT_OK_AND_ASSIGN(std::string root,
                       MakeDataset(/*images=*/4, /*classes=*/2, /*seed=*/67));
  std::string first_class;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (entry.is_directory()) first_class = entry.path().string();
  }
  ASSERT_FALSE(first_class.empty());
  std::filesystem::rename(first_class, root + "/caf\xe9");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "latin1=" + root, "--workers", "1"}));
  ASSERT_OK(GetServerStatus(daemon->endpoint()).status());
  const size_t log_before = daemon->Log().size();
  grpc::GenericStub stub(OwnChannel(daemon->endpoint(), 0));
  constexpr int kCalls = 2000;
  int served = 0;
  for (int i = 0; i < kCalls; ++i) {
    grpc::ByteBuffer request(nullptr, 0), response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&context, "/batchd.v1.DataService/ListDatasets",
                   grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    served += status.ok();
  }
  const std::string log = daemon->Log();
  const size_t grown = log.size() - log_before;
  std::fprintf(stderr,
               "%d ListDatasets calls serving a Latin-1 class name: the "
               "daemon's log grew by %zu bytes\n",
               kCalls, grown);
  EXPECT_EQ(served, kCalls);
  EXPECT_LE(grown, kMaxLogGrowthBytes) << log.substr(log_before, 2048);
  EXPECT_THAT(log.substr(log_before), HasSubstr("[libprotobuf ERROR"));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

}  // namespace
}  // namespace batchd::testing
