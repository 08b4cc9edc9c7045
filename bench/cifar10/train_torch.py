"""The Python PyTorch peer of examples/cifar10 (kindling's port of ignite's CIFAR10 tutorial), for
scripts/bench-cifar10.sh: the same flow with plain torch (no ignite): ResNet-18, SGD with Nesterov
momentum, a piecewise-linear learning rate per iteration (0 -> lr over the warm-up epochs -> 0 at
the end), DistributedSampler + DataLoader, DDP over gloo for more than one rank, and evaluation of
accuracy and loss on the train and test sets every --validate_every epochs and after the last one.
It takes the C++ program's flag names and writes the same summary.json, so the driver can compare.

  /usr/bin/python3 bench/cifar10/train_torch.py --nproc_per_node 2 --num_epochs 1 --train_subset 4096

Data: Fashion-MNIST from Debian's dataset-fashion-mnist by default (padded to 32x32, one channel),
or CIFAR-10's binary version when --data_path holds data_batch_{1..5}.bin and test_batch.bin.
Transforms are written with tensor ops (torchvision's transforms want PIL, which is not installed).

Measured on rank 0 as examples/cifar10 does: training samples/s of the whole job (samples of all
ranks over the wall time from an epoch's start to the end of its last iteration; median over epochs,
the first one left out when there are 3 or more), each epoch's wall time (with the validation of
every validate_every-th epoch), and each rank's peak RSS (VmHWM of the rank's main process, MiB).
"""
import argparse
import functools
import gc
import gzip
import json
import os
import socket
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torchvision

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
CIFAR_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
# Dataset-dependent defaults of the flags not given: (num_epochs, learning_rate, num_warmup_epochs).
DEFAULTS = {"fashion-mnist": (3, 0.1, 1), "cifar10": (24, 0.4, 4)}


def argument_parser(doc):
    """The flags the Python peers share with the C++ program."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--data_path", default="", help="CIFAR-10 binary folder; empty: Debian's Fashion-MNIST")
    p.add_argument("--output_path", default="/tmp/cifar10-torch")
    p.add_argument("--batch_size", type=int, default=512, help="total over ranks")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=1e-4)
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--num_epochs", type=int, default=None)
    p.add_argument("--learning_rate", type=float, default=None)
    p.add_argument("--num_warmup_epochs", type=int, default=None)
    p.add_argument("--validate_every", type=int, default=3)
    p.add_argument("--seed", type=int, default=543)
    p.add_argument("--nproc_per_node", type=int, default=1)
    p.add_argument("--backend", default="gloo", help="only gloo exists in Debian's torch")
    p.add_argument("--train_subset", type=int, default=0, help="N > 0: the first N training samples only")
    p.add_argument("--test_subset", type=int, default=0, help="N > 0: the first N test samples only")
    return p


def apply_defaults(args):
    """The dataset-dependent defaults of the flags not given."""
    dataset = "cifar10" if args.data_path and find_cifar(args.data_path) else "fashion-mnist"
    for flag, value in zip(("num_epochs", "learning_rate", "num_warmup_epochs"), DEFAULTS[dataset]):
        if getattr(args, flag) is None:
            setattr(args, flag, value)


def find_cifar(path):
    """The folder holding CIFAR-10's binary files (path itself or its cifar-10-batches-bin), or None."""
    for d in (path, os.path.join(path, "cifar-10-batches-bin")):
        if all(os.path.isfile(os.path.join(d, f)) for f in CIFAR_FILES):
            return d
    return None


def read_idx(folder, stem):
    """An IDX file (gzipped or not) as a uint8 tensor of its shape."""
    path = os.path.join(folder, stem)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            raw = f.read()
    elif os.path.isfile(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as f:
            raw = f.read()
    else:
        raise SystemExit(f"train_torch.py: neither {path} nor {path}.gz exists; pass --data_path with "
                         "CIFAR-10's binary files or Fashion-MNIST's IDX files")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims).copy())


def read_cifar(folder, names):
    """CIFAR-10 binary records (1 label byte + 3x32x32 image bytes) as (N,3,32,32) uint8 and (N,) int64."""
    raw = np.concatenate([np.fromfile(os.path.join(folder, n), np.uint8).reshape(-1, 3073) for n in names])
    return torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).copy()), torch.from_numpy(raw[:, 0].astype(np.int64))


def load_data(data_path):
    """(dataset name, (train images, labels), (test images, labels)); images uint8 (N,C,H,W)."""
    cifar = find_cifar(data_path) if data_path else None
    if cifar:
        return "cifar10", read_cifar(cifar, CIFAR_FILES[:5]), read_cifar(cifar, CIFAR_FILES[5:])
    folder = data_path or FASHION_DIR

    def split(prefix):
        return (read_idx(folder, f"{prefix}-images-idx3-ubyte").unsqueeze(1),
                read_idx(folder, f"{prefix}-labels-idx1-ubyte").long())
    return "fashion-mnist", split("train"), split("t10k")


class ImageDataset(torch.utils.data.Dataset):
    """Images held in memory as uint8; __getitem__ scales to [0,1], pads to 32x32 (Fashion-MNIST's
    28x28 get 2 zero pixels a side), and for training pads 4 more zeros, crops 32x32 at a random
    place and flips half of the images; then normalizes per channel."""

    def __init__(self, images, labels, train, mean, std):
        self.images, self.labels, self.train = images, labels, train
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)
        self.border = (32 - images.shape[-1]) // 2

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].float().div_(255.0)
        if self.border:
            x = F.pad(x, [self.border] * 4)
        if self.train:
            x = F.pad(x, [4] * 4)
            top, left = torch.randint(0, 9, (2,)).tolist()
            x = x[:, top:top + 32, left:left + 32]
            if torch.rand(()) < 0.5:
                x = x.flip(-1)
        return (x - self.mean) / self.std, int(self.labels[i])


def make_datasets(args):
    """(dataset name, train set, test set) with the C++ program's transforms and subsets."""
    name, (xtr, ytr), (xte, yte) = load_data(args.data_path)
    if args.train_subset > 0:
        xtr, ytr = xtr[:args.train_subset], ytr[:args.train_subset]
    if args.test_subset > 0:
        xte, yte = xte[:args.test_subset], yte[:args.test_subset]
    if name == "cifar10":
        # ignite's tutorial has Pad(4) then RandomCrop(32, fill=128), but torchvision's Pad(4) fills
        # with 0 and the crop then needs no padding, so the border is 0 there and in examples/cifar10.
        norm = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    else:
        norm = (0.2860,), (0.3530,)
    return name, ImageDataset(xtr, ytr, True, *norm), ImageDataset(xte, yte, False, *norm)


def make_loaders(args, world, rank):
    name, train_set, test_set = make_datasets(args)
    DS = torch.utils.data.distributed.DistributedSampler
    train_sampler = DS(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    test_sampler = DS(test_set, num_replicas=world, rank=rank, shuffle=False)
    # As ignite's auto_dataloader: the batch size is the job's, each rank loads its share. Workers
    # are forked: in ranks started by torch.multiprocessing.spawn the default would be spawn, which
    # re-imports torch in every worker of every loader pass (~3 s each here).
    loader = functools.partial(torch.utils.data.DataLoader, num_workers=args.num_workers,
                               multiprocessing_context="fork" if args.num_workers > 0 else None)
    train_loader = loader(train_set, batch_size=args.batch_size // world, sampler=train_sampler, drop_last=True)
    test_loader = loader(test_set, batch_size=2 * args.batch_size // world, sampler=test_sampler)
    return name, train_loader, test_loader


def make_model(name):
    model = torchvision.models.resnet18(num_classes=10)
    if name == "fashion-mnist":
        model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def lr_at(iteration, args, iters_per_epoch):
    """ignite's PiecewiseLinear over (0, 0) -> (warm-up end, lr) -> (last iteration, 0)."""
    points = [(0, 0.0), (iters_per_epoch * args.num_warmup_epochs, args.learning_rate),
              (iters_per_epoch * args.num_epochs, 0.0)]
    for (i0, v0), (i1, v1) in zip(points, points[1:]):
        if iteration < i1:
            return v0 + (v1 - v0) * (iteration - i0) / (i1 - i0)
    return points[-1][1]


def evaluate(model, loader, world):
    """(accuracy, mean loss) over the whole split: correct, summed loss and count summed over ranks."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            totals += torch.tensor([(out.argmax(1) == y).sum().item(),
                                    F.cross_entropy(out, y, reduction="sum").item(), len(y)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(totals)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def train(rank, world, args, port):
    if world > 1:
        if port is not None:  # spawned here; otherwise a launcher (torchrun) set the environment
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group(args.backend, rank=rank, world_size=world)
    cpus = len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, cpus // world))
    torch.manual_seed(args.seed + rank)

    name, train_loader, test_loader = make_loaders(args, world, rank)
    model = make_model(name)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=args.momentum,
                                weight_decay=args.weight_decay, nesterov=True)
    criterion = nn.CrossEntropyLoss()
    iters_per_epoch = len(train_loader)
    if iters_per_epoch == 0:
        raise SystemExit(f"train_torch.py: no full batch of {args.batch_size // world} per rank in the training set")
    per_iter = train_loader.batch_size * world
    if rank == 0:
        print(f"{name}: {len(train_loader.dataset)} train / {len(test_loader.dataset)} test samples, {world} rank(s), "
              f"{torch.get_num_threads()} thread(s) each, {iters_per_epoch} iterations of {per_iter} per epoch",
              flush=True)

    def validate():
        metrics["train_accuracy"], metrics["train_loss"] = evaluate(model, train_loader, world)
        metrics["test_accuracy"], metrics["test_loss"] = evaluate(model, test_loader, world)
        return ", " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())

    # Timed as examples/cifar10 does (ignite's events): training from the epoch's start (the
    # loader's start included) to the end of its last iteration; the epoch's wall time includes the
    # validation of every validate_every-th epoch, not the final one run after the last epoch.
    iteration, rates, epoch_seconds, metrics = 0, [], [], {}
    for epoch in range(1, args.num_epochs + 1):
        t_epoch = time.perf_counter()
        train_loader.sampler.set_epoch(epoch - 1)
        model.train()
        for x, y in train_loader:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(iteration, args, iters_per_epoch)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            iteration += 1
        rates.append(iters_per_epoch * per_iter / (time.perf_counter() - t_epoch))
        line = f"epoch {epoch}/{args.num_epochs}: {rates[-1]:.1f} samples/s, last loss {loss.item():.4f}"
        if epoch % args.validate_every == 0:
            line += validate()
        epoch_seconds.append(time.perf_counter() - t_epoch)
        if epoch == args.num_epochs and epoch % args.validate_every != 0:
            line += validate()
        if rank == 0:
            print(f"{line}, epoch {epoch_seconds[-1]:.1f} s", flush=True)

    last_collective = write_summary(args, name, world, rank, rates, epoch_seconds, metrics,
                                    {"implementation": "python", "backend": args.backend if world > 1 else "none"})
    if world > 1:
        # Free the model (its DDP Reducer holds the process group) and then the group while the
        # last collective's tensors (last_collective) are still referenced: with torch 1.13, if
        # Python drops them first, gloo's worker thread needs the GIL to free them while ~ProcessGroupGloo,
        # run with the GIL held, waits for that thread; rank 1 hung that way in a test.
        del model, optimizer
        gc.collect()
        dist.destroy_process_group()


def write_summary(args, name, world, rank, rates, epoch_seconds, metrics, extra):
    """Every rank: gathers the peak RSS; rank 0 writes summary.json (the C++ program's fields) and prints it.
    Returns the all_gather's tensors: keep them until the process group is destroyed (see train)."""
    mine = torch.tensor([peak_rss_mb()], dtype=torch.float64)
    gathered = [mine]
    if world > 1:
        gathered = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
    if rank == 0:
        kept = rates[1:] if len(rates) >= 3 else rates
        summary = {**extra, "world_size": world, "dataset": name, "epochs": args.num_epochs,
                   "batch_size": args.batch_size, "train_samples_per_s": statistics.median(kept),
                   "epoch_seconds": epoch_seconds, **metrics, "peak_rss_mb": torch.cat(gathered).tolist()}
        os.makedirs(args.output_path, exist_ok=True)
        with open(os.path.join(args.output_path, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        print(json.dumps(summary), flush=True)
    return gathered


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = argument_parser(__doc__).parse_args()
    apply_defaults(args)
    if args.nproc_per_node > 1:
        mp.spawn(train, args=(args.nproc_per_node, args, free_port()), nprocs=args.nproc_per_node)
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torchrun or kindling-run, one process per rank
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, None)
    else:
        train(0, 1, args, None)


if __name__ == "__main__":
    main()
