"""A Python torch.distributed rank that joins a job with kindling ranks (tests/dist/interop_test.cpp).

Usage: interop_peer.py env|tcp   (rank, world size and port come from KINDLING_TEST_* variables)
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    mode = sys.argv[1]
    rank = int(os.environ["KINDLING_TEST_RANK"])
    world_size = int(os.environ["KINDLING_TEST_WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=60)
    if mode == "env":
        dist.init_process_group("gloo", timeout=timeout)
    else:
        port = os.environ["KINDLING_TEST_PORT"]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=timeout)
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    expected = world_size * (world_size + 1) / 2
    print(f"python rank {rank}: all_reduce={t.tolist()}", flush=True)
    if not bool((t == expected).all()):
        print(f"expected {expected}", file=sys.stderr)
        return 1
    b = torch.zeros(3, dtype=torch.int64)
    if rank == 0:
        b += 7
    dist.broadcast(b, src=0)
    if b.tolist() != [7, 7, 7]:
        print(f"broadcast gave {b.tolist()}", file=sys.stderr)
        return 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
