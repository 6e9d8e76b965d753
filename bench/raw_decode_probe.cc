// batchd-raw-decode-probe: how much libjpeg time the "YCbCr planes" lever
// could save, measured on the daemon's own crops before anyone builds it.
//
// For every baseline or progressive YCbCr JPEG of an ImageFolder dataset
// (read into memory first), with the crop the daemon would use
// (RandomResizedCrop from the plan's generator) and the same DCT scale rule,
// times per epoch, alternating:
//   rgb  RegionDecoder: region + DCT-scaled decode to RGB (the decode-only
//        limit of BENCHMARKS.md; libjpeg upsamples chroma and converts
//        colour at the decoded size);
//   raw  the same region as YCbCr planes (raw_data_out): no upsampling, no
//        colour conversion; the rows above the crop are entropy-decoded
//        without IDCT (component_needed = FALSE), as jpeg_skip_scanlines
//        does for the rgb path.
// Neither resizes. The raw mode reaches past libjpeg-turbo 2.1.5's API:
// jpeg_crop_scanline() refuses raw mode (it checks for DSTATE_SCANNING), so
// the probe sets cinfo->global_state around the call. That is fine for a
// measurement; a product decoder would need a cleaner way (see
// docs/benchmarks-notes.md).
//
//   batchd-raw-decode-probe --dataset=data/bench --epochs=3
#include <sys/resource.h>

#include <csetjmp>
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "server/dataset/dataset.h"
#include "server/decode/decode_internal.h"
#include "server/plan/transform.h"

ABSL_FLAG(std::string, dataset, "", "ImageFolder root");
ABSL_FLAG(uint32_t, epochs, 3, "epochs to decode (each in both modes)");
ABSL_FLAG(uint32_t, size, 224, "output height and width, pixels");

namespace batchd::bench {
namespace {

// libjpeg's decompressor states (jpegint.h, unchanged since libjpeg 6b).
constexpr int kStateScanning = 205;
constexpr int kStateRawOk = 206;

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

struct ErrorExit {
  jpeg_error_mgr pub;
  jmp_buf jump;
};

void OnError(j_common_ptr cinfo) {
  longjmp(reinterpret_cast<ErrorExit*>(cinfo->err)->jump, 1);
}

// Decodes `crop` of `data` as YCbCr planes; returns false on a decode error
// or a file that is not 3-component YCbCr. `planes` is scratch memory.
bool DecodeRawRegion(jpeg_decompress_struct* cinfo, ErrorExit* err,
                     const server::FileBytes& file, const server::CropSpec& crop,
                     std::vector<uint8_t>* planes, uint64_t* checksum) {
  // Created before setjmp: a longjmp back here must not skip destructors.
  std::vector<JSAMPROW> rows[3];
  JSAMPARRAY arrays[3];
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_mem_src(cinfo, file.bytes().data(), file.size());
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space != JCS_YCbCr || cinfo->num_components != 3) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  bool uneven = false;
  for (int c = 0; c < 3; ++c) {
    const jpeg_component_info& comp = cinfo->comp_info[c];
    if (cinfo->max_h_samp_factor * comp.v_samp_factor !=
        cinfo->max_v_samp_factor * comp.h_samp_factor) {
      uneven = true;
    }
  }
  int denom = server::ChooseScaleDenom(crop.width, crop.height,
                                       crop.out_width, crop.out_height);
  if (uneven && denom > 1) denom /= 2;  // as the daemon's decoder does
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned>(denom);
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->raw_data_out = TRUE;
  jpeg_start_decompress(cinfo);
  const int full_w = static_cast<int>(cinfo->output_width);
  const int full_h = static_cast<int>(cinfo->output_height);
  const int x0 = std::clamp(static_cast<int>(crop.x / denom), 0, full_w - 1);
  const int y0 = std::clamp(static_cast<int>(crop.y / denom), 0, full_h - 1);
  const int x1 = std::clamp(
      static_cast<int>(std::ceil((crop.x + crop.width) / denom)), x0 + 1, full_w);
  const int y1 = std::clamp(
      static_cast<int>(std::ceil((crop.y + crop.height) / denom)), y0 + 1,
      full_h);
  if (x1 - x0 < full_w && cinfo->global_state == kStateRawOk) {
    JDIMENSION xoffset = static_cast<JDIMENSION>(x0);
    JDIMENSION width = static_cast<JDIMENSION>(x1 - x0);
    cinfo->global_state = kStateScanning;
    jpeg_crop_scanline(cinfo, &xoffset, &width);
    cinfo->global_state = kStateRawOk;
  }
  // One iMCU row of each component, in rows as wide as the cropped blocks.
  const int row_width = static_cast<int>(cinfo->output_width) + 64;
  size_t needed = 0;
  for (int c = 0; c < 3; ++c) {
    needed += static_cast<size_t>(cinfo->comp_info[c].v_samp_factor) *
              cinfo->comp_info[c].DCT_scaled_size * (row_width + 64);
  }
  if (planes->size() < needed) planes->resize(needed);
  size_t offset = 0;
  for (int c = 0; c < 3; ++c) {
    const jpeg_component_info& comp = cinfo->comp_info[c];
    for (int r = 0; r < comp.v_samp_factor * comp.DCT_scaled_size; ++r) {
      rows[c].push_back(planes->data() + offset);
      offset += row_width + 64;
    }
    arrays[c] = rows[c].data();
  }
  const int imcu_rows = cinfo->max_v_samp_factor * cinfo->min_DCT_scaled_size;
  while (static_cast<int>(cinfo->output_scanline) < y1) {
    // Rows wholly above the crop: entropy-decode only.
    const bool above =
        static_cast<int>(cinfo->output_scanline) + imcu_rows <= y0;
    for (int c = 0; c < 3; ++c) cinfo->comp_info[c].component_needed = !above;
    jpeg_read_raw_data(cinfo, arrays, static_cast<JDIMENSION>(imcu_rows));
    if (!above) *checksum += arrays[0][0][0];
  }
  for (int c = 0; c < 3; ++c) cinfo->comp_info[c].component_needed = TRUE;
  jpeg_abort_decompress(cinfo);
  return true;
}

int Run() {
  const std::string root = absl::GetFlag(FLAGS_dataset);
  if (root.empty()) {
    absl::FPrintF(stderr,
                  "usage: batchd-raw-decode-probe --dataset=DIR [--epochs=N]\n");
    return 2;
  }
  auto dataset = server::Dataset::LoadImageFolder("bench", root);
  if (!dataset.ok()) {
    absl::FPrintF(stderr, "error: %s\n", dataset.status().ToString());
    return 1;
  }
  std::vector<server::FileBytes> files;
  for (uint64_t i = 0; i < (*dataset)->size(); ++i) {
    auto bytes = server::ReadFileBytes((*dataset)->sample(i).path);
    if (!bytes.ok()) {
      absl::FPrintF(stderr, "error: %s\n", bytes.status().ToString());
      return 1;
    }
    files.push_back(*std::move(bytes));
  }
  server::TrainTransform transform;
  transform.size = static_cast<int>(absl::GetFlag(FLAGS_size));
  auto crop_for = [&](uint64_t epoch, uint64_t i, int width, int height) {
    common::SampleRandom rng(/*seed=*/0, epoch, i,
                             common::RandomPurpose::kAugment);
    return server::RandomResizedCropSpec(width, height, transform, rng);
  };

  jpeg_decompress_struct cinfo;
  ErrorExit err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnError;
  jpeg_create_decompress(&cinfo);
  // Image sizes, read before timing (the rgb mode reads them itself).
  std::vector<std::pair<int, int>> sizes;
  for (const server::FileBytes& file : files) {
    jpeg_decompress_struct probe;
    jpeg_error_mgr probe_err;
    probe.err = jpeg_std_error(&probe_err);
    jpeg_create_decompress(&probe);
    jpeg_mem_src(&probe, file.bytes().data(), file.size());
    jpeg_read_header(&probe, TRUE);
    sizes.emplace_back(probe.image_width, probe.image_height);
    jpeg_destroy_decompress(&probe);
  }
  server::RegionDecoder rgb;
  std::vector<uint8_t> planes;
  uint64_t checksum = 0;
  double rgb_total = 0, raw_total = 0;
  for (uint32_t epoch = 0; epoch < absl::GetFlag(FLAGS_epochs); ++epoch) {
    // Only files both modes decode count (the raw mode skips non-YCbCr).
    std::vector<bool> raw_ok(files.size());
    double cpu = CpuSeconds();
    int n = 0;
    for (size_t i = 0; i < files.size(); ++i) {
      raw_ok[i] = DecodeRawRegion(
          &cinfo, &err, files[i],
          crop_for(epoch, i, sizes[i].first, sizes[i].second), &planes,
          &checksum);
      n += raw_ok[i];
    }
    const double raw = (CpuSeconds() - cpu) / n;
    cpu = CpuSeconds();
    for (size_t i = 0; i < files.size(); ++i) {
      if (!raw_ok[i]) continue;
      server::RgbView view;
      const server::DecodeResult result = rgb.Decode(
          files[i].bytes(),
          [&](int w, int h) { return crop_for(epoch, i, w, h); }, &view);
      if (result.ok()) checksum += view.data[0];
    }
    const double region = (CpuSeconds() - cpu) / n;
    rgb_total += region;
    raw_total += raw;
    absl::PrintF(
        "epoch %d: %d images: rgb %.3f ms CPU/image, raw %.3f ms "
        "(raw/rgb %.3f)\n",
        epoch, n, 1e3 * region, 1e3 * raw, raw / region);
  }
  absl::PrintF("all epochs: raw/rgb %.3f (checksum %d)\n",
               raw_total / rgb_total, checksum);
  jpeg_destroy_decompress(&cinfo);
  return 0;
}

}  // namespace
}  // namespace batchd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return batchd::bench::Run();
}
