// Image: an RGB image the augmentation ops work on in place, 3 interleaved
// uint8 bytes per pixel (HWC), rows `stride` bytes apart. Not owned.
//
// The ops run on the crop-sized output image of a sample (after the crop's
// resize and flip), never on the full decoded image.
#ifndef BATCHD_SERVER_AUGMENT_IMAGE_H_
#define BATCHD_SERVER_AUGMENT_IMAGE_H_

#include <cstddef>
#include <cstdint>

namespace batchd::server::augment {

struct Image {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  ptrdiff_t stride = 0;  // bytes between row starts, >= 3 * width

  uint8_t* row(int y) const { return data + y * stride; }
};

// Interpolation of the geometric ops and of the crop's resize, named as
// torchvision.transforms.InterpolationMode.
enum class Interpolation { kNearest, kBilinear, kBicubic };

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_IMAGE_H_
