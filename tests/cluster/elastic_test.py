#!/usr/bin/env python3
"""Elastic training across the namespace cluster (tests/cluster/cluster.py): kindling-run
--nnodes MIN:MAX on every host, tests/cluster/elastic_train.cpp as the job.

  lose_and_rejoin  3 hosts; host 2 is killed (every process at once) mid-epoch; the job goes
                   on at 2 hosts from its last checkpoint; host 2 starts again and joins at
                   the next round (2 -> 3); the job completes. Checked: every sample of every
                   epoch is in the weights exactly once (the ledger kept in the checkpoint),
                   each iteration trained the same global batch as an uninterrupted 2-host run,
                   the final weights equal that run's, each round's layout and restart count,
                   and the final checkpoint evaluated by one process equals the distributed
                   evaluation.
  cifar10_loses_a_host
                   examples/cifar10 (the main job) on 3 hosts; host 2 is killed after the first
                   checkpoints: the job goes on at 2 ranks in the run folder it started, from
                   its last checkpoint at the same sample (the global batch is kept), and
                   completes every iteration of every epoch.
  late_after_close_live
                   3 hosts under --live_recovery; host 2 starts the moment round 0 closes (at 2
                   hosts, after the last call, which the members spent waiting): round 1 takes all 3
                   hosts (it left out a healthy one before, taken back a round later: the wait in
                   the round counted as the silence of a lost agent).
  refusal_after_loss
                   3 hosts, a global batch of 9; host 2 is killed: the 2-rank world refuses the
                   3-rank checkpoint in every attempt, and the job ends at the second refusal
                   (restart 2 of 3), whichever rank reports it first (before, the rank in the
                   message made two refusals differ when the other rank reported first: then
                   every restart was spent: 4 of 5 runs).
  failure_stops_every_node
                   2 hosts, --max_restarts 0, a program without collectives: rank 0 fails, and
                   host 1's launcher, told by the rendezvous that the job failed, stops its rank
                   at once (not when the program would end) and exits non-zero.
  below_min        2 hosts, --nnodes 2:3; host 1 is killed: the next round cannot reach MIN,
                   and host 0's launcher ends non-zero within the join timeout, naming node1.
  torchrun_loses_a_host
                   (by hand, not in CTest: the figure beside lose_and_rejoin's and live_test.py's)
                   the same job and kill under torchrun --nnodes 2:3 --max_restarts 3 (c10d
                   rendezvous at node0:29400, last_call_timeout=3, the same checkpoints): how
                   long until the 2-rank world trains, how many iterations are redone, every
                   sample once.

  tests/cluster/elastic_test.py --build build -k lose_and_rejoin
  tests/cluster/elastic_test.py --build build -k lose_and_rejoin --trials 10   # figures for the docs
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402
import elastic_job  # noqa: E402
from checks import case, expect  # noqa: E402
from elastic_job import SAMPLES, Host, check_ledger, close, eval_line, kill_mid_epoch, launcher, lost_and_repeated, read_ledger, reference_run, starts, weights, workspace  # noqa: E402,E501


def lose_and_rejoin_trial(args, c, folder):
    """One trial; returns its figures."""
    hosts = [Host(c, k, launcher(args, "elastic", folder)) for k in range(3)]
    try:
        last_before, j, first_after, resumed = kill_mid_epoch(c, hosts[0])
        k = hosts[0].wait_line(r"PROGRESS world=2 iteration=(6\d|7\d)\b", 120, j)
        rejoined = Host(c, 2, launcher(args, "elastic", folder))
        hosts[2] = rejoined
        hosts[0].wait_line(r"PROGRESS world=3 ", 120, k)
        codes = [h.finish(180) for h in hosts]
    finally:
        Host.kill_left(hosts)
    for h, code in zip(hosts, codes):
        expect(code == 0, "host %d's launcher exited %s:\n%s" % (h.k, code, h.text()))
    by_iteration, count = read_ledger(folder)
    lost, repeated = lost_and_repeated(count)
    return {"hosts": hosts, "by_iteration": by_iteration, "count": count, "lost": lost, "repeated": repeated,
            "resume_seconds": resumed, "iterations_redone": last_before - first_after + 1}


@case
def lose_and_rejoin(args):
    with workspace("kindling-elastic-") as work:
        with cluster.Cluster(hosts=3) as c:
            ref_text, ref_iterations = reference_run(c, work, lambda k, f: launcher(args, "reference", f))
            figures = []
            for trial in range(args.trials):
                folder = os.path.join(work, "trial%d" % trial)
                os.makedirs(folder)
                result = lose_and_rejoin_trial(args, c, folder)
                check_trial(args, c, result, folder, ref_text, ref_iterations)
                figures.append(result)
                print("trial %d: lost %d, repeated %d, resumed %.1f s after the kill, %d iterations redone" % (
                    trial, result["lost"], result["repeated"], result["resume_seconds"], result["iterations_redone"]))
            if args.trials > 1:
                report(figures)


def check_trial(args, c, result, folder, reference_text, ref_iterations):
    hosts = result["hosts"]
    check_ledger(folder, ref_iterations)
    # The rounds, as host 0 saw them: 3 nodes, then 2 (node2 left out, restart 1), then 3
    # again (a membership change: still restart 1).
    rounds = [line for line in hosts[0].lines if re.search(r"rendezvous round \d+ \(", line)]
    expect(len(rounds) == 3, "expected 3 rendezvous rounds on host 0, got:\n" + "\n".join(rounds))
    expect("round 1 (restart 1): 2 nodes [node0,node1]" in rounds[1] and "node2 (%s)" % c.address(2) in rounds[1],
           "round 1 should run node0 and node1 and name node2 as left out: " + rounds[1])
    expect("round 2 (restart 1): 3 nodes [node0,node1,node2]" in rounds[2], "round 2: " + rounds[2])
    want = [("3", "0"), ("2", "1"), ("3", "1")]
    seen = [(s["world"], s["restart"]) for s in starts(hosts[0])]
    expect(seen == want, "host 0's worker started with (world, restart) %s, expected %s" % (seen, want))
    for s in starts(hosts[0]) + starts(hosts[1]) + starts(hosts[2]):
        expect(s["nnodes"] == s["world"] and s["node_rank"] == s["rank"] and s["local_rank"] == "0",
               "a worker's layout is wrong: %s" % s)
    close_weights = zip(weights(hosts[0].text()), weights(reference_text))
    for n, (a, b) in enumerate(close_weights):
        # The same samples in the same global batches: only the all-reduce's order of additions
        # differs (3 or 2 partial sums), a few float32 ulps per step over 150 steps.
        close(a, b, 1e-5, "weight %d against the uninterrupted run" % n)
    one = subprocess.run([args.elastic_train, "evaluate", folder, "--samples", str(SAMPLES)], capture_output=True,
                         text=True)
    expect(one.returncode == 0, "evaluate failed: " + one.stderr)
    distributed, single = eval_line(hosts[0].text()), eval_line(one.stdout)
    for name, a, b in zip(("mse", "mae"), distributed, single):
        close(a, b, 1e-6, name + " of the 3-rank evaluation against one process")


def report(figures):
    n = len(figures)
    completed = sum(1 for f in figures if f["lost"] == 0 and f["repeated"] == 0)
    print("| trials | completed | samples lost | samples repeated | resumed after (s, median) |"
          " iterations redone (median) |")
    print("|---|---|---|---|---|---|")
    resume = sorted(f["resume_seconds"] for f in figures)
    redone = sorted(f["iterations_redone"] for f in figures)
    print("| %d | %d | %d | %d | %.1f (%.1f-%.1f) | %d (%d-%d) |" % (
        n, completed, sum(f["lost"] for f in figures), sum(f["repeated"] for f in figures), resume[n // 2],
        resume[0], resume[-1], redone[n // 2], redone[0], redone[-1]))


def torchrun_command(args, folder):
    """torchrun (the build's Python's torch.distributed.run) starting elastic_train on one host.
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: torch >= 2.4's agent keeps one store for every restart
    and nothing scopes the workers' gloo keys by attempt, so a restarted rank can read a peer's
    address of the attempt before (2 of 4 trials here failed so: docs/fault-tolerance.md); with
    the variable each attempt's rank 0 hosts a store of its own."""
    return ["env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2:3", "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", "node0:29400", "--rdzv_id", "torchrun-elastic",
            "--rdzv_conf", "join_timeout=60,last_call_timeout=3", "--max_restarts", "3", "--monitor_interval", "0.1",
            "--no_python", args.elastic_train, "train", folder, "--samples", str(SAMPLES), "--batch",
            str(elastic_job.BATCH), "--epochs", str(elastic_job.EPOCHS), "--save-every", str(elastic_job.SAVE_EVERY),
            "--sleep-ms", str(args.sleep_ms)]


@case
def torchrun_loses_a_host(args):
    if args.k != "torchrun_loses_a_host":
        print("torchrun_loses_a_host: not run (by hand only: -k torchrun_loses_a_host)")
        return
    with workspace("kindling-elastic-torchrun-") as work:
        with cluster.Cluster(hosts=3) as c:
            figures = []
            for trial in range(args.trials):
                folder = os.path.join(work, "trial%d" % trial)
                os.makedirs(folder)
                hosts = [Host(c, k, torchrun_command(args, folder)) for k in range(3)]
                try:
                    last_before, _, first_after, resumed = kill_mid_epoch(c, hosts[0])
                    codes = [h.finish(180) for h in hosts[:2]]
                except Exception:
                    print("host 1's output:\n" + hosts[1].text())
                    raise
                finally:
                    Host.kill_left(hosts)
                expect(codes == [0, 0], "torchrun failed on host 0 or 1:\n%s\n%s" % (hosts[0].text(), hosts[1].text()))
                lost, repeated = lost_and_repeated(read_ledger(folder)[1])
                expect(lost == 0 and repeated == 0, "samples lost %d, repeated %d" % (lost, repeated))
                figures.append({"lost": lost, "repeated": repeated, "resume_seconds": resumed,
                                "iterations_redone": last_before - first_after + 1})
                print("torchrun trial %d: resumed %.1f s after the kill, %d iterations redone" % (
                    trial, resumed, last_before - first_after + 1))
            report(figures)


@case
def cifar10_loses_a_host(args):
    out = tempfile.mkdtemp(prefix="kindling-elastic-cifar10-")
    epochs, per_epoch = 2, 10
    try:
        with cluster.Cluster(hosts=3) as c:
            command = [args.kindling_run, "--nnodes", "2:3", "--nproc_per_node", "1", "--rdzv_endpoint", "node0",
                       "--rdzv_id", "cifar10-elastic", "--max_restarts", "2", "--rdzv_conf", "last_call_timeout=3",
                       args.cifar10, "--train_subset", str(48 * per_epoch), "--test_subset", "96", "--batch_size",
                       "48", "--num_epochs", str(epochs), "--num_workers", "0", "--log_every_iters", "1",
                       "--checkpoint_every", "2", "--output_path", out]
            hosts = [Host(c, k, command) for k in range(3)]
            try:
                hosts[0].wait_line(r"\[rank0\]: Epoch \[1/%d\]: \[[5-8]/%d\]" % (epochs, per_epoch), 240)
                c.kill_host(2)
                codes = [h.finish(240) for h in hosts[:2]]
            finally:
                Host.kill_left(hosts)
            text = hosts[0].text()
            expect(codes == [0, 0], "hosts 0 and 1 exited %s after losing host 2:\n%s" % (codes, text))
            resumed = re.search(r"Resumed from (\S+) at iteration (\d+)", text)
            expect(resumed, "no 'Resumed from' line after the loss:\n" + text)
            expect("the same global batch, so the epoch goes on at the same sample" in text,
                   "the 2-rank round did not go on at the same sample:\n" + text)
            folders = [f for f in os.listdir(out) if os.path.isdir(os.path.join(out, f))]
            expect(len(folders) == 1 and resumed.group(1).startswith(os.path.join(out, folders[0])),
                   "the restart at 2 ranks did not continue in the job's run folder: %s" % folders)
            last = os.path.join(out, folders[0], "training_checkpoint_%d.pt" % (epochs * per_epoch))
            expect(os.path.exists(last), "no checkpoint of the last iteration %d: %s" % (
                epochs * per_epoch, os.listdir(os.path.join(out, folders[0]))))
            expect("| %d | " % epochs in text and "2 process(es) on gloo" in text,
                   "rank 0 printed no result of the 2-rank round's last epoch:\n" + text)
    finally:
        shutil.rmtree(out, ignore_errors=True)


@case
def below_min(args):
    with workspace("kindling-elastic-") as work:
        with cluster.Cluster(hosts=2) as c:
            hosts = [Host(c, k, launcher(args, "below", work, join_timeout=8)) for k in range(2)]
            try:
                hosts[0].wait_line(r"PROGRESS world=2 iteration=1\d\b", 120)
                killed_at = time.monotonic()
                c.kill_host(1)
                code = hosts[0].finish(60)
            finally:
                Host.kill_left(hosts)
            took = time.monotonic() - killed_at
            text = hosts[0].text()
            expect(code not in (0, None), "host 0's launcher exited %s after losing host 1:\n%s" % (code, text))
            expect("fewer than the minimum of 2" in text and "lost since round 0: node1 (%s)" % c.address(1) in text,
                   "host 0 should say the round has fewer than MIN nodes and name node1:\n" + text)
            expect(took < 8 + 3 + 30, "host 0 ended %.0f s after the loss, beyond the join timeout" % took)
            expect(not c.pids_on(0), "processes left on host 0: %s" % c.pids_on(0))


@case
def late_after_close_live(args):
    with workspace("kindling-elastic-") as work:
        with cluster.Cluster(hosts=3) as c:
            start = lambda k: launcher(args, "late", work, command="train-live", flags=("--live_recovery",))  # noqa: E731
            hosts = [Host(c, k, start(k)) for k in range(2)]
            try:
                # Host 2 starts the moment host 0 reports round 0 (closed at 2 hosts by the last call).
                hosts[0].wait_line(r"rendezvous round 0 \(restart 0\): 2 nodes", 60)
                hosts.append(Host(c, 2, start(2)))
                codes = [h.finish(180) for h in hosts]
            finally:
                Host.kill_left(hosts)
            for h, code in zip(hosts, codes):
                expect(code == 0, "host %d's launcher exited %s:\n%s" % (h.k, code, h.text()))
            rounds = [line for line in hosts[0].lines if re.search(r"rendezvous round \d+ \(", line)]
            expect(len(rounds) == 2 and "round 1 (restart 0): 3 nodes [node0,node1,node2]" in rounds[1],
                   "host 2 arrived just after round 0 closed: round 1 should take all 3 hosts, and no host should "
                   "be left out; host 0 saw:\n" + "\n".join(rounds))


@case
def refusal_after_loss(args):
    with workspace("kindling-elastic-") as work:
        with cluster.Cluster(hosts=3) as c:
            # A global batch of 9: 3 per rank at 3 ranks, 4 at 2 (auto_dataloader floors it), so the
            # 2-rank world refuses the 3-rank checkpoint (a position of 9k samples is no whole number
            # of 8-sample iterations), on both ranks, in every attempt.
            hosts = [Host(c, k, launcher(args, "refusal", work, extra=("--batch", "9"))) for k in range(3)]
            try:
                hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
                c.kill_host(2)
                codes = [h.finish(120) for h in hosts[:2]]
            finally:
                Host.kill_left(hosts)
            text = hosts[0].text()
            expect(codes[0] not in (0, None) and codes[1] not in (0, None), "hosts 0 and 1 exited %s" % codes)
            expect("refused twice in a row the same way with the same 2 node(s)" in text and
                   "(restarts made 2 of 3)" in text and "not a whole number of iterations of 8 samples" in text,
                   "the refusal at world size 2 should end the job at its second occurrence (restart 2 of 3), "
                   "whichever rank reported it first:\n" + text)


@case
def failure_stops_every_node(args):
    # The program makes no collective: nothing but the launchers can stop host 1's rank.
    program = ["/bin/sh", "-c", 'if [ "$RANK" = 0 ]; then sleep 3; exit 3; else sleep 100; fi']
    with cluster.Cluster(hosts=2) as c:
        hosts = [Host(c, k, [args.kindling_run, "--nnodes", "2", "--nproc_per_node", "1", "--rdzv_endpoint",
                             "node0:29400", "--rdzv_id", "fails", "--max_restarts", "0"] + program) for k in range(2)]
        try:
            hosts[0].wait_line(r"rendezvous round 0 \(restart 0\)", 60)
            started = time.monotonic()
            codes = [h.finish(60) for h in hosts]
        finally:
            Host.kill_left(hosts)
        took = time.monotonic() - started
        text = "\n".join("== host %d (exit %s)\n%s" % (h.k, code, h.text()) for h, code in zip(hosts, codes))
        expect(codes[0] == 3 and codes[1] not in (0, None), "the hosts exited %s:\n%s" % (codes, text))
        expect(took < 3 + 10, "host 1 ran on %.0f s after rank 0 failed:\n%s" % (took, text))
        expect("the failure was on node0 (%s): rank 0 exited with code 3; stopping this node's workers" % c.address(0)
               in hosts[1].text(), "host 1 should say the job failed on node0 and that it stops its workers:\n" + text)


def main():
    return elastic_job.main(__doc__)


if __name__ == "__main__":
    sys.exit(main())
