#!/usr/bin/env python3
"""Recovery numbers of one torchft_kill_run.sh run, from its JSON lines.

Reads OUTDIR/r0.jsonl, OUTDIR/r1.jsonl (bench/fault/torchft_peer.py's lines; the killed replica's
two processes append to the same file) and OUTDIR/schedule.json (the wall times of the kill and
the restart) and prints one JSON object:
  kill_to_survivor_commit_s   kill -> the survivor's first committed step that started after
                              the kill's effect, i.e. its first commit in a quorum without the
                              killed replica (participants == 1)
  kill_to_survivor_any_commit_s  kill -> the survivor's first committed step at all (may be a
                              step already past its all-reduce when the kill landed)
  survivor_stall_after_kill_s  the longest gap between two survivor step lines after the kill
                              and before the restart
  restart_to_first_commit_s   restart (the new process launched) -> its first committed step
  restart_to_imported_s, restart_to_data_loaded_s, restart_to_manager_up_s  where the new
                              process's start-up went: Python imports, data, Manager (start line)
  restart_to_heal_s           restart -> the new process loading a peer's checkpoint
  restart_to_first_contribution_s  restart -> its first committed step with its own samples in it
  survivor_stall_at_rejoin_s  the longest gap between two survivor step lines after the restart
                              (up to the restarted replica's last step)
  uncommitted_steps           step lines with committed false, per replica, in the whole run
  step_s_two_replicas, step_s_survivor_alone  median time between consecutive survivor step
                              lines while both trained, while it trained alone, and after the rejoin
  load_avg                    the machine's 1-minute load average when both trained and at the end
Usage: torchft_recovery.py OUTDIR
"""

import json
import statistics
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def steps(records):
    return [r for r in records if "event" not in r]


def max_gap(records, lo, hi):
    ts = [r["t"] for r in records if lo <= r["t"] <= hi]
    return max((b - a for a, b in zip(ts, ts[1:])), default=None)


def median_step(records, lo, hi):
    ts = [r["t"] for r in records if lo <= r["t"] <= hi]
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    return statistics.median(gaps) if gaps else None


def first(records, pred):
    return next((r for r in records if pred(r)), None)


def main(outdir):
    sched = json.load(open(f"{outdir}/schedule.json"))
    kill, restart = sched["kill"], sched["restart"]
    all0, all1 = lines(f"{outdir}/r0.jsonl"), lines(f"{outdir}/r1.jsonl")
    s0, s1 = steps(all0), steps(all1)
    after = lambda r, t: r["t"] > t  # noqa: E731

    solo = first(s0, lambda r: after(r, kill) and r["committed"] and r["participants"] == 1)
    anyc = first(s0, lambda r: after(r, kill) and r["committed"])
    r1c = first(s1, lambda r: after(r, restart) and r["committed"])
    r1own = first(s1, lambda r: after(r, restart) and r["committed"] and r["samples"] > 0)
    heal = first(all1, lambda r: r.get("event") == "heal" and after(r, restart))
    start1 = first(all1, lambda r: r.get("event") == "start" and after(r, restart))
    # Up to the restarted replica's last step: its leaving at the end stalls the survivor again.
    end1 = max((r["t"] for r in s1 if after(r, restart)), default=restart)
    d = lambda r, t: None if r is None else round(r["t"] - t, 3)  # noqa: E731
    gap = lambda v: None if v is None else round(v, 3)  # noqa: E731
    result = {
        "kill_to_survivor_commit_s": d(solo, kill),
        "kill_to_survivor_any_commit_s": d(anyc, kill),
        "survivor_stall_after_kill_s": gap(max_gap(s0, kill, restart)),
        "survivor_commits_between_kill_and_restart": sum(1 for r in s0 if kill < r["t"] <= restart and r["committed"]),
        "restart_to_first_commit_s": d(r1c, restart),
        "restart_to_imported_s": None if start1 is None or "t_imported" not in start1 else round(start1["t_imported"] - restart, 3),
        "restart_to_data_loaded_s": None if start1 is None or "t_data_loaded" not in start1 else round(start1["t_data_loaded"] - restart, 3),
        "restart_to_manager_up_s": d(start1, restart),
        "restart_to_heal_s": d(heal, restart),
        "heal_step": heal["step"] if heal else None,
        "restart_to_first_contribution_s": d(r1own, restart),
        "survivor_stall_at_rejoin_s": gap(max_gap(s0, restart, end1)),
        "uncommitted_steps": {"r0": sum(1 for r in s0 if not r["committed"]),
                              "r1": sum(1 for r in s1 if not r["committed"])},
        "uncommitted_steps_after_kill": {"r0": sum(1 for r in s0 if after(r, kill) and not r["committed"]),
                                         "r1": sum(1 for r in s1 if after(r, restart) and not r["committed"])},
        "step_s_two_replicas": gap(median_step(s0, sched["both_training"], kill)),
        "step_s_survivor_alone": gap(median_step(s0, solo["t"], restart)) if solo else None,
        "step_s_after_rejoin": gap(median_step(s0, r1own["t"], end1)) if r1own else None,
        "load_avg": [sched.get("load_start"), sched.get("load_end")],
        "survivor_final_step": s0[-1]["step"] if s0 else None,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
