#include "client/device_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "testing/fake_data_service.h"
#include "common/status_macros.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::client::testing::FakeDataService;
using ::batchd::client::testing::FakePixel;
using ::batchd::client::testing::FakeSampleIndex;
using ::batchd::client::testing::FakeServer;
using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<float> kMean = {0.485f, 0.456f, 0.406f};
const std::vector<float> kStd = {0.229f, 0.224f, 0.225f};

DeviceLoaderOptions OptionsFor(const FakeServer& server, bool force_host) {
  DeviceLoaderOptions options;
  options.loader.endpoint = server.endpoint();
  options.loader.plan.set_dataset("fake");
  options.loader.plan.set_batch_size(4);
  options.loader.prefetch = 4;
  options.force_host = force_host;
  options.normalize.mean = kMean;
  options.normalize.std = kStd;
  return options;
}

// The fake's pixels of batch (`epoch`, `index`), NHWC uint8.
std::vector<uint8_t> FakeBytes(const FakeDataService& service, uint64_t epoch,
                               uint64_t index) {
  std::vector<uint8_t> bytes(service.BatchBytes(index));
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = FakePixel(epoch, index, i);
  }
  return bytes;
}

// The batch's output bytes in host memory, copied back from the device when
// it is there.
std::vector<uint8_t> HostBytes(const DeviceBatch& batch) {
  std::vector<uint8_t> bytes(batch.size());
  if (batch.on_device()) {
    EXPECT_TRUE(cuda::SynchronizeEvent(batch.ready_event()).ok());
    EXPECT_TRUE(cuda::CopyToHost(bytes.data(), batch.data(), bytes.size()).ok());
  } else if (batch.size() > 0) {
    std::memcpy(bytes.data(), batch.data(), batch.size());
  }
  return bytes;
}

// Checks metadata and every output byte against the CPU reference applied
// to the fake's pixels.
void ExpectBatch(const DeviceBatch& batch, uint64_t epoch, uint64_t index,
                 const FakeDataService& service,
                 const cuda::NormalizeSpec& spec) {
  const FakeDataService::Options& o = service.options();
  EXPECT_EQ(batch.epoch, epoch);
  EXPECT_EQ(batch.batch_index, index);
  const uint64_t n = service.BatchBytes(index) / (o.height * o.width * 3);
  cuda::NormalizeParams params;
  ASSERT_TRUE(cuda::MakeNormalizeParams({n, o.height, o.width, 3},
                                        cuda::Layout::kNHWC, spec, &params)
                  .ok());
  EXPECT_EQ(batch.shape, params.output_shape());
  EXPECT_EQ(batch.dtype, spec.dtype);
  EXPECT_EQ(batch.layout, spec.layout);
  ASSERT_EQ(batch.labels.size(), n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t sample = FakeSampleIndex(epoch, index, i, o.batch_size);
    EXPECT_EQ(batch.sample_indices[i], sample);
    EXPECT_EQ(batch.labels[i], static_cast<int32_t>(sample % 7));
  }
  const std::vector<uint8_t> input = FakeBytes(service, epoch, index);
  std::vector<uint8_t> want(params.output_bytes());
  cuda::NormalizeCpu(input.data(), want.data(), params);
  ASSERT_EQ(batch.size(), want.size());
  EXPECT_TRUE(HostBytes(batch) == want) << "batch " << index;
}

TEST(DeviceLoaderTest, HostPathDeliversNormalisedBatchesInOrder) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(options));
  EXPECT_FALSE(loader->on_device());
  EXPECT_STREQ(loader->path(), "host");
  ASSERT_OK(loader->StartEpoch(0));
  for (uint64_t index = 0; index < 8; ++index) {
    ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
    EXPECT_FALSE(batch.on_device());
    EXPECT_EQ(batch.ready_event(), nullptr);
    ExpectBatch(batch, 0, index, server.service(), options.normalize);
  }
  EXPECT_THAT(loader->Next(), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

// The host path reports its normalisation as copy time (Loader::RecordCopy)
// on top of the receive thread's copies: the stall accounting, and with it
// the client-bound diagnosis, sees it.
TEST(DeviceLoaderTest, HostPathReportsItsCopyTime) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(OptionsFor(server, /*force_host=*/true)));
  ASSERT_OK(loader->StartEpoch(0));
  absl::Duration steps_copy;
  for (uint64_t index = 0; index < 8; ++index) {
    ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
    const Loader::Stats stats = loader->loader().stats();
    EXPECT_GT(stats.last_step.copy, absl::ZeroDuration()) << index;
    steps_copy += stats.last_step.copy;
  }
  EXPECT_THAT(loader->Next(), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  const Loader::Stats stats = loader->loader().stats();
  EXPECT_EQ(stats.batches, 8u);
  // Every step's copy (receive + normalise) is in the total.
  EXPECT_GE(stats.copy, steps_copy);
  EXPECT_GE(stats.copy_fraction(), 0.0);
  EXPECT_LE(stats.copy_fraction(), 1.0);
  EXPECT_NE(loader->Diagnose().line, "");
}

TEST(DeviceLoaderTest, HostPathValuesFollowTheFormula) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(OptionsFor(server, true)));
  ASSERT_OK(loader->StartEpoch(3));
  ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
  ASSERT_THAT(batch.shape, ElementsAre(4u, 3u, 10u, 10u));
  const float* values = static_cast<const float*>(batch.data());
  const std::vector<uint8_t> input = FakeBytes(server.service(), 3, 0);
  int bad = 0;
  for (uint64_t n = 0; n < 4; ++n)
    for (uint64_t c = 0; c < 3; ++c)
      for (uint64_t i = 0; i < 100; ++i) {
        const double x = input[(n * 100 + i) * 3 + c];
        const double want = (x / 255.0 - kMean[c]) / kStd[c];
        if (std::fabs(values[(n * 3 + c) * 100 + i] - want) > 1e-5) ++bad;
      }
  EXPECT_EQ(bad, 0);
}

TEST(DeviceLoaderTest, EveryOutputTypeAndLayoutMatchesTheReference) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  for (cuda::DType dtype : {cuda::DType::kUint8, cuda::DType::kFloat32,
                            cuda::DType::kFloat16, cuda::DType::kBFloat16}) {
    for (cuda::Layout layout : {cuda::Layout::kNHWC, cuda::Layout::kNCHW}) {
      // The automatic path: the device where there is one.
      DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/false);
      options.normalize.dtype = dtype;
      options.normalize.layout = layout;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                           DeviceLoader::Create(options));
      EXPECT_EQ(loader->on_device(), cuda::ProbeDevice().ok());
      ASSERT_OK(loader->StartEpoch(1, /*first_batch=*/5));
      for (uint64_t index = 5; index < 8; ++index) {
        ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
        ExpectBatch(batch, 1, index, server.service(), options.normalize);
      }
    }
  }
}

TEST(DeviceLoaderTest, Uint8InTheWireLayoutIsTheReceivedBytes) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/true);
  options.normalize.dtype = cuda::DType::kUint8;
  options.normalize.layout = cuda::Layout::kNHWC;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(options));
  ASSERT_OK(loader->StartEpoch(0));
  ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
  EXPECT_THAT(batch.shape, ElementsAre(4u, 10u, 10u, 3u));
  EXPECT_TRUE(HostBytes(batch) == FakeBytes(server.service(), 0, 0));
}

TEST(DeviceLoaderTest, HeldSlotsLimitNextWithoutLosingABatch) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/true);
  options.depth = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(options));
  ASSERT_OK(loader->StartEpoch(0));
  ASSERT_OK_AND_ASSIGN(DeviceBatch first, loader->Next());
  ASSERT_OK_AND_ASSIGN(DeviceBatch second, loader->Next());
  EXPECT_THAT(loader->Next(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("release a DeviceBatch")));
  EXPECT_EQ(loader->state().next_batch, 2u);
  first.Release();
  EXPECT_EQ(first.data(), nullptr);
  first.Release();  // idempotent
  ASSERT_OK_AND_ASSIGN(DeviceBatch third, loader->Next());
  ExpectBatch(third, 0, 2, server.service(), options.normalize);
  // The second batch's slot was not overwritten by the third.
  ExpectBatch(second, 0, 1, server.service(), options.normalize);
  DeviceBatch moved = std::move(second);
  EXPECT_EQ(second.data(), nullptr);
  ExpectBatch(moved, 0, 1, server.service(), options.normalize);
}

TEST(DeviceLoaderTest, ABatchOutlivesItsLoader) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/false);
  DeviceBatch batch;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                         DeviceLoader::Create(options));
    ASSERT_OK(loader->StartEpoch(0));
    ASSERT_OK_AND_ASSIGN(batch, loader->Next());
  }
  ExpectBatch(batch, 0, 0, server.service(), options.normalize);
}

TEST(DeviceLoaderTest, RestoreResumesAtTheCheckpoint) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(options));
  ASSERT_OK(loader->Restore(LoaderState{/*epoch=*/2, /*next_batch=*/6}));
  ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
  ExpectBatch(batch, 2, 6, server.service(), options.normalize);
  EXPECT_EQ(loader->state().next_batch, 7u);
}

TEST(DeviceLoaderTest, BadOptionsAreRejected) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = OptionsFor(server, /*force_host=*/true);
  options.normalize.std = {0.2f, 0.0f, 0.2f};
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("std of channel 1")));
  options = OptionsFor(server, true);
  options.normalize.mean = {0.1f, 0.2f};
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("one value per channel")));
  options = OptionsFor(server, true);
  options.depth = 0;
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depth")));
  options = OptionsFor(server, true);
  std::unique_ptr<BufferAllocator> heap = NewHeapAllocator();
  options.loader.allocator = heap.get();
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("allocator must be null")));
  options = OptionsFor(server, true);
  options.loader.plan.set_dataset("bad");
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

// Two views at 6 and three at 4 pixels (DINO's shape, small); the last
// batch of the epoch has 3 samples.
FakeDataService::Options ViewServerOptions() {
  FakeDataService::Options o;
  o.view_sides = {6, 6, 4, 4, 4};
  o.last_batch_size = 3;
  return o;
}

DeviceLoaderOptions ViewOptions(const FakeServer& server, bool force_host) {
  DeviceLoaderOptions options = OptionsFor(server, force_host);
  batchd::v1::ViewGroup* global = options.loader.plan.add_views();
  global->set_count(2);
  global->mutable_crop()->set_size(6);
  batchd::v1::ViewGroup* local = options.loader.plan.add_views();
  local->set_count(3);
  local->mutable_crop()->set_size(4);
  return options;
}

// Checks a batch of views: one output per view, in the fake's order, each
// with its shape in the output layout and its values those of NormalizeCpu
// on that view's received bytes alone.
void ExpectViewBatch(const DeviceBatch& batch, uint64_t epoch, uint64_t index,
                     const FakeDataService& service,
                     const cuda::NormalizeSpec& spec) {
  const FakeDataService::Options& o = service.options();
  EXPECT_EQ(batch.epoch, epoch);
  EXPECT_EQ(batch.batch_index, index);
  const uint64_t n = service.BatchBytes(index) / service.SampleBytes();
  ASSERT_EQ(batch.views.size(), o.view_sides.size());
  ASSERT_EQ(batch.labels.size(), n);
  EXPECT_EQ(batch.dtype, spec.dtype);
  EXPECT_EQ(batch.layout, spec.layout);
  const std::vector<uint8_t> input = FakeBytes(service, epoch, index);
  const std::vector<uint8_t> output = HostBytes(batch);
  const size_t dtype_bytes = cuda::DTypeBytes(spec.dtype);
  EXPECT_THAT(batch.shape, ElementsAre(input.size()));
  ASSERT_EQ(output.size(), input.size() * dtype_bytes);
  uint64_t input_offset = 0;
  for (size_t v = 0; v < o.view_sides.size(); ++v) {
    const uint64_t side = o.view_sides[v];
    cuda::NormalizeParams params;
    ASSERT_TRUE(cuda::MakeNormalizeParams({n, side, side, 3},
                                          cuda::Layout::kNHWC, spec, &params)
                    .ok());
    const std::vector<uint64_t> shape(batch.views[v].shape().begin(),
                                      batch.views[v].shape().end());
    EXPECT_EQ(shape, params.output_shape()) << "view " << v;
    EXPECT_EQ(batch.views[v].offset(), input_offset * dtype_bytes)
        << "view " << v;
    EXPECT_EQ(batch.view_data(v),
              static_cast<const uint8_t*>(batch.data()) +
                  input_offset * dtype_bytes);
    std::vector<uint8_t> want(params.output_bytes());
    cuda::NormalizeCpu(input.data() + input_offset, want.data(), params);
    EXPECT_TRUE(std::equal(want.begin(), want.end(),
                           output.begin() + batch.views[v].offset()))
        << "batch " << index << " view " << v;
    input_offset += params.input_bytes();
  }
  EXPECT_EQ(input_offset, input.size());
}

TEST(DeviceLoaderTest, ViewsAreNormalisedOneTensorEach) {
  FakeServer server(ViewServerOptions(), FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = ViewOptions(server, /*force_host=*/true);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                       DeviceLoader::Create(options));
  ASSERT_OK(loader->StartEpoch(2));
  for (uint64_t index = 0; index < 8; ++index) {
    ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
    ExpectViewBatch(batch, 2, index, server.service(), options.normalize);
    // The formula, written out for the first local view (view 2), NCHW.
    const uint64_t n = batch.labels.size();
    ASSERT_THAT(batch.views[2].shape(), ElementsAre(n, 3u, 4u, 4u));
    const uint64_t view_input = n * (6 * 6 * 3) * 2;
    const float* values = static_cast<const float*>(batch.view_data(2));
    int bad = 0;
    for (uint64_t s = 0; s < n; ++s)
      for (uint64_t c = 0; c < 3; ++c)
        for (uint64_t i = 0; i < 16; ++i) {
          const double x =
              FakePixel(2, index, view_input + (s * 16 + i) * 3 + c);
          const double want = (x / 255.0 - kMean[c]) / kStd[c];
          if (std::fabs(values[(s * 3 + c) * 16 + i] - want) > 1e-5) ++bad;
        }
    EXPECT_EQ(bad, 0) << "batch " << index;
  }
  EXPECT_THAT(loader->Next(),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

TEST(DeviceLoaderTest, ViewsInEveryOutputTypeAndLayoutMatchTheReference) {
  FakeServer server(ViewServerOptions(), FakeDataService::ServeInOrder());
  for (cuda::DType dtype : {cuda::DType::kUint8, cuda::DType::kFloat32,
                            cuda::DType::kFloat16, cuda::DType::kBFloat16}) {
    for (cuda::Layout layout : {cuda::Layout::kNHWC, cuda::Layout::kNCHW}) {
      // The automatic path: the device where there is one.
      DeviceLoaderOptions options = ViewOptions(server, /*force_host=*/false);
      options.normalize.dtype = dtype;
      options.normalize.layout = layout;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> loader,
                           DeviceLoader::Create(options));
      ASSERT_OK(loader->StartEpoch(1, /*first_batch=*/6));
      for (uint64_t index = 6; index < 8; ++index) {
        ASSERT_OK_AND_ASSIGN(DeviceBatch batch, loader->Next());
        ExpectViewBatch(batch, 1, index, server.service(), options.normalize);
      }
    }
  }
}

TEST(DeviceLoaderTest, ViewsWithErasingOrMixAreRefused) {
  FakeServer server(ViewServerOptions(), FakeDataService::ServeInOrder());
  DeviceLoaderOptions options = ViewOptions(server, /*force_host=*/true);
  options.loader.plan.mutable_pipeline()->mutable_erasing();
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("do not work with views")));
  options = ViewOptions(server, /*force_host=*/true);
  options.loader.plan.mutable_pipeline()->mutable_mix();
  EXPECT_THAT(DeviceLoader::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("do not work with views")));
}

TEST(PinnedAllocatorTest, FallsBackToHeapWithoutADevice) {
  std::unique_ptr<BufferAllocator> allocator = NewPinnedAllocator();
  EXPECT_STREQ(allocator->name(),
               cuda::ProbeDevice().ok() ? "cuda-pinned" : "heap");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostBuffer> buffer,
                       allocator->Allocate(1000));
  ASSERT_GE(buffer->size(), 1000u);
  std::memset(buffer->data(), 0xab, 1000);
  EXPECT_EQ(buffer->data()[999], 0xab);
}

TEST(FromCudaStatusTest, KeepsCodeAndMessage) {
  EXPECT_OK(FromCudaStatus(cuda::OkStatus()));
  EXPECT_THAT(FromCudaStatus(cuda::UnavailableError("no CUDA device")),
              StatusIs(absl::StatusCode::kUnavailable, "no CUDA device"));
  EXPECT_THAT(FromCudaStatus(cuda::ResourceExhaustedError("pinned")),
              StatusIs(absl::StatusCode::kResourceExhausted, "pinned"));
}

}  // namespace
}  // namespace batchd::client
