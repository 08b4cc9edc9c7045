#!/usr/bin/env python3
"""torchft's side of issue 64: the dist_tutorial `train` workload under torchft's own recovery.

What it is
    One replica group (one process, group world size 1) of a fault-tolerant data-parallel job
    built from torchft 0.2.0's parts: a Manager that joins a torchft lighthouse, torchft's
    reconfigurable Gloo process group (ProcessGroupGloo, or ProcessGroupBabyGloo, which runs Gloo
    in a child process), gradients averaged over the replicas of the current quorum by
    manager.allreduce (or, with --sync ddp, by torchft's DistributedDataParallel wrapper, whose
    hook calls the same; see Known problem) and the Manager's
    checkpoint transport (HTTP by default, or the process-group transport) that a joining or
    restarted replica heals from. It trains what kindling's `dist_tutorial train` trains
    (examples/dist_tutorial): PyTorch's classic MNIST network (conv 1->10 k5, conv 10->20 k5 with
    Dropout2d, max-pool and ReLU after each, fc 320->50, dropout 0.5, fc 50->10, log-softmax,
    NLL loss) on Fashion-MNIST read from Debian's idx files (/usr/share/datasets/fashion-mnist),
    normalized with mean 0.2860 and std 0.3530, --limit keeping the first N training samples;
    SGD with lr 0.01 and momentum 0.5; a global batch of 128 split evenly over the replica
    groups (64 each for two), each group reading its own shard of the data through torchft's
    DistributedSampler (shuffled, seed 1234, a new order every pass); the same seed on every
    replica for the initial weights, then seed + 1 + replica for the dropout masks.

    Each step prints one JSON line on stdout:
      {"t": time.time() after the step, "replica": id, "step": the Manager's committed step
       count after the step, "participants": replicas in this step's quorum, "samples": samples
       of this replica that went into the committed update (0 when the step did not commit or
       the replica was healing and so contributed zeros), "committed": should_commit's answer,
       "loss": this replica's batch loss}
    plus {"event": "start", ...} once the Manager is up (settings, versions, and the wall times at
    which the process began, finished its imports and had the data in memory), {"event": "heal",
    ...} when the Manager hands this replica a checkpoint from a peer (its load_state_dict
    callback runs: that is torchft's healing), and {"event": "end", ...} at the end. torchft's
    own log lines (logging, stderr) stay off unless --log-level says otherwise.

Recovery settings (torchft's defaults)
    Trainer side (options here): --timeout 60 s (collectives, should_commit, checkpoint fetch),
    --quorum-timeout 60 s (how long one quorum request may wait at the lighthouse),
    --connect-timeout 60 s (RPC connections to the lighthouse and managers),
    --heartbeat-interval 0.1 s (how often the manager heartbeats the lighthouse),
    --pg-timeout 60 s (the process group's store / reconfiguration timeout), --quorum-retries 0,
    --max-retries none (consecutive failed commits allowed), asynchronous quorum on.
    Lighthouse side (torchft_lighthouse's flags): --min_replicas (required),
    --join_timeout_ms 60000 (how long a quorum waits for heartbeating stragglers to join once
    min_replicas are there), --heartbeat_timeout_ms 5000 (a replica with no heartbeat for this
    long is taken as dead and left out of the next quorum), --quorum_tick_ms 100 (how often the
    lighthouse re-checks whether a quorum can be issued). A killed replica of two is what
    --heartbeat_timeout_ms decides: the lighthouse issues a quorum without a member of the last
    one only when the joined replicas are more than half of those still heartbeating, and the
    dead one counts as heartbeating until the timeout has passed (about 5 s of stall by default).
    A replica that comes back joins at once (all of the last quorum is there: a "fast quorum").

Measured (2-core development machine, CPU, load average 4 to 5 from others' builds; 3 runs of
torchft_kill_run.sh with the defaults): kill -> survivor's next commit 4.99 / 5.00 / 5.02 s
(1.09 s with --heartbeat_timeout_ms 1000); restart -> the new process's first commit 6.7 / 7.9 /
8.0 s, of which Python imports 4.5 to 5.2 s, data 1 to 1.8 s, Manager 0.9 to 1.6 s and the
heal itself (quorum, HTTP checkpoint, load) 0.14 to 0.25 s; 1, 1 and 0 steps without commit
(the survivor's step that was in its all-reduce at the kill); the survivor stalls about 0.45 s
when the replica rejoins. A step (64 samples per replica) took 23 ms with two replicas and
--threads 1, 37 ms median with torch's default threads, 8 to 17 ms for one replica alone.

How to run it (loopback only; the torch 2.x venv from scripts/torch2-env.sh has torchft)
    PY=~/.cache/kindling/torch-2.15.0/bin/python
    LH=~/.cache/kindling/torch-2.15.0/bin/torchft_lighthouse
    $LH --bind 127.0.0.1:29510 --min_replicas 1 --join_timeout_ms 1000 > lighthouse.log 2>&1 &
    $PY bench/fault/torchft_peer.py --lighthouse http://127.0.0.1:29510 --replica-id 0 \
        --seconds 45 >> r0.jsonl 2>> r0.log &
    $PY bench/fault/torchft_peer.py --lighthouse http://127.0.0.1:29510 --replica-id 1 \
        --seconds 60 >> r1.jsonl 2>> r1.log & R1=$!
    # once both print committed steps:
    sleep 10; kill -9 $R1; sleep 5
    $PY bench/fault/torchft_peer.py --lighthouse http://127.0.0.1:29510 --replica-id 1 \
        --seconds 20 >> r1.jsonl 2>> r1.log
    That schedule, with the wall times of the kill and the restart written down and the
    numbers computed from the JSON lines by bench/fault/torchft_recovery.py, is one command:
        flock /tmp/kindling-test.lock bench/fault/torchft_kill_run.sh /tmp/ft-run1 29510
    (LIGHTHOUSE_FLAGS="--min_replicas 1 --join_timeout_ms 1000 --heartbeat_timeout_ms 1000"
    before it changes the lighthouse; options after the port go to both replicas, e.g.
    --sync ddp or --threads 1).

Known problem (torchft 0.2.0)
    With --sync ddp, the survivor dies when its peer is killed during an all-reduce: Gloo's
    "Connection closed by peer" / "Connection reset by peer" is caught by the Manager, but
    torchft's DDP comm hook then finds no underlying future and fails with AssertionError
    (torchft/ddp.py, `assert fut._fut`) inside backward(). The default --sync allreduce calls
    manager.allreduce itself, where the same error only makes should_commit() answer False.

What it follows
    torchft's README and its examples/ddp walkthrough: start the Rust lighthouse with a small
    min_replicas and a short join timeout, give each replica group a Manager with a
    state_dict / load_state_dict pair for healing and a reconfigurable process group, average
    the gradients with manager.allreduce or torchft's DDP wrapper, begin every step with a quorum (start_quorum, as the Optimizer
    wrapper's zero_grad does) and step the optimizer only when should_commit agrees; shard the
    data per replica group with torchft's DistributedSampler. Without torchrun, the TCPStore
    that a Manager needs for its group is made here (group world size 1), on 127.0.0.1.
"""

import time

T_PROCESS = time.time()  # before the heavy imports: the start line reports what start-up cost

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from datetime import timedelta  # noqa: E402

import numpy as np  # noqa: E402

# Gloo's sockets on loopback: every replica runs on this machine.
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed import TCPStore  # noqa: E402

import torchft  # noqa: E402
from torchft import DistributedDataParallel, DistributedSampler, Manager, ProcessGroupGloo  # noqa: E402
from torchft.checkpointing.http_transport import HTTPTransport  # noqa: E402
from torchft.checkpointing.pg_transport import PGTransport  # noqa: E402
from torchft.process_group import ProcessGroupBabyGloo  # noqa: E402

FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530


class Net(nn.Module):
    """dist_tutorial's NetImpl (examples/dist_tutorial/model.h), layer for layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def read_idx(path: str) -> np.ndarray:
    """An idx file (gzip'ed or not) as a numpy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an idx file of unsigned bytes")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist_train(data_dir: str, limit: int) -> torch.utils.data.TensorDataset:
    """The training split as normalized [N, 1, 28, 28] floats and int64 labels (ToTensor, Normalize)."""

    def find(stem: str) -> str:
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise FileNotFoundError(f"{stem}(.gz) not found in {data_dir} (Debian's fashion-mnist package puts it "
                                "in /usr/share/datasets/fashion-mnist)")

    images = read_idx(find("train-images-idx3-ubyte"))
    labels = read_idx(find("train-labels-idx1-ubyte"))
    if limit >= 0:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    ids = torch.arange(len(labels), dtype=torch.int64)
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels.astype(np.int64)), ids)


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--lighthouse", default="http://127.0.0.1:29510", help="the torchft lighthouse's URL")
    p.add_argument("--replica-id", type=int, required=True, help="this replica group's id, 0..num-replica-groups-1")
    p.add_argument("--num-replica-groups", type=int, default=2,
                   help="replica groups the data is sharded over (torchft's DistributedSampler), and the "
                        "divisor of the global batch")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="directory of Fashion-MNIST's *-ubyte(.gz) files")
    p.add_argument("--limit", type=int, default=-1, help="use only the first N training samples (-1: all 60000)")
    p.add_argument("--batch-size", type=int, default=128,
                   help="global batch; each replica trains batch-size / num-replica-groups samples per step")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1234)
    run = p.add_mutually_exclusive_group(required=True)
    run.add_argument("--steps", type=int, help="stop once the manager has committed this many steps")
    run.add_argument("--seconds", type=float, help="stop after this many seconds of training")
    run.add_argument("--stop-file", help="stop once this file exists (tests/fault/goodput.py makes it)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the name or address other replicas reach this one by (its Manager and store); "
                        "127.0.0.1 when every replica runs on this machine")
    p.add_argument("--pace-ms-per-sample", type=float, default=0,
                   help="each step lasts at least this times its samples, as if this host had a device of its own "
                        "(tests/fault/goodput.py, as goodput_train); 0: as fast as it goes")
    p.add_argument("--ids", action="store_true", help="each step's line lists the ids of the samples it trained")
    p.add_argument("--min-replicas", type=int, default=1,
                   help="Manager's min_replica_size: a step commits only with at least this many replicas")
    p.add_argument("--sync", choices=("allreduce", "ddp"), default="allreduce",
                   help="gradient averaging: manager.allreduce of one flat buffer after backward, or torchft's "
                        "DistributedDataParallel wrapper (in torchft 0.2.0 its comm hook fails with an "
                        "AssertionError in the surviving replica when a peer dies mid-all-reduce)")
    p.add_argument("--process-group", choices=("gloo", "baby-gloo"), default="gloo",
                   help="torchft's ProcessGroupGloo, or ProcessGroupBabyGloo (Gloo in a child process)")
    p.add_argument("--checkpoint-transport", choices=("http", "pg"), default="http",
                   help="how a healing replica gets the state: the Manager's default HTTPTransport, or PGTransport")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="Manager timeout (s): collectives, should_commit, checkpoint transfers")
    p.add_argument("--quorum-timeout", type=float, default=60.0, help="Manager quorum_timeout (s)")
    p.add_argument("--connect-timeout", type=float, default=60.0, help="Manager connect_timeout (s)")
    p.add_argument("--heartbeat-interval", type=float, default=0.1,
                   help="Manager heartbeat_interval (s) to the lighthouse")
    p.add_argument("--pg-timeout", type=float, default=60.0,
                   help="process group timeout (s): its store and reconfiguration (torchft's default 60)")
    p.add_argument("--quorum-retries", type=int, default=0, help="Manager quorum_retries")
    p.add_argument("--max-retries", type=int, default=None,
                   help="Manager max_retries: consecutive failed commits before raising (default: no limit)")
    p.add_argument("--sync-quorum", action="store_true",
                   help="use_async_quorum=False (torchft's default is an asynchronous quorum, overlapped with "
                        "the forward pass)")
    p.add_argument("--no-init-sync", action="store_true",
                   help="init_sync=False: skip the step-0 weight sync (the replicas are seeded alike anyway)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--log-level", default="WARNING", help="Python logging level for torchft's own messages")
    args = p.parse_args(argv)
    if args.batch_size % args.num_replica_groups:
        p.error("--batch-size must divide evenly over --num-replica-groups")
    if not 0 <= args.replica_id < args.num_replica_groups:
        p.error("--replica-id must be in 0..num-replica-groups-1")
    return args


def make_manager(args, model: nn.Module, inner_optim: torch.optim.Optimizer):
    """torchft's Manager of this replica group (one process): its process group, its checkpoint
    transport for healing, its own store, the lighthouse to join."""
    secs = lambda s: timedelta(seconds=s)  # noqa: E731
    holder = {}

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": inner_optim.state_dict()}

    def load_state_dict(state: dict) -> None:
        # Called by the Manager only when this replica heals from a peer's checkpoint.
        model.load_state_dict(state["model"])
        inner_optim.load_state_dict(state["optim"])
        emit({"event": "heal", "t": time.time(), "replica": args.replica_id, "step": holder["m"].current_step()})

    if args.process_group == "gloo":
        pg = ProcessGroupGloo(timeout=secs(args.pg_timeout))
    else:
        pg = ProcessGroupBabyGloo(timeout=secs(args.pg_timeout))
    if args.checkpoint_transport == "http":
        transport = HTTPTransport(timeout=secs(args.timeout), num_chunks=0)
    else:
        transport = PGTransport(pg, timeout=secs(args.timeout), device=torch.device("cpu"))
    # The replica group's own store (torchrun would provide it): one member, serving on every
    # address of this host; the others reach it by --host.
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    holder["m"] = Manager(
        pg=pg, load_state_dict=load_state_dict, state_dict=state_dict, min_replica_size=args.min_replicas,
        use_async_quorum=not args.sync_quorum, timeout=secs(args.timeout),
        quorum_timeout=secs(args.quorum_timeout), connect_timeout=secs(args.connect_timeout), rank=0,
        world_size=1, store_addr=args.host, store_port=store.port, lighthouse_addr=args.lighthouse,
        replica_id=f"torchft_peer_{args.replica_id}", hostname=args.host,
        heartbeat_interval=secs(args.heartbeat_interval), checkpoint_transport=transport,
        init_sync=not args.no_init_sync, max_retries=args.max_retries, quorum_retries=args.quorum_retries)
    return holder["m"], store


def gradient_averager(manager, params):
    """One manager.allreduce (torchft's default AVG over the quorum's participants) of every
    gradient in one flat buffer, as one DDP bucket would be. On a failure the Manager records the
    error, wait() returns False and should_commit() then answers False."""
    def average_gradients() -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        manager.allreduce(flat).wait()
        offset = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n
    return average_gradients


def should_stop(args, manager, start) -> bool:
    return (args.steps is not None and manager.current_step() >= args.steps) or \
        (args.seconds is not None and time.time() - start >= args.seconds) or \
        (args.stop_file is not None and os.path.exists(args.stop_file))


def train_steps(args, manager, model, inner_optim, loader, sampler) -> None:
    """Steps until should_stop: quorum, forward, backward, gradients averaged, commit; one JSON
    line per step, each step paced to --pace-ms."""
    forward = DistributedDataParallel(manager, model) if args.sync == "ddp" else model
    average_gradients = gradient_averager(manager, list(model.parameters()))
    start, epoch = time.time(), 0
    model.train()
    while True:
        sampler.set_epoch(epoch)
        for data, target, ids in loader:
            step_started = time.time()
            manager.start_quorum()  # what torchft's Optimizer wrapper does in zero_grad()
            inner_optim.zero_grad()
            loss = F.nll_loss(forward(data), target)
            loss.backward()  # with --sync ddp, torchft's DDP hook averages through manager.allreduce
            if args.sync == "allreduce":
                average_gradients()
            committed = manager.should_commit()
            if committed:
                inner_optim.step()
            trained = committed and manager.is_participating()
            record = {"t": time.time(), "replica": args.replica_id, "step": manager.current_step(),
                      "participants": manager.num_participants(), "samples": len(data) if trained else 0,
                      "committed": bool(committed), "loss": round(loss.item(), 5)}
            if args.ids and trained:
                record["ids"] = ids.tolist()
            emit(record)
            if args.pace_ms_per_sample > 0:
                time.sleep(max(0.0, step_started + args.pace_ms_per_sample * len(data) / 1000.0 - time.time()))
            if should_stop(args, manager, start):
                return
        epoch += 1


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    t_imported = time.time()
    train = fashion_mnist_train(args.data_dir, args.limit)
    t_loaded = time.time()
    per_replica = args.batch_size // args.num_replica_groups
    sampler = DistributedSampler(train, replica_rank=args.replica_id, num_replica_groups=args.num_replica_groups,
                                 group_rank=0, num_replicas=1, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train, batch_size=per_replica, sampler=sampler)

    torch.manual_seed(args.seed)  # the same initial weights on every replica
    model = Net()
    inner_optim = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    manager, _store = make_manager(args, model, inner_optim)
    torch.manual_seed(args.seed + 1 + args.replica_id)  # each replica its own dropout masks

    settings = {k: v for k, v in vars(args).items() if k not in ("log_level",)}
    emit({"event": "start", "t": time.time(), "t_process": T_PROCESS, "t_imported": t_imported,
          "t_data_loaded": t_loaded, "replica": args.replica_id, "pid": os.getpid(),
          "torch": torch.__version__, "torchft": getattr(torchft, "__version__", "0.2.0"),
          "train_samples": len(train), "samples_per_step": per_replica,
          "shard_samples": len(sampler), "settings": settings})
    train_steps(args, manager, model, inner_optim, loader, sampler)
    emit({"event": "end", "t": time.time(), "replica": args.replica_id, "step": manager.current_step(),
          "batches_committed": manager.batches_committed()})
    manager.shutdown(wait=False)
    return 0

if __name__ == "__main__":
    sys.exit(main())
