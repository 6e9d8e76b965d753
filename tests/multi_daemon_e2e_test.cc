// End-to-end: one client over several real daemon processes. Because a batch
// is a pure function of (plan, epoch, index), the epoch read through many
// daemons (spread, failed over, hedged, drained, re-resolved) must be
// byte-identical to the same epoch read from one daemon: the record
// comparison below checks every sample exactly once and every byte.
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;
using ::testing::HasSubstr;

constexpr int kImages = 240;
constexpr uint32_t kBatch = 8;  // 30 batches per epoch
constexpr uint32_t kSize = 32;

class MultiDaemonTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/6,
                          /*seed=*/5> {
 protected:
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemon() {
    return DaemonProcess::Start(
        {"--dataset", "d=" + *dataset_, "--workers", "1"});
  }

  // Starts `n` daemons into `daemons`.
  static void StartDaemons(int n,
                           std::vector<std::unique_ptr<DaemonProcess>>* daemons) {
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<std::unique_ptr<DaemonProcess>> d = StartDaemon();
      ASSERT_TRUE(d.ok()) << d.status();
      daemons->push_back(*std::move(d));
    }
  }

  static std::string Endpoints(
      const std::vector<std::unique_ptr<DaemonProcess>>& daemons) {
    std::vector<std::string> list;
    for (const auto& d : daemons) list.push_back(d->endpoint());
    return absl::StrJoin(list, ",");
  }

  static batchd::v1::Plan Plan() { return TrainPlan("d", kBatch, kSize, 77); }

  // The reference: epoch `epoch` from one fresh daemon.
  static std::vector<BatchRecord> Reference(uint64_t epoch) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d = StartDaemon();
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return {};
    absl::StatusOr<std::vector<BatchRecord>> records =
        ReadEpochs((*d)->endpoint(), Plan(), epoch);
    EXPECT_TRUE(records.ok()) << records.status();
    return records.ok() ? *records : std::vector<BatchRecord>{};
  }

  static LoaderOptions Options(const std::string& endpoint) {
    LoaderOptions options;
    options.endpoint = endpoint;
    options.plan = Plan();
    options.prefetch = 6;
    options.reconnect_backoff_max = absl::Milliseconds(500);
    return options;
  }
};

TEST_F(MultiDaemonTest, ThreeDaemonsGiveTheBytesOfOne) {
  const std::vector<BatchRecord> reference = Reference(0);
  ASSERT_EQ(reference.size(), kImages / kBatch);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(3, &daemons);
  LoaderOptions options = Options(Endpoints(daemons));
  options.last_epoch = 0;  // served counts exactly this epoch
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                           Loader::Create(std::move(options)));
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records, ReadFrom(*loader));
  EXPECT_EQ(records, reference);
  const Loader::Stats stats = loader->stats();
  ASSERT_EQ(stats.daemons.size(), 3u);
  uint64_t served = 0;
  for (const auto& d : stats.daemons) {
    EXPECT_GT(d.served, 0u) << d.endpoint << " served nothing";
    EXPECT_EQ(d.state, "up");
    served += d.served;
  }
  EXPECT_EQ(served, reference.size());
  EXPECT_EQ(stats.rerequested, 0u);
}

TEST_F(MultiDaemonTest, KillNineMidEpochLosesNothing) {
  const std::vector<BatchRecord> reference = Reference(1);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(3, &daemons);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                           Loader::Create(Options(Endpoints(daemons))));
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                           ReadFrom(*loader, /*max_batches=*/8));
  daemons[0]->Kill();  // one of three, with batches outstanding
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> more,
                           ReadFrom(*loader, /*max_batches=*/8));
  records.insert(records.end(), more.begin(), more.end());
  daemons[1]->Kill();  // two of three
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> rest, ReadFrom(*loader));
  records.insert(records.end(), rest.begin(), rest.end());
  EXPECT_EQ(records, reference);
  const Loader::Stats stats = loader->stats();
  EXPECT_EQ(stats.daemons[0].state == "up", false);
  EXPECT_EQ(stats.daemons[1].state == "up", false);
  EXPECT_GT(stats.daemons[2].served, 0u);
  EXPECT_FALSE(stats.daemons[0].last_error.ok());
}

TEST_F(MultiDaemonTest, SigtermDrainsWithoutLossAndExitsZero) {
  const std::vector<BatchRecord> reference = Reference(2);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(2, &daemons);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                           Loader::Create(Options(Endpoints(daemons))));
  ASSERT_TRUE(loader->StartEpoch(2).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                           ReadFrom(*loader, /*max_batches=*/6));
  // Drained while the client keeps reading; Stop() waits for the exit.
  int exit_code = -2;
  const absl::Time stop_start = absl::Now();
  absl::Duration stop_took;
  std::thread stopper([&] {
    exit_code = daemons[0]->Stop();
    stop_took = absl::Now() - stop_start;
  });
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> rest, ReadFrom(*loader));
  stopper.join();
  records.insert(records.end(), rest.begin(), rest.end());
  EXPECT_EQ(records, reference);
  EXPECT_EQ(exit_code, 0) << daemons[0]->Log();
  // The drain deadline is 10 s by default; a drained daemon is done sooner.
  EXPECT_LT(stop_took, absl::Seconds(15));
}

// Addresses handed to the loader through its resolver: the test changes
// them as DNS would.
class FakeDns {
 public:
  void Set(std::vector<std::string> addresses) {
    absl::MutexLock lock(&mu_);
    addresses_ = std::move(addresses);
  }
  client::Resolver resolver() {
    return [this](const std::string& host, const std::string& port)
               -> absl::StatusOr<std::vector<std::string>> {
      EXPECT_EQ(host, "batchd.test");
      EXPECT_EQ(port, "7070");
      absl::MutexLock lock(&mu_);
      return addresses_;
    };
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

TEST_F(MultiDaemonTest, DaemonsAppearingAndLeavingDnsGetAndStopGettingWork) {
  const std::vector<BatchRecord> reference = Reference(3);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(1, &daemons);
  FakeDns dns;
  dns.Set({daemons[0]->endpoint()});
  LoaderOptions options = Options("dns:///batchd.test:7070");
  options.resolver = dns.resolver();
  options.resolve_interval = absl::Milliseconds(200);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                           Loader::Create(std::move(options)));
  ASSERT_TRUE(loader->StartEpoch(3).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                           ReadFrom(*loader, /*max_batches=*/4));
  // A second daemon appears: it is used within one period (the reads below
  // take longer than that on one worker per daemon).
  StartDaemons(1, &daemons);
  dns.Set({daemons[0]->endpoint(), daemons[1]->endpoint()});
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> more,
                           ReadFrom(*loader, /*max_batches=*/12));
  records.insert(records.end(), more.begin(), more.end());
  // The first one leaves DNS: drained (within a period or two), then
  // removed; nothing is lost. The rest of the epoch is read after the drain
  // began, so that it comes from the remaining daemon.
  dns.Set({daemons[1]->endpoint()});
  const absl::Time drain_deadline = absl::Now() + absl::Seconds(5);
  while (loader->stats().daemons[0].state == "up" &&
         absl::Now() < drain_deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_NE(loader->stats().daemons[0].state, "up")
      << "not drained within 5 s of leaving DNS (period 200 ms)";
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> rest, ReadFrom(*loader));
  records.insert(records.end(), rest.begin(), rest.end());
  EXPECT_EQ(records, reference);
  const Loader::Stats stats = loader->stats();
  ASSERT_EQ(stats.daemons.size(), 2u);
  EXPECT_GT(stats.daemons[1].served, 0u);
  EXPECT_NE(stats.daemons[0].state, "up");
  EXPECT_EQ(stats.rerequested, 0u);
}

TEST_F(MultiDaemonTest, DnsNameResolvesThroughTheSystemResolver) {
  const std::vector<BatchRecord> reference = Reference(0);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(1, &daemons);
  // "localhost" gives 127.0.0.1 (the daemon listens there) and, where the
  // host has it, ::1; an address that does not answer is only down.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Loader> loader,
      Loader::Create(Options(absl::StrCat("dns:///localhost:",
                                          daemons[0]->port()))));
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records, ReadFrom(*loader));
  EXPECT_EQ(records, reference);
  const Loader::Stats stats = loader->stats();
  ASSERT_GE(stats.daemons.size(), 1u);
  bool ipv4 = false;
  for (const auto& d : stats.daemons) {
    if (d.endpoint == absl::StrCat("127.0.0.1:", daemons[0]->port())) {
      ipv4 = true;
      EXPECT_GT(d.served, 0u);
    }
  }
  EXPECT_TRUE(ipv4);
}

// Reads epoch 1 while daemon `paused` is stopped (SIGSTOP) for `pause`;
// returns how long the epoch took.
absl::Duration EpochWithPausedDaemon(Loader& loader, DaemonProcess& paused,
                                     absl::Duration pause,
                                     std::vector<BatchRecord>* records) {
  kill(paused.pid(), SIGSTOP);
  const absl::Time start = absl::Now();
  std::thread resume([&] {
    absl::SleepFor(pause);
    kill(paused.pid(), SIGCONT);
  });
  EXPECT_TRUE(loader.StartEpoch(1).ok());
  absl::StatusOr<std::vector<BatchRecord>> read = ReadFrom(loader);
  const absl::Duration took = absl::Now() - start;
  resume.join();
  EXPECT_TRUE(read.ok()) << read.status();
  if (read.ok()) *records = *read;
  return took;
}

TEST_F(MultiDaemonTest, HedgingRoutesAroundAStalledDaemon) {
  const std::vector<BatchRecord> reference = Reference(1);
  // Stopped for 6 s: an epoch here takes ~1-2 s on the other daemon alone,
  // so with hedging it ends well before the stopped daemon resumes, and
  // without it the batches the stopped daemon holds keep the epoch waiting
  // until it resumes (the stall timeout, 20 s, is longer than the pause).
  const absl::Duration pause = absl::Seconds(6);
  for (bool hedging : {true, false}) {
    SCOPED_TRACE(hedging ? "hedging" : "no hedging");
    std::vector<std::unique_ptr<DaemonProcess>> daemons;
    StartDaemons(2, &daemons);
    LoaderOptions options = Options(Endpoints(daemons));
    options.hedge_factor = hedging ? 3.0 : 0.0;
    // Without hedging, no progress deadline either (it hedges too).
    if (!hedging) options.batch_progress_timeout = absl::ZeroDuration();
    // The stop must land while the stopped daemon owes only requests, not
    // halfway through sending a batch: read ahead, it could be sending
    // epoch 1's first batches then, and a batch whose header has arrived
    // is not hedged (its bytes go straight into the slot;
    // batch_progress_timeout catches a daemon frozen mid-batch).
    options.next_epoch_prefetch = false;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                             Loader::Create(std::move(options)));
    // Epoch 0 teaches the loader the usual latency.
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    ASSERT_TRUE(ReadFrom(*loader).ok());
    std::vector<BatchRecord> records;
    const absl::Duration took =
        EpochWithPausedDaemon(*loader, *daemons[1], pause, &records);
    EXPECT_EQ(records, reference);
    if (hedging) {
      EXPECT_LT(took, pause) << "hedging did not route around the stall";
      EXPECT_GT(loader->stats().hedged, 0u);
    } else {
      EXPECT_GE(took, pause);
      EXPECT_EQ(loader->stats().hedged, 0u);
    }
  }
}

// A daemon whose HTTP/2 handshake takes longer than the reconnect backoff
// (here: stopped, so the kernel accepts the connection but nothing answers
// for 0.5 s; in the field a TLS handshake over a slow link or a loaded host)
// is waited for, up to the channel's connect timeout, and streams as usual.
TEST_F(MultiDaemonTest, ASlowHandshakeIsWaitedFor) {
  const std::vector<BatchRecord> reference = Reference(0);
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(1, &daemons);
  kill(daemons[0]->pid(), SIGSTOP);
  std::thread resume([&] {
    absl::SleepFor(absl::Milliseconds(500));
    kill(daemons[0]->pid(), SIGCONT);
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(Options(daemons[0]->endpoint()));
  resume.join();
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                           ReadFrom(**loader));
  EXPECT_EQ(records, reference);
}

TEST_F(MultiDaemonTest, AllDaemonsDownIsUnavailableNamingEach) {
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  StartDaemons(2, &daemons);
  LoaderOptions options = Options(Endpoints(daemons));
  options.unavailable_timeout = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                           Loader::Create(std::move(options)));
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(ReadFrom(*loader, /*max_batches=*/2).ok());
  daemons[0]->Kill();
  daemons[1]->Kill();
  const absl::Time start = absl::Now();
  absl::Status status;
  for (int i = 0; i < 100 && status.ok(); ++i) status = loader->Next().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(daemons[0]->endpoint()));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(daemons[1]->endpoint()));
  // The deadline plus the reconnect attempts' slack.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace batchd::testing
