#!/usr/bin/env bash
# pip install of the package into a fresh venv (python/pyproject.toml),
# offline, with Debian's setuptools and torch; then `import batchd` and one
# pytest file against the installed package, not the build tree.
#
# Usage: pip_install_test.sh SOURCE_DIR BUILD_DIR
# BUILD_DIR (a configured CMake build) is reused through
# BATCHD_CMAKE_BUILD_DIR, so pip builds only the module's target there.
# The pytest file takes its daemon binaries from BATCHD_DAEMON,
# BATCHD_MAKE_DATASET and BATCHD_CLIENT, as ctest sets them.
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
python=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d -t batchd-pip.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$python" -m venv --system-site-packages "$work/venv"
start=$(date +%s)
BATCHD_CMAKE_BUILD_DIR="$build_dir" BATCHD_SETUP_BUILD_BASE="$work/setup" \
  "$work/venv/bin/pip" install --no-build-isolation --no-index \
  --disable-pip-version-check -q "$source_dir/python"
echo "pip install: $(( $(date +%s) - start )) s"

# From a directory where neither the source nor the build tree is on the
# path: the package must be the venv's.
cd "$work"
"$work/venv/bin/python" - "$work/venv" <<'PY'
import os, sys
import batchd, batchd._native
venv = os.path.realpath(sys.argv[1])
for module in (batchd, batchd._native):
    path = os.path.realpath(module.__file__)
    if not path.startswith(venv + os.sep):
        sys.exit(f"{module.__name__} comes from {path}, not the venv")
print("import batchd:", batchd.__file__)
PY
# The test file's directory joins sys.path (python/tests), not python/:
# `import batchd` there finds the venv's package too.
env -u PYTHONPATH "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$source_dir/python/tests/test_timeline.py"
