#!/usr/bin/env python3
"""Runs scripts/check-includes.py on planted trees and fails unless it reports exactly what was planted.

Usage: check-includes-selftest.py

The trees, in a temporary folder:
  * a clean tree (includes down the floors, LibTorch where the library links it): passes;
  * one violation of each floor rule (up a floor, a peer folder, one backend's folder into
    another's, the training wing into the runtime, a public header into a private one, a public
    header of a floor above, a public header with no floor): each is reported;
  * unit cycles: runtime.cpp including agreement.h while agreement.cpp includes runtime.h (no
    file includes itself again), registry <-> a backend's folder, a.h -> b.h -> c.h -> a.h;
  * LibTorch past the link boundary: in src/common, directly and through a public header; in a
    source that CMakeLists.txt compiles into kindling_supervisor or kindling-run, directly and
    through our header; not in the library, which links torch;
  * scripts/include-exceptions.txt: an entry silences exactly its include (an up-floor one, one
    that closes a unit cycle, a LibTorch one); an entry without a reason, and one that silences
    nothing, are reported.
"""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check-includes.py")
EXCEPTIONS = "scripts/include-exceptions.txt"

CMAKE = """add_library(kindling_supervisor STATIC src/supervisor/s.cpp  # a comment (with parentheses)
  src/launch/e.cpp)
add_library(kindling SHARED ${KINDLING_SOURCES} src/dist/d.cpp)
add_library(kindling::kindling ALIAS kindling)
target_link_libraries(kindling PUBLIC torch PRIVATE $<BUILD_INTERFACE:kindling_supervisor>)
add_executable(kindling-run tools/kindling-run/main.cpp)
target_link_libraries(kindling-run PRIVATE kindling_supervisor)
add_executable(example examples/x.cpp)
target_link_libraries(example PRIVATE kindling::kindling)
"""

CLEAN = {
    "CMakeLists.txt": CMAKE,
    "src/common/log.h": "#include <string>\n",
    "src/common/log.cpp": '#include "common/log.h"\n#include "kindling/log.h"\n',
    "include/kindling/log.h": "",
    "include/kindling/engine/state_dict.h": "#include <ATen/core/Dict.h>\n",  # floor 0, but LibTorch
    "src/dist/runtime.h": '#include "common/log.h"\n#include <torch/torch.h>\n',
    "src/dist/runtime.cpp": '#include "dist/runtime.h"\n#include "dist/agreement.h"\n',
    "src/dist/agreement.h": '#include "dist/runtime_state.h"\n',
    "src/dist/agreement.cpp": '#include "dist/agreement.h"\n#include "kindling/engine/state_dict.h"\n',
    "src/dist/runtime_state.h": "#include <c10/util/intrusive_ptr.h>\n",
    "src/dist/d.cpp": '#include "launch/e.h"\n#include <ATen/ATen.h>\n',  # the library links torch
    "src/dist/backends/registry.h": '#include "dist/backends/traits.h"\n',
    "src/dist/backends/registry.cpp": '#include "dist/backends/registry.h"\n#include "dist/backends/gloo/gloo.h"\n',
    "src/dist/backends/traits.h": "",
    "src/dist/backends/gloo/gloo.h": '#include "dist/backends/traits.h"\n',
    "src/launch/e.h": '#include "common/log.h"\n',
    "src/launch/e.cpp": '#include "launch/e.h"\n',
    "src/launch/w.cpp": "#include <torch/torch.h>\n",  # not in kindling_supervisor
    "src/supervisor/s.cpp": '#include "launch/e.h"\n',
    "tools/kindling-run/main.cpp": '#include "supervisor/s.h"\n',
    "src/supervisor/s.h": "",
}

FLOOR_RULES = {
    "src/common/up.h": '#include "dist/runtime.h"\n',  # up a floor
    "src/dist/backends/gloo/g.h": '#include "dist/backends/mpi/m.h"\n#include "dist/backends/c10d/c.h"\n',
    "src/dist/backends/mpi/m.h": "",
    "src/dist/backends/c10d/c.h": "",
    "src/handlers/h.cpp": '#include "dist/runtime.h"\n#include "kindling/log.h"\n',  # the first is wrong
    "src/nn/n.cpp": '#include "data/d.h"\n',  # peers on one floor
    "src/data/d.h": "",
    "include/kindling/private.h": '#include "common/log.h"\n',  # public includes private (and has no floor)
    "src/dist/auto.cpp": '#include "kindling/nn/ddp.h"\n#include "kindling/log.h"\n',  # a floor above; fine
    "include/kindling/nn/ddp.h": '#include "kindling/data/loader.h"\n',  # peers on one floor
    "include/kindling/data/loader.h": "",
    "src/metrics/m.cpp": '#include "kindling/kindling.h"\n',  # the umbrella is on the top floor
    "include/kindling/kindling.h": '#include "kindling/nn/ddp.h"\n',
}
# src/common/up.h reaches LibTorch through src/dist/runtime.h as well.
FLOOR_REPORTS = ["include/kindling/nn/ddp.h:1", "include/kindling/private.h:1", "include/kindling/private.h:1",
                 "src/common/up.h:1", "src/dist/runtime.h:2", "src/dist/auto.cpp:1", "src/dist/backends/gloo/g.h:1",
                 "src/handlers/h.cpp:1", "src/metrics/m.cpp:1", "src/nn/n.cpp:1"]

UNIT_CYCLE = {  # no file cycle: runtime.cpp -> agreement.h, agreement.cpp -> runtime.h
    "src/dist/agreement.cpp": '#include "dist/agreement.h"\n#include "dist/runtime.h"\n',
}
BACKEND_CYCLE = {"src/dist/backends/gloo/gloo.h": '#include "dist/backends/registry.h"\n'}
FILE_CYCLE = {"src/handlers/a.h": '#include "handlers/b.h"\n', "src/handlers/b.h": '#include "c.h"\n',
              "src/handlers/c.h": '#include "a.h"\n', "src/handlers/d.h": '#include "a.h"\n'}

COMMON_TORCH = {"src/common/log.h": "#include <string>\n#include <ATen/core/Tensor.h>\n",
                "src/common/state.cpp": '#include "kindling/engine/state_dict.h"\n'}
SUPERVISOR_TORCH = {"src/launch/e.h": '#include "common/log.h"\n#include <torch/torch.h>\n',
                    "tools/kindling-run/main.cpp": '#include "supervisor/s.h"\n  #  include <c10/util/Optional.h>\n'}


def tree(*parts):
    """The clean tree with `parts` laid over it."""
    files = dict(CLEAN)
    for part in parts:
        files.update(part)
    return files


def run(files):
    """check-includes.py's exit status, the sorted `path:line` of each problem it reported, and its output."""
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)) or root, exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        proc = subprocess.run([sys.executable, CHECK, root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
    reported = [":".join(l.split(":")[:2]) for l in proc.stdout.splitlines() if l.split(":")[1:2] != [""]
                and len(l.split(":")) > 2 and l.split(":")[1].isdigit()]
    return proc.returncode, sorted(reported), proc.stdout


def cases():
    """(what, files, expected exit status, expected reports, text the output must hold)."""
    unit = "src/dist/agreement -> src/dist/runtime -> src/dist/agreement (then src/dist/runtime.cpp:2 includes"
    return [
        ("a clean tree passes", tree(), 0, [], "the 0 listed"),
        ("each floor rule's violation is reported", tree(FLOOR_RULES), 1, FLOOR_REPORTS, "a public header with no floor"),
        ("an up-floor include alone", tree({"src/common/up.h": FLOOR_RULES["src/common/up.h"]}), 1,
         ["src/common/up.h:1", "src/dist/runtime.h:2"], "floor 0 (src/common) includes floor 6 (src/dist)"),
        ("a cycle of units that no file cycle shows", tree(UNIT_CYCLE), 1, ["src/dist/agreement.cpp:2"], unit),
        ("registry <-> a backend's folder", tree(BACKEND_CYCLE), 1, ["src/dist/backends/gloo/gloo.h:1"],
         "src/dist/backends/gloo/gloo -> src/dist/backends/registry -> src/dist/backends/gloo/gloo"),
        ("a cycle of files, reported once at its first file", tree(FILE_CYCLE), 1, ["src/handlers/a.h:1"],
         "src/handlers/a -> src/handlers/b -> src/handlers/c -> src/handlers/a"),
        ("LibTorch in src/common, directly and through a public header", tree(COMMON_TORCH), 1,
         ["include/kindling/engine/state_dict.h:1", "src/common/log.h:2"],
         "(src/common/state.cpp includes it by way of src/common/state.cpp -> include/kindling/engine/state_dict.h)"),
        ("LibTorch in kindling_supervisor and kindling-run, directly and through a header", tree(SUPERVISOR_TORCH), 1,
         ["src/launch/e.h:2", "tools/kindling-run/main.cpp:2"],
         "kindling_supervisor compiles it (CMakeLists.txt) and links no LibTorch"),
        ("an entry silences exactly its include", tree(FLOOR_RULES, UNIT_CYCLE, SUPERVISOR_TORCH, {EXCEPTIONS: (
            "# made up\nsrc/nn/n.cpp -> src/data/d.h  a reason\nsrc/dist/agreement.cpp -> src/dist/runtime.h  a reason\n"
            "src/launch/e.h -> <torch/torch.h>  a reason\n")}), 1,
         [r for r in FLOOR_REPORTS if r != "src/nn/n.cpp:1"] + ["tools/kindling-run/main.cpp:2"], ""),
        ("entries for every violation pass", tree(UNIT_CYCLE, {EXCEPTIONS: "src/dist/agreement.cpp -> src/dist/runtime.h"
                                                                           "  a reason\n"}), 0, [], "the 1 listed"),
        ("an entry without a reason, and entries that silence nothing, are reported", tree(UNIT_CYCLE, {EXCEPTIONS: (
            "src/dist/agreement.cpp -> src/dist/runtime.h\nsrc/dist/runtime.cpp -> src/dist/agreement.h  the "
            "other include of the cycle\nsrc/dist/runtime.cpp -> src/common/log.h  "
            "no rule broken\nsrc/launch/w.cpp -> <torch/torch.h>  outside the boundary\n")}), 1,
         ["scripts/include-exceptions.txt:1", "scripts/include-exceptions.txt:3", "scripts/include-exceptions.txt:4"],
         "gives no reason"),
    ]


def main():
    failed = 0
    for what, files, status, expected, text in cases():
        got_status, reported, output = run(files)
        if (got_status, reported) != (status, sorted(expected)) or text not in output:
            failed += 1
            print("check-includes self-test FAILED: %s: exit %d reporting %s, expected exit %d reporting %s and "
                  "saying '%s'; it printed:\n%s" % (what, got_status, reported, status, sorted(expected), text, output))
    if failed:
        return 1
    print("check-includes self-test: %d planted trees, each reported exactly as expected" % len(cases()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
