#!/usr/bin/env python3
"""Goodput under steady failures: a training job on the namespace cluster (tests/cluster/cluster.py,
4 hosts, one rank each) while a host fails every --every seconds and comes back --back seconds
later, for --minutes; what the job kept of the time the hosts were up.

The job is tests/fault/goodput_train.cpp (dist_tutorial train's network and data, a global batch
of --batch divided among the ranks, a step lasting at least --pace-ms-per-sample times a rank's
share: each host trains as if it had a device of its own, whatever number of hosts share this
machine's cores, so the job's rate is that of the hosts up). Modes:
  live-etcd  kindling-run --live_recovery --rdzv_backend etcd (a 3-member etcd cluster on hosts
             0-2); any host fails, the one serving the rendezvous included
  live-c10d  kindling-run --live_recovery, the rendezvous served by host 0's agent (which must
             stay up: host 0 never fails)
  restart    kindling-run --rdzv_backend etcd without live recovery: every failure restarts every
             worker from the last checkpoint (every 10 iterations)
Faults (--fault): kill (every process of the host SIGKILLed: its address still answers, so
connections to it are refused), power (its link cut, then every process killed: nothing answers
any more), stop (every process SIGSTOPped, SIGCONT when it comes back), cut (its link down,
up again when it comes back). A killed host comes back as a new node: its etcd member and its
launcher started again.

Reported (one JSON object, then a table):
  goodput       the samples in the final weights (the job's ledger) over the samples the hosts
                could have trained while they were up, at the failure-free rate per host measured
                before the first failure: time a host is down costs nothing by itself, what
                survivors and joiners lose does
  samples_per_s the samples in the final weights over the wall time of the schedule
  recovery_s    per failure, from the fault to the first step of a smaller world
  redone        iterations trained again (a step numbered again after a failure)
  lost/repeated samples of completed epochs never trained / trained twice in one epoch (ledger)
  restarted     worker processes started again on hosts that did not fail

  tests/fault/goodput.py --build build --mode live-etcd --minutes 10             # docs figure
  tests/fault/goodput.py --build build --plan ci                                 # CTest goodput_ci
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))
import cluster  # noqa: E402
import checks  # noqa: E402
from elastic_job import Host, workspace  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

MODES = ["live-etcd", "live-c10d", "restart"]
FAULTS = ["kill", "power", "stop", "cut"]
STEP = re.compile(r"STEP t=([0-9.]+) world=(\d+) iteration=(\d+) samples=(\d+)")
LEDGER = re.compile(r"LEDGER samples=(\d+) lost=(\d+) repeated=(\d+) epochs=(\d+)")
START = re.compile(r"START rank=\d+ world=\d+ restart=\S+ pid=(\d+)")


def launcher_argv(args, k, work, etcd):
    """kindling-run's command line for host k."""
    rdzv = ["--rdzv_endpoint", "node0:29400"]
    if args.mode != "live-c10d":
        members = etcd.endpoints().split(",")
        mine = [m for m in members if m.startswith("node%d:" % k)]
        rdzv = ["--rdzv_backend", "etcd", "--rdzv_endpoint", ",".join(mine + [m for m in members if m not in mine])]
    live = args.mode.startswith("live")
    tmp = os.path.join(work, "tmp%d" % k)
    os.makedirs(tmp, exist_ok=True)
    return ["env", "TMPDIR=" + tmp, "OMP_NUM_THREADS=1", args.kindling_run, "--nnodes", "1:%d" % args.hosts, "--nproc_per_node", "1",
            *rdzv, "--rdzv_id", "goodput", "--max_restarts", "1000", "--grace_period", "2",
            "--rdzv_conf", "join_timeout=120,last_call_timeout=%s" % args.last_call,
            *(["--live_recovery"] if live else []),
            args.goodput_train, "live" if live else "restart", work, "--batch", str(args.batch),
            "--pace-ms-per-sample", str(args.pace_ms_per_sample),
            "--data-dir", args.data_dir]


class Job:
    """The launchers of the hosts, their faults and their returns."""

    def __init__(self, args, c, work, etcd):
        self.args, self.c, self.work, self.etcd = args, c, work, etcd
        self.hosts = {}     # k -> [Host, ...] (a host started again is a new Host)
        self.down = {}      # k -> when it failed (time.time())
        self.down_spans = []  # (k, failed at, back at)

    def start(self, k):
        self.hosts.setdefault(k, []).append(Host(self.c, k, launcher_argv(self.args, k, self.work, self.etcd)))

    def fail(self, k):
        fault = self.args.fault
        self.down[k] = time.time()
        if fault in ("power", "cut"):
            self.c.cut(k)
        if fault in ("kill", "power"):
            self.c.kill_host(k)
        elif fault == "stop":
            for pid in self.c.pids_on(k):
                os.kill(pid, signal.SIGSTOP)

    def back(self, k):
        fault = self.args.fault
        if fault in ("power", "cut"):
            self.c.heal(k)
        if fault in ("kill", "power"):
            if self.etcd and k in self.etcd.hosts:
                self.etcd.start(k)
            self.start(k)
        elif fault == "stop":
            for pid in self.c.pids_on(k):
                os.kill(pid, signal.SIGCONT)
        self.down_spans.append((k, self.down.pop(k), time.time()))

    def lines(self):
        """Every (host, line) of every launcher's output."""
        out = []
        for k, runs in self.hosts.items():
            for h in runs:
                with h.cond:
                    out.extend((k, line) for line in h.lines)
        return out


def steps(job):
    """The STEP lines of every host: [(t, world, iteration, samples)] by time."""
    found = []
    for _, line in job.lines():
        m = STEP.search(line)
        if m:
            found.append((float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return sorted(found)


def wait_for_world(job, world, since, limit, what):
    """Waits until rank 0 (on whichever host) reports a step of `world` ranks after `since`."""
    while not [s for s in steps(job) if s[0] > since and s[1] == world]:
        if time.time() > since + limit:
            raise checks.Failure("the %d hosts did not %s within %d s; the last lines:\n%s" % (
                world, what, limit, "\n".join(line for _, line in job.lines()[-40:])))
        time.sleep(0.2)


def run_schedule(args, job, rng):
    """Starts the job, measures the failure-free rate, fails hosts until the time is up, brings
    every host back and, once the whole world trains again, stops the job. Returns (rate per host,
    first step's time, schedule start, stop time, [(k, fault time)])."""
    for k in range(args.hosts):
        job.start(k)
    wait_for_world(job, args.hosts, time.time(), 180, "start training together")
    time.sleep(args.warmup)
    now = time.time()
    window = [s for s in steps(job) if now - args.warmup <= s[0] <= now and s[1] == args.hosts]
    rate = sum(s[3] for s in window) / (args.warmup * args.hosts)
    started, faults = time.time(), []
    candidates = [k for k in range(args.hosts) if not (args.mode == "live-c10d" and k == 0)]
    next_fault = started + args.every
    while time.time() < started + args.minutes * 60 or job.down:
        for k, at in list(job.down.items()):
            if time.time() >= at + args.back:
                job.back(k)
        if time.time() >= next_fault and time.time() < started + args.minutes * 60:
            up = [k for k in candidates if k not in job.down]
            if up:
                k = rng.choice(up)
                job.fail(k)
                faults.append((k, job.down[k]))
            next_fault += args.every
        time.sleep(0.05)
    wait_for_world(job, args.hosts, time.time(), args.rejoin_limit, "train together again after the last return")
    open(os.path.join(job.work, "stop"), "w").close()
    stopped = time.time()
    for k, runs in job.hosts.items():
        code = runs[-1].finish(120)
        checks.expect(code == 0, "host %d's last launcher exited %s:\n%s" % (k, code, runs[-1].text()[-3000:]))
    return rate, steps(job)[0][0], started, stopped, faults


def summarize(args, job, rate, first, started, stopped, faults):
    """The figures of a run (see the module's docstring)."""
    all_steps = steps(job)
    up_seconds = args.hosts * (stopped - first)
    for k, failed, back in job.down_spans:
        up_seconds -= back - failed
    ledger = [m for m in (LEDGER.search(line) for _, line in job.lines()) if m]
    checks.expect(len(ledger) == 1, "%d LEDGER lines, not 1" % len(ledger))
    in_weights, lost, repeated = (int(ledger[0].group(i)) for i in (1, 2, 3))
    recoveries = []
    for k, at in faults:
        before = [s for s in all_steps if s[0] <= at]
        world = before[-1][1] if before else args.hosts
        after = [s for s in all_steps if s[0] > at and s[1] < world]
        recoveries.append(round(after[0][0] - at, 2) if after else None)
    redone, high = 0, -1
    for s in all_steps:
        redone += 1 if s[2] <= high else 0
        high = max(high, s[2])
    failed_hosts = {k for k, _ in faults}
    restarted = sum(max(0, len([l for l in h.lines if START.search(l)]) - 1)
                    for k, runs in job.hosts.items() for h in runs)
    known = [r for r in recoveries if r is not None]
    return {
        "mode": args.mode, "fault": args.fault, "hosts": args.hosts, "every_s": args.every, "back_s": args.back,
        "seconds": round(stopped - started, 1), "failures": len(faults), "rate_per_host": round(rate, 1),
        "goodput": round(in_weights / (rate * up_seconds), 3) if rate > 0 else None,
        "ledger_samples": in_weights, "samples_per_s": round(in_weights / (stopped - first), 1),
        "recovery_s": recoveries, "recovery_median_s": round(statistics.median(known), 2) if known else None,
        "recovery_max_s": max(known) if known else None, "unrecovered": recoveries.count(None),
        "redone": redone, "lost": lost, "repeated": repeated, "restarted": restarted,
        "hosts_failed": sorted(failed_hosts),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--mode", choices=MODES, default="live-etcd")
    p.add_argument("--fault", choices=FAULTS, default="kill")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--every", type=float, default=15, help="seconds between failures")
    p.add_argument("--back", type=float, default=5, help="seconds a failed host stays down")
    p.add_argument("--warmup", type=float, default=10, help="failure-free seconds that measure the rate")
    p.add_argument("--batch", type=int, default=96, help="the global batch (a multiple of 1..hosts)")
    p.add_argument("--pace-ms-per-sample", type=float, default=5,
                   help="a step lasts at least this times a rank's share of the batch (a host's own device)")
    p.add_argument("--last-call", default="3")
    p.add_argument("--rejoin-limit", type=float, default=120)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--plan", choices=["ci"], help="ci: 2 minutes of kills every 15 s, checked against floors")
    p.add_argument("--json", help="append the result to this file")
    p.add_argument("--log", help="write every launcher's output to this file (host by host)")
    args = p.parse_args()
    if args.plan == "ci":
        args.mode, args.fault, args.minutes, args.every, args.back = "live-etcd", "kill", 2, 15, 5
    skip = checks.prepare(args)
    if skip:
        return skip
    args.goodput_train = os.path.join(os.path.abspath(args.build), "tests", "goodput_train")
    rng = random.Random(args.seed)
    with workspace("kindling-goodput-") as work:
        with cluster.Cluster(hosts=args.hosts) as c:
            etcd_hosts = range(min(3, args.hosts)) if args.mode != "live-c10d" else []
            with EtcdCluster(c, etcd_hosts) if etcd_hosts else _Nothing() as etcd:
                job = Job(args, c, work, etcd)
                try:
                    rate, first, started, stopped, faults = run_schedule(args, job, rng)
                finally:
                    for runs in job.hosts.values():
                        Host.kill_left(runs)
                    if args.log:
                        with open(args.log, "w") as f:
                            for k, runs in sorted(job.hosts.items()):
                                for n, h in enumerate(runs):
                                    f.write("=== host %d, start %d\n%s\n" % (k, n, h.text()))
                result = summarize(args, job, rate, first, started, stopped, faults)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    if args.plan == "ci":
        return check_floors(result)
    return 0


def check_floors(r):
    """CI's floors: conservative against the long runs' figures (docs/fault-tolerance.md)."""
    problems = []
    if r["goodput"] is None or r["goodput"] < 0.6:
        problems.append("goodput %s < 0.6" % r["goodput"])
    if r["lost"] != 0 or r["repeated"] != 0:
        problems.append("samples lost %s, repeated %s (the ledger must be exact)" % (r["lost"], r["repeated"]))
    if r["restarted"] != 0:
        problems.append("%d worker processes started again on hosts that did not fail" % r["restarted"])
    if r["unrecovered"] or (r["recovery_max_s"] or 0) > 10:
        problems.append("recovery times %s (each must be <= 10 s)" % r["recovery_s"])
    for line in problems:
        print("goodput floor missed: " + line)
    return 1 if problems else 0


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
