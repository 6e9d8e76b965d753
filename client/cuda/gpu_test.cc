// GPU tests (ctest label `gpu`): the copy engine and the normalisation
// kernel against the CPU reference. Each test skips without a device; the
// binary exits with mini_test::kSkipExitCode when all of them skipped.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "client/cuda/copy_engine.h"
#include "client/cuda/erase_mix.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "client/cuda/testing/mini_test.h"
#include "client/cuda/testing/test_kernels.h"
#include "common/shared_region.h"

namespace batchd::cuda {
namespace {

#define REQUIRE_DEVICE()                         \
  do {                                           \
    const Status probe = ProbeDevice();          \
    if (!probe.ok()) MINI_SKIP(probe.message()); \
  } while (false)

#define CUDA_OK(expr) MINI_ASSERT_EQ(static_cast<int>(expr), 0)

void FillRandom(uint8_t* data, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(rng());
}

// Distance in units in the last place between two floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// Ordered integer of a 16-bit float pattern, for ulp distances.
int32_t Ordered16(uint16_t bits) {
  return (bits & 0x8000) ? -static_cast<int32_t>(bits & 0x7fff)
                         : static_cast<int32_t>(bits);
}

MINI_TEST(CopyEngine, RawCopiesAreExact) {
  REQUIRE_DEVICE();
  CopyEngineOptions options;
  options.depth = 3;
  options.max_input_bytes = 5 << 20;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::unique_ptr<PinnedBuffer> host;
  MINI_ASSERT_OK(PinnedBuffer::Allocate(options.max_input_bytes, &host));
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, size_t{5 << 20}}) {
    FillRandom(host->data(), bytes, static_cast<uint32_t>(bytes));
    CopyTicket ticket;
    MINI_ASSERT_OK(engine->Submit(host->data(), bytes, nullptr, &ticket));
    MINI_EXPECT_EQ(ticket.output_bytes, bytes);
    MINI_ASSERT_OK(SynchronizeEvent(ticket.ready));
    std::vector<uint8_t> back(bytes);
    if (bytes > 0) {
      CUDA_OK(cudaMemcpy(back.data(), ticket.output, bytes,
                         cudaMemcpyDeviceToHost));
    }
    MINI_EXPECT_TRUE(bytes == 0 ||
                     std::memcmp(back.data(), host->data(), bytes) == 0);
    MINI_ASSERT_OK(engine->Release(ticket.slot, nullptr));
  }
  CopyTicket ticket;
  MINI_EXPECT_EQ(
      engine
          ->Submit(host->data(), options.max_input_bytes + 1, nullptr, &ticket)
          .code(),
      StatusCode::kInvalidArgument);
  MINI_EXPECT_EQ(engine->Release(0, nullptr).code(),
                 StatusCode::kFailedPrecondition);
  MINI_EXPECT_EQ(engine->free_slots(), 3);
}

// Same-host shared memory: the ring a daemon decodes into is a memfd
// mapping; registered with cudaHostRegister, the copy engine DMAs from it.
MINI_TEST(CopyEngine, CopiesFromARegisteredSharedRegion) {
  REQUIRE_DEVICE();
  const size_t slot_bytes = size_t{3} << 20;
  auto region = common::SharedRegion::Create(2 * slot_bytes);
  MINI_ASSERT_EQ(region.ok(), true);
  MINI_EXPECT_TRUE(!HostRegistration::IsRegistered(region->data()));
  std::unique_ptr<HostRegistration> registration;
  MINI_ASSERT_OK(HostRegistration::Register(region->data(), region->size(),
                                            &registration));
  MINI_EXPECT_TRUE(HostRegistration::IsRegistered(region->data()));
  CopyEngineOptions options;
  options.depth = 2;
  options.max_input_bytes = slot_bytes;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  for (int slot = 0; slot < 2; ++slot) {
    uint8_t* host = region->data() + slot * slot_bytes;
    FillRandom(host, slot_bytes, static_cast<uint32_t>(slot + 1));
    CopyTicket ticket;
    MINI_ASSERT_OK(engine->Submit(host, slot_bytes, nullptr, &ticket));
    MINI_ASSERT_OK(SynchronizeEvent(ticket.ready));
    std::vector<uint8_t> back(slot_bytes);
    CUDA_OK(cudaMemcpy(back.data(), ticket.output, slot_bytes,
                       cudaMemcpyDeviceToHost));
    MINI_EXPECT_TRUE(std::memcmp(back.data(), host, slot_bytes) == 0);
    MINI_ASSERT_OK(engine->Release(ticket.slot, nullptr));
  }
  registration.reset();
  MINI_EXPECT_TRUE(!HostRegistration::IsRegistered(region->data()));
}

MINI_TEST(CopyEngine, FullRingIsAnErrorNotAHang) {
  REQUIRE_DEVICE();
  CopyEngineOptions options;
  options.depth = 2;
  options.max_input_bytes = 64;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::vector<uint8_t> host(64, 7);
  CopyTicket a, b, c;
  MINI_ASSERT_OK(engine->Submit(host.data(), 64, nullptr, &a));
  MINI_ASSERT_OK(engine->Submit(host.data(), 64, nullptr, &b));
  MINI_EXPECT_NE(a.slot, b.slot);
  MINI_EXPECT_EQ(engine->Submit(host.data(), 64, nullptr, &c).code(),
                 StatusCode::kFailedPrecondition);
  MINI_ASSERT_OK(engine->Release(a.slot, nullptr));
  MINI_ASSERT_OK(engine->Submit(host.data(), 64, nullptr, &c));
  MINI_EXPECT_EQ(c.slot, a.slot);
  MINI_ASSERT_OK(engine->Release(b.slot, nullptr));
  MINI_ASSERT_OK(engine->Release(c.slot, nullptr));
}

// RandomErasing (value 0 and noise) and MixUp/CutMix through the copy
// engine's kernel: bit-identical to the CPU path, every dtype and layout.
MINI_TEST(EraseMix, GpuMatchesCpuBitForBit) {
  REQUIRE_DEVICE();
  constexpr uint64_t kN = 6, kH = 29, kW = 33;
  CopyEngineOptions options;
  options.depth = 2;
  options.max_input_bytes = kN * 3 * kH * kW;
  options.max_output_bytes = options.max_input_bytes * 4;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::unique_ptr<PinnedBuffer> host;
  MINI_ASSERT_OK(PinnedBuffer::Allocate(options.max_input_bytes, &host));
  FillRandom(host->data(), options.max_input_bytes, 7);
  int cases = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Layout in : {Layout::kNHWC, Layout::kNCHW}) {
      for (Layout out : {Layout::kNHWC, Layout::kNCHW}) {
        for (MixKind kind :
             {MixKind::kNone, MixKind::kMixup, MixKind::kCutmix}) {
          NormalizeSpec spec;
          spec.dtype = dtype;
          spec.layout = out;
          spec.mean = {0.485f, 0.456f, 0.406f};
          spec.std = {0.229f, 0.224f, 0.225f};
          const std::vector<uint64_t> shape =
              in == Layout::kNHWC ? std::vector<uint64_t>{kN, kH, kW, 3}
                                  : std::vector<uint64_t>{kN, 3, kH, kW};
          NormalizeParams p;
          MINI_ASSERT_OK(MakeNormalizeParams(shape, in, spec, &p));
          EraseMix em;
          em.rects.resize(kN);
          em.rects[0] = {.top = 2, .left = 3, .height = 10, .width = 7};
          em.rects[3] = {.top = 0, .left = 0, .height = 28, .width = 32,
                         .noise = 1, .noise_key = 0xabcdef0123456789ull};
          em.rects[5] = {.top = 20, .left = 30, .height = 9, .width = 3,
                         .noise = 1, .noise_key = 42};
          MINI_ASSERT_OK(MakeMixParams(
              kind, 0.41421356, {.top = 4, .left = 6, .height = 17,
                                 .width = 20},
              &em.mix));
          std::vector<uint8_t> want(p.output_bytes());
          NormalizeEraseMixCpu(host->data(), want.data(), p, em);
          CopyTicket ticket;
          MINI_ASSERT_OK(engine->Submit(host->data(), p.input_bytes(), &p,
                                        &ticket, &em));
          MINI_ASSERT_OK(SynchronizeEvent(ticket.ready));
          std::vector<uint8_t> got(p.output_bytes());
          CUDA_OK(cudaMemcpy(got.data(), ticket.output, got.size(),
                             cudaMemcpyDeviceToHost));
          MINI_ASSERT_OK(engine->Release(ticket.slot, nullptr));
          size_t differ = 0;
          for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
          if (differ != 0) {
            std::fprintf(stderr, "dtype %s in %s out %s mix %d: %zu bytes "
                         "differ\n", DTypeName(dtype), LayoutName(in),
                         LayoutName(out), static_cast<int>(kind), differ);
          }
          MINI_EXPECT_EQ(differ, size_t{0});
          ++cases;
        }
      }
    }
  }
  MINI_EXPECT_EQ(cases, 36);
}

MINI_TEST(Normalize, GpuMatchesCpuReference) {
  REQUIRE_DEVICE();
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f};
  const std::vector<float> std_dev = {0.229f, 0.224f, 0.225f};
  CopyEngineOptions options;
  options.depth = 2;
  options.max_input_bytes = 8 * 3 * 37 * 41;
  options.max_output_bytes = options.max_input_bytes * 4;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::unique_ptr<PinnedBuffer> host;
  MINI_ASSERT_OK(PinnedBuffer::Allocate(options.max_input_bytes, &host));
  FillRandom(host->data(), options.max_input_bytes, 42);
  int cases = 0;
  // 37x41 takes the general kernel; 32x20 (h*w % 4 == 0) the fast path for
  // NHWC -> NCHW.
  for (const auto& [h, w] : {std::pair<uint64_t, uint64_t>{37, 41},
                             std::pair<uint64_t, uint64_t>{32, 20}}) {
    for (DType dtype :
         {DType::kUint8, DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (Layout in : {Layout::kNHWC, Layout::kNCHW}) {
        for (Layout out : {Layout::kNHWC, Layout::kNCHW}) {
          NormalizeSpec spec;
          spec.dtype = dtype;
          spec.layout = out;
          spec.mean = mean;
          spec.std = std_dev;
          const std::vector<uint64_t> shape =
              in == Layout::kNHWC ? std::vector<uint64_t>{8, h, w, 3}
                                  : std::vector<uint64_t>{8, 3, h, w};
          NormalizeParams p;
          MINI_ASSERT_OK(MakeNormalizeParams(shape, in, spec, &p));
          std::vector<uint8_t> want(p.output_bytes());
          NormalizeCpu(host->data(), want.data(), p);
          CopyTicket ticket;
          MINI_ASSERT_OK(
              engine->Submit(host->data(), p.input_bytes(), &p, &ticket));
          MINI_ASSERT_OK(SynchronizeEvent(ticket.ready));
          std::vector<uint8_t> got(p.output_bytes());
          CUDA_OK(cudaMemcpy(got.data(), ticket.output, got.size(),
                             cudaMemcpyDeviceToHost));
          MINI_ASSERT_OK(engine->Release(ticket.slot, nullptr));
          int64_t worst = 0;
          size_t exact_mismatches = 0;
          for (size_t i = 0; i < p.elements(); ++i) {
            if (dtype == DType::kUint8) {
              if (got[i] != want[i]) ++exact_mismatches;
            } else if (dtype == DType::kFloat32) {
              float a, b;
              std::memcpy(&a, &got[i * 4], 4);
              std::memcpy(&b, &want[i * 4], 4);
              worst = std::max(worst, UlpDistance(a, b));
            } else {
              uint16_t a, b;
              std::memcpy(&a, &got[i * 2], 2);
              std::memcpy(&b, &want[i * 2], 2);
              worst = std::max<int64_t>(worst,
                                        std::abs(Ordered16(a) - Ordered16(b)));
            }
          }
          MINI_EXPECT_EQ(exact_mismatches, 0u);
          MINI_EXPECT_LE(worst, 1);
          ++cases;
        }
      }
    }
  }
  MINI_EXPECT_EQ(cases, 32);
}

// Each step's consumer kernel spins, then sums the slot; the next copies
// into the same slot are submitted at once. If a slot were overwritten
// before its consumer's event, the sum would show the later batch's bytes.
// A batch of views (Plan.views): one copy, one kernel per view, each view's
// output where MakeNormalizeParts puts it, bit for bit the CPU's; parts
// laid out otherwise, or erasing with views, are refused.
MINI_TEST(CopyEngine, ViewPartsMatchTheCpuBitForBit) {
  REQUIRE_DEVICE();
  // DINO-like, small: 2 views at 24 and 3 at 10 (the last two views
  // start off 16-byte alignment with 5 samples: the general kernel runs
  // too).
  const std::vector<uint64_t> sides = {24, 24, 10, 10, 10};
  constexpr uint64_t kN = 5;
  CopyEngineOptions options;
  options.depth = 2;
  options.max_input_bytes = 1 << 20;
  options.max_output_bytes = 4 << 20;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::unique_ptr<PinnedBuffer> host;
  MINI_ASSERT_OK(PinnedBuffer::Allocate(options.max_input_bytes, &host));
  int cases = 0;
  for (DType dtype : {DType::kUint8, DType::kFloat32, DType::kFloat16,
                      DType::kBFloat16}) {
    for (Layout in : {Layout::kNHWC, Layout::kNCHW}) {
      for (Layout out : {Layout::kNHWC, Layout::kNCHW}) {
        NormalizeSpec spec;
        spec.dtype = dtype;
        spec.layout = out;
        spec.mean = {0.485f, 0.456f, 0.406f};
        spec.std = {0.229f, 0.224f, 0.225f};
        std::vector<std::vector<uint64_t>> shapes;
        for (uint64_t side : sides) {
          shapes.push_back(in == Layout::kNHWC
                               ? std::vector<uint64_t>{kN, side, side, 3}
                               : std::vector<uint64_t>{kN, 3, side, side});
        }
        std::vector<NormalizePart> parts;
        MINI_ASSERT_OK(MakeNormalizeParts(shapes, in, spec, &parts));
        const size_t input_bytes = PartsInputBytes(parts);
        FillRandom(host->data(), input_bytes, 17 + cases);
        std::vector<uint8_t> want(PartsOutputBytes(parts));
        NormalizePartsCpu(host->data(), want.data(), parts);
        CopyTicket ticket;
        MINI_ASSERT_OK(engine->Submit(host->data(), input_bytes, parts,
                                      &ticket));
        MINI_EXPECT_EQ(ticket.output_bytes, want.size());
        MINI_ASSERT_OK(SynchronizeEvent(ticket.ready));
        std::vector<uint8_t> got(want.size());
        CUDA_OK(cudaMemcpy(got.data(), ticket.output, got.size(),
                           cudaMemcpyDeviceToHost));
        MINI_ASSERT_OK(engine->Release(ticket.slot, nullptr));
        MINI_EXPECT_TRUE(got == want);
        ++cases;
      }
    }
  }
  MINI_EXPECT_EQ(cases, 16);

  NormalizeSpec spec;
  std::vector<NormalizePart> parts;
  MINI_ASSERT_OK(MakeNormalizeParts({{kN, 24, 24, 3}, {kN, 12, 12, 3}},
                                    Layout::kNHWC, spec, &parts));
  CopyTicket ticket;
  std::vector<NormalizePart> gap = parts;
  gap[1].output_offset += 4;
  MINI_EXPECT_EQ(engine->Submit(host->data(), PartsInputBytes(parts), gap,
                                &ticket)
                     .code(),
                 StatusCode::kInvalidArgument);
  MINI_EXPECT_EQ(engine->Submit(host->data(), PartsInputBytes(parts) + 1,
                                parts, &ticket)
                     .code(),
                 StatusCode::kInvalidArgument);
  EraseMix em;
  em.rects.resize(kN);
  em.rects[0] = {.top = 0, .left = 0, .height = 2, .width = 2};
  MINI_EXPECT_EQ(engine->Submit(host->data(), PartsInputBytes(parts), parts,
                                &ticket, &em)
                     .code(),
                 StatusCode::kInvalidArgument);
  MINI_EXPECT_EQ(engine->free_slots(), 2);
}

MINI_TEST(CopyEngine, NoSlotIsReusedBeforeItsConsumerIsDone) {
  REQUIRE_DEVICE();
  constexpr int kSteps = 8;
  constexpr size_t kBytes = 1 << 20;
  CopyEngineOptions options;
  options.depth = 2;
  options.max_input_bytes = kBytes;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::vector<std::unique_ptr<PinnedBuffer>> hosts(kSteps);
  for (int step = 0; step < kSteps; ++step) {
    MINI_ASSERT_OK(PinnedBuffer::Allocate(kBytes, &hosts[step]));
    std::memset(hosts[step]->data(), step + 1, kBytes);
  }
  cudaStream_t compute;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  unsigned long long* sums = nullptr;
  CUDA_OK(cudaMalloc(&sums, kSteps * sizeof(unsigned long long)));
  for (int step = 0; step < kSteps; ++step) {
    CopyTicket ticket;
    MINI_ASSERT_OK(
        engine->Submit(hosts[step]->data(), kBytes, nullptr, &ticket));
    MINI_ASSERT_OK(StreamWaitEvent(compute, ticket.ready));
    MINI_ASSERT_OK(testing::LaunchSpinThenSum(
        compute, /*nanoseconds=*/20'000'000,
        static_cast<const uint8_t*>(ticket.output), kBytes, sums + step));
    MINI_ASSERT_OK(engine->Release(ticket.slot, compute));
  }
  CUDA_OK(cudaStreamSynchronize(compute));
  std::vector<unsigned long long> got(kSteps);
  CUDA_OK(cudaMemcpy(got.data(), sums, got.size() * sizeof(got[0]),
                     cudaMemcpyDeviceToHost));
  for (int step = 0; step < kSteps; ++step) {
    MINI_EXPECT_EQ(got[step],
                   static_cast<unsigned long long>(step + 1) * kBytes);
  }
  std::printf("submissions that waited on the GPU for a consumer: %llu\n",
              static_cast<unsigned long long>(engine->waits_on_consumer()));
  CUDA_OK(cudaFree(sums));
  CUDA_OK(cudaStreamDestroy(compute));
}

// With a synthetic compute kernel as long as one copy, the copy of step i+1
// runs during the compute of step i: a step takes about max(copy, compute),
// not their sum.
MINI_TEST(CopyEngine, CopyOverlapsCompute) {
  REQUIRE_DEVICE();
  constexpr size_t kBytes = 64 << 20;
  constexpr int kSteps = 12;
  CopyEngineOptions options;
  options.depth = 3;
  options.max_input_bytes = kBytes;
  std::unique_ptr<CopyEngine> engine;
  MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
  std::unique_ptr<PinnedBuffer> host;
  MINI_ASSERT_OK(PinnedBuffer::Allocate(kBytes, &host));
  std::memset(host->data(), 1, kBytes);
  cudaStream_t compute;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  // Copy time alone (warm, then measured).
  float copy_ms = 0;
  for (int i = 0; i < 3; ++i) {
    CopyTicket ticket;
    CUDA_OK(cudaEventRecord(start, engine->copy_stream()));
    MINI_ASSERT_OK(engine->Submit(host->data(), kBytes, nullptr, &ticket));
    CUDA_OK(cudaEventRecord(stop, engine->copy_stream()));
    CUDA_OK(cudaEventSynchronize(stop));
    CUDA_OK(cudaEventElapsedTime(&copy_ms, start, stop));
    MINI_ASSERT_OK(engine->Release(ticket.slot, nullptr));
  }
  const double compute_ms = copy_ms;
  CUDA_OK(cudaStreamSynchronize(engine->copy_stream()));
  CUDA_OK(cudaEventRecord(start, compute));
  for (int step = 0; step < kSteps; ++step) {
    CopyTicket ticket;
    MINI_ASSERT_OK(engine->Submit(host->data(), kBytes, nullptr, &ticket));
    MINI_ASSERT_OK(StreamWaitEvent(compute, ticket.ready));
    MINI_ASSERT_OK(
        testing::LaunchSpin(compute, static_cast<uint64_t>(compute_ms * 1e6)));
    MINI_ASSERT_OK(engine->Release(ticket.slot, compute));
  }
  CUDA_OK(cudaEventRecord(stop, compute));
  CUDA_OK(cudaEventSynchronize(stop));
  float total_ms = 0;
  CUDA_OK(cudaEventElapsedTime(&total_ms, start, stop));
  const double step_ms = total_ms / kSteps;
  std::printf("copy %.3f ms, compute %.3f ms, step %.3f ms (sum %.3f)\n",
              copy_ms, compute_ms, step_ms, copy_ms + compute_ms);
  // Serial would be copy + compute; overlapped about max(copy, compute).
  // The margin keeps launch overheads from deciding the verdict.
  MINI_EXPECT_LT(step_ms, 0.8 * (copy_ms + compute_ms));
  CUDA_OK(cudaEventDestroy(start));
  CUDA_OK(cudaEventDestroy(stop));
  CUDA_OK(cudaStreamDestroy(compute));
}

MINI_TEST(CopyEngine, LongRunsLeakNoPinnedOrDeviceMemory) {
  REQUIRE_DEVICE();
  CUDA_OK(cudaDeviceSynchronize());
  size_t free_before = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  const size_t live_before = PinnedBuffer::LiveCount();
  constexpr size_t kBytes = 4 << 20;
  for (int round = 0; round < 30; ++round) {
    CopyEngineOptions options;
    options.depth = 3;
    options.max_input_bytes = kBytes;
    options.max_output_bytes = kBytes * 4;
    std::unique_ptr<CopyEngine> engine;
    MINI_ASSERT_OK(CopyEngine::Create(options, &engine));
    std::vector<std::unique_ptr<PinnedBuffer>> ring(3);
    for (auto& buffer : ring) {
      MINI_ASSERT_OK(PinnedBuffer::Allocate(kBytes, &buffer));
      std::memset(buffer->data(), round, kBytes);
    }
    NormalizeSpec spec;
    NormalizeParams p;
    MINI_ASSERT_OK(
        MakeNormalizeParams({1, 1024, 1024, 4}, Layout::kNHWC, spec, &p));
    for (int step = 0; step < 20; ++step) {
      CopyTicket ticket;
      MINI_ASSERT_OK(
          engine->Submit(ring[step % 3]->data(), kBytes, &p, &ticket));
      MINI_ASSERT_OK(SynchronizeEvent(ticket.input_consumed));
      MINI_ASSERT_OK(engine->Release(ticket.slot, engine->copy_stream()));
    }
  }
  MINI_EXPECT_EQ(PinnedBuffer::LiveCount(), live_before);
  MINI_EXPECT_EQ(PinnedBuffer::LiveBytes(), 0u);
  CUDA_OK(cudaDeviceSynchronize());
  size_t free_after = 0;
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  // Allocation granularity can shift a little; 30 leaked engines would be
  // over a GiB.
  MINI_EXPECT_LE(free_before, free_after + (64u << 20));
}

}  // namespace
}  // namespace batchd::cuda

int main(int argc, char** argv) { return mini_test::RunAll(argc, argv); }
