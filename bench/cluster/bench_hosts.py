#!/usr/bin/env python3
"""DDP across the hosts of the namespace cluster (tests/cluster/cluster.py): samples/s of
bench/ddp's training step with 1 rank per host, links capped by tc's tbf, for

  kindling-gloo  bench_ddp under kindling-run on every host (master = node0)
  kindling-mpi   bench_ddp --backend mpi under mpirun on host 0 (Open MPI's TCP transport;
                 the other hosts entered through cluster.py's launch agent)
  python-gloo    bench/ddp/ddp_python.py (torch.nn.parallel.DistributedDataParallel, gloo)
                 under kindling-run on every host
  no-comm        bench_ddp alone on every host at the same time (no all-reduce): the limit
                 that communication can only take away from

Rank k is pinned to core k mod (cores) with taskset, in every implementation and in
no-comm alike (4 hosts on 2 cores: two ranks share a core everywhere). Runs of one
configuration are interleaved by repeat, and medians reported. Bytes per step: what every
host's eth0 sent between rank 0's "TIMING_STARTS" and its RESULT line, divided by the timed
steps, averaged over hosts, beside the ring all-reduce volume 2(n-1)/n x gradient bytes.

With --hooks, kindling-gloo and python-gloo also run with each DDP communication hook (fp16,
bf16, powersgd: kindling's and torch's own, PowerSGD of rank 1 compressing from step 2, so the
warm-up is at least 3 steps); kindling-mpi and no-comm run without. With --ranks-per-host 2,
kindling's DDP picks its hierarchical all-reduce by itself (reported as the hook it ran);
the pseudo-hook "flat" runs kindling with it turned off (bench_ddp --flat; Python's DDP is
always flat). The pseudo-hooks localsgd, diloco and streaming average every --sync-every steps
(bench_ddp --diloco-every; local_hooks below); torch's peer runs localsgd only (its post-local
SGD: ddp_python.py --post-local-sgd), having no DiLoCo. --python picks the peer's interpreter (its torch should be the build's LibTorch).
Before the first run it checks what the runs and the report need (torch in this interpreter,
torch and numpy in --python, the build's programs) and stops at once, exit 2, naming what lacks.

  bench/cluster/bench_hosts.py --build build [--hosts 2,4] [--rates 100mbit,1gbit,none]
      [--models mlp,resnet18 (or mlp10x: 109.9 M parameters)] [--hooks none,flat,fp16,bf16,powersgd,localsgd,diloco,streaming] [--sync-every 50] [--ranks-per-host 1]
      [--python /usr/bin/python3] [--bench-args '--bucket-cap-mb 5'] [--repeats 3] [--json out.json]
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "cluster"))
import cluster  # noqa: E402

IMPLS = ["kindling-gloo", "kindling-mpi", "python-gloo", "no-comm"]
# Per model: batch per rank, and (warmup, timed steps) by link rate (slow links: fewer).
SIZES = {"mlp": (64, {"10mbit": (1, 2), "100mbit": (2, 15), "1gbit": (3, 40), "none": (5, 60)}),
         "resnet18": (32, {"10mbit": (0, 1), "100mbit": (1, 4), "1gbit": (1, 8), "none": (2, 12)}),
         "mlp10x": (32, {"100mbit": (1, 1), "1gbit": (1, 3), "none": (1, 4)})}
# Training that averages every H steps (--sync-every), as pseudo-hooks: bench_ddp's flags and the
# Python peer's (None: torch has no such optimizer). Runs of these time 2H steps after 2 untimed.
# streaming: 5 pieces, each exchange overlapping the steps until the next piece's begins.
def local_hooks(h):
    return {"localsgd": (["--diloco-every", str(h), "--local-sgd"], ["--post-local-sgd", str(h)]),
            "diloco": (["--diloco-every", str(h)], None),
            "streaming": (["--diloco-every", str(h), "--diloco-fragments", "5", "--diloco-delay", str(max(1, h // 5 - 1)),
                           "--diloco-exchange", "fp16"], None)}


# A model 10x ResNet-18's size (109.9 M parameters against 11.2 M): bench_ddp's and ddp_python.py's
# MLP, 784 -> 6 x 4608 -> 10.
MODEL_ARGS = {"mlp10x": ["--model", "mlp", "--mlp-width", "4608", "--mlp-depth", "6"]}


# The interpreters the bench is meant to run with, for the messages about one without torch.
TORCH_HINT = ("an interpreter with torch and numpy: /usr/bin/python3 once Debian's python3-torch and python3-numpy "
              "are installed (apt-get install python3-torch python3-numpy; scripts/bench-cluster.sh runs it), or the "
              "venv python that scripts/torch2-env.sh makes and prints")


def gradient_bytes(model):
    sys.path.insert(0, os.path.join(SOURCE, "bench", "ddp"))
    import models
    if model == "resnet18":
        net = models.resnet18(num_classes=10, in_channels=1)
    else:
        net = models.MLP(4608, 6) if model == "mlp10x" else models.MLP()
    return 4 * sum(p.numel() for p in net.parameters())


def missing_prerequisite(args):
    """Why the bench cannot run and report, found before any run starts; None when nothing is
    missing. The report counts the models' gradient bytes with torch in this interpreter (counted
    here, kept in args.gradient_bytes); the python-gloo runs start --python on
    bench/ddp/ddp_python.py; the others need the build's programs."""
    unknown = [m for m in args.models.split(",") if m not in SIZES]
    if unknown:
        return "--models %s: unknown model(s) %s; use some of %s" % (args.models, unknown, ",".join(SIZES))
    try:
        args.gradient_bytes = {m: gradient_bytes(m) for m in args.models.split(",")}
    except ImportError as e:
        return ("this interpreter, %s, cannot import torch (%s), which the report needs for the models' gradient "
                "bytes (bench/ddp/models.py); run bench_hosts.py with %s" % (sys.executable, e, TORCH_HINT))
    impls = args.impls.split(",")
    if "python-gloo" in impls:
        try:
            r = subprocess.run([args.python, "-c", "import numpy, torch, torch.distributed"], capture_output=True,
                               text=True, timeout=300)
            problem = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1] if r.returncode else None
        except (OSError, subprocess.TimeoutExpired) as e:
            problem = str(e)
        if problem:
            return ("--python %s cannot run the Python DDP peer bench/ddp/ddp_python.py (%s); give --python %s, "
                    "or leave python-gloo out of --impls" % (args.python, problem, TORCH_HINT))
    needed = (["kindling-run"] if {"kindling-gloo", "python-gloo"} & set(impls) else []) + \
             ([os.path.join("bench", "ddp", "bench_ddp")] if set(impls) - {"python-gloo"} else [])
    absent = [n for n in needed if not os.access(os.path.join(args.build, n), os.X_OK)]
    if absent:
        return ("the build %s has no %s; build kindling with its benchmarks there (scripts/build.sh) or give --build "
                "the folder of such a build" % (args.build, " nor ".join(absent)))
    return None


def ready_to_run(args, who):
    """Checks what the runs need (exit code 2 after saying what lacks; 77, CTest's skip, where the
    cluster cannot be made) and sets the runs' paths and environment; None when ready."""
    args.build = os.path.abspath(args.build)
    problem = missing_prerequisite(args)
    if problem:
        print("%s: %s" % (who, problem), file=sys.stderr)
        return 2
    reason = cluster.available()
    if reason:
        print("skipped: " + reason)
        return 77
    args.kindling_run = os.path.join(args.build, "kindling-run")
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    return None


def commands(args, impl, hosts, model, rate, hook="none"):
    batch, steps = SIZES[model]
    # The no-comm limit sends nothing: it gets the uncapped link's (largest) step counts; so does a
    # rate above 1 Gbit/s without its own entry (a step there is about as short).
    faster = rate not in steps and rate.endswith("gbit") and float(rate[:-4]) > 1
    warmup, timed = steps["none" if impl == "no-comm" or faster else rate]
    if hook == "powersgd":
        warmup = max(warmup, 3)  # compressing from step 2 on
    local = local_hooks(args.sync_every).get(hook)
    # Beside the pseudo-hooks, the no-comm limit times as many steps as they do (short runs are slower).
    beside = impl == "no-comm" and any(h in local_hooks(1) for h in args.hooks.split(","))
    if local or beside:
        warmup, timed = 2, 2 * args.sync_every
    bench = MODEL_ARGS.get(model, ["--model", model]) + ["--batch", str(batch), "--steps", str(timed), "--warmup",
                                                          str(warmup)]
    bench += shlex.split(args.bench_args)
    py_bench = bench + ((local[1] or []) if local else [])
    if local:
        bench = bench + local[0]
    elif hook == "flat":
        bench += ["--flat"]
    elif hook != "none":
        bench += ["--comm-hook", hook]
    cores = os.cpu_count() or 1
    per = args.ranks_per_host
    # Global rank g = host x per + local rank, pinned to core g mod cores (LOCAL_RANK is kindling-run's).
    pin = lambda k, cmd: ["sh", "-c", 'exec taskset -c $(((%d + ${LOCAL_RANK:-0}) %% %d)) "$@"' % (k * per, cores),  # noqa: E731
                          "pin"] + cmd
    kd = [os.path.join(args.build, "bench", "ddp", "bench_ddp")] + bench
    py = [args.python, os.path.join(SOURCE, "bench", "ddp", "ddp_python.py")] + (py_bench if local else bench)
    run = lambda k: [args.kindling_run, "--nnodes", str(hosts), "--node_rank", str(k), "--master_addr",  # noqa: E731
                     "node0", "--master_port", "29500", "--nproc_per_node", str(per)]
    if impl == "kindling-gloo":
        return [run(k) + pin(k, kd + ["--backend", "gloo"]) for k in range(hosts)]
    if impl == "python-gloo":
        return [run(k) + pin(k, py) for k in range(hosts)]
    if impl == "no-comm":  # every rank alone: `per` processes per host, started together
        alone = lambda k: " ".join("taskset -c %d %s &" % ((k * per + j) % cores, shlex.join(kd))  # noqa: E731
                                   for j in range(per)) + " wait"
        return [["sh", "-c", alone(k)] for k in range(hosts)]
    agent = "%s %s agent" % (sys.executable, os.path.abspath(cluster.__file__))
    line = "taskset -c $((OMPI_COMM_WORLD_RANK %% %d)) %s --backend mpi" % (cores, " ".join(kd))
    return [["mpirun", "--allow-run-as-root", "--bind-to", "none", "--host",
             ",".join("%s:%d" % (cluster.hostname(k), per) for k in range(hosts)), "--mca", "plm_rsh_agent", agent,
             "sh", "-c", line]] + [None] * (hosts - 1)


def parse_result(line):
    return dict(item.split("=", 1) for item in line.split()[1:])


def one_run(args, c, impl, hosts, model, rate, hook="none"):
    """samples/s (summed over hosts for no-comm), bytes sent per host per timed step, and rank
    0's RESULT fields (kindling: the hook DDP ran, backward_ms, comm_wait_ms)."""
    cmds = commands(args, impl, hosts, model, rate, hook)
    procs = {k: c.popen_on(k, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k, cmd in enumerate(cmds) if cmd is not None}
    sent_at_start = sent = None
    results, outputs = [], {k: [] for k in procs}
    try:
        for line in procs[0].stdout:
            outputs[0].append(line)
            if line.startswith("[rank"):  # kindling-run's prefix
                line = line.split("]: ", 1)[-1]
            if line.startswith("TIMING_STARTS") and sent_at_start is None:
                sent_at_start = [c.bytes_sent(k) for k in range(hosts)]
            elif line.startswith("RESULT"):
                if sent is None:
                    sent = [c.bytes_sent(k) for k in range(hosts)]
                results.append(parse_result(line))
        for k, p in procs.items():
            text, _ = p.communicate(timeout=600)
            if k:
                outputs[k].append(text)
                results += [parse_result(l) for l in text.splitlines() if l.startswith("RESULT")]  # no-comm
        failed = {k: p.returncode for k, p in procs.items() if p.returncode != 0}
        if failed:  # every failed host's last lines: the first error is often on another host
            raise RuntimeError("%s: host(s) %s exited %s:\n%s" % (
                impl, list(failed), list(failed.values()),
                "\n".join("host %d: %s" % (k, "".join(outputs[k])[-1500:]) for k in failed)))
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    if impl == "no-comm":
        return sum(float(r["samples_per_s"]) for r in results), 0.0, {}
    steps = int(results[0]["steps"])
    per_host = [(b - a) / steps for a, b in zip(sent_at_start, sent)]
    return float(results[0]["samples_per_s"]), statistics.mean(per_host), results[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--hosts", default="2,4")
    p.add_argument("--rates", default="100mbit,1gbit,none")
    p.add_argument("--models", default="mlp,resnet18")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--hooks", default="none", help="DDP communication hooks: none,fp16,bf16,powersgd")
    p.add_argument("--sync-every", type=int, default=50,
                   help="H of the pseudo-hooks localsgd, diloco, streaming (bench_ddp --diloco-every)")
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--python", default="/usr/bin/python3", help="the Python DDP peer's interpreter")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bench-args", default="", help="more flags for bench_ddp and ddp_python.py, e.g. '--bucket-cap-mb 5'")
    p.add_argument("--json", help="also write every run here")
    args = p.parse_args()
    code = ready_to_run(args, "bench_hosts.py")
    if code is not None:
        return code
    runs = []
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                         capture_output=True, text=True).stdout.strip()
    print("# %d cores, %s; %d rank(s) per host, 1 thread per rank" % (os.cpu_count(), cpu, args.ranks_per_host))
    for hosts in map(int, args.hosts.split(",")):
        for rate in args.rates.split(","):
            with cluster.Cluster(hosts=hosts, rate=None if rate == "none" else rate) as c:
                for model in args.models.split(","):
                    for r in range(args.repeats):
                        for impl in args.impls.split(","):
                            if impl == "no-comm" and rate != args.rates.split(",")[0]:
                                continue  # no traffic: the link rate does not matter; measured once per repeat
                            hooks = args.hooks.split(",") if impl in ("kindling-gloo", "python-gloo") else ["none"]
                            for hook in hooks:
                                if hook == "flat" and impl != "kindling-gloo":
                                    continue  # only kindling has a hierarchical all-reduce to turn off
                                if impl == "python-gloo" and local_hooks(1).get(hook, (0, 1))[1] is None:
                                    continue  # torch has no DiLoCo
                                run = dict(hosts=hosts, rate=rate, model=model, impl=impl, hook=hook, repeat=r)
                                try:
                                    rate_s, sent, result = one_run(args, c, impl, hosts, model, rate, hook)
                                    run.update(samples_per_s=round(rate_s, 1), bytes_per_step=round(sent),
                                               ran=result.get("hook", hook), comm_wait_ms=result.get("comm_wait_ms"))
                                except RuntimeError as e:  # a failed run is reported, the others still run
                                    run.update(failed=str(e)[-2000:])
                                print(json.dumps(run), flush=True)
                                runs.append(run)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    report(runs, args)
    return 0


def report(runs, args):
    med = {}
    for r in runs:
        if r.get("hook", "none") != "none" or "failed" in r:
            continue  # in report_hooks; failed runs are listed there
        med.setdefault((r["hosts"], r["rate"], r["model"], r["impl"]), []).append(r)
    grad = args.gradient_bytes  # counted at the start (missing_prerequisite)
    print("\n| model | hosts | link | kindling gloo | kindling mpi | Python DDP (gloo) | no-comm limit | "
          "efficiency gloo / mpi / Python | MB sent per step and host (gloo / mpi / Python) | ring volume MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for hosts in map(int, args.hosts.split(",")):
            limit_runs = [x for (h, _, m, i), v in med.items() if (h, m, i) == (hosts, model, "no-comm") for x in v]
            limit = statistics.median(x["samples_per_s"] for x in limit_runs) if limit_runs else None
            for rate in args.rates.split(","):
                cell, eff, mb = [], [], []
                for impl in ("kindling-gloo", "kindling-mpi", "python-gloo"):
                    v = med.get((hosts, rate, model, impl))
                    s = statistics.median(x["samples_per_s"] for x in v) if v else None
                    b = statistics.median(x["bytes_per_step"] for x in v) if v else None
                    cell.append(f"{s:,.0f}" if s else "-")
                    eff.append(f"{s / limit:.2f}" if s and limit else "-")
                    mb.append(f"{b / 1e6:.1f}" if b else "-")
                ring = 2 * (hosts - 1) / hosts * grad[model] / 1e6
                print(f"| {model} | {hosts} | {rate} | {' | '.join(cell)} | {f'{limit:,.0f}' if limit else '-'} | "
                      f"{' / '.join(eff)} | {' / '.join(mb)} | {ring:.1f} |")
    print(f"\nsamples/s, medians of {args.repeats} interleaved runs; efficiency = samples/s / no-comm limit")
    hooks = [h for h in args.hooks.split(",") if h != "none"]
    if hooks:
        report_hooks(runs, args, hooks)


def report_hooks(runs, args, hooks):
    """kindling's hooks beside torch's own, per model, hosts and link."""
    med, failed = {}, {}
    for r in runs:
        key = (r["hosts"], r["rate"], r["model"], r["impl"], r.get("hook", "none"))
        (failed if "failed" in r else med).setdefault(key, []).append(r)
    limits = {}
    for (h, _, m, i, _), v in med.items():
        if i == "no-comm":
            limits.setdefault((h, m), []).extend(x["samples_per_s"] for x in v)
    print("\n| model | hosts | link | hook (what kindling ran) | kindling gloo | Python DDP (gloo) | kindling / Python | "
          "efficiency kindling / Python | MB sent per step and host (kindling / Python) | kindling's wait after "
          "backward, ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for hosts in map(int, args.hosts.split(",")):
            limit = statistics.median(limits[(hosts, model)]) if (hosts, model) in limits else None
            for rate in args.rates.split(","):
                for hook in ["none"] + hooks:
                    k = med.get((hosts, rate, model, "kindling-gloo", hook))
                    py = med.get((hosts, rate, model, "python-gloo", hook))
                    ks = statistics.median(x["samples_per_s"] for x in k) if k else None
                    ps = statistics.median(x["samples_per_s"] for x in py) if py else None
                    kb = statistics.median(x["bytes_per_step"] for x in k) if k else None
                    pb = statistics.median(x["bytes_per_step"] for x in py) if py else None
                    eff = " / ".join(f"{s / limit:.2f}" if s and limit else "-" for s in (ks, ps))
                    ran = k[0].get("ran", hook) if k else hook
                    wait = statistics.median(float(x["comm_wait_ms"]) for x in k) if k and k[0].get("comm_wait_ms") else None
                    fails = [len(failed.get((hosts, rate, model, i, hook), [])) for i in ("kindling-gloo", "python-gloo")]
                    kcell, pcell = (f"{v:,.0f}" if v else "-" for v in (ks, ps))
                    kcell, pcell = (c + (f" ({n} failed)" if n else "") for c, n in zip((kcell, pcell), fails))
                    print(f"| {model} | {hosts} | {rate} | {hook}{f' ({ran})' if ran.lower() != hook.lower() else ''} | "
                          f"{kcell} | {pcell} | {f'{ks / ps:.2f}' if ks and ps else '-'} | {eff} | "
                          f"{f'{kb / 1e6:.1f}' if kb else '-'} / {f'{pb / 1e6:.1f}' if pb else '-'} | "
                          f"{f'{wait:,.0f}' if wait is not None else '-'} |")


if __name__ == "__main__":
    sys.exit(main())
