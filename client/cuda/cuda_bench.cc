// batchd_cuda_bench: what the client's GPU path can do on this machine.
//
//   1. H2D bandwidth, pinned vs pageable, by size; the best pinned figure is
//      the measured PCIe ceiling.
//   2. Copy/compute overlap: steps of (copy a batch, compute for as long as
//      the copy) through the copy engine; per-step time against the sum and
//      the max of the two.
//   3. Normalisation kernel throughput (bytes read + written per second) as
//      a fraction of device memory bandwidth: the measured device-to-device
//      memcpy and the theoretical figure from the bus width and clock.
//
// Usage: batchd_cuda_bench [--quick]. Without a device it prints why and
// exits 0.
#include <cstdio>
#include <cstring>
#include <string>

#include "client/cuda/runtime.h"

#if BATCHD_CUDA_ENABLED
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "client/cuda/copy_engine.h"
#include "client/cuda/normalize.h"
#include "client/cuda/testing/test_kernels.h"
#endif

namespace batchd::cuda {
namespace {

#if BATCHD_CUDA_ENABLED

#define BENCH_CUDA(expr)                                              \
  do {                                                                \
    const cudaError_t e = (expr);                                     \
    if (e != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e)); \
      return 1;                                                       \
    }                                                                 \
  } while (false)
#define BENCH_OK(expr)                                                     \
  do {                                                                     \
    const Status s = (expr);                                               \
    if (!s.ok()) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #expr, s.ToString().c_str());       \
      return 1;                                                            \
    }                                                                      \
  } while (false)

constexpr double kGB = 1e9;

// Best-of-`reps` time of `bytes` H2D from `src`, in seconds.
int TimeH2D(void* dst, const void* src, size_t bytes, int reps,
            double* seconds) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  float best = 1e30f;
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaEventRecord(start, nullptr));
    BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, nullptr));
    BENCH_CUDA(cudaEventRecord(stop, nullptr));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, ms);
  }
  *seconds = best / 1e3;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}

int Run(bool quick) {
  DeviceInfo info;
  BENCH_OK(ProbeDevice(&info));
  std::printf("device %d: %s (sm_%d%d), %.1f GiB\n", info.device,
              info.name.c_str(), info.compute_major, info.compute_minor,
              info.total_memory_bytes / double(1ull << 30));
  const int reps = quick ? 3 : 10;

  // 1. H2D pinned vs pageable.
  const size_t max_bytes = quick ? (64u << 20) : (256u << 20);
  std::unique_ptr<PinnedBuffer> pinned;
  BENCH_OK(PinnedBuffer::Allocate(max_bytes, &pinned));
  std::vector<uint8_t> pageable(max_bytes, 1);
  std::memset(pinned->data(), 1, max_bytes);
  void* device = nullptr;
  BENCH_CUDA(cudaMalloc(&device, 2 * max_bytes));
  std::printf("\n== H2D bandwidth (GB/s, best of %d) ==\n", reps);
  std::printf("%12s %10s %10s\n", "bytes", "pinned", "pageable");
  double ceiling = 0;
  for (size_t bytes = 1u << 20; bytes <= max_bytes; bytes *= 4) {
    double pinned_s = 0, pageable_s = 0;
    if (TimeH2D(device, pinned->data(), bytes, reps, &pinned_s)) return 1;
    if (TimeH2D(device, pageable.data(), bytes, reps, &pageable_s)) return 1;
    ceiling = std::max(ceiling, bytes / pinned_s / kGB);
    std::printf("%12zu %10.2f %10.2f\n", bytes, bytes / pinned_s / kGB,
                bytes / pageable_s / kGB);
  }
  double pageable_s = 0;
  if (TimeH2D(device, pageable.data(), max_bytes, reps, &pageable_s)) return 1;
  std::printf("measured PCIe ceiling (best pinned): %.2f GB/s; pageable at "
              "%zu MiB: %.0f%% of it\n",
              ceiling, max_bytes >> 20,
              100.0 * (max_bytes / pageable_s / kGB) / ceiling);

  // 2. Overlap through the copy engine. A ResNet-50 batch: 256 x 224x224x3.
  const size_t batch_bytes = std::min<size_t>(256ull * 224 * 224 * 3, max_bytes);
  {
    CopyEngineOptions options;
    options.depth = 3;
    options.max_input_bytes = batch_bytes;
    std::unique_ptr<CopyEngine> engine;
    BENCH_OK(CopyEngine::Create(options, &engine));
    cudaStream_t compute;
    BENCH_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    cudaEvent_t start, stop;
    BENCH_CUDA(cudaEventCreate(&start));
    BENCH_CUDA(cudaEventCreate(&stop));
    double copy_s = 0;
    if (TimeH2D(device, pinned->data(), batch_bytes, reps, &copy_s)) return 1;
    const double compute_s = copy_s;
    const int steps = quick ? 10 : 40;
    BENCH_CUDA(cudaDeviceSynchronize());
    BENCH_CUDA(cudaEventRecord(start, compute));
    for (int step = 0; step < steps; ++step) {
      CopyTicket ticket;
      BENCH_OK(engine->Submit(pinned->data(), batch_bytes, nullptr, &ticket));
      BENCH_OK(StreamWaitEvent(compute, ticket.ready));
      BENCH_OK(testing::LaunchSpin(compute,
                                   static_cast<uint64_t>(compute_s * 1e9)));
      BENCH_OK(engine->Release(ticket.slot, compute));
    }
    BENCH_CUDA(cudaEventRecord(stop, compute));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    const double step_s = ms / 1e3 / steps;
    const double sum = copy_s + compute_s;
    const double max = std::max(copy_s, compute_s);
    std::printf("\n== copy/compute overlap (batch %zu bytes, depth 3) ==\n",
                batch_bytes);
    std::printf("copy %.3f ms, compute %.3f ms, step %.3f ms: %.2f of the "
                "serial sum, %.2f of the ideal max; overlap ratio %.0f%%\n",
                copy_s * 1e3, compute_s * 1e3, step_s * 1e3, step_s / sum,
                step_s / max,
                100.0 * std::clamp((sum - step_s) / std::min(copy_s, compute_s),
                                   0.0, 1.0));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(compute);
  }

  // 3. Normalisation throughput against device memory bandwidth.
  {
    const size_t d2d_bytes = max_bytes;
    cudaEvent_t start, stop;
    BENCH_CUDA(cudaEventCreate(&start));
    BENCH_CUDA(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int i = 0; i < reps; ++i) {
      BENCH_CUDA(cudaEventRecord(start, nullptr));
      BENCH_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(device) + max_bytes,
                                 device, d2d_bytes, cudaMemcpyDeviceToDevice,
                                 nullptr));
      BENCH_CUDA(cudaEventRecord(stop, nullptr));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
    // A D2D copy reads and writes every byte.
    const double d2d = 2.0 * d2d_bytes / (best / 1e3) / kGB;
    const double theoretical = info.PeakMemoryBandwidth() / kGB;
    std::printf("\n== normalisation (uint8 -> out, 256x224x224x3) ==\n");
    std::printf("device memory: D2D memcpy %.0f GB/s (read+write); "
                "theoretical %.0f GB/s (%d-bit bus, %d kHz)\n",
                d2d, theoretical, info.memory_bus_width_bits,
                info.memory_clock_khz);
    const std::vector<uint64_t> shape = {256, 224, 224, 3};
    uint8_t* src = nullptr;
    void* dst = nullptr;
    BENCH_CUDA(cudaMalloc(&src, 256ull * 224 * 224 * 3));
    BENCH_CUDA(cudaMalloc(&dst, 256ull * 224 * 224 * 3 * 4));
    BENCH_CUDA(cudaMemset(src, 7, 256ull * 224 * 224 * 3));
    std::printf("%-9s %-6s %-6s %9s %9s %8s %8s\n", "dtype", "in", "out",
                "ms", "GB/s", "of D2D", "of peak");
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                        DType::kUint8}) {
      for (Layout in : {Layout::kNHWC, Layout::kNCHW}) {
        for (Layout out : {Layout::kNCHW, Layout::kNHWC}) {
          NormalizeSpec spec;
          spec.dtype = dtype;
          spec.layout = out;
          spec.mean = {0.485f, 0.456f, 0.406f};
          spec.std = {0.229f, 0.224f, 0.225f};
          NormalizeParams p;
          BENCH_OK(MakeNormalizeParams(shape, in, spec, &p));
          BENCH_OK(NormalizeOnDevice(src, dst, p, nullptr));  // warm
          float kbest = 1e30f;
          for (int i = 0; i < reps; ++i) {
            BENCH_CUDA(cudaEventRecord(start, nullptr));
            BENCH_OK(NormalizeOnDevice(src, dst, p, nullptr));
            BENCH_CUDA(cudaEventRecord(stop, nullptr));
            BENCH_CUDA(cudaEventSynchronize(stop));
            float ms = 0;
            BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
            kbest = std::min(kbest, ms);
          }
          const double gbs =
              (p.input_bytes() + p.output_bytes()) / (kbest / 1e3) / kGB;
          std::printf("%-9s %-6s %-6s %9.3f %9.0f %7.0f%% %7.0f%%\n",
                      DTypeName(dtype), LayoutName(in), LayoutName(out), kbest,
                      gbs, 100.0 * gbs / d2d,
                      theoretical > 0 ? 100.0 * gbs / theoretical : 0.0);
        }
      }
    }
    cudaFree(src);
    cudaFree(dst);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  cudaFree(device);
  return 0;
}

#else

int Run(bool) {
  std::printf("no device: %s\n", ProbeDevice().message().c_str());
  return 0;
}

#endif

}  // namespace
}  // namespace batchd::cuda

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const batchd::cuda::Status probe = batchd::cuda::ProbeDevice();
  if (!probe.ok()) {
    std::printf("batchd_cuda_bench: no device (%s); nothing to measure\n",
                probe.message().c_str());
    return 0;
  }
  return batchd::cuda::Run(quick);
}
