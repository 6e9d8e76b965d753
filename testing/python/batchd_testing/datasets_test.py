"""batchd_testing.datasets finds the images the daemon would serve."""
import os

from batchd_testing.datasets import (class_names, count_images, image_files,
                                     is_image_name)


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not decoded here")


def imagenet_like(root):
    """Two classes with ImageNet's *.JPEG, lower-case and PNG files, a
    nested directory, and files the daemon ignores."""
    for name in ("n01440764/n01440764_10026.JPEG",
                 "n01440764/n01440764_10027.JPEG",
                 "n01440764/extra/b.jpg",
                 "n01443537/a.png",
                 "n01443537/c.Png",
                 "n01443537/d.jpeg",
                 "n01443537/notes.txt",        # not an image
                 "n01443537/.hidden.JPEG",     # hidden
                 "n01443537/.cache/e.jpg",     # in a hidden directory
                 "n01443537/JPEG",             # no extension
                 "loose.JPEG",                 # not in a class directory
                 ".hidden_class/f.jpg"):       # a hidden class
        touch(root / name)
    return root


def test_extensions_in_any_case():
    for name in ("a.jpg", "a.JPG", "a.JPEG", "a.jpeg", "a.png", "a.PNG",
                 "a.webp", "a.tiff", "x.tar.jpg"):
        assert is_image_name(name), name
    for name in ("a.txt", "a.jpg.txt", "jpg", "a.", "a.tar"):
        assert not is_image_name(name), name


def test_counts_an_imagenet_style_tree(tmp_path):
    root = imagenet_like(tmp_path / "train")
    assert class_names(root) == ["n01440764", "n01443537"]
    assert count_images(root) == 6


def test_lists_in_the_daemons_order(tmp_path):
    root = imagenet_like(tmp_path / "train")
    listed = [(os.path.relpath(path, root), label)
              for path, label in image_files(root)]
    assert listed == [("n01440764/n01440764_10026.JPEG", 0),
                      ("n01440764/n01440764_10027.JPEG", 0),
                      ("n01440764/extra/b.jpg", 0),
                      ("n01443537/a.png", 1),
                      ("n01443537/c.Png", 1),
                      ("n01443537/d.jpeg", 1)]


def test_follows_symlinks_once(tmp_path):
    root = tmp_path / "train"
    touch(root / "cls" / "a.JPEG")
    os.symlink(root / "cls", root / "cls" / "loop")  # a cycle
    assert count_images(root) == 1


def test_empty_tree_counts_zero(tmp_path):
    (tmp_path / "train" / "cls").mkdir(parents=True)
    assert count_images(tmp_path / "train") == 0
