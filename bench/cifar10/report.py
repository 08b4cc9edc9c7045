"""The tables of scripts/bench-cifar10.sh from the runs it left under ROOT/r<repeat>/<variant>/:
each run's summary.json (written by the program) and memory.json (bench/cifar10/peak_memory.py).

  python3 report.py ROOT REPEATS
"""
import glob
import json
import os
import statistics
import sys

LABELS = [("ignite-1", "ignite", 1), ("ignite-2", "ignite, gloo (torchrun)", 2),
          ("python-1", "Python torch", 1), ("python-2", "Python torch, gloo", 2),
          ("kindling-1", "kindling", 1), ("kindling-gloo-2", "kindling, gloo", 2),
          ("kindling-mpi-2", "kindling, mpi", 2), ("kindling-nocomm", "no-comm limit: 2 x kindling 1 rank", 2)]
COMPARISONS = [("kindling-1", "ignite-1", "kindling 1 rank / ignite 1 rank"),
               ("kindling-gloo-2", "ignite-2", "kindling gloo 2 ranks / ignite gloo 2 ranks"),
               ("kindling-mpi-2", "ignite-2", "kindling mpi 2 ranks / ignite gloo 2 ranks"),
               ("kindling-1", "python-1", "kindling 1 rank / Python torch 1 rank"),
               ("kindling-gloo-2", "python-2", "kindling gloo 2 ranks / Python torch gloo 2 ranks"),
               ("kindling-gloo-2", "kindling-nocomm", "kindling gloo 2 ranks / no-comm limit"),
               ("kindling-mpi-2", "kindling-nocomm", "kindling mpi 2 ranks / no-comm limit")]
COLUMNS = ["samples/s", "epoch s", "test acc", "peak PSS/rank MiB", "main VmHWM/rank MiB"]


def steady(xs):  # as the programs do for samples/s: leave out the first epoch when there are >= 3
    return statistics.median(xs[1:] if len(xs) >= 3 else xs)


def one_run(folder):
    """The COLUMNS of one run, or None when it left no summary (a failed run)."""
    found = sorted(glob.glob(os.path.join(folder, "**", "summary.json"), recursive=True))
    want = 2 if folder.endswith("nocomm") else 1  # the no-comm pair: one summary per training
    if len(found) != want:
        return None
    s = [json.load(open(f)) for f in found]
    memory = [json.load(open(f)) for f in glob.glob(os.path.join(folder, "**", "memory.json"), recursive=True)]
    pss = statistics.mean(m["peak_pss_mb_per_rank"] for m in memory) if memory else float("nan")
    return (sum(x["train_samples_per_s"] for x in s), max(steady(x["epoch_seconds"]) for x in s),
            statistics.mean(x["test_accuracy"] for x in s), pss,
            statistics.mean(v for x in s for v in x["peak_rss_mb"]))


SPLIT_PARTS = ["data", "forward", "backward", "allreduce_wait", "optimizer", "iteration"]


def print_splits(root, repeats):
    """Rank 0's iteration split (--profile runs): per variant, the median over repeats of each part."""
    rows = {}
    for r in range(1, repeats + 1):
        for label, _, _ in LABELS:
            for f in glob.glob(os.path.join(root, f"r{r}", label, "**", "summary.json"), recursive=True):
                split = json.load(open(f)).get("iteration_split_ms")
                if split:
                    rows.setdefault(label, []).append(split)
    if not rows:
        return
    print("\n## Where a training iteration's time goes (rank 0, median ms; --profile)\n")
    print("| variant | " + " | ".join(SPLIT_PARTS) + " | runs |\n|---|" + "---|" * (len(SPLIT_PARTS) + 1))
    for label, name, n in LABELS:
        if label in rows:
            cells = [statistics.median(x[p] for x in rows[label]) if all(p in x for x in rows[label]) else None
                     for p in SPLIT_PARTS]
            print(f"| {name}, {n} rank(s) | " + " | ".join("-" if c is None else f"{c:,.1f}" for c in cells) +
                  f" | {len(rows[label])} |")
    print("\nPython DDP waits for its all-reduces inside backward(): its backward includes what kindling shows as"
          "\nallreduce_wait. iteration: one batch request to the next (the parts plus the handlers between).")


def main():
    root, repeats = sys.argv[1], int(sys.argv[2])
    runs = {}
    print("\n| repeat | variant | " + " | ".join(COLUMNS) + " |\n|---|---|" + "---|" * len(COLUMNS))
    for r in range(1, repeats + 1):
        for label, _, _ in LABELS:
            folder = os.path.join(root, f"r{r}", label)
            if not os.path.isdir(folder):
                continue
            res = one_run(folder)
            if res:
                runs.setdefault(label, []).append(res)
            cells = " | ".join(f"{v:,.4g}" for v in res) if res else "failed" + " | -" * (len(COLUMNS) - 1)
            print(f"| {r} | {label} | {cells} |")

    med = {k: [statistics.median(x[i] for x in v) for i in range(len(COLUMNS))] for k, v in runs.items()}
    print("\n## Medians over the repeats\n\n| variant | ranks | " + " | ".join(COLUMNS) + " | runs |")
    print("|---|---|" + "---|" * (len(COLUMNS) + 1))
    for label, name, n in LABELS:
        if label in med:
            sps, ep, acc, pss, rss = med[label]
            print(f"| {name} | {n} | {sps:,.1f} | {ep:,.1f} | {acc:.4f} | {pss:,.0f} | {rss:,.0f} | "
                  f"{len(runs[label])}/{repeats} |")

    print_splits(root, repeats)

    def ratio(a, b, i):
        return f"{med[a][i] / med[b][i]:.2f}" if a in med and b in med and med[b][i] else "-"
    print("\n| comparison | samples/s ratio | test acc difference (points) | peak PSS/rank ratio |\n|---|---|---|---|")
    for a, b, what in COMPARISONS:
        if a in med and b in med:
            print(f"| {what} | {ratio(a, b, 0)} | {100 * (med[a][2] - med[b][2]):+.2f} | {ratio(a, b, 3)} |")
    print("\nsamples/s: whole job, epoch start to its last training iteration, median over epochs (the first left"
          "\n  out when >= 3); epoch s: wall time per epoch (validation every validate_every epochs), same median"
          "\n  (no-comm: the slower); peak PSS/rank: the job's processes (workers included, launcher left out)"
          "\n  sampled by peak_memory.py, divided by the ranks; main VmHWM: each rank's own process only."
          f"\nRatios > 1 mean more samples/s or more memory for the first. Runs kept in {root}")


if __name__ == "__main__":
    main()
