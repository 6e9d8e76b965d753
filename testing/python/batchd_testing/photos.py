"""An ImageFolder of real photographs for the benchmarks: cuts of
python3-skimage's sample photographs (PHOTOS), each a random 400-640 x
300-480 window of a photo upscaled 1.0-1.6x (so that every cut is a real
part of it), at quality 60-95, in 10 classes; the same files for the same
arguments.

    from batchd_testing.photos import photo_image_folder
    photo_image_folder("data/bench-photos", 512, format="JPEG")
"""
import os
import random

PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "cat",
          "hubble_deep_field", "immunohistochemistry", "retina"]

_EXTENSIONS = {"JPEG": "jpg", "WEBP": "webp"}


def photo_image_folder(out, images, *, format, mirror=False):
    """Writes `images` cuts under `out` in `format` ("JPEG" or "WEBP"),
    each mirrored with probability 1/2 when `mirror`; does nothing when
    `out` was completed before."""
    done = os.path.join(out, ".complete")
    if os.path.exists(done):
        return
    import numpy as np
    import skimage.data
    from PIL import Image
    rng = random.Random(1)
    sources = []
    for name in PHOTOS:
        pixels = getattr(skimage.data, name)()
        if pixels.ndim == 2:
            pixels = np.stack([pixels] * 3, axis=-1)
        sources.append(Image.fromarray(pixels[..., :3]).convert("RGB"))
    for i in range(images):
        source = sources[i % len(sources)]
        scale = rng.uniform(1.0, 1.6)
        big = source.resize((max(700, int(source.width * scale)),
                             max(520, int(source.height * scale))),
                            Image.BICUBIC)
        width, height = rng.randint(400, 640), rng.randint(300, 480)
        x = rng.randint(0, big.width - width)
        y = rng.randint(0, big.height - height)
        image = big.crop((x, y, x + width, y + height))
        if mirror and rng.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        directory = os.path.join(out, f"class_{i % 10:03d}")
        os.makedirs(directory, exist_ok=True)
        image.save(os.path.join(directory,
                                f"img_{i:06d}.{_EXTENSIONS[format]}"),
                   format, quality=rng.randint(60, 95))
    open(done, "w").close()
