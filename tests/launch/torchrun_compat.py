"""Runs torch.distributed.run (torchrun) with a fix for Debian's torch 1.13 on Python 3.11.

On Python 3.11, iterating over an IntFlag skips the zero and composite members, so torch
1.13's Std.from_str("0") returns None and torchrun fails before starting any worker
(AttributeError: 'NoneType' object has no attribute 'get'). This wrapper replaces the parser
with one that builds the flag value directly, then hands the command line to torchrun.
Usage: python3 torchrun_compat.py <torchrun arguments>
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _std_from_str(text):
    if re.fullmatch(api._VALUE_REGEX, text):
        return api.Std(int(text))
    if re.fullmatch(api._MAPPING_REGEX, text):
        result = {}
        for pair in text.split(","):
            local_rank, value = pair.split(":")
            result[int(local_rank)] = api.Std(int(value))
        return result
    raise ValueError(f"{text} does not match {api._VALUE_REGEX} or {api._MAPPING_REGEX}")


api.Std.from_str = staticmethod(_std_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.exit(main())
