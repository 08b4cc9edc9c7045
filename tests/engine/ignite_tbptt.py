"""ignite 0.5.5's create_supervised_tbptt_trainer on a fixed problem, for tbptt_test.cpp.

Usage: ignite_tbptt.py
The model (a GRU of 3 inputs and 4 hidden units, then a linear layer to 2 outputs, float64), its
initial parameters, the two batches and the optimizer are defined by formulas that
tbptt_test.cpp repeats. Trains 2 epochs with tbtt_step 4 over sequences of 10 steps and prints
"CHUNKS <each chunk's loss>", "ITERATIONS <each iteration's output>" and "PARAM <name> <values>"
for each parameter at the end, comma-separated with 17 significant digits, and "IGNITE <version>".
Exits 77 where ignite 0.5.5 is not importable under a torch 1.x (Debian's python3); 1 under torch 2.x.
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "metrics"))
from ignite_pinned import require  # noqa: E402

VERSION = require("ignite.contrib.engines.tbptt")
import torch  # noqa: E402
from ignite.contrib.engines.tbptt import Tbptt_Events, create_supervised_tbptt_trainer  # noqa: E402
from ignite.engine import Events  # noqa: E402


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(3, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x, hidden=None):
        out, hidden = self.gru(x, hidden)
        return self.head(out), hidden


def batch(n):
    """Sequences of 10 steps, 2 samples, as tbptt_test.cpp's batch(n)."""
    x = torch.empty(10, 2, 3, dtype=torch.float64)
    y = torch.empty(10, 2, 2, dtype=torch.float64)
    for t in range(10):
        for b in range(2):
            for i in range(3):
                x[t, b, i] = math.cos(0.1 * t + 0.7 * b + 0.3 * i + n)
            for j in range(2):
                y[t, b, j] = math.sin(0.2 * t + b - j + 0.5 * n)
    return x, y


def main():
    model = Model().double()
    with torch.no_grad():
        for index, (name, p) in enumerate(model.named_parameters()):
            k = torch.arange(p.numel(), dtype=torch.float64)
            p.copy_((0.5 * torch.sin(0.37 * k + index)).reshape(p.shape))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    trainer = create_supervised_tbptt_trainer(model, optimizer, torch.nn.functional.mse_loss, tbtt_step=4)
    chunks, iterations = [], []
    trainer.add_event_handler(Tbptt_Events.TIME_ITERATION_COMPLETED, lambda e: chunks.append(e.state.output))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: iterations.append(e.state.output))
    trainer.run([batch(0), batch(1)], max_epochs=2)
    print(f"IGNITE {VERSION}")
    print("CHUNKS", ",".join(f"{v:.17g}" for v in chunks))
    print("ITERATIONS", ",".join(f"{v:.17g}" for v in iterations))
    for name, p in model.named_parameters():
        print("PARAM", name, ",".join(f"{v:.17g}" for v in p.detach().reshape(-1).tolist()))


if __name__ == "__main__":
    main()
