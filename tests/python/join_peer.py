"""torch's own Join on the cases kindling's Join trained (tests/nn/join_test.cpp): the same
initial weights, batches and options, torch.nn.parallel.DistributedDataParallel inside
torch.distributed.algorithms.Join; rank 0 compares the final weights with kindling's.

Usage: join_peer.py CASES_FILE   (one rank of a gloo job: RANK, WORLD_SIZE, MASTER_* set)"""
import datetime
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

# torch >= 2.6 loads with weights_only=True by default, which refuses the type tags that
# LibTorch's pickler writes for dicts and lists; allowing those (harmless) helpers is enough.
if hasattr(torch.serialization, "add_safe_globals"):
    import torch.jit._pickle as tags
    torch.serialization.add_safe_globals([tags.restore_type_tag, tags.build_intlist, tags.build_doublelist,
                                          tags.build_boollist, tags.build_tensorlist])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 3)
        self.side = torch.nn.Linear(16, 3)

    def forward(self, x, use_side):
        h = torch.tanh(self.a(x))
        return self.b(h) + self.side(h) if use_side else self.b(h)


def train(case, rank):
    net = Net()
    with torch.no_grad():
        at = 0
        for p in net.parameters():
            p.copy_(case["init"][at:at + p.numel()].view(p.shape))
            at += p.numel()
    model = DistributedDataParallel(net, find_unused_parameters=case["unused"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with Join([model], divide_by_initial_world_size=case["divide_by_world"]):
        for x, y in case["data"][rank]:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x, not case["unused"]), y).backward()
            optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    cases = torch.load(sys.argv[1])
    failed = 0
    for case in cases:
        mine = train(case, rank)
        if rank == 0:
            diff = (mine - case["final"]).abs().max().item()
            ok = torch.allclose(mine, case["final"], rtol=1e-5, atol=1e-6)
            failed += not ok
            print("%s %s: max difference %.3g" % ("MATCH" if ok else "DIFFER", case["name"], diff), flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
