// Adversarial: what a same-host client can make the daemon hold through
// shared memory. A ring has at most the stream's granted window of slots,
// stays charged to the buffer budget once attached, and is mapped without
// touching its pages, so the daemon's shared memory (RssShmem) stays within
// the budget whatever rings clients send; a well-behaved trainer keeps
// streaming over shared memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/loader.h"
#include "common/shared_region.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"
#include "testing/shared_memory_peer.h"
#include "testing/status_matchers.h"

namespace batchd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kImages = 24;
// 8 images of 128x128x3: 384 KiB slots, so that 64-slot rings would be
// 24 MiB each.
constexpr uint32_t kBatch = 8;
constexpr uint32_t kSize = 128;

// The shared memory mapped into process `pid` (RssShmem), in bytes.
uint64_t RssShmem(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssShmem:", 0) != 0) continue;
    uint64_t kib = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    EXPECT_TRUE(absl::SimpleAtoi(digits, &kib)) << line;
    return kib * 1024;
  }
  ADD_FAILURE() << "no RssShmem in /proc/" << pid << "/status";
  return 0;
}

// A memfd of `bytes` sealed as the daemon requires, whose pages the client
// never touched: every page the daemon maps in is one it faulted in.
common::UniqueFd UntouchedRing(uint64_t bytes) {
  common::UniqueFd fd(
      memfd_create("hostile-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_GE(fd.get(), 0);
  EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  return fd;
}

class SharedMemoryAdversarialTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/3,
                          /*seed=*/47> {
 protected:
  void StartDaemon(std::vector<std::string> extra = {}) {
    socket_dir_ = MakeTempDir("adv-shm");
    endpoint_ = "unix:" + socket_dir_ + "/batchd.sock";
    std::vector<std::string> args = {"--dataset", "d=" + *dataset_,
                                     "--workers", "2", "--unix-socket",
                                     socket_dir_ + "/batchd.sock"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_OK_AND_ASSIGN(daemon_, DaemonProcess::Start(args));
  }

  // A well-behaved trainer reads one epoch over shared memory, byte for
  // byte as over bytes.
  void ExpectTrainerServed() {
    const v1::Plan plan = TrainPlan("d", kBatch, kSize, 3);
    std::vector<BatchRecord> got[2];
    for (bool shared : {false, true}) {
      client::LoaderOptions options;
      options.endpoint = endpoint_;
      options.plan = plan;
      options.prefetch = 2;
      options.shared_memory = shared;
      options.last_epoch = 0;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::Loader> loader,
                           client::Loader::Create(std::move(options)));
      ASSERT_OK(loader->StartEpoch(0));
      ASSERT_OK_AND_ASSIGN(got[shared], ReadFrom(*loader));
      EXPECT_EQ(loader->stats().transport, shared ? "shared-memory" : "unix")
          << loader->stats().transport_note;
    }
    ASSERT_FALSE(got[0].empty());
    EXPECT_EQ(got[1], got[0]);
  }

  std::string socket_dir_;
  std::string endpoint_;
  std::unique_ptr<DaemonProcess> daemon_;
};

// Three window-1 streams send 64-slot rings whose pages nobody touched:
// refused before mapping, and the daemon maps no shared memory for them.
TEST_F(SharedMemoryAdversarialTest, OversizedRingsAreRefusedAndMapNothing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const v1::Plan plan = TrainPlan("d", kBatch, kSize, 1);
  const uint64_t before = RssShmem(daemon_->pid());
  std::vector<std::unique_ptr<RawStream>> streams;
  uint64_t slot_bytes = 0;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<RawStream>(endpoint_));
    const v1::PlanOpened opened = streams.back()->Open(plan, /*window=*/1);
    ASSERT_EQ(opened.window(), 1u);
    const v1::SharedMemoryInvite& invite = opened.shared_memory();
    slot_bytes = invite.slot_bytes();
    ASSERT_GE(slot_bytes, uint64_t{kBatch} * kSize * kSize * 3);
    common::UniqueFd ring = UntouchedRing(64 * slot_bytes);
    EXPECT_EQ(Handshake(invite, ring.get(), invite.ticket() + " 64"),
              "3 a ring of 64 slots, but this stream's granted window "
              "(PlanOpened.window) is 1; create a ring of 1..1 slots\n");
  }
  const uint64_t after = RssShmem(daemon_->pid());
  // Nothing attached, nothing mapped: at most a page or two of noise.
  EXPECT_LE(after, before + 64 * 1024)
      << "RssShmem " << before << " -> " << after << " bytes";
  streams.clear();
  ExpectTrainerServed();
}

// Rings within the window, attached and written: the daemon's shared
// memory is at most the slots the budget holds for them, and the budget
// still counts them (the next stream of the job finds it full).
TEST_F(SharedMemoryAdversarialTest, AttachedRingsStayWithinTheBudget) {
  const uint64_t slot_bytes =
      (uint64_t{kBatch} * kSize * kSize * 3 + 4095) / 4096 * 4096;
  // Room for exactly three one-slot streams.
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      {"--max-buffer-bytes", std::to_string(3 * slot_bytes),
       "--max-job-buffer-share", "1", "--max-identity-buffer-share", "1"}));
  const v1::Plan plan = TrainPlan("d", kBatch, kSize, 2);
  std::vector<std::unique_ptr<RawStream>> streams;
  std::vector<common::UniqueFd> rings;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<RawStream>(endpoint_));
    RawStream& stream = *streams.back();
    const v1::PlanOpened opened = stream.Open(plan, /*window=*/1);
    ASSERT_EQ(opened.window(), 1u) << "stream " << i;
    const v1::SharedMemoryInvite& invite = opened.shared_memory();
    ASSERT_EQ(invite.slot_bytes(), slot_bytes);
    rings.push_back(UntouchedRing(slot_bytes));
    ASSERT_EQ(Handshake(invite, rings.back().get(), invite.ticket() + " 1"),
              "0 attached\n");
    // The daemon writes a batch into the slot: its pages are mapped in.
    stream.Request(0, {0}, {0});
    const v1::StreamResponse header = stream.Next();
    ASSERT_TRUE(header.has_header()) << header.DebugString();
    EXPECT_TRUE(header.header().in_shared_memory());
  }
  const uint64_t shmem = RssShmem(daemon_->pid());
  EXPECT_LE(shmem, 3 * slot_bytes + 64 * 1024)
      << "RssShmem " << shmem << " bytes for 3 slots of " << slot_bytes;
  // The attached rings still hold the whole budget.
  RawStream fourth(endpoint_);
  EXPECT_EQ(fourth.Open(plan, /*window=*/1).window(), 0u);
  const grpc::Status refused = fourth.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                       GetServerStatus(daemon_->endpoint()));
  EXPECT_EQ(status.buffer_bytes_reserved(), 3 * slot_bytes);
  streams.clear();
  ExpectTrainerServed();
}

// A write-sealed ring and a read-only descriptor: FAILED_PRECONDITION with
// the reason, not an INTERNAL mmap error.
TEST_F(SharedMemoryAdversarialTest, UnwritableRingsAreFailedPreconditions) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const v1::Plan plan = TrainPlan("d", kBatch, kSize, 4);
  {
    RawStream stream(endpoint_);
    const v1::SharedMemoryInvite invite = stream.Open(plan, 1).shared_memory();
    common::UniqueFd sealed = UntouchedRing(invite.slot_bytes());
    ASSERT_EQ(fcntl(sealed.get(), F_ADD_SEALS, F_SEAL_WRITE), 0);
    EXPECT_THAT(Handshake(invite, sealed.get(), invite.ticket() + " 1"),
                StartsWith("9 the shared-memory region is sealed against "
                           "writing"));
  }
  {
    RawStream stream(endpoint_);
    const v1::SharedMemoryInvite invite = stream.Open(plan, 1).shared_memory();
    common::UniqueFd writable = UntouchedRing(invite.slot_bytes());
    common::UniqueFd read_only(
        open(absl::StrCat("/proc/self/fd/", writable.get()).c_str(),
             O_RDONLY | O_CLOEXEC));
    ASSERT_GE(read_only.get(), 0);
    EXPECT_THAT(Handshake(invite, read_only.get(), invite.ticket() + " 1"),
                StartsWith("9 the shared-memory descriptor is open "
                           "read-only"));
  }
  ExpectTrainerServed();
}

}  // namespace
}  // namespace batchd::testing
