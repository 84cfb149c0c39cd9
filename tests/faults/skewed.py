"""Run a Python script with this process's wall clock skewed: ``skewed.py SECONDS script args``.

The clock-skew scenario starts one poller through this: ``time.time()`` and
``datetime.now()`` are off by SECONDS (time-machine, ticking), as on a machine
whose clock drifted. Monotonic time is left alone, as a real skew would.
"""

from __future__ import annotations

import runpy
import sys
import time

import time_machine

if __name__ == "__main__":
    skew = float(sys.argv[1])
    time_machine.travel(time.time() + skew, tick=True).start()
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
