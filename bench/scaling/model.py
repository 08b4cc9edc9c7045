#!/usr/bin/env python3
"""A scaling model of kindling's data-parallel step: predicts a step's time, and samples/s,
from what was measured on one host and what the link and the algorithm are.

Inputs:
- the compute of one rank's step without communication (a measured no-comm step) and its
  split into backward and the rest, and when each gradient is ready in backward, in what
  order, with its bytes (bench/scaling/readiness.py's profile);
- the buckets as kindling's DDP makes them (src/nn/ddp/ddp_buckets.cpp: a first bucket of 1 MiB,
  then bucket_cap_mb; in readiness order, or in reverse registration order as before the
  rebuild of 200f774);
- the link: its rate (tbf's rate counts whole Ethernet frames; a TCP stream carries 1448 bytes
  of payload per 1514-byte frame, so the goodput is 0.956 of it) and a latency per message;
- the all-reduce: a ring over the n = hosts x ranks-per-host ranks (each host sends and
  receives 2(n-1)/n of a bucket over its link, in 2(n-1) steps of a message each), or the
  hierarchical one (a ring inside each host, then the hosts' leaders' ring: 2(H-1)/H of a
  bucket on the link), with fp32 gradients or 16-bit ones (fp16/bf16 hooks: half the bytes);
- kappa, the CPU seconds a host's cores spend per byte it sends (kernel network stack, the
  engine's copies and reductions), taken from the same cores as the compute: on a CPU
  cluster the exchange slows backward. 0 where the exchange has its own engine (a GPU with
  NCCL). Fitted on one measured configuration (--fit), then held fixed.

The step, simulated in small time steps: forward (and the optimizer); backward, whose progress
makes buckets ready; the buckets' all-reduces one after the other in bucket order (as the
process group runs them), each waiting for its bucket and for the one before, paying its
latency then moving its bytes at the link's rate, or slower when the CPU is the limit: while
backward runs, the exchange may take at most half of the rank's share of a core (the
scheduler shares a core between the two), and backward progresses at what is left.
The step ends when backward and the last all-reduce are done.

  bench/scaling/model.py --check          # against the measured cluster figures (measured.json)
  bench/scaling/model.py --predict        # 8 to 256 hosts at 10 and 100 Gbit/s
"""
import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
GOODPUT = 1448.0 / 1514.0  # TCP payload per full Ethernet frame (timestamps on)
DT = 2e-5  # simulation step, seconds


def load_profile(model):
    with open(os.path.join(HERE, "profiles", model + ".json")) as f:
        return json.load(f)


def buckets(profile, cap_mb, order="ready"):
    """kindling's buckets: [(bytes, ready fraction of backward)], in the order they launch."""
    params = profile["params"]
    if order == "registration":
        by_name = {name: i for i, name in enumerate(profile["registration"])}
        params = sorted(params, key=lambda p: -by_name[p["name"]])
    first_cap, cap = min(MIB, int(cap_mb * MIB)), int(cap_mb * MIB)
    groups = []
    for p in params:
        if groups and groups[-1][0] < (first_cap if len(groups) == 1 else cap):
            groups[-1][0] += p["bytes"]
            groups[-1][1] = max(groups[-1][1], p["ready"])
        else:
            groups.append([p["bytes"], p["ready"]])
    return [tuple(g) for g in groups]


def transfers(bucket_bytes, hosts, per_host, algorithm, dtype_factor):
    """The phases of one bucket's all-reduce: [(bytes on the host's link, messages, local
    bytes)], one after the other."""
    b = bucket_bytes * dtype_factor
    n = hosts * per_host
    if algorithm == "hierarchical" and per_host > 1:
        local = 2.0 * (per_host - 1) / per_host * b
        return [(0.0, 2 * (per_host - 1), local), (2.0 * (hosts - 1) / hosts * b, 2 * (hosts - 1), 0.0)]
    return [(2.0 * (n - 1) / n * b, 2 * (n - 1), 0.0)]


def step_time(cfg, profile):
    """Seconds of one step for the configuration `cfg` (a dict: compute_s, hosts, per_host,
    rate_bps (0: no cap), latency_s, algorithm, dtype_factor, bucket_mb, order, kappa,
    ranks_per_core)."""
    share_b = profile["backward_s"] / (profile["forward_s"] + profile["backward_s"])
    backward = cfg["compute_s"] * share_b
    rest = cfg["compute_s"] - backward
    rate = cfg["rate_bps"] * GOODPUT / 8 if cfg["rate_bps"] else float("inf")
    kappa = cfg["kappa"] * cfg.get("ranks_per_core", 1)  # in the rank's own CPU seconds
    queue = []
    for size, ready in buckets(profile, cfg["bucket_mb"], cfg.get("order", "ready")):
        for k, (link, messages, local) in enumerate(transfers(size, cfg["hosts"], cfg["per_host"], cfg["algorithm"],
                                                              cfg["dtype_factor"])):
            queue.append({"ready": ready if k == 0 else None, "link": link, "local": local,
                          "wait": messages * cfg["latency_s"]})
    done, t, current = 0.0, 0.0, 0
    while done < backward or current < len(queue):
        computing = done < backward
        cpu_for_comm = 0.5 if computing else 1.0
        used = 0.0
        if current < len(queue):
            q = queue[current]
            if q["ready"] is None or done >= q["ready"] * backward - 1e-12:
                q["ready"] = -1.0  # started
                if q["wait"] > 0:
                    q["wait"] -= DT
                elif q["local"] > 0:  # inside a host: its own rate, or the CPU
                    speed = min(cfg.get("local_rate", float("inf")), cpu_for_comm / kappa if kappa > 0 else float("inf"))
                    moved = min(q["local"], speed * DT)
                    q["local"] -= moved
                    used = kappa * moved / DT
                else:
                    speed = min(rate, cpu_for_comm / kappa) if kappa > 0 else rate
                    moved = min(q["link"], speed * DT)
                    q["link"] -= moved
                    used = kappa * moved / DT
                if q["wait"] <= 0 and q["local"] <= 0 and q["link"] <= 1e-9:
                    current += 1
        if computing:
            done = min(backward, done + (1.0 - used) * DT)
        t += DT
    return rest + t


def samples_per_s(cfg, profile):
    return cfg["batch"] * cfg["hosts"] * cfg["per_host"] / step_time(cfg, profile)


def configuration(entry, kappa):
    """A measured entry of measured.json as the model's configuration."""
    n = entry["hosts"] * entry.get("per_host", 1)
    rates = {"100mbit": 100e6, "1gbit": 1e9, "10gbit": 10e9, "100gbit": 100e9, "none": 0}
    return {"batch": entry["batch"], "hosts": entry["hosts"], "per_host": entry.get("per_host", 1),
            "compute_s": entry["batch"] * n / entry["limit"], "rate_bps": rates[entry["link"]],
            "latency_s": entry.get("latency_s", 0.0), "algorithm": entry.get("algorithm", "ring"),
            "dtype_factor": 0.5 if entry.get("hook") in ("fp16", "bf16") else 1.0,
            "bucket_mb": entry.get("bucket_mb", 25), "order": entry.get("order", "registration"),
            "kappa": kappa, "ranks_per_core": max(1, n // entry.get("cores", 2))}


def fit_kappa(entry, profiles):
    """kappa such that the model gives `entry`'s measured samples/s (bisection)."""
    lo, hi = 0.0, 1e-7
    for _ in range(40):
        mid = (lo + hi) / 2
        if samples_per_s(configuration(entry, mid), profiles[entry["model"]]) > entry["samples_per_s"]:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def link_seconds(cfg, profile):
    """The step's transfers at the link's rate alone (no overlap, no CPU): inf without a cap."""
    if not cfg["rate_bps"]:
        return 0.0
    total = sum(link for size, _ in buckets(profile, cfg["bucket_mb"])
                for link, _, _ in transfers(size, cfg["hosts"], cfg["per_host"], cfg["algorithm"], cfg["dtype_factor"]))
    return total / (cfg["rate_bps"] * GOODPUT / 8)


def check(measured, profiles, kappa, bound):
    """Prints every measured entry beside the model; True when every entry where the link
    dominates (its transfers alone take at least twice the compute) is within `bound`."""
    print("| model | hosts x ranks | link | all-reduce | bucket MiB | measured | predicted | error | link dominates |")
    print("|---|---|---|---|---|---|---|---|---|")
    errors = {True: [], False: []}
    for e in measured["entries"]:
        cfg = configuration(e, kappa)
        predicted = samples_per_s(cfg, profiles[e["model"]])
        error = predicted / e["samples_per_s"] - 1
        dominated = link_seconds(cfg, profiles[e["model"]]) >= 2 * cfg["compute_s"]
        if not e.get("fitted"):
            errors[dominated].append(error)
        algo = e.get("algorithm", "ring") + ("" if e.get("hook", "none") == "none" else " " + e["hook"])
        print("| %s | %d x %d | %s | %s | %s | %s | %.1f | %+.1f%%%s | %s |" % (
            e["model"], e["hosts"], e.get("per_host", 1), e["link"], algo, e.get("bucket_mb", 25),
            e["samples_per_s"], predicted, 100 * error, " (fitted)" if e.get("fitted") else "",
            "yes" if dominated else "no"))
    for dominated, what in ((True, "where the link dominates"), (False, "elsewhere")):
        if errors[dominated]:
            print("%s (%d entries): errors from %+.1f%% to %+.1f%%" % (
                what, len(errors[dominated]), 100 * min(errors[dominated]), 100 * max(errors[dominated])))
    worst = max((abs(x) for x in errors[True]), default=0.0)
    print("check: the largest error where the link dominates is %.1f%% (bound %.0f%%)" % (100 * worst, 100 * bound))
    return bool(errors[True]) and worst <= bound


def predict(profiles, gpu):
    """samples/s per GPU-rank and efficiency for 8-256 hosts at 10 and 100 Gbit/s."""
    print("| hosts x GPUs | link | all-reduce | bucket MiB | step ms | efficiency |")
    print("|---|---|---|---|---|---|")
    profile = profiles[gpu["model"]]
    for rate in (10e9, 100e9):
        for hosts in (8, 32, 128, 256):
            for algorithm, hook, cap in (("ring", "none", 25), ("ring", "none", 5), ("ring", "fp16", 25),
                                         ("hierarchical", "none", 25)):
                cfg = {"batch": gpu["batch"], "hosts": hosts, "per_host": gpu["per_host"], "compute_s": gpu["step_s"],
                       "rate_bps": rate, "latency_s": gpu["latency_s"], "algorithm": algorithm,
                       "dtype_factor": 0.5 if hook == "fp16" else 1.0, "bucket_mb": cap, "order": "ready",
                       "kappa": 0.0, "ranks_per_core": 1}
                cfg["local_rate"] = gpu["local_rate"]
                t = step_time(cfg, profile)
                print("| %d x %d | %d Gbit/s | %s%s | %d | %.1f | %.2f |" % (
                    hosts, gpu["per_host"], rate / 1e9, algorithm, "" if hook == "none" else " " + hook, cap,
                    1e3 * t, gpu["step_s"] / t))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare with measured.json; exit 1 beyond --bound")
    p.add_argument("--bound", type=float, default=0.12)
    p.add_argument("--predict", action="store_true")
    a = p.parse_args()
    with open(os.path.join(HERE, "measured.json")) as f:
        measured = json.load(f)
    profiles = {m: load_profile(m) for m in ("mlp", "resnet18")}
    fitted = [e for e in measured["entries"] if e.get("fitted")]
    kappa = fit_kappa(fitted[0], profiles)
    print("kappa = %.4g CPU s per byte sent (%.0f MB/s of one core), fitted on %s %d hosts %s"
          % (kappa, 1e-6 / kappa if kappa else 0, fitted[0]["model"], fitted[0]["hosts"], fitted[0]["link"]))
    ok = True
    if a.check:
        ok = check(measured, profiles, kappa, a.bound)
    if a.predict:
        predict(profiles, measured["gpu"])
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
