#!/usr/bin/env python3
"""A cluster on one machine: hosts as network namespaces on one bridge.

Host k is the network namespace "kdl-h<k>", with address 10.213.0.<10+k>/24 on its eth0 (a
veth whose other end "kdl-v<k>" sits on the bridge "kdl-br0" in the root namespace, which has
no address there: the hosts reach each other and nothing else), the host name "node<k>" (each
command runs in its own UTS namespace), and an /etc/hosts (/etc/netns/kdl-h<k>/hosts) that
names every host. A link can be capped with tc's tbf (both directions) and cut (the bridge
side of its veth goes down, a partition) and healed.

Used as a library by the cluster tests and benchmarks:

    with Cluster(hosts=3, rate="1gbit") as c:
        c.run_on(1, ["hostname"])        # subprocess.run inside host 1
        p = c.popen_on(0, [...])          # subprocess.Popen inside host 0
        c.cut(2); c.heal(2)

and as a command (tests/cluster/cluster.py --help):

    cluster.py up 3 [--rate 100mbit] | on K CMD... | cut K | heal K | down | check
    cluster.py agent node<K> CMD...   # Open MPI's launch agent (--mca plm_rsh_agent): like ssh

Everything it makes is removed by down(), at exit, on SIGTERM/SIGINT, and, for what a killed
run left behind, by the next up(). Needs root (CAP_NET_ADMIN); available() says why not.
Traffic stays on the addresses made here.
"""
import argparse
import atexit
import os
import signal
import subprocess
import sys
import time

PREFIX = "kdl"
BRIDGE = f"{PREFIX}-br0"
SUBNET = "10.213.0"
MAX_HOSTS = 8


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def namespace(k):
    return f"{PREFIX}-h{k}"


def address(k):
    return f"{SUBNET}.{10 + k}"


def hostname(k):
    return f"node{k}"


def _existing_namespaces():
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.startswith(f"{PREFIX}-h")]


def remove_all():
    """Removes every namespace, link and hosts file of this fixture, with their processes."""
    for ns in _existing_namespaces():
        pids = _ip("netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", ns, check=False)
    _ip("link", "del", BRIDGE, check=False)
    for k in range(MAX_HOSTS):
        _ip("link", "del", f"{PREFIX}-v{k}", check=False)
        folder = f"/etc/netns/{namespace(k)}"
        if os.path.isdir(folder):
            for name in os.listdir(folder):
                os.remove(os.path.join(folder, name))
            os.rmdir(folder)


def available():
    """None when namespaces can be made here, else the reason (for a test's skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); this process runs as uid %d" % os.geteuid()
    probe = f"{PREFIX}-probe"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return "cannot make a network namespace: " + r.stderr.strip()
    _ip("netns", "del", probe, check=False)
    return None


class Cluster:
    """N hosts (2 to MAX_HOSTS) with an optional rate cap per link (tc's tbf, e.g. "1gbit")."""

    def __init__(self, hosts=2, rate=None, own_name_loopback=False):
        """own_name_loopback: each host's /etc/hosts maps its own name to 127.0.1.1, as
        Debian's installer writes it (the others' names to their addresses)."""
        if not 2 <= hosts <= MAX_HOSTS:
            raise ValueError(f"a cluster has 2 to {MAX_HOSTS} hosts, not {hosts}")
        self.hosts = hosts
        self.rate = rate
        self.own_name_loopback = own_name_loopback
        self._up = False

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self):
        remove_all()  # what a killed run left behind
        atexit.register(self.down)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self._up = True
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("link", "set", BRIDGE, "up")
        for k in range(self.hosts):
            hosts_file = "127.0.0.1 localhost\n" + "".join(
                f"{'127.0.1.1' if j == k and self.own_name_loopback else address(j)} {hostname(j)}\n"
                for j in range(self.hosts))
            ns, veth = namespace(k), f"{PREFIX}-v{k}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", BRIDGE, "up")
            _ip("-n", ns, "addr", "add", f"{address(k)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(hosts_file)
            if self.rate:
                self.cap(k, self.rate)

    def _on_signal(self, sig, frame):
        self.down()
        sys.exit(128 + sig)

    def down(self):
        if self._up:
            remove_all()
            self._up = False

    def cap(self, k, rate):
        """Caps host k's link at `rate` in both directions (tbf shapes what an interface sends)."""
        spec = ["root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
        subprocess.run(["tc", "qdisc", "replace", "dev", f"{PREFIX}-v{k}", *spec], check=True)
        subprocess.run(["ip", "netns", "exec", namespace(k), "tc", "qdisc", "replace", "dev", "eth0", *spec],
                       check=True)

    def uncap(self, k):
        """Removes host k's rate cap."""
        subprocess.run(["tc", "qdisc", "del", "dev", f"{PREFIX}-v{k}", "root"], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "exec", namespace(k), "tc", "qdisc", "del", "dev", "eth0", "root"],
                       check=False, capture_output=True)

    def cut(self, k):
        """Partitions host k: its link to the bridge goes down (its processes keep running)."""
        _ip("link", "set", f"{PREFIX}-v{k}", "down")

    def heal(self, k):
        """Reconnects host k; returns when its eth0 reports the link up again (the kernel
        applies a carrier change up to a second later), at most 10 s."""
        _ip("link", "set", f"{PREFIX}-v{k}", "up")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = subprocess.run(["ip", "netns", "exec", namespace(k), "cat", "/sys/class/net/eth0/operstate"],
                               capture_output=True, text=True)
            if r.stdout.strip() == "up":
                # Address resolutions that failed during the cut would refuse the next
                # connections for a while ("No route to host"); start them afresh.
                for j in range(self.hosts):
                    _ip("-n", namespace(j), "neigh", "flush", "all", check=False)
                return
            time.sleep(0.05)
        raise RuntimeError(f"host {k}'s link is not up 10 s after healing")

    def command(self, k, argv):
        """argv run inside host k: its network, its /etc/hosts, its host name."""
        return ["ip", "netns", "exec", namespace(k), "unshare", "--uts", "sh", "-c",
                f'hostname {hostname(k)} && exec "$@"', "sh", *argv]

    @staticmethod
    def shell_command(k, line):
        """A shell command line run inside host k (Open MPI's launch agent passes one)."""
        return ["ip", "netns", "exec", namespace(k), "unshare", "--uts", "sh", "-c", f"hostname {hostname(k)} && {line}"]

    @staticmethod
    def command_keeping_sys(k, argv):
        """argv run inside host k as command() does, except that it keeps this machine's
        /sys (ip netns exec mounts the namespace's own sysfs, which hides the cgroup
        hierarchy that slurmd needs): the host's network, /etc/hosts and host name."""
        hosts = f"/etc/netns/{namespace(k)}/hosts"
        return ["nsenter", f"--net=/run/netns/{namespace(k)}", "unshare", "--uts", "--mount", "sh", "-c",
                f'mount --bind {hosts} /etc/hosts && hostname {hostname(k)} && exec "$@"', "sh", *argv]

    def run_on(self, k, argv, **kwargs):
        return subprocess.run(self.command(k, argv), **kwargs)

    def popen_on(self, k, argv, **kwargs):
        return subprocess.Popen(self.command(k, argv), **kwargs)

    def kill_host(self, k):
        """Kills every process of host k at once (SIGKILL), as a host that loses power."""
        for pid in pids_on(k):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def bytes_sent(self, k):
        """What host k's eth0 has sent so far, in bytes."""
        r = subprocess.run(["ip", "netns", "exec", namespace(k), "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                           check=True, capture_output=True, text=True)
        return int(r.stdout)


def pids_on(k):
    """The processes running inside host k now."""
    return [int(p) for p in _ip("netns", "pids", namespace(k), check=False).stdout.split()]


def leftovers():
    """What of this fixture exists now (empty when nothing is left)."""
    found = _existing_namespaces()
    if _ip("link", "show", BRIDGE, check=False).returncode == 0:
        found.append(BRIDGE)
    found += [f"/etc/netns/{namespace(k)}" for k in range(MAX_HOSTS) if os.path.exists(f"/etc/netns/{namespace(k)}")]
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    up = sub.add_parser("up", help="make N hosts (removes an earlier cluster first)")
    up.add_argument("hosts", type=int)
    up.add_argument("--rate", help="cap every link, e.g. 100mbit, 1gbit, 10gbit")
    up.add_argument("--own-name-loopback", action="store_true", help="each host's own name is 127.0.1.1 (Debian)")
    on = sub.add_parser("on", help="run a command on host K")
    on.add_argument("k", type=int)
    on.add_argument("argv", nargs=argparse.REMAINDER)
    for name in ("cut", "heal"):
        sub.add_parser(name, help=f"{name} host K's link").add_argument("k", type=int)
    agent = sub.add_parser("agent", help="run a shell command line on host node<K>, as ssh would (Open MPI's "
                           "plm_rsh_agent)")
    agent.add_argument("host")
    agent.add_argument("argv", nargs=argparse.REMAINDER)
    sub.add_parser("down", help="remove everything the fixture made")
    sub.add_parser("check", help="say whether namespaces can be made here (exit 77 when not)")
    args = p.parse_args()
    if args.what == "check":
        reason = available()
        print(reason or "network namespaces are available")
        return 77 if reason else 0
    if args.what == "down":
        remove_all()
        return 0
    if args.what == "agent":
        k = int(args.host[len("node"):]) if args.host.startswith("node") and args.host[4:].isdigit() else -1
        if namespace(k) not in _existing_namespaces():
            print(f"cluster.py agent: no host named {args.host!r} in the cluster", file=sys.stderr)
            return 255  # ssh's code for a host it cannot reach
        argv = Cluster.shell_command(k, " ".join(args.argv))
        os.execvp(argv[0], argv)
    c = Cluster(hosts=max(2, len(_existing_namespaces())))
    if args.what == "up":
        c = Cluster(hosts=args.hosts, rate=args.rate, own_name_loopback=args.own_name_loopback)
        c.up()
        c._up = False  # stays up after this command; `down` removes it
        print(" ".join(f"{hostname(k)}={address(k)}" for k in range(args.hosts)))
        return 0
    if args.what == "on":
        return c.run_on(args.k, args.argv).returncode
    getattr(c, args.what)(args.k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
