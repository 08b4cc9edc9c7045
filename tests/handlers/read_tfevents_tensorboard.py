"""TensorBoard's own reader on a kindling event file (tests/handlers/tensorboard_test.cpp).

Usage: read_tfevents_tensorboard.py EVENT_FILE

Loads the file with tensorboard's EventAccumulator (what TensorBoard's scalar dashboard reads)
and prints, for every scalar it kept, in file order per tag:

    SCALAR <step> <value> <wall_time> <tag>

and for every histogram (TensorBoard's histogram plugin reads these)

    HISTO <step> <min> <max> <num> <sum> <sum_squares> <limits> <counts> <tag>

with repr() numbers, then `FILE_VERSION <version>`. Exit status 0 on success, 1 when the file
cannot be loaded, 2 when tensorboard cannot be imported (run with a Python that has it:
scripts/python-peer.sh prints one for each LibTorch build).
"""
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as error:  # pragma: no cover - environment problem, not a kindling bug
    sys.stderr.write("read_tfevents_tensorboard.py needs tensorboard (scripts/python-peer.sh): %s\n" % error)
    sys.exit(2)

accumulator = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "histograms": 0})  # 0: keep every scalar
try:
    accumulator.Reload()
except Exception as error:  # noqa: BLE001 - any failure to load is the answer
    sys.stderr.write("TensorBoard could not load %s: %r\n" % (sys.argv[1], error))
    sys.exit(1)
for tag in accumulator.Tags()["scalars"]:
    for event in accumulator.Scalars(tag):
        print("SCALAR %d %r %r %s" % (event.step, event.value, event.wall_time, tag))
for tag in accumulator.Tags()["histograms"]:
    for event in accumulator.Histograms(tag):
        h = event.histogram_value
        print("HISTO %d %r %r %r %r %r %s %s %s" % (
            event.step, h.min, h.max, h.num, h.sum, h.sum_squares, ",".join(repr(x) for x in h.bucket_limit),
            ",".join(repr(x) for x in h.bucket), tag))
print("FILE_VERSION %s" % accumulator.file_version)
