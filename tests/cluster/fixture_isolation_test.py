#!/usr/bin/env python3
"""Cluster fixtures side by side (tests/cluster/cluster.py): each touches only what it made.

  1. 4 fixtures started at the same moment (4 `cluster.py up` processes): 4 ids, 4 subnets,
     interface names of at most 15 characters, the hosts of each reach each other and not
     the hosts of another fixture;
  2. a process in fixture B, and one in a namespace no fixture made ("kdl-h..."): fixture A
     down, then another fixture up and down, in this process (the Python API): both run on,
     B's hosts still reach each other;
  3. a fixture whose owner process died (stale) is removed by the next up; live ones, and one
     made with `--owner 1` (kept until `down`), are not;
  4. after every down: nothing left of any fixture this test made (namespaces, links, hosts
     files, records).

  tests/cluster/fixture_isolation_test.py      # root; exit 77 (CTest's skip) where it cannot run
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402
import fixture_registry  # noqa: E402
from checks import HELLO_CLIENT as CLIENT, HELLO_SERVER as SERVER  # noqa: E402

CLI = [sys.executable, os.path.join(HERE, "cluster.py")]


class Failure(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


def up_at_once(count, owner):
    """`count` fixtures of 2 hosts started by as many `cluster.py up` at the same moment."""
    procs = [subprocess.Popen(CLI + ["up", "2", "--owner", str(owner)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(count)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    expect(all(p.returncode == 0 for p in procs), "cluster.py up failed:\n" + "\n".join(outputs))
    ids = [line.split("=", 1)[1] for out in outputs for line in out.splitlines() if line.startswith("export ")]
    return [cluster.Cluster.attach(i) for i in ids]


def reaches(c, src, dst_address):
    """Whether host src of fixture c opens a TCP connection to dst_address:7000."""
    r = c.run_on(src, [sys.executable, "-c", CLIENT, dst_address], capture_output=True, text=True, timeout=20)
    return r.returncode == 0 and "hello" in r.stdout


def serve(c, k):
    server = c.popen_on(k, [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    expect(server.stdout.readline().strip() == "listening", f"{c.id}: host {k}'s server did not start")
    return server


def check_side_by_side(fixtures):
    expect(len({c.id for c in fixtures}) == len(fixtures), "two fixtures got one id: %s" % [c.id for c in fixtures])
    subnets = [c.subnet for c in fixtures]
    expect(len(set(subnets)) == len(subnets), "two fixtures got one subnet: %s" % subnets)
    for c in fixtures:
        for name in [c.bridge] + [c.veth(k) for k in range(c.hosts)]:
            expect(len(name) <= 15, f"interface name {name!r} is longer than 15 characters")
    servers = [serve(c, 1) for c in fixtures]
    try:
        for i, c in enumerate(fixtures):
            expect(reaches(c, 0, c.address(1)), f"{c.id}: host 0 cannot reach host 1 ({c.address(1)})")
            other = fixtures[(i + 1) % len(fixtures)]
            expect(not reaches(c, 0, other.address(1)), f"{c.id}'s host 0 reaches {other.id}'s host 1")
    finally:
        for s in servers:
            s.kill()
            s.wait()


def check_down_spares_others(a, b, foreign_ns):
    """A down (by `cluster.py down`, another process), then a fixture of this process up and
    down: B's process and the foreign namespace's process run on."""
    in_b = b.popen_on(1, ["sleep", "1000"])
    foreign = subprocess.Popen(["ip", "netns", "exec", foreign_ns, "sleep", "1000"])
    try:
        time.sleep(0.5)
        expect(b.pids_on(1), f"no process in {b.namespace(1)}")
        subprocess.run(CLI + ["--cluster", a.id, "down"], check=True, timeout=60)
        expect(a.leftovers() == [], f"left of {a.id} after its down: {a.leftovers()}")
        with cluster.Cluster(hosts=3, rate="100mbit") as c:
            expect(c.id not in (a.id, b.id), "a new fixture reused a live id")
            expect(c.run_on(2, ["hostname"], capture_output=True, text=True).stdout.strip() == "node2",
                   "the new fixture's host 2 is not node2")
        expect(c.leftovers() == [], f"left of {c.id} after its down: {c.leftovers()}")
        expect(in_b.poll() is None, f"{b.id}'s process died when other fixtures went up and down")
        expect(foreign.poll() is None, f"the process in {foreign_ns} (no fixture's) died")
        server = serve(b, 1)
        try:
            expect(reaches(b, 0, b.address(1)), f"{b.id}: host 0 no longer reaches host 1")
        finally:
            server.kill()
            server.wait()
    finally:
        for p in (in_b, foreign):
            p.kill()
            p.wait()


def check_stale_removed(live, kept):
    """A fixture whose owner died is removed by the next up; `live` (owner running) and `kept`
    (--owner 1, the documented way to keep one until `down`) are not."""
    owner = subprocess.Popen(["sleep", "1000"])
    stale = up_at_once(1, owner.pid)[0]
    owner.kill()
    owner.wait()
    expect(fixture_registry.is_stale(stale.record), f"{stale.id} is not stale after its owner died")
    expect(not fixture_registry.is_stale(live.record), f"{live.id} is stale while its owner runs")
    expect(not fixture_registry.is_stale(kept.record), f"{kept.id} (--owner 1) is stale")
    with cluster.Cluster(hosts=2):
        expect(stale.leftovers() == [], f"left of the stale {stale.id} after the next up: {stale.leftovers()}")
        for c in (live, kept):
            expect(c.namespace(0) in fixture_registry.namespaces_now(), f"the live {c.id} was removed")


def main():
    reason = cluster.available()
    if reason:
        print("skipped: " + reason)
        return 77
    owner = subprocess.Popen(["sleep", "1000"])  # what the CLI fixtures belong to: gone, they are stale
    foreign_ns = f"kdl-h-foreign{os.getpid()}"  # a name the fixture of old removed with all of "kdl-h*"
    subprocess.run(["ip", "netns", "add", foreign_ns], check=True)
    fixtures = []
    try:
        fixtures = up_at_once(4, owner.pid)
        check_side_by_side(fixtures)
        check_down_spares_others(fixtures[0], fixtures[1], foreign_ns)
        fixtures += up_at_once(1, 1)  # kept until `down`: pid 1, whose /proc/1/ns/pid may be unreadable
        check_stale_removed(fixtures[1], fixtures[-1])
        for c in fixtures[1:]:
            subprocess.run(CLI + ["--cluster", c.id, "down"], check=True, timeout=60)
        left = [x for c in fixtures for x in c.leftovers()] + cluster.leftovers()
        expect(left == [], f"left after every down: {left}")
        expect(foreign_ns in fixture_registry.namespaces_now(), f"{foreign_ns} (no fixture's) was removed")
        print("PASS fixture_isolation: %s" % ", ".join(f"{c.id} {c.subnet}" for c in fixtures))
        return 0
    except Failure as e:
        print(f"FAIL fixture_isolation: {e}")
        return 1
    finally:
        for c in fixtures:
            c.down()
        owner.kill()
        owner.wait()
        subprocess.run(["ip", "netns", "del", foreign_ns], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
