"""ignite 0.5.5's FBResearchLogger on a scripted run, for fbresearch_logger_test.cpp.

Usage: ignite_fbresearch.py
An engine of 2 epochs of 5 iterations whose output is {"total_loss": 1 / iteration}, with
state.alpha = iteration / 4 set at each iteration, logged every 2 iterations with show_output,
state_attributes ["alpha", "beta"] and an SGD of two parameter groups (lr 0.001 and 0.02); then a
one-epoch run of a one-group optimizer without show_output. Prints each line the logger wrote
(format "%(message)s") and "IGNITE <version>". Exits 77 where ignite 0.5.5 is not importable
under a torch 1.x (Debian's python3); 1 under torch 2.x.
"""
import logging
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "metrics"))
from ignite_pinned import require  # noqa: E402

VERSION = require("ignite.handlers.fbresearch_logger")
import torch  # noqa: E402
from ignite.engine import Engine, Events  # noqa: E402
from ignite.handlers.fbresearch_logger import FBResearchLogger  # noqa: E402


class Lines(logging.Handler):
    def emit(self, record):
        print(record.getMessage())


def run(optimizer, show_output, epochs, attributes):
    engine = Engine(lambda e, b: {"total_loss": 1.0 / e.state.iteration})

    @engine.on(Events.ITERATION_STARTED)
    def set_alpha(e):
        e.state.alpha = e.state.iteration / 4

    logger = logging.getLogger(f"fb{epochs}")
    logger.setLevel(logging.INFO)
    logger.handlers = [Lines()]
    logger.propagate = False
    FBResearchLogger(logger, show_output=show_output).attach(engine, "Train", every=2,
                                                             state_attributes=attributes, optimizer=optimizer)
    engine.run(list(range(5)), max_epochs=epochs)


def main():
    print(f"IGNITE {VERSION}")
    w = [torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)]
    two = torch.optim.SGD([{"params": [w[0]], "lr": 0.001}, {"params": [w[1]], "lr": 0.02}], lr=0.001)
    run(two, True, 2, ["alpha", "beta"])
    run(torch.optim.SGD([w[0]], lr=0.1), False, 1, None)


if __name__ == "__main__":
    main()
