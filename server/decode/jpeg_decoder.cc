#include "server/decode/jpeg_decoder.h"

// jpeglib.h needs FILE and size_t declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/decode/crop.h"
#include "server/decode/decode_internal.h"
#include "server/decode/image_format.h"
#include "server/decode/resize.h"

namespace batchd::server {
namespace {

// ---------------------------------------------------------------------------
// libjpeg glue. Everything in this section is C-style: plain structs, no
// objects with destructors, because libjpeg reports errors by longjmp.
// The only setjmp is in RunGuarded().
//
// Warning policy (libjpeg reports damaged entropy-coded data as warnings and
// goes on, filling the damaged part with grey):
//   - JWRN_JPEG_EOF (premature end of file): kTruncated.
//   - JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE, JWRN_MUST_RESYNC (the entropy-coded
//     data is damaged): kCorrupt.
//   Both stop decoding at once (the sample is substituted), unless
//   DecodeLimits.decode_damaged: then the first is recorded as the damage
//   and libjpeg goes on, as PIL does.
//   - Everything else is ignored: JWRN_EXTRANEOUS_DATA (junk bytes before a
//     marker), unknown JFIF revision, unknown Adobe transform, bad ICC
//     marker, inconsistent progression... Real photographs carry these and
//     decode fine; PIL and torchvision accept them too.
// Only the part of the file that is decoded is checked: a region decode
// stops after the crop's last row, so damage below the crop goes unnoticed
// (the result is still a deterministic function of the file and the crop).
// ---------------------------------------------------------------------------

struct ErrorState {
  jpeg_error_mgr pub;  // first member: libjpeg casts cinfo->err to this
  jmp_buf jump;
  int max_scans;
  bool decode_damaged;
  // Why the last guarded step failed, when a warning or the scan limit
  // stopped it; kNone when libjpeg's error_exit did.
  SampleError reason;
  char message[JMSG_LENGTH_MAX];
  // decode_damaged: the first damage warning of this image, and its text.
  SampleError damage;
  char damage_message[JMSG_LENGTH_MAX];
};

struct ProgressState {
  jpeg_progress_mgr pub;  // first member
  ErrorState* err;
};

void OnErrorExit(j_common_ptr cinfo) {
  ErrorState* err = reinterpret_cast<ErrorState*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

void OnEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  ErrorState* err = reinterpret_cast<ErrorState*>(cinfo->err);
  err->pub.num_warnings++;
  SampleError damage = SampleError::kNone;
  switch (err->pub.msg_code) {
    case JWRN_JPEG_EOF:
      damage = SampleError::kTruncated;
      break;
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
      damage = SampleError::kCorrupt;
      break;
    default:
      return;
  }
  if (err->decode_damaged) {
    if (err->damage == SampleError::kNone) {
      err->damage = damage;
      (*cinfo->err->format_message)(cinfo, err->damage_message);
    }
    return;
  }
  err->reason = damage;
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Called by libjpeg between passes and iMCU rows; stops files with more
// progressive scans than allowed (a few KB of crafted scans can otherwise
// cost seconds of CPU), as libjpeg-turbo's TurboJPEG scan limit does.
void OnProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  ProgressState* progress = reinterpret_cast<ProgressState*>(cinfo->progress);
  j_decompress_ptr dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > progress->err->max_scans) {
    progress->err->reason = SampleError::kTooManyScans;
    snprintf(progress->err->message, sizeof(progress->err->message),
             "more than %d scans", progress->err->max_scans);
    longjmp(progress->err->jump, 1);
  }
}

using Step = void (*)(j_decompress_ptr cinfo, void* arg);

// Runs `step`; returns false if libjpeg longjmp'd out of it (the reason is
// then in `err`). The decompress object must be destroyed or reset after a
// false return.
bool RunGuarded(j_decompress_ptr cinfo, ErrorState* err, Step step,
                void* arg) {
  if (setjmp(err->jump)) return false;
  step(cinfo, arg);
  return true;
}

void StepCreate(j_decompress_ptr cinfo, void*) {
  jpeg_create_decompress(cinfo);
}

struct HeaderArgs {
  const uint8_t* data;
  size_t size;
};

void StepReadHeader(j_decompress_ptr cinfo, void* arg) {
  HeaderArgs* args = static_cast<HeaderArgs*>(arg);
  jpeg_mem_src(cinfo, args->data, static_cast<unsigned long>(args->size));
  // Keep APP14 so that saw_Adobe_marker is set for CMYK files.
  jpeg_read_header(cinfo, TRUE);
}

struct DecodeArgs {
  // In: the rectangle of the scaled image to decode, half-open.
  int x0, y0, x1, y1;
  int use_region;    // crop/skip/stop early; else decode all rows
  uint8_t* buffer;   // rows of `stride` bytes, RGB
  size_t stride;
  uint8_t* cmyk_row; // scratch, 4 * output_width bytes, for CMYK output
  // Out: the first column held in buffer (x0 or, with jpeg_crop_scanline,
  // the iMCU boundary at or left of it), and the first row held.
  int buffer_x;
  int buffer_y;
};

// Converts one CMYK row to RGB. Adobe (Photoshop) CMYK JPEGs store inverted
// values (0 = full ink), so R = C * K / 255; files without an Adobe marker
// are taken as plain CMYK, R = (255 - C) * (255 - K) / 255.
void CmykToRgb(const uint8_t* cmyk, int width, int inverted, uint8_t* rgb) {
  for (int i = 0; i < width; ++i) {
    int c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2],
        k = cmyk[4 * i + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    rgb[3 * i] = static_cast<uint8_t>((c * k + 127) / 255);
    rgb[3 * i + 1] = static_cast<uint8_t>((m * k + 127) / 255);
    rgb[3 * i + 2] = static_cast<uint8_t>((y * k + 127) / 255);
  }
}

// Extra columns decoded on each side of a cropped region; see StepDecode.
constexpr int kCropMargin = 2;

void StepDecode(j_decompress_ptr cinfo, void* arg) {
  DecodeArgs* args = static_cast<DecodeArgs*>(arg);
  jpeg_start_decompress(cinfo);
  args->buffer_x = 0;
  args->buffer_y = 0;
  int last_row = static_cast<int>(cinfo->output_height);
  if (args->use_region) {
    // Ask for kCropMargin more columns than needed on each side: libjpeg
    // upsamples chroma as if the cropped columns were the whole image, so
    // with h2 sampling (4:2:0, 4:2:2) the crop's first and last columns get
    // edge-replicated chroma and differ (by up to ~40 levels) from a full
    // decode. Found on libjpeg-turbo 2.1.5 at scale 1 (4:2:0, 4:2:2) and
    // 1/2, 1/4 (4:2:2); the margin columns absorb it, and the tests check
    // that region decode equals full decode exactly.
    const int full_width = static_cast<int>(cinfo->output_width);
    const int left = args->x0 > kCropMargin ? args->x0 - kCropMargin : 0;
    const int right = args->x1 + kCropMargin < full_width
                          ? args->x1 + kCropMargin
                          : full_width;
    if (left > 0 || right < full_width) {
      JDIMENSION xoffset = static_cast<JDIMENSION>(left);
      JDIMENSION width = static_cast<JDIMENSION>(right - left);
      jpeg_crop_scanline(cinfo, &xoffset, &width);
      args->buffer_x = static_cast<int>(xoffset);
    }
    if (args->y0 > 0) {
      jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(args->y0));
      args->buffer_y = args->y0;
    }
    last_row = args->y1;
  }
  const int cmyk = cinfo->out_color_space == JCS_CMYK;
  const int width = static_cast<int>(cinfo->output_width);
  for (int row = args->buffer_y; row < last_row; ++row) {
    uint8_t* dst = args->buffer + (row - args->buffer_y) * args->stride;
    JSAMPROW sample_row = cmyk ? args->cmyk_row : dst;
    if (jpeg_read_scanlines(cinfo, &sample_row, 1) != 1) {
      ERREXIT(cinfo, JERR_TOO_LITTLE_DATA);
    }
    if (cmyk) CmykToRgb(args->cmyk_row, width, cinfo->saw_Adobe_marker, dst);
  }
}

// ---------------------------------------------------------------------------
// C++ from here on.
// ---------------------------------------------------------------------------

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

DecodeResult Error(SampleError error, std::string detail) {
  DecodeResult result;
  result.error = error;
  result.detail = std::move(detail);
  return result;
}

}  // namespace

int ChooseScaleDenom(double crop_w, double crop_h, int out_w, int out_h) {
  for (int denom : {8, 4, 2}) {
    if (crop_w / denom >= out_w && crop_h / denom >= out_h) return denom;
  }
  return 1;
}

namespace {

// What DecoderCore::DecodeRect should decode: a rectangle of the image scaled by
// 1 / scale_denom, in scaled pixels, half-open.
struct RectRequest {
  int scale_denom = 1;
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool use_region = true;
};

// The decoder proper; JpegDecoder, DecodeReference and the test hook wrap
// it. Thread-compatible.
class DecoderCore {
 public:
  explicit DecoderCore(DecodeLimits limits_in) : limits(limits_in) {
    memset(&cinfo, 0, sizeof(cinfo));
    memset(&err, 0, sizeof(err));
    memset(&progress, 0, sizeof(progress));
    Create();
  }
  ~DecoderCore() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  // cinfo points into err and progress: neither copyable nor movable.
  DecoderCore(const DecoderCore&) = delete;
  DecoderCore& operator=(const DecoderCore&) = delete;

  // (Re)creates the decompress object, with our error, warning and progress
  // handlers and the memory limit.
  void Create() {
    if (created) jpeg_destroy_decompress(&cinfo);
    created = false;
    jpeg_std_error(&err.pub);
    err.pub.error_exit = OnErrorExit;
    err.pub.emit_message = OnEmitMessage;
    err.max_scans = limits.max_scans;
    err.decode_damaged = limits.decode_damaged;
    err.reason = SampleError::kNone;
    err.damage = SampleError::kNone;
    cinfo.err = &err.pub;
    if (!RunGuarded(&cinfo, &err, StepCreate, nullptr)) return;
    created = true;
    cinfo.mem->max_memory_to_use = static_cast<long>(
        std::min<uint64_t>(limits.max_memory_bytes, LONG_MAX));
    progress.pub.progress_monitor = OnProgress;
    progress.err = &err;
    cinfo.progress = &progress.pub;
  }

  // The DecodeResult for a failed guarded step; resets the decoder.
  DecodeResult FailedStep() {
    SampleError reason = err.reason;
    if (reason == SampleError::kNone) {
      switch (err.pub.msg_code) {
        case JERR_NO_SOI:
          reason = SampleError::kNotJpeg;
          break;
        case JERR_INPUT_EMPTY:
          reason = SampleError::kEmptyFile;
          break;
        case JERR_NO_BACKING_STORE:
        case JERR_OUT_OF_MEMORY:
        case JERR_IMAGE_TOO_BIG:
          reason = SampleError::kTooManyPixels;
          break;
        default:
          reason = SampleError::kCorrupt;
      }
    }
    DecodeResult result = Error(reason, err.message);
    Create();  // a failed decode can poison the object for later images
    return result;
  }

  // Reads the header, asks `plan` (given the full image size) what to
  // decode, and decodes it into buffer; on success `*view` shows the
  // requested rectangle.
  DecodeResult DecodeRect(
      absl::Span<const uint8_t> data,
      absl::FunctionRef<DecodeResult(int width, int height, RectRequest*)>
          plan,
      RgbView* view) {
    if (data.empty()) return Error(SampleError::kEmptyFile, "empty file");
    if (const ContentKind kind = SniffContent(data);
        kind != ContentKind::kJpeg && kind != ContentKind::kHtml &&
        kind != ContentKind::kUnknown) {
      return Error(SampleError::kUnsupportedFormat,
                   absl::StrCat(absl::AsciiStrToUpper(ContentKindName(kind)),
                                " image, not JPEG"));
    }
    if (data.size() < 2 || data[0] != 0xFF || data[1] != 0xD8) {
      return Error(SampleError::kNotJpeg, "no JPEG SOI marker");
    }
    if (!created) {
      Create();
      if (!created) return FailedStep();
    }
    err.reason = SampleError::kNone;
    err.damage = SampleError::kNone;
    HeaderArgs header{data.data(), data.size()};
    if (!RunGuarded(&cinfo, &err, StepReadHeader, &header)) {
      return FailedStep();
    }
    const int width = static_cast<int>(cinfo.image_width);
    const int height = static_cast<int>(cinfo.image_height);
    if (static_cast<uint64_t>(width) * height > limits.max_pixels) {
      jpeg_abort_decompress(&cinfo);
      return Error(SampleError::kTooManyPixels,
                   absl::StrCat(width, "x", height, " pixels, more than ",
                                limits.max_pixels));
    }
    // libjpeg-turbo's IDCT scaling is square per component, so with
    // unequal horizontal and vertical subsampling (4:2:2, 4:4:0) it cannot
    // scale chroma up to the output grid in both directions: at 1/d a
    // 4:2:2 file's chroma comes out at 1/(2d) horizontally and is then
    // upsampled. Measured on synthetic 4:2:2 images against the original
    // pixels: mean abs error 4.1 / 6.7 / 10.2 at 1/2 / 1/4 / 1/8, against
    // 0.9 / 0.5 / 0.5 for 4:4:4. The decoder therefore uses one scale step
    // finer for such files (see DecodeRect's caller).
    uneven_subsampling = false;
    for (int c = 0; c < cinfo.num_components; ++c) {
      const jpeg_component_info& comp = cinfo.comp_info[c];
      if (cinfo.max_h_samp_factor * comp.v_samp_factor !=
          cinfo.max_v_samp_factor * comp.h_samp_factor) {
        uneven_subsampling = true;
      }
    }
    RectRequest rect;
    DecodeResult planned = plan(width, height, &rect);
    if (!planned.ok()) {
      jpeg_abort_decompress(&cinfo);
      return planned;
    }
    const int denom = rect.scale_denom;
    cinfo.scale_num = 1;
    cinfo.scale_denom = static_cast<unsigned int>(denom);
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.out_color_space =
        (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK)
            ? JCS_CMYK
            : JCS_RGB;
    // Scaled size, as jpeg_calc_output_dimensions computes it.
    const int scaled_w = (width + denom - 1) / denom;
    const int scaled_h = (height + denom - 1) / denom;
    const int rows = rect.use_region ? rect.y1 - rect.y0 : scaled_h;
    const size_t stride = static_cast<size_t>(scaled_w) * 3;
    buffer.resize(stride * rows);
    if (cinfo.out_color_space == JCS_CMYK) cmyk_row.resize(4 * scaled_w);
    DecodeArgs args{};
    args.x0 = rect.x0;
    args.y0 = rect.y0;
    args.x1 = rect.x1;
    args.y1 = rect.y1;
    args.use_region = rect.use_region;
    args.buffer = buffer.data();
    args.stride = stride;
    args.cmyk_row = cmyk_row.data();
    if (!RunGuarded(&cinfo, &err, StepDecode, &args)) return FailedStep();
    // Do not decode the rest of the image.
    jpeg_abort_decompress(&cinfo);
    view->data = buffer.data() + (rect.y0 - args.buffer_y) * stride +
                 (rect.x0 - args.buffer_x) * 3;
    view->width = rect.x1 - rect.x0;
    view->height = rect.y1 - rect.y0;
    view->stride = static_cast<ptrdiff_t>(stride);
    DecodeResult result;
    if (err.damage != SampleError::kNone) {
      result.damage = err.damage;
      result.damage_detail = err.damage_message;
    }
    return result;
  }

  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int, int)> choose_crop,
                      bool reference, PixelLayout layout, uint8_t* out,
                      DecodeTimings* timings, RgbView* decoded_only = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    ResizeRequest resize;
    resize.layout = layout;
    auto plan = [&](int width, int height, RectRequest* rect) {
      CropSpec crop;
      DecodeResult clamped =
          ClampCrop(choose_crop(width, height), width, height, &crop);
      if (!clamped.ok()) return clamped;
      int denom = reference ? 1
                            : ChooseScaleDenom(crop.width, crop.height,
                                               crop.out_width, crop.out_height);
      if (uneven_subsampling && denom > 1) denom /= 2;
      const CropWindow window = WindowAt(crop, width, height, denom, layout);
      rect->scale_denom = denom;
      rect->use_region = !reference;
      rect->x0 = window.x0;
      rect->y0 = window.y0;
      rect->x1 = window.x1;
      rect->y1 = window.y1;
      resize = window.resize;
      return DecodeResult();
    };
    RgbView view;
    DecodeResult result = DecodeRect(data, plan, &view);
    if (!result.ok()) return result;
    if (decoded_only != nullptr) {
      // The decode-only limit: the same pixels, no resize.
      *decoded_only = view;
      return result;
    }
    const auto decoded = std::chrono::steady_clock::now();
    resizer.Resize(view, resize, out);
    if (timings != nullptr) {
      timings->decode_seconds =
          std::chrono::duration<double>(decoded - start).count();
      timings->transform_seconds = SecondsSince(decoded);
    }
    return result;
  }

  const DecodeLimits limits;
  jpeg_decompress_struct cinfo;
  ErrorState err;
  ProgressState progress;
  bool created = false;
  // Whether the current image's chroma is subsampled unequally in x and y
  // (4:2:2, 4:4:0); set after its header is read.
  bool uneven_subsampling = false;
  std::vector<uint8_t> buffer;    // decoded rows
  std::vector<uint8_t> cmyk_row;  // one CMYK scanline
  Resizer resizer;
};

}  // namespace

struct JpegDecoder::Impl {
  explicit Impl(DecodeLimits limits) : core(limits) {}
  DecoderCore core;
};

JpegDecoder::JpegDecoder(DecodeLimits limits)
    : impl_(std::make_unique<Impl>(limits)) {}

JpegDecoder::~JpegDecoder() = default;

DecodeResult JpegDecoder::Decode(
    absl::Span<const uint8_t> data,
    absl::FunctionRef<CropSpec(int width, int height)> choose_crop,
    PixelLayout layout, uint8_t* out, DecodeTimings* timings) {
  return impl_->core.Decode(data, choose_crop, /*reference=*/false, layout, out,
                       timings);
}

DecodeResult DecodeReference(
    absl::Span<const uint8_t> data,
    absl::FunctionRef<CropSpec(int width, int height)> choose_crop,
    PixelLayout layout, uint8_t* out) {
  DecoderCore impl{DecodeLimits()};
  return impl.Decode(data, choose_crop, /*reference=*/true, layout, out,
                     /*timings=*/nullptr);
}

struct RegionDecoder::Impl {
  explicit Impl(DecodeLimits limits) : core(limits) {}
  DecoderCore core;
};

RegionDecoder::RegionDecoder(DecodeLimits limits)
    : impl_(std::make_unique<Impl>(limits)) {}

RegionDecoder::~RegionDecoder() = default;

DecodeResult RegionDecoder::Decode(
    absl::Span<const uint8_t> data,
    absl::FunctionRef<CropSpec(int width, int height)> choose_crop,
    RgbView* view) {
  return impl_->core.Decode(data, choose_crop, /*reference=*/false,
                            PixelLayout::kHWC, /*out=*/nullptr,
                            /*timings=*/nullptr, view);
}

DecodeResult DecodeScaledRegionForTest(absl::Span<const uint8_t> data,
                                       int scale_denom, int x0, int y0,
                                       int x1, int y1, bool use_region,
                                       RegionPixels* out) {
  DecoderCore impl{DecodeLimits()};
  auto plan = [&](int width, int height, RectRequest* rect) {
    const int scaled_w = (width + scale_denom - 1) / scale_denom;
    const int scaled_h = (height + scale_denom - 1) / scale_denom;
    if (x0 < 0 || y0 < 0 || x1 <= x0 || y1 <= y0 || x1 > scaled_w ||
        y1 > scaled_h) {
      return Error(SampleError::kCorrupt, "rectangle outside the image");
    }
    rect->scale_denom = scale_denom;
    rect->x0 = x0;
    rect->y0 = y0;
    rect->x1 = x1;
    rect->y1 = y1;
    rect->use_region = use_region;
    return DecodeResult();
  };
  RgbView view;
  DecodeResult result = impl.DecodeRect(data, plan, &view);
  if (!result.ok()) return result;
  out->width = view.width;
  out->height = view.height;
  out->rgb.resize(static_cast<size_t>(view.width) * view.height * 3);
  for (int row = 0; row < view.height; ++row) {
    memcpy(&out->rgb[static_cast<size_t>(row) * view.width * 3],
           view.data + row * view.stride, static_cast<size_t>(view.width) * 3);
  }
  return result;
}

}  // namespace batchd::server
