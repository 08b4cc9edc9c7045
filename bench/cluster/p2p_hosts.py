#!/usr/bin/env python3
"""How gloo moves ZeRO-1's bytes across the namespace cluster's capped links (tests/cluster/
cluster.py, 1 process per host, each pinned to a core), the facts kindling's
ZeroRedundancyOptimizer is built on (src/nn/zero/zero_exchange.cpp). Python torch's gloo, the gloo of
the LibTorch 2.15 build; medians of --repeats, each timed between barriers, rank 0's clock:

  exchange, sends first      every rank sends every other its chunk of --megabytes (the
                             reduce-scatter's pattern), isend posted before irecv
  exchange, receives first   the same with the receives posted first
  all_gather_into_tensor     gloo's own all-gather of the same chunks
  ZeRO's step                2 buckets (the halves of 25 MiB and of the rest): each bucket's
                             exchange, then its all-gather by an exchange (receives first),
                             posted as the bucket's first exchange completes; 2 x --megabytes
  all_reduce                 one all-reduce of 2 x --megabytes (plain DDP's bytes on the wire)

  bench/cluster/p2p_hosts.py [--hosts 2] [--rate 1gbit] [--megabytes 44.8] [--repeats 5]
      [--python ~/.cache/kindling/torch-2.15.0/bin/python]
Root; sends only inside the fixture's own namespaces.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "cluster"))
import cluster  # noqa: E402

# One host's side: argv = master address, rank, world, megabytes, repeats.
WORKER = r"""
import sys, time, torch, torch.distributed as dist
addr, r, n, mb, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo", init_method="tcp://%s:29561" % addr, rank=r, world_size=n)
torch.set_num_threads(1)
total = int(mb * 1e6 / 4)          # float32 elements of the whole gradient
each = total // n                  # one rank's chunk
peers = [q for q in range(n) if q != r]
send = {q: torch.ones(each) for q in peers}
into = {q: torch.empty(each) for q in peers}

def exchange(tag, receives_first, sizes=None):
    sizes = sizes or {q: each for q in peers}
    recv = lambda: [dist.irecv(into[q][:sizes[q]], q, tag=tag) for q in peers]
    snd = lambda: [dist.isend(send[q][:sizes[q]], q, tag=tag) for q in peers]
    return recv() + snd() if receives_first else snd() + recv()

def wait(works):
    for w in works:
        w.wait()

def zero_step():
    first = 25 * 2**20 // 4 // n   # a rank's chunk of the 25 MiB bucket, then of the rest
    parts = [{q: min(first, each) for q in peers}, {q: max(each - first, 1) for q in peers}]
    reduce = [exchange(100 + b, True, parts[b]) for b in range(2)]
    gather = []
    for b in range(2):
        wait(reduce[b])
        gather += exchange(200 + b, True, parts[b])
    wait(gather)

out = torch.empty(each * n)
whole = torch.ones(each * n)
cases = [("exchange, sends first", lambda: wait(exchange(1, False))),
         ("exchange, receives first", lambda: wait(exchange(2, True))),
         ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, send[peers[0]])),
         ("ZeRO's step (reduce-scatter, then all-gather)", zero_step),
         ("all_reduce of the whole", lambda: dist.all_reduce(whole))]
for name, f in cases:
    ts = []
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    if r == 0:
        print("| %s | %.0f | %.0f-%.0f |" % (name, 1e3 * ts[len(ts) // 2], 1e3 * ts[0], 1e3 * ts[-1]), flush=True)
dist.destroy_process_group()
"""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--megabytes", type=float, default=44.8, help="the whole gradient (ResNet-18: 44.8)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--python", default=os.path.expanduser("~/.cache/kindling/torch-2.15.0/bin/python"))
    a = p.parse_args()
    reason = cluster.available()
    if reason:
        print("p2p_hosts.py: the namespace cluster cannot be made here: %s" % reason, file=sys.stderr)
        return 2
    print("%d hosts, %s, %.1f MB of gradient (a rank's chunk %.1f MB)\n" % (a.hosts, a.rate, a.megabytes,
                                                                           a.megabytes / a.hosts))
    print("| pattern | median ms | range ms |")
    print("|---|---|---|")
    with cluster.Cluster(hosts=a.hosts, rate=a.rate) as c:
        procs = [c.popen_on(k, ["taskset", "-c", str(k % os.cpu_count()), a.python, "-c", WORKER, c.address(0),
                                str(k), str(a.hosts), str(a.megabytes), str(a.repeats)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in range(a.hosts)]
        outputs = [proc.communicate(timeout=900)[0] for proc in procs]
    for line in outputs[0].splitlines():
        if line.startswith("|"):
            print(line)
    failed = [k for k, proc in enumerate(procs) if proc.returncode != 0]
    if failed:
        print("hosts %s failed:\n%s" % (failed, "\n".join(outputs[k][-2000:] for k in failed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
