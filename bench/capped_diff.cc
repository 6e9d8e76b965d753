// How far the capped pipeline (Pipeline.decoded_max_side) is from the
// default one, per pixel: for the first N samples of an ImageFolder
// dataset, the train (RandomResizedCrop + flip) and eval (resize + centre
// crop) outputs of one plan, decoded both ways, and their mean absolute
// difference in 0..255 units, with the share of bytes that differ by more
// than 8. The crop parameters come from the same generator the daemon uses
// (seed, epoch, sample), drawn for the file's size, exactly as
// ResolvedPlan::Crop does; the capped pipeline maps that window onto the
// capped image, so what differs is resolution, not geometry.
//
//   batchd-capped-diff --dataset=data/bench --caps=256,320,448 --size=224
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/random.h"
#include "server/dataset/dataset.h"
#include "server/decode/capped_image.h"
#include "server/decode/image_decoder.h"
#include "server/plan/transform.h"

ABSL_FLAG(std::string, dataset, "", "ImageFolder root");
ABSL_FLAG(std::string, caps, "256,320,448", "decoded_max_side values");
ABSL_FLAG(uint32_t, size, 224, "output height and width, pixels");
ABSL_FLAG(uint64_t, seed, 1, "the plan's seed");
ABSL_FLAG(uint32_t, max_images, 200, "the first N samples (0: all)");

namespace batchd::bench {
namespace {

struct Diff {
  double abs_sum = 0;
  uint64_t large = 0;  // bytes differing by more than 8
  uint64_t bytes = 0;
  void Add(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      const int d = std::abs(int{a[i]} - int{b[i]});
      abs_sum += d;
      large += d > 8;
    }
    bytes += a.size();
  }
};

int Run() {
  const std::string root = absl::GetFlag(FLAGS_dataset);
  if (root.empty()) {
    absl::FPrintF(stderr, "usage: batchd-capped-diff --dataset=DIR "
                          "[--caps=256,320] [--size=224]\n");
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
  const int size = static_cast<int>(absl::GetFlag(FLAGS_size));
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  server::TrainTransform train;
  train.size = size;
  server::EvalTransform eval;
  eval.size = size;
  eval.resize_shorter = size * 256 / 224;
  server::ImageDecoder decoder;
  server::Resizer resizer;
  std::vector<uint8_t> plain(static_cast<size_t>(size) * size * 3);
  std::vector<uint8_t> capped(plain.size());
  absl::PrintF("| decoded_max_side | transform | images | mean abs diff "
               "(0..255) | bytes off by > 8 |\n|---|---|---|---|---|\n");
  for (absl::string_view cap_text : absl::StrSplit(absl::GetFlag(FLAGS_caps),
                                                   ',')) {
    int cap = 0;
    if (!absl::SimpleAtoi(cap_text, &cap) || cap < size) {
      absl::FPrintF(stderr, "error: cap '%s' is not a number >= --size\n",
                    std::string(cap_text));
      return 2;
    }
    for (bool is_train : {true, false}) {
      Diff diff;
      uint64_t images = 0;
      for (uint64_t i = 0; i < n; ++i) {
        auto bytes = server::ReadFileBytes((*dataset)->sample(i).path);
        if (!bytes.ok()) continue;
        auto crop = [&](int width, int height) {
          if (!is_train) return server::CenterCropSpec(width, height, eval);
          common::SampleRandom rng(seed, /*epoch=*/0, i,
                                   common::RandomPurpose::kAugment);
          return server::RandomResizedCropSpec(width, height, train, rng);
        };
        if (!decoder.Decode(bytes->bytes(), crop, server::PixelLayout::kHWC,
                            plain.data())
                 .ok()) {
          continue;
        }
        server::CappedImage image;
        if (!server::DecodeCapped(decoder, bytes->bytes(), cap, &image).ok() ||
            !server::TransformCapped(resizer, image, crop,
                                     server::PixelLayout::kHWC, capped.data())
                 .ok()) {
          continue;
        }
        diff.Add(plain, capped);
        ++images;
      }
      absl::PrintF("| %d | %s | %d | %.2f | %.1f%% |\n", cap,
                   is_train ? "train" : "eval", images,
                   diff.abs_sum / std::max<uint64_t>(diff.bytes, 1),
                   100.0 * diff.large / std::max<uint64_t>(diff.bytes, 1));
    }
  }
  return 0;
}

}  // namespace
}  // namespace batchd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return batchd::bench::Run();
}
