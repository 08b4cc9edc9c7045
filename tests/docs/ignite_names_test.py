#!/usr/bin/env python3
"""Fails when docs/coming-from-ignite.md leaves out a public name of the pinned ignite.

Usage: ignite_names_test.py PAGE     (PAGE: docs/coming-from-ignite.md)

Run it with a Python that imports the ignite pinned in scripts/requirements-torch2.txt (the
LibTorch 2.x venv of scripts/torch2-env.sh). Exit 0: every name is on the page; 1: names are
missing (each printed as `module.Name`), the enumeration found too few names, a module failed
to import, the page does not say which ignite it covers, or its stated count ("of its N distinct
public names, M have a kindling spelling on this page") differs from the enumeration's; 77 (CTest's skip): this Python
does not import ignite, or imports another version than the pinned one.

The public names, enumerated in the modules ignite.distributed, ignite.engine, ignite.metrics,
ignite.handlers, ignite.contrib and ignite.utils and in every module and package below them
(found with pkgutil.walk_packages, so ignite.metrics.nlp, ignite.contrib.engines.common and
ignite.handlers.tensorboard_logger are in) whose dotted path has no part starting with "_":
  * a module with `__all__`: the entries of `__all__`, but not modules, and not classes or
    functions defined outside ignite (a re-exported torch object);
  * a package without `__all__` (its __init__ re-exports its API): its attributes that are
    classes or functions defined in ignite (`__module__` "ignite" or "ignite.*");
  * a plain module without `__all__`: its classes and functions defined in that module itself
    (what it merely imports is some other module's name);
  * in all cases names starting with "_" are skipped.
A name counts as mentioned when a `code span` of the page starts with it, alone or after a
dotted qualifier, and is not followed by more of an identifier: `Accuracy`, `Fbeta(beta, ...)`,
`ignite.metrics.Accuracy`, `idist.all_reduce` and `common.setup_tb_logging` mention their
names; `km::Accuracy` (a kindling spelling) and `MyAccuracy` do not.
"""
import importlib
import inspect
import pathlib
import pkgutil
import re
import sys
import types
import warnings

ROOTS = ("ignite.distributed", "ignite.engine", "ignite.metrics", "ignite.handlers", "ignite.contrib", "ignite.utils")
MIN_NAMES = 200  # distinct names; ignite 0.5.5 has 239: fewer means a broken enumeration
SKIP = 77
REPO = pathlib.Path(__file__).resolve().parents[2]
PIN_FILE = REPO / "scripts" / "requirements-torch2.txt"


def pinned_version():
    """The pytorch-ignite version pinned in scripts/requirements-torch2.txt."""
    match = re.search(r"^pytorch-ignite==(\S+)$", PIN_FILE.read_text(), re.M)
    if not match:
        sys.exit(f"ignite_names_test: no pytorch-ignite==VERSION line in {PIN_FILE}")
    return match.group(1)


def from_ignite(obj, exact_module=None):
    """Whether a class or function was defined in ignite (in `exact_module` when given)."""
    module = getattr(obj, "__module__", None) or ""
    if exact_module is not None:
        return module == exact_module
    return module == "ignite" or module.startswith("ignite.")


def public_names(module):
    """The public names of one module, by the rules of the docstring."""
    if hasattr(module, "__all__"):
        names = []
        for name in module.__all__:
            obj = getattr(module, name, None)
            if name.startswith("_") or isinstance(obj, types.ModuleType):
                continue
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not from_ignite(obj):
                continue
            names.append(name)
        return names
    exact = None if hasattr(module, "__path__") else module.__name__
    return [name for name, obj in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
            and from_ignite(obj, exact)]


def modules_to_check(errors):
    """The root modules and every module below them (no part of the path starting with "_")."""
    found = []
    for root in ROOTS:
        package = importlib.import_module(root)
        found.append(package)
        if not hasattr(package, "__path__"):
            continue
        walk = pkgutil.walk_packages(package.__path__, root + ".", onerror=lambda name: errors.append(name))
        for info in walk:
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            try:
                found.append(importlib.import_module(info.name))
            except Exception as error:  # noqa: BLE001 - reported, and the test fails
                errors.append(f"{info.name} ({type(error).__name__}: {error})")
    return found


def mentioned_names(page_text):
    """Every identifier that starts a code span, alone or after a dotted qualifier."""
    names = set()
    for span in re.findall(r"`([^`\n]+)`", page_text):
        match = re.match(r"\s*((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)(?!\w|::)", span)
        if match:
            names.add(match.group(2))
    return names


ABSENT = re.compile(r"\s*(not yet|not there|not in kindling|no helper|Python-only|deprecated)")
# The page's own count, checked against the enumeration (so that the figure cannot go stale).
COUNT = re.compile(r"of\s+its\s+(\d+)\s+distinct\s+public\s+names,\s+(\d+)\s+have\s+a\s+kindling\s+spelling\s+on\s+this\s+page")


def spelled_names(page_text):
    """The names that a table row of the page maps to a kindling spelling: those in the row's
    first cell whose second cell does not start with "not yet", "not there", "not in kindling",
    "no helper", "Python-only" or "deprecated" (the page's words for a name kindling does not
    have)."""
    names = set()
    for line in page_text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) >= 2 and not ABSENT.match(cells[1]):
            names |= mentioned_names(cells[0])
    return names


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    page = pathlib.Path(argv[1])
    pinned = pinned_version()
    try:
        import ignite
    except ImportError as error:
        print(f"ignite_names_test: skipped: {sys.executable} does not import ignite ({error}); "
              "run it with the venv of scripts/torch2-env.sh")
        return SKIP
    if ignite.__version__ != pinned:
        print(f"ignite_names_test: skipped: {sys.executable} has ignite {ignite.__version__}, "
              f"the page covers the pinned {pinned} ({PIN_FILE.name})")
        return SKIP
    text = page.read_text()
    failures = []
    if f"ignite {pinned}" not in text:
        failures.append(f"{page} does not say which ignite it covers (the words 'ignite {pinned}')")
    errors = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ignite.contrib's modules warn that they moved
        modules = modules_to_check(errors)
    failures += [f"cannot import {error}" for error in errors]
    pairs = sorted({(module.__name__, name) for module in modules for name in public_names(module)})
    distinct = {name for _, name in pairs}
    print(f"ignite_names_test: ignite {ignite.__version__}: {len(pairs)} public names "
          f"({len(distinct)} distinct) in {len(modules)} modules, checked against {page}")
    if len(distinct) < MIN_NAMES:
        failures.append(f"only {len(distinct)} distinct names found (at least {MIN_NAMES} expected): "
                        "the enumeration is broken")
    on_page = mentioned_names(text)
    missing = [f"{module}.{name}" for module, name in pairs if name not in on_page]
    if missing:
        failures.append(f"{len(missing)} names are not on the page (in a `code span`, alone or qualified):")
        failures += [f"  {name}" for name in missing]
    spelled = len(distinct & spelled_names(text))
    stated = COUNT.search(text)
    if not stated:
        failures.append(f"{page} does not state its count as 'of its N distinct public names, M have a kindling "
                        "spelling on this page'")
    elif (int(stated.group(1)), int(stated.group(2))) != (len(distinct), spelled):
        failures.append(f"{page} states {stated.group(1)} distinct names of which {stated.group(2)} have a kindling "
                        f"spelling; the enumeration finds {len(distinct)} and {spelled}: correct the page")
    for line in failures:
        print(f"ignite_names_test: {line}" if not line.startswith("  ") else line)
    if failures:
        return 1
    print(f"ignite_names_test: all {len(distinct)} distinct names are on the page; "
          f"{spelled} of them with a kindling spelling, the others listed with the reason")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
