#!/usr/bin/env python3
"""Goodput under steady failures: a training job on the namespace cluster (tests/cluster/cluster.py,
4 hosts, one rank each) while a host fails every --every seconds and comes back --back seconds
later, for --minutes; what the job kept of the time the hosts were up.

The job is tests/fault/goodput_train.cpp (dist_tutorial train's network and data, a global batch
of --batch divided among the ranks, a step lasting at least --pace-ms-per-sample times a rank's
share: each host trains as if it had a device of its own, whatever number of hosts share this
machine's cores, so the job's rate is that of the hosts up). Modes (--mode, goodput_modes.py):
live-etcd, live-c10d, restart (kindling-run), torchrun (--max_restarts), torchft (0.2.0, its
lighthouse on host 0). Where host 0 serves the rendezvous or the lighthouse (live-c10d,
torchrun, torchft), host 0 never fails: the others do.
Faults (--fault): kill (every process of the host SIGKILLed: its address still answers, so
connections to it are refused), power (its link cut, then every process killed: nothing answers
any more), stop (every process SIGSTOPped, SIGCONT when it comes back), cut (its link down,
up again when it comes back). A killed host comes back as a new node: its etcd member and its
launcher started again.

Reported (one JSON object):
  goodput       the samples in the final weights (the job's ledger) over the samples the hosts
                could have trained while they were up, at the failure-free rate per host measured
                before the first failure: time a host is down costs nothing by itself, what
                survivors and joiners lose does
  samples_per_s the samples in the final weights over the wall time of the schedule
  recovery_s    per failure, from the fault to the first step of a smaller world
  redone        work thrown away: iterations trained again (a step numbered again after a
                failure); torchft: replica steps that did not commit
  lost/repeated samples of completed epochs never trained / trained twice in one epoch (ledger;
                torchft: unknown, see goodput_modes.in_weights)
  restarted     worker processes started again by their launcher (not by the harness)

  tests/fault/goodput.py --build build --mode live-etcd --minutes 10             # docs figure
  tests/fault/goodput.py --build build --plan ci                                 # CTest goodput_ci
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))
import cluster  # noqa: E402
import checks  # noqa: E402
from elastic_job import Host, workspace  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
import goodput_modes as modes  # noqa: E402

FAULTS = ["kill", "power", "stop", "cut"]


class Job:
    """The launchers of the hosts, their faults and their returns."""

    def __init__(self, args, c, work, etcd):
        self.args, self.c, self.work, self.etcd = args, c, work, etcd
        self.hosts = {}     # k -> [Host, ...] (a host started again is a new Host)
        self.down = {}      # k -> when it failed (time.time())
        self.down_spans = []  # (k, failed at, back at)
        self.extra = []     # processes of the mode's own (torchft's lighthouse)
        self.events = []    # (time.time(), what the harness did), for the log

    def start(self, k):
        self.hosts.setdefault(k, []).append(Host(self.c, k, modes.command(self.args, k, self.work, self.etcd, self.c)))

    def fail(self, k):
        fault = self.args.fault
        self.down[k] = time.time()
        self.events.append((self.down[k], "harness: host %d fails (%s)" % (k, fault)))
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
        self.events.append((time.time(), "harness: host %d back" % k))

    def write_log(self, path):
        """Every launcher's lines and the harness's faults, in the order they came, each with
        its wall-clock time and host (the phases of a world change read off it)."""
        offset = time.time() - time.monotonic()
        rows = list(self.events)
        for k, runs in self.hosts.items():
            for n, h in enumerate(runs):
                with h.cond:
                    rows.extend((offset + t, "host %d/%d: %s" % (k, n, line)) for t, line in zip(h.times, h.lines))
        with open(path, "w") as f:
            f.writelines("%.3f %s\n" % row for row in sorted(rows, key=lambda row: row[0]))

    def lines(self):
        """Every (host, line) of every launcher's output."""
        out = []
        for k, runs in self.hosts.items():
            for h in runs:
                with h.cond:
                    out.extend((k, line) for line in h.lines)
        return out


def steps(job):
    """What every host reported: [(t, world, step, samples, committed)] by time (modes.records)."""
    return modes.records(job.args.mode, [line for _, line in job.lines()])


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
    candidates = [k for k in range(args.hosts) if not (args.mode in modes.HOST0_SERVES and k == 0)]
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


def recovery_times(all_steps, faults, hosts):
    """Per failure, seconds from the fault to the first step of a smaller world (None: none)."""
    out = []
    for k, at in faults:
        before = [s for s in all_steps if s[0] <= at]
        world = before[-1][1] if before else hosts
        after = [s for s in all_steps if s[0] > at and s[1] < world and s[4]]
        out.append(round(after[0][0] - at, 2) if after else None)
    return out


def summarize(args, job, rate, first, started, stopped, faults):
    """The figures of a run (see the module's docstring)."""
    all_steps = steps(job)
    lines = [line for _, line in job.lines()]
    up_seconds = args.hosts * (stopped - first)
    for k, failed, back in job.down_spans:
        up_seconds -= back - failed
    trained, lost, repeated = modes.in_weights(args.mode, lines, all_steps)
    checks.expect(trained is not None, "no single LEDGER line in the job's output")
    recoveries = recovery_times(all_steps, faults, args.hosts)
    restarted = sum(max(0, modes.starts(args.mode, h.lines) - 1) for runs in job.hosts.values() for h in runs)
    known = [r for r in recoveries if r is not None]
    return {
        "mode": args.mode, "fault": args.fault, "hosts": args.hosts, "every_s": args.every, "back_s": args.back,
        "seconds": round(stopped - started, 1), "failures": len(faults), "rate_per_host": round(rate, 1),
        "goodput": round(trained / (rate * up_seconds), 3) if rate > 0 else None,
        "trained": trained, "samples_per_s": round(trained / (stopped - first), 1),
        "recovery_s": recoveries, "recovery_median_s": round(statistics.median(known), 2) if known else None,
        "recovery_max_s": max(known) if known else None, "unrecovered": recoveries.count(None),
        "redone": modes.redone(args.mode, all_steps), "lost": lost, "repeated": repeated, "restarted": restarted,
        "hosts_failed": sorted({k for k, _ in faults}),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--mode", choices=modes.MODES, default="live-etcd")
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
    p.add_argument("--log", help="write every launcher's output and the faults to this file, in time order")
    args = p.parse_args()
    if args.plan == "ci":
        args.mode, args.fault, args.minutes, args.every, args.back = "live-etcd", "kill", 2, 15, 5
    skip = checks.prepare(args)
    if skip:
        return skip
    args.goodput_train = os.path.join(os.path.abspath(args.build), "tests", "goodput_train")
    args.python = sys.executable
    if args.mode == "torchft" and modes.peer_paths(args):
        print("skipped: " + modes.peer_paths(args))
        return 77
    rng = random.Random(args.seed)
    with workspace("kindling-goodput-") as work:
        with cluster.Cluster(hosts=args.hosts) as c:
            etcd_hosts = range(min(3, args.hosts)) if args.mode in modes.ETCD else []
            with EtcdCluster(c, etcd_hosts) if etcd_hosts else _Nothing() as etcd:
                job = Job(args, c, work, etcd)
                if args.mode == "torchft":
                    job.extra.append(c.popen_on(0, modes.lighthouse(args), stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))
                try:
                    rate, first, started, stopped, faults = run_schedule(args, job, rng)
                finally:
                    for runs in job.hosts.values():
                        Host.kill_left(runs)
                    for proc in job.extra:
                        proc.kill()
                        proc.wait()
                    if args.log:
                        job.write_log(args.log)
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
