#!/usr/bin/env python3
"""Rewrites tests/ctest-costs.txt (the seed of CTest's durations, tests/CMakeLists.txt) from the
durations CTest recorded in build/ and build-torch2/ (run both full suites first): for each test
that exists in either folder now, the larger of its two average durations, those of 4 s and more,
longest first. Usage: scripts/refresh-test-costs.py [REPOSITORY]"""
import os
import subprocess
import sys

MIN_SECONDS = 4.0


def current_tests(folder):
    """The names CTest lists in `folder` (names may hold spaces: parameterized GoogleTest cases)."""
    out = subprocess.run(["ctest", "-N"], cwd=folder, capture_output=True, text=True, check=True).stdout
    return {line.split(": ", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("Test") and ": " in line}


def recorded(folder):
    """{name: average seconds} from the folder's CTestCostData.txt (lines: name runs seconds)."""
    costs = {}
    with open(os.path.join(folder, "Testing", "Temporary", "CTestCostData.txt")) as f:
        for line in f:
            if line.startswith("---"):
                break
            name, _runs, seconds = line.rstrip("\n").rsplit(" ", 2)
            costs[name] = float(seconds)
    return costs


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    costs = {}
    for build in ("build", "build-torch2"):
        folder = os.path.join(root, build)
        names = current_tests(folder)
        for name, seconds in recorded(folder).items():
            if name in names and " " not in name:  # CTest reads a seed line's name up to its first space
                costs[name] = max(costs.get(name, 0.0), seconds)
    chosen = sorted(((s, n) for n, s in costs.items() if s >= MIN_SECONDS), reverse=True)
    with open(os.path.join(root, "tests", "ctest-costs.txt"), "w") as f:
        f.writelines("%s 1 %.1f\n" % (name, seconds) for seconds, name in chosen)
        f.write("---\n")
    print("tests/ctest-costs.txt: %d tests of %.0f s and more" % (len(chosen), MIN_SECONDS))


if __name__ == "__main__":
    main()
