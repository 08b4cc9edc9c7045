#!/usr/bin/env python3
"""Checks a job's flight-record dumps (kindling/dist/flight_recorder.h) with Python's own pickle
and, where the interpreter's torch ships it (torch 2.x), with torch's analyzer torchfrtrace.

  check_flight_record.py clean DIR WORLD ENGINE
      every rank's dump holds the collectives of tests/dist/flight_recorder_test.cpp's worker,
      all completed, in torch's layout; the analyzer finds nothing wrong.
  check_flight_record.py missing DIR WORLD ENGINE RANK SEQ [OP]
      RANK stopped after collective SEQ-1 while the others waited in SEQ (an OP, all_reduce by
      default; SEQ "next": the one after RANK's last): the dumps say so, and the analyzer names
      RANK as missing from collective SEQ.
Prints what it checked; exits 1 with the reason when a check fails."""
import os
import pickle
import re
import subprocess
import sys

ENTRY_KEYS = {"record_id", "process_group", "collective_seq_id", "p2p_seq_id", "is_p2p", "profiling_name",
              "time_created_ns", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state"}
# The worker's collectives, in order: name, input sizes, dtype (tests/dist/flight_recorder_test.cpp).
CLEAN = [("broadcast", [[4]], "Float"), ("all_reduce", [[4]], "Float"), ("all_gather", [[4]], "Float"),
         ("barrier", [], None), ("all_reduce", [[4]], "Float"), ("all_reduce", [[2, 3]], "Double")]


def fail(message):
    print("check_flight_record: " + message)
    sys.exit(1)


def load(folder, world):
    names = sorted(os.listdir(folder))
    expected = ["kindling_fr_rank_%d" % r for r in range(world)]
    if names != expected:
        fail("the folder holds %s, expected exactly %s" % (names, expected))
    dumps = []
    for rank, name in enumerate(expected):
        with open(os.path.join(folder, name), "rb") as f:
            dump = pickle.load(f)
        if dump.get("version") != "2.10" or dump["kindling"]["rank"] != rank:
            fail("rank %d: version %r, rank %r" % (rank, dump.get("version"), dump["kindling"]["rank"]))
        if dump["pg_config"].get("0", {}).get("ranks") != str(list(range(world))):
            fail("rank %d: pg_config %r" % (rank, dump["pg_config"]))
        for e in dump["entries"]:
            if not ENTRY_KEYS <= set(e):
                fail("rank %d: entry without %s" % (rank, ENTRY_KEYS - set(e)))
        dumps.append(dump)
    return dumps


def analyzer(folder):
    """torchfrtrace's findings (its stderr, where it writes them), or None when this torch has no
    analyzer. In a process of its own: its log handler holds the stderr of its import."""
    try:
        import torch.distributed.flight_recorder.fr_trace  # noqa: F401
    except ImportError:
        return None
    code = "import sys; from torch.distributed.flight_recorder.fr_trace import main; main(sys.argv[1:])"
    run = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, timeout=120)
    if run.returncode != 0 or "Traceback" in run.stderr:
        fail("the analyzer failed (exit %d):\n%s%s" % (run.returncode, run.stdout, run.stderr))
    return run.stderr


HEADLINE = re.compile(r"^(Not all ranks joining collective|Collective sequence number: \d+ has errors)", re.M)


def check_clean(folder, world, engine):
    for rank, dump in enumerate(load(folder, world)):
        seen = [(e["profiling_name"], e["input_sizes"], e["input_dtypes"], e["state"], e["collective_seq_id"])
                for e in dump["entries"]]
        want = [("%s:%s" % (engine, op), sizes, [dtype] if dtype else [], "completed", i + 1)
                for i, (op, sizes, dtype) in enumerate(CLEAN)]
        if seen != want:
            fail("rank %d recorded\n  %s\nexpected\n  %s" % (rank, seen, want))
        gather = dump["entries"][2]
        if gather["output_sizes"] != [[4]] * world:
            fail("rank %d: all_gather's output sizes %r" % (rank, gather["output_sizes"]))
    print("check_flight_record: %d dumps hold the %d collectives, completed, in torch's layout" % (world, len(CLEAN)))
    text = analyzer(folder)
    if text is None:
        print("check_flight_record: this torch has no torchfrtrace; the dumps were read with pickle only")
    elif HEADLINE.search(text):
        fail("the analyzer found problems in a clean run:\n" + text)
    else:
        print("check_flight_record: torchfrtrace read every dump and found nothing wrong")


def check_missing(folder, world, engine, missing, seq, op="all_reduce"):
    dumps = load(folder, world)
    if seq == "next":
        seq = dumps[missing]["entries"][-1]["collective_seq_id"] + 1
    seq = int(seq)
    for rank, dump in enumerate(dumps):
        last = dump["entries"][-1]
        if rank == missing:
            if last["collective_seq_id"] != seq - 1 or last["state"] != "completed":
                fail("the stopped rank's last entry is %r" % last)
        elif (last["collective_seq_id"], last["state"], last["profiling_name"]) != (seq, "started",
                                                                                  engine + ":" + op):
            fail("rank %d's last entry is %r, expected %s #%d started" % (rank, last, op, seq))
    print("check_flight_record: ranks wait in #%d, rank %d stopped after #%d" % (seq, missing, seq - 1))
    text = analyzer(folder)
    if text is None:
        print("check_flight_record: this torch has no torchfrtrace; the dumps were read with pickle only")
        return
    if ("Not all ranks joining collective, sequence number: %d" % seq) not in text or \
            not re.search(r"^missing ranks: \{%d\}$" % missing, text, re.M):
        fail("the analyzer did not name rank %d missing from #%d:\n%s" % (missing, seq, text))
    print("check_flight_record: torchfrtrace names rank %d missing from collective #%d" % (missing, seq))


if __name__ == "__main__":
    mode, folder, world, engine = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "clean":
        check_clean(folder, world, engine)
    else:
        check_missing(folder, world, engine, int(sys.argv[5]), sys.argv[6], *sys.argv[7:8])
