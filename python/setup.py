"""Builds the batchd package for pip: the pure-Python package in batchd/
and its native module batchd._native, built by the project's CMake build
(the repository root is this directory's parent). See pyproject.toml.

Environment:
  BATCHD_CMAKE_BUILD_DIR  a CMake build directory to use (configured here
                          if it has no CMakeCache.txt); by default one
                          under setuptools' build_temp. Only the module's
                          target (and what it links) is built.
  BATCHD_BUILD_JOBS       parallel compile jobs (default: the CPUs).
  BATCHD_SETUP_BUILD_BASE where setuptools keeps its build and egg-info
                          directories (default: build/ and . here).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    import wheel  # noqa: F401 - pip's build needs bdist_wheel
except ImportError:
    sys.exit("building batchd needs the `wheel` package in this interpreter "
             f"({sys.executable}): on Debian 12 create the venv from "
             "/usr/bin/python3 with --system-site-packages, with "
             "python3-wheel installed (docs/python.md)")

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def project_version():
    """The CMake project's VERSION: one version for daemon and package."""
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*batchd\s+VERSION\s+([0-9.]+)", text)
    if not match:
        raise RuntimeError(f"no project VERSION in {ROOT / 'CMakeLists.txt'}")
    return match.group(1)


class CMakeExtension(Extension):
    """An extension built by the CMake target `target`."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not (ROOT / "CMakeLists.txt").exists():
            raise RuntimeError(f"{ROOT} is not the batchd source tree: "
                               "install from a checkout (pip install "
                               "./python)")
        build_dir = pathlib.Path(
            os.environ.get("BATCHD_CMAKE_BUILD_DIR") or
            pathlib.Path(self.build_temp).resolve() / "cmake").resolve()
        jobs = os.environ.get("BATCHD_BUILD_JOBS") or str(os.cpu_count() or 1)
        if not (build_dir / "CMakeCache.txt").exists():
            configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir),
                         "-DCMAKE_BUILD_TYPE=Release",
                         f"-DPython3_EXECUTABLE={sys.executable}",
                         "-DBATCHD_BENCH=OFF"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            if shutil.which("ccache"):
                configure += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache",
                              "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
            subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target",
                        ext.target, "-j", jobs], check=True)
        built = sorted((build_dir / "python" / "batchd").glob("_native*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _native*.so in "
                               f"{build_dir / 'python' / 'batchd'}, found "
                               f"{[str(b) for b in built]} (is pybind11-dev "
                               "installed? see the CMake output)")
        destination = pathlib.Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], destination)


build_base = os.environ.get("BATCHD_SETUP_BUILD_BASE")
options = {}
if build_base:
    options = {"build": {"build_base": os.path.join(build_base, "build")},
               "egg_info": {"egg_base": build_base}}

setup(
    version=project_version(),
    ext_modules=[CMakeExtension("batchd._native", target="batchd_native")],
    cmdclass={"build_ext": CMakeBuild},
    options=options,
)
