#!/usr/bin/python3
"""Writes WebP test images and PIL's decode of each, for the WebP decoder's
tests (server/decode/webp_decoder_test.cc) and the WebP benchmark.

  /usr/bin/python3 testing/make_webp_cases.py OUT_DIR

For each case NAME it writes OUT_DIR/NAME.webp, OUT_DIR/NAME.rgb (what
PIL decodes, .convert("RGB"): raw row-major RGB bytes) and a line
"NAME WIDTH HEIGHT LOSSLESS" in OUT_DIR/cases.txt. The pictures are real
photographs (Debian's python3-skimage sample images), some cut to odd
sizes; the alpha cases carry a semi-transparent gradient, saved with
exact=True so that the colour under it is kept as given.
"""
import os
import sys

import numpy as np
from PIL import Image
import skimage.data


def alpha_ramp(height, width):
    """0..255 across, with a fully transparent and an opaque band."""
    ramp = np.tile(np.linspace(0, 255, width).astype(np.uint8), (height, 1))
    ramp[: height // 8] = 0
    ramp[-height // 8:] = 255
    return ramp


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    chelsea = skimage.data.chelsea()            # 300 x 451
    coffee = skimage.data.coffee()[:257, :333]  # odd sizes
    astronaut = skimage.data.astronaut()[:301, :]
    rgba = np.dstack([astronaut, alpha_ramp(*astronaut.shape[:2])])
    cases = [
        ("lossy", Image.fromarray(chelsea), dict(quality=80)),
        ("lossy_odd", Image.fromarray(coffee), dict(quality=90, method=6)),
        ("lossless", Image.fromarray(coffee), dict(lossless=True)),
        ("alpha_lossless", Image.fromarray(rgba, "RGBA"),
         dict(lossless=True, exact=True)),
        ("alpha_lossy", Image.fromarray(rgba, "RGBA"),
         dict(quality=80, exact=True)),
    ]
    lines = []
    for name, image, options in cases:
        path = os.path.join(out, name + ".webp")
        image.save(path, "WEBP", **options)
        with Image.open(path) as decoded:
            rgb = decoded.convert("RGB")
        with open(os.path.join(out, name + ".rgb"), "wb") as f:
            f.write(rgb.tobytes())
        lines.append(f"{name} {rgb.width} {rgb.height} "
                     f"{1 if options.get('lossless') else 0}\n")
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
