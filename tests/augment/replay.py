"""Runs batchd's augmentation ops with fixed parameters on numpy images,
through batchd-augment-replay (tools/augment_replay.h), so that the parity
tests can compare them with torchvision's on the same pixels.

    out = replay("adjust_hue", image, factor=0.2)   # image: HxWx3 uint8

The photographs are Debian's python3-skimage sample images (real photos of
several sizes), cropped and resized as a sample's crop would be.
"""
import os
import subprocess
import tempfile

import numpy as np

REPLAY = os.environ.get("BATCHD_AUGMENT_REPLAY", "batchd-augment-replay")


def replay_many(commands):
    """Runs [(op, image, params)] in one process; returns the outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for i, (op, image, params) in enumerate(commands):
            image = np.ascontiguousarray(image, dtype=np.uint8)
            src = os.path.join(tmp, f"{i}.in")
            image.tofile(src)
            words = [f"op={op}", f"in={src}", f"width={image.shape[1]}",
                     f"height={image.shape[0]}",
                     f"out={os.path.join(tmp, f'{i}.out')}"]
            words += [f"{k}={v}" for k, v in params.items()]
            lines.append(" ".join(words))
        done = subprocess.run([REPLAY], input="\n".join(lines) + "\n",
                              capture_output=True, text=True, check=True)
        answers = done.stdout.splitlines()
        assert len(answers) == len(commands), done.stdout + done.stderr
        outputs = []
        for i, ((op, image, params), answer) in enumerate(
                zip(commands, answers)):
            assert answer == "ok", f"{op} {params}: {answer}"
            outputs.append(np.fromfile(os.path.join(tmp, f"{i}.out"),
                                       dtype=np.uint8).reshape(image.shape))
        return outputs


def replay(op, image, **params):
    return replay_many([(op, image, params)])[0]


def photographs(size=224):
    """Real photographs (skimage.data), centre-cropped square and resized
    to `size` with PIL's antialiased bilinear, as HxWx3 uint8 arrays."""
    from PIL import Image
    import skimage.data as data

    names = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry")
    images = []
    for name in names:
        pixels = getattr(data, name)()
        if pixels.ndim == 2:
            pixels = np.stack([pixels] * 3, axis=-1)
        pixels = pixels[..., :3]
        h, w = pixels.shape[:2]
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
        square = Image.fromarray(pixels[top:top + side, left:left + side])
        images.append(np.asarray(square.resize((size, size),
                                               Image.BILINEAR)))
    return images


def to_tensor(image):
    """HxWx3 uint8 numpy -> 3xHxW uint8 torch tensor (torchvision's layout)."""
    import torch
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)


def from_tensor(tensor):
    return tensor.permute(1, 2, 0).contiguous().numpy()


def difference(ours, theirs):
    """(mean absolute difference, maximum) in 0..255 units."""
    d = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    return float(d.mean()), int(d.max())
