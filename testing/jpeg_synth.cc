#include "testing/jpeg_synth.h"

// jpeglib.h needs FILE and size_t declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace batchd::tools {
namespace {

// SplitMix64: small, fast, good enough for image content.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }

 private:
  uint64_t state_;
};

constexpr double kPi = 3.14159265358979323846;

// A plane wave amplitude * cos(fx * x + fy * y + phase), evaluated as
// cos(a + b) = cos a cos b - sin a sin b from per-column and per-row tables.
struct Wave {
  std::vector<float> cos_x, sin_x, cos_y, sin_y;
  void Init(Rng& rng, int width, int height, double min_period,
            double max_period) {
    const double period = std::exp(
        rng.Uniform(std::log(min_period), std::log(max_period)));
    const double angle = rng.Uniform(0, 2 * kPi);
    const double fx = 2 * kPi / period * std::cos(angle);
    const double fy = 2 * kPi / period * std::sin(angle);
    const double phase = rng.Uniform(0, 2 * kPi);
    cos_x.resize(width);
    sin_x.resize(width);
    cos_y.resize(height);
    sin_y.resize(height);
    for (int x = 0; x < width; ++x) {
      cos_x[x] = static_cast<float>(std::cos(fx * x + phase));
      sin_x[x] = static_cast<float>(std::sin(fx * x + phase));
    }
    for (int y = 0; y < height; ++y) {
      cos_y[y] = static_cast<float>(std::cos(fy * y));
      sin_y[y] = static_cast<float>(std::sin(fy * y));
    }
  }
  float At(int x, int y) const {
    return cos_x[x] * cos_y[y] - sin_x[x] * sin_y[y];
  }
};

struct JpegError {
  jpeg_error_mgr pub;  // first member
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnCompressError(j_common_ptr cinfo) {
  JpegError* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

struct CompressArgs {
  const SynthOptions* options;
  const uint8_t* pixels;  // components per pixel as the colour space needs
  int components;
  unsigned char* out;     // malloc'ed by jpeg_mem_dest
  unsigned long out_size;
};

// C-style: no objects with destructors, because of the longjmp.
void Compress(j_compress_ptr cinfo, CompressArgs* args) {
  const SynthOptions& o = *args->options;
  jpeg_mem_dest(cinfo, &args->out, &args->out_size);
  cinfo->image_width = static_cast<JDIMENSION>(o.width);
  cinfo->image_height = static_cast<JDIMENSION>(o.height);
  cinfo->input_components = args->components;
  cinfo->in_color_space =
      o.grayscale ? JCS_GRAYSCALE : (o.cmyk ? JCS_CMYK : JCS_RGB);
  jpeg_set_defaults(cinfo);  // CMYK: JCS_CMYK with an Adobe marker
  jpeg_set_quality(cinfo, o.quality, TRUE);
  if (!o.grayscale && !o.cmyk) {
    int h = 1, v = 1;
    if (o.subsampling == ChromaSubsampling::k420) h = v = 2;
    if (o.subsampling == ChromaSubsampling::k422) h = 2;
    cinfo->comp_info[0].h_samp_factor = h;
    cinfo->comp_info[0].v_samp_factor = v;
  }
  cinfo->restart_interval = static_cast<unsigned int>(o.restart_interval);
  if (o.progressive) jpeg_simple_progression(cinfo);
  jpeg_start_compress(cinfo, TRUE);
  const size_t stride = static_cast<size_t>(o.width) * args->components;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(args->pixels + cinfo->next_scanline * stride);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
}

// Returns false (message in err) if libjpeg failed.
bool RunCompress(j_compress_ptr cinfo, JpegError* err, CompressArgs* args) {
  if (setjmp(err->jump)) return false;
  Compress(cinfo, args);
  return true;
}

uint8_t ToByte(float v) {
  return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f) + 0.5f);
}

}  // namespace

std::vector<uint8_t> SynthesizeRgb(int width, int height, uint64_t seed,
                                   double detail) {
  Rng rng(seed);
  const size_t n = static_cast<size_t>(width) * height;
  std::vector<float> rgb(n * 3);

  // 1. Smooth background: a few large-scale coloured gradients.
  constexpr int kGradients = 4;
  Wave gradients[kGradients];
  float gains[kGradients][3];
  float base[3];
  for (float& b : base) b = static_cast<float>(rng.Uniform(60, 190));
  for (int i = 0; i < kGradients; ++i) {
    gradients[i].Init(rng, width, height, 80, 1200);
    for (float& g : gains[i]) g = static_cast<float>(rng.Uniform(-45, 45));
  }
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      float* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = base[0];
      p[1] = base[1];
      p[2] = base[2];
      for (int i = 0; i < kGradients; ++i) {
        const float v = gradients[i].At(x, y);
        p[0] += gains[i][0] * v;
        p[1] += gains[i][1] * v;
        p[2] += gains[i][2] * v;
      }
    }
  }

  // 2. Objects: ellipses and rectangles with hard edges and their own
  // shading.
  // A few large objects, then clutter: many small ones (edges are much of
  // what a photograph costs to code).
  const int large_shapes = 12 + static_cast<int>(rng.Uniform(0, 30));
  const double area_scale = double(width) * height / (500.0 * 375.0);
  const int shapes =
      large_shapes +
      static_cast<int>(area_scale * (400 + rng.Uniform(0, 600)));
  const double diagonal = std::sqrt(double(width) * width + double(height) * height);
  for (int s = 0; s < shapes; ++s) {
    const double cx = rng.Uniform(0, width), cy = rng.Uniform(0, height);
    const double rx = diagonal * (s < large_shapes ? rng.Uniform(0.02, 0.25)
                                                   : rng.Uniform(0.004, 0.03));
    const double ry = rx * rng.Uniform(0.4, 2.5);
    const bool ellipse = rng.Uniform() < 0.6;
    const float color[3] = {static_cast<float>(rng.Uniform(0, 255)),
                            static_cast<float>(rng.Uniform(0, 255)),
                            static_cast<float>(rng.Uniform(0, 255))};
    const float alpha = static_cast<float>(rng.Uniform(0.5, 1.0));
    const float shade_x = static_cast<float>(rng.Uniform(-60, 60) / rx);
    const float shade_y = static_cast<float>(rng.Uniform(-60, 60) / ry);
    const int x0 = std::max(0, static_cast<int>(cx - rx));
    const int x1 = std::min(width, static_cast<int>(cx + rx) + 1);
    const int y0 = std::max(0, static_cast<int>(cy - ry));
    const int y1 = std::min(height, static_cast<int>(cy + ry) + 1);
    for (int y = y0; y < y1; ++y) {
      const double dy = (y - cy) / ry;
      for (int x = x0; x < x1; ++x) {
        const double dx = (x - cx) / rx;
        if (ellipse && dx * dx + dy * dy > 1) continue;
        float* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
        const float shade = shade_x * static_cast<float>(x - cx) +
                            shade_y * static_cast<float>(y - cy);
        for (int c = 0; c < 3; ++c) {
          p[c] += alpha * (color[c] + shade - p[c]);
        }
      }
    }
  }

  // 3. Texture (fine oriented waves, as in foliage, fabric, fur) and
  // sensor-like noise, both stronger in some regions than others.
  constexpr int kTextures = 3;
  Wave textures[kTextures];
  float texture_amp[kTextures];
  for (int i = 0; i < kTextures; ++i) {
    textures[i].Init(rng, width, height, 2.5, 12);
    texture_amp[i] = static_cast<float>(rng.Uniform(4, 16) * detail);
  }
  Wave modulation;
  modulation.Init(rng, width, height, 100, 600);
  // Band-limited noise: random values on a coarse grid, bilinearly
  // interpolated (mid frequencies, like foliage or gravel).
  constexpr int kCell = 2;
  const int grid_w = width / kCell + 2;
  const int grid_h = height / kCell + 2;
  std::vector<float> grid(static_cast<size_t>(grid_w) * grid_h);
  for (float& g : grid) g = static_cast<float>(rng.Uniform(-1, 1));
  const float grid_amp = static_cast<float>(rng.Uniform(30, 50) * detail);
  const float noise_amp = static_cast<float>(rng.Uniform(22, 40) * detail);
  const float chroma_noise = noise_amp * 0.3f;
  std::vector<uint8_t> out(n * 3);
  for (int y = 0; y < height; ++y) {
    const int gy = y / kCell;
    const float fy = (y % kCell + 0.5f) / kCell;
    const float* g0 = &grid[static_cast<size_t>(gy) * grid_w];
    const float* g1 = g0 + grid_w;
    for (int x = 0; x < width; ++x) {
      const size_t i = static_cast<size_t>(y) * width + x;
      const float m = 1.0f + 0.5f * modulation.At(x, y);  // 0.5 .. 1.5
      float t = 0;
      for (int k = 0; k < kTextures; ++k) t += texture_amp[k] * textures[k].At(x, y);
      const int gx = x / kCell;
      const float fx = (x % kCell + 0.5f) / kCell;
      const float band =
          (1 - fy) * ((1 - fx) * g0[gx] + fx * g0[gx + 1]) +
          fy * ((1 - fx) * g1[gx] + fx * g1[gx + 1]);
      const uint64_t r = rng.Next();
      // Triangular-distributed noise in [-1, 1] from two 16-bit uniforms.
      const float luma_noise =
          ((r & 0xFFFF) + ((r >> 16) & 0xFFFF)) * (1.0f / 65535.0f) - 1.0f;
      const float cn1 = ((r >> 32) & 0xFFFF) * (2.0f / 65535.0f) - 1.0f;
      const float cn2 = (r >> 48) * (2.0f / 65535.0f) - 1.0f;
      const float l = m * (t + grid_amp * band + noise_amp * luma_noise);
      out[3 * i] = ToByte(rgb[3 * i] + l + chroma_noise * cn1);
      out[3 * i + 1] = ToByte(rgb[3 * i + 1] + l);
      out[3 * i + 2] = ToByte(rgb[3 * i + 2] + l + chroma_noise * cn2);
    }
  }
  return out;
}

absl::StatusOr<std::vector<uint8_t>> SynthesizeJpeg(const SynthOptions& options) {
  if (options.width < 1 || options.width > 65500 || options.height < 1 ||
      options.height > 65500) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image size ", options.width, "x", options.height,
        " out of range 1..65500"));
  }
  if (options.quality < 1 || options.quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("quality ", options.quality, " out of range 1..100"));
  }
  if (options.grayscale && options.cmyk) {
    return absl::InvalidArgumentError("grayscale and cmyk are exclusive");
  }
  if (options.restart_interval < 0 || options.restart_interval > 65535) {
    return absl::InvalidArgumentError("restart_interval out of range 0..65535");
  }
  std::vector<uint8_t> rgb = SynthesizeRgb(options.width, options.height,
                                           options.seed, options.detail);
  const size_t n = static_cast<size_t>(options.width) * options.height;
  std::vector<uint8_t> pixels;
  int components = 3;
  if (options.grayscale) {
    components = 1;
    pixels.resize(n);
    for (size_t i = 0; i < n; ++i) {
      pixels[i] = static_cast<uint8_t>(
          (77 * rgb[3 * i] + 150 * rgb[3 * i + 1] + 29 * rgb[3 * i + 2] + 128) >>
          8);
    }
  } else if (options.cmyk) {
    // Adobe-style inverted CMYK (255 = no ink): K' = max(R, G, B) and
    // C' = R * 255 / K', so that R = C' * K' / 255.
    components = 4;
    pixels.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
      const int r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
      const int k = std::max({r, g, b});
      uint8_t* p = &pixels[4 * i];
      if (k == 0) {
        p[0] = p[1] = p[2] = 255;
      } else {
        p[0] = static_cast<uint8_t>((r * 255 + k / 2) / k);
        p[1] = static_cast<uint8_t>((g * 255 + k / 2) / k);
        p[2] = static_cast<uint8_t>((b * 255 + k / 2) / k);
      }
      p[3] = static_cast<uint8_t>(k);
    }
  } else {
    pixels = std::move(rgb);
  }

  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnCompressError;
  jpeg_create_compress(&cinfo);
  CompressArgs args{&options, pixels.data(), components, nullptr, 0};
  const bool ok = RunCompress(&cinfo, &err, &args);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> jpeg;
  if (ok) jpeg.assign(args.out, args.out + args.out_size);
  free(args.out);
  if (!ok) return absl::InternalError(absl::StrCat("libjpeg: ", err.message));
  return jpeg;
}

}  // namespace batchd::tools
