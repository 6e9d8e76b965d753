// Loader tests of the per-batch progress deadline
// (LoaderOptions::batch_progress_timeout): a daemon that freezes in the
// middle of sending a batch loses it, and the batch comes from another
// daemon, byte-identical and exactly once.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "client/loader_test_util.h"
#include "testing/fake_data_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using Key = FakeStream::Key;

// Sends the chunks of `key` covering bytes [`from`, `to`), as the fake's
// SendBatch does; false once the stream is gone.
bool SendChunks(FakeStream& stream, const Key& key, uint64_t from, uint64_t to,
                uint64_t chunk_bytes) {
  for (uint64_t offset = from; offset < to; offset += chunk_bytes) {
    const uint64_t n = std::min(chunk_bytes, to - offset);
    std::string data(n, '\0');
    for (uint64_t i = 0; i < n; ++i) {
      data[i] = static_cast<char>(
          testing::FakePixel(key.first, key.second, offset + i));
    }
    batchd::v1::StreamResponse chunk;
    chunk.mutable_chunk()->set_epoch(key.first);
    chunk.mutable_chunk()->set_batch_index(key.second);
    chunk.mutable_chunk()->set_offset(offset);
    chunk.mutable_chunk()->set_data(std::move(data));
    if (!stream.SendRaw(chunk)) return false;
  }
  return true;
}

// What the freezing daemon did.
struct Freeze {
  absl::Mutex mu;
  bool frozen ABSL_GUARDED_BY(mu) = false;
  Key key ABSL_GUARDED_BY(mu){0, 0};
  // The rest of the batch was written after the freeze (the stream was
  // still open then).
  bool late_write_ok ABSL_GUARDED_BY(mu) = false;
};

// The progress deadline, and how long the frozen daemon stays frozen.
constexpr absl::Duration kDeadline = absl::Seconds(1);
constexpr absl::Duration kFreeze = absl::Seconds(6);

TEST(LoaderProgressTest, BatchFrozenMidSendComesFromTheOtherDaemon) {
  FakeDataService::Options fake;
  fake.window = 2;
  fake.batches_per_epoch = 12;
  fake.height = 32;
  fake.width = 32;
  fake.chunk_bytes = 2048;  // 12,288-byte batches in 6 chunks
  Freeze freeze;
  // The first batch this daemon is asked for: its header and first chunk,
  // then nothing for kFreeze, then the rest (a daemon resumed by SIGCONT).
  // Every other batch, and every later stream, is served normally.
  FakeServer freezer(fake, [&freeze, &fake](FakeStream& stream) {
    while (stream.ReadBatchRequest()) {
      const Key key = stream.pending().front();
      bool first = false;
      {
        absl::MutexLock lock(&freeze.mu);
        if (!freeze.frozen) {
          freeze.frozen = true;
          freeze.key = key;
          first = true;
        }
      }
      if (!first) {
        if (!stream.SendBatch(key)) break;
        continue;
      }
      batchd::v1::StreamResponse header;
      *header.mutable_header() = stream.Header(key);
      const uint64_t total = header.header().total_bytes();
      if (!stream.SendRaw(header) ||
          !SendChunks(stream, key, 0, fake.chunk_bytes, fake.chunk_bytes)) {
        break;
      }
      absl::SleepFor(kFreeze);
      const bool sent =
          SendChunks(stream, key, fake.chunk_bytes, total, fake.chunk_bytes);
      stream.pending().pop_front();
      absl::MutexLock lock(&freeze.mu);
      freeze.late_write_ok = sent && !stream.context()->IsCancelled();
      if (!sent) break;
    }
    return grpc::Status::OK;
  });
  FakeServer healthy(fake, FakeDataService::ServeInOrder());

  LoaderOptions options = OptionsFor(freezer, /*prefetch=*/8);
  options.endpoint = freezer.endpoint() + "," + healthy.endpoint();
  options.batch_progress_timeout = kDeadline;
  // Only the progress deadline may catch the freeze.
  options.stall_timeout = absl::Seconds(30);
  options.unavailable_timeout = absl::Seconds(30);
  options.hedge_factor = 0;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::Duration longest;
  for (uint64_t index = 0; index < fake.batches_per_epoch; ++index) {
    const absl::Time asked = absl::Now();
    absl::StatusOr<Batch> batch = (*loader)->Next();
    longest = std::max(longest, absl::Now() - asked);
    ASSERT_OK(batch);
    // In order, each index once, every byte as the fake makes it.
    ExpectFakeBatch(*batch, 0, index, freezer.service());
  }
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("end of epoch")));
  std::printf("longest wait for a batch with a daemon frozen mid-batch: "
              "%.2f s (deadline %.1f s)\n",
              absl::ToDoubleSeconds(longest), absl::ToDoubleSeconds(kDeadline));
  Key frozen;
  {
    absl::MutexLock lock(&freeze.mu);
    ASSERT_TRUE(freeze.frozen) << "the freezing daemon was never asked";
    frozen = freeze.key;
  }
  // The frozen batch came from the healthy daemon, well before the freeze
  // ended: within the deadline plus a margin for the re-request.
  EXPECT_LT(longest, kDeadline + absl::Milliseconds(1500));
  EXPECT_THAT(RequestsOf(healthy.service(), 0),
              ::testing::Contains(frozen.second));
  const LoaderStats stats = (*loader)->stats();
  ASSERT_EQ(stats.daemons.size(), 2u);
  EXPECT_GE(stats.daemons[0].lost, 1u);
  (*loader).reset();
  freezer.Shutdown();
  // The frozen daemon's late bytes found no stream to land on.
  absl::MutexLock lock(&freeze.mu);
  EXPECT_FALSE(freeze.late_write_ok);
}

}  // namespace
}  // namespace batchd::client
