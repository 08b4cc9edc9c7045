"""An etcd cluster on the namespace hosts (tests/cluster/cluster.py): one member of Debian's
etcd-server per host, serving clients on port 2379 and its peers on 2380 of the host's address,
its data in a temporary folder; started, waited for and removed by a with block."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HEALTH = """
import json, sys, urllib.request
print(json.load(urllib.request.urlopen("http://%s:2379/health" % sys.argv[1], timeout=2)).get("health"))
"""


class EtcdCluster:
    def __init__(self, c, hosts):
        """One member on each host of `hosts` (indices into the Cluster `c`)."""
        self.c = c
        self.hosts = list(hosts)
        self.procs = {}
        self.folder = None

    def endpoints(self):
        """--rdzv_endpoint's value: every member's host:2379."""
        return ",".join("node%d:2379" % k for k in self.hosts)

    def __enter__(self):
        if shutil.which("etcd") is None:
            raise RuntimeError("etcd is not installed: run scripts/install-deps.sh (Debian's etcd-server)")
        self.folder = tempfile.mkdtemp(prefix="kindling-etcd-")
        self.token = "kindling-%d-%d" % (os.getpid(), time.monotonic_ns())
        try:
            for k in self.hosts:
                self.start(k, "new")
            self.wait_healthy(self.hosts, 30)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def start(self, k, state="existing"):
        """Starts host k's member: "new" with the cluster, or "existing" again from its data folder
        after it was killed (its host back). Does not wait for it to be healthy."""
        a = self.c.address(k)
        peers = ",".join("node%d=http://%s:2380" % (h, self.c.address(h)) for h in self.hosts)
        argv = ["etcd", "--name", "node%d" % k, "--data-dir", os.path.join(self.folder, "node%d" % k),
                "--listen-client-urls", "http://%s:2379" % a, "--advertise-client-urls", "http://%s:2379" % a,
                "--listen-peer-urls", "http://%s:2380" % a, "--initial-advertise-peer-urls",
                "http://%s:2380" % a, "--initial-cluster", peers, "--initial-cluster-state", state,
                "--initial-cluster-token", self.token]
        with open(os.path.join(self.folder, "node%d.log" % k), "a") as log:
            self.procs[k] = subprocess.Popen(self.c.command(k, argv), stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self, hosts, timeout):
        """Waits until every member of `hosts` says it is healthy (a leader is elected)."""
        deadline = time.monotonic() + timeout
        for k in hosts:
            while True:
                r = self.c.run_on(k, [sys.executable, "-c", HEALTH, self.c.address(k)], capture_output=True,
                                  text=True)
                if r.stdout.strip() == "true":
                    break
                if time.monotonic() > deadline or self.procs[k].poll() is not None:
                    raise RuntimeError("etcd member on host %d is not healthy within %d s; its log:\n%s" % (
                        k, timeout, self.log(k)))
                time.sleep(0.2)

    def kill(self, k):
        """Kills host k's member (SIGKILL)."""
        self.procs[k].kill()
        self.procs[k].wait()

    def log(self, k):
        with open(os.path.join(self.folder, "node%d.log" % k)) as f:
            return f.read()[-4000:]

    def __exit__(self, *exc):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
