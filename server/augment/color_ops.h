// The colour and histogram ops of torchvision's augmentation policies and
// of ColorJitter, RandomGrayscale, GaussianBlur and friends, on uint8 RGB
// images in place. Each is defined exactly as torchvision 0.14's
// `torchvision.transforms.functional` defines it for a uint8 tensor
// (functional_tensor.py), the reference every parity test compares with:
// float32 arithmetic where torchvision computes in float32, truncation
// where it casts float to uint8 with `.to(torch.uint8)`, its clamps.
//
// Every op but GaussianBlur matches torchvision bit for bit on the parity
// test's photographs and parameters (tests/augment/test_color_parity.py:
// the policies' magnitude bins, ColorJitter's draws). GaussianBlur differs
// by at most 1 on about 2e-5 of the values (see below). AdjustContrast's
// mean is exact, as torch's float32 sum is, up to 65,793 pixels.
//
// Thread-compatible: functions with a `scratch` argument use it as
// temporary memory; give each thread its own. Once a scratch vector has
// grown to the largest image, no call allocates.
#ifndef BATCHD_SERVER_AUGMENT_COLOR_OPS_H_
#define BATCHD_SERVER_AUGMENT_COLOR_OPS_H_

#include <cstdint>
#include <vector>

#include "server/augment/image.h"

namespace batchd::server::augment {

// The blend ops (brightness, contrast, saturation, sharpness) compute
// torchvision's `_blend(img1, img2, factor)`, i.e.
// `(factor * img1 + (1.0 - factor) * img2).clamp(0, 255).to(uint8)` with
// both weights cast to float32. `factor` is a double because torchvision's
// is a Python float: the policies pass `1.0 + magnitude` computed in
// double, and `1.0 - factor` is taken in double before the cast. Pass
// `1.0 + magnitude`, not `1.0f + magnitude`, to match them bit for bit.

// F.adjust_brightness: _blend(img, zeros, factor). REQUIRES: factor >= 0.
void AdjustBrightness(Image image, double factor);

// F.adjust_contrast: _blend(img, mean of rgb_to_grayscale(img) as float32,
// factor). REQUIRES: factor >= 0.
void AdjustContrast(Image image, double factor);

// F.adjust_saturation ("Color" in the policies): _blend(img,
// rgb_to_grayscale(img), factor). REQUIRES: factor >= 0.
void AdjustSaturation(Image image, double factor);

// F.adjust_hue: x / 255 -> HSV in float32, hue shifted by `hue_factor` (in
// [-0.5, 0.5], a fraction of the colour wheel; torch adds it in float32)
// modulo 1, back to RGB, * 255 and truncated.
void AdjustHue(Image image, float hue_factor);

// F.adjust_sharpness: _blend(img, degenerate, factor), where
// `degenerate` is the 3x3 smoothing kernel [[1,1,1],[1,5,1],[1,1,1]]/13
// applied to the interior, rounded, and the image itself on the one-pixel
// border (so border pixels are blended with themselves, which can move
// them by one). Images 2 pixels wide or high or less are left unchanged.
// REQUIRES: factor >= 0.
void AdjustSharpness(Image image, double factor,
                     std::vector<uint8_t>* scratch);

// F.posterize: keeps the top `bits` bits of each channel. 0 <= bits <= 8.
void Posterize(Image image, int bits);

// F.solarize: inverts every channel value >= `threshold`, compared in
// float32 as torch compares a uint8 tensor with a Python float. The
// policies' thresholds are not integers (linspace(255, 0, 31) has 246.5),
// so 246.5 inverts 247..255. A threshold above 255 inverts nothing.
void Solarize(Image image, float threshold);

// F.invert: 255 - value.
void Invert(Image image);

// F.autocontrast: per channel, ((x - min) * scale).clamp(0, 255) truncated,
// with scale = (1 / (max - min)) * 255 in float32 (torch evaluates
// `255.0 / t` as `t.reciprocal() * 255.0`); a channel with min == max is
// kept.
void Autocontrast(Image image);

// F.equalize: per channel, torchvision's _scale_channel histogram
// equalisation (PIL's ImageOps.equalize).
void Equalize(Image image);

// F.rgb_to_grayscale(img, num_output_channels=3): every channel set to
// ((0.2989 r + 0.587 g) + 0.114 b) in float32, truncated.
void Grayscale(Image image);

// F.gaussian_blur: separable Gaussian of `kernel_x` x `kernel_y` taps (odd,
// >= 1; torchvision's kernel_size is [kernel_x, kernel_y]) and sigmas > 0,
// reflect padding, the float32 result rounded half to even (torch.round
// before the uint8 cast). torchvision convolves with the 2-D outer product
// in one pass; the separable passes here sum in another order, so a value
// within float rounding of n + 0.5 may round the other way. torch refuses
// a padding as large as the image; here the reflection simply repeats.
void GaussianBlur(Image image, int kernel_x, int kernel_y, float sigma_x,
                  float sigma_y, std::vector<float>* scratch);

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_COLOR_OPS_H_
