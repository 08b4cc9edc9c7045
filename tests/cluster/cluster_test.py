#!/usr/bin/env python3
"""kindling across hosts of the namespace cluster (tests/cluster/cluster.py), one case per CTest.

  tests/cluster/cluster_test.py --build build [--list] [-k name]

Exit 77 (CTest's skip) with the reason when this machine cannot make network namespaces.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


class Failure(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


def run_hosts(c, commands, timeout=120):
    """Runs commands[k] on host k at once; returns [(exit code, output)] per host."""
    procs = [c.popen_on(k, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k, argv in enumerate(commands)]
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, text))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            out.append((None, "(killed after %d s: a hang)\n" % timeout + text))
    return out


def layout_lines(outputs):
    """{rank: {field: value}} from hello_dist --layout lines."""
    ranks = {}
    for _, text in outputs:
        for line in text.splitlines():
            line = line.split("]: ", 1)[-1]
            if not line.startswith("rank=") or "nnodes=" not in line:
                continue
            fields = dict(item.split("=", 1) for item in line.split())
            ranks[int(fields["rank"])] = fields
    return ranks


def check_layout(outputs, hosts, per_host):
    ranks = layout_lines(outputs)
    world = hosts * per_host
    expect(sorted(ranks) == list(range(world)), "expected lines of ranks 0..%d, got %s:\n%s" % (
        world - 1, sorted(ranks), "\n".join(t for _, t in outputs)))
    for r, f in ranks.items():
        want = {"world_size": str(world), "all_reduce": str(world * (world + 1) // 2), "nnodes": str(hosts),
                "node_rank": str(r // per_host), "local_rank": str(r % per_host),
                "nproc_per_node": str(per_host), "host": cluster.hostname(r // per_host)}
        for key, value in want.items():
            expect(f[key] == value, "rank %d: %s=%s, expected %s (line: %s)" % (r, key, f[key], value, f))


@case
def fixture(args):
    """Three hosts capped at 100mbit: own names, each other's names, reachability, a cut link
    and its healing, and nothing left after teardown."""
    with cluster.Cluster(hosts=3, rate="100mbit") as c:
        for k in range(3):
            r = c.run_on(k, ["hostname"], capture_output=True, text=True, check=True)
            expect(r.stdout.strip() == cluster.hostname(k), "host %d calls itself %r" % (k, r.stdout))
        r = c.run_on(2, ["getent", "hosts", "node0"], capture_output=True, text=True)
        expect(r.stdout.split()[:1] == [cluster.address(0)], "node0 seen from host 2: %r" % r.stdout)
        qdisc = subprocess.run(["tc", "qdisc", "show", "dev", "kdl-v1"], capture_output=True, text=True).stdout
        expect("tbf" in qdisc and "100Mbit" in qdisc, "no 100mbit tbf on host 1's link: %r" % qdisc)
        server = c.popen_on(0, [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
        try:
            expect(server.stdout.readline().strip() == "listening", "host 0's server did not start")
            connect = [sys.executable, "-c", CLIENT, "node0"]
            r = c.run_on(2, connect, capture_output=True, text=True)
            expect(r.returncode == 0 and "hello" in r.stdout, "host 2 cannot reach node0: %s" % r.stdout + r.stderr)
            c.cut(2)
            r = c.run_on(2, connect, capture_output=True, text=True)
            expect(r.returncode != 0, "host 2 reached node0 through a cut link")
            r = c.run_on(1, connect, capture_output=True, text=True)
            expect(r.returncode == 0, "host 1 lost node0 when host 2's link was cut")
            c.heal(2)
            r = c.run_on(2, connect, capture_output=True, text=True)
            expect(r.returncode == 0, "host 2 cannot reach node0 after healing: exit %s, %r" % (r.returncode, r.stdout + r.stderr))
        finally:
            server.kill()
            server.wait()
    expect(cluster.leftovers() == [], "left after teardown: %s" % cluster.leftovers())


# A TCP server on port 7000 that answers "hello" to every connection, and its client.
SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7000)); s.listen(8)
print("listening", flush=True)
while True:
    conn, _ = s.accept(); conn.sendall(b"hello"); conn.close()
"""
CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], 7000), timeout=2)
print(s.recv(16).decode())
"""


@case
def kindling_run_debian_names(args):
    """kindling-run on 2 hosts x 2 ranks, master given by host 0's name, each host's own name
    mapped to 127.0.1.1 as Debian does (Python's gloo device fails here): the all_reduce and
    the node layout on every rank."""
    with cluster.Cluster(hosts=2, own_name_loopback=True) as c:
        commands = [[args.kindling_run, "--nnodes", "2", "--node_rank", str(k), "--master_addr", "node0",
                     "--master_port", "29500", "--nproc_per_node", "2", args.hello, "--layout"] for k in range(2)]
        outputs = run_hosts(c, commands)
        expect(all(code == 0 for code, _ in outputs), "a host failed:\n" + "\n".join(t for _, t in outputs))
        check_layout(outputs, hosts=2, per_host=2)


@case
def layout_without_launcher_variables(args):
    """2 hosts x 2 ranks started by hand with only RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT: local rank, node rank and processes per node come from the host names."""
    with cluster.Cluster(hosts=2) as c:
        script = ('for r in $RANKS; do RANK=$r WORLD_SIZE=4 MASTER_ADDR=node0 MASTER_PORT=29500 "$0" --backend gloo '
                  '--layout & done; wait')
        commands = [["env", "RANKS=%d %d" % (2 * k, 2 * k + 1), "sh", "-c", script, args.hello] for k in range(2)]
        outputs = run_hosts(c, commands)
        check_layout(outputs, hosts=2, per_host=2)


@case
def torchrun_c10d_rendezvous(args):
    """torchrun's multi-node rendezvous (--rdzv_backend c10d, endpoint node0:29400) on 2 hosts
    x 2 ranks: the all_reduce and the node layout on every rank, and one job identity."""
    with cluster.Cluster(hosts=2) as c:
        commands = [[sys.executable, args.torchrun, "--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend",
                     "c10d", "--rdzv_endpoint", "node0:29400", "--rdzv_id", "cluster-job", "--max_restarts", "0",
                     "--monitor_interval", "0.2", "--no_python", args.hello, "--layout"] for k in range(2)]
        outputs = run_hosts(c, commands, timeout=180)
        expect(all(code == 0 for code, _ in outputs), "a host failed:\n" + "\n".join(t for _, t in outputs))
        check_layout(outputs, hosts=2, per_host=2)


@case
def partition_mid_training(args):
    """2 hosts x 1 rank training (dist_tutorial train, stall period 4 s); host 1's link is cut
    mid-training: both sides end by themselves within the stall period + 10 s, each naming
    the rank it lost."""
    with cluster.Cluster(hosts=2) as c:
        commands = [["env", "KINDLING_STALL_TIMEOUT=4", args.kindling_run, "--nnodes", "2", "--node_rank", str(k),
                     "--master_addr", "node0", "--master_port", "29500", "--nproc_per_node", "1", args.tutorial,
                     "train", "--epochs", "1000", "--timeout", "60"] for k in range(2)]
        procs = [c.popen_on(k, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for k, argv in enumerate(commands)]
        try:
            for line in procs[0].stdout:  # training runs once rank 0 reports its first epoch
                if "epoch" in line.lower():
                    break
            c.cut(1)
            cut_at = time.monotonic()
            outputs = []
            for p in procs:
                text, _ = p.communicate(timeout=60)
                outputs.append((p.returncode, time.monotonic() - cut_at, text))
        finally:
            for p in procs:
                p.kill()
        for k, (code, seconds, text) in enumerate(outputs):
            other = 1 - k
            expect(code not in (0, None), "host %d exited %s after the cut:\n%s" % (k, code, text))
            expect(seconds <= 4 + 10, "host %d ended %.1f s after the cut (bound 14 s):\n%s" % (k, seconds, text))
            errors = [line for line in text.splitlines() if "error" in line.lower() or "stalled" in line.lower()]
            expect(any("rank %d" % other in line for line in errors), "no error line of host %d names rank %d:\n%s" % (
                k, other, text[-3000:]))
            print("host %d: exit %s, %.1f s after the cut: %s" % (k, code, seconds, errors[0][:300]))


@case
def master_unreachable_at_start(args):
    """Host 0's link is cut before host 1 starts its rank (stall period 4 s): host 1 fails
    within the stall period + 10 s, naming the rendezvous address, instead of waiting the
    whole timeout."""
    with cluster.Cluster(hosts=2) as c:
        c.cut(0)
        start = time.monotonic()
        r = c.run_on(1, ["env", "KINDLING_STALL_TIMEOUT=4", args.kindling_run, "--nnodes", "2", "--node_rank", "1",
                         "--master_addr", "node0", "--master_port", "29500", "--nproc_per_node", "1", args.hello],
                     capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - start
        text = r.stdout + r.stderr
        expect(r.returncode not in (0, None), "host 1 exited %s:\n%s" % (r.returncode, text))
        expect(seconds <= 14, "host 1 ended after %.1f s (bound 14 s):\n%s" % (seconds, text))
        expect("the host of the rendezvous store, node0:29500 (%s), has not answered" % cluster.address(0) in text,
               "host 1 does not name the unreachable address:\n" + text)
        print("host 1: exit %s after %.1f s" % (r.returncode, seconds))


@case
def cifar10_three_hosts(args):
    """examples/cifar10 on a small subset, 3 hosts x 1 rank under kindling-run, links capped
    at 1gbit: every host completes and rank 0 reports the 3-rank run."""
    with cluster.Cluster(hosts=3, rate="1gbit") as c:
        out = tempfile.mkdtemp(prefix="kindling-cluster-cifar10-")
        commands = [[args.kindling_run, "--nnodes", "3", "--node_rank", str(k), "--master_addr", "node0",
                     "--master_port", "29500", "--nproc_per_node", "1", args.cifar10, "--train_subset", "384",
                     "--test_subset", "96", "--batch_size", "48", "--num_epochs", "1", "--num_workers", "0",
                     "--log_every_iters", "0", "--output_path", out] for k in range(3)]
        try:
            outputs = run_hosts(c, commands, timeout=240)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        expect(all(code == 0 for code, _ in outputs), "a host failed:\n" + "\n".join(t for _, t in outputs))
        expect("world size: 3" in outputs[0][1] and "nodes: 3" in outputs[0][1],
               "rank 0 does not report 3 ranks on 3 nodes:\n" + outputs[0][1])
        expect("3 process(es) on gloo" in outputs[0][1] and "| 1 | " in outputs[0][1],
               "rank 0 printed no result of the 3-rank run:\n" + outputs[0][1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--list", action="store_true")
    p.add_argument("-k", default="", help="run only this case")
    args = p.parse_args()
    if args.list:
        for name, fn in CASES.items():
            print(f"{name}: {fn.__doc__.split(chr(10))[0]}")
        return 0
    reason = cluster.available()
    if reason:
        print("skipped: " + reason)
        return 77
    build = os.path.abspath(args.build)
    args.kindling_run = os.path.join(build, "kindling-run")
    args.hello = os.path.join(build, "examples/hello_dist/hello_dist")
    args.cifar10 = os.path.join(build, "examples/cifar10/cifar10")
    args.tutorial = os.path.join(build, "examples/dist_tutorial/dist_tutorial")
    args.torchrun = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch",
                                 "torchrun_compat.py")
    failed = 0
    for name, fn in CASES.items():
        if args.k and args.k != name:
            continue
        start = time.monotonic()
        try:
            fn(args)
            print(f"ok   {name} ({time.monotonic() - start:.1f} s)")
        except Failure as e:
            failed += 1
            print(f"FAIL {name} ({time.monotonic() - start:.1f} s): {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
