#!/usr/bin/env python3
"""Live recovery across the namespace cluster (tests/cluster/cluster.py): kindling-run
--live_recovery on every host, tests/cluster/elastic_train.cpp's train-live (kh::LiveRecovery,
no checkpoint on disk) as the job (tests/cluster/elastic_job.py).

  lose_and_rejoin_live  3 hosts, --nnodes 2:3; host 2 is killed (every process at once)
                        mid-epoch; hosts 0 and 1 go on at 2 ranks in the same processes from
                        the last iteration committed in memory; host 2 starts again and joins
                        (2 -> 3), receiving the state from rank 0; the job completes. Checked:
                        no process of hosts 0 and 1 started again (one START and the same pid in
                        each WORLD line), every sample of every epoch once (the ledger), each
                        iteration's global batch and the final weights as in an uninterrupted
                        2-host run, at most 1 iteration redone.

  stopped_host_live     3 hosts, --nnodes 2:3; every process of host 2 is stopped (SIGSTOP:
                        its agent too, so nothing tells the others) mid-epoch; the stall period
                        (5 s here) ends the waits of hosts 0 and 1, which form a 2-rank world in
                        the same processes; host 2, continued (SIGCONT) once they train, hears
                        that it was left out and rejoins in its own processes (2 -> 3). Checked: no
                        process started again on any host, the worlds, every sample once.

  lose_and_rejoin_live_sharded
                        lose_and_rejoin_live's kill and join with the model sharded (train-live
                        --sharding zero3, then zero2): each rank commits its own part of the
                        weights and of SGD's state and keeps a copy of its buddy's (the next
                        host's); host 2's part comes back from host 0's copy, and the joiner gets its
                        new part from the survivors. Checked against the uninterrupted DDP run (2
                        hosts): the ledger, each iteration's global batch, the final weights
                        (1e-5 relative), no process of hosts 0 and 1 started again, at most 1
                        iteration redone.

  sharded_part_lost_live
                        3 hosts, --nnodes 1:3, the model sharded (ZeRO-3): hosts 1 and 2 killed at once
                        mid-epoch, so that rank 1's part is lost with its copy (on rank 2). Checked:
                        host 0's worker says which part was lost with its copy and how to go on (a
                        checkpoint), and leaves its world (the launcher starts it again, --max_restarts 3)
                        instead of training on with weights it does not have.

  cut_host_live         3 hosts, --nnodes 2:3; host 2's link is cut mid-epoch (its processes keep
                        running and hear nothing); hosts 0 and 1 go on at 2 ranks once the stall
                        period (5 s) ends their waits and host 2's agent has been silent for 3 s;
                        the link healed, host 2's agent reaches the rendezvous again and its
                        workers rejoin in their own processes (2 -> 3). Checked: no process
                        started again on any host, the worlds, every sample once.

  parallel_lose_and_rejoin_live
                        lose_and_rejoin_live's kill and join with the job started by
                        kd::Parallel's elastic spawn mode with live_recovery (elastic_train
                        parallel-live: Parallel's agent in the program, no kindling-run). Checked:
                        no process of hosts 0 and 1 started again, every sample once, at most 1
                        iteration redone.

  lost_while_starting_live
                        3 hosts, --nnodes 2:3; host 2 is killed (every process) half a second
                        after round 0 closed, while the workers are inside initialize(): the agents
                        form round 1 at once, and the survivors' workers give round 0's
                        half-made world up and make round 1's in the same processes instead of
                        waiting out the rendezvous timeout (60 s here). Checked: hosts 0 and 1
                        train at 2 ranks within 15 s of the kill, in their first processes, every
                        sample once.

  second_loss_live      3 hosts, --nnodes 1:3; host 2 is killed mid-epoch and host 1 as soon as
                        the round without host 2 closed, during the recovery: host 0 gives that
                        round's half-made world up for the next one and trains alone within 15 s. Checked: no process of host 0
                        started again, every sample once, at most 1 iteration redone.

  lost_while_joining_live
                        3 hosts, --nnodes 2:3; host 2 killed and started again; while it joins
                        (the round that takes it back closed), host 1 is killed: hosts 0 and 2 make the next world
                        within 15 s. Checked: host 0's worker in its first process, host 2's
                        started once, every sample once.

  warm_join_live        3 hosts, --nnodes 2:3; host 2 killed mid-epoch and started again with
                        --warm_join, its program spending 3 s on set-up before it initializes:
                        hosts 0 and 1 train on at 2 ranks meanwhile, and stop only to make the
                        3-rank world once host 2's worker waits in initialize(). Checked: 2-rank
                        steps more than 2.5 s after host 2 started, a pause under 2.5 s between the
                        last 2-rank step and the first 3-rank one, host 2 joined after its
                        worker waited, no process started again, every sample once.

  soak                  (by hand, not in CTest) 3 hosts, --nnodes 2:3: for --soak-minutes (10),
                        every 20-30 s host 1 or 2 (in turn) is killed and started again 10 s
                        later; the job runs on until its epochs are done. Checked: every
                        launcher of the last hosts exits 0, every sample of every epoch once.

  tests/cluster/live_test.py --build build -k lose_and_rejoin_live [--trials 10]
  tests/cluster/live_test.py --build build -k soak [--soak-minutes 10]
"""
import contextlib
import os
import random
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402
import elastic_job  # noqa: E402
from checks import case, expect  # noqa: E402
from elastic_job import Host, check_ledger, close, kill_mid_epoch, launcher, lost_and_repeated, read_ledger, reference_run, starts, weights, workspace  # noqa: E402,E501


def live_launcher(args, run_id, folder, stall_seconds=None, sleep_ms=None, sharding=None):
    extra = () if sleep_ms is None else ("--sleep-ms", str(sleep_ms))
    extra += () if sharding is None else ("--sharding", sharding)
    argv = launcher(args, run_id, folder, command="train-live", flags=("--live_recovery",), extra=extra)
    return argv if stall_seconds is None else ["env", "KINDLING_STALL_TIMEOUT=%d" % stall_seconds] + argv


def parallel_launcher(args, run_id, folder):
    """The job on one host started by kd::Parallel (elastic, live_recovery): elastic_train
    parallel-live, whose Parallel serves or joins the rendezvous at node0:29400 itself."""
    tmp = os.path.join(folder, "tmp")
    os.makedirs(tmp, exist_ok=True)
    return ["env", "TMPDIR=" + tmp, args.elastic_train, "parallel-live", folder, "--endpoint", "node0:29400",
            "--nodes", "2:3", "--rdzv-id", run_id, "--samples", str(elastic_job.SAMPLES), "--batch",
            str(elastic_job.BATCH), "--epochs", str(elastic_job.EPOCHS), "--sleep-ms", str(args.sleep_ms)]


def worlds(host):
    """(rank, world, pid) of each WORLD line of a host's output."""
    return [tuple(int(v) for v in m) for m in re.findall(r"WORLD rank=(\d+) world=(\d+) pid=(\d+)", host.text())]


def check_kept(hosts, expected_worlds, folder, ref_text, ref_iterations, rank0):
    """No process of `hosts` started twice; their worlds, in one process each; the ledger and the
    final weights (printed by `rank0`'s host) against the uninterrupted run."""
    for h in hosts:
        expect(len(starts(h)) == 1, "host %d's worker started %d times (a restart):\n%s" % (
            h.k, len(starts(h)), h.text()))
        pid = int(starts(h)[0]["pid"])
        seen = worlds(h)
        expect([w for _, w, _ in seen] == expected_worlds and all(p == pid for _, _, p in seen),
               "host %d's worlds (rank, world, pid) %s, expected worlds %s in process %d" % (
                   h.k, seen, expected_worlds, pid))
    if ref_iterations is None:  # no uninterrupted run to compare with: every sample once
        lost, repeated = lost_and_repeated(read_ledger(folder)[1])
        expect(lost == 0 and repeated == 0, "samples lost %d, repeated %d" % (lost, repeated))
        return
    check_ledger(folder, ref_iterations)
    for n, (a, b) in enumerate(zip(weights(rank0.text()), weights(ref_text))):
        close(a, b, 1e-5, "weight %d against the uninterrupted run" % n)


def trial(args, c, folder, ref_text, ref_iterations, start=None):
    """Host 2 killed at 3 ranks and started again; `start(k)`: host k's command (kindling-run's)."""
    start = start or (lambda k: live_launcher(args, "live", folder))
    hosts = [Host(c, k, start(k)) for k in range(3)]
    try:
        last_before, j, first_after, resumed = kill_mid_epoch(c, hosts[0])
        k = hosts[0].wait_line(r"PROGRESS world=2 iteration=(6\d|7\d)\b", 120, j)
        hosts[2] = Host(c, 2, start(2))
        joined_at = time.monotonic()
        m = hosts[0].wait_line(r"PROGRESS world=3 ", 120, k)
        joined = hosts[0].times[m] - joined_at
        for h in hosts:
            expect(h.finish(180) == 0, "host %d's launcher failed:\n%s" % (h.k, h.text()))
    finally:
        Host.kill_left(hosts)
    check_kept(hosts[:2], [3, 2, 3], folder, ref_text, ref_iterations, hosts[0])
    redone = last_before - first_after + 1
    expect(redone <= 1, "%d iterations redone after the loss (last before %d, first after %d)" % (
        redone, last_before, first_after))
    return resumed, joined, redone


@case
def lose_and_rejoin_live(args):
    with workspace("kindling-live-") as work:
        with cluster.Cluster(hosts=3) as c:
            ref_text, ref_iterations = reference_run(c, work, lambda k, f: live_launcher(args, "reference", f))
            figures = []
            for n in range(args.trials):
                folder = os.path.join(work, "trial%d" % n)
                os.makedirs(folder)
                figures.append(trial(args, c, folder, ref_text, ref_iterations))
                print("trial %d: the 2-rank world trained %.1f s after the kill (%d iteration(s) redone); the "
                      "3-rank world %.1f s after host 2 started again" % (n, figures[-1][0], figures[-1][2],
                                                                          figures[-1][1]))


@case
def lose_and_rejoin_live_sharded(args):
    with workspace("kindling-live-sharded-") as work:
        with cluster.Cluster(hosts=3) as c:
            ref_text, ref_iterations = reference_run(c, work, lambda k, f: live_launcher(args, "reference", f))
            for sharding in ("zero3", "zero2"):
                folder = os.path.join(work, sharding)
                os.makedirs(folder)
                resumed, joined, redone = trial(args, c, folder, ref_text, ref_iterations,
                                                start=lambda k: live_launcher(args, sharding, folder, sharding=sharding))
                print("%s: the 2-rank world trained %.1f s after the kill (%d iteration(s) redone); the 3-rank world "
                      "%.1f s after host 2 started again" % (sharding, resumed, redone, joined))


@case
def sharded_part_lost_live(args):
    with live_job(args, "kindling-live-lost-part-", "1:3", ("--sharding", "zero3")) as (c, work, hosts):
        i = hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
        c.kill_host(1)
        c.kill_host(2)
        m = hosts[0].wait_line(r"rank 1 of the last commit's world \(3 ranks, iteration \d+\) was lost together "
                               r"with the rank that kept the copy", 120, i)
        # The first 1-rank step is the restarted worker's first iteration: nothing trained on without the part.
        j = hosts[0].wait_line(r"PROGRESS world=1 ", 120, i)
        expect(j > m and re.search(r"iteration=1 ", hosts[0].lines[j]), "host 0 trained at 1 rank before or "
               "without starting over: %r\n%s" % (hosts[0].lines[j], hosts[0].text()))
        expect(hosts[0].finish(180) == 0, "host 0's launcher failed:\n" + hosts[0].text())
        expect(len(starts(hosts[0])) == 2, "host 0's worker started %d times, expected 2 (the launcher's restart "
               "after the lost part):\n%s" % (len(starts(hosts[0])), hosts[0].text()))
    print("hosts 1 and 2 lost at once under sharding: host 0 refused to go on without rank 1's part")


@case
def cut_host_live(args):
    with workspace("kindling-live-cut-") as work:
        with cluster.Cluster(hosts=3) as c:
            hosts = [Host(c, k, live_launcher(args, "cut", work, stall_seconds=5, sleep_ms=80)) for k in range(3)]
            cut = False
            try:
                i = hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
                c.cut(2)
                cut, cut_at = True, time.monotonic()
                j = hosts[0].wait_line(r"PROGRESS world=2 ", 120, i)
                resumed = hosts[0].times[j] - cut_at
                k = hosts[0].wait_line(r"PROGRESS world=2 ", 60, j + 1)
                c.heal(2)
                cut, healed_at = False, time.monotonic()
                m = hosts[0].wait_line(r"PROGRESS world=3 ", 120, k)
                back = hosts[0].times[m] - healed_at
                for h in hosts:
                    expect(h.finish(180) == 0, "host %d's launcher failed:\n%s" % (h.k, h.text()))
            finally:
                if cut:
                    c.heal(2)
                Host.kill_left(hosts)
            check_kept(hosts[:2], [3, 2, 3], work, None, None, hosts[0])
            check_kept(hosts[2:], [3, 3], work, None, None, hosts[0])
            print("host 2 cut off: the 2-rank world trained %.1f s after the cut (stall period 5 s); healed, the "
                  "3-rank world %.1f s later" % (resumed, back))


@case
def parallel_lose_and_rejoin_live(args):
    with workspace("kindling-live-parallel-") as work:
        with cluster.Cluster(hosts=3) as c:
            resumed, joined, redone = trial(args, c, work, None, None,
                                            start=lambda k: parallel_launcher(args, "parallel", work))
            print("Parallel: the 2-rank world trained %.1f s after the kill (%d iteration(s) redone); the 3-rank "
                  "world %.1f s after host 2 started again" % (resumed, redone, joined))


@case
def stopped_host_live(args):
    with workspace("kindling-live-") as work:
        with cluster.Cluster(hosts=3) as c:
            # A slower pace (80 ms an iteration): host 2 continued must find the job still running.
            hosts = [Host(c, k, live_launcher(args, "stopped", work, stall_seconds=5, sleep_ms=80)) for k in range(3)]
            try:
                i = hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
                stopped = c.pids_on(2)
                for pid in stopped:
                    os.kill(pid, signal.SIGSTOP)
                stopped_at = time.monotonic()
                j = hosts[0].wait_line(r"PROGRESS world=2 ", 120, i)
                resumed = hosts[0].times[j] - stopped_at
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
                hosts[0].wait_line(r"PROGRESS world=3 ", 120, j)
                for h in hosts:
                    expect(h.finish(180) == 0, "host %d's launcher failed:\n%s" % (h.k, h.text()))
            finally:
                Host.kill_left(hosts)
            # The batches and weights against an uninterrupted run: lose_and_rejoin_live.
            check_kept(hosts[:2], [3, 2, 3], work, None, None, hosts[0])
            check_kept(hosts[2:], [3, 3], work, None, None, hosts[0])
            # Found by its agent's silence (the rendezvous), not by the workers' stall period.
            expect(re.search(r"node\d \([0-9.]+\): its agent has said nothing for 3 s", hosts[0].text()),
                   "host 0 was not told that host 2's agent went silent:\n" + hosts[0].text())
            print("host 2 stopped: the 2-rank world trained %.1f s after the stop (stall period 5 s)" % resumed)


@contextlib.contextmanager
def live_job(args, prefix, nnodes, extra=()):
    """Hosts 0-2 of a new cluster running the live job (train-live, `extra` flags) with --nnodes
    `nnodes` in a new folder; yields (cluster, folder, hosts) and kills the launchers left however
    the case ends."""
    with workspace(prefix) as work:
        with cluster.Cluster(hosts=3) as c:
            hosts = [Host(c, k, launcher(args, "live", work, nnodes=nnodes, command="train-live",
                                         flags=("--live_recovery",), extra=extra)) for k in range(3)]
            try:
                yield c, work, hosts
            finally:
                Host.kill_left(hosts)


def trains_again(host, pattern, lost_at, start, bound=15):
    """The index of `host`'s first line from `start` on matching `pattern`, checked to come within
    `bound` seconds of `lost_at` (the rendezvous timeout is 60 s: a wait that ignores the newer
    round shows as a minute)."""
    i = host.wait_line(pattern, 120, start)
    took = host.times[i] - lost_at
    expect(took <= bound, "host %d trained again %.1f s after the loss, more than %d s:\n%s" % (
        host.k, took, bound, host.text()))
    return i, took


def finish_all(hosts):
    for h in hosts:
        expect(h.finish(180) == 0, "host %d's launcher failed:\n%s" % (h.k, h.text()))


@case
def lost_while_starting_live(args):
    with live_job(args, "kindling-live-start-", "2:3") as (c, work, hosts):
        hosts[0].wait_line(r"rendezvous round 0 \(restart 0\): 3 nodes", 120)
        time.sleep(0.5)
        c.kill_host(2)
        lost_at = time.monotonic()
        _, took = trains_again(hosts[0], r"PROGRESS world=2 ", lost_at, 0)
        hosts[2].finish(30)
        finish_all(hosts[:2])
        check_kept(hosts[:2], [2], work, None, None, hosts[0])
    print("host 2 lost while the workers initialized: the 2-rank world trained %.1f s later" % took)


@case
def second_loss_live(args):
    with live_job(args, "kindling-live-second-", "1:3") as (c, work, hosts):
        i = hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
        last_before = int(re.search(r"iteration=(\d+)", hosts[0].lines[i]).group(1))
        c.kill_host(2)
        # The round without host 2 has closed: hosts 0 and 1 are about to make its world.
        hosts[0].wait_line(r"rendezvous round 1 \(restart \d+\): 2 nodes", 60, i)
        c.kill_host(1)
        lost_at = time.monotonic()
        j, took = trains_again(hosts[0], r"PROGRESS world=1 ", lost_at, i)
        first_after = int(re.search(r"iteration=(\d+)", hosts[0].lines[j]).group(1))
        for h in hosts[1:]:
            h.finish(30)
        finish_all(hosts[:1])
        check_kept(hosts[:1], [3, 1], work, None, None, hosts[0])
    expect(last_before - first_after + 1 <= 1, "%d iterations redone (last before %d, first after %d)" % (
        last_before - first_after + 1, last_before, first_after))
    print("host 2 lost, then host 1 during the recovery: host 0 trained alone %.1f s after the second loss" % took)


@case
def lost_while_joining_live(args):
    with live_job(args, "kindling-live-joining-", "2:3") as (c, work, hosts):
        _, j, _, _ = kill_mid_epoch(c, hosts[0])
        k = hosts[0].wait_line(r"PROGRESS world=2 iteration=(6\d|7\d)\b", 120, j)
        hosts[2].finish(30)
        hosts[2] = Host(c, 2, launcher(args, "live", work, command="train-live", flags=("--live_recovery",)))
        # Host 0's agent has joined the round that takes host 2 back: its workers are about
        # to make that world, which host 1's will never reach.
        m = hosts[0].wait_line(r"rendezvous round \d+ \(restart \d+\): 3 nodes", 60, k)
        c.kill_host(1)
        lost_at = time.monotonic()
        w = hosts[0].wait_line(r"WORLD rank=\d+ world=2 ", 120, m)
        _, took = trains_again(hosts[0], r"PROGRESS world=2 ", lost_at, w)
        hosts[1].finish(30)
        finish_all([hosts[0], hosts[2]])
        seen = [w for _, w, _ in worlds(hosts[0])]
        expect(seen[:2] == [3, 2] and seen[-1] == 2, "host 0's worlds %s, expected 3, 2, ..., 2" % seen)
        check_kept(hosts[:1], seen, work, None, None, hosts[0])
        check_kept(hosts[2:], [2], work, None, None, hosts[0])  # the joiner, not started twice either
    print("host 1 lost while host 2 joined: hosts 0 and 2 trained %.1f s later" % took)

@case
def warm_join_live(args):
    slow = ("--sleep-ms", "80")  # about 11 s of 2-rank training after the kill: the joiner's set-up fits
    with live_job(args, "kindling-live-warm-", "2:3", slow) as (c, work, hosts):
        _, k, _, _ = kill_mid_epoch(c, hosts[0])
        hosts[2].finish(30)
        hosts[2] = Host(c, 2, launcher(args, "live", work, command="train-live",
                                       flags=("--live_recovery", "--warm_join"),
                                       extra=slow + ("--sleep-before-init-ms", "3000")))
        started_at = time.monotonic()
        m = hosts[0].wait_line(r"PROGRESS world=3 ", 120, k)
        two = [i for i in range(k, m) if "PROGRESS world=2 " in hosts[0].lines[i]]
        expect(two and hosts[0].times[two[-1]] > started_at + 2.5, "hosts 0 and 1 stopped training before host 2's "
               "worker was ready (last 2-rank step %.1f s after host 2 started):\n%s" % (
                   hosts[0].times[two[-1]] - started_at if two else -1, hosts[0].text()))
        pause = hosts[0].times[m] - hosts[0].times[two[-1]]
        expect(pause < 2.5, "the 2 -> 3 change paused training %.1f s:\n%s" % (pause, hosts[0].text()))
        waited = hosts[2].wait_line(r"waiting for the round", 10)
        hosts[2].wait_line(r"rendezvous round \d+ \(restart \d+\): 3 nodes", 10, waited)
        finish_all(hosts)
        check_kept(hosts[:2], [3, 2, 3], work, None, None, hosts[0])
        check_kept(hosts[2:], [3], work, None, None, hosts[0])
    print("host 2 joined with --warm_join: the others trained on for %.1f s of its set-up; the change paused "
          "training %.2f s" % (hosts[0].times[two[-1]] - started_at, pause))


@case
def soak(args):
    if args.k != "soak":
        print("soak: not run (by hand only: -k soak)")
        return
    epochs = max(3, int(args.soak_minutes * 60 / 2.3) + 20)  # about 2.3 s an epoch at 3 ranks
    with workspace("kindling-live-soak-") as work:
        with cluster.Cluster(hosts=3) as c:
            def start(k):
                return Host(c, k, launcher(args, "soak", work, command="train-live", extra=("--epochs", str(epochs)),
                                           flags=("--live_recovery", "--max_restarts", "10000")))
            hosts = [start(k) for k in range(3)]
            events = []
            try:
                hosts[0].wait_line(r"PROGRESS world=3 ", 120)
                end = time.monotonic() + args.soak_minutes * 60
                victim = 1
                while time.monotonic() < end and hosts[0].proc.poll() is None:
                    time.sleep(random.uniform(20, 30))
                    c.kill_host(victim)
                    hosts[victim].finish(30)
                    events.append("killed host %d at %.0f s" % (victim, time.monotonic() - end + args.soak_minutes * 60))
                    time.sleep(10)
                    # A node that arrives after the job has ended is refused: stop the chaos near the end.
                    last = re.findall(r"PROGRESS world=\d+ iteration=\d+ epoch=(\d+)", "\n".join(hosts[0].lines[-5:]))
                    if hosts[0].proc.poll() is not None or (last and int(last[-1]) >= epochs - 5):
                        hosts = hosts[:victim] + hosts[victim + 1:]
                        break
                    hosts[victim] = start(victim)
                    victim = 3 - victim
                for h in hosts:
                    expect(h.finish(1800) == 0, "host %d's launcher failed:\n%s" % (h.k, h.text()[-6000:]))
            finally:
                Host.kill_left(hosts)
            lost, repeated = lost_and_repeated(read_ledger(work)[1], epochs)
            expect(lost == 0 and repeated == 0, "samples lost %d, repeated %d" % (lost, repeated))
            worlds_seen = worlds(hosts[0])
            print("soak: %d kills and joins in %.0f min, %d epochs, host 0's worker in one process through %d worlds; "
                  "every sample once" % (len(events), args.soak_minutes, epochs, len(worlds_seen)))


def main():
    return elastic_job.main(__doc__)


if __name__ == "__main__":
    sys.exit(main())
