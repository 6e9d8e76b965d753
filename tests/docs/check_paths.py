#!/usr/bin/env python3
"""Fails when the docs name a repository path that does not exist.

Reads README.md, RELIABILITY.md, docs/*.md, the comments of every C++,
CUDA, proto, CMake and shell file (whole-line // or # comments) and all of
every Python file (docstrings included) for words that look like
repository paths (`server/pipeline/pipeline.h`, `client/daemon_set.*`,
`tests/adversarial/`) and checks each against the tree. A path may name a
file, a directory, a glob (`server/decode/crop.*`), or a program built
there (`tools/make_dataset` beside tools/make_dataset.cc, `server/batchd`
from server/CMakeLists.txt). Words with placeholders (`<room>/x.h`) are
skipped, as are paths under build directories and the made-up trees of
the two checkers' self-tests.

Usage: check_paths.py [REPO_ROOT]   exit 1 and one line per stale path
       check_paths.py --self-test    shows that a stale path fails
"""
import glob
import os
import re
import sys
import tempfile

ROOMS = ("bench", "client", "common", "deploy", "docs", "examples", "fuzz",
         "proto", "python", "scripts", "server", "testing", "tests", "tools")
PATH = re.compile(r"(?<![\w./$-])((?:%s)/[\w./*+-]*[\w*/])" % "|".join(ROOMS))
COMMENT = {".h": "//", ".cc": "//", ".cu": "//", ".cuh": "//", ".proto": "//",
           ".txt": "#", ".cmake": "#", ".sh": "#"}
SKIP_DIRS = {".git", "node_modules", "__pycache__"}
# Their self-tests name files of a made-up tree.
SKIP_FILES = {"tests/layering/check_includes.py", "tests/docs/check_paths.py"}


def exists(root, path):
    full = os.path.join(root, path.rstrip("/"))
    if os.path.exists(full) or glob.glob(full):
        return True
    # A program named after its source file (tools/make_dataset), or a
    # target of the directory's CMakeLists.txt (server/batchd).
    if glob.glob(full + ".*"):
        return True
    cmake = os.path.join(os.path.dirname(full), "CMakeLists.txt")
    if os.path.exists(cmake):
        name = re.escape(os.path.basename(full))
        text = open(cmake, encoding="utf-8").read()
        return re.search(r"add_executable\(\s*%s\b|OUTPUT_NAME %s\b" %
                         (name, name), text) is not None
    return False


def doc_files(root):
    for name in ("README.md", "RELIABILITY.md"):
        if os.path.exists(os.path.join(root, name)):
            yield name, None
    for name in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        yield os.path.relpath(name, root), None
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and
                       not (rel_dir == "." and d.startswith("build"))]
        for name in sorted(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel in SKIP_FILES:
                continue
            if name.endswith(".py"):  # docstrings and comments alike
                yield rel, None
                continue
            marker = COMMENT.get(os.path.splitext(name)[1])
            if marker and (not name.endswith(".txt") or
                           name == "CMakeLists.txt"):
                yield rel, marker


def stale_paths(root):
    found = []
    for rel, marker in doc_files(root):
        with open(os.path.join(root, rel), encoding="utf-8",
                  errors="replace") as f:
            for number, line in enumerate(f, 1):
                if marker is not None:
                    at = line.find(marker)
                    if at < 0 or line[:at].strip():
                        continue  # only whole-line comments
                    line = line[at:]
                for match in PATH.finditer(line):
                    path = match.group(1).rstrip(".")
                    before = line[:match.start()]
                    if "<" in path or before.endswith(("build/", "BUILD/")):
                        continue
                    if not exists(root, path):
                        found.append(f"{rel}:{number}: {path} does not exist")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "server", "decode"))
        open(os.path.join(root, "server", "decode", "crop.h"), "w").close()
        with open(os.path.join(root, "docs", "guide.md"), "w") as f:
            f.write("See server/decode/crop.h and server/decode/crop.*; "
                    "server/autoscaler.h moved.\n")
        with open(os.path.join(root, "server", "decode", "x.h"), "w") as f:
            f.write("// Uses server/decode/crop.h.\nint x;  // server/gone.h\n")
        found = stale_paths(root)
    expected = ["docs/guide.md:1: server/autoscaler.h does not exist"]
    if found != expected:
        print("self-test: expected", expected, "got", found)
        return 1
    print("self-test: a stale path fails:", found[0])
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    found = stale_paths(os.path.normpath(root))
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} stale path(s) in the docs and comments")
        return 1
    print("docs: every repository path named in the docs and comments exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
