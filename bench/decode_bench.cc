// Microbenchmarks of the daemon's per-sample work: decode (each mode),
// resize (with and without the flip, both layouts) and batch assembly
// (a fresh buffer per batch against a reused one).
//
// Images are synthetic ImageNet-like JPEGs (testing/jpeg_synth.h: 500x375,
// quality 85, 4:2:0, about 100 KB) with the crops RandomResizedCrop(224)
// draws for them, so the figures are comparable with the end-to-end harness
// (bench/side_by_side.py).
//
//   build/bench/batchd_decode_bench --benchmark_repetitions=5 \
//       --benchmark_report_aggregates_only=true
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/large_buffer.h"
#include "common/random.h"
#include "server/dataset/dataset.h"
#include "server/decode/decode_internal.h"
#include "server/decode/jpeg_decoder.h"
#include "server/decode/resize.h"
#include "server/plan/transform.h"
#include "testing/jpeg_synth.h"

#ifdef BATCHD_HAVE_LIBYUV
#include "libyuv/scale.h"
#include "libyuv/scale_rgb.h"
#endif

namespace batchd::bench {
namespace {

constexpr int kImages = 16;
constexpr int kOut = 224;
constexpr size_t kSampleBytes = size_t{kOut} * kOut * 3;

const std::vector<std::vector<uint8_t>>& Jpegs() {
  static const auto* jpegs = [] {
    auto* v = new std::vector<std::vector<uint8_t>>;
    for (int i = 0; i < kImages; ++i) {
      tools::SynthOptions options;
      options.seed = static_cast<uint64_t>(i) + 1;
      options.quality = 75 + (i * 7) % 21;
      auto jpeg = tools::SynthesizeJpeg(options);
      if (!jpeg.ok()) std::abort();
      v->push_back(*std::move(jpeg));
    }
    return v;
  }();
  return *jpegs;
}

server::CropSpec Crop(int image, int width, int height) {
  server::TrainTransform transform;
  transform.size = kOut;
  common::SampleRandom rng(/*seed=*/0, /*epoch=*/0,
                           static_cast<uint64_t>(image),
                           common::RandomPurpose::kAugment);
  return server::RandomResizedCropSpec(width, height, transform, rng);
}

enum DecodeMode { kFullReference = 0, kRegionOnly = 1, kDecoder = 2 };

// One image per iteration, cycling over kImages.
void BM_Decode(benchmark::State& state) {
  const auto mode = static_cast<DecodeMode>(state.range(0));
  const auto& jpegs = Jpegs();
  std::vector<uint8_t> out(kSampleBytes);
  server::JpegDecoder decoder;
  server::RegionDecoder region;
  int i = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    const auto& jpeg = jpegs[i];
    auto crop = [&](int w, int h) { return Crop(i, w, h); };
    server::DecodeResult result;
    switch (mode) {
      case kFullReference:
        result = server::DecodeReference(jpeg, crop, server::PixelLayout::kHWC,
                                         out.data());
        break;
      case kRegionOnly: {
        server::RgbView view;
        result = region.Decode(jpeg, crop, &view);
        benchmark::DoNotOptimize(view.data);
        break;
      }
      case kDecoder:
        result = decoder.Decode(jpeg, crop, server::PixelLayout::kHWC,
                                out.data());
        break;
    }
    if (!result.ok()) state.SkipWithError(result.detail.c_str());
    benchmark::DoNotOptimize(out.data());
    bytes += static_cast<int64_t>(jpeg.size());
    i = (i + 1) % kImages;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_Decode)
    ->ArgName("mode")  // 0 full+resize, 1 region+DCT no resize, 2 decoder
    ->Arg(kFullReference)
    ->Arg(kRegionOnly)
    ->Arg(kDecoder);

// Resize of a square window of side `range(0)` to 224x224; range(1): flip;
// range(2): 0 HWC, 1 CHW.
void BM_Resize(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const auto src = tools::SynthesizeRgb(side, side, /*seed=*/3);
  server::RgbView view{src.data(), side, side, ptrdiff_t{side} * 3};
  server::ResizeRequest request;
  request.width = side;
  request.height = side;
  request.out_width = kOut;
  request.out_height = kOut;
  request.flip = state.range(1) != 0;
  request.layout =
      state.range(2) != 0 ? server::PixelLayout::kCHW : server::PixelLayout::kHWC;
  std::vector<uint8_t> out(kSampleBytes);
  server::Resizer resizer;
  for (auto _ : state) {
    resizer.Resize(view, request, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Resize)
    ->ArgNames({"side", "flip", "chw"})
    ->Args({224, 0, 0})
    ->Args({300, 0, 0})
    ->Args({300, 1, 0})
    ->Args({300, 0, 1})
    ->Args({448, 0, 0})
    ->Args({500, 0, 0})
    ->Args({500, 1, 0});

#ifdef BATCHD_HAVE_LIBYUV
// libyuv's RGB24 scaler on the same windows, for comparison with Resize:
// range(1) is the libyuv::FilterMode (2 bilinear, 3 box). No flip, no window
// offset (libyuv scales whole images; a crop is a pointer offset).
void BM_ResizeLibyuv(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const auto src = tools::SynthesizeRgb(side, side, /*seed=*/3);
  std::vector<uint8_t> out(kSampleBytes);
  const auto filter = static_cast<libyuv::FilterMode>(state.range(1));
  for (auto _ : state) {
    libyuv::RGBScale(src.data(), side * 3, side, side, out.data(), kOut * 3,
                     kOut, kOut, filter);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeLibyuv)
    ->ArgNames({"side", "filter"})
    ->Args({300, 2})
    ->Args({300, 3})
    ->Args({500, 2})
    ->Args({500, 3});
#endif  // BATCHD_HAVE_LIBYUV

// Batch assembly: 64 samples written into a batch buffer that is
//   range(0) == 0: allocated per batch with new[] (glibc; in this
//                  single-threaded benchmark glibc soon reuses the block),
//   range(0) == 1: one buffer reused for every batch (what the daemon's
//                  BatchBufferPool gives),
//   range(0) == 2: a fresh anonymous mapping per batch, 4 KiB pages (what a
//                  multi-threaded daemon often got from glibc: ~2,350 page
//                  faults per batch),
//   range(0) == 3: a fresh huge-page mapping per batch (AllocateLargeBuffer).
void BM_BatchAssembly(benchmark::State& state) {
  constexpr int kBatch = 64;
  constexpr size_t kBatchBytes = kBatch * kSampleBytes;
  const int64_t kind = state.range(0);
  std::vector<uint8_t> sample(kSampleBytes, 7);
  std::unique_ptr<uint8_t[]> reused(new uint8_t[kBatchBytes]);
  for (auto _ : state) {
    std::unique_ptr<uint8_t[]> fresh;
    common::LargeBuffer mapped;
    void* small_pages = nullptr;
    uint8_t* batch = reused.get();
    if (kind == 0) {
      fresh.reset(new uint8_t[kBatchBytes]);
      batch = fresh.get();
    } else if (kind == 2) {
      small_pages = ::mmap(nullptr, kBatchBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (small_pages == MAP_FAILED) {
        state.SkipWithError("mmap failed");
        break;
      }
      ::madvise(small_pages, kBatchBytes, MADV_NOHUGEPAGE);
      batch = static_cast<uint8_t*>(small_pages);
    } else if (kind == 3) {
      absl::StatusOr<common::LargeBuffer> buffer =
          common::AllocateLargeBuffer(kBatchBytes);
      if (!buffer.ok()) {
        state.SkipWithError("AllocateLargeBuffer failed");
        break;
      }
      mapped = *std::move(buffer);
      batch = mapped.get();
    }
    for (int s = 0; s < kBatch; ++s) {
      std::memcpy(batch + s * kSampleBytes, sample.data(), kSampleBytes);
    }
    benchmark::DoNotOptimize(batch);
    benchmark::ClobberMemory();
    if (small_pages != nullptr) ::munmap(small_pages, kBatchBytes);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.SetBytesProcessed(state.iterations() * kBatch *
                          static_cast<int64_t>(kSampleBytes));
}
BENCHMARK(BM_BatchAssembly)->ArgName("buffer")->DenseRange(0, 3);

// Reading a 125 KB sample file from the page cache (1,024 files, cycled, so
// that, as with a real dataset, they do not fit in the CPU caches):
//   range(0) == 0: into a zero-filled std::string (what ReadFileBytes did),
//   range(0) == 1: ReadFileBytes (an uninitialised buffer),
//   range(0) == 2: mmap with MAP_POPULATE, then munmap.
void BM_ReadSampleFile(benchmark::State& state) {
  constexpr int kFiles = 1024;
  constexpr size_t kFileBytes = 125 * 1024;
  char dir_template[] = "/tmp/batchd-read-bench-XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (dir == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  std::vector<std::string> paths;
  const std::string bytes(kFileBytes, 'j');
  for (int i = 0; i < kFiles; ++i) {
    paths.push_back(std::string(dir) + "/" + std::to_string(i) + ".jpg");
    std::FILE* f = std::fopen(paths.back().c_str(), "wb");
    if (f == nullptr ||
        std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      state.SkipWithError("cannot write the sample files");
      if (f != nullptr) std::fclose(f);
      return;
    }
    std::fclose(f);
  }
  const int64_t kind = state.range(0);
  uint64_t checksum = 0;
  int next = 0;
  for (auto _ : state) {
    const std::string& path = paths[next++ % kFiles];
    if (kind == 1) {
      absl::StatusOr<server::FileBytes> file = server::ReadFileBytes(path);
      if (!file.ok()) {
        state.SkipWithError("ReadFileBytes failed");
        break;
      }
      checksum += file->bytes()[kFileBytes / 2];
      continue;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      state.SkipWithError("open failed");
      break;
    }
    const size_t size = static_cast<size_t>(st.st_size);
    if (kind == 0) {
      std::string data(size, '\0');
      checksum += ::read(fd, data.data(), size) + data[size / 2];
    } else {
      void* mapped =
          ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (mapped == MAP_FAILED) {
        ::close(fd);
        state.SkipWithError("mmap failed");
        break;
      }
      checksum += static_cast<const uint8_t*>(mapped)[size / 2];
      ::munmap(mapped, size);
    }
    ::close(fd);
  }
  benchmark::DoNotOptimize(checksum);
  for (const std::string& path : paths) std::remove(path.c_str());
  ::rmdir(dir);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReadSampleFile)->ArgName("kind")->DenseRange(0, 2);

}  // namespace
}  // namespace batchd::bench

BENCHMARK_MAIN();
