"""The elastic job of the cluster tests (elastic_test.py, etcd_test.py): kindling-run on every host,
tests/cluster/elastic_train.cpp as the job, its output lines read as they come, its ledger and
its lines parsed."""
import argparse
import collections
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import cluster
from checks import Failure, expect, prepare, run_cases

SAMPLES, BATCH, EPOCHS, SAVE_EVERY = 600, 12, 3, 5
ITERATIONS = SAMPLES // BATCH * EPOCHS


class Host:
    """A launcher on one host whose output lines are collected as they come."""

    def __init__(self, c, k, argv):
        self.k = k
        self.proc = c.popen_on(k, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.times = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.times.append(time.monotonic())
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_line(self, pattern, timeout, start=0):
        """The index of the first line from `start` on matching `pattern`; Failure at timeout."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(start, len(self.lines)):
                    if regex.search(self.lines[i]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    raise Failure("host %d: no line matching %r within %d s; output:\n%s" % (
                        self.k, pattern, timeout, self.text()))
                self.cond.wait(min(left, 0.5))

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure("host %d: its launcher did not end within %d s (a hang); output:\n%s" % (
                self.k, timeout, self.text()))
        self.reader.join(5)
        return self.proc.returncode

    @staticmethod
    def kill_left(hosts):
        """Kills the launchers of `hosts` that still run (a failed case's clean-up)."""
        for h in hosts:
            if h.proc.poll() is None:
                h.proc.kill()

    def text(self):
        with self.cond:
            return "\n".join(self.lines)


def launcher(args, run_id, folder, nnodes="2:3", join_timeout=60, extra=(), rdzv=("--rdzv_endpoint", "node0:29400"),
             command="train", flags=()):
    """kindling-run's command line for the job on one host; `rdzv`: how it finds the rendezvous,
    `flags`: more of kindling-run's options, `command`: elastic_train's (train, train-live). Its
    temporary files (error files, live-recovery files) go to folder/tmp, so that what a killed
    launcher leaves goes with the case's folder."""
    tmp = os.path.join(folder, "tmp")
    os.makedirs(tmp, exist_ok=True)
    return ["env", "TMPDIR=" + tmp, args.kindling_run, "--nnodes", nnodes, "--nproc_per_node", "1", *rdzv,
            "--rdzv_id", run_id, "--max_restarts", "3", "--grace_period", "2",
            "--rdzv_conf", "join_timeout=%d,last_call_timeout=3" % join_timeout, *flags,
            args.elastic_train, command, folder, "--samples", str(SAMPLES), "--batch", str(BATCH), "--epochs",
            str(EPOCHS), "--save-every", str(SAVE_EVERY), "--sleep-ms", str(args.sleep_ms), *extra]


def kill_mid_epoch(c, host0, k=2):
    """Kills host k once host 0's rank trains iteration 23-39 of a 3-rank world, and waits for
    the 2-rank world's first iteration. Returns (the last iteration before the kill, the index
    of host 0's line of that first iteration, that iteration, seconds from the kill to it)."""
    i = host0.wait_line(r"PROGRESS world=3 iteration=(2[3-9]|3\d)\b", 120)
    last_before = int(re.search(r"iteration=(\d+)", host0.lines[i]).group(1))
    killed_at = time.monotonic()
    c.kill_host(k)
    j = host0.wait_line(r"PROGRESS world=2 ", 120, i)
    first_after = int(re.search(r"iteration=(\d+)", host0.lines[j]).group(1))
    return last_before, j, first_after, host0.times[j] - killed_at


def read_ledger(folder):
    """{(epoch, iteration): sorted ids} and {(epoch, id): count} from the job's ledger."""
    by_iteration = collections.defaultdict(list)
    count = collections.Counter()
    with open(os.path.join(folder, "ledger.txt")) as f:
        for line in f:
            epoch, iteration, sample = (int(v) for v in line.split())
            by_iteration[(epoch, iteration)].append(sample)
            count[(epoch, sample)] += 1
    return {k: sorted(v) for k, v in by_iteration.items()}, count


def lost_and_repeated(count, epochs=EPOCHS):
    """Samples of the epochs that the ledger's counts miss, and extra trainings of samples."""
    lost = sum(1 for e in range(1, epochs + 1) for s in range(SAMPLES) if count[(e, s)] == 0)
    return lost, sum(n - 1 for n in count.values() if n > 1)


@contextlib.contextmanager
def workspace(prefix):
    """A temporary folder for a case's runs, removed however the case ends."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def reference_run(c, work, command_of):
    """An uninterrupted run on hosts 0 and 1 (host k runs command_of(k, folder)) in work/reference;
    returns host 0's output and the ledger's ids by iteration."""
    reference = os.path.join(work, "reference")
    os.makedirs(reference)
    hosts = [Host(c, k, command_of(k, reference)) for k in range(2)]
    for h in hosts:
        expect(h.finish(180) == 0, "the uninterrupted run failed on host %d:\n%s" % (h.k, h.text()))
    by_iteration, _ = read_ledger(reference)
    expect(len(by_iteration) == ITERATIONS, "the uninterrupted run's ledger has %d iterations, not %d" % (
        len(by_iteration), ITERATIONS))
    return hosts[0].text(), by_iteration


def check_ledger(folder, ref_iterations):
    """Every sample of every epoch once in the job's ledger, and each iteration's global batch as
    in the uninterrupted run."""
    by_iteration, count = read_ledger(folder)
    lost, repeated = lost_and_repeated(count)
    expect(lost == 0 and repeated == 0, "samples lost %d, repeated %d" % (lost, repeated))
    expect(len(count) == SAMPLES * EPOCHS, "the ledger holds %d (epoch, sample) pairs, not %d" % (
        len(count), SAMPLES * EPOCHS))
    for key, ids in ref_iterations.items():
        expect(by_iteration.get(key) == ids, "epoch %d iteration %d trained other samples than the "
               "uninterrupted run" % key)


def starts(host):
    """The START lines of a host's output as dicts, in order."""
    found = []
    for line in host.lines:
        m = re.search(r"START (.*)", line)
        if m:
            found.append(dict(item.split("=", 1) for item in m.group(1).split()))
    return found


def weights(text):
    m = re.findall(r"WEIGHTS (.*)", text)
    expect(m, "no WEIGHTS line in:\n" + text)
    return [float(v) for v in m[-1].split()]


def eval_line(text):
    m = re.findall(r"EVAL mse=(\S+) mae=(\S+)", text)
    expect(m, "no EVAL line in:\n" + text)
    return tuple(float(v) for v in m[-1])


def close(a, b, rel, what):
    expect(abs(a - b) <= rel * max(abs(a), abs(b), 1e-12), "%s: %r against %r (relative tolerance %g)" % (
        what, a, b, rel))


def main(doc):
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("-k", default="", help="run only this case")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--sleep-ms", type=int, default=40, help="pause per iteration (the job's pace)")
    p.add_argument("--soak-minutes", type=float, default=10, help="live_test.py's soak: how long hosts come and go")
    args = p.parse_args()
    skip = prepare(args)
    if skip:
        return skip
    args.elastic_train = os.path.join(os.path.abspath(args.build), "tests", "elastic_train")
    failed = run_cases(args)
    left = cluster.leftovers()
    if left:
        print("FAIL: the fixture left %s" % left)
        failed += 1
    return 1 if failed else 0

