#!/usr/bin/python3
"""torchrun for Debian's python3-torch (torch 1.13) under Python 3.11.

/usr/bin/torchrun fails at start with `'NoneType' object has no attribute 'get'`: torch 1.13's
`Std.from_str` looks a number up by iterating over the IntFlag `Std`, and since Python 3.11
iterating a flag enum yields only its single-bit members (OUT, ERR), so "0" (NONE) and "3"
(ALL) map to None. This wrapper replaces `Std.from_str` with a version that converts with
`Std(int(value))` and then runs `torch.distributed.run.main` unchanged, with the same flags:

    bench/recovery/torchrun.py --nproc_per_node=4 --rdzv_backend=c10d ... train.py
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api

_VALUE = r"^[0-3]$"
_MAPPING = r"^(\d:[0-3],)*(\d:[0-3])$"


def _from_str(cls, vm):
    if re.match(_VALUE, vm):
        return cls(int(vm))
    if re.match(_MAPPING, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{_VALUE}> or <{_MAPPING}>")


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    sys.exit(main())
