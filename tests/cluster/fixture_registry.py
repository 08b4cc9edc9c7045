"""What the namespace clusters of this machine own, so that fixtures started at the same time
(two users, a test beside a benchmark) never touch each other's namespaces and processes.

Each fixture (tests/cluster/cluster.py) claims, under an exclusive flock of
STATE_DIR/lock, a unique id ("kdl" and 6 hex digits: its prefix for every name) and a /24
subnet that no interface, route, namespace address or other fixture on this machine uses,
and records both, with every name it will make and its owner process, in
STATE_DIR/<id>.json before it makes anything. It removes only what that record names.
A record whose owner process is gone (its pid no longer runs, or runs another program
started later) is stale: the next claim removes what it names, and only that.
"""
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import time

STATE_DIR = "/run/kindling-cluster" if os.access("/run", os.W_OK) else "/tmp/kindling-cluster"
ID_PREFIX = "kdl"
IFNAMSIZ = 15  # Linux interface names: at most 15 characters
# Where subnets are taken from, in this order: 10.128.0.0/9 first (32768 subnets of /24).
POOLS = ["10.128.0.0/9", "10.0.0.0/9", "172.16.0.0/12", "192.168.0.0/16"]
HOST_OFFSET = 10  # host k is .<10 + k> of its subnet


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def names(fixture_id, hosts):
    """The names a fixture of `hosts` hosts makes: bridge, namespaces, veths (root side)."""
    made = {"bridge": f"{fixture_id}-br", "namespaces": [f"{fixture_id}-h{k}" for k in range(hosts)],
            "veths": [f"{fixture_id}-v{k}" for k in range(hosts)]}
    for link in [made["bridge"]] + made["veths"]:
        if len(link) > IFNAMSIZ:
            raise ValueError(f"interface name {link!r} is longer than {IFNAMSIZ} characters")
    return made


def namespaces_now():
    return [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]


def process_identity(pid):
    """(start time in clock ticks, pid namespace the pid is counted in) of a running process,
    or None. The namespace is this process's own: `pid` names a process of the namespace that
    reads /proc, whichever (child) namespace the process itself sits in, and /proc/<pid>/ns/pid
    of another process is unreadable without ptrace rights (/proc/1/ns/pid in a container:
    `cluster.py up --owner 1` was refused as "does not run")."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        return start, os.readlink("/proc/self/ns/pid")
    except (OSError, IndexError, ValueError):
        return None


def is_stale(record):
    """True only when the record's owner provably no longer runs: its pid is gone or belongs
    to a process started later. An owner in another pid namespace cannot be checked: live."""
    owner = record.get("owner", {})
    if process_identity("self")[1] != owner.get("pidns"):
        return False
    now = process_identity(owner.get("pid"))
    return now is None or now[0] != owner.get("start")


@contextlib.contextmanager
def _locked():
    os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
    with open(os.path.join(STATE_DIR, "lock"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _path(fixture_id):
    return os.path.join(STATE_DIR, fixture_id + ".json")


def records():
    """Every fixture recorded on this machine (live or stale)."""
    found = []
    if not os.path.isdir(STATE_DIR):
        return found
    for name in sorted(os.listdir(STATE_DIR)):
        if name.startswith(ID_PREFIX) and name.endswith(".json"):
            try:
                with open(os.path.join(STATE_DIR, name)) as f:
                    found.append(json.load(f))
            except (OSError, ValueError):
                pass  # removed meanwhile
    return found


def load(fixture_id):
    with open(_path(fixture_id)) as f:
        return json.load(f)


def _write(record):
    tmp = _path(record["id"]) + f".{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.rename(tmp, _path(record["id"]))  # readers never see half a record


def _networks_in_use(recorded):
    """Every IPv4 network this machine's interfaces (root and named namespaces), routes
    (but the default one) and recorded fixtures use."""
    used = [ipaddress.ip_network(r["subnet"]) for r in recorded]
    listings = [_ip("-4", "-o", "addr", check=False).stdout]
    listings += [_ip("-n", ns, "-4", "-o", "addr", check=False).stdout for ns in namespaces_now()]
    for text in listings:
        for line in text.splitlines():
            words = line.split()
            if "inet" in words:
                used.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    kinds = {"unicast", "local", "broadcast", "multicast", "throw", "unreachable", "prohibit", "blackhole", "nat"}
    for line in _ip("-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        words = line.split()
        dest = words[1] if words and words[0] in kinds and len(words) > 1 else (words[0] if words else "default")
        try:
            network = ipaddress.ip_network(dest, strict=False)
        except ValueError:
            continue  # "default" and the like
        if network.prefixlen > 0:
            used.append(network)
    return used


def _free_subnet(used):
    for pool in map(ipaddress.ip_network, POOLS):
        count = pool.num_addresses // 256
        start = random.randrange(count)  # fixtures started together rarely even try the same one
        for i in range(count):
            candidate = ipaddress.ip_network((int(pool.network_address) + ((start + i) % count) * 256, 24))
            if not any(candidate.overlaps(n) for n in used):
                return candidate
    raise RuntimeError("no free /24 subnet for a cluster fixture in " + ", ".join(POOLS))


def _new_id(recorded):
    taken = {r["id"] for r in recorded}
    present = namespaces_now() + [line.split(":")[1].strip().split("@")[0]
                                  for line in _ip("-o", "link", check=False).stdout.splitlines()]
    while True:
        fixture_id = ID_PREFIX + os.urandom(3).hex()
        if fixture_id not in taken and not any(n.startswith(fixture_id + "-") for n in present):
            return fixture_id


def claim(hosts, owner_pid, made_by):
    """Removes the stale fixtures, then records a new one for `hosts` hosts owned by
    `owner_pid`: its id, subnet and names (nothing is made yet). Returns the record."""
    identity = process_identity(owner_pid)
    if identity is None:
        raise RuntimeError(f"the owner process {owner_pid} of a new cluster fixture does not run")
    with _locked():
        recorded = records()
        for record in [r for r in recorded if is_stale(r)]:
            remove(record)
            recorded.remove(record)
        fixture_id = _new_id(recorded)
        subnet = _free_subnet(_networks_in_use(recorded))
        record = {"id": fixture_id, "subnet": str(subnet), "hosts": hosts, **names(fixture_id, hosts),
                  "owner": {"pid": owner_pid, "start": identity[0], "pidns": identity[1]},
                  "made_by": made_by, "created": time.time()}
        _write(record)
    return record


def address(record, k):
    return str(ipaddress.ip_network(record["subnet"]).network_address + HOST_OFFSET + k)


def pids_in(namespace):
    return [int(p) for p in _ip("netns", "pids", namespace, check=False).stdout.split() if p.isdigit()]


def remove(record):
    """Removes what `record` names, and nothing else: the processes in its namespaces, its
    namespaces, links and hosts files, then the record itself. Missing parts are skipped."""
    present = namespaces_now()
    for ns in record["namespaces"]:
        if ns in present:
            for pid in pids_in(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
    for link in record["veths"] + [record["bridge"]]:
        if _ip("link", "show", link, check=False).returncode == 0:
            _ip("link", "del", link, check=False)
    with contextlib.suppress(FileNotFoundError):
        os.remove(_path(record["id"]))


def leftovers(record):
    """What of the fixture `record` names exists now (empty when nothing is left)."""
    present = namespaces_now()
    found = [ns for ns in record["namespaces"] if ns in present]
    found += [link for link in [record["bridge"]] + record["veths"]
              if _ip("link", "show", link, check=False).returncode == 0]
    found += [f"/etc/netns/{ns}" for ns in record["namespaces"] if os.path.exists(f"/etc/netns/{ns}")]
    if os.path.exists(_path(record["id"])):
        found.append(_path(record["id"]))
    return found
