"""A dataset's images as the daemon finds them
(server/dataset/dataset_loaders.cc, Dataset::LoadImageFolder), for the
benchmarks and tests that count or list them.

An ImageFolder root holds one directory per class (sorted names, hidden ones
skipped); each class's images are the regular files under its directory,
recursively and following symlinks, whose extension is one of
IMAGE_EXTENSIONS in any case (photo.JPEG, b.Png); hidden files and
directories are skipped, and files directly under the root are not samples.

    from batchd_testing.datasets import count_images
    count_images("data/imagenet/train")   # ImageNet's *.JPEG count too
"""
import os

#: The extensions the daemon takes as images, lower case
#: (HasImageExtension in server/dataset/dataset_loaders.cc).
IMAGE_EXTENSIONS = frozenset((
    ".jpg", ".jpeg", ".png", ".gif", ".bmp", ".ppm", ".pgm", ".tif",
    ".tiff", ".webp"))


def is_image_name(file_name):
    """Whether the daemon takes a file of this name as an image: its
    extension (from the last dot), lower-cased, is in IMAGE_EXTENSIONS."""
    _, extension = os.path.splitext(file_name)
    return extension.lower() in IMAGE_EXTENSIONS


def class_names(root):
    """The sorted names of `root`'s class directories (not hidden)."""
    return sorted(entry.name for entry in os.scandir(root)
                  if not entry.name.startswith(".") and entry.is_dir())


def _collect(directory, visited, images):
    """Appends (directory, file name) of each image under `directory`,
    skipping directories already in `visited`."""
    st = os.stat(directory)
    if (st.st_dev, st.st_ino) in visited:
        return  # a symlink cycle, or a second link to it
    visited.add((st.st_dev, st.st_ino))
    subdirectories = []
    for entry in os.scandir(directory):
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir():
                subdirectories.append(entry.path)
            elif entry.is_file() and is_image_name(entry.name):
                images.append((directory, entry.name))
        except OSError:
            continue  # a broken symlink
    for subdirectory in subdirectories:
        _collect(subdirectory, visited, images)


def image_files(root):
    """[(path, label)] of the ImageFolder at `root`, as the daemon serves
    it: labels index class_names(root)."""
    root_stat = os.stat(root)
    samples = []
    for label, name in enumerate(class_names(root)):
        # Per class, so two classes may link to the same directory.
        visited = {(root_stat.st_dev, root_stat.st_ino)}
        images = []
        _collect(os.path.join(root, name), visited, images)
        # The daemon's order: by (directory, file name).
        samples += [(os.path.join(directory, file_name), label)
                    for directory, file_name in sorted(images)]
    return samples


def count_images(root):
    """How many samples the daemon serves from the ImageFolder at `root`."""
    return len(image_files(root))


if __name__ == "__main__":
    # For shell scripts: prints the count of the ImageFolder at argv[1]
    # (testing/shell/batchd_daemon.sh's batchd_count_images).
    import sys
    print(count_images(sys.argv[1]))
