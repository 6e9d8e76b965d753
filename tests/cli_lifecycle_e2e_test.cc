// End-to-end: the batchd-client CLI against a real daemon, and what a client
// sees when its daemon dies (SIGKILL) or is stopped (SIGTERM) mid-stream:
// an error, never a hang.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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
using ::testing::Not;

constexpr int kImages = 40;
// Guards against hangs only; every wait normally ends far sooner.
constexpr auto kHangGuard = std::chrono::seconds(30);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliLifecycleTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/4,
                          /*seed=*/77> {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(
        daemon_, DaemonProcess::Start(
                     {"--dataset", "d=" + *dataset_, "--workers", "1"}));
  }
  void TearDown() override {
    if (daemon_ != nullptr && daemon_->pid() > 0) {
      EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Log();
    }
  }

  std::vector<std::string> Cli(std::vector<std::string> args) const {
    std::vector<std::string> argv = {BuiltBinary("client/batchd-client"),
                                     "--endpoint", daemon_->endpoint()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // Reads from a Loader on its own thread until Next() fails with anything
  // but OUT_OF_RANGE (starting the next epoch on OUT_OF_RANGE). `batches`
  // counts the batches received.
  struct Reader {
    std::unique_ptr<Loader> loader;
    std::atomic<int> batches{0};
    std::promise<absl::Status> result;
  };
  static std::shared_ptr<Reader> StartReader(std::unique_ptr<Loader> loader) {
    auto reader = std::make_shared<Reader>();
    reader->loader = std::move(loader);
    // Detached: if the loader hangs, the test fails at the guard instead of
    // hanging in a join.
    std::thread([reader] {
      for (uint64_t epoch = 0; epoch < 10000; ++epoch) {
        absl::Status started = reader->loader->StartEpoch(epoch);
        if (!started.ok()) {
          reader->result.set_value(started);
          return;
        }
        for (;;) {
          absl::StatusOr<Batch> batch = reader->loader->Next();
          if (absl::IsOutOfRange(batch.status())) break;
          if (!batch.ok()) {
            reader->result.set_value(batch.status());
            return;
          }
          ++reader->batches;
        }
      }
      reader->result.set_value(absl::OkStatus());
    }).detach();
    return reader;
  }

  absl::StatusOr<std::unique_ptr<Loader>> NewLoader(uint32_t prefetch) {
    LoaderOptions options;
    options.endpoint = daemon_->endpoint();
    options.plan = TrainPlan("d", 4, 32, 6);
    options.prefetch = prefetch;
    options.connect_timeout = absl::Seconds(5);
    // A killed daemon is reported well within the test's hang guard.
    options.unavailable_timeout = absl::Seconds(2);
    return Loader::Create(std::move(options));
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(CliLifecycleTest, CliStreamsVerifiesAndReportsThroughput) {
  const std::string dump1 = MakeTempDir("dump") + "/a.txt";
  const std::string dump2 = MakeTempDir("dump") + "/b.txt";
  CommandResult run = RunCommand(
      Cli({"--dataset", "d", "--epochs", "2", "--batch_size", "8", "--size",
           "32", "--verify", "--dump", dump1}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("5 batches per epoch"));
  EXPECT_THAT(run.output, HasSubstr("epoch 0: 5 batches, 40 images"));
  EXPECT_THAT(run.output, HasSubstr("epoch 1: 5 batches, 40 images"));
  EXPECT_THAT(run.output, HasSubstr("verify: epoch 0 ok"));
  EXPECT_THAT(run.output, HasSubstr("verify: epoch 1 ok"));
  EXPECT_THAT(run.output, HasSubstr("total: 80 images"));
  EXPECT_THAT(run.output, HasSubstr("images/s"));
  EXPECT_THAT(run.output, HasSubstr("MB/s"));
  EXPECT_THAT(run.output, HasSubstr("waited"));
  EXPECT_THAT(run.output, HasSubstr("daemon workers: 1"));
  EXPECT_THAT(run.output, Not(HasSubstr("MISMATCH")));

  // The dump (hash and samples per batch) is the same on a second run and
  // changes with the seed.
  const std::string first = ReadFile(dump1);
  EXPECT_EQ(std::count(first.begin(), first.end(), '\n'), 10);
  run = RunCommand(Cli({"--dataset", "d", "--epochs", "2", "--batch_size",
                        "8", "--size", "32", "--dump", dump2}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(ReadFile(dump2), first);
  run = RunCommand(Cli({"--dataset", "d", "--epochs", "2", "--batch_size",
                        "8", "--size", "32", "--seed", "1", "--dump", dump2}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(ReadFile(dump2), first);

  // Sharded with drop_last: verify knows what each rank should get.
  for (const char* rank : {"0", "1", "2"}) {
    run = RunCommand(Cli({"--dataset", "d", "--batch_size", "4", "--size",
                          "32", "--world_size", "3", "--rank", rank,
                          "--drop_last", "--verify"}));
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output, HasSubstr("verify: epoch 0 ok")) << run.output;
  }
}

TEST_F(CliLifecycleTest, CliReportsTheDaemonsErrors) {
  CommandResult run = RunCommand(
      Cli({"--dataset", "nope", "--batch_size", "8", "--size", "32"}));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("unknown dataset 'nope'"));
  EXPECT_THAT(run.output, HasSubstr("INVALID_ARGUMENT"));

  run = RunCommand(Cli({"--dataset", "nope", "--verify"}));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("'nope' is not served"));

  run = RunCommand(Cli({"--dataset", "d", "--batch_size", "0"}));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("batch_size is 0"));

  run = RunCommand(Cli({"--list"}));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("d\t40 samples\t4 classes"));
}

TEST_F(CliLifecycleTest, KilledDaemonGivesUnavailableNotAHang) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader, NewLoader(2));
  ASSERT_EQ(loader->batches_per_epoch(), 10u);
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Batch> batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
  }
  daemon_->Kill();

  std::shared_ptr<Reader> reader = StartReader(std::move(loader));
  std::future<absl::Status> done = reader->result.get_future();
  ASSERT_EQ(done.wait_for(kHangGuard), std::future_status::ready)
      << "Next() hangs after the daemon was killed";
  const absl::Status status = done.get();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  // Only what was already in flight (at most the ring) arrived after the
  // kill; the epoch did not complete.
  EXPECT_LE(reader->batches.load(), 2);

  // A new loader cannot connect: UNAVAILABLE, not a hang.
  LoaderOptions options;
  options.endpoint = daemon_->endpoint();
  options.plan = TrainPlan("d", 4, 32, 6);
  options.connect_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<Loader>> again =
      Loader::Create(std::move(options));
  EXPECT_TRUE(absl::IsUnavailable(again.status())) << again.status();
}

TEST_F(CliLifecycleTest, SigtermWithAnOpenStreamDrainsAndExitsZero) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader, NewLoader(3));
  std::shared_ptr<Reader> reader = StartReader(std::move(loader));
  std::future<absl::Status> done = reader->result.get_future();
  // Wait until the stream is flowing.
  while (reader->batches.load() < 3 &&
         done.wait_for(std::chrono::milliseconds(5)) !=
             std::future_status::ready) {
  }
  ASSERT_GE(reader->batches.load(), 3);

  // The reader keeps asking for batches throughout; the daemon lets the
  // stream run for its grace period, then ends it and exits cleanly.
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Log();
  EXPECT_THAT(daemon_->Log(), HasSubstr("draining"));
  EXPECT_THAT(daemon_->Log(), HasSubstr("batchd: stopped"));
  ASSERT_EQ(done.wait_for(kHangGuard), std::future_status::ready)
      << "Next() hangs after the daemon stopped";
  const absl::Status status = done.get();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

}  // namespace
}  // namespace batchd::testing
