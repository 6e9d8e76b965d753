#include "server/augment/geometry_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

// The float32 arithmetic below follows torchvision's and PyTorch's order of
// operations one operation at a time; it is compiled with
// -ffp-contract=off (server/augment/CMakeLists.txt) so that no multiply-add
// is fused where PyTorch's is not.

namespace batchd::server::augment {
namespace {

// The sampling grid of one output image: source coordinate
//   sx(x, y) = ((x_grid[x] * a + y_grid[y] * b) + c + 1) * half_w - 0.5
//   sy(x, y) = ((x_grid[x] * d + y_grid[y] * e) + f + 1) * half_h - 0.5
// in float32, as _gen_affine_grid's bmm and grid_sample's unnormalisation
// (align_corners=False) compute them; x_grid[x] = x - w / 2 + 0.5.
struct Grid {
  float a, b, c;  // x row of theta / (w / 2)
  float d, e, f;  // y row of theta / (h / 2)
  float half_w, half_h;
};

// F._get_inverse_affine_matrix(center, angle, translate, scale, shear), in
// double as Python computes it, then rescaled as _gen_affine_grid does.
Grid MakeGrid(const AffineParams& p, int width, int height) {
  // math.radians(x) is x * (pi / 180).
  constexpr double kDegToRad = M_PI / 180.0;
  const double rot = static_cast<double>(p.angle) * kDegToRad;
  const double sx = p.shear_x * kDegToRad;
  const double sy = p.shear_y * kDegToRad;
  // F.affine's tensor branch: the centre relative to the image centre.
  const double cx =
      p.center_set ? 1.0 * (p.center_x - width * 0.5) : 0.0;
  const double cy =
      p.center_set ? 1.0 * (p.center_y - height * 0.5) : 0.0;
  const double tx = p.translate_x;
  const double ty = p.translate_y;

  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b =
      -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d =
      -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  const double scale = p.scale;
  double m[6] = {d / scale, -b / scale, 0.0 / scale,
                 -c / scale, a / scale, 0.0 / scale};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;

  // theta = torch.tensor(matrix, dtype=float32); theta.T / [0.5 w, 0.5 h].
  const float hw = static_cast<float>(0.5 * width);
  const float hh = static_cast<float>(0.5 * height);
  Grid g;
  g.a = static_cast<float>(m[0]) / hw;
  g.b = static_cast<float>(m[1]) / hw;
  g.c = static_cast<float>(m[2]) / hw;
  g.d = static_cast<float>(m[3]) / hh;
  g.e = static_cast<float>(m[4]) / hh;
  g.f = static_cast<float>(m[5]) / hh;
  // grid_sample's scaling factor, static_cast<float>(size) / 2.
  g.half_w = static_cast<float>(width) / 2;
  g.half_h = static_cast<float>(height) / 2;
  return g;
}

// Coordinates are clamped to +-kFar before rounding: far enough outside any
// image to stay outside it, small enough for the rounding below and for int.
constexpr float kFar = 1 << 22;

float ClampFar(float v) {
  // NaN (a degenerate matrix) goes far outside too.
  return v > -kFar ? (v < kFar ? v : kFar) : -kFar;
}

// Round half to even of |v| <= 2^22 (torch.round and the vectorised
// grid_sample's round), without a library call: adding and subtracting
// 1.5 * 2^23 leaves v rounded to an integer in the default (nearest-even)
// rounding mode. IEEE arithmetic (no -ffast-math) keeps the compiler from
// folding it away.
float RoundHalfEven(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// fmaf(a, b, c) for floats: the double product is exact, so only the sum
// rounds (twice, to double then to float; they agree except in cases far
// rarer than the rounding boundaries this tolerance already allows).
inline float Fma(float a, float b, float c) {
  return static_cast<float>(static_cast<double>(a) * b + c);
}

uint8_t ToByte(float v) {
  // v is a rounded value in about [0, 255].
  return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
}

// Lays out the scratch memory: a copy of the source pixels, then the
// per-column grid terms x_grid[x] * a and x_grid[x] * d.
struct Scratch {
  const uint8_t* src;  // width * 3 bytes per row, rows contiguous
  const float* xa;
  const float* xd;
};

Scratch PrepareScratch(const Image& image, const Grid& g,
                       std::vector<uint8_t>* scratch) {
  const size_t row_bytes = static_cast<size_t>(image.width) * 3;
  const size_t pixel_bytes = row_bytes * image.height;
  const size_t floats_at = (pixel_bytes + alignof(float) - 1) /
                           alignof(float) * alignof(float);
  scratch->resize(floats_at + 2 * sizeof(float) * image.width);
  uint8_t* src = scratch->data();
  for (int y = 0; y < image.height; ++y) {
    std::memcpy(src + y * row_bytes, image.row(y), row_bytes);
  }
  float* xa = reinterpret_cast<float*>(scratch->data() + floats_at);
  float* xd = xa + image.width;
  // torch.linspace(-w / 2 + 0.5, w / 2 - 0.5, w): exact in float32.
  const float x0 = static_cast<float>(-image.width * 0.5 + 0.5);
  for (int x = 0; x < image.width; ++x) {
    const float xg = x0 + static_cast<float>(x);
    xa[x] = xg * g.a;
    xd[x] = xg * g.d;
  }
  return {src, xa, xd};
}

void AffineNearest(Image image, const Grid& g, const Scratch& s,
                   const std::array<uint8_t, 3>& outside) {
  const int w = image.width, h = image.height;
  const size_t src_row = static_cast<size_t>(w) * 3;
  const float fw = static_cast<float>(w), fh = static_cast<float>(h);
  const float y0 = static_cast<float>(-h * 0.5 + 0.5);
  for (int y = 0; y < h; ++y) {
    const float yg = y0 + static_cast<float>(y);
    const float yb = yg * g.b, ye = yg * g.e;
    uint8_t* out = image.row(y);
    for (int x = 0; x < w; ++x, out += 3) {
      const float gx = (s.xa[x] + yb) + g.c;
      const float gy = (s.xd[x] + ye) + g.f;
      const float rx = RoundHalfEven(ClampFar((gx + 1.0f) * g.half_w - 0.5f));
      const float ry = RoundHalfEven(ClampFar((gy + 1.0f) * g.half_h - 0.5f));
      if (rx > -1.0f && rx < fw && ry > -1.0f && ry < fh) {
        const uint8_t* p = s.src + static_cast<int>(ry) * src_row +
                           static_cast<int>(rx) * 3;
        out[0] = p[0];
        out[1] = p[1];
        out[2] = p[2];
      } else {
        out[0] = outside[0];
        out[1] = outside[1];
        out[2] = outside[2];
      }
    }
  }
}

void AffineBilinear(Image image, const Grid& g, const Scratch& s,
                    const std::array<uint8_t, 3>& fill, bool blend_fill) {
  const int w = image.width, h = image.height;
  const ptrdiff_t src_row = static_cast<ptrdiff_t>(w) * 3;
  const float y0 = static_cast<float>(-h * 0.5 + 0.5);
  const float fill_f[3] = {static_cast<float>(fill[0]),
                           static_cast<float>(fill[1]),
                           static_cast<float>(fill[2])};
  for (int y = 0; y < h; ++y) {
    const float yg = y0 + static_cast<float>(y);
    const float yb = yg * g.b, ye = yg * g.e;
    uint8_t* out = image.row(y);
    for (int x = 0; x < w; ++x, out += 3) {
      const float gx = (s.xa[x] + yb) + g.c;
      const float gy = (s.xd[x] + ye) + g.f;
      const float sx = ClampFar((gx + 1.0f) * g.half_w - 0.5f);
      const float sy = ClampFar((gy + 1.0f) * g.half_h - 0.5f);
      // floor, then grid_sample's weights in its order.
      int ix = static_cast<int>(sx);
      if (sx < static_cast<float>(ix)) --ix;
      int iy = static_cast<int>(sy);
      if (sy < static_cast<float>(iy)) --iy;
      const float we = sx - static_cast<float>(ix);  // distance to west
      const float e = 1.0f - we;
      const float n = sy - static_cast<float>(iy);
      const float so = 1.0f - n;
      const float nw = so * e, ne = so * we, sw = n * e, se = n * we;
      // The four neighbours as lanes R, G, B and the fill's mask channel
      // (1 inside the image), 0 outside the image (zero padding).
      float v[4][4];
      const ptrdiff_t at = iy * src_row + ix * 3;
      if (ix >= 0 && ix + 1 < w && iy >= 0 && iy + 1 < h) {
        const uint8_t* p = s.src + at;
        const uint8_t* q = p + src_row;
        for (int c = 0; c < 3; ++c) {
          v[0][c] = p[c];
          v[1][c] = p[c + 3];
          v[2][c] = q[c];
          v[3][c] = q[c + 3];
        }
        v[0][3] = v[1][3] = v[2][3] = v[3][3] = 1.0f;
      } else {
        const bool west_in = ix >= 0 && ix < w;
        const bool east_in = ix + 1 >= 0 && ix + 1 < w;
        const bool north_in = iy >= 0 && iy < h;
        const bool south_in = iy + 1 >= 0 && iy + 1 < h;
        const bool in[4] = {north_in && west_in, north_in && east_in,
                            south_in && west_in, south_in && east_in};
        const ptrdiff_t corner[4] = {at, at + 3, at + src_row,
                                     at + src_row + 3};
        for (int k = 0; k < 4; ++k) {
          for (int c = 0; c < 3; ++c) {
            v[k][c] = in[k] ? s.src[corner[k] + c] : 0.0f;
          }
          v[k][3] = in[k] ? 1.0f : 0.0f;
        }
      }
      // PyTorch's vectorised kernel sums nw, ne, sw, se with fused
      // multiply-adds.
      float sum[4];
      for (int c = 0; c < 4; ++c) {
        sum[c] = Fma(v[3][c], se, Fma(v[2][c], sw, Fma(v[1][c], ne,
                                                        v[0][c] * nw)));
      }
      const float mask = sum[3];
      for (int c = 0; c < 3; ++c) {
        float value = sum[c];
        if (blend_fill) {
          // img * mask + (1.0 - mask) * fill_img, one tensor op at a time.
          const float kept = value * mask;
          const float filled = (1.0f - mask) * fill_f[c];
          value = kept + filled;
        }
        out[c] = ToByte(RoundHalfEven(value));
      }
    }
  }
}

}  // namespace

void Affine(Image image, const AffineParams& params,
            std::vector<uint8_t>* scratch) {
  if (image.width <= 0 || image.height <= 0) return;
  const Grid grid = MakeGrid(params, image.width, image.height);
  const Scratch s = PrepareScratch(image, grid, scratch);
  const std::array<uint8_t, 3> fill =
      params.fill_none ? std::array<uint8_t, 3>{0, 0, 0} : params.fill;
  if (params.interpolation == Interpolation::kBilinear) {
    AffineBilinear(image, grid, s, fill, /*blend_fill=*/!params.fill_none);
  } else {
    // With nearest, fill=None (zero padding) and a fill of black agree.
    AffineNearest(image, grid, s, fill);
  }
}

void Rotate(Image image, float angle, Interpolation interpolation,
            std::array<uint8_t, 3> fill, std::vector<uint8_t>* scratch) {
  AffineParams params;
  // F.rotate's matrix is F.affine's with the angle negated (rotate turns
  // counter-clockwise, affine clockwise), both about the image centre.
  params.angle = -angle;
  params.interpolation = interpolation;
  params.fill = fill;
  Affine(image, params, scratch);
}

void VerticalFlip(Image image) {
  const size_t row_bytes = static_cast<size_t>(image.width) * 3;
  for (int top = 0, bottom = image.height - 1; top < bottom; ++top, --bottom) {
    std::swap_ranges(image.row(top), image.row(top) + row_bytes,
                     image.row(bottom));
  }
}

}  // namespace batchd::server::augment
