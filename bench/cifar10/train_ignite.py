"""The real PyTorch-Ignite peer of examples/cifar10: ignite's CIFAR10 tutorial flow written with
ignite itself (idist.auto_dataloader / auto_model / auto_optim, create_supervised_trainer,
common.setup_common_training_handlers with training checkpoints every checkpoint_every iterations,
PiecewiseLinear, train and test evaluators with Accuracy and Loss every validate_every epochs and at
the end, TensorBoard logging on rank 0, the two best models by test accuracy), for
scripts/bench-cifar10.sh. Data, transforms and model are train_torch.py's (the C++ program's: a
one-channel first convolution on Fashion-MNIST); flags and summary.json as the C++ program's.

  /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 bench/cifar10/train_ignite.py
  python bench/cifar10/train_ignite.py --nproc_per_node 2     # idist.Parallel spawns the ranks

Needs pytorch-ignite and tensorboard (scripts/python-peer.sh puts them in a venv beside Debian's
torch). --profile splits each training iteration's time on rank 0 into data wait, forward,
backward (DDP's all-reduce wait included: Python DDP finishes it inside backward()), optimizer
step and the whole iteration (one batch request to the next), and writes the medians (ms) to
summary.json.
"""
import gc
import os
import statistics
import sys
import time

import torch
import ignite
import ignite.distributed as idist
from ignite.contrib.engines import common
from ignite.engine import Engine, Events, create_supervised_evaluator
from ignite.handlers import Checkpoint, DiskSaver, PiecewiseLinear, global_step_from_engine
from ignite.metrics import Accuracy, Loss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_torch as base  # noqa: E402  (the shared data, model and measures)

# The tensors of each rank's last collective (write_summary's all_gather), referenced until the
# process ends, and the DDP model freed before idist.finalize() (main): then the gloo group dies at
# finalize, its worker threads joined, with nothing left for them to free. Otherwise (as at first)
# idist.Parallel.run drops training()'s result, the DDP model held in the engines' reference cycles
# keeps the group alive into interpreter shutdown, and gloo's worker thread, holding the last
# reference to these tensors, must take the GIL to free them: when it runs late (a loaded
# machine) the interpreter is already finalizing, Python 3.11 ends the thread with pthread_exit,
# and the rank aborts with "terminate called without an active exception" after a correct run
# (seen once in CI on torch 1.13, rank 1 of 2).
LAST_COLLECTIVE = []


def parse_args():
    p = base.argument_parser(__doc__)
    p.add_argument("--checkpoint_every", type=int, default=200)
    p.add_argument("--log_every_iters", type=int, default=15)
    p.add_argument("--profile", action="store_true", help="split rank 0's iteration time (adds synchronisation)")
    return p.parse_args()


def get_dataflow(args):
    name, train_set, test_set = base.make_datasets(args)
    # As the tutorial: the job's batch, idist divides it (and the workers) by the ranks.
    train_loader = idist.auto_dataloader(train_set, batch_size=args.batch_size, num_workers=args.num_workers,
                                         shuffle=True, drop_last=True)
    test_loader = idist.auto_dataloader(test_set, batch_size=2 * args.batch_size, num_workers=args.num_workers,
                                        shuffle=False)
    return name, train_loader, test_loader


def train_step_of(model, optimizer, criterion, split):
    """create_supervised_trainer's step (non-AMP CPU path), optionally timing its parts into split."""
    def step(engine, batch):
        x, y = batch
        model.train()
        t0 = time.perf_counter()
        y_pred = model(x)
        loss = criterion(y_pred, y)
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        if split is not None:
            split["forward"].append(t1 - t0)
            split["backward"].append(t2 - t1)
            split["optimizer"].append(t3 - t2)
        return {"batch loss": loss.item()}
    return step


def training(local_rank, args):
    rank, world = idist.get_rank(), idist.get_world_size()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // idist.get_nproc_per_node()))
    ignite.utils.manual_seed(args.seed + rank)
    name, train_loader, test_loader = get_dataflow(args)
    model = idist.auto_model(base.make_model(name))
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=args.momentum,
                                                 weight_decay=args.weight_decay, nesterov=True))
    criterion = torch.nn.CrossEntropyLoss()
    iters = len(train_loader)
    lr_scheduler = PiecewiseLinear(optimizer, "lr", milestones_values=[
        (0, 0.0), (iters * args.num_warmup_epochs, args.learning_rate), (iters * args.num_epochs, 0.0)])
    folder = os.path.join(args.output_path, f"resnet18_backend-{idist.backend()}-{world}_{time.strftime('%Y%m%d-%H%M%S')}")
    folder = idist.broadcast(folder, src=0)
    split = {"data": [], "forward": [], "backward": [], "optimizer": [], "iteration": []} if args.profile and rank == 0 else None
    trainer = Engine(train_step_of(model, optimizer, criterion, split))
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "lr_scheduler": lr_scheduler}
    common.setup_common_training_handlers(
        trainer, train_sampler=train_loader.sampler, to_save=to_save, save_every_iters=args.checkpoint_every,
        output_path=folder, lr_scheduler=lr_scheduler,
        output_names=["batch loss"] if args.log_every_iters > 0 else None, with_pbars=False, clear_cuda_cache=False)
    if split is not None:
        fetch = {}

        def batch_requested(_):
            now = time.perf_counter()
            if "t" in fetch:  # from the previous request of this epoch: one whole iteration
                split["iteration"].append(now - fetch["t"])
            fetch["t"] = now
        trainer.add_event_handler(Events.EPOCH_STARTED, lambda _: fetch.clear())
        trainer.add_event_handler(Events.GET_BATCH_STARTED, batch_requested)
        trainer.add_event_handler(Events.GET_BATCH_COMPLETED,
                                  lambda _: split["data"].append(time.perf_counter() - fetch["t"]))

    metrics = {"Accuracy": Accuracy(), "Loss": Loss(criterion)}
    train_evaluator = create_supervised_evaluator(model, metrics=metrics, device=idist.device(), non_blocking=True)
    test_evaluator = create_supervised_evaluator(model, metrics=metrics, device=idist.device(), non_blocking=True)
    results, marks = {}, {}

    def run_validation(engine):
        for tag, evaluator, loader in (("train", train_evaluator, train_loader), ("test", test_evaluator, test_loader)):
            state = evaluator.run(loader)
            results[f"{tag}_accuracy"], results[f"{tag}_loss"] = state.metrics["Accuracy"], state.metrics["Loss"]
    trainer.add_event_handler(Events.EPOCH_COMPLETED(every=args.validate_every) | Events.COMPLETED, run_validation)
    if rank == 0:
        tb_logger = common.setup_tb_logging(folder, trainer, optimizer,
                                            evaluators={"train": train_evaluator, "test": test_evaluator},
                                            log_every_iters=max(1, args.log_every_iters))
    test_evaluator.add_event_handler(Events.COMPLETED, Checkpoint(
        {"model": model}, DiskSaver(folder, require_empty=False), filename_prefix="best", n_saved=2,
        global_step_transform=global_step_from_engine(trainer), score_name="test_accuracy",
        score_function=Checkpoint.get_default_score_fn("Accuracy")))

    # Measured as examples/cifar10: training samples/s from the epoch's start to its last iteration.
    rates, epoch_seconds = [], []
    trainer.add_event_handler(Events.EPOCH_STARTED, lambda _: marks.update(start=time.perf_counter()))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda _: marks.update(end=time.perf_counter()))

    def epoch_done(engine):
        rates.append(iters * args.batch_size / (marks["end"] - marks["start"]))
        epoch_seconds.append(time.perf_counter() - marks["start"])
        if rank == 0:
            print(f"epoch {engine.state.epoch}: {rates[-1]:.1f} samples/s, epoch {epoch_seconds[-1]:.1f} s", flush=True)
    # Added after run_validation: an epoch's wall time includes its validation, as in the C++ program.
    trainer.add_event_handler(Events.EPOCH_COMPLETED, epoch_done)

    trainer.run(train_loader, max_epochs=args.num_epochs)
    if rank == 0:
        tb_logger.close()
    extra = {"implementation": "ignite " + ignite.__version__, "backend": idist.backend() or "none"}
    if split is not None:
        extra["iteration_split_ms"] = {k: 1000 * statistics.median(v) for k, v in split.items() if v}
    LAST_COLLECTIVE.append(base.write_summary(args, name, world, rank, rates, epoch_seconds, results, extra))


def main():
    args = parse_args()
    base.apply_defaults(args)
    backend = args.backend if args.nproc_per_node > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    nproc = args.nproc_per_node if args.nproc_per_node > 1 else None
    with idist.Parallel(backend=backend, nproc_per_node=nproc) as parallel:
        parallel.run(training, args)
        gc.collect()  # frees the DDP model and engines (reference cycles) while the group lives


if __name__ == "__main__":
    main()
