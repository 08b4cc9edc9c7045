#!/usr/bin/env python3
"""Fault harness: kill -9 or SIGSTOP a random rank of a real training job at a random time,
under a real launcher, and check how the job ends.

Each trial starts `dist_tutorial train` (2 gloo ranks on loopback, Fashion-MNIST) under one
launcher (kindling-run, Parallel's spawn mode, torchrun, mpirun; mpirun-mpi trains on the mpi
backend instead of gloo), waits a random time, sends
the fault to a random rank and measures:
  ended     the launcher exited by itself within the bound (else the harness killed it: a hang)
  named     the job's output names the faulty rank (the launcher's failure line for kill -9,
            a surviving rank's "stalled: rank R" for SIGSTOP)
  records   kindling's launchers (kindling-run, Parallel): their summary's flight-record line names the
            faulty rank (no record from it, or it never called the collective the others wait in);
            a trial whose line names another rank fails, one without the line (no record written, or
            another launcher) is not counted
  leftover  a process of the trial still alive 2 s after the launcher exited
  seconds   from the fault to the launcher's exit
Prints one JSON object per trial and a summary table; exits 1 if any trial hung, left a
process behind, or did not name the rank.

  tests/fault/fault_harness.py --build build --trials 50            # long run (docs figures)
  tests/fault/fault_harness.py --build build --plan ci              # CTest: 4 fixed trials
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# mpirun-mpi: mpirun with the mpi backend (the others train on gloo).
LAUNCHERS = ["kindling-run", "parallel", "torchrun", "mpirun", "mpirun-mpi"]
FAULTS = ["kill", "stop"]
# torchrun (1.13) stops workers with SIGTERM and waits 30 s before SIGKILL; a stopped worker
# cannot act on SIGTERM, so torchrun's own stop of it takes that long.
TORCHRUN_STOP_WAIT = 30.0


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trial_pids(marker):
    """pid -> environment of every process whose environment holds the trial's marker."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if b"KINDLING_FAULT_TRIAL=" + marker.encode() in env:
            found[int(name)] = dict(e.decode(errors="replace").split("=", 1) for e in env if b"=" in e)
    return found


def rank_pid(marker, rank):
    for pid, env in trial_pids(marker).items():
        r = env.get("RANK", env.get("OMPI_COMM_WORLD_RANK"))
        # Parallel's parent and the launchers have no rank; mpirun's children have both.
        if r == str(rank) and "dist_tutorial" in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"):
            return pid
    return None


def command(args, launcher, port):
    tutorial = os.path.join(args.build, "examples", "dist_tutorial", "dist_tutorial")
    train = ["train", "--epochs", "1000", "--stall-timeout", str(args.stall), "--timeout", "600"]
    n = str(args.nproc)
    if launcher == "kindling-run":
        return [os.path.join(args.build, "kindling-run"), "--nproc_per_node", n, "--master_port", str(port),
                tutorial] + train
    if launcher == "parallel":
        return [tutorial] + train + ["--nproc-per-node", n, "--master-port", str(port)]
    if launcher == "torchrun":
        return [sys.executable, os.path.join(SOURCE, "tests", "launch", "torchrun_compat.py"), "--monitor_interval",
                "0.2", "--nproc_per_node", n, "--master_port", str(port), "--no_python", tutorial] + train
    if launcher == "mpirun":
        return ["mpirun", "--oversubscribe", "-np", n, "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}",
                tutorial] + train
    if launcher == "mpirun-mpi":
        return ["mpirun", "--oversubscribe", "-np", n, tutorial] + train + ["--backend", "mpi"]
    raise ValueError(launcher)


def named(output, launcher, fault, rank):
    if fault == "stop":
        return re.search(rf"stalled: rank {rank} ", output) is not None
    patterns = {
        "kindling-run": rf"rank {rank} \(local rank {rank}, pid \d+\) killed by SIGKILL",
        "parallel": rf"rank {rank} \(local rank {rank}, pid \d+\) killed by SIGKILL",
        "torchrun": rf"rank\s*:\s*{rank} \(local_rank: {rank}\)[\s\S]*Signal 9",
        "mpirun": rf"process rank {rank} with PID \d+ on node \S+ exited on signal 9",
    }
    patterns["mpirun-mpi"] = patterns["mpirun"]
    return re.search(patterns[launcher], output) is not None


FLIGHT_LINE = re.compile(r"^  flight records: .*$", re.M)


def records_name(output, victim):
    """What kindling's launchers say of the trial's flight records: None when they say nothing (no
    record written: a fault before any collective, or another launcher), else whether the line
    names the faulty rank as the one without a record or as the one that never called the
    collective the others wait in."""
    line = FLIGHT_LINE.search(output)
    if line is None:
        return None
    text = line.group(0)
    return re.search(rf"no record from ranks? (?:\d+, )*{victim}\b", text) is not None or \
        re.search(rf"; rank {victim} never called it", text) is not None


def run_trial(args, launcher, fault, victim, delay):
    marker = uuid.uuid4().hex
    env = dict(os.environ, KINDLING_FAULT_TRIAL=marker, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               KINDLING_FLIGHT_RECORD_DIR=os.path.join(args.workdir, f"flight-{marker}"))
    bound = args.stall + 10.0 if fault == "stop" else 10.0
    if launcher == "torchrun" and fault == "stop":
        bound += TORCHRUN_STOP_WAIT
    log = open(os.path.join(args.workdir, f"trial-{marker}.log"), "w+")
    start = time.monotonic()
    proc = subprocess.Popen(command(args, launcher, free_port()), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    time.sleep(delay)
    pid = None
    while pid is None and proc.poll() is None and time.monotonic() - start < delay + 20:
        pid = rank_pid(marker, victim)
        if pid is None:
            time.sleep(0.2)
    result = {"launcher": launcher, "fault": fault, "rank": victim, "delay_s": round(delay, 2), "bound_s": bound}
    if pid is None:
        proc.kill()
        proc.wait()
        result.update(ok=False, error="the victim rank was not found running")
        return result
    os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    t_fault = time.monotonic()
    try:
        proc.wait(timeout=max(bound * 2, 60))
        ended = True
    except subprocess.TimeoutExpired:
        ended = False
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    seconds = time.monotonic() - t_fault
    time.sleep(2)
    left = trial_pids(marker)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    log.seek(0)
    output = log.read()
    log.close()
    result.update(ended=ended, within_bound=ended and seconds <= bound, named=named(output, launcher, fault, victim),
                  records=records_name(output, victim), leftovers=len(left), seconds=round(seconds, 2),
                  exit_code=proc.returncode)
    shutil.rmtree(os.path.join(args.workdir, f"flight-{marker}"), ignore_errors=True)
    result["ok"] = result["within_bound"] and result["named"] and not left and result["records"] is not False
    if not result["ok"]:
        result["log"] = os.path.join(args.workdir, f"trial-{marker}.log")
    else:
        os.remove(os.path.join(args.workdir, f"trial-{marker}.log"))
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="the build folder (kindling-run, examples/dist_tutorial)")
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--plan", choices=["random", "ci"], default="random",
                   help="ci: 4 fixed trials, one per launcher, both faults")
    p.add_argument("--launchers", default=",".join(LAUNCHERS))
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--stall", type=float, default=5.0, help="the ranks' stall period in seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default="/tmp", help="where logs of failed trials are kept")
    args = p.parse_args()
    rng = random.Random(args.seed)
    if args.plan == "ci":
        plan = [("kindling-run", "stop"), ("parallel", "kill"), ("torchrun", "kill"), ("mpirun", "stop")]
        trials = [(l, f, rng.randrange(args.nproc), rng.uniform(4, 7)) for l, f in plan]
    else:
        launchers = args.launchers.split(",")
        trials = [(launchers[i % len(launchers)], rng.choice(FAULTS), rng.randrange(args.nproc), rng.uniform(3, 12))
                  for i in range(args.trials)]
    results = []
    for launcher, fault, victim, delay in trials:
        r = run_trial(args, launcher, fault, victim, delay)
        print(json.dumps(r), flush=True)
        results.append(r)
    print("\nlauncher      fault  trials  ended  hangs  in-bound  named  records  leftovers  median s  max s")
    for key in sorted({(r["launcher"], r["fault"]) for r in results}):
        rs = [r for r in results if (r["launcher"], r["fault"]) == key]
        secs = [r["seconds"] for r in rs if "seconds" in r]
        print(f"{key[0]:<13} {key[1]:<6} {len(rs):>6} {sum(r.get('ended', False) for r in rs):>6} "
              f"{sum(not r.get('ended', True) for r in rs):>6} {sum(r.get('within_bound', False) for r in rs):>9} "
              f"{sum(r.get('named', False) for r in rs):>6} {sum(r.get('records') is True for r in rs):>8} "
              f"{sum(r.get('leftovers', 0) for r in rs):>10} "
              f"{statistics.median(secs) if secs else float('nan'):>9.2f} {max(secs) if secs else float('nan'):>6.2f}")
    bad = [r for r in results if not r["ok"]]
    print(f"\n{len(results) - len(bad)} of {len(results)} trials ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
