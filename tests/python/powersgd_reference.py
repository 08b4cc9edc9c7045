"""torch's own PowerSGD hook, the reference of tests/nn/comm_hook_test.cpp.

Usage: powersgd_reference.py OUT_FILE, as one rank of a gloo job (RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set: the test starts every rank).

Trains the test's small MLP with torch's DistributedDataParallel and `powerSGD_hook`,
for each configuration of CONFIGS, and rank 0 writes every step's averaged gradients
(every rank holds the same) as lines "config step name v0 v1 ...". The weights and the
data are closed formulas that the C++ test evaluates the same way.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel

# (name, PowerSGDState keyword arguments); the C++ test uses the same names and values.
CONFIGS = [
    ("rank2_warm", dict(matrix_approximation_rank=2, start_powerSGD_iter=2)),
    ("rank3_cold", dict(matrix_approximation_rank=3, start_powerSGD_iter=2, warm_start=False,
                        min_compression_rate=1, random_seed=7)),
]
STEPS = 5
LOCAL_BATCH = 4


def model():
    net = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 24),
                              torch.nn.Tanh(), torch.nn.Linear(24, 3))
    with torch.no_grad():
        for k, p in enumerate(net.parameters()):
            i = torch.arange(p.numel(), dtype=torch.float64)
            p.copy_((0.3 * torch.sin(1.7 * i + 0.9 * k)).float().view(p.shape))
    return net


def batch(rank, step):
    rows = torch.arange(LOCAL_BATCH, dtype=torch.float64) + rank * LOCAL_BATCH + 100 * step
    x = torch.sin(0.37 * rows[:, None] + 0.11 * torch.arange(12, dtype=torch.float64)[None, :])
    y = torch.cos(0.23 * rows[:, None] + 0.5 * torch.arange(3, dtype=torch.float64)[None, :])
    return x.float(), y.float()


def main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    lines = []
    for name, kwargs in CONFIGS:
        net = DistributedDataParallel(model())
        state = powerSGD.PowerSGDState(process_group=None, **kwargs)
        net.register_comm_hook(state, powerSGD.powerSGD_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for step in range(STEPS):
            opt.zero_grad()
            x, y = batch(rank, step)
            torch.nn.functional.mse_loss(net(x), y).backward()
            for pname, p in net.module.named_parameters():
                values = " ".join("%.9e" % v for v in p.grad.reshape(-1).tolist())
                lines.append("%s %d %s %s" % (name, step, pname, values))
            opt.step()
    if rank == 0:
        with open(out + ".part", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(out + ".part", out)
    # Leave without interpreter teardown, after every rank is done: with Debian's torch 1.13 on
    # Python 3.11 a rank sometimes spins forever in it (bench/ddp/ddp_python.py's finish()).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
