#!/usr/bin/env python3
"""Runs scripts/check-sizes.py on planted trees and fails unless it reports exactly what was planted.

Usage: check-sizes-selftest.py

The trees, in a temporary folder:
  * a 450-line file holding an 80-line C++ function (a constructor with a braced member
    initialiser, a lambda, a local struct, and braces in strings, characters, a raw string and
    comments), a 100-line class of short methods, and an 80-line Python def: all pass;
  * a 451-line file, 81-line C++ functions (one a method in the body of an exported class, one
    a lambda at namespace scope), an 81-line Python def: each is reported;
  * long files under build*/ and third_party/: not ours, not reported;
  * scripts/size-exceptions.txt: an entry silences exactly its own violation; an entry
    without a reason, and one that names nothing over its limit, are reported.
"""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check-sizes.py")


def cpp_function(header, lines):
    """A C++ function of exactly `lines` lines from the line of its `{` to its `}`, with traps for
    the brace counter in it."""
    traps = [
        '  const char* s = "}}} \\" }";  // } }',
        "  char c = '{';  /* { */ int big = 1'000'000;",
        '  auto raw = R"x(}" })x";',
        "  auto f = [&] {",
        "    return s[0] == '{';",
        "  };",
        "  struct Local {",
        "    int v{0};",
        "  };",
        "#define NOT_A_BRACE {",
    ]
    body = traps + ["  (void)c;"] * (lines - 2 - len(traps))
    return [header + " {"] + body + ["}"]


def python_function(name, lines):
    """A Python def of exactly `lines` lines."""
    return ["def %s():" % name, '    """}{"""'] + ["    x = 1"] * (lines - 3) + ["    return x"]


def small_class(lines):
    """A class body of `lines` lines made of one-line methods: no function of it is long."""
    methods = ["  int m%d() const { return %d; }" % (i, i) for i in range(lines - 3)]
    return ["class Big {", " public:"] + methods + ["};"]


def padded(lines, total):
    """`lines` followed by comment lines up to `total` lines."""
    return lines + ["// padding"] * (total - len(lines))


def base_tree():
    """Files at their limits, which pass."""
    fine = (["#include <string>", "namespace a {", "namespace {"] + small_class(100) + ["}  // namespace"]
            + cpp_function("Widget::Widget(int x) : a_{x}, b_(x)", 80) + ["}  // namespace a"])
    return {
        "src/fine.cpp": padded(fine, 450),
        "scripts/fine.py": python_function("fine", 80),
        "build/huge.cpp": padded(cpp_function("void in_build()", 200), 1000),
        "src/third_party/vendored.cpp": padded([], 600),
    }


PLANTED = {
    "src/long_file.cpp": padded([], 451),
    "src/long_function.cpp": (["namespace a {"] + cpp_function("void too_long()", 81)
                              + ["class KINDLING_API Holder {", " public:"]
                              + cpp_function("  void also_too_long() const", 81) + ["};", "}  // namespace a"]),
    "tests/long_def.py": ["class Harness:"] + ["    " + l for l in python_function("too_long", 81)],
}
FILE = "src/long_file.cpp:1"
FUNCTION = "src/long_function.cpp:2"
ALSO = "src/long_function.cpp:85"
DEF = "tests/long_def.py:2"


def run(files, exceptions=None):
    """check-sizes.py's exit status and the `path:line` of each line it reported, on a tree of `files`."""
    with tempfile.TemporaryDirectory() as root:
        if exceptions is not None:
            files = dict(files, **{"scripts/size-exceptions.txt": exceptions})
        for path, lines in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write("\n".join(lines) + "\n")
        proc = subprocess.run([sys.executable, CHECK, root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
    reported = [":".join(l.split(":")[:2]) for l in proc.stdout.splitlines() if not l.startswith("check-sizes:")]
    return proc.returncode, sorted(reported), proc.stdout


def cases():
    """(what, files, exceptions, expected exit status, expected reports)."""
    base = base_tree()
    every = dict(base, **PLANTED)
    return [
        ("a 450-line file and 80-line functions pass", base, None, 0, []),
        ("a 451-line file fails", dict(base, **{"src/long_file.cpp": PLANTED["src/long_file.cpp"]}), None, 1, [FILE]),
        ("81-line C++ functions fail", dict(base, **{"src/long_function.cpp": PLANTED["src/long_function.cpp"]}),
         None, 1, [FUNCTION, ALSO]),
        ("an 81-line Python def fails", dict(base, **{"tests/long_def.py": PLANTED["tests/long_def.py"]}),
         None, 1, [DEF]),
        ("an 81-line lambda at namespace scope fails",
         dict(base, **{"src/long_lambda.cpp": ["namespace {"] + cpp_function("const auto kLong = [&]", 81)
                       + [";", "}  // namespace"]}), None, 1, ["src/long_lambda.cpp:2"]),
        ("every violation at once", every, None, 1, [DEF, FILE, FUNCTION, ALSO]),
        ("a function's entry silences that function only", every,
         ["# comment", "src/long_function.cpp:too_long  a reason"], 1, [DEF, FILE, ALSO]),
        ("a file's entry silences that file only", every,
         ["src/long_file.cpp  a reason", "tests/long_def.py:Harness.too_long  a reason"], 1, [FUNCTION, ALSO]),
        ("an entry for each silences all", every,
         ["src/long_file.cpp  a reason", "src/long_function.cpp:too_long  a reason",
          "src/long_function.cpp:also_too_long  a reason", "tests/long_def.py:Harness.too_long  a reason"], 0, []),
        ("an entry without a reason is reported", dict(base, **{"src/long_file.cpp": PLANTED["src/long_file.cpp"]}),
         ["src/long_file.cpp"], 1, ["scripts/size-exceptions.txt:1"]),
        ("an entry that silences nothing is reported", base, ["", "src/fine.cpp:Widget::Widget  a reason"], 1,
         ["scripts/size-exceptions.txt:2"]),
    ]


def main():
    failed = 0
    for what, files, exceptions, status, expected in cases():
        got_status, reported, output = run(files, exceptions)
        if (got_status, reported) != (status, sorted(expected)):
            failed += 1
            print("check-sizes self-test FAILED: %s: exit %d reporting %s, expected exit %d reporting %s; "
                  "it printed:\n%s" % (what, got_status, reported, status, sorted(expected), output))
    if failed:
        return 1
    print("check-sizes self-test: %d planted trees, each reported exactly as expected" % len(cases()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
