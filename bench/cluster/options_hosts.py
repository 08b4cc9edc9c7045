#!/usr/bin/env python3
"""kindling's DDP options against torch's, side by side in one run across the namespace hosts
(bench_hosts.py's fixture, programs and pinning; 1 rank per host): ResNet-18 (or the MLP) on
links capped by tbf, each variant below run once per repeat, interleaved, medians reported.

  kindling (defaults: gradients as bucket views, buckets rebuilt in readiness order, 25 MiB)
  kindling with gradients copied (--copy-gradients), with 5 MiB buckets, with the optimizer
  inside backward, with ZeRO-1 (kindling::nn::ZeroRedundancyOptimizer), and ZeRO-1 with
  ZeroOptions::overlap_with_ddp
  torch's DDP: defaults; gradient_as_bucket_view + static_graph; those with 5 MiB buckets;
  those with torch.distributed.optim.ZeroRedundancyOptimizer (its overlap_with_ddp=True cannot
  run here: torch 2.15's hook_with_zero_step raises "Gloo backend using Overlapping DDP with ZeRO
  may meet hangs")
  the no-comm limit (each rank alone)

Beside each: the fraction of the no-comm limit and of the overlap bound, the step that
communication could reach at best when it starts in backward: forward and the optimizer, then
max(backward, the ring's bytes at the link's goodput); the no-comm step split into backward and
the rest as bench/scaling/readiness.py measured (profiles/), the goodput from
bench/scaling/link_rate.py (--goodput, MB/s). Sharded variants (kindling's --sharding, torch's
fully_shard per ResNet layer and root) have their own bound: their gathers can also hide behind
forward, so a step is at best the longer of the no-comm step and the transfers of the bytes the
variant sent (measured; ZeRO-2 moves the ring's bytes, a reduce-scatter and an all-gather, ZeRO-3
up to 1.5x them, a second all-gather in backward: the summary line states those two bounds).

  bench/cluster/options_hosts.py --build build-torch2 --python ~/.cache/kindling/torch-2.15.0/bin/python \
      [--hosts 2] [--rate 1gbit] [--model resnet18] [--goodput 120.2] [--repeats 3] [--only ZeRO]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_hosts  # noqa: E402
from bench_hosts import cluster  # noqa: E402

VARIANTS = [("kindling-gloo", "kindling (defaults)", ""),
            ("kindling-gloo", "kindling, gradients copied", "--copy-gradients"),
            ("kindling-gloo", "kindling, 5 MiB buckets", "--bucket-cap-mb 5"),
            ("kindling-gloo", "kindling, optimizer in backward", "--in-backward"),
            ("kindling-gloo", "kindling, ZeRO-1", "--zero"),
            ("kindling-gloo", "kindling, ZeRO-1 overlapped with DDP", "--zero-overlap"),
            ("python-gloo", "torch DDP (defaults)", ""),
            ("python-gloo", "torch DDP, views + static_graph", "--gradient-as-bucket-view --static-graph"),
            ("python-gloo", "torch DDP, views + static_graph, 5 MiB",
             "--gradient-as-bucket-view --static-graph --bucket-cap-mb 5"),
            ("python-gloo", "torch DDP, views + static_graph + ZeroRedundancyOptimizer",
             "--gradient-as-bucket-view --static-graph --zero"),
            ("kindling-gloo", "kindling, sharded ZeRO-2", "--sharding zero2"),
            ("kindling-gloo", "kindling, sharded ZeRO-3", "--sharding zero3"),
            ("kindling-gloo", "kindling, sharded ZeRO-2, stepping in backward", "--sharding zero2 --in-backward"),
            ("kindling-gloo", "kindling, sharded ZeRO-3, stepping in backward", "--sharding zero3 --in-backward"),
            ("python-gloo", "torch fully_shard, sharded ZeRO-2 (no reshard)", "--fsdp zero2"),
            ("python-gloo", "torch fully_shard, sharded ZeRO-3 (reshard)", "--fsdp zero3"),
            ("kindling-gloo", "kindling, bf16 hook", "--comm-hook bf16"),
            ("kindling-gloo", "kindling, 5 MiB buckets, bf16 hook", "--bucket-cap-mb 5 --comm-hook bf16"),
            ("python-gloo", "torch DDP, bf16 hook", "--comm-hook bf16"),
            ("python-gloo", "torch DDP, views + static_graph, 5 MiB, bf16 hook",
             "--gradient-as-bucket-view --static-graph --bucket-cap-mb 5 --comm-hook bf16"),
            ("no-comm", "no-comm limit", "")]


def kind(label):
    """What a variant is compared with: a 16-bit hook's variant ("bf16": half the bytes) with
    torch's best 16-bit run, a sharded one ("ZeRO-2" / "ZeRO-3") with torch's fully_shard of the
    same stage, the others ("") with torch's best uncompressed DDP."""
    for k in ("bf16", "sharded ZeRO-2", "sharded ZeRO-3"):
        if k in label:
            return k
    return ""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-torch2")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--goodput", type=float, default=120.2, help="the link's goodput, MB/s (link_rate.py)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="",
                   help="comma-separated words: run only the variants whose label contains one of them "
                        "(the no-comm limit always runs)")
    args = p.parse_args()
    words = [w for w in args.only.split(",") if w]
    variants = [v for v in VARIANTS if v[0] == "no-comm" or not words or any(w in v[1] for w in words)]
    args.models, args.impls, args.ranks_per_host, args.bench_args = args.model, "kindling-gloo,python-gloo", 1, ""
    code = bench_hosts.ready_to_run(args, "options_hosts.py")
    if code is not None:
        return code
    runs = {label: [] for _, label, _ in variants}
    with cluster.Cluster(hosts=args.hosts, rate=args.rate) as c:
        for r in range(args.repeats):
            for impl, label, extra in variants:
                args.bench_args = extra
                try:
                    rate_s, sent, result = bench_hosts.one_run(args, c, impl, args.hosts, args.model, args.rate)
                    runs[label].append((rate_s, sent, result))
                    print("repeat %d: %s: %.1f samples/s" % (r, label, rate_s), flush=True)
                except RuntimeError as e:  # reported; the others still run
                    print("repeat %d: %s failed: %s" % (r, label, str(e)[-1500:]), flush=True)
    report(args, runs, variants)
    return 0


def backward_share(model):
    """Backward's share of a step without communication, from the model's readiness profile
    (bench/scaling/readiness.py; bench_ddp alone has no DDP to time its backward)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scaling", "profiles",
                        model + ".json")
    if not os.path.exists(path):  # no profile (mlp10x): an MLP's backward does twice its forward's products
        print("no readiness profile %s: backward taken as 2/3 of the no-comm step" % path)
        return 2.0 / 3.0
    with open(path) as f:
        profile = json.load(f)
    return profile["backward_s"] / (profile["forward_s"] + profile["backward_s"])


def report(args, runs, variants):
    batch = bench_hosts.SIZES[args.model][0]
    limit_runs = runs["no-comm limit"]
    limit = statistics.median(x[0] for x in limit_runs)
    step = batch * args.hosts / limit  # a rank's step alone
    backward = step * backward_share(args.model)
    link = 2 * (args.hosts - 1) / args.hosts * args.gradient_bytes[args.model] / (args.goodput * 1e6)

    def bound_of(label, sent=None):  # samples/s; a sharded variant's from the bytes it sent (else its stage's)
        k = kind(label)
        if k.startswith("sharded"):
            t = sent / (args.goodput * 1e6) if sent else link * (1.5 if k.endswith("3") else 1.0)
            return batch * args.hosts / max(step, t)
        t = link / 2 if k == "bf16" else link
        return batch * args.hosts / (step - backward + max(backward, t))
    bound = bound_of("")
    print("\n%s, %d hosts, %s: no-comm limit %.1f samples/s (a step %.0f ms, backward %.0f ms); the ring's bytes "
          "take %.0f ms at %.1f MB/s; overlap bound %.1f samples/s (%.2f of the limit); with a 16-bit hook %.0f ms, "
          "bound %.1f (%.2f); sharded ZeRO-2 bound %.1f, ZeRO-3 (%.0f ms of transfers) %.1f" % (
              args.model, args.hosts, args.rate, limit, 1e3 * step, 1e3 * backward, 1e3 * link, args.goodput, bound,
              bound / limit, 500 * link, bound_of("bf16"), bound_of("bf16") / limit, bound_of("sharded ZeRO-2"),
              1.5e3 * link, bound_of("sharded ZeRO-3")))

    def best_torch(k):
        medians = [statistics.median(x[0] for x in runs[label]) for impl, label, _ in variants
                   if impl == "python-gloo" and runs[label] and kind(label) == k]
        return max(medians, default=None)
    print("\n| variant | samples/s (runs) | median | / best torch (same bytes) | of the limit | of the bound | "
          "backward ms | wait ms | MB sent per step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for impl, label, _ in variants:
        v = runs[label]
        if impl == "no-comm" or not v:
            if not v:
                print("| %s | failed | | | | | | | |" % label)
            continue
        m = statistics.median(x[0] for x in v)
        best = best_torch(kind(label))
        ms = lambda key: ("%.0f" % statistics.median(float(x[2][key]) for x in v)) if key in v[0][2] else "-"  # noqa
        print("| %s | %s | %.1f | %s | %.2f | %.2f | %s | %s | %.1f |" % (
            label, " / ".join("%.1f" % x[0] for x in v), m, "%.2f" % (m / best) if best else "-",
            m / limit, m / bound_of(label, statistics.median(x[1] for x in v)), ms("backward_ms"), ms("comm_wait_ms"),
            statistics.median(x[1] for x in v) / 1e6))


if __name__ == "__main__":
    sys.exit(main())
