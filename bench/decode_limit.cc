// batchd-decode-limit: the in-process decode figures the end-to-end numbers
// are compared with. Reads every JPEG of an ImageFolder dataset into memory
// once, then decodes each sample per epoch, on the calling thread, with the
// crop the daemon would use for it (RandomResizedCrop of the same size, from
// the plan's generator keyed by (seed, epoch, sample index)):
//   --mode=limit    region + DCT-scaled decode, no resize (the decode-only
//                   limit of the P2 target);
//   --mode=decoder  the daemon's per-sample work: JpegDecoder::Decode (decode
//                   + resize + flip + layout write);
//   --mode=full     the reference path: full decode at scale 1, then crop +
//                   resize + flip.
// File reads are outside the timed loop. Prints one line per epoch:
//   epoch 0: 1024 images in 1.02 s: 1003.9 images/s, 0.996 ms CPU/image
//
//   batchd-decode-limit --dataset=data/bench --epochs=3 --mode=limit
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "server/dataset/dataset.h"
#include "server/decode/decode_internal.h"
#include "server/decode/jpeg_decoder.h"
#include "server/plan/transform.h"

ABSL_FLAG(std::string, dataset, "", "ImageFolder root");
ABSL_FLAG(uint32_t, epochs, 3, "epochs to decode");
ABSL_FLAG(uint64_t, first_epoch, 0, "number of the first epoch");
ABSL_FLAG(uint64_t, seed, 0, "the plan's seed (crop and flip parameters)");
ABSL_FLAG(uint32_t, size, 224, "output height and width, pixels");
ABSL_FLAG(std::string, mode, "limit", "limit, decoder or full");
ABSL_FLAG(uint32_t, max_images, 0, "decode only the first N samples (0: all)");

namespace batchd::bench {
namespace {

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

int Run() {
  const std::string root = absl::GetFlag(FLAGS_dataset);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (root.empty() || (mode != "limit" && mode != "decoder" && mode != "full")) {
    absl::FPrintF(stderr,
                  "usage: batchd-decode-limit --dataset=DIR "
                  "[--mode=limit|decoder|full] [--epochs=N]\n");
    return 2;
  }
  auto dataset = server::Dataset::LoadImageFolder("bench", root);
  if (!dataset.ok()) {
    absl::FPrintF(stderr, "error: %s\n", dataset.status().ToString());
    return 1;
  }
  uint64_t n = (*dataset)->size();
  if (absl::GetFlag(FLAGS_max_images) > 0) {
    n = std::min<uint64_t>(n, absl::GetFlag(FLAGS_max_images));
  }
  std::vector<server::FileBytes> files(n);
  for (uint64_t i = 0; i < n; ++i) {
    auto bytes = server::ReadFileBytes((*dataset)->sample(i).path);
    if (!bytes.ok()) {
      absl::FPrintF(stderr, "error: %s\n", bytes.status().ToString());
      return 1;
    }
    files[i] = *std::move(bytes);
  }
  server::TrainTransform transform;
  transform.size = static_cast<int>(absl::GetFlag(FLAGS_size));
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  std::vector<uint8_t> out(static_cast<size_t>(transform.size) *
                           transform.size * 3);
  server::JpegDecoder decoder;
  server::RegionDecoder region_decoder;
  uint64_t checksum = 0;  // keeps the work observable
  int failures = 0;
  const uint64_t first = absl::GetFlag(FLAGS_first_epoch);
  for (uint64_t epoch = first; epoch < first + absl::GetFlag(FLAGS_epochs);
       ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    for (uint64_t i = 0; i < n; ++i) {
      auto crop = [&](int width, int height) {
        common::SampleRandom rng(seed, epoch, i,
                                 common::RandomPurpose::kAugment);
        return server::RandomResizedCropSpec(width, height, transform, rng);
      };
      const absl::Span<const uint8_t> data = files[i].bytes();
      server::DecodeResult result;
      if (mode == "limit") {
        server::RgbView view;
        result = region_decoder.Decode(data, crop, &view);
        if (result.ok()) checksum += view.data[0];
      } else if (mode == "decoder") {
        result = decoder.Decode(data, crop, server::PixelLayout::kHWC,
                                out.data());
        checksum += out[0];
      } else {
        result = server::DecodeReference(data, crop, server::PixelLayout::kHWC,
                                         out.data());
        checksum += out[0];
      }
      if (!result.ok()) ++failures;
    }
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    const double cpu = CpuSeconds() - cpu_start;
    absl::PrintF("epoch %d: %d images in %.3f s: %.1f images/s, %.3f ms "
                 "CPU/image\n",
                 epoch, n, seconds, n / seconds, 1e3 * cpu / n);
    std::fflush(stdout);
  }
  absl::PrintF("mode %s, %d failed, checksum %d\n", mode, failures, checksum);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace batchd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return batchd::bench::Run();
}
