#!/usr/bin/env python3
"""Fails on an #include that crosses the project's layering.

The rooms and the edges between them are written once, in docs/layout.md, as a fenced block under "Allowed dependencies":

    server    -> common proto
    client    -> common proto

A file's room is the first directory of its path (server/service/x.cc is in
"server"); an include's room is the first directory of the included path
("batchd/v1/..." is the generated wire API, room "proto").

Inside server/ and client/, a second block, "Sub-room order", orders the
sub-rooms the same way:

    server/pipeline -> storage dataset decode sched metrics plan

A file of a sub-room (server/pipeline/x.cc) may include its own sub-room and
those listed; the room's top-level files (server/main.cc, server_lib.*) are
its composition root and may include any of its sub-rooms, but no sub-room
includes them; a sub-room missing from the block is itself a violation. Anything else
(absl/, grpcpp/, gtest/, system headers) is outside the project and allowed,
except gRPC's implementation headers (grpcpp/impl/) and grpc::internal, which
are not a public API. Unit tests and their helpers (*_test.cc,
*_test_util.h) may also include testing/.

Usage: check_includes.py [REPO_ROOT]        exit 1 and one line per violation
       check_includes.py --self-test         shows that a forbidden include
                                             fails the check
"""
import os
import re
import sys
import tempfile

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]')
SKIP_DIRS = {".git", "node_modules"}


def read_edges(readme_path, heading="Allowed dependencies", required=True):
    """Name -> set of names it may include, from the fenced block after
    `heading` in docs/layout.md: the rooms' block ("Allowed dependencies")
    or the sub-rooms' ("Sub-room order", where 'server/pipeline' maps to
    sibling sub-rooms). An absent optional block is empty."""
    text = open(readme_path, encoding="utf-8").read()
    match = re.search(re.escape(heading) + r".*?```[a-z]*\n(.*?)```", text,
                      re.S)
    if not match:
        if required:
            sys.exit(f"{readme_path}: no fenced block after '{heading}' "
                     "(the Layout section must keep it)")
        return {}
    edges = {}
    for line in match.group(1).splitlines():
        if "->" not in line:
            continue
        name, targets = line.split("->", 1)
        targets = re.sub(r"\(.*?\)", "", targets).split()
        edges[name.strip()] = set(targets)
    return edges


def sub_room_violation(rel, included, sub_edges):
    """Why `rel` may not include `included` by the sub-room order, or None."""
    parts, target = rel.split(os.sep), included.split("/")
    room = parts[0]
    if target[0] != room or not any(k.startswith(room + "/")
                                    for k in sub_edges):
        return None
    if len(parts) == 2:
        return None  # the room's composition root
    sub = f"{room}/{parts[1]}"
    if sub not in sub_edges:
        return (f"{sub}/ is not in docs/layout.md's sub-room order; add it "
                "with the sub-rooms it may include")
    if len(target) == 2:
        return (f"{sub}/ may not include {included}: {room}/'s top-level "
                "files are its composition root")
    if target[1] == parts[1] or target[1] in sub_edges[sub]:
        return None
    return (f"{sub}/ may not include {included} ({sub} -> "
            f"{' '.join(sorted(sub_edges[sub])) or 'nothing'}; see "
            "docs/layout.md's sub-room order)")


def room_of_include(path, rooms):
    if path.startswith("batchd/v1/"):
        return "proto"
    first = path.split("/", 1)[0]
    return first if "/" in path and first in rooms else None


def violations(root):
    edges = read_edges(os.path.join(root, "docs", "layout.md"))
    sub_edges = read_edges(os.path.join(root, "docs", "layout.md"),
                           heading="Sub-room order", required=False)
    rooms = set(edges)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and
                       not (rel_dir == "." and d.startswith("build"))]
        for name in sorted(filenames):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name))
            room = rel.split(os.sep, 1)[0]
            if room not in rooms:
                continue
            allowed = edges[room] | {room}
            if name.endswith(("_test.cc", "_test_util.h")):
                allowed = allowed | {"testing"}
            with open(os.path.join(dirpath, name), encoding="utf-8",
                      errors="replace") as f:
                for number, line in enumerate(f, 1):
                    if "grpc::internal::" in line:
                        found.append(f"{rel}:{number}: uses grpc::internal, "
                                     "which is not gRPC's public API")
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    included = m.group(1)
                    if included.startswith("grpcpp/impl/"):
                        found.append(f"{rel}:{number}: includes {included}, "
                                     "a gRPC implementation header")
                        continue
                    why = sub_room_violation(rel, included, sub_edges)
                    if why is not None:
                        found.append(f"{rel}:{number}: {why}")
                        continue
                    target = room_of_include(included, rooms)
                    if target is not None and target not in allowed:
                        found.append(
                            f"{rel}:{number}: {room}/ may not include "
                            f"{included} ({room} -> "
                            f"{' '.join(sorted(edges[room])) or 'nothing'}; "
                            "see docs/layout.md)")
    return found


def self_test():
    """A client file that includes a server header, and a sub-room that
    includes one above it, must fail the check."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "layout.md"), "w") as f:
            f.write("Allowed dependencies\n```\nproto ->\ncommon -> proto\n"
                    "server -> common proto\nclient -> common proto\n```\n"
                    "Sub-room order\n```\nserver/storage ->\n"
                    "server/pipeline -> storage\n```\n")
        for rel, body in {
            "server/pipeline/pipeline.h": '#include "common/random.h"\n'
                                          '#include "server/storage/s.h"\n',
            "server/main.cc": '#include "server/pipeline/pipeline.h"\n',
            "server/storage/bad.cc": '#include "server/pipeline/pipeline.h"\n',
            "client/ok.cc": '#include "client/ok.h"\n'
                            '#include "batchd/v1/data.pb.h"\n',
            "client/bad.cc": '#include "server/pipeline/pipeline.h"\n',
        }.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)),
                        exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(body)
        found = violations(root)
    expected = ["client/bad.cc:1: client/ may not include "
                "server/pipeline/pipeline.h",
                "server/storage/bad.cc:1: server/storage/ may not include "
                "server/pipeline/pipeline.h"]
    if len(found) != 2 or not all(line.startswith(prefix) for line, prefix
                                  in zip(sorted(found), expected)):
        print("self-test: expected exactly", expected, "got", found)
        return 1
    for line in sorted(found):
        print("self-test: a forbidden include fails:", line)
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    found = violations(os.path.normpath(root))
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} include(s) break the layering")
        return 1
    print("layering: every include follows docs/layout.md's allowed dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
