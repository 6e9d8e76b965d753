// End-to-end: same-host shared memory against real daemon processes.
// Batches written by the daemon's workers into the trainer's ring are
// byte-identical to the bytes path for several plans; a hostile or broken
// client (unsealed or wrong-sized memfd, bad slots, killed mid-batch,
// gone after unmapping, not an allowed uid) cannot harm the daemon, which
// serves the next client exactly as before; and every fallback streams
// bytes with a log line that says why.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/loader.h"
#include "common/shared_region.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"
#include "testing/shared_memory_peer.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kImages = 40;
constexpr uint32_t kSize = 32;

// Reads `epochs` epochs of `plan` with a fresh Loader; `stats` gets its
// final figures.
absl::StatusOr<std::vector<BatchRecord>> Read(const std::string& endpoint,
                                              const v1::Plan& plan,
                                              bool shared_memory,
                                              Loader::Stats* stats,
                                              uint64_t epochs = 2) {
  LoaderOptions options;
  options.endpoint = endpoint;
  options.plan = plan;
  options.prefetch = 3;
  options.shared_memory = shared_memory;
  // Received bytes are compared across transports: no read-ahead past the
  // last epoch, whose amount would depend on timing.
  options.last_epoch = epochs - 1;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  if (!loader.ok()) return loader.status();
  std::vector<BatchRecord> records;
  for (uint64_t epoch = 0; epoch < epochs; ++epoch) {
    if (absl::Status s = (*loader)->StartEpoch(epoch); !s.ok()) return s;
    absl::StatusOr<std::vector<BatchRecord>> got = ReadFrom(**loader);
    if (!got.ok()) return got.status();
    records.insert(records.end(), got->begin(), got->end());
  }
  if (stats != nullptr) *stats = (*loader)->stats();
  return records;
}

class SharedMemoryTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/4,
                          /*seed=*/31> {
 protected:
  // A daemon on a free TCP port and on a Unix socket; `extra` flags added.
  void StartDaemon(std::vector<std::string> extra = {}) {
    socket_dir_ = MakeTempDir("shm");
    unix_endpoint_ = "unix:" + socket_dir_ + "/batchd.sock";
    std::vector<std::string> args = {"--dataset", "d=" + *dataset_,
                                     "--workers", "2", "--unix-socket",
                                     socket_dir_ + "/batchd.sock"};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        DaemonProcess::Start(args);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  // The daemon still serves a new client over shared memory, byte for
  // byte as over bytes.
  void ExpectStillServing() {
    const v1::Plan plan = TrainPlan("d", 8, kSize, 5);
    Loader::Stats stats;
    absl::StatusOr<std::vector<BatchRecord>> bytes =
        Read(daemon_->endpoint(), plan, /*shared_memory=*/false, nullptr, 1);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<std::vector<BatchRecord>> shared =
        Read(unix_endpoint_, plan, /*shared_memory=*/true, &stats, 1);
    ASSERT_TRUE(shared.ok()) << shared.status();
    EXPECT_EQ(stats.transport, "shared-memory") << stats.transport_note;
    EXPECT_EQ(*shared, *bytes);
  }

  // Offering shared memory over `endpoint` still yields the bytes path's
  // batches, over `transport`; Stats.transport_note holds `note`, and the
  // client logs one line that says why.
  void ExpectFallsBackToBytes(const std::string& endpoint,
                              const std::string& transport,
                              const std::string& note, uint64_t seed) {
    const v1::Plan plan = TrainPlan("d", 8, kSize, seed);
    absl::StatusOr<std::vector<BatchRecord>> bytes =
        Read(unix_endpoint_, plan, /*shared_memory=*/false, nullptr);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    Loader::Stats stats;
    ::testing::internal::CaptureStderr();
    absl::StatusOr<std::vector<BatchRecord>> got =
        Read(endpoint, plan, /*shared_memory=*/true, &stats);
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, *bytes);
    EXPECT_EQ(stats.transport, transport);
    EXPECT_THAT(stats.transport_note, HasSubstr(note));
    EXPECT_THAT(log, HasSubstr("batchd: shared memory off for " + endpoint));
    EXPECT_THAT(log, HasSubstr(note));
    EXPECT_THAT(log, HasSubstr("batches come as bytes"));
  }

  std::string socket_dir_;
  std::string unix_endpoint_;
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(SharedMemoryTest, ByteIdenticalToTheBytesPathForSeveralPlans) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::vector<std::pair<std::string, v1::Plan>> plans;
  plans.emplace_back("train NHWC", TrainPlan("d", 8, kSize, 1));
  v1::Plan nchw = TrainPlan("d", 8, kSize, 2);
  nchw.mutable_pipeline()->set_layout(v1::LAYOUT_NCHW);
  plans.emplace_back("train NCHW", nchw);
  plans.emplace_back("eval", EvalPlan("d", 6, kSize, 3));
  v1::Plan drop_last = TrainPlan("d", 6, kSize, 4);
  drop_last.set_drop_last(true);
  plans.emplace_back("drop_last", drop_last);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    v1::Plan shard = TrainPlan("d", 7, kSize, 5);
    shard.set_world_size(2);
    shard.set_rank(rank);
    plans.emplace_back(absl::StrCat("world_size 2 rank ", rank), shard);
  }
  for (const auto& [name, plan] : plans) {
    SCOPED_TRACE(name);
    Loader::Stats bytes_stats, unix_stats, loopback_stats;
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> bytes,
        Read(unix_endpoint_, plan, /*shared_memory=*/false, &bytes_stats));
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> over_unix,
        Read(unix_endpoint_, plan, /*shared_memory=*/true, &unix_stats));
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> over_loopback,
        Read(daemon_->endpoint(), plan, /*shared_memory=*/true,
             &loopback_stats));
    EXPECT_EQ(bytes_stats.transport, "unix");
    EXPECT_EQ(unix_stats.transport, "shared-memory") << unix_stats.transport_note;
    EXPECT_EQ(loopback_stats.transport, "shared-memory")
        << loopback_stats.transport_note;
    ASSERT_FALSE(bytes.empty());
    EXPECT_EQ(over_unix, bytes);
    EXPECT_EQ(over_loopback, bytes);
    // No copy on the client: the daemon's workers wrote the slots.
    EXPECT_EQ(unix_stats.copy, absl::ZeroDuration());
    EXPECT_EQ(unix_stats.received_bytes, bytes_stats.received_bytes);
  }
}

TEST_F(SharedMemoryTest, RefusesUnsealedAndWrongSizedMemoryAndUnknownTickets) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const v1::Plan plan = TrainPlan("d", 8, kSize, 5);
  {
    RawStream stream(unix_endpoint_);
    const v1::PlanOpened opened = stream.Open(plan);
    ASSERT_TRUE(opened.shared_memory().declined().empty());
    const uint64_t bytes = 2 * opened.shared_memory().slot_bytes();
    // Unsealed: it could be truncated under the daemon's mapping.
    common::UniqueFd unsealed(memfd_create("unsealed", MFD_CLOEXEC));
    ASSERT_EQ(ftruncate(unsealed.get(), static_cast<off_t>(bytes)), 0);
    EXPECT_THAT(Handshake(opened.shared_memory(), unsealed.get(),
                          opened.shared_memory().ticket() + " 2"),
                StartsWith("9 "));  // FAILED_PRECONDITION
  }
  {
    RawStream stream(unix_endpoint_);
    const v1::PlanOpened opened = stream.Open(plan);
    // Sealed, but one slot short of the two it claims.
    absl::StatusOr<common::SharedRegion> small =
        common::SharedRegion::Create(opened.shared_memory().slot_bytes());
    ASSERT_TRUE(small.ok());
    const std::string answer =
        Handshake(opened.shared_memory(), small->fd(),
                  opened.shared_memory().ticket() + " 2");
    EXPECT_THAT(answer, StartsWith("3 "));  // INVALID_ARGUMENT
    // The ticket was used up by the failed attempt.
    absl::StatusOr<common::SharedRegion> right = common::SharedRegion::Create(
        2 * opened.shared_memory().slot_bytes());
    ASSERT_TRUE(right.ok());
    EXPECT_THAT(Handshake(opened.shared_memory(), right->fd(),
                          opened.shared_memory().ticket() + " 2"),
                StartsWith("5 "));  // NOT_FOUND
    // Too many slots for the daemon's --max-window.
    RawStream other(unix_endpoint_);
    const v1::PlanOpened other_opened = other.Open(plan);
    EXPECT_THAT(Handshake(other_opened.shared_memory(), right->fd(),
                          other_opened.shared_memory().ticket() + " 1000"),
                StartsWith("3 "));
  }
  ExpectStillServing();
}

TEST_F(SharedMemoryTest, BadSlotsAreRejectedInBand) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const v1::Plan plan = TrainPlan("d", 8, kSize, 5);
  Loader::Stats ignored;
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                           Read(unix_endpoint_, plan, false, &ignored, 1));
  RawStream stream(unix_endpoint_);
  const v1::PlanOpened opened = stream.Open(plan);
  const v1::SharedMemoryInvite& invite = opened.shared_memory();
  // Slots before anything is attached are refused.
  stream.Request(0, {4}, {0});
  v1::StreamResponse early = stream.Next();
  ASSERT_TRUE(early.has_rejected());
  EXPECT_THAT(early.rejected().message(), HasSubstr("no shared memory"));

  absl::StatusOr<common::SharedRegion> ring =
      common::SharedRegion::Create(2 * invite.slot_bytes());
  ASSERT_TRUE(ring.ok());
  // Attaching after a request is refused: grants must start from nothing.
  EXPECT_THAT(Handshake(invite, ring->fd(), invite.ticket() + " 2"),
              StartsWith("9 "));

  RawStream fresh(unix_endpoint_);
  const v1::PlanOpened fresh_opened = fresh.Open(plan);
  const v1::SharedMemoryInvite& fresh_invite = fresh_opened.shared_memory();
  absl::StatusOr<common::SharedRegion> fresh_ring =
      common::SharedRegion::Create(2 * fresh_invite.slot_bytes());
  ASSERT_TRUE(fresh_ring.ok());
  ASSERT_EQ(Handshake(fresh_invite, fresh_ring->fd(),
                      fresh_invite.ticket() + " 2"),
            "0 attached\n");
  // Out of range, then a double grant, then a request without slots.
  fresh.Request(0, {0}, {2});
  fresh.Request(0, {1, 2}, {1, 1});
  fresh.Request(0, {3}, {});
  int rejected = 0;
  bool header_seen = false;
  for (int i = 0; i < 4; ++i) {
    v1::StreamResponse r = fresh.Next();
    if (r.has_rejected()) {
      ++rejected;
      EXPECT_EQ(r.rejected().code(), 3);  // INVALID_ARGUMENT
      if (r.rejected().batch_index() == 0) {
        EXPECT_THAT(r.rejected().message(), HasSubstr("beyond"));
      } else if (r.rejected().batch_index() == 2) {
        EXPECT_THAT(r.rejected().message(), HasSubstr("already granted"));
      } else {
        EXPECT_EQ(r.rejected().batch_index(), 3u);
        EXPECT_THAT(r.rejected().message(), HasSubstr("name a slot"));
      }
    } else {
      ASSERT_TRUE(r.has_header());
      EXPECT_EQ(r.header().batch_index(), 1u);
      EXPECT_TRUE(r.header().in_shared_memory());
      header_seen = true;
      // The daemon's workers wrote batch 1 into slot 1, exactly.
      const std::string pixels(
          reinterpret_cast<const char*>(fresh_ring->data() +
                                        fresh_invite.slot_bytes()),
          r.header().total_bytes());
      EXPECT_EQ(pixels, reference[1].pixels);
    }
  }
  EXPECT_EQ(rejected, 3);
  EXPECT_TRUE(header_seen);
  ExpectStillServing();
}

TEST_F(SharedMemoryTest, AClientThatUnmapsAndGoesAwayMidBatchHarmsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const v1::Plan plan = TrainPlan("d", 16, 96, 5);
  for (int round = 0; round < 3; ++round) {
    RawStream stream(unix_endpoint_);
    const v1::PlanOpened opened = stream.Open(plan);
    const v1::SharedMemoryInvite& invite = opened.shared_memory();
    {
      absl::StatusOr<common::SharedRegion> ring =
          common::SharedRegion::Create(3 * invite.slot_bytes());
      ASSERT_TRUE(ring.ok());
      ASSERT_EQ(Handshake(invite, ring->fd(), invite.ticket() + " 3"),
                "0 attached\n");
      stream.Request(0, {0, 1, 2}, {0, 1, 2});
    }  // unmapped and closed while the workers decode into it
  }  // each stream cancelled mid-batch
  ExpectStillServing();
}

TEST_F(SharedMemoryTest, AClientKilledMidBatchHarmsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Built before fork(): the child of a threaded process may only exec.
  const std::string binary = BuiltBinary("client/batchd-client");
  const std::string endpoint = "--endpoint=" + unix_endpoint_;
  for (int round = 0; round < 2; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      execl(binary.c_str(), binary.c_str(), endpoint.c_str(), "--dataset=d",
            "--batch_size=16", "--size=96", "--epochs=50", "--prefetch=4",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    // Long enough to attach and have batches in flight.
    absl::SleepFor(absl::Milliseconds(700));
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status));
  }
  ExpectStillServing();
  EXPECT_THAT(daemon_->Log(), ::testing::Not(HasSubstr("shared memory refused")));
}

TEST_F(SharedMemoryTest, APeerWhoseUidIsNotAllowedStreamsBytes) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--shm-allowed-uids", std::to_string(getuid() + 1)}));
  ExpectFallsBackToBytes(unix_endpoint_, "unix", "may not share memory", 6);
  EXPECT_THAT(daemon_->Log(), HasSubstr("shared memory refused: uid"));
}

TEST_F(SharedMemoryTest, FallsBackToBytesWhenTheDaemonHasShmOff) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--shm=false"}));
  ExpectFallsBackToBytes(unix_endpoint_, "unix", "--shm=false", 7);
}

TEST_F(SharedMemoryTest, FallsBackToBytesWhenTheSideChannelFails) {
  const std::string dir = MakeTempDir("shm-side");
  const std::string side = dir + "/side.sock";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--shm-socket", side}));
  ExpectStillServing();  // the path socket works while it exists
  ASSERT_EQ(unlink(side.c_str()), 0);
  ExpectFallsBackToBytes(daemon_->endpoint(), "tcp", "cannot connect", 8);
}

TEST_F(SharedMemoryTest, NoOfferToAnEndpointOffThisHost) {
  // The daemon refuses peers off this host (common/local_address_test.cc
  // covers the peer strings); the client does not even offer to an
  // endpoint it cannot tell is local, such as a DNS name.
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const v1::Plan plan = TrainPlan("d", 8, kSize, 9);
  Loader::Stats stats;
  absl::StatusOr<std::vector<BatchRecord>> got = Read(
      absl::StrCat("dns:///localhost:", daemon_->port()), plan, true, &stats, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(stats.transport, "tcp");
  EXPECT_THAT(stats.transport_note, HasSubstr("single daemon endpoint"));
}

}  // namespace
}  // namespace batchd::testing
