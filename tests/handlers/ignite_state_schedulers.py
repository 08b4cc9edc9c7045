"""ignite 0.5.5's state schedulers simulated, for state_param_scheduler_test.cpp.

Usage: ignite_state_schedulers.py NUM_EVENTS
Prints, for each schedule below, "<name> <values after each of NUM_EVENTS events, comma-separated,
17 significant digits>" from the class's simulate_values, and "IGNITE <version>". Exits 77 where
ignite 0.5.5 is not importable under a torch 1.x (Debian's python3); 1 under torch 2.x.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "metrics"))
from ignite_pinned import require  # noqa: E402

VERSION = require("ignite.handlers")
from ignite.handlers import (ExpStateScheduler, LambdaStateScheduler, MultiStepStateScheduler,  # noqa: E402
                             PiecewiseLinearStateScheduler, StepStateScheduler)

SCHEDULES = {
    "exp": (ExpStateScheduler, dict(initial_value=2.0, gamma=0.9)),
    "step": (StepStateScheduler, dict(initial_value=1.0, gamma=0.5, step_size=3)),
    "multistep": (MultiStepStateScheduler, dict(initial_value=1.0, gamma=0.1, milestones=[2, 5, 9])),
    "piecewise": (PiecewiseLinearStateScheduler, dict(milestones_values=[(2, 1.0), (6, 3.0), (6, 0.5), (10, 0.0)])),
    "lambda": (LambdaStateScheduler, dict(lambda_obj=lambda e: 0.5 + e * e / 10)),
}


def main():
    events = int(sys.argv[1])
    print(f"IGNITE {VERSION}")
    for name, (cls, kwargs) in SCHEDULES.items():
        values = cls.simulate_values(events, param_name="x", **kwargs)
        print(name, ",".join(f"{float(v):.17g}" for _, v in values))


if __name__ == "__main__":
    main()
