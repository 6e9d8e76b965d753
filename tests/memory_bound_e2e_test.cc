// End-to-end: the daemon's memory is bounded by what its flags say and is
// given back once it is idle. A burst of stalled consumers fills the buffer
// budget; the daemon's RSS, sampled throughout, must stay within
//   start-up RSS + --max-buffer-bytes + --idle-buffer-bytes
//     + --shared-batch-bytes + --decoded-cache-bytes
//     + the encoded files (or capped images) of the batches being built
//     + slack,
// the formula docs/deploy.md states ("Memory"), and fall back to within
// --idle-buffer-bytes of the start-up RSS once the burst has gone.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kMaxBufferBytes = 64 * kMiB;
constexpr uint64_t kIdleBufferBytes = 8 * kMiB;
// Finished batches kept for later jobs of the same plan: held idle too.
constexpr uint64_t kSharedBatchBytes = 8 * kMiB;
// Capped decoded images kept for plans with decoded_max_side; half the
// consumers below use kCap, so the cache fills and evicts.
constexpr uint64_t kDecodedCacheBytes = 8 * kMiB;
constexpr uint32_t kCap = 512;
constexpr uint32_t kBatch = 8;
constexpr uint32_t kSize = 448;
// Files above this are removed from the generated dataset, so that the
// read-ahead term of the formula (a file per sample in flight) stays well
// below the budget and the bound keeps its edge.
constexpr uint64_t kMaxFileBytes = 200 * 1024;
constexpr uint64_t kSampleBytes = uint64_t{kSize} * kSize * 3;
constexpr int kConsumers = 10;
// What else the daemon may hold, justified by what it is: gRPC's per-stream
// send and receive buffers and its per-thread malloc arenas' free lists (a
// few hundred KiB each), and the pool of worker and reader threads' stacks
// touched while busy; 1 MiB a stream and 16 MiB in all leaves room for
// that and stays an order of magnitude below the budget, so a leak of
// batches (2.4 MiB each) or an idle pool past its bound still fails.
constexpr uint64_t kSlackBytes = 16 * kMiB + kConsumers * kMiB;
// Once idle, beyond the idle pool: what malloc keeps between trims (the
// heap's top and its arenas' small free lists) and gRPC's per-thread
// caches; measured at 2-4 MiB here, so 12 MiB, still far below one
// leaked stream's window (9.6 MB) plus the pool.
constexpr uint64_t kIdleSlackBytes = 12 * kMiB;

uint64_t RssBytes(pid_t pid) { return ProcStatusBytes(pid, "VmRSS"); }

// Removes the files above kMaxFileBytes; returns the largest file left.
uint64_t TrimLargeFiles(const std::string& root) {
  uint64_t largest = 0;
  for (const std::string& path : ImageFolderOrder(root)) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
      std::remove(path.c_str());
    } else {
      largest = std::max<uint64_t>(largest, st.st_size);
    }
  }
  return largest;
}

std::unique_ptr<Loader> OpenStalled(const std::string& endpoint, int i) {
  LoaderOptions options;
  options.endpoint = endpoint;
  options.plan = TrainPlan("d", kBatch, kSize, 100 + i);
  if (i % 2 == 1) options.plan.mutable_pipeline()->set_decoded_max_side(kCap);
  options.plan.set_job("burst-" + std::to_string(i));
  options.prefetch = 2;  // 9.6 MB a stream: six or so fit the budget
  // The daemon's own buffers are what is measured: shared memory would put
  // the batches in the consumers' memory instead.
  options.shared_memory = false;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  if (!loader.ok()) return nullptr;  // refused: the budget is full
  if (!(*loader)->StartEpoch(0).ok()) return nullptr;
  // One batch taken, the rest left in flight: a consumer that stalls.
  if (!(*loader)->Next().ok()) return nullptr;
  return *std::move(loader);
}

TEST(MemoryBoundTest, RssStaysWithinTheFormulaAndIsGivenBackWhenIdle) {
  ASSERT_OK_AND_ASSIGN(std::string dataset, MakeDataset(96, 4, 61));
  const uint64_t largest_file = TrimLargeFiles(dataset);
  ASSERT_GT(largest_file, 0u);
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start(
          {"--dataset", "d=" + dataset, "--workers", "2",
           "--max-buffer-bytes", std::to_string(kMaxBufferBytes),
           "--idle-buffer-bytes", std::to_string(kIdleBufferBytes),
           "--shared-batch-bytes", std::to_string(kSharedBatchBytes),
           "--decoded-cache-bytes", std::to_string(kDecodedCacheBytes),
           "--max-job-buffer-share", "1", "--max-identity-buffer-share",
           "1"}));

  // Start-up RSS, after one stream has run and gone, so that gRPC's threads
  // and the code that serves a stream are in it.
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> warm,
      ReadEpochs(daemon->endpoint(), TrainPlan("d", kBatch, kSize, 1), 0));
  ASSERT_FALSE(warm.empty());
  absl::SleepFor(absl::Seconds(2.5));  // the idle trim runs every second
  const uint64_t baseline = RssBytes(daemon->pid());
  ASSERT_GT(baseline, 0u);

  // The burst: stalled consumers that together want more than the budget.
  uint64_t peak = baseline;
  std::vector<std::unique_ptr<Loader>> consumers;
  int refused = 0;
  for (int i = 0; i < kConsumers; ++i) {
    std::unique_ptr<Loader> loader =
        OpenStalled(daemon->endpoint(), i);
    if (loader == nullptr) ++refused;
    consumers.push_back(std::move(loader));
    peak = std::max(peak, RssBytes(daemon->pid()));
  }
  uint64_t reserved = 0;
  for (int i = 0; i < 40; ++i) {  // 2 s of the burst held
    peak = std::max(peak, RssBytes(daemon->pid()));
    absl::StatusOr<v1::ServerStatus> status =
        GetServerStatus(daemon->endpoint());
    if (status.ok()) {
      reserved = std::max<uint64_t>(reserved, status->buffer_bytes_reserved());
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  // The burst did fill the budget, so the bound below is the one at work.
  EXPECT_GT(reserved, kMaxBufferBytes / 2) << "refused " << refused;

  // Batches being built hold their samples' files until decoded, or, for a
  // capped plan, the sample's capped image taken from the decoded cache
  // (which may evict it meanwhile): at most one of either per sample of the
  // batches the budget lets be in flight.
  const uint64_t read_ahead =
      kMaxBufferBytes / kSampleBytes *
      std::max<uint64_t>(largest_file, uint64_t{kCap} * kCap * 3);
  const uint64_t bound = baseline + kMaxBufferBytes + kIdleBufferBytes +
                         kSharedBatchBytes + kDecodedCacheBytes + read_ahead +
                         kSlackBytes;
  std::printf("start-up RSS %.1f MiB, peak %.1f MiB, bound %.1f MiB "
              "(budget %.0f + idle %.0f + shared %.0f + decoded %.0f + "
              "read-ahead %.1f + slack %.0f); "
              "reserved at most %.1f MiB, %d of %d consumers refused\n",
              baseline / 1048576.0, peak / 1048576.0, bound / 1048576.0,
              kMaxBufferBytes / 1048576.0, kIdleBufferBytes / 1048576.0,
              kSharedBatchBytes / 1048576.0, kDecodedCacheBytes / 1048576.0,
              read_ahead / 1048576.0, kSlackBytes / 1048576.0,
              reserved / 1048576.0, refused, kConsumers);
  EXPECT_LE(peak, bound);

  // The burst ends; within a few trims the memory is back.
  consumers.clear();
  const uint64_t idle_bound =
      baseline + kIdleBufferBytes + kSharedBatchBytes + kDecodedCacheBytes +
      kIdleSlackBytes;
  uint64_t after = RssBytes(daemon->pid());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (after > idle_bound && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    after = RssBytes(daemon->pid());
  }
  std::printf("idle RSS %.1f MiB (bound %.1f MiB)\n", after / 1048576.0,
              idle_bound / 1048576.0);
  EXPECT_LE(after, idle_bound);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

}  // namespace
}  // namespace batchd::testing
