"""all_reduce latency/bandwidth of Python torch.distributed (gloo) on the sizes bench_collectives uses.

  export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29700
  for r in 0 1; do RANK=$r /usr/bin/python3 bench/collectives/torch_collectives.py -b 4 -e 64M -f 4 -n 100 & done; wait
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-b", type=size, default=4)
    p.add_argument("-e", type=size, default=64 << 20)
    p.add_argument("-f", type=int, default=4)
    p.add_argument("-n", type=int, default=100)
    p.add_argument("-w", type=int, default=10)
    p.add_argument("-r", type=int, default=7)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, ws = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# python torch.distributed gloo all_reduce SUM float, {ws} ranks, {a.n} iters x {a.r} rounds (median)")
        print("# %10s %10s %12s %9s %9s" % ("size(B)", "count", "time(us)", "algbw", "busbw"))
    nbytes = a.b
    while nbytes <= a.e:
        count = max(1, nbytes // 4)
        t = torch.ones(count)
        n = max(5, a.n // 10) if nbytes >= (16 << 20) else a.n
        for _ in range(a.w):
            dist.all_reduce(t)
        rounds = []
        for _ in range(a.r):
            t0 = time.perf_counter()
            for _ in range(n):
                dist.all_reduce(t)
            rounds.append((time.perf_counter() - t0) / n)
        m = statistics.median(rounds)
        algbw = count * 4 / m / 1e9
        if rank == 0:
            print("  %10d %10d %12.2f %9.3f %9.3f" % (count * 4, count, m * 1e6, algbw, algbw * 2 * (ws - 1) / ws))
        nbytes *= a.f
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
