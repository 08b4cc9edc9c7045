"""The ignite the metric comparisons run against (ignite_regression.py, ignite_cases.py): 0.5.5,
as scripts/requirements-torch2.txt pins it in the LibTorch 2.15 venv.

require(*modules) imports ignite and the given modules, or exits: 77 (skipped) under a torch
1.x (Debian's python3, whose newest ignite, 0.4.13, lacks what is compared), 1 (an error) under
torch 2.x, where the pinned venv must have them.
"""
import importlib
import sys

import torch


def require(*modules):
    """Returns ignite's version after importing ignite 0.5.5 and `modules`; exits as above."""
    missing = 77 if torch.__version__.startswith("1.") else 1
    try:
        import ignite
        for module in modules:
            importlib.import_module(module)
    except ImportError as e:
        print(f"ignite 0.5.5 with {', '.join(modules) or 'its metrics'} is not importable here: {e}")
        sys.exit(missing)
    if ignite.__version__ != "0.5.5":
        print(f"ignite {ignite.__version__} found, the comparison is pinned to 0.5.5 (scripts/requirements-torch2.txt)")
        sys.exit(missing)
    return ignite.__version__
