#!/usr/bin/env bash
# Writes the fuzz targets' seed corpora from the project's own tools:
#   fuzz/make_seeds.sh BUILD_DIR OUT_DIR
# OUT_DIR/<target>/ gets, per target:
#   decode          JPEGs from make_dataset (and re-encoded by batchd-prep),
#                   WebPs (lossy, lossless, alpha) made from them with
#                   python3-pil and an HTML page, each behind 8 bytes of
#                   crop parameters;
#   tar_index       WebDataset shards written by batchd-prep;
#   dataset_config  --dataset flags, DaemonConfig text and list files;
#   plan            Plan protos (train, eval, sharded) encoded by protoc;
#   receive         scripts of the fake daemon (serve in order, reversed,
#                   forged headers and chunks).
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; fi
build=$1 out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/batchd-fuzz-seeds.XXXXXX)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"/{decode,tar_index,dataset_config,plan,receive}

"$build/tools/make_dataset" --out "$work/images" --images 6 --classes 2 \
  --seed 3 >/dev/null
"$build/tools/batchd-prep" --input "$work/images" --out "$work/shards" \
  --shard_size 2 --max_side 64 >/dev/null
# Whole small JPEGs (batchd-prep re-encoded them at 64 px) and the heads
# of two full-size ones: small seeds fuzz faster.
mkdir -p "$work/members"
for shard in "$work"/shards/*.tar; do tar -xf "$shard" -C "$work/members"; done
n=0
for image in $(find "$work/members" -name '*.jpg' | sort) \
             $(find "$work/images" -name '*.jpg' | sort | head -2); do
  printf '\x20\x40\xc0\xa0\x10\x18\x01\x00' > "$out/decode/seed-$n"
  head -c 24576 "$image" >> "$out/decode/seed-$n"
  n=$((n + 1))
done
n=0
for shard in "$work"/shards/*.tar; do
  cp "$shard" "$out/tar_index/seed-$n.tar"
  n=$((n + 1))
done
# WebP seeds, made with Debian's python3-pil from the first images: lossy,
# lossless, and with alpha; small, so that they fuzz fast. And an HTML page
# under the same crop parameters (routed by content, never decoded).
/usr/bin/python3 - "$work/images" "$out/decode" <<'PY'
import glob, io, sys
from PIL import Image
images = sorted(glob.glob(sys.argv[1] + "/*/*.jpg"))[:2]
header = bytes([0x20, 0x40, 0xC0, 0xA0, 0x10, 0x18, 0x01, 0x00])
for i, path in enumerate(images):
    image = Image.open(path).convert("RGB")
    image.thumbnail((64, 64))
    rgba = image.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(image.size))
    for name, im, options in (("lossy", image, dict(quality=70)),
                              ("lossless", image, dict(lossless=True)),
                              ("alpha", rgba, dict(quality=70, exact=True))):
        data = io.BytesIO()
        im.save(data, "WEBP", **options)
        with open(f"{sys.argv[2]}/webp-{name}-{i}", "wb") as f:
            f.write(header + data.getvalue())
with open(f"{sys.argv[2]}/html", "wb") as f:
    f.write(header + b"<!DOCTYPE html><html><body>404</body></html>")
PY

cfg=$out/dataset_config
printf '\x00imagenet=/data/imagenet/train' > "$cfg/flag"
printf '\x00bad name=/x' > "$cfg/flag-bad"
printf '\x01datasets { name: "a" path: "/data/a" }\ndatasets { name: "b" path: "/data/b.txt" format: LIST_FILE root: "/data" }\n' > "$cfg/config"
printf '\x02a/1.jpg 0\nb/2.jpg 1\n# comment\n\nc/3.jpg 2\n' > "$cfg/list"
printf '\x01datasets { name: "w" path: "/data/w.tar" image_extensions: "webp;jpg;png" }\n' > "$cfg/config-image-extensions"

plan=$out/plan
encode() {
  protoc --proto_path="$src/proto" --encode=batchd.v1.Plan \
    batchd/v1/data.proto > "$plan/$1"
}
echo 'dataset: "small" batch_size: 8 seed: 3 shuffle: true pipeline { train { size: 32 } }' | encode train
echo 'dataset: "small" batch_size: 5 drop_last: true rank: 1 world_size: 3 pipeline { eval { size: 24 resize_shorter: 28 } layout: LAYOUT_NCHW }' | encode eval-sharded
echo 'dataset: "sharded" batch_size: 4 seed: 9 shuffle: true shuffle_window_shards: 3 world_size: 2 rank: 1 pipeline { train { size: 16 } }' | encode shard-window
echo 'dataset: "small" batch_size: 6 seed: 5 pipeline { train { size: 32 } interpolation: INTERPOLATION_BICUBIC augment { trivial_augment_wide { } } augment { rand_augment { num_ops: 3 magnitude_std: 2 fill: [1, 2, 3] } } augment { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 hue: 0.1 p: 0.8 } } augment { random_affine { degrees_min: -10 degrees_max: 10 translate_x: 0.1 translate_y: 0.1 scale_min: 0.9 scale_max: 1.1 shear_x_min: -5 shear_x_max: 5 shear_y_min: 0 shear_y_max: 3 } } }' | encode augment-policies
echo 'dataset: "small" batch_size: 7 pipeline { eval { size: 24 } layout: LAYOUT_NCHW augment { auto_augment { policy: POLICY_SVHN interpolation: INTERPOLATION_BILINEAR } } augment { aug_mix { severity: 10 mixture_width: 4 alpha: 0.5 all_ops: false } } augment { gaussian_blur { kernel_size: 5 kernel_size_y: 3 } } augment { random_grayscale { p: 0.5 } } augment { random_solarize { } } augment { random_posterize { bits: 2 } } augment { random_autocontrast { } } augment { random_equalize { } } augment { random_invert { } } augment { random_vertical_flip { } } augment { random_rotation { degrees_min: -30 degrees_max: 30 } } }' | encode augment-ops
echo 'dataset: "small" batch_size: 4 pipeline { train { size: 16 } augment { rand_augment { magnitude: 40 } } }' | encode augment-refused
echo 'dataset: "one" batch_size: 64 world_size: 4 rank: 3 pipeline { train { size: 16 scale_min: 0.5 scale_max: 1 ratio_min: 0.75 ratio_max: 1.33 flip_probability: 1 } }' | encode tiny

rcv=$out/receive
# Two bytes per step: op, argument (fuzz_receive.cc). 0: read requests,
# 1: send a batch, 2: a forged header, 3: a forged chunk, 4: reject,
# 6: end the stream.
printf '\x00\x00\x01\x00\x01\x00\x01\x00\x00\x00\x01\x00\x01\x00\x01\x00\x00\x00\x01\x00\x01\x00\x01\x00' > "$rcv/in-order"
printf '\x00\x00\x01\x02\x01\x01\x01\x00\x00\x00\x01\x02\x01\x01\x01\x00' > "$rcv/reversed"
printf '\x00\x00\x02\x00\x01\x05\x01\x00' > "$rcv/forged-header"
printf '\x00\x00\x03\x00\x01\x03\x02\x41\x01\x00' > "$rcv/forged-chunk"
printf '\x00\x00\x04\x0e\x01\x00\x06\x00' > "$rcv/reject-then-end"
echo "make_seeds: wrote $(find "$out" -type f | wc -l) seeds to $out"
