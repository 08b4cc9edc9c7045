#!/usr/bin/env python3
"""A torch.distributed rank in Python that joins a kindling job, as a user's Python program
would: what hello_dist does (an all_reduce of rank + 1 as one int64), printed the same way.
Started by a launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment)."""
import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1], dtype=torch.int64)
dist.all_reduce(t)
# One write(2) per line: print() makes two (the text, then "\n") when PYTHONUNBUFFERED is set, and
# the two ranks of a host share one pipe, so their lines could interleave ("host=node1rank=2 ...").
line = (f"rank={dist.get_rank()} world_size={dist.get_world_size()} backend=python all_reduce={t.item()} "
        f"host={socket.gethostname()}\n")
os.write(1, line.encode())
dist.destroy_process_group()
