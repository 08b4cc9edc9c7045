"""The Python peer of bench_ddp: the same training step with torch.nn.parallel.DistributedDataParallel
(gloo), the same models (models.py), batch, threads and data; or the loader alone with
torch.utils.data.DataLoader and the same transforms written with torch ops.

  kindling-run --nproc_per_node 2 /usr/bin/python3 bench/ddp/ddp_python.py --model mlp --batch 64 --steps 200

See bench/ddp/main.cpp for what is measured; the RESULT line has the same fields.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims).copy())


class Transformed(torch.utils.data.Dataset):
    """ToTensor, RandomCrop(28, padding=2), Normalize: what the C++ loader bench applies."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].unsqueeze(0).float() / 255.0
        x = F.pad(x, (2, 2, 2, 2))
        top, left = torch.randint(0, 5, (2,)).tolist()
        x = x[:, top:top + 28, left:left + 28]
        return (x - MEAN) / STD, int(self.labels[i])


def parse_args():
    """bench_ddp's options that the Python peer shares, and its own."""
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["step", "loader"], default="step")
    p.add_argument("--model", choices=["mlp", "resnet18"], default="mlp")
    p.add_argument("--mlp-width", type=int, default=1024, help="the MLP's hidden width (bench_ddp's)")
    p.add_argument("--mlp-depth", type=int, default=2, help="the MLP's hidden layers (bench_ddp's)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--bucket-cap-mb", type=float, default=25)
    p.add_argument("--comm-hook", choices=["none", "fp16", "bf16", "powersgd"], default="none")
    p.add_argument("--powersgd-rank", type=int, default=1)
    p.add_argument("--powersgd-start", type=int, default=2)
    p.add_argument("--gradient-as-bucket-view", action="store_true", help="DDP(gradient_as_bucket_view=True)")
    p.add_argument("--static-graph", action="store_true", help="DDP(static_graph=True)")
    p.add_argument("--zero", action="store_true",
                   help="torch.distributed.optim.ZeroRedundancyOptimizer around the same SGD (ZeRO-1)")
    p.add_argument("--fsdp", choices=["none", "zero2", "zero3"], default="none",
                   help="torch's fully_shard (FSDP2, torch >= 2.6) on each ResNet layer and the root instead of DDP: "
                        "zero3 reshards after forward, zero2 does not (bench_ddp's --sharding)")
    p.add_argument("--post-local-sgd", type=int, default=0, metavar="H",
                   help="torch's post-local SGD: DDP's post_localSGD_hook, PostLocalSGDOptimizer over the SGD with a "
                        "PeriodicModelAverager of period H (0: plain DDP); bench_ddp --diloco-every H --local-sgd")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    return p.parse_args()


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    images = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz")).long()

    if a.mode == "loader":
        ds = Transformed(images, labels)
        sampler = torch.utils.data.distributed.DistributedSampler(ds) if world > 1 else None
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=sampler is None, sampler=sampler,
                                             num_workers=a.workers, persistent_workers=False)
        samples = 0
        t0 = time.perf_counter()
        for e in range(a.epochs):
            if sampler is not None:
                sampler.set_epoch(e)
            for x, _ in loader:
                samples += x.shape[0]
        secs = time.perf_counter() - t0
        if rank == 0:
            print(f"RESULT impl=python mode=loader ranks={world} batch={a.batch} workers={a.workers} "
                  f"samples={samples} seconds={secs:.4f} samples_per_s={samples / secs:.1f}", flush=True)
        finish(world)

    x_all = (images.unsqueeze(1).float() / 255.0 - MEAN) / STD
    model, opt = model_and_optimizer(a, world)
    n = x_all.shape[0]

    def step(s):
        start = ((s * world + rank) * a.batch) % (n - a.batch)
        x = x_all[start:start + a.batch]
        y = labels[start:start + a.batch]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for s in range(a.warmup):
        step(s)
    if world > 1:
        dist.barrier()
    if rank == 0:
        print("TIMING_STARTS", flush=True)  # bench/cluster reads the links' byte counters here
    t0 = time.perf_counter()
    for s in range(a.steps):
        step(a.warmup + s)
    secs = time.perf_counter() - t0
    if world > 1:
        t = torch.tensor([secs], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        secs = t.item()
    if rank == 0:
        samples = a.steps * a.batch * world
        print(f"RESULT impl=python mode=step model={a.model} ranks={world} batch={a.batch} threads={a.threads} "
              f"steps={a.steps} hook={a.fsdp if a.fsdp != 'none' else 'post_local_sgd' if a.post_local_sgd else a.comm_hook} seconds={secs:.4f} samples_per_s={samples / secs:.1f}", flush=True)
    finish(world)


def model_and_optimizer(a, world):
    """The model (in torch's DDP with the options asked for, when world > 1) and its SGD."""
    torch.manual_seed(0)
    net = models.MLP(a.mlp_width, a.mlp_depth) if a.model == "mlp" else models.resnet18(num_classes=10, in_channels=1)
    if world == 1:
        return net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    if a.fsdp != "none":
        return fully_sharded(net, a, world)
    model = torch.nn.parallel.DistributedDataParallel(
        net, bucket_cap_mb=a.bucket_cap_mb, gradient_as_bucket_view=a.gradient_as_bucket_view,
        static_graph=a.static_graph)
    if a.comm_hook != "none":
        register_hook(model, a)
    if a.post_local_sgd > 0:
        return post_local_sgd(net, a, world)
    if a.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.01,
                                              momentum=0.9)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def post_local_sgd(net, a, world):
    """torch's post-local SGD as its docs set it up, local from the first step (as bench_ddp's DiLoCo
    without warm-up): gradients averaged inside a one-rank subgroup (no traffic; the docs' default
    subgroup is a CUDA host's), the weights averaged over the world every H steps; buffers not
    broadcast at each forward (bench_ddp's DiLoCo averages them with the weights)."""
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState, post_localSGD_hook
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
    from torch.distributed.optim import PostLocalSGDOptimizer
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=a.bucket_cap_mb, broadcast_buffers=False)
    rank = dist.get_rank()
    own = [dist.new_group([r]) for r in range(world)][rank]  # every rank makes every subgroup
    model.register_comm_hook(PostLocalSGDState(process_group=None, subgroup=own, start_localSGD_iter=0),
                             post_localSGD_hook)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, PostLocalSGDOptimizer(optim=sgd, averager=PeriodicModelAverager(period=a.post_local_sgd, warmup_steps=0))


def fully_sharded(net, a, world):
    """torch's fully_shard as its docs apply it: each block of layers a unit (kindling's ResNet
    units: its four layers; the MLP's Linear layers), then the root; SGD over the sharded parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    reshard = a.fsdp == "zero3"
    units = [net.layer1, net.layer2, net.layer3, net.layer4] if hasattr(net, "layer1") else \
        [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    for unit in units:
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(net, mesh=mesh, reshard_after_forward=reshard)
    return net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)


def register_hook(model, a):
    """torch's own hooks, as bench_ddp's --comm-hook selects kindling's."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if a.comm_hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                            start_powerSGD_iter=a.powersgd_start)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        hook = default_hooks.fp16_compress_hook if a.comm_hook == "fp16" else default_hooks.bf16_compress_hook
        model.register_comm_hook(None, hook)


def finish(world):
    """Leaves without interpreter teardown: with Debian's torch 1.13 on Python 3.11 a rank
    sometimes spins at 100% CPU forever after its work is done (seen in this bench's 2-rank
    runs, after the RESULT line), so every rank waits for the others and exits at once."""
    if world > 1:
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
