"""The systems tests/fault/goodput.py runs side by side: each one's command line on a host, and
how its output says what it trained.

  live-etcd  kindling-run --live_recovery --rdzv_backend etcd (etcd members on hosts 0-2)
  live-c10d  kindling-run --live_recovery, the rendezvous served by host 0's agent
  restart    kindling-run --rdzv_backend etcd, every failure a restart of every worker from the
             last checkpoint (every 10 iterations)
  torchrun   torchrun (the Python peer's, on the same hosts) --max-restarts with its c10d
             rendezvous on host 0, the same job and checkpoints as restart
  torchft    torchft 0.2.0 (bench/fault/torchft_peer.py, the torch 2.x venv): one replica group
             per host, its lighthouse on host 0, the same network, data, batch and pace

kindling's and torchrun's job is tests/fault/goodput_train.cpp: rank 0 prints a STEP line per
iteration (the global batch) and a LEDGER line at the end (the samples in the final weights).
torchft's replicas print a JSON line per step and replica (its share, when the step committed).
"""
import json
import os
import re

MODES = ["live-etcd", "live-c10d", "restart", "torchrun", "torchft"]
# Modes whose rendezvous (or lighthouse) is served by host 0, which must then stay up.
HOST0_SERVES = {"live-c10d", "torchrun", "torchft"}
ETCD = {"live-etcd", "restart"}

STEP = re.compile(r"STEP t=([0-9.]+) world=(\d+) iteration=(\d+) samples=(\d+)")
LEDGER = re.compile(r"LEDGER samples=(\d+) lost=(\d+) repeated=(\d+) epochs=(\d+)")
START = re.compile(r"START rank=\d+ world=\d+ restart=\S+ pid=(\d+)")
LIGHTHOUSE_PORT = 29510


def job_args(args, work, live):
    """goodput_train's command line."""
    return [args.goodput_train, "live" if live else "restart", work, "--batch", str(args.batch),
            "--pace-ms-per-sample", str(args.pace_ms_per_sample), "--data-dir", args.data_dir]


def command(args, k, work, etcd, c):
    """The command that host k runs in `args.mode` (kindling-run, torchrun or a torchft replica)."""
    tmp = os.path.join(work, "tmp%d" % k)
    os.makedirs(tmp, exist_ok=True)
    env = ["env", "TMPDIR=" + tmp, "OMP_NUM_THREADS=1"]
    if args.mode == "torchft":
        # Gloo's pairs on the host's own link: torchft's ProcessGroupGloo takes the address its
        # host name resolves to, which in a namespace host is loopback.
        return env + ["GLOO_SOCKET_IFNAME=eth0", args.venv_python, args.torchft_peer, "--lighthouse", "http://node0:%d" % LIGHTHOUSE_PORT,
                      "--replica-id", str(k), "--num-replica-groups", str(args.hosts),
                      "--batch-size", str(args.batch), "--host", c.address(k), "--threads", "1",
                      "--pace-ms-per-sample", str(args.pace_ms_per_sample), "--stop-file",
                      os.path.join(work, "stop"), "--data-dir", args.data_dir, "--limit", "6000"]
    if args.mode == "torchrun":
        # The torch of the build's LibTorch (KINDLING_PYTHON: Debian's 1.13 for build/), as
        # tests/fault/host_faults.py runs it.
        return env + [args.python, args.torchrun, "--nnodes", "1:%d" % args.hosts,
                      "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", "node0:29400",
                      "--rdzv_id", "goodput", "--max_restarts", "1000", "--monitor_interval", "0.2",
                      "--rdzv_conf", "join_timeout=120,last_call_timeout=%s" % args.last_call, "--no_python",
                      *job_args(args, work, False)]
    rdzv = ["--rdzv_endpoint", "node0:29400"]
    if args.mode in ETCD:
        members = etcd.endpoints().split(",")
        mine = [m for m in members if m.startswith("node%d:" % k)]
        rdzv = ["--rdzv_backend", "etcd", "--rdzv_endpoint", ",".join(mine + [m for m in members if m not in mine])]
    live = args.mode.startswith("live")
    return env + [args.kindling_run, "--nnodes", "1:%d" % args.hosts, "--nproc_per_node", "1", *rdzv,
                  "--rdzv_id", "goodput", "--max_restarts", "1000", "--grace_period", "2",
                  "--rdzv_conf", "join_timeout=120,last_call_timeout=%s" % args.last_call,
                  *(["--live_recovery", "--warm_join"] if live else []), *job_args(args, work, live)]


def peer_paths(args):
    """Sets the torch 2.x venv's python and lighthouse and the torchft peer's path for the torchft
    mode; returns why it cannot run (empty: it can)."""
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    venv = os.environ.get("KINDLING_TORCH2_VENV", os.path.expanduser("~/.cache/kindling/torch-2.15.0"))
    args.venv_python = os.path.join(venv, "bin", "python")
    args.venv_lighthouse = os.path.join(venv, "bin", "torchft_lighthouse")
    args.torchft_peer = os.path.join(source, "bench", "fault", "torchft_peer.py")
    if not os.path.exists(args.venv_lighthouse):
        return "torchft is not in %s: run scripts/torch2-env.sh (requirements-torch2.txt pins it)" % venv
    return ""


def lighthouse(args):
    """torchft's lighthouse, on host 0: a quorum of one replica or more, torchft's default
    heartbeat timeout (5 s: how long a replica that stopped answering still counts)."""
    return [args.venv_lighthouse, "--bind", "0.0.0.0:%d" % LIGHTHOUSE_PORT, "--min_replicas", "1",
            "--join_timeout_ms", "1000"]


def records(mode, lines):
    """[(t, world, step, samples, committed)] by time: kindling's and torchrun's STEP lines (one
    per iteration, the global batch), torchft's JSON lines (one per replica and step, its share;
    world: the replicas in the step's quorum)."""
    found = []
    for line in lines:
        if mode == "torchft":
            start = line.find("{")
            if start < 0:
                continue
            try:
                r = json.loads(line[start:])
            except ValueError:
                continue
            if "committed" in r:
                found.append((r["t"], r["participants"], r["step"], r["samples"], r["committed"]))
        else:
            m = STEP.search(line)
            if m:
                found.append((float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), True))
    return sorted(found)


def in_weights(mode, lines, steps):
    """(samples in the final weights, lost, repeated): kindling's job's ledger; for torchft the
    committed shares, lost and repeated unknown (None): its samplers keep each replica's shard,
    which goes untrained while the replica is down, and a replica started again begins its shard
    anew, so an epoch's samples are neither all trained nor once each; no ledger says how many)."""
    if mode == "torchft":
        return sum(s[3] for s in steps if s[4]), None, None
    ledger = [m for m in (LEDGER.search(line) for line in lines) if m]
    if len(ledger) != 1:
        return None, None, None
    return tuple(int(ledger[0].group(i)) for i in (1, 2, 3))


def redone(mode, steps):
    """Work thrown away: kindling's iterations trained again after a failure (a number seen
    again), torchft's replica steps that did not commit."""
    if mode == "torchft":
        return sum(1 for s in steps if not s[4])
    count, high = 0, -1
    for s in steps:
        count += 1 if s[2] <= high else 0
        high = max(high, s[2])
    return count


def starts(mode, lines):
    """How many times the worker process of one launcher's output started."""
    if mode == "torchft":
        return sum(1 for line in lines if '"event": "start"' in line)
    return sum(1 for line in lines if START.search(line))
