"""What the cluster tests and the host-fault harness share: a case registry, a failed
expectation, commands run on several hosts at once, and the node-layout check."""
import os
import subprocess
import time

import cluster

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A TCP server on port 7000 that answers "hello" to every connection, and its client.
HELLO_SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7000)); s.listen(8)
print("listening", flush=True)
while True:
    conn, _ = s.accept(); conn.sendall(b"hello"); conn.close()
"""
HELLO_CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], 7000), timeout=2)
print(s.recv(16).decode())
"""


def prepare(args):
    """Sets args' program paths from args.build; returns 77 (CTest's skip) after printing
    the reason when this machine cannot make the cluster, else None."""
    reason = cluster.available()
    if reason:
        print("skipped: " + reason)
        return 77
    build = os.path.abspath(args.build)
    args.kindling_run = os.path.join(build, "kindling-run")
    args.hello = os.path.join(build, "examples", "hello_dist", "hello_dist")
    args.cifar10 = os.path.join(build, "examples", "cifar10", "cifar10")
    args.tutorial = os.path.join(build, "examples", "dist_tutorial", "dist_tutorial")
    args.torchrun = os.path.join(TESTS, "launch", "torchrun_compat.py")
    args.hierarchy_check = os.path.join(build, "tests", "hierarchy_check")
    args.dist_test = os.path.join(build, "tests", "dist_test")
    args.nn_test = os.path.join(build, "tests", "nn_test")
    args.launchers_test = os.path.join(build, "tests", "launchers_test")
    return None

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


class Failure(Exception):
    pass


def run_cases(args):
    """Runs the registered cases (only args.k when given), printing "ok"/"FAIL" with the time
    each took; returns how many failed."""
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
    return failed


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
