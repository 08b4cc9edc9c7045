#!/usr/bin/env python3
"""Runs several commands at once and reports each: the CTest test fault_trials_ci runs the host
faults (host_faults.py) and the fault harness (fault_harness.py) together, beside one other
test that is neither a cluster nor a launcher test (tests/CMakeLists.txt). Both mostly wait (for a stall to be detected, a
launcher to end, a rendezvous to time out), so side by side they take about as long as the
longer one, where one after the other left the machine idle for both (docs/performance.md,
CI time). Each trial of theirs finds its own processes by a marker of its own, so neither
counts the other's as its leftovers.

  run_together.py -- CMD1 ARGS... -- CMD2 ARGS...

Prints each command's output whole, in the order given, after all have ended, then one line per
command with its exit code. Exits 0 when every command passed; 77 (skipped) when every command
exited 77; otherwise 1. A command that skips while another passes is reported as skipped in its
line, and the whole passes."""
import subprocess
import sys
import tempfile

SKIPPED = 77


def split_commands(argv):
    commands, current = [], None
    for arg in argv:
        if arg == "--":
            current = []
            commands.append(current)
        elif current is None:
            sys.exit(f"run_together.py: expected '--' before the command '{arg}'")
        else:
            current.append(arg)
    if not commands or any(not c for c in commands):
        sys.exit("run_together.py: give one or more commands, each after '--'")
    return commands


def main():
    commands = split_commands(sys.argv[1:])
    logs = [tempfile.TemporaryFile() for _ in commands]
    procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT) for c, log in zip(commands, logs)]
    codes = [p.wait() for p in procs]
    for command, log in zip(commands, logs):
        log.seek(0)
        print(f"===== {' '.join(command)}", flush=True)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
    for command, code in zip(commands, codes):
        verdict = "passed" if code == 0 else "skipped" if code == SKIPPED else "FAILED"
        print(f"run_together.py: {verdict} (exit {code}): {' '.join(command)}")
    if all(code == SKIPPED for code in codes):
        return SKIPPED
    return 0 if all(code in (0, SKIPPED) for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
