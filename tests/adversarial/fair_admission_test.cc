// Adversarial tests of admission per connection and per identity
// (RELIABILITY.md, "Resource model"): a process that holds plan-less
// streams on the trainer's host, and an identity that opens 1,024 streams
// of a 1x1 plan, against a real daemon and a well-behaved trainer.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/channel_security.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using ::batchd::client::ChannelSecurity;
using ::batchd::client::Loader;
using ::batchd::client::LoaderOptions;
using ::batchd::client::NewBatchdChannel;
using ::testing::HasSubstr;
using v1::StreamRequest;
using v1::StreamResponse;

// The trainer's throughput beside the hog, as a share of its throughput
// alone, must be at least this. Measured x0.82-1.27 on a quiet host and
// x0.58 beside two compilers on its 2 cores; before per-identity admission
// the trainer could not open a stream at all.
constexpr double kMinThroughputShare = 0.5;

// One StreamBatches call made with the callback API, so that a test holds
// a thousand of them without a thread each. With `open` it sends that
// first message; without, it sends nothing (a plan-less call). It reads
// until the call ends. Owned by the test; never deleted before it ends.
class Call : public grpc::ClientBidiReactor<StreamRequest, StreamResponse> {
 public:
  Call(v1::DataService::Stub* stub, const StreamRequest* open,
       std::function<void(Call*)> done)
      : open_(open), done_(std::move(done)) {
    stub->async()->StreamBatches(&context_, this);
    if (open_ != nullptr) StartWrite(open_);
    StartRead(&response_);
    StartCall();
  }
  void OnWriteDone(bool /*ok*/) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (response_.has_opened()) opened_ = true;
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    ended_ = true;
    done_(this);
  }
  void Cancel() { context_.TryCancel(); }
  bool opened() const { return opened_.load(); }
  bool ended() const { return ended_.load(); }
  // Valid once ended().
  const grpc::Status& status() const { return status_; }

 private:
  grpc::ClientContext context_;
  const StreamRequest* const open_;
  const std::function<void(Call*)> done_;
  StreamResponse response_;
  std::atomic<bool> opened_{false};
  std::atomic<bool> ended_{false};
  grpc::Status status_;
};

// Calls that end are counted; every call is kept until the test ends.
class Calls {
 public:
  // Starts a call on `stub` (with `open`, or plan-less); `again` is called,
  // under no lock, when it ends, and may start another.
  void Start(v1::DataService::Stub* stub, const StreamRequest* open,
             std::function<void(const grpc::Status&)> again = nullptr) {
    auto call = std::make_unique<Call>(
        stub, open, [this, again](Call* ended) {
          {
            absl::MutexLock lock(&mu_);
            ++ended_;
          }
          if (again) again(ended->status());
        });
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }
  // Cancels every call and waits (up to `within`) for all to end.
  bool CancelAll(absl::Duration within) {
    std::vector<Call*> calls;
    {
      absl::MutexLock lock(&mu_);
      for (auto& c : calls_) calls.push_back(c.get());
    }
    for (Call* c : calls) c->Cancel();
    absl::MutexLock lock(&mu_);
    auto all_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ == calls_.size();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&all_ended), within);
  }
  // Blocks until every call has either ended or been answered `opened`,
  // up to `within`.
  bool AwaitSettled(absl::Duration within) {
    const absl::Time deadline = absl::Now() + within;
    while (absl::Now() < deadline) {
      bool settled = true;
      {
        absl::MutexLock lock(&mu_);
        for (auto& c : calls_) {
          if (!c->ended() && !c->opened()) settled = false;
        }
      }
      if (settled) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }
  std::vector<const Call*> snapshot() {
    absl::MutexLock lock(&mu_);
    std::vector<const Call*> calls;
    for (auto& c : calls_) calls.push_back(c.get());
    return calls;
  }
  // Destroys the calls. REQUIRES: all ended.
  void Clear() {
    absl::MutexLock lock(&mu_);
    calls_.clear();
    ended_ = 0;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  size_t ended_ ABSL_GUARDED_BY(mu_) = 0;
};

class FairAdmissionTest : public DatasetSuite</*images=*/64, /*classes=*/4,
                                              /*seed=*/41> {
 protected:
  static v1::Plan TrainerPlan() {
    v1::Plan plan = TrainPlan("d", /*batch_size=*/8, /*size=*/64, /*seed=*/5);
    plan.set_job("trainer");
    return plan;
  }
};

// Item: plan-less streams were capped per client host (64), so a process
// on the trainers' host that re-opened its 64 as they timed out refused 56
// of 57 TCP opens of a well-behaved trainer over 30 s (cb0d4d7). They are
// now counted per connection, and at a cap the oldest plan-less stream
// ends, not the new one: every open of the trainer succeeds.
TEST_F(FairAdmissionTest, PlanlessStreamsOnTheTrainersHostNeverRefuseIt) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2",
                            "--open-timeout", "2s"}));
  // The attacker: 8 connections x 64 plan-less calls, the host's whole
  // --max-streams-per-identity (512), each re-opened as soon as it ends,
  // up to kMaxOpens in all.
  constexpr int kConnections = 8;
  constexpr int kPerConnection = 64;
  constexpr int kMaxOpens = 4000;
  std::vector<std::unique_ptr<v1::DataService::Stub>> stubs;
  for (int c = 0; c < kConnections; ++c) {
    stubs.push_back(v1::DataService::NewStub(NewBatchdChannel(
        daemon->endpoint(), ChannelSecurity(), /*fresh_connection=*/true)));
  }
  Calls attacker;
  std::atomic<int> opens{0};
  std::atomic<int> ended_for_room{0};
  std::atomic<bool> stop{false};
  std::function<void(int)> open_one = [&](int c) {
    if (stop.load() || opens.fetch_add(1) >= kMaxOpens) return;
    attacker.Start(stubs[c].get(), /*open=*/nullptr,
                   [&, c](const grpc::Status& status) {
                     if (status.error_code() ==
                         grpc::StatusCode::RESOURCE_EXHAUSTED) {
                       ++ended_for_room;
                     }
                     open_one(c);
                   });
  };
  for (int c = 0; c < kConnections; ++c) {
    for (int k = 0; k < kPerConnection; ++k) open_one(c);
  }
  absl::SleepFor(absl::Milliseconds(500));  // the attacker holds its places

  // The trainer: kTrainerStreams loaders, one every 150 ms (over two of
  // the attacker's open-timeout cycles), each kept open (a stream with its
  // plan), each given 5 s to open.
  constexpr int kTrainerStreams = 24;
  constexpr absl::Duration kConnectTimeout = absl::Seconds(5);
  std::vector<std::unique_ptr<Loader>> loaders;
  int opened = 0;
  absl::Duration slowest;
  std::vector<std::string> failures;
  for (int i = 0; i < kTrainerStreams; ++i) {
    LoaderOptions options;
    options.endpoint = daemon->endpoint();
    options.plan = TrainerPlan();
    options.connect_timeout = kConnectTimeout;
    options.shared_memory = false;
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(std::move(options));
    const absl::Duration took = absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(150));
    slowest = std::max(slowest, took);
    if (loader.ok()) {
      ++opened;
      loaders.push_back(*std::move(loader));
    } else {
      failures.push_back(loader.status().ToString());
    }
  }
  // The last trainer stream delivers.
  if (!loaders.empty()) {
    ASSERT_OK(loaders.back()->StartEpoch(0));
    ASSERT_OK(loaders.back()->Next().status());
  }
  const int attacker_opens = std::min(opens.load(), kMaxOpens);
  stop = true;
  loaders.clear();
  std::printf("trainer: %d of %d opens succeeded, slowest %s; attacker: %d "
              "plan-less opens, %d ended to make room\n",
              opened, kTrainerStreams, absl::FormatDuration(slowest).c_str(),
              attacker_opens, ended_for_room.load());
  EXPECT_EQ(opened, kTrainerStreams)
      << "first failures: "
      << (failures.empty() ? std::string() : failures.front());
  EXPECT_LT(slowest, kConnectTimeout);
  // The attack ran: the trainer's streams took places of the attacker's.
  EXPECT_GE(ended_for_room.load(), kTrainerStreams);
  EXPECT_TRUE(attacker.CancelAll(absl::Seconds(10)));
  attacker.Clear();
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// Item: 1,024 streams with a valid 1x1 plan held 3,072 bytes of budget and
// every --max-open-streams place, refusing everyone, with no time limit
// (cb0d4d7); with tokens on, any token could do it. Now one identity holds
// at most --max-streams-per-identity (half of --max-open-streams) and its
// share of the budget, each stream charged at least --max-buffer-bytes /
// --max-open-streams, and the other identity trains beside it.
TEST_F(FairAdmissionTest, AnIdentityOfTinyPlansIsRefusedAtItsShare) {
  const std::string dir = MakeTempDir("fair-admission");
  const std::string hog_token = "0123456789abcdef0123456789abcdef";
  const std::string trainer_token = "fedcba9876543210fedcba9876543210";
  std::ofstream(dir + "/tokens") << hog_token << "\n"
                                 << trainer_token << "\n";
  std::ofstream(dir + "/trainer.token") << trainer_token << "\n";
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2",
                            "--auth-token-file", dir + "/tokens"}));
  LoaderOptions trainer;
  trainer.endpoint = daemon->endpoint();
  trainer.plan = TrainerPlan();
  trainer.security.token_file = dir + "/trainer.token";
  const auto measure = [&] {
    absl::StatusOr<double> rate =
        ImagesPerSecond(trainer, absl::Seconds(2));
    EXPECT_TRUE(rate.ok()) << rate.status();
    return rate.ok() ? *rate : 0.0;
  };
  const double alone = measure();

  // The hog: 1,024 streams of a 1x1 plan over 16 connections, its jobs
  // spread over 8 names (under --max-streams-per-job each).
  constexpr int kHogStreams = 1024;
  constexpr int kConnections = 16;
  ChannelSecurity hog_security;
  hog_security.token = hog_token;
  std::vector<std::unique_ptr<v1::DataService::Stub>> stubs;
  for (int c = 0; c < kConnections; ++c) {
    stubs.push_back(v1::DataService::NewStub(NewBatchdChannel(
        daemon->endpoint(), hog_security, /*fresh_connection=*/true)));
  }
  std::vector<StreamRequest> opens(8);
  for (int j = 0; j < 8; ++j) {
    v1::Plan plan = TrainPlan("d", /*batch_size=*/1, /*size=*/1, /*seed=*/1);
    plan.set_job(absl::StrCat("hog-", j));
    *opens[j].mutable_open()->mutable_plan() = plan;
  }
  Calls hog;
  const absl::Time hog_start = absl::Now();
  for (int i = 0; i < kHogStreams; ++i) {
    hog.Start(stubs[i % kConnections].get(), &opens[i % 8]);
  }
  ASSERT_TRUE(hog.AwaitSettled(absl::Seconds(30)));
  const absl::Duration hog_settled = absl::Now() - hog_start;
  int held = 0, refused = 0;
  std::vector<std::string> other;
  for (const Call* call : hog.snapshot()) {
    if (!call->ended()) {
      ++held;
      continue;
    }
    // Refused at its share of the places, or (a stream ended for a place
    // that had sent its plan after all keeps it, one above the cap) at its
    // share of the budget, where each stream costs at least 2 MiB.
    const grpc::Status& status = call->status();
    const std::string& message = status.error_message();
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
        absl::StrContains(message,
                          "identity token on line 1 of --auth-token-file") &&
        (absl::StrContains(message, "--max-streams-per-identity") ||
         absl::StrContains(message, "--max-identity-buffer-share"))) {
      ++refused;
    } else if (other.size() < 3) {
      other.push_back(absl::StrCat(status.error_code(), " ",
                                   status.error_message()));
    }
  }

  // The trainer beside the hog: the better of up to three 2-s windows,
  // against the better of alone before and alone after (the host's other
  // load moves single windows).
  double during = measure();
  if (during < kMinThroughputShare * alone) {
    during = std::max({during, measure(), measure()});
  }
  std::printf("hog: %d of %d streams of a 1x1 plan held, %d refused naming "
              "its share, settled in %s; trainer %.0f images/s alone, %.0f "
              "beside the hog (x%.2f)\n",
              held, kHogStreams, refused,
              absl::FormatDuration(hog_settled).c_str(), alone, during,
              alone > 0 ? during / alone : 0);
  EXPECT_EQ(held, kHogStreams / 2);
  EXPECT_EQ(refused, kHogStreams / 2)
      << "other outcomes: " << (other.empty() ? "" : other.front());
  double best_alone = alone;
  if (during < kMinThroughputShare * alone) {
    EXPECT_TRUE(hog.CancelAll(absl::Seconds(10)));
    best_alone = std::min(alone, measure());
  }
  EXPECT_GE(during, kMinThroughputShare * best_alone)
      << "alone " << alone << " images/s, beside the hog " << during;
  EXPECT_TRUE(hog.CancelAll(absl::Seconds(10)));
  hog.Clear();
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

}  // namespace
}  // namespace batchd::testing
