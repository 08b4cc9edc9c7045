"""Reference values for kindling's ranking metrics (tests/metrics/ranking_test.cpp).

Computed with torch ops by algorithms other than the library's threshold sweep, so that
both agreeing is evidence: ROC AUC as the Mann-Whitney statistic (over every positive and
negative pair, 1 when the positive scores higher, 1/2 on a tie); average precision as the
mean over positive samples of the precision at their own score (positives scoring >= s over
samples scoring >= s), which is scikit-learn's step AP with ties; the curves by evaluating
every distinct threshold directly. scikit-learn is not needed.

Usage: ranking_reference.py DATA
DATA holds cases of three lines:
    case <name> <binary|multiclass|multilabel> <N> <C>   (C = 0 for (N,) scores)
    pred <N*C or N scores, row-major>
    target <N targets, or N*C for multilabel>
Prints "<name> <quantity> <v1,v2,...>" lines with 17 significant digits.
"""
import sys

import torch


def mann_whitney(scores, positive):
    pos, neg = scores[positive], scores[~positive]
    if pos.numel() == 0 or neg.numel() == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).double().sum()
    ties = (pos[:, None] == neg[None, :]).double().sum()
    return ((greater + 0.5 * ties) / (pos.numel() * neg.numel())).item()


def precision_at_own_score(scores, positive):
    pos = scores[positive]
    if pos.numel() == 0:
        return 0.0
    at_or_above = scores[None, :] >= pos[:, None]  # (P, N)
    hits = (at_or_above & positive[None, :]).double().sum(1)
    return (hits / at_or_above.double().sum(1)).mean().item()


def sweep(scores, positive, descending):
    """tp and fp counts of the samples scoring >= t for each distinct t."""
    thresholds = torch.unique(scores).double()
    if descending:
        thresholds = thresholds.flip(0)
    selected = scores[None, :] >= thresholds[:, None]
    tp = (selected & positive[None, :]).double().sum(1)
    fp = (selected & ~positive[None, :]).double().sum(1)
    return thresholds, tp, fp


def roc_curve(scores, positive):
    thresholds, tp, fp = sweep(scores, positive, descending=True)
    zero = torch.zeros(1, dtype=torch.float64)
    fpr = torch.cat([zero, fp]) / (~positive).sum().double()
    tpr = torch.cat([zero, tp]) / positive.sum().double()
    return fpr, tpr, torch.cat([torch.tensor([float("inf")], dtype=torch.float64), thresholds])


def pr_curve(scores, positive):
    thresholds, tp, fp = sweep(scores, positive, descending=False)
    precision = torch.cat([tp / (tp + fp), torch.ones(1, dtype=torch.float64)])
    recall = torch.cat([tp / positive.sum().double(), torch.zeros(1, dtype=torch.float64)])
    return precision, recall, thresholds


def problems(task, pred, target, classes):
    """(scores, positive) per class or label, and the micro (raveled) problem."""
    if task == "binary":
        return [(pred, target != 0)], (pred, target != 0)
    if task == "multiclass":
        positive = target.long()[:, None] == torch.arange(classes)[None, :]
    else:
        positive = target != 0
    columns = [(pred[:, c], positive[:, c]) for c in range(classes)]
    return columns, (pred.reshape(-1), positive.reshape(-1))


def averages(name, quantity, fn, columns, micro, out):
    values = torch.tensor([fn(s, p) for s, p in columns], dtype=torch.float64)
    weights = torch.tensor([p.sum().item() for _, p in columns], dtype=torch.float64)
    out.append((name, quantity + "_none", values))
    out.append((name, quantity + "_macro", values.mean()))
    weighted = (values * weights).sum() / weights.sum() if weights.sum() > 0 else torch.tensor(0.0)
    out.append((name, quantity + "_weighted", weighted))
    out.append((name, quantity + "_micro", torch.tensor(fn(*micro), dtype=torch.float64)))


def main(path):
    with open(path) as f:
        lines = [line.split() for line in f if line.strip()]
    out = []
    for head, pred_line, target_line in zip(lines[0::3], lines[1::3], lines[2::3]):
        assert head[0] == "case" and pred_line[0] == "pred" and target_line[0] == "target"
        name, task, n, classes = head[1], head[2], int(head[3]), int(head[4])
        pred = torch.tensor([float(v) for v in pred_line[1:]], dtype=torch.float64)
        target = torch.tensor([float(v) for v in target_line[1:]], dtype=torch.float64)
        if classes > 0:
            pred = pred.reshape(n, classes)
        if task == "multilabel":
            target = target.reshape(n, classes)
        columns, micro = problems(task, pred, target, classes)
        averages(name, "auc", mann_whitney, columns, micro, out)
        averages(name, "ap", precision_at_own_score, columns, micro, out)
        if task == "binary":
            for quantity, value in zip(("roc_fpr", "roc_tpr", "roc_thresholds"), roc_curve(*columns[0])):
                out.append((name, quantity, value))
            for quantity, value in zip(("pr_precision", "pr_recall", "pr_thresholds"), pr_curve(*columns[0])):
                out.append((name, quantity, value))
    for name, quantity, value in out:
        text = ",".join("%.17g" % v for v in value.reshape(-1).tolist())
        print(name, quantity, text)


if __name__ == "__main__":
    main(sys.argv[1])
