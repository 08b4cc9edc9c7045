#!/usr/bin/env python3
"""When each gradient of a bench model is ready in backward: the input of the scaling model
(bench/scaling/model.py). Times one process's training step of bench/ddp's models (the same
architecture, parameter names and order as kindling's C++ ones, bench/ddp/models.py) on
Fashion-MNIST-shaped input with one intra-op thread, as bench/ddp runs each rank:

  forward_s   the forward pass with the loss
  backward_s  loss.backward()
  for each parameter, in the order its gradient becomes ready: its bytes and the fraction of
  backward_s after which it is ready (a hook on the parameter's gradient)

Medians over --repeats steps after --warmup. Written as JSON (--out) for model.py --profile.

  python3 bench/scaling/readiness.py --model resnet18 --batch 32 --out resnet18.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ddp"))
import models  # noqa: E402


def make_model(name):
    torch.manual_seed(0)
    if name == "mlp":
        return models.MLP()
    if name == "resnet18":
        return models.resnet18(num_classes=10, in_channels=1)
    raise SystemExit("readiness.py: --model %s is not a bench model; use mlp or resnet18" % name)


def one_step(net, x, y, names):
    """Times one step; returns (forward s, backward s, {name: seconds after backward began})."""
    ready = {}
    start = [0.0]
    handles = [p.register_hook(lambda g, n=n: ready.__setitem__(n, time.perf_counter() - start[0]))
               for n, p in names]
    net.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    loss = F.cross_entropy(net(x), y)
    t1 = time.perf_counter()
    start[0] = t1
    loss.backward()
    t2 = time.perf_counter()
    for h in handles:
        h.remove()
    return t1 - t0, t2 - t1, ready


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, default=32, help="per rank (bench_hosts.py: mlp 64, resnet18 32)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    net = make_model(a.model)
    names = [(n, q) for n, q in net.named_parameters() if q.requires_grad]
    x = torch.randn(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    steps = [one_step(net, x, y, names) for _ in range(a.warmup + a.repeats)][a.warmup:]
    forward = statistics.median(s[0] for s in steps)
    backward = statistics.median(s[1] for s in steps)
    fraction = {n: statistics.median(min(1.0, s[2][n] / s[1]) for s in steps) for n, _ in names}
    params = [{"name": n, "bytes": 4 * q.numel(), "ready": round(fraction[n], 4)} for n, q in names]
    params.sort(key=lambda e: e["ready"])
    profile = {"model": a.model, "batch": a.batch, "threads": 1, "torch": torch.__version__,
               "forward_s": round(forward, 5), "backward_s": round(backward, 5), "params": params,
               "registration": [n for n, _ in names]}
    with open(a.out, "w") as f:
        json.dump(profile, f, indent=1)
    print("readiness: %s batch %d: forward %.1f ms, backward %.1f ms, %d parameters, %.1f MB of gradients -> %s"
          % (a.model, a.batch, 1e3 * forward, 1e3 * backward, len(params),
             sum(e["bytes"] for e in params) / 1e6, a.out))


if __name__ == "__main__":
    main()
