#!/usr/bin/env python3
"""A cluster on one machine: hosts as network namespaces on one bridge.

Each fixture has its own id ("kdl" and 6 hex digits, e.g. kdl3fa07c), the prefix of every
name it makes, and its own /24 subnet, picked where no interface, route or other fixture of
this machine is (tests/cluster/fixture_registry.py). Host k is the network namespace
"<id>-h<k>" with the address .<10+k> of that subnet on its eth0 (a veth whose other end
"<id>-v<k>" sits on the bridge "<id>-br" in the root namespace, which has no address there:
the hosts reach each other and nothing else), the host name "node<k>" (each command runs in
its own UTS namespace), and an /etc/hosts (/etc/netns/<id>-h<k>/hosts) that names every host
of the fixture. A link can be capped with tc's tbf (both directions) and cut (the bridge side
of its veth goes down, a partition) and healed. Several fixtures run side by side: each
touches only the namespaces, links, processes and files it made.

Used as a library by the cluster tests and benchmarks:

    with Cluster(hosts=3, rate="1gbit") as c:
        c.run_on(1, ["hostname"])        # subprocess.run inside host 1
        p = c.popen_on(0, [...])          # subprocess.Popen inside host 0
        c.cut(2); c.heal(2)
        c.address(0), c.namespace(0), c.veth(0), c.bridge, c.subnet, c.id

and as a command (tests/cluster/cluster.py --help):

    eval "$(cluster.py up 3 [--rate 100mbit])"    # sets KINDLING_CLUSTER=<id>
    cluster.py on K CMD... | cut K | heal K | down   # the fixture KINDLING_CLUSTER (or --cluster ID)
    cluster.py list | check
    cluster.py agent node<K> CMD...   # Open MPI's launch agent (--mca plm_rsh_agent): like ssh

A fixture is removed by down(), at exit, on SIGTERM/SIGINT, and, when its owner process died
without (SIGKILL), by the next fixture's up(). Needs root (CAP_NET_ADMIN); available() says
why not. Traffic stays on the addresses made here.
"""
import argparse
import atexit
import os
import signal
import subprocess
import sys
import threading
import time

import fixture_registry as registry

ENV = "KINDLING_CLUSTER"  # the fixture id, set in every command run on a host
MAX_HOSTS = 8
_live = []  # the fixtures this process made and has not removed yet
_made = []  # the records of every fixture this process made (for leftovers())


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def hostname(k):
    """Host k's name, the same in every fixture (each fixture's hosts resolve their own)."""
    return f"node{k}"


def available():
    """None when namespaces can be made here, else the reason (for a test's skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); this process runs as uid %d" % os.geteuid()
    probe = f"{registry.ID_PREFIX}-probe-{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return "cannot make a network namespace: " + r.stderr.strip()
    _ip("netns", "del", probe, check=False)
    return None


def leftovers():
    """What exists now of the fixtures this process made (empty when nothing is left)."""
    return [x for record in _made for x in registry.leftovers(record)]


def _on_signal(sig, frame):
    for c in list(_live):
        c.down()
    sys.exit(128 + sig)


@atexit.register
def _down_all():
    for c in list(_live):
        c.down()


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
        self.record = None

    @classmethod
    def attach(cls, fixture_id):
        """The fixture `fixture_id` made by another process (its down() removes it)."""
        record = registry.load(fixture_id)
        c = cls(hosts=record["hosts"])
        c.record = record
        return c

    # What the fixture is made of: use these rather than names or addresses of your own.
    id = property(lambda self: self.record["id"])
    bridge = property(lambda self: self.record["bridge"])
    subnet = property(lambda self: self.record["subnet"])  # e.g. "10.150.7.0/24"
    namespaces = property(lambda self: list(self.record["namespaces"]))

    def namespace(self, k):
        return self.record["namespaces"][k]

    def veth(self, k):
        """The root namespace's end of host k's link (on the bridge)."""
        return self.record["veths"][k]

    def address(self, k):
        return registry.address(self.record, k)

    hostname = staticmethod(hostname)

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self, owner_pid=None, made_by=None):
        """Claims an id and a subnet and makes the hosts. The fixture belongs to owner_pid
        (this process by default): when that process is gone, any later up() removes it."""
        if self in _live:
            raise RuntimeError(f"the fixture {self.id} is up already")
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, _on_signal)
        self.record = registry.claim(self.hosts, owner_pid or os.getpid(), made_by or " ".join(sys.argv))
        _live.append(self)
        _made.append(self.record)
        try:
            self._make()
        except BaseException:
            self.down()
            raise

    def _make(self):
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for k in range(self.hosts):
            hosts_file = "127.0.0.1 localhost\n" + "".join(
                f"{'127.0.1.1' if j == k and self.own_name_loopback else self.address(j)} {hostname(j)}\n"
                for j in range(self.hosts))
            ns, veth = self.namespace(k), self.veth(k)
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(hosts_file)
            if self.rate:
                self.cap(k, self.rate)

    def down(self):
        """Removes this fixture (its processes, namespaces, links, hosts files, record) and
        nothing else."""
        if self.record is not None:
            registry.remove(self.record)
        if self in _live:
            _live.remove(self)

    def leftovers(self):
        """What of this fixture exists now (empty when nothing is left)."""
        return registry.leftovers(self.record) if self.record else []

    def cap(self, k, rate):
        """Caps host k's link at `rate` in both directions (tbf shapes what an interface sends)."""
        spec = ["root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
        subprocess.run(["tc", "qdisc", "replace", "dev", self.veth(k), *spec], check=True)
        subprocess.run(["ip", "netns", "exec", self.namespace(k), "tc", "qdisc", "replace", "dev", "eth0", *spec],
                       check=True)

    def uncap(self, k):
        """Removes host k's rate cap."""
        subprocess.run(["tc", "qdisc", "del", "dev", self.veth(k), "root"], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "exec", self.namespace(k), "tc", "qdisc", "del", "dev", "eth0", "root"],
                       check=False, capture_output=True)

    def cut(self, k):
        """Partitions host k: its link to the bridge goes down (its processes keep running)."""
        _ip("link", "set", self.veth(k), "down")

    def heal(self, k):
        """Reconnects host k; returns when its eth0 reports the link up again (the kernel
        applies a carrier change up to a second later), at most 10 s."""
        _ip("link", "set", self.veth(k), "up")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = subprocess.run(["ip", "netns", "exec", self.namespace(k), "cat", "/sys/class/net/eth0/operstate"],
                               capture_output=True, text=True)
            if r.stdout.strip() == "up":
                # Address resolutions that failed during the cut would refuse the next
                # connections for a while ("No route to host"); start them afresh.
                for j in range(self.hosts):
                    _ip("-n", self.namespace(j), "neigh", "flush", "all", check=False)
                return
            time.sleep(0.05)
        raise RuntimeError(f"host {k}'s link is not up 10 s after healing")

    def command(self, k, argv):
        """argv run inside host k: its network, its /etc/hosts, its host name (and
        KINDLING_CLUSTER, for the launch agent)."""
        return ["ip", "netns", "exec", self.namespace(k), "env", f"{ENV}={self.id}", "unshare", "--uts", "sh", "-c",
                f'hostname {hostname(k)} && exec "$@"', "sh", *argv]

    def shell_command(self, k, line):
        """A shell command line run inside host k (Open MPI's launch agent passes one)."""
        return ["ip", "netns", "exec", self.namespace(k), "env", f"{ENV}={self.id}", "unshare", "--uts", "sh", "-c",
                f"hostname {hostname(k)} && {line}"]

    def command_keeping_sys(self, k, argv):
        """argv run inside host k as command() does, except that it keeps this machine's
        /sys (ip netns exec mounts the namespace's own sysfs, which hides the cgroup
        hierarchy that slurmd needs): the host's network, /etc/hosts and host name."""
        ns = self.namespace(k)
        return ["nsenter", f"--net=/run/netns/{ns}", "env", f"{ENV}={self.id}", "unshare", "--uts", "--mount", "sh",
                "-c", f'mount --bind /etc/netns/{ns}/hosts /etc/hosts && hostname {hostname(k)} && exec "$@"', "sh",
                *argv]

    def run_on(self, k, argv, **kwargs):
        return subprocess.run(self.command(k, argv), **kwargs)

    def popen_on(self, k, argv, **kwargs):
        return subprocess.Popen(self.command(k, argv), **kwargs)

    def pids_on(self, k):
        """The processes running inside host k now."""
        return registry.pids_in(self.namespace(k))

    def kill_host(self, k):
        """Kills every process of host k at once (SIGKILL), as a host that loses power."""
        for pid in self.pids_on(k):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def bytes_sent(self, k):
        """What host k's eth0 has sent so far, in bytes."""
        r = subprocess.run(["ip", "netns", "exec", self.namespace(k), "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                           check=True, capture_output=True, text=True)
        return int(r.stdout)


def _calling_shell():
    """The process that ran this command, through sudo and the like: a CLI fixture's owner."""
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
        except OSError:
            break
        if comm.split("(", 1)[1] not in ("sudo", "su", "doas", "env", "timeout", "nohup", "setsid"):
            break
        pid = int(rest.split()[1])
    return pid


def _current_fixture():
    """The fixture a command means: KINDLING_CLUSTER, else the namespace this process runs in."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    here = _ip("netns", "identify", str(os.getpid()), check=False).stdout.strip()
    return here.rsplit("-h", 1)[0] if here.startswith(registry.ID_PREFIX) and "-h" in here else None


def _parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", help=f"the fixture id (default: ${ENV})")
    sub = p.add_subparsers(dest="what", required=True)
    up = sub.add_parser("up", help="make N hosts; prints `export KINDLING_CLUSTER=<id>` and the hosts")
    up.add_argument("hosts", type=int)
    up.add_argument("--rate", help="cap every link, e.g. 100mbit, 1gbit, 10gbit")
    up.add_argument("--own-name-loopback", action="store_true", help="each host's own name is 127.0.1.1 (Debian)")
    up.add_argument("--owner", type=int, help="the process the fixture belongs to: once it is gone, another "
                    "fixture's up removes this one (default: the shell that ran this command, through sudo; "
                    "1 keeps it until `down`)")
    on = sub.add_parser("on", help="run a command on host K")
    on.add_argument("k", type=int)
    on.add_argument("argv", nargs=argparse.REMAINDER)
    for name in ("cut", "heal"):
        sub.add_parser(name, help=f"{name} host K's link").add_argument("k", type=int)
    agent = sub.add_parser("agent", help="run a shell command line on host node<K>, as ssh would (Open MPI's "
                           "plm_rsh_agent)")
    agent.add_argument("host")
    agent.add_argument("argv", nargs=argparse.REMAINDER)
    sub.add_parser("down", help="remove the fixture (only what it made)")
    sub.add_parser("list", help="the fixtures of this machine: id, subnet, hosts, owner, live or stale")
    sub.add_parser("check", help="say whether namespaces can be made here (exit 77 when not)")
    return p


def main():
    args = _parser().parse_args()
    if args.what == "check":
        reason = available()
        print(reason or "network namespaces are available")
        return 77 if reason else 0
    if args.what == "list":
        for r in registry.records():
            print(f"{r['id']} {r['subnet']} hosts={r['hosts']} owner={r['owner']['pid']} "
                  f"{'stale' if registry.is_stale(r) else 'live'} made_by={r['made_by']!r}")
        return 0
    if args.what == "up":
        c = Cluster(hosts=args.hosts, rate=args.rate, own_name_loopback=args.own_name_loopback)
        c.up(owner_pid=args.owner or _calling_shell(), made_by="cluster.py up")
        _live.remove(c)  # stays up after this command; `down` removes it
        print(f"export {ENV}={c.id}")
        print("# " + " ".join(f"{hostname(k)}={c.address(k)}" for k in range(c.hosts)) +
              f" (bridge {c.bridge}, subnet {c.subnet})")
        return 0
    fixture_id = args.cluster or _current_fixture()
    try:
        c = Cluster.attach(fixture_id) if fixture_id else None
    except FileNotFoundError:
        c = None
    if c is None:
        which = f"fixture {fixture_id} is recorded" if fixture_id else f"fixture is named ({ENV} or --cluster)"
        print(f"cluster.py {args.what}: no cluster {which}; cluster.py list shows them", file=sys.stderr)
        return 255 if args.what == "agent" else 2  # 255: ssh's code for a host it cannot reach
    if args.what == "down":
        c.down()
        return 0
    if args.what == "agent":
        k = int(args.host[len("node"):]) if args.host.startswith("node") and args.host[4:].isdigit() else -1
        if not 0 <= k < c.hosts:
            print(f"cluster.py agent: no host named {args.host!r} in the cluster {c.id}", file=sys.stderr)
            return 255
        argv = c.shell_command(k, " ".join(args.argv))
        os.execvp(argv[0], argv)
    if args.what == "on":
        return c.run_on(args.k, args.argv).returncode
    getattr(c, args.what)(args.k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
