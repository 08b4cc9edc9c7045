#!/usr/bin/env python3
"""Fails when a source file includes a header from a floor above its own (docs/design.md).

Usage: check-includes.py REPOSITORY_ROOT     checks src/, include/ and tools/
       check-includes.py --self-test          checks that a made-up violation is caught

Rules, read from the quoted #include lines (angle-bracket includes are other projects'):
  * src/: a file may include headers of its own floor or of a floor below (FLOORS, lowest
    first). Folders that share a floor (nn, data, models) do not include each other.
  * src/dist/backends/: one backend's folder never includes another's; all may use c10d/.
  * the training wing (engine, metrics, handlers) reaches the runtime only through the public
    headers (kindling/...): from src/ it may include common/ and the wing's lower floors.
  * include/kindling/: public headers include only public headers.
"""
import os
import re
import sys
import tempfile

# (folder under the repository, floor); lowest first.
FLOORS = [
    ("src/common", 0),
    ("src/launch", 1),  # the worker's side of launching: who started me, error files
    ("src/supervisor", 2),  # the parent's side: starting and watching worker processes
    ("src/dist/base", 3),  # the runtime's leaf: WorldConfig, engine errors
    ("src/dist/rendezvous", 4),
    ("src/dist/backends", 5),
    ("src/dist", 6),
    ("src/nn", 7),
    ("src/data", 7),
    ("src/models", 7),
    ("src/parallel", 8),  # Parallel: the runtime and the supervisor together
    ("src/engine", 9),
    ("src/metrics", 10),
    ("src/handlers", 11),
    ("tools", 12),
]
TRAINING_WING = ("src/engine", "src/metrics", "src/handlers")
BACKENDS = "src/dist/backends"
SHARED_BACKEND_FOLDER = "c10d"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_ENDINGS = (".h", ".hpp", ".cpp", ".cc", ".h.in")


def folder_of(path):
    """The FLOORS entry a repository-relative path belongs to: (folder, floor) or None."""
    best = None
    for folder, floor in FLOORS:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best[0]):
                best = (folder, floor)
    return best


def backend_subfolder(path):
    """'gloo' for src/dist/backends/gloo/x.h; '' for a file at the backends' root."""
    rest = path[len(BACKENDS) + 1:]
    return rest.split("/")[0] if "/" in rest else ""


def resolve(root, including, target):
    """The repository-relative path of a quoted include, or None when it is not ours."""
    if target.startswith("kindling/"):
        return "include/" + target
    for base in ("src", "tools", os.path.dirname(including)):
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.exists(os.path.join(root, candidate)):
            return candidate
    return None


def violation(source, target):
    """Why `source` may not include `target` (both repository-relative), or None."""
    if source.startswith("include/"):
        return None if target.startswith("include/") else "a public header includes a private one"
    if target.startswith("include/"):
        return None
    mine, theirs = folder_of(source), folder_of(target)
    if mine is None or theirs is None:
        return None
    if mine[0] == theirs[0]:
        if mine[0] == BACKENDS:
            a, b = backend_subfolder(source), backend_subfolder(target)
            if a and b and a != b and b != SHARED_BACKEND_FOLDER:
                return "one backend's folder includes another's (%s -> %s)" % (a, b)
        return None
    if mine[0] in TRAINING_WING and theirs[0] not in TRAINING_WING and theirs[0] != "src/common":
        return "the training wing reaches the runtime only through kindling/ headers"
    if theirs[1] >= mine[1]:
        return "floor %d (%s) includes floor %d (%s)" % (mine[1], mine[0], theirs[1], theirs[0])
    return None


def check(root):
    problems = []
    for top in ("src", "include", "tools"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_ENDINGS):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        target = m and resolve(root, path, m.group(1))
                        why = target and violation(path, target)
                        if why:
                            problems.append("%s:%d: includes \"%s\": %s" % (path, number, m.group(1), why))
    return problems


def self_test():
    """A tree with one violation of each kind must report exactly those."""
    files = {
        "src/common/log.h": '#include "dist/runtime.h"\n',  # up a floor
        "src/dist/runtime.h": '#include "common/log.h"\n',  # fine
        "src/dist/backends/gloo/g.h": '#include "dist/backends/mpi/m.h"\n#include "dist/backends/c10d/c.h"\n',
        "src/dist/backends/mpi/m.h": "",
        "src/dist/backends/c10d/c.h": "",
        "src/handlers/h.cpp": '#include "dist/runtime.h"\n#include "kindling/log.h"\n',  # the first is wrong
        "src/nn/n.cpp": '#include "data/d.h"\n',  # peers on one floor
        "src/data/d.h": "",
        "include/kindling/log.h": '#include "common/log.h"\n',  # public includes private
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        found = sorted(p.split(":")[0] + ":" + p.split(":")[1] for p in check(root))
    expected = sorted(["include/kindling/log.h:1", "src/common/log.h:1", "src/dist/backends/gloo/g.h:1",
                       "src/handlers/h.cpp:1", "src/nn/n.cpp:1"])
    if found != expected:
        print("check-includes self-test FAILED: reported %s, expected %s" % (found, expected))
        return 1
    print("check-includes self-test: the %d planted violations were reported, nothing else" % len(expected))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print("%d include(s) point up a floor; move the shared piece down a floor (docs/design.md, "
              "'What may include what')" % len(problems))
        return 1
    print("include floors: every quoted include in src/, include/ and tools/ points down or across its own folder")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
