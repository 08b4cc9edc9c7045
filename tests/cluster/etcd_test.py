#!/usr/bin/env python3
"""The etcd rendezvous across the namespace cluster (tests/cluster/cluster.py): an etcd cluster of
one member per host (tests/cluster/etcd_cluster.py), kindling-run --rdzv_backend etcd on every
host, tests/cluster/elastic_train.cpp as the job (tests/cluster/elastic_job.py).

  loses_first_host  3 hosts, --nnodes 2:3; host 0 serves the rendezvous and runs rank 0 and an
                    etcd member; it is killed whole mid-epoch. The agents of hosts 1 and 2 elect
                    one of them, which serves from the state in etcd; the job goes on at 2 hosts
                    from its last checkpoint (restart 1, node0 named as left out) and completes.
                    Checked: every sample of every epoch once and every iteration (the
                    ledger), the rounds and the takeover. (That each iteration's global batch
                    is an uninterrupted run's is checked by elastic_test.py and live_test.py.)
  loses_first_host_live
                    the same with --live_recovery (elastic_train's train-live): hosts 1 and 2
                    go on at 2 ranks in the same processes, rank 0's state sent from the
                    survivor that becomes rank 0; every sample once.
  second_loss_live  3 hosts, --nnodes 1:3, --live_recovery: host 2 killed mid-epoch, host 1 as
                    soon as the round without host 2 closed (its world half-made): host 0, which
                    serves, gives that world up for the next round and trains alone within 15 s,
                    in its first process, every sample once (live_test.py's case of that name,
                    on the etcd rendezvous; etcd runs on host 0 alone, as a quorum of 3 members
                    would not outlive two of them).
  member_lost       3 hosts, --nnodes 3; the etcd member of the serving host (the first one in
                    that agent's list) is killed mid-epoch: the job completes in its first round,
                    no restart, no other agent takes over.

  tests/cluster/etcd_test.py --build build -k loses_first_host
"""
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402
import elastic_job  # noqa: E402
from checks import case, expect  # noqa: E402
from elastic_job import EPOCHS, ITERATIONS, SAMPLES, Host, launcher, lost_and_repeated, read_ledger, starts, workspace  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402


def etcd_launcher(args, etcd, k, run_id, folder, nnodes, live=False):
    """kindling-run on host k through the etcd rendezvous; its own member first in its list."""
    members = etcd.endpoints().split(",")
    mine = [m for m in members if m.startswith("node%d:" % k)]
    ordered = mine + [m for m in members if m not in mine]
    return launcher(args, run_id, folder, nnodes=nnodes,
                    rdzv=("--rdzv_backend", "etcd", "--rdzv_endpoint", ",".join(ordered)),
                    command="train-live" if live else "train", flags=("--live_recovery",) if live else ())


def start_job(args, c, etcd, run_id, folder, nnodes, hosts, live=False):
    """The job's launchers on `hosts`, the first one started (and serving) before the others."""
    first = Host(c, hosts[0], etcd_launcher(args, etcd, hosts[0], run_id, folder, nnodes, live))
    first.wait_line(r"serving the rendezvous at", 60)
    return [first] + [Host(c, k, etcd_launcher(args, etcd, k, run_id, folder, nnodes, live)) for k in hosts[1:]]


def finish_all(hosts, timeout):
    codes = [h.finish(timeout) for h in hosts]
    for h, code in zip(hosts, codes):
        expect(code == 0, "host %d's launcher exited %s:\n%s" % (h.k, code, h.text()))


def rounds_of(host):
    return [line for line in host.lines if re.search(r"rendezvous round \d+ \(", line)]


def lose_first_host(args, live):
    """Kills host 0 (serving the rendezvous, rank 0, an etcd member) mid-epoch and checks what
    hosts 1 and 2 did: every sample once, the takeover, the rounds, and their workers' starts
    (again at restart 1, or once when `live`)."""
    with workspace("kindling-etcd-") as work:
        with cluster.Cluster(hosts=3) as c, EtcdCluster(c, range(3)) as etcd:
            hosts = start_job(args, c, etcd, "lose-first", work, "2:3", [0, 1, 2], live)
            try:
                hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
                # Rank 0 goes to the survivor that was node 1 (hosts 1 and 2 join in either order).
                order = re.search(r"round 0 \(restart 0\): 3 nodes \[([^\]]*)\]", "\n".join(hosts[0].lines))
                expect(order and order.group(1).split(",")[0] == "node0", "host 0 is not node 0: " + hosts[0].text())
                first = hosts[int(order.group(1).split(",")[1][len("node"):])]
                killed_at = time.monotonic()
                c.kill_host(0)
                j = first.wait_line(r"PROGRESS world=2 ", 120)
                resumed = first.times[j] - killed_at
                finish_all(hosts[1:], 180)
            finally:
                Host.kill_left(hosts)
            by_iteration, count = read_ledger(work)
            lost, repeated = lost_and_repeated(count)
            expect(lost == 0 and repeated == 0, "samples lost %d, repeated %d" % (lost, repeated))
            expect(len(by_iteration) == ITERATIONS, "the ledger holds %d iterations, not %d" % (
                len(by_iteration), ITERATIONS))
            text = hosts[1].text() + "\n" + hosts[2].text()
            expect(re.search(r"serving the rendezvous at .* from round 0 of the agent it replaces", text),
                   "no agent of hosts 1 and 2 took over the rendezvous from round 0:\n" + text)
            # Host 0's port refused: its place in etcd given up at once, not after its lease.
            expect("refuses connections (its process is gone)" in text,
                   "no agent gave host 0's place in etcd up when its port refused:\n" + text)
            for h in hosts[1:]:
                rounds = rounds_of(h)
                expect(len(rounds) == 2 and "round 0 (restart 0): 3 nodes [node0," in rounds[0],
                       "host %d's first round should run node0, node1 and node2:\n%s" % (h.k, "\n".join(rounds)))
                expect(re.search(r"round 1 \(restart 1\): 2 nodes \[node[12],node[12]\]", rounds[1]) and
                       "node0 (" in rounds[1],
                       "round 1 should run node1 and node2 and name node0 as left out: " + rounds[1])
                seen = [(s["world"], s["restart"]) for s in starts(h)]
                want = [("3", "0")] if live else [("3", "0"), ("2", "1")]
                expect(seen == want, "host %d's worker started with (world, restart) %s, not %s" % (h.k, seen, want))
                if live:
                    worlds = re.findall(r"WORLD rank=\d+ world=(\d+) pid=(\d+)", h.text())
                    expect([w for w, _ in worlds] == ["3", "2"] and len({p for _, p in worlds}) == 1,
                           "host %d's worlds (world, pid): %s" % (h.k, worlds))
            print("host 0 lost: the 2-host %s trained %.1f s after the kill" % ("world" if live else "round", resumed))


@case
def loses_first_host(args):
    lose_first_host(args, live=False)


@case
def loses_first_host_live(args):
    lose_first_host(args, live=True)


@case
def second_loss_live(args):
    with workspace("kindling-etcd-second-") as work:
        # etcd on host 0 alone: two of three members lost would take etcd's quorum with them.
        with cluster.Cluster(hosts=3) as c, EtcdCluster(c, [0]) as etcd:
            hosts = start_job(args, c, etcd, "second-loss", work, "1:3", [0, 1, 2], live=True)
            try:
                i = hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
                c.kill_host(2)
                hosts[0].wait_line(r"rendezvous round 1 \(restart \d+\): 2 nodes", 60, i)
                c.kill_host(1)
                lost_at = time.monotonic()
                j = hosts[0].wait_line(r"PROGRESS world=1 ", 120, i)
                took = hosts[0].times[j] - lost_at
                expect(took <= 15, "host 0 trained alone %.1f s after the second loss:\n%s" % (took, hosts[0].text()))
                finish_all(hosts[:1], 180)
            finally:
                Host.kill_left(hosts)
            lost, repeated = lost_and_repeated(read_ledger(work)[1])
            expect(lost == 0 and repeated == 0, "samples lost %d, repeated %d" % (lost, repeated))
            seen = [(s["world"], s["restart"]) for s in starts(hosts[0])]
            expect(seen == [("3", "0")], "host 0's worker started with (world, restart) %s, not once" % seen)
            worlds = re.findall(r"WORLD rank=\d+ world=(\d+) pid=(\d+)", hosts[0].text())
            expect([w for w, _ in worlds] == ["3", "1"] and len({p for _, p in worlds}) == 1,
                   "host 0's worlds (world, pid): %s" % worlds)
            print("etcd: host 2 lost, then host 1 during the recovery: host 0 trained alone %.1f s later" % took)


@case
def member_lost(args):
    with workspace("kindling-etcd-") as work:
        with cluster.Cluster(hosts=3) as c, EtcdCluster(c, range(3)) as etcd:
            hosts = start_job(args, c, etcd, "member-lost", work, "3", [0, 1, 2])
            try:
                hosts[0].wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
                etcd.kill(0)
                finish_all(hosts, 180)
            finally:
                Host.kill_left(hosts)
            _, count = read_ledger(work)
            expect(len(count) == SAMPLES * EPOCHS and max(count.values()) == 1,
                   "the ledger holds %d (epoch, sample) pairs, %d at most once" % (len(count), SAMPLES * EPOCHS))
            every = "\n".join(h.text() for h in hosts)
            expect(every.count("serving the rendezvous at") == 1, "another agent took over:\n" + every)
            for h in hosts:
                expect(len(rounds_of(h)) == 1, "host %d saw more than one round:\n%s" % (h.k, h.text()))


def main():
    return elastic_job.main(__doc__)


if __name__ == "__main__":
    sys.exit(main())
