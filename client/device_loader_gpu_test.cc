// GPU tests of the DeviceLoader (ctest label `gpu`): batches of views
// (Plan.views) normalised on the device are bit for bit the host path's.
// Every test skips without a usable CUDA device.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "client/device_loader.h"
#include "common/status_macros.h"
#include "testing/fake_data_service.h"
#include "testing/status_matchers.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::client::testing::FakeDataService;
using ::batchd::client::testing::FakeServer;

#define REQUIRE_DEVICE()                                          \
  do {                                                            \
    const cuda::Status probe = cuda::ProbeDevice();               \
    if (!probe.ok()) GTEST_SKIP() << probe.message();             \
  } while (false)

DeviceLoaderOptions ViewOptions(const FakeServer& server, bool force_host) {
  DeviceLoaderOptions options;
  options.loader.endpoint = server.endpoint();
  options.loader.plan.set_dataset("fake");
  options.loader.plan.set_batch_size(4);
  options.loader.prefetch = 4;
  batchd::v1::ViewGroup* global = options.loader.plan.add_views();
  global->set_count(2);
  global->mutable_crop()->set_size(24);
  batchd::v1::ViewGroup* local = options.loader.plan.add_views();
  local->set_count(3);
  local->mutable_crop()->set_size(10);
  options.force_host = force_host;
  options.normalize.mean = {0.485f, 0.456f, 0.406f};
  options.normalize.std = {0.229f, 0.224f, 0.225f};
  options.depth = 2;
  return options;
}

// The batch's output in host memory.
std::vector<uint8_t> HostBytes(const DeviceBatch& batch) {
  std::vector<uint8_t> bytes(batch.size());
  if (batch.on_device()) {
    EXPECT_TRUE(cuda::SynchronizeEvent(batch.ready_event()).ok());
    EXPECT_TRUE(
        cuda::CopyToHost(bytes.data(), batch.data(), bytes.size()).ok());
  } else {
    const auto* data = static_cast<const uint8_t*>(batch.data());
    bytes.assign(data, data + batch.size());
  }
  return bytes;
}

TEST(DeviceLoaderGpuTest, ViewsOnTheDeviceAreTheHostPathsBitForBit) {
  REQUIRE_DEVICE();
  FakeDataService::Options fake;
  fake.view_sides = {24, 24, 10, 10, 10};
  fake.batch_size = 4;
  fake.last_batch_size = 3;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  for (cuda::DType dtype : {cuda::DType::kUint8, cuda::DType::kFloat32,
                            cuda::DType::kFloat16, cuda::DType::kBFloat16}) {
    for (cuda::Layout layout : {cuda::Layout::kNHWC, cuda::Layout::kNCHW}) {
      DeviceLoaderOptions device_options = ViewOptions(server, false);
      device_options.normalize.dtype = dtype;
      device_options.normalize.layout = layout;
      DeviceLoaderOptions host_options = device_options;
      host_options.force_host = true;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> device,
                           DeviceLoader::Create(device_options));
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceLoader> host,
                           DeviceLoader::Create(host_options));
      ASSERT_TRUE(device->on_device());
      ASSERT_OK(device->StartEpoch(1));
      ASSERT_OK(host->StartEpoch(1));
      // The whole epoch (8 batches, the last of 3 samples) through 2
      // slots: each slot is reused only after its batch was released.
      for (uint64_t index = 0; index < 8; ++index) {
        ASSERT_OK_AND_ASSIGN(DeviceBatch got, device->Next());
        ASSERT_OK_AND_ASSIGN(DeviceBatch want, host->Next());
        EXPECT_TRUE(got.on_device());
        EXPECT_NE(got.ready_event(), nullptr);
        EXPECT_EQ(got.shape, want.shape);
        ASSERT_EQ(got.views.size(), 5u);
        for (size_t v = 0; v < got.views.size(); ++v) {
          EXPECT_EQ(got.views[v].SerializeAsString(),
                    want.views[v].SerializeAsString())
              << "view " << v;
        }
        EXPECT_TRUE(HostBytes(got) == HostBytes(want))
            << cuda::DTypeName(dtype) << " " << cuda::LayoutName(layout)
            << " batch " << index;
      }
    }
  }
}

}  // namespace
}  // namespace batchd::client
