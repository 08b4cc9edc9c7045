"""Reads the declared-exceptions files of the checks run before the build (check-sizes.py,
check-includes.py): one entry a line, the entry and then its reason; blank lines and lines
starting with '#' are comments."""
import os


def read_entries(root, relpath, parse, why):
    """({key: line number}, problems) of the file `relpath` under `root` (none when it is absent).

    parse(text) returns (key, label, reason) for an entry, or a string saying why the line is not
    one; `why` ends the message of an entry without a reason ("why the include stays")."""
    entries, problems = {}, []
    path = os.path.join(root, relpath)
    if not os.path.exists(path):
        return entries, problems
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            parsed = parse(text)
            if isinstance(parsed, str):
                problems.append("%s:%d: %s" % (relpath, number, parsed))
                continue
            key, label, reason = parsed
            if not reason:
                problems.append("%s:%d: '%s' gives no reason: write, after it, %s" % (relpath, number, label, why))
            if key in entries:
                problems.append("%s:%d: '%s' is listed twice: keep one" % (relpath, number, label))
            entries[key] = number
    return entries, problems
