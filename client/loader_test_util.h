// Shared helpers of the loader tests (loader_test.cc,
// loader_errors_test.cc): options for a fake daemon and checks of the
// batches it sends. Test-only; include from one test file per binary.
#ifndef BATCHD_CLIENT_LOADER_TEST_UTIL_H_
#define BATCHD_CLIENT_LOADER_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader.h"
#include "testing/fake_data_service.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {


using ::batchd::client::testing::FakeDataService;
using ::batchd::client::testing::FakePixel;
using ::batchd::client::testing::FakeSampleIndex;
using ::batchd::client::testing::FakeServer;
using ::batchd::client::testing::FakeStream;
using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

LoaderOptions OptionsFor(const FakeServer& server, uint32_t prefetch = 4) {
  LoaderOptions options;
  options.endpoint = server.endpoint();
  options.plan.set_dataset("fake");
  options.plan.set_batch_size(4);
  options.prefetch = prefetch;
  // A lost fake daemon is reported within a second, not the default 30 s.
  options.unavailable_timeout = absl::Seconds(1);
  return options;
}

// Checks every field and byte of `batch` against what the fake sends.
void ExpectFakeBatch(const Batch& batch, uint64_t epoch, uint64_t index,
                     const FakeDataService& service) {
  const FakeDataService::Options& options = service.options();
  EXPECT_EQ(batch.epoch, epoch);
  EXPECT_EQ(batch.batch_index, index);
  const uint64_t bytes = service.BatchBytes(index);
  ASSERT_EQ(batch.size(), bytes);
  const uint64_t samples = bytes / (options.height * options.width * 3);
  EXPECT_THAT(batch.shape,
              ElementsAre(samples, options.height, options.width, 3u));
  EXPECT_EQ(batch.layout, batchd::v1::LAYOUT_NHWC);
  ASSERT_EQ(batch.sample_indices.size(), samples);
  ASSERT_EQ(batch.labels.size(), samples);
  for (uint64_t i = 0; i < samples; ++i) {
    const uint64_t sample = FakeSampleIndex(epoch, index, i, options.batch_size);
    EXPECT_EQ(batch.sample_indices[i], sample);
    EXPECT_EQ(batch.labels[i], static_cast<int32_t>(sample % 7));
  }
  EXPECT_EQ(batch.substitutions.size(), index == 1 ? 1u : 0u);
  uint64_t mismatches = 0;
  for (uint64_t offset = 0; offset < bytes; ++offset) {
    if (batch.data()[offset] != FakePixel(epoch, index, offset)) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0u) << "epoch " << epoch << " batch " << index;
}

// Reads the rest of `epoch` from `loader`, starting at `first`, checking
// order and content, then expects OUT_OF_RANGE.
void ExpectRestOfEpoch(Loader& loader, uint64_t epoch, uint64_t first,
                       const FakeDataService& service) {
  for (uint64_t index = first; index < service.options().batches_per_epoch;
       ++index) {
    absl::StatusOr<Batch> batch = loader.Next();
    ASSERT_OK(batch);
    ExpectFakeBatch(*batch, epoch, index, service);
  }
  EXPECT_THAT(loader.Next(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("end of epoch")));
}

// The batch indices of `epoch` that the fake was asked for, ascending.
std::vector<uint64_t> RequestsOf(const FakeDataService& service,
                                 uint64_t epoch) {
  std::vector<uint64_t> indices;
  for (const FakeStream::Key& key : service.requested()) {
    if (key.first == epoch) indices.push_back(key.second);
  }
  std::sort(indices.begin(), indices.end());
  return indices;
}


}  // namespace
}  // namespace batchd::client

#endif  // BATCHD_CLIENT_LOADER_TEST_UTIL_H_
