#!/usr/bin/env python3
"""Checks the Chrome traces of tests/dist/timeline_test.cpp's worker (kindling/handlers/profilers/timeline.h).

  check_timeline.py DIR WORLD BACKEND FIRST LAST

DIR/trace holds timeline.json (rank 0: every rank) and timeline_rank_<r>.json; DIR/steps_rank_<r>.json
holds DDP's StepTimes of iterations FIRST..LAST. Checks: the files are JSON in the trace-event
format; the merged file holds exactly the ranks' own files' events; every rank shows each
iteration of the range with its data wait, process function and the trainer's step parts, the
watched evaluator and the checkpoint write at iteration 4; spans of one row nest; the ranks are
on one clock (every collective started on every rank before it ended on any, within the clocks'
uncertainty; same-host offsets within their uncertainty); bucket all-reduces start during
backward; the step parts agree with StepTimes within 5% (plus 5 ms).
Prints what it checked; exits 1 with the reason when a check fails."""
import collections
import json
import os
import sys

STEP_PARTS = ["zero_grad", "prepare batch", "forward", "loss", "backward", "optimizer step", "DDP wait for buckets",
              "DDP write back"]


def fail(message):
    print("check_timeline: " + message)
    sys.exit(1)


def load(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: not a JSON file: %s" % (path, e))
    if not isinstance(trace.get("traceEvents"), list) or "otherData" not in trace:
        fail("%s: no traceEvents list or otherData" % path)
    for e in trace["traceEvents"]:
        if e.get("ph") not in ("X", "M") or not isinstance(e.get("pid"), int):
            fail("%s: an event of an unexpected form: %r" % (path, e))
        if e["ph"] == "X" and not (isinstance(e.get("ts"), (int, float)) and e.get("dur", -1) >= 0):
            fail("%s: a span without ts/dur: %r" % (path, e))
    return trace


def spans(trace, pid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (pid is None or e["pid"] == pid)]


def key(e):
    return (e["pid"], e["tid"], e["name"], round(e["ts"], 3), round(e["dur"], 3))


def check_nesting(events, where):
    rows = collections.defaultdict(list)
    for e in events:
        rows[(e["pid"], e["tid"])].append(e)
    for row, items in rows.items():
        items.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in items:
            while open_ends and open_ends[-1][0] <= e["ts"] + 1e-3:
                open_ends.pop()
            if open_ends and e["ts"] + e["dur"] > open_ends[-1][0] + 1e-3:
                fail("%s: on row %s, %r overlaps %r without nesting" % (where, row, e["name"], open_ends[-1][1]))
            open_ends.append((e["ts"] + e["dur"], e["name"]))


def within(inner, outer):
    return outer["ts"] - 1e-3 <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


def check_rank(trace, rank, first, last):
    mine = spans(trace, rank)
    by_name = collections.defaultdict(list)
    for e in mine:
        by_name[e["name"]].append(e)
    for it in range(first, last + 1):
        iteration = by_name.get("iteration %d" % it)
        if not iteration or len(iteration) != 1:
            fail("rank %d: %d spans 'iteration %d'" % (rank, len(iteration or []), it))
        iteration = iteration[0]
        process = [e for e in by_name["process"] if within(e, iteration)]
        data = [e for e in by_name["data"] if within(e, iteration)]
        if len(process) != 1 or len(data) != 1:
            fail("rank %d, iteration %d: %d process and %d data spans inside it" % (rank, it, len(process), len(data)))
        for part in STEP_PARTS:
            inside = [e for e in by_name[part] if within(e, process[0])]
            if len(inside) != 1:
                fail("rank %d, iteration %d: %d '%s' spans in its process function" % (rank, it, len(inside), part))
    for it in (1, 2):
        evaluation = by_name.get("evaluator iteration %d" % it, [])
        if len(evaluation) != 1 or not any(within(e, evaluation[0]) for e in by_name["evaluator process"]) or \
                not any(within(e, evaluation[0]) for e in by_name["forward"]):
            fail("rank %d: the watched evaluator's iteration %d, with its process and forward, is missing: %s" %
                 (rank, it, sorted(by_name)))
    writes = by_name["checkpoint write"]
    if rank == 0 and (len(writes) != 1 or writes[0]["args"].get("bytes") != 4096):
        fail("rank 0: checkpoint writes %r" % writes)
    if rank != 0 and writes:
        fail("rank %d wrote a checkpoint: %r" % (rank, writes))
    reduces = [e for e in mine if e["cat"] == "communication" and e["name"].startswith("all_reduce")]
    if not reduces or any(e["args"].get("bytes", 0) <= 0 or "sequence number" not in e["args"] for e in reduces):
        fail("rank %d: all_reduce spans without bytes or sequence number: %r" % (rank, reduces[:3]))
    return by_name


def check_one_clock(merged, world, uncertainty_us):
    ends = collections.defaultdict(dict)
    for e in spans(merged):
        if e["cat"] != "communication" or "sequence number" not in e["args"]:
            continue
        ends[(e["args"]["group"], e["args"]["sequence number"])][e["pid"]] = (e["ts"], e["ts"] + e["dur"])
    checked = 0
    for op, ranks in ends.items():
        if len(ranks) != world:
            continue  # started before the range on some rank
        last_start = max(start for start, _ in ranks.values())
        first_end = min(end for _, end in ranks.values())
        if first_end < last_start - uncertainty_us:
            fail("collective %s ended at %.1f us on one rank before another started it at %.1f us (clocks' "
                 "uncertainty %.1f us)" % (op, first_end, last_start, uncertainty_us))
        checked += 1
    if checked < 3:
        fail("only %d collectives seen on every rank" % checked)
    return checked


def main():
    folder, world, backend, first, last = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    trace_dir = os.path.join(folder, "trace")
    names = sorted(os.listdir(trace_dir))
    expected = sorted(["timeline.json"] + ["timeline_rank_%d.json" % r for r in range(world)])
    if names != expected:
        fail("the folder holds %s, expected %s" % (names, expected))
    merged = load(os.path.join(trace_dir, "timeline.json"))
    if sorted({e["pid"] for e in spans(merged)}) != list(range(world)):
        fail("the merged trace's processes are %s" % sorted({e["pid"] for e in spans(merged)}))
    own = set()
    for r in range(world):
        own |= {key(e) for e in spans(load(os.path.join(trace_dir, "timeline_rank_%d.json" % r)))}
    if own != {key(e) for e in spans(merged)}:
        fail("the merged trace differs from the ranks' own files (%d vs %d events)" % (len(spans(merged)), len(own)))
    check_nesting([e for e in spans(merged) if e["cat"] != "communication"], "merged")
    check_nesting([e for e in spans(merged) if e["cat"] == "communication"], "merged communication")
    clocks = merged["otherData"]["ranks"]
    uncertainty_us = max(c["clock_uncertainty_ns"] for c in clocks) / 1000.0
    for c in clocks:
        if abs(c["clock_offset_ns"]) > c["clock_uncertainty_ns"] + 200000:
            fail("rank %d's offset %d ns exceeds its uncertainty %d ns on one host" %
                 (c["rank"], c["clock_offset_ns"], c["clock_uncertainty_ns"]))
    overlapped = 0
    for r in range(world):
        by_name = check_rank(merged, r, first, last)
        with open(os.path.join(folder, "steps_rank_%d.json" % r)) as f:
            steps = json.load(f)
        if [s["iteration"] for s in steps] != list(range(first, last + 1)):
            fail("rank %d: StepTimes of iterations %s" % (r, [s["iteration"] for s in steps]))
        ddp = sum(s["forward"] + s["backward"] + s["communication_wait"] + s["write_back"] for s in steps) * 1e6
        # The trainer's own parts: those inside its process functions (the evaluator's forward runs
        # in a handler, outside them).
        trainer = sum(e["dur"] for part in ("forward", "loss", "backward") for e in by_name[part]
                      if any(within(e, p) for p in by_name["process"]))
        # 5%, plus 5 ms: a rank preempted between the two measurements' edges (a scheduler slice
        # on a loaded 2-core machine) shifts one of them.
        if abs(trainer - ddp) > 0.05 * ddp + 5000:
            fail("rank %d: forward + loss + backward on the timeline %.0f us, DDP's StepTimes %.0f us" %
                 (r, trainer, ddp))
        backward = by_name["backward"]
        overlapped += sum(1 for e in spans(merged, r) if e["name"] == "all_reduce_async" and
                          any(b["ts"] < e["ts"] < b["ts"] + b["dur"] for b in backward))
        print("rank %d: step parts %.0f us on the timeline, %.0f us in StepTimes" % (r, trainer, ddp))
    if overlapped == 0:
        fail("no all_reduce_async (DDP's buckets) started during a backward span: the overlap is not shown")
    checked = check_one_clock(merged, world, uncertainty_us)
    print("check_timeline: %d ranks, %d collectives on one clock (uncertainty %.1f us), %d bucket reductions "
          "started inside backward, on %s" % (world, checked, uncertainty_us, overlapped, backend))


if __name__ == "__main__":
    main()
