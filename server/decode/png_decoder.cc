#include "server/decode/png_decoder.h"

#include <png.h>

#include <chrono>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/decode/crop.h"
#include "server/decode/resize.h"

namespace batchd::server {
namespace {

constexpr png_alloc_size_t kMaxChunkBytes = png_alloc_size_t{8} << 20;

// ---------------------------------------------------------------------------
// libpng glue. Everything in this section is C-style: plain structs, no
// objects with destructors, because libpng reports errors by longjmp. The
// only setjmp is in RunGuarded().
// ---------------------------------------------------------------------------

struct PngState {
  jmp_buf jump;
  // The input, read by OnRead.
  const uint8_t* data;
  size_t size;
  size_t position;
  int truncated;  // OnRead ran out of data
  char message[256];
};

void OnError(png_structp png, png_const_charp message) {
  PngState* state = static_cast<PngState*>(png_get_error_ptr(png));
  snprintf(state->message, sizeof(state->message), "%s", message);
  longjmp(state->jump, 1);
}

// Warnings (unknown or damaged ancillary chunks, extra data) do not stop
// the decode: the image data is what matters, as for JPEG's warnings.
void OnWarning(png_structp, png_const_charp) {}

void OnRead(png_structp png, png_bytep out, png_size_t length) {
  PngState* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (length > state->size - state->position) {
    state->truncated = 1;
    png_error(png, "the PNG data ends early");
  }
  memcpy(out, state->data + state->position, length);
  state->position += length;
}

using Step = void (*)(png_structp png, png_infop info, void* arg);

// Runs `step`; returns false if libpng longjmp'd out of it (the message is
// then in the state). The reader must be destroyed after a false return.
bool RunGuarded(png_structp png, png_infop info, PngState* state, Step step,
                void* arg) {
  if (setjmp(state->jump)) return false;
  step(png, info, arg);
  return true;
}

// Reads the chunks up to the image data: IHDR gives the size.
void StepReadInfo(png_structp png, png_infop info, void*) {
  png_read_info(png, info);
}

// Asks for 8-bit RGB whatever the stored format; returns the pass count.
void StepSetTransforms(png_structp png, png_infop info, void* arg) {
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  if (bit_depth == 16) png_set_scale_16(png);
  if (color_type == PNG_COLOR_TYPE_GRAY ||
      color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  // After the expansions: palette_to_rgb turns a tRNS chunk into alpha.
  png_set_strip_alpha(png);
  *static_cast<int*>(arg) = png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

struct RowsArgs {
  int passes;
  int height;
  int y0, y1;          // rows to keep, half-open
  uint8_t* rows;       // (y1 - y0) rows of `stride` bytes; all rows if
                       // interlaced (y0 = 0, y1 = height)
  size_t stride;
  uint8_t* scratch;    // one row, for rows above y0
};

void StepReadRows(png_structp png, png_infop, void* arg) {
  RowsArgs* args = static_cast<RowsArgs*>(arg);
  if (args->passes > 1) {
    // Each Adam7 pass updates every row: all rows are needed.
    for (int pass = 0; pass < args->passes; ++pass) {
      for (int row = 0; row < args->height; ++row) {
        png_read_row(png, args->rows + row * args->stride, NULL);
      }
    }
    return;
  }
  for (int row = 0; row < args->y1; ++row) {
    uint8_t* dst = row < args->y0
                       ? args->scratch
                       : args->rows + (row - args->y0) * args->stride;
    png_read_row(png, dst, NULL);
  }
}

// ---------------------------------------------------------------------------
// C++ from here on.
// ---------------------------------------------------------------------------

DecodeResult Error(SampleError error, std::string detail) {
  DecodeResult result;
  result.error = error;
  result.detail = std::move(detail);
  return result;
}

// Owns a libpng reader; destroys it on scope exit.
struct Reader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~Reader() {
    if (png != nullptr) png_destroy_read_struct(&png, &info, nullptr);
  }
};

}  // namespace

bool IsPng(absl::Span<const uint8_t> data) {
  return data.size() >= 8 && png_sig_cmp(data.data(), 0, 8) == 0;
}

struct PngDecoder::Impl {
  explicit Impl(DecodeLimits limits_in) : limits(limits_in) {}

  DecodeResult Fail(const PngState& state, const char* stage) {
    if (state.truncated) return Error(SampleError::kTruncated, state.message);
    return Error(SampleError::kCorrupt,
                 absl::StrCat("PNG ", stage, ": ", state.message));
  }

  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int, int)> choose_crop,
                      PixelLayout layout, uint8_t* out,
                      DecodeTimings* timings) {
    const auto start = std::chrono::steady_clock::now();
    if (data.empty()) return Error(SampleError::kEmptyFile, "empty file");
    if (!IsPng(data)) {
      return Error(SampleError::kUnsupportedFormat, "not a PNG");
    }
    PngState state;
    memset(&state, 0, sizeof(state));
    state.data = data.data();
    state.size = data.size();
    Reader reader;
    reader.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, OnError,
                                        OnWarning);
    if (reader.png == nullptr) {
      return Error(SampleError::kCorrupt, "cannot create a PNG reader");
    }
    reader.info = png_create_info_struct(reader.png);
    if (reader.info == nullptr) {
      return Error(SampleError::kCorrupt, "cannot create a PNG reader");
    }
    png_set_read_fn(reader.png, &state, OnRead);
    // The pixel limit below decides; libpng's own 1,000,000-pixel side limit
    // would reject legitimate panoramas.
    png_set_user_limits(reader.png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_malloc_max(reader.png, kMaxChunkBytes);

    if (!RunGuarded(reader.png, reader.info, &state, StepReadInfo, nullptr)) {
      return Fail(state, "header");
    }
    const uint32_t width = png_get_image_width(reader.png, reader.info);
    const uint32_t height = png_get_image_height(reader.png, reader.info);
    if (static_cast<uint64_t>(width) * height > limits.max_pixels) {
      return Error(SampleError::kTooManyPixels,
                   absl::StrCat(width, "x", height, " pixels, more than ",
                                limits.max_pixels));
    }
    CropSpec crop;
    DecodeResult clamped =
        ClampCrop(choose_crop(static_cast<int>(width), static_cast<int>(height)),
                  static_cast<int>(width), static_cast<int>(height), &crop);
    if (!clamped.ok()) return clamped;
    const CropWindow window =
        WindowAt(crop, static_cast<int>(width), static_cast<int>(height),
                 /*denom=*/1, layout);

    int passes = 1;
    if (!RunGuarded(reader.png, reader.info, &state, StepSetTransforms,
                    &passes)) {
      return Fail(state, "header");
    }
    const size_t stride = static_cast<size_t>(width) * 3;
    if (png_get_rowbytes(reader.png, reader.info) != stride) {
      return Error(SampleError::kCorrupt,
                   absl::StrCat("PNG rows of ",
                                png_get_rowbytes(reader.png, reader.info),
                                " bytes after conversion, expected ", stride));
    }
    RowsArgs args{};
    args.passes = passes;
    args.height = static_cast<int>(height);
    args.y0 = passes > 1 ? 0 : window.y0;
    args.y1 = passes > 1 ? static_cast<int>(height) : window.y1;
    rows.resize(stride * (args.y1 - args.y0));
    scratch.resize(stride);
    args.rows = rows.data();
    args.stride = stride;
    args.scratch = scratch.data();
    if (!RunGuarded(reader.png, reader.info, &state, StepReadRows, &args)) {
      return Fail(state, "data");
    }
    RgbView view;
    view.data = rows.data() + (window.y0 - args.y0) * stride + window.x0 * 3;
    view.width = window.x1 - window.x0;
    view.height = window.y1 - window.y0;
    view.stride = static_cast<ptrdiff_t>(stride);
    const auto decoded = std::chrono::steady_clock::now();
    resizer.Resize(view, window.resize, out);
    if (timings != nullptr) {
      timings->decode_seconds =
          std::chrono::duration<double>(decoded - start).count();
      timings->transform_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        decoded)
              .count();
    }
    return DecodeResult();
  }

  const DecodeLimits limits;
  std::vector<uint8_t> rows;     // the kept rows, RGB
  std::vector<uint8_t> scratch;  // one row above the window
  Resizer resizer;
};

PngDecoder::PngDecoder(DecodeLimits limits)
    : impl_(std::make_unique<Impl>(limits)) {}

PngDecoder::~PngDecoder() = default;

DecodeResult PngDecoder::Decode(
    absl::Span<const uint8_t> data,
    absl::FunctionRef<CropSpec(int width, int height)> choose_crop,
    PixelLayout layout, uint8_t* out, DecodeTimings* timings) {
  return impl_->Decode(data, choose_crop, layout, out, timings);
}

}  // namespace batchd::server
