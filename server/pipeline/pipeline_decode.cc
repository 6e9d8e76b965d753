// Pipeline's decode of one sample into its place in the batch: the file
// (or its capped image, cached or decoded now) cropped, resized and
// flipped, each view cut from one decode, and the plan's augmentation ops
// applied. Runs on the worker pool; the rest of Pipeline is in pipeline.cc.
#include "server/pipeline/pipeline.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "server/augment/op_call.h"
#include "server/dataset/dataset.h"
#include "server/decode/image_decoder.h"
#include "server/pipeline/pipeline_internal.h"

namespace batchd::server {
namespace {

using pipeline_internal::NanosSince;

// One decoder per worker thread: decoders keep libjpeg state between images.
ImageDecoder& ThreadDecoder(const DecodeLimits& limits) {
  thread_local ImageDecoder decoder(limits);
  return decoder;
}

// One resizer per worker thread, for crops of capped images.
Resizer& ThreadResizer() {
  thread_local Resizer resizer;
  return resizer;
}

// The augmentation ops' temporary memory, one per worker thread.
augment::Scratch& ThreadAugmentScratch() {
  thread_local augment::Scratch scratch;
  return scratch;
}

// An NCHW plan's sample is decoded here (HWC) and augmented before it is
// written to its slot as planes; one per worker thread, `bytes` long.
uint8_t* ThreadHwcSample(size_t bytes) {
  thread_local std::vector<uint8_t> sample;
  if (sample.size() < bytes) sample.resize(bytes);
  return sample.data();
}

// `size` x `size` RGB pixels from HWC `hwc` to three planes at `chw`.
void HwcToChw(const uint8_t* hwc, int size, uint8_t* chw) {
  const size_t plane = static_cast<size_t>(size) * static_cast<size_t>(size);
  for (size_t i = 0; i < plane; ++i) {
    chw[i] = hwc[3 * i];
    chw[plane + i] = hwc[3 * i + 1];
    chw[2 * plane + i] = hwc[3 * i + 2];
  }
}

}  // namespace

DecodedSample Pipeline::DecodeImage(const ResolvedPlan& plan,
                                   uint64_t sample_index,
                                   const FileBytes* bytes, int max_side) {
  DecodedSample sample;
  FileBytes read_bytes;
  if (bytes == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<FileBytes> file = ReadBytes(plan, sample_index);
    RecordRead(NanosSince(start));
    if (!file.ok()) {
      sample.result = ReadFailure(plan, sample_index, file.status());
      return sample;
    }
    read_bytes = *std::move(file);
    bytes = &read_bytes;
  }
  auto image = std::make_shared<CappedImage>();
  DecodeTimings timings;
  sample.result = DecodeCapped(ThreadDecoder(options_.decode_limits),
                               bytes->bytes(), max_side, image.get(),
                               &timings);
  decode_nanos_ += static_cast<uint64_t>(timings.decode_seconds * 1e9);
  if (options_.metrics != nullptr) {
    options_.metrics->decode_seconds().Observe(timings.decode_seconds);
  }
  if (sample.result.ok()) sample.image = std::move(image);
  return sample;
}

DecodedSample Pipeline::CappedImageOf(const ResolvedPlan& plan,
                                     uint64_t sample_index,
                                     const FileBytes* bytes) {
  auto decode = [&]() -> DecodedSample {
    return DecodeImage(plan, sample_index, bytes,
                       static_cast<int>(plan.decoded_max_side));
  };
  if (decoded_cache_ == nullptr) return decode();
  const ResolvedPlan::SampleRef ref = plan.At(sample_index);
  return decoded_cache_->Get(
      {ref.dataset->name(), ref.index, plan.decoded_max_side}, decode);
}

DecodeResult Pipeline::DecodeViews(const ResolvedPlan& plan, uint64_t epoch,
                                   uint64_t entry, const FileBytes* bytes,
                                   std::shared_ptr<const CappedImage> image,
                                   BuiltBatch& batch, size_t position) {
  if (image == nullptr) {
    const uint64_t sample_index =
        common::SampleOf(entry, plan.shard.num_samples);
    // Decode once, cut every view from it: the capped image (through the
    // decoded cache), or without a cap the whole image at full size, since
    // the views' windows together may cover any part of it.
    DecodedSample sample =
        plan.decoded_max_side > 0
            ? CappedImageOf(plan, sample_index, bytes)
            : DecodeImage(plan, sample_index, bytes,
                          static_cast<int>(kMaxDecodedSide));
    if (!sample.result.ok()) return sample.result;
    image = std::move(sample.image);
  }
  const uint64_t samples = batch.sample_indices.size();
  const bool planes = plan.pixel_layout() == PixelLayout::kCHW;
  DecodeResult result;
  for (uint32_t view = 0; view < plan.view_count(); ++view) {
    uint8_t* out = batch.pixels.data() + plan.view_offset(view, samples) +
                   position * plan.view_bytes(view);
    // The ops work on HWC pixels: an NCHW view with ops is cut into a
    // scratch sample first, and written as planes once augmented.
    const bool ops = plan.view_has_ops(view);
    uint8_t* cut = ops && planes ? ThreadHwcSample(plan.view_bytes(view)) : out;
    const auto start = std::chrono::steady_clock::now();
    result = TransformCapped(
        ThreadResizer(), *image,
        [&](int width, int height) {
          return plan.ViewCrop(epoch, entry, view, width, height);
        },
        ops ? PixelLayout::kHWC : plan.pixel_layout(), cut);
    const uint64_t nanos = NanosSince(start);
    transform_nanos_ += nanos;
    if (options_.metrics != nullptr) {
      options_.metrics->transform_seconds().Observe(nanos * 1e-9);
    }
    if (!result.ok()) return result;
    if (ops) AugmentSample(plan, epoch, entry, cut, planes ? out : nullptr, view);
  }
  return result;
}

void pipeline_internal::ZeroSample(const ResolvedPlan& plan,
                                   BuiltBatch& batch, size_t position) {
  const uint64_t samples = batch.sample_indices.size();
  for (uint32_t view = 0; view < plan.view_count(); ++view) {
    std::memset(batch.pixels.data() + plan.view_offset(view, samples) +
                    position * plan.view_bytes(view),
                0, plan.view_bytes(view));
  }
}

DecodeResult Pipeline::DecodeOne(const ResolvedPlan& plan, uint64_t epoch,
                                 uint64_t entry, const FileBytes* bytes,
                                 std::shared_ptr<const CappedImage> image,
                                 uint8_t* out) {
  if (plan.augment.empty()) {
    return DecodeCrop(plan, epoch, entry, bytes, std::move(image),
                      plan.pixel_layout(), out);
  }
  // The ops work on HWC pixels: an NCHW sample is decoded into a scratch
  // sample first, and written as planes once augmented.
  const bool planes = plan.pixel_layout() == PixelLayout::kCHW;
  uint8_t* hwc = planes ? ThreadHwcSample(plan.sample_bytes()) : out;
  DecodeResult result = DecodeCrop(plan, epoch, entry, bytes,
                                   std::move(image), PixelLayout::kHWC, hwc);
  if (result.ok()) {
    AugmentSample(plan, epoch, entry, hwc, planes ? out : nullptr);
  }
  return result;
}

void Pipeline::AugmentSample(const ResolvedPlan& plan, uint64_t epoch,
                             uint64_t entry, uint8_t* hwc, uint8_t* chw,
                             uint32_t view) {
  const auto start = std::chrono::steady_clock::now();
  const int size = plan.view_size(view);
  const std::vector<augment::OpCall> calls =
      plan.ViewAugmentCalls(epoch, entry, view, size, size);
  const uint64_t sample_index =
      common::SampleOf(entry, plan.shard.num_samples);
  if (options_.log_augment_sample >= 0 &&
      sample_index == static_cast<uint64_t>(options_.log_augment_sample)) {
    std::fprintf(stderr, "batchd: augment: plan %s epoch %llu sample %llu: %s\n",
                 FingerprintLabel(plan.fingerprint).c_str(),
                 static_cast<unsigned long long>(epoch),
                 static_cast<unsigned long long>(sample_index),
                 augment::Describe(calls).c_str());
  }
  augment::Apply(calls,
                 augment::Image{hwc, size, size, ptrdiff_t{3} * size},
                 &ThreadAugmentScratch());
  if (chw != nullptr) HwcToChw(hwc, size, chw);
  const uint64_t nanos = NanosSince(start);
  augment_nanos_ += nanos;
  if (options_.metrics != nullptr) {
    options_.metrics->augment_seconds().Observe(nanos * 1e-9);
  }
}

DecodeResult Pipeline::DecodeCrop(const ResolvedPlan& plan, uint64_t epoch,
                                  uint64_t entry, const FileBytes* bytes,
                                  std::shared_ptr<const CappedImage> image,
                                  PixelLayout layout, uint8_t* out) {
  const uint64_t sample_index =
      common::SampleOf(entry, plan.shard.num_samples);
  if (plan.decoded_max_side > 0) {
    if (image == nullptr) {
      DecodedSample sample = CappedImageOf(plan, sample_index, bytes);
      if (!sample.result.ok()) return sample.result;
      image = std::move(sample.image);
    }
    const auto start = std::chrono::steady_clock::now();
    DecodeResult result = TransformCapped(
        ThreadResizer(), *image,
        [&](int width, int height) {
          return plan.Crop(epoch, entry, width, height);
        },
        layout, out);
    const uint64_t nanos = NanosSince(start);
    transform_nanos_ += nanos;
    if (options_.metrics != nullptr) {
      options_.metrics->transform_seconds().Observe(nanos * 1e-9);
    }
    return result;
  }
  FileBytes read_bytes;
  if (bytes == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<FileBytes> file = ReadBytes(plan, sample_index);
    RecordRead(NanosSince(start));
    if (!file.ok()) return ReadFailure(plan, sample_index, file.status());
    read_bytes = *std::move(file);
    bytes = &read_bytes;
  }
  DecodeTimings timings;
  DecodeResult result = ThreadDecoder(options_.decode_limits)
                            .Decode(
                                bytes->bytes(),
                                [&](int width, int height) {
                                  return plan.Crop(epoch, entry, width,
                                                   height);
                                },
                                layout, out, &timings);
  decode_nanos_ += static_cast<uint64_t>(timings.decode_seconds * 1e9);
  transform_nanos_ += static_cast<uint64_t>(timings.transform_seconds * 1e9);
  if (options_.metrics != nullptr) {
    options_.metrics->decode_seconds().Observe(timings.decode_seconds);
    options_.metrics->transform_seconds().Observe(timings.transform_seconds);
  }
  return result;
}

}  // namespace batchd::server
