#!/usr/bin/python3
"""kindling's DDP against PyTorch's c10d::Reducer across namespace hosts (issue 27, item 4).

Runs bench/ddp/bench_reducer (both engines on one gloo group, rounds interleaved, medians) under
kindling-run on each host of a tests/cluster fixture, one rank per host pinned to its own core,
and prints rank 0's RESULT line per link rate and model. Root; the fixture removes what it made.

    /usr/bin/python3 bench/cluster/reducer_hosts.py --build build-torch2 --rates 1gbit --rounds 5
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "cluster"))
import cluster  # noqa: E402

# The per-model settings of scripts/bench-reducer.sh (one host), so the figures compare.
ARGS = {"mlp": "--batch 64 --steps 40 --warmup 5", "resnet18": "--batch 32 --steps 8 --warmup 2"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="a kindling build folder")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--rates", default="1gbit", help="comma-separated tc rates, or none")
    p.add_argument("--rounds", default="5")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    reason = cluster.available()
    if reason:
        sys.exit("reducer_hosts: no cluster fixture here: " + reason)
    for rate in args.rates.split(","):
        with cluster.Cluster(hosts=args.hosts, rate=None if rate == "none" else rate) as c:
            for model, extra in ARGS.items():
                cmds = [[os.path.join(build, "kindling-run"), "--nnodes", str(args.hosts), "--node_rank", str(k),
                         "--master_addr", "node0", "--master_port", "29500", "--nproc_per_node", "1",
                         "taskset", "-c", str(k % (os.cpu_count() or 1)),
                         os.path.join(build, "bench", "ddp", "bench_reducer"), "--model", model,
                         "--rounds", args.rounds, "--threads", "1"] + extra.split() for k in range(args.hosts)]
                procs = [c.popen_on(k, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                         for k, cmd in enumerate(cmds)]
                outs = [proc.communicate(timeout=1800)[0] for proc in procs]
                lines = [line.split("]: ", 1)[-1] for line in outs[0].splitlines() if "RESULT" in line]
                if not lines or any(proc.returncode for proc in procs):
                    sys.exit("reducer_hosts: %s %s failed:\n%s" % (rate, model, "\n".join(o[-1500:] for o in outs)))
                print(rate, lines[0], flush=True)


if __name__ == "__main__":
    main()
