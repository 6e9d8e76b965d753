#include "testing/png_synth.h"

#include <png.h>

#include <csetjmp>

namespace batchd::server {
namespace {

void OnWrite(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))
      ->append(reinterpret_cast<const char*>(data), length);
}
void OnFlush(png_structp) {}

struct WriteArgs {
  const PngSpec* spec;
  png_bytep* rows;
};

// The only setjmp; no C++ objects with destructors in between.
bool Write(png_structp png, png_infop info, WriteArgs* args) {
  if (setjmp(png_jmpbuf(png))) return false;
  const PngSpec& s = *args->spec;
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (s.color_type == PNG_COLOR_TYPE_PALETTE) {
    png_color colors[256];
    const int n = static_cast<int>(s.palette_rgb.size() / 3);
    for (int i = 0; i < n; ++i) {
      colors[i].red = s.palette_rgb[3 * i];
      colors[i].green = s.palette_rgb[3 * i + 1];
      colors[i].blue = s.palette_rgb[3 * i + 2];
    }
    png_set_PLTE(png, info, colors, n);
    if (!s.palette_alpha.empty()) {
      png_set_tRNS(png, info, s.palette_alpha.data(),
                   static_cast<int>(s.palette_alpha.size()), nullptr);
    }
  }
  png_write_info(png, info);
  if (s.bit_depth < 8) png_set_packing(png);
  if (s.bit_depth == 16) png_set_swap(png);  // rows hold host-order uint16
  png_write_image(png, args->rows);
  png_write_end(png, nullptr);
  return true;
}

int Channels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_PALETTE:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    default:
      return 4;
  }
}

}  // namespace

std::string EncodePngForTest(const PngSpec& spec) {
  const int channels = Channels(spec.color_type);
  const size_t per_row = static_cast<size_t>(spec.width) * channels;
  // Rows in libpng's input form: one byte per sample below 16 bits (with
  // png_set_packing), two (host order, with png_set_swap) at 16.
  const int bytes = spec.bit_depth == 16 ? 2 : 1;
  std::vector<uint8_t> pixels(per_row * spec.height * bytes);
  for (size_t i = 0; i < per_row * spec.height && i < spec.samples.size();
       ++i) {
    if (bytes == 2) {
      pixels[2 * i] = static_cast<uint8_t>(spec.samples[i] & 0xFF);
      pixels[2 * i + 1] = static_cast<uint8_t>(spec.samples[i] >> 8);
    } else {
      pixels[i] = static_cast<uint8_t>(spec.samples[i]);
    }
  }
  std::vector<png_bytep> rows(spec.height);
  for (int y = 0; y < spec.height; ++y) {
    rows[y] = pixels.data() + y * per_row * bytes;
  }
  std::string out;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, OnWrite, OnFlush);
  WriteArgs args{&spec, rows.data()};
  const bool ok = Write(png, info, &args);
  png_destroy_write_struct(&png, &info);
  return ok ? out : std::string();
}

}  // namespace batchd::server
