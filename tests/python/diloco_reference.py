"""DiLoCo and streaming DiLoCo written from their papers, the reference of tests/nn/diloco_test.cpp.

Usage: diloco_reference.py WORKERS OUT_FILE

One process plays every worker (Douillard et al. 2023, Algorithm 1; streaming DiLoCo, 2025):
each worker takes inner steps on its own batches; every H steps (per piece of the model, at
staggered steps when the model is cut in pieces) the workers average their pseudo-gradient
global - local, the outer optimizer steps the global weights with it, and each worker's piece
becomes alpha * local + (1 - alpha) * global, `delay` inner steps after the exchange began. The
model, its weights and each worker's batches are powersgd_reference.py's closed formulas (worker
w's batches are rank w's). Writes each worker's final weights as lines "config worker name v...".
"""
import os
import sys

import torch

from powersgd_reference import batch, model

# The C++ test uses the same names and values (diloco_test.cpp: reference_options).
CONFIGS = {
    "diloco": dict(steps=9, every=3, pieces=1, delay=0, alpha=0.0, warmup=0, inner="adamw",
                   outer=dict(lr=0.7, momentum=0.9, nesterov=True), wire=torch.float32, feedback=False),
    "streaming": dict(steps=13, every=4, pieces=2, delay=1, alpha=0.5, warmup=0, inner="adamw",
                      outer=dict(lr=0.7, momentum=0.9, nesterov=True), wire=torch.float32, feedback=False),
    "warmup_local_sgd": dict(steps=8, every=2, pieces=1, delay=0, alpha=0.0, warmup=3, inner="sgd",
                             outer=dict(lr=1.0), wire=torch.float32, feedback=False),
    "half_feedback": dict(steps=9, every=3, pieces=3, delay=0, alpha=0.0, warmup=0, inner="sgd",
                          outer=dict(lr=0.7, momentum=0.9, nesterov=True), wire=torch.float16, feedback=True),
}


def inner_optimizer(kind, params):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def pieces_of(sizes, count):
    """Consecutive runs of about equal numbers of elements (the documented rule): each run ends at
    the parameter boundary nearest to its share, (k + 1) / count of the elements."""
    total, seen, i, out = sum(sizes), 0, 0, []
    for k in range(count):
        out.append([])
        share = (k + 1) * total / count
        while True:
            seen += sizes[i]
            out[k].append(i)
            i += 1
            if len(sizes) - i <= count - k - 1:
                break
            if k < count - 1 and seen + sizes[i] > share and seen + sizes[i] - share >= share - seen:
                break
    return out


def gradients(net, worker, step):
    net.zero_grad()
    x, y = batch(worker, step)
    torch.nn.functional.mse_loss(net(x), y).backward()
    return [p.grad.clone() for p in net.parameters()]


class Run:
    def __init__(self, workers, c):
        self.c, self.workers = c, workers
        self.nets = [model() for _ in range(workers)]
        self.params = [list(n.parameters()) for n in self.nets]
        self.inner = [inner_optimizer(c["inner"], n.parameters()) for n in self.nets]
        sizes = [p.numel() for p in self.params[0]]
        self.pieces = pieces_of(sizes, c["pieces"])
        self.offset = [((k + 1) * c["every"] // c["pieces"]) % c["every"] for k in range(c["pieces"])]
        self.globals = [[self.params[0][i].detach().clone().requires_grad_() for i in piece] for piece in self.pieces]
        self.outer = [torch.optim.SGD(g, **c["outer"]) for g in self.globals]
        self.residual = [[None] * c["pieces"] for _ in range(workers)]
        self.pending = {}  # piece -> (due step, averaged pseudo-gradient per tensor)

    def inner_step(self, step):
        grads = [gradients(self.nets[w], w, step - 1) for w in range(self.workers)]
        if step <= self.c["warmup"]:  # synchronous: every worker steps with the average
            mean = [sum(g[i] for g in grads) / self.workers for i in range(len(grads[0]))]
            grads = [mean] * self.workers
        for w in range(self.workers):
            for p, g in zip(self.params[w], grads[w]):
                p.grad = g.clone()
            self.inner[w].step()

    def start(self, k, step):
        wires = []
        for w in range(self.workers):
            delta = torch.cat([(self.globals[k][j] - self.params[w][i]).detach().reshape(-1)
                               for j, i in enumerate(self.pieces[k])])
            if self.c["feedback"] and self.residual[w][k] is not None:
                delta = delta + self.residual[w][k]
            wire = (delta / self.workers).to(self.c["wire"])
            if self.c["feedback"]:
                self.residual[w][k] = delta - wire.float() * self.workers
            wires.append(wire.float())
        total = wires[0]
        for wire in wires[1:]:
            total = total + wire
        self.pending[k] = (step + self.c["delay"], total.to(self.c["wire"]).float())

    def finish(self, k):
        _, average = self.pending.pop(k)
        at = 0
        for g in self.globals[k]:
            g.grad = average[at:at + g.numel()].view(g.shape).clone()
            at += g.numel()
        self.outer[k].step()
        a = self.c["alpha"]
        with torch.no_grad():
            for w in range(self.workers):
                for j, i in enumerate(self.pieces[k]):
                    self.params[w][i].mul_(a).add_(self.globals[k][j], alpha=1 - a)

    def run(self):
        for step in range(1, self.c["steps"] + 1):
            self.inner_step(step)
            if step <= self.c["warmup"]:
                if step == self.c["warmup"]:
                    with torch.no_grad():
                        for k, piece in enumerate(self.pieces):
                            for j, i in enumerate(piece):
                                self.globals[k][j].copy_(self.params[0][i])
                continue
            for k in [k for k, (due, _) in self.pending.items() if due == step]:
                self.finish(k)
            for k in range(len(self.pieces)):
                if (step - self.c["warmup"]) % self.c["every"] == self.offset[k]:
                    self.start(k, step)
                    if self.c["delay"] == 0:
                        self.finish(k)
        return self.nets


def main(workers, out):
    lines = []
    for name, c in CONFIGS.items():
        for w, net in enumerate(Run(workers, c).run()):
            for pname, p in net.named_parameters():
                lines.append("%s %d %s %s" % (name, w, pname, " ".join("%.9e" % v for v in p.reshape(-1).tolist())))
    with open(out + ".part", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(out + ".part", out)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
