// The colour and histogram ops of torchvision's augmentation policies and
// of ColorJitter, RandomGrayscale, GaussianBlur and friends, on uint8 RGB
// images in place. Each is defined exactly as torchvision 0.14's
// `torchvision.transforms.functional` defines it for a uint8 tensor
// (functional_tensor.py), the reference every parity test compares with:
// float32 arithmetic where torchvision computes in float32, truncation
// where it casts float to uint8 with `.to(torch.uint8)`, its clamps.
//
// The lookup-table ops (Posterize, Solarize, Invert, Equalize,
// Autocontrast) match torchvision bit for bit; the others within the
// tolerance docs/augment.md states, measured on photographs.
//
// Thread-compatible: functions with a `scratch` argument use it as
// temporary memory; give each thread its own.
#ifndef BATCHD_SERVER_AUGMENT_COLOR_OPS_H_
#define BATCHD_SERVER_AUGMENT_COLOR_OPS_H_

#include <cstdint>
#include <vector>

#include "server/augment/image.h"

namespace batchd::server::augment {

// F.adjust_brightness: _blend(img, zeros, factor). REQUIRES: factor >= 0.
void AdjustBrightness(Image image, float factor);

// F.adjust_contrast: _blend(img, mean of rgb_to_grayscale(img) as float32,
// factor). REQUIRES: factor >= 0.
void AdjustContrast(Image image, float factor);

// F.adjust_saturation ("Color" in the policies): _blend(img,
// rgb_to_grayscale(img), factor). REQUIRES: factor >= 0.
void AdjustSaturation(Image image, float factor);

// F.adjust_hue: RGB -> HSV in float32, hue shifted by `hue_factor` (in
// [-0.5, 0.5], a fraction of the colour wheel), back to RGB, * 255 and
// truncated.
void AdjustHue(Image image, float hue_factor);

// F.adjust_sharpness: _blend(img, the 3x3 smoothing kernel
// [[1,1,1],[1,5,1],[1,1,1]]/13 applied to the interior (the border pixels
// kept), factor). REQUIRES: factor >= 0.
void AdjustSharpness(Image image, float factor, std::vector<uint8_t>* scratch);

// F.posterize: keeps the top `bits` bits of each channel. 0 <= bits <= 8.
void Posterize(Image image, int bits);

// F.solarize: inverts every channel value >= `threshold` (0..256; 256
// inverts nothing).
void Solarize(Image image, int threshold);

// F.invert: 255 - value.
void Invert(Image image);

// F.autocontrast: per channel, maps [min, max] to [0, 255] (a channel with
// min == max is kept).
void Autocontrast(Image image);

// F.equalize: per channel, torchvision's _scale_channel histogram
// equalisation (PIL's ImageOps.equalize).
void Equalize(Image image);

// F.rgb_to_grayscale(img, num_output_channels=3): every channel set to
// (0.2989 r + 0.587 g + 0.114 b) truncated.
void Grayscale(Image image);

// F.gaussian_blur: separable Gaussian of `kernel_x` x `kernel_y` taps (odd,
// >= 1) and sigmas > 0, reflect padding, the float32 result rounded as
// torchvision's conv2d path rounds it for uint8.
void GaussianBlur(Image image, int kernel_x, int kernel_y, float sigma_x,
                  float sigma_y, std::vector<float>* scratch);

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_COLOR_OPS_H_
