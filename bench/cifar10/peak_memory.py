"""Runs a command and measures the peak memory of the job it starts, workers included, for
scripts/bench-cifar10.sh: every --every seconds (default 1) it sums the proportional set size (PSS, from
/proc/<pid>/smaps_rollup) of every process in the command's tree (data-loader worker processes of
Python ranks included, as kindling's loader threads are inside its ranks) and keeps the largest
sum. With --ranks N > 1 the tree's root is a launcher (torchrun's agent, mpirun, kindling's
--nproc_per_node parent) and is left out; the result is the peak divided by N.

PSS, not RSS: a forked worker shares its parent's pages (torch's libraries, the dataset) and RSS
would count them once per process; PSS charges each shared page to its sharers in equal parts, so
the sum over a tree is the memory the tree holds. (Hand-written: psutil is not installed, and a
sampler is 40 lines of /proc reading.)

Reading smaps_rollup makes the kernel walk each process's page tables: at 0.2 s this sampler took
16% of one core beside a 2-rank ignite job (5 large processes), at 1 s about a fifth of that.

  python3 peak_memory.py --ranks 2 --out mem.json [--every 1] -- COMMAND ARGS...
Writes {"peak_pss_mb_per_rank": ..., "peak_pss_mb_job": ..., "samples": ...} and exits with the
command's status.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def children_map():
    """{parent pid: [child pids]} of every process now alive."""
    kids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pss_kb(root, skip_root):
    kids, total, todo = children_map(), 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        if not (skip_root and pid == root):
            total += pss_kb(pid)
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    child = subprocess.Popen(command)
    peak, samples = 0, 0
    while child.poll() is None:
        peak = max(peak, tree_pss_kb(child.pid, args.ranks > 1))
        samples += 1
        time.sleep(args.every)
    with open(args.out, "w") as f:
        json.dump({"peak_pss_mb_per_rank": peak / 1024 / args.ranks, "peak_pss_mb_job": peak / 1024,
                   "samples": samples}, f)
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
