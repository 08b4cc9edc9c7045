#!/usr/bin/env python3
"""Independent checker for kindling's HTML training report (src/handlers/loggers/html/html_page.h).

Usage: check_report.py REPORT.html SCALARS.jsonl [--screenshot OUT.png] [--min-charts N] [--timeline-ranks N]

Shares no code with kindling (python3 standard library only). It checks that

  1. REPORT.html embeds its data as <script type="application/json" id="kindling-report-data">
     holding {"title", "config": [[key, value], ...], "records": [{"tag", "name", "step",
     "value"}, ...]} (non-finite values as null with "non_finite": "nan" | "inf" | "-inf");
  2. those records and the JSON lines of SCALARS.jsonl (JsonLogger's format:
     {"tag", "step", "name", "value", "wall_time"}, non-finite values written the same way)
     are the same multiset of (tag, name, step, value), values compared as doubles, exactly;
  3. the records have at least --min-charts distinct names (default 2), and the page has one
     chart (<svg class="plot">) per name, whose data-series-colors come from the palette the
     page declares in <meta name="kindling-palette">;
  4. headless Chromium renders it (to OUT.png when --screenshot is given, else to a temporary
     file) into a screenshot that is not blank: at least 5% of its pixels differ from the
     colour around the edges (the background), at least 0.5% are neither of the two commonest
     colours (page and cards: what is left is text and lines), and every colour a chart draws
     a series in is seen;
  5. with --timeline-ranks N, the page pictures one step of ranks 0..N-1 (<svg class="timeline">)
     whose legend names forward, backward and communication in colours it draws, and the
     screenshot shows those three colours.

The PNG is decoded here (zlib, the five row filters, colour types 2 and 6 at 8 bits). Exit
status 0 with a one-line summary when all holds, 1 with the differences otherwise, 2 for a
usage error, 77 when Chromium is not installed (scripts/install-deps.sh installs it).
"""
import argparse
import collections
import html.parser
import itertools
import json
import math
import operator
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

WINDOW = (1280, 2000)
MIN_INK = 0.05          # share of pixels that must differ from the background
MIN_DETAIL = 0.005      # share of pixels that must be neither of the two commonest colours
COLOUR_TOLERANCE = 24   # largest per-channel difference for a pixel to count as a series colour
MIN_COLOUR_PIXELS = 20  # pixels of each series colour the screenshot must have


class Failure(Exception):
    """A check that did not hold; its message says which and why."""


class _ReportParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.data_scripts = []   # texts of the kindling-report-data scripts
        self.palette = None
        self.chart_colours = []  # per <svg class="plot">, its data-series-colors
        self.timelines = []      # per <svg class="timeline">: (data-ranks, data-colors)
        self.timeline_legend = {}  # in the timeline card: label -> colour
        self._in_data = False
        self._legend_colour = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("id") == "kindling-report-data":
            if attrs.get("type") != "application/json":
                raise Failure("the kindling-report-data script's type is %r, not application/json" % attrs.get("type"))
            self._in_data = True
            self.data_scripts.append("")
        elif tag == "meta" and attrs.get("name") == "kindling-palette":
            self.palette = [c.strip().lower() for c in (attrs.get("content") or "").split(",") if c.strip()]
        elif tag == "svg" and "timeline" in (attrs.get("class") or "").split():
            self.timelines.append(([r for r in (attrs.get("data-ranks") or "").split(",") if r],
                                   [c.strip().lower() for c in (attrs.get("data-colors") or "").split(",") if c.strip()]))
        elif tag == "span" and "block" in (attrs.get("class") or "").split():
            self._legend_colour = (attrs.get("style") or "").replace("background:", "").strip().lower()
        elif tag == "svg" and "plot" in (attrs.get("class") or "").split():
            colours = attrs.get("data-series-colors")
            if colours is None:
                raise Failure("chart %d has no data-series-colors attribute" % (len(self.chart_colours) + 1))
            self.chart_colours.append([c.strip().lower() for c in colours.split(",") if c.strip()])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_data = False

    def handle_data(self, data):
        if self._legend_colour is not None and data.strip():
            self.timeline_legend[data.strip()] = self._legend_colour
            self._legend_colour = None
        if self._in_data:
            self.data_scripts[-1] += data


def record_key(record, where):
    """(tag, name, step, value) of one record; the value a float, or ("non_finite", kind)."""
    if not isinstance(record, dict):
        raise Failure("%s: not a JSON object: %r" % (where, record))
    tag, name, step, value = record.get("tag"), record.get("name"), record.get("step"), record.get("value", ...)
    if not isinstance(tag, str) or not isinstance(name, str):
        raise Failure("%s: tag and name must be strings: %r" % (where, record))
    if not isinstance(step, int) or isinstance(step, bool):
        raise Failure("%s: step must be an integer: %r" % (where, record))
    if value is None:
        kind = record.get("non_finite")
        if kind not in ("nan", "inf", "-inf"):
            raise Failure('%s: a null value needs "non_finite": "nan" | "inf" | "-inf": %r' % (where, record))
        return (tag, name, step, ("non_finite", kind))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Failure("%s: value must be a number or null: %r" % (where, record))
    value = float(value)
    if math.isnan(value):
        return (tag, name, step, ("non_finite", "nan"))
    if math.isinf(value):
        return (tag, name, step, ("non_finite", "inf" if value > 0 else "-inf"))
    return (tag, name, step, value)


def show(key):
    tag, name, step, value = key
    return "tag=%r name=%r step=%d value=%s" % (tag, name, step, value[1] if isinstance(value, tuple) else repr(value))


def read_report(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="strict")
    parser = _ReportParser()
    parser.feed(text)
    parser.close()
    if len(parser.data_scripts) != 1:
        raise Failure("%s has %d kindling-report-data scripts, not 1" % (path, len(parser.data_scripts)))
    try:
        data = json.loads(parser.data_scripts[0])
    except ValueError as error:
        raise Failure("%s: the kindling-report-data JSON does not parse: %s" % (path, error))
    if not isinstance(data, dict) or not isinstance(data.get("title"), str):
        raise Failure("%s: the report data must be an object with a string title" % path)
    config = data.get("config")
    if not isinstance(config, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in config):
        raise Failure("%s: config must be a list of [key, value] string pairs" % path)
    records = data.get("records")
    if not isinstance(records, list):
        raise Failure("%s: records must be a list" % path)
    keys = [record_key(r, "%s record %d" % (path, i + 1)) for i, r in enumerate(records)]
    return keys, parser


def read_jsonl(path):
    keys = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            line = line.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise Failure("%s:%d: not JSON: %s" % (path, number, error))
            keys.append(record_key(record, "%s:%d" % (path, number)))
    return keys


def compare(report_keys, jsonl_keys, report_path, jsonl_path):
    only_report = collections.Counter(report_keys) - collections.Counter(jsonl_keys)
    only_jsonl = collections.Counter(jsonl_keys) - collections.Counter(report_keys)
    if not only_report and not only_jsonl:
        return
    lines = ["the report's records and %s differ:" % jsonl_path]
    for missing, keys, where in ((only_jsonl, jsonl_keys, "in %s but not in %s" % (jsonl_path, report_path)),
                                 (only_report, report_keys, "in %s but not in %s" % (report_path, jsonl_path))):
        if missing:
            lines.append("  %d %s, the first:" % (sum(missing.values()), where))
            shown = [k for k in keys if k in missing][:10]
            lines.extend("    " + show(k) for k in shown)
    raise Failure("\n".join(lines))


def find_chromium():
    for candidate in (os.environ.get("CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def screenshot(chromium, report_path, png_path):
    with tempfile.TemporaryDirectory(prefix="check_report_profile_") as profile:
        command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                   "--hide-scrollbars", "--force-device-scale-factor=1", "--user-data-dir=" + profile,
                   "--window-size=%d,%d" % WINDOW, "--screenshot=" + png_path,
                   "file://" + os.path.abspath(report_path)]
        if os.path.exists(png_path):
            os.remove(png_path)
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
        except subprocess.TimeoutExpired:
            raise Failure("chromium did not finish the screenshot within 180 s: " + " ".join(command))
        if not os.path.isfile(png_path) or os.path.getsize(png_path) == 0:
            output = done.stdout.decode("utf-8", errors="replace")[-3000:]
            raise Failure("chromium (exit %d) wrote no screenshot; its output:\n%s" % (done.returncode, output))


def decode_png(path):
    """(width, height, rows of RGB(A) bytes, bytes per pixel) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise Failure("%s is not a PNG" % path)
    pos, header, idat = 8, None, []
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length or zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]:
            raise Failure("%s: chunk %r is truncated or fails its CRC" % (path, kind))
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None or not idat:
        raise Failure("%s has no IHDR or no IDAT" % path)
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace != 0:
        raise Failure("%s: bit depth %d, colour type %d, interlace %d (need 8, 2 or 6, 0)" %
                      (path, depth, colour_type, interlace))
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        raise Failure("%s: %d bytes of image data, expected %d" % (path, len(raw), height * (stride + 1)))
    rows, prior = [], bytes(stride)
    mask = (255).__and__
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:    # Sub: a running sum per channel
            for c in range(bpp):
                line[c::bpp] = bytes(map(mask, itertools.accumulate(line[c::bpp])))
        elif kind == 2:  # Up
            line = bytearray(map(mask, map(operator.add, line, prior)))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prior[i]) >> 1)) & 255
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prior[i], prior[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif kind != 0:
            raise Failure("%s: row %d has filter type %d" % (path, y, kind))
        rows.append(bytes(line))
        prior = line
    return width, height, rows, bpp


def check_screenshot(png_path, colours):
    width, height, rows, bpp = decode_png(png_path)
    if (width, height) != WINDOW:
        raise Failure("the screenshot is %dx%d, not %dx%d" % ((width, height) + WINDOW))
    counts = collections.Counter()
    for row in rows:
        counts.update(zip(row[0::bpp], row[1::bpp], row[2::bpp]))
    total = width * height
    edges = collections.Counter()
    for row in (rows[0], rows[-1]):
        edges.update(zip(row[0::bpp], row[1::bpp], row[2::bpp]))
    for row in rows:
        edges.update((row[i], row[i + 1], row[i + 2]) for i in (0, (width - 1) * bpp))
    background = edges.most_common(1)[0][0]  # the page's, around the content
    ink = 1 - counts[background] / total
    if ink < MIN_INK:
        raise Failure("the screenshot %s is nearly blank: %.2f%% of its pixels differ from the background #%02x%02x%02x"
                      " (need %.0f%%)" % ((png_path, 100 * ink) + background + (100 * MIN_INK,)))
    detail = 1 - sum(n for _, n in counts.most_common(2)) / total  # text and lines, not page and cards
    if detail < MIN_DETAIL:
        raise Failure("the screenshot %s shows next to nothing: %.2f%% of its pixels are neither of its two commonest "
                      "colours (need %.1f%%)" % (png_path, 100 * detail, 100 * MIN_DETAIL))
    missing = []
    for colour in colours:
        target = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        seen = sum(n for rgb, n in counts.items()
                   if max(abs(rgb[0] - target[0]), abs(rgb[1] - target[1]), abs(rgb[2] - target[2])) <= COLOUR_TOLERANCE)
        if seen < MIN_COLOUR_PIXELS:
            missing.append("%s (%d pixels)" % (colour, seen))
    if missing:
        raise Failure("the screenshot %s lacks series colours: %s" % (png_path, ", ".join(missing)))
    return ink, background


def check_timeline(page, ranks):
    """The colours of the picture of one step of `ranks` ranks, checked: one <svg class="timeline">
    of ranks 0..ranks-1 whose legend names forward, backward and communication (parts of every
    DDP step) in colours it draws; returns those three colours. No picture is expected for ranks 0."""
    if ranks == 0:
        if page.timelines:
            raise Failure("the page pictures a timeline that was not expected")
        return []
    if len(page.timelines) != 1:
        raise Failure("the page has %d timeline pictures, expected 1" % len(page.timelines))
    drawn_ranks, drawn = page.timelines[0]
    if drawn_ranks != [str(r) for r in range(ranks)]:
        raise Failure("the timeline pictures ranks %s, expected 0 to %d" % (drawn_ranks, ranks - 1))
    for part in ("forward", "backward", "communication"):
        if page.timeline_legend.get(part) not in drawn:
            raise Failure("the timeline draws no %s (legend %s, colours %s)" % (part, page.timeline_legend, drawn))
    # Their bars are wide enough to be seen in a screenshot; thin ones (loss, zero_grad) may not be.
    return [page.timeline_legend[part] for part in ("forward", "backward", "communication")]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report")
    parser.add_argument("scalars")
    parser.add_argument("--screenshot", help="where to keep Chromium's screenshot (PNG)")
    parser.add_argument("--min-charts", type=int, default=2, help="distinct scalar names required (default 2)")
    parser.add_argument("--no-screenshot", action="store_true", help="check the data only, without Chromium")
    parser.add_argument("--timeline-ranks", type=int, default=0,
                        help="the page must picture one step of this many ranks (a Timeline's)")
    args = parser.parse_args(argv)

    report_keys, page = read_report(args.report)
    compare(report_keys, read_jsonl(args.scalars), args.report, args.scalars)
    names = list(dict.fromkeys(k[1] for k in report_keys))
    if len(names) < args.min_charts:
        raise Failure("the report has %d scalar name(s) %r, so %d chart(s); at least %d are expected" %
                      (len(names), names, len(names), args.min_charts))
    if len(page.chart_colours) != len(names):
        raise Failure("the page draws %d charts for %d scalar names" % (len(page.chart_colours), len(names)))
    if not page.palette:
        raise Failure('the page has no <meta name="kindling-palette" content="#rrggbb,...">')
    colours = list(dict.fromkeys(c for chart in page.chart_colours for c in chart))
    colours = list(dict.fromkeys(colours + check_timeline(page, args.timeline_ranks)))
    strangers = [c for c in colours if c not in page.palette]
    if strangers:
        raise Failure("charts use colours outside the page's palette: %s" % ", ".join(strangers))

    if args.no_screenshot:
        print("check_report.py: OK: %d records match %s, %d charts (no screenshot)" %
              (len(report_keys), args.scalars, len(names)))
        return 0
    chromium = find_chromium()
    if chromium is None:
        sys.stderr.write("check_report.py: chromium is not installed (no /usr/bin/chromium, none on PATH, $CHROMIUM "
                         "unset); run scripts/install-deps.sh (or apt-get install chromium) and try again\n")
        return 77
    if args.screenshot:
        png_path = args.screenshot
        screenshot(chromium, args.report, png_path)
        ink, background = check_screenshot(png_path, colours)
    else:
        with tempfile.TemporaryDirectory(prefix="check_report_") as directory:
            png_path = os.path.join(directory, "report.png")
            screenshot(chromium, args.report, png_path)
            ink, background = check_screenshot(png_path, colours)
    non_finite = sum(1 for k in report_keys if isinstance(k[3], tuple))
    print("check_report.py: OK: %d records (%d non-finite) match %s, %d charts; screenshot %dx%d%s: %.1f%% ink on "
          "#%02x%02x%02x, series colours %s all seen" %
          ((len(report_keys), non_finite, args.scalars, len(names)) + WINDOW +
           (" (" + args.screenshot + ")" if args.screenshot else "", 100 * ink) + background +
           (" ".join(colours) or "(none)",)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as failure:
        sys.stderr.write("check_report.py: FAILED: %s\n" % failure)
        sys.exit(1)
    except (OSError, UnicodeDecodeError) as error:
        sys.stderr.write("check_report.py: FAILED: %s\n" % error)
        sys.exit(1)
