#!/usr/bin/env bash
# DDP with gradients as bucket views (the default) against gradients copied into the buckets and
# back (bench_ddp --copy-gradients), in one run (scripts/bench-ddp-ab.sh says how). Usage:
# scripts/bench-bucket-views.sh [repeats] (default 3). KINDLING_LIBTORCH=pip uses the 2.15 build,
# whose Optimizer::zero_grad() resets gradients to none (so the copy into the bucket stays there).
exec "$(dirname "$0")/bench-ddp-ab.sh" views copies --copy-gradients "${1:-3}"
