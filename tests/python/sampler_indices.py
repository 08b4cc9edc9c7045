"""Prints torch.utils.data.DistributedSampler's indices for every combination read from stdin.

Each input line: size replicas rank shuffle seed epoch drop_last (integers, 0/1 for flags).
Each output line: the same fields, a colon, then the indices separated by spaces.
"""
import sys

from torch.utils.data import DistributedSampler

for line in sys.stdin:
    fields = line.split()
    if not fields:
        continue
    size, replicas, rank, shuffle, seed, epoch, drop_last = (int(f) for f in fields)
    sampler = DistributedSampler(range(size), num_replicas=replicas, rank=rank, shuffle=bool(shuffle), seed=seed,
                                 drop_last=bool(drop_last))
    sampler.set_epoch(epoch)
    print(line.strip() + ":" + "".join(" " + str(i) for i in sampler))
