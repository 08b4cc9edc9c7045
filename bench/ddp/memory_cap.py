#!/usr/bin/env python3
"""Memory per rank of DDP and of sharded data-parallel, measured by the kernel, and a run under a
per-process memory cap that DDP's copy of the model does not fit.

Each rank runs in a memory cgroup of its own (the cgroup v1 memory controller, which this machine
and CI mount at /sys/fs/cgroup/memory; cgroup v2's memory.max / memory.peak where that is what is
mounted). Its peak over the whole run (memory.max_usage_in_bytes, or memory.peak: the process's
own memory, not the shared libraries' pages another process loaded first) is read after the run,
beside the rank's peak resident set during the training steps alone (bench_ddp's step_rss_mb:
VmHWM reset once the model and optimizer are built, which LibTorch does with every parameter whole
on every rank before sharding; it counts the libraries' pages too). With --cap-mb each cgroup's
limit is set, so that a rank that needs more is killed by the kernel's OOM killer (reported as
such). Every variant runs bench_ddp under kindling-run on this host (gloo), SGD with momentum,
the same model, batch and steps:

  the fixed cost (DDP of a 16-wide MLP: the data held in memory, LibTorch, gloo) | kindling DDP |
  kindling ZeRO-2 (stepping in backward) | kindling ZeRO-3

Usage (root, for the cgroups; a build with benchmarks):
  python3 bench/ddp/memory_cap.py --build build-torch2 [--ranks 4] [--mlp-width 4608 --mlp-depth 6]
      [--cap-mb 1100] [--steps 3]

The default model, an MLP 784 -> 6 x 4608 -> 10, has 109.9 M parameters: 9.8x ResNet-18's
11.2 M. The cgroups are removed when the script ends, also when a run fails.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

VARIANTS = [("fixed cost: DDP of an MLP of width 16 (the data, LibTorch, gloo)", ["--mlp-width", "16"]),
            ("kindling DDP", []),
            ("kindling ZeRO-2, stepping in backward", ["--sharding", "zero2", "--in-backward"]),
            ("kindling ZeRO-3", ["--sharding", "zero3"])]

# Moves the rank (this shell, then the program it becomes) into its cgroup first.
WRAPPER = """#!/bin/sh
echo $$ > "$KINDLING_MEMCAP_CGROUP-$LOCAL_RANK/cgroup.procs" || exit 97
exec "$@"
"""


class Cgroups:
    """One memory cgroup per rank: created on entry, removed on exit (once their processes ended)."""

    def __init__(self, ranks, cap_bytes):
        v1 = "/sys/fs/cgroup/memory"
        self.v2 = not os.path.isdir(v1)
        root = "/sys/fs/cgroup" if self.v2 else v1
        self.prefix = os.path.join(root, "kindling-memcap-%d" % os.getpid())
        self.ranks, self.cap = ranks, cap_bytes

    def __enter__(self):
        for r in range(self.ranks):
            path = "%s-%d" % (self.prefix, r)
            os.mkdir(path)
            if self.cap:
                self._write(path, "memory.max" if self.v2 else "memory.limit_in_bytes", str(self.cap))
        return self

    def __exit__(self, *exc):
        for r in range(self.ranks):
            path = "%s-%d" % (self.prefix, r)
            if os.path.isdir(path):
                os.rmdir(path)

    @staticmethod
    def _write(path, name, value):
        with open(os.path.join(path, name), "w") as f:
            f.write(value)

    def peak_mb(self, rank):
        path = "%s-%d" % (self.prefix, rank)
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        with open(os.path.join(path, name)) as f:
            return int(f.read()) / 2**20

    def oom_kills(self, rank):
        path = "%s-%d" % (self.prefix, rank)
        name = "memory.events" if self.v2 else "memory.oom_control"
        with open(os.path.join(path, name)) as f:
            m = re.search(r"oom_kill (\d+)", f.read())
        return int(m.group(1)) if m else 0


def run(args, extra, cap_bytes, wrapper):
    """One variant: (RESULT fields or None, exit status, each rank's cgroup peak MB, OOM kills, tail)."""
    cmd = [os.path.join(args.build, "kindling-run"), "--standalone", "--nproc_per_node", str(args.ranks), wrapper,
           os.path.join(args.build, "bench", "ddp", "bench_ddp"), "--model", "mlp", "--mlp-depth", str(args.mlp_depth),
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", "1", "--backend", "gloo"] + extra
    if "--mlp-width" not in extra:
        cmd += ["--mlp-width", str(args.mlp_width)]
    with Cgroups(args.ranks, cap_bytes) as groups:
        env = dict(os.environ, KINDLING_MEMCAP_CGROUP=groups.prefix)
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        peaks = [groups.peak_mb(r) for r in range(args.ranks)]
        kills = sum(groups.oom_kills(r) for r in range(args.ranks))
    line = next((l for l in p.stdout.splitlines() if "RESULT" in l), None)
    fields = dict(re.findall(r"(\w+)=([\w.]+)", line)) if line else None
    return fields, p.returncode, peaks, kills, p.stdout[-1500:]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-torch2")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--mlp-width", type=int, default=4608)
    p.add_argument("--mlp-depth", type=int, default=6)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--cap-mb", type=float, default=0, help="each rank's memory cap (0: none, peaks only)")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("memory_cap.py: needs root (it makes memory cgroups); run it with sudo", file=sys.stderr)
        return 2
    folder = tempfile.mkdtemp(prefix="kindling-memcap-")
    try:
        wrapper = os.path.join(folder, "in_cgroup.sh")
        with open(wrapper, "w") as f:
            f.write(WRAPPER)
        os.chmod(wrapper, 0o755)
        params = 784 * args.mlp_width + (args.mlp_depth - 1) * args.mlp_width ** 2 + 10 * args.mlp_width
        params += args.mlp_depth * args.mlp_width + 10
        cap = int(args.cap_mb * 2**20)
        print("MLP 784 -> %d x %d -> 10: %.1f M parameters (%.0f MB in float32); %d ranks, batch %d, %d steps; cap %s"
              % (args.mlp_depth, args.mlp_width, params / 1e6, params * 4 / 2**20, args.ranks, args.batch, args.steps,
                 "%.0f MB per rank" % args.cap_mb if cap else "none"))
        print("\n| variant | exit | OOM kills | peak per rank, cgroup (MB, max over ranks) | "
              "peak RSS during the steps (MB) | samples/s |")
        print("|---|---|---|---|---|---|")
        for label, extra in VARIANTS:
            fields, rc, peaks, kills, tail = run(args, extra, cap, wrapper)
            print("| %s | %d | %d | %.0f | %s | %s |" % (
                label, rc, kills, max(peaks), fields["step_rss_mb"] if fields else "-",
                fields["samples_per_s"] if fields else "-"), flush=True)
            if rc != 0 and not kills:
                print(tail, file=sys.stderr)
    finally:
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
