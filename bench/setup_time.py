"""How long a fresh clone takes to serve its first page with `make run`, and `make test`'s
set-up on top of that (the goals of docs/operations.md, "Dependencies": 15 s and 10 s
more, package caches warm).

Usage (from the repository root; no PostgreSQL, the demo runs on SQLite):

    .venv/bin/python bench/setup_time.py                  # this checkout's HEAD, 3 runs
    .venv/bin/python bench/setup_time.py --rev 160d1a5    # a commit from before the split
    .venv/bin/python bench/setup_time.py --port 8710 --runs 5

Each run clones the repository (`git clone`, so only committed work counts) into a
temporary folder, starts `make run PORT=... DEMO_PORT=...` in a process group of its
own, polls `/healthz` every 0.1 s until it answers 200, stops the group, then times
`make test PYTEST_ARGS=--version` in the same clone (the test set-up and pytest's
start, not the suite). Prints, per run and as medians, `run_to_served_s` and
`test_setup_s`, with the load average at the start of each run (a busy machine
stretches both). Needs the ports PORT and PORT + 1 free.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVED_WITHIN_S = 300


def _served(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def one_run(rev: str, port: int, log_path: Path) -> tuple[float, float, float]:
    """(load average, seconds to the first served page, seconds of the test set-up)."""
    clone = Path(tempfile.mkdtemp(prefix="sendlater-setup-"))
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", rev], cwd=clone, check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "VIRTUAL_ENV")}
        load = os.getloadavg()[0]
        log = log_path.open("wb")
        start = time.monotonic()
        make_run = subprocess.Popen(
            ["make", "run", f"PORT={port}", f"DEMO_PORT={port + 1}"],
            cwd=clone,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            while not _served(port):
                if make_run.poll() is not None:
                    raise SystemExit(f"make run exited {make_run.returncode}: see {log.name}")
                if time.monotonic() - start > SERVED_WITHIN_S:
                    raise SystemExit(f"nothing served within {SERVED_WITHIN_S} s: see {log.name}")
                time.sleep(0.1)
            served = time.monotonic() - start
        finally:
            _stop(make_run)
            log.close()
        start = time.monotonic()
        subprocess.run(
            ["make", "test", "PYTEST_ARGS=--version"],
            cwd=clone,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return load, served, time.monotonic() - start
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to clone (default HEAD)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=8710, help="make run's PORT (and PORT + 1)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    if not 1024 <= args.port <= 65534:
        parser.error("--port must lie in 1024..65534")
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.rev], cwd=ROOT, capture_output=True, text=True
    )
    if rev.returncode != 0:
        parser.error(f"--rev {args.rev}: {rev.stderr.strip()}")
    served_s, setup_s = [], []
    logs = Path(tempfile.mkdtemp(prefix="sendlater-setup-logs-"))
    print(f"make run's output: {logs}/run<i>.log")
    for i in range(args.runs):
        load, served, setup = one_run(rev.stdout.strip(), args.port, logs / f"run{i}.log")
        served_s.append(served)
        setup_s.append(setup)
        print(f"run[{i}] rev {rev.stdout.strip()} load {load:.1f}: ", end="")
        print(f"run_to_served_s: {served:.1f} s, test_setup_s: {setup:.1f} s", flush=True)
    print(f"run_to_served_s: {statistics.median(served_s):.1f} s (median of {args.runs})")
    print(f"test_setup_s: {statistics.median(setup_s):.1f} s (median of {args.runs})")


if __name__ == "__main__":
    main()
