#!/usr/bin/env python3
"""The goodput of the namespace cluster's capped links, an input of the scaling model
(bench/scaling/model.py): 2 hosts (tests/cluster/cluster.py, tc's tbf on both ends of each
link), each sending --megabytes to the other over one TCP connection at the same time, as a
ring all-reduce of 2 ranks does; goodput = payload bytes received / seconds, per host, beside
the tbf rate. Medians of --repeats. Root; sends only inside the fixture's own namespaces.

  bench/scaling/link_rate.py [--rates 100mbit,1gbit] [--megabytes 40] [--repeats 3]
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "cluster"))
import cluster  # noqa: E402

# One host's side: listens, connects to the peer, sends and receives `n` bytes at once, and
# prints the seconds from the first byte received to the last.
PEER = r"""
import socket, sys, threading, time
me, peer, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); srv.bind((me, port)); srv.listen(1)
out = None
for _ in range(200):
    try:
        out = socket.create_connection((peer, port)); break
    except OSError:
        time.sleep(0.05)
conn, _ = srv.accept()
def send():
    chunk = b"x" * (1 << 20); left = n
    while left > 0:
        left -= out.send(chunk[:min(left, len(chunk))])
t = threading.Thread(target=send); t.start()
got, first = 0, None
while got < n:
    b = conn.recv(1 << 20)
    if not b: break
    if first is None: first = time.perf_counter()
    got += len(b)
last = time.perf_counter(); t.join()
print("%d %.6f" % (got, last - first))
"""


def one(rate, megabytes):
    """Goodputs (bytes/s) of the two hosts receiving at once over a link capped at `rate`."""
    with cluster.Cluster(hosts=2, rate=rate) as c:
        n = megabytes * 1000000
        procs = [c.popen_on(k, [sys.executable, "-c", PEER, c.address(k), c.address(1 - k), "29611", str(n)],
                            stdout=subprocess.PIPE, text=True) for k in range(2)]
        rates = []
        for p in procs:
            out, _ = p.communicate(timeout=600)
            got, seconds = out.split()
            rates.append(int(got) / float(seconds))
        return rates


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="100mbit,1gbit")
    p.add_argument("--megabytes", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    nominal = {r: float(r[:-4]) * units[r[-4:]] for r in a.rates.split(",")}
    print("| tbf rate | goodput per host, MB/s (median) | of the rate | runs |")
    print("|---|---|---|---|")
    for rate in a.rates.split(","):
        runs = [r for _ in range(a.repeats) for r in one(rate, a.megabytes)]
        m = statistics.median(runs)
        print("| %s | %.1f | %.3f | %s |" % (rate, m / 1e6, m * 8 / nominal[rate],
                                            " ".join("%.1f" % (r / 1e6) for r in runs)))


if __name__ == "__main__":
    main()
