"""scripts/ha.sh (make ha-up): ports outside Linux's ephemeral range by default, and a
taken port stops it at once, named (the check runs alone: nothing is installed or started)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ha.sh"
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ha(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HA_")}
    environ.update(HA_DIR=str(tmp_path / "ha"), **env)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=environ, capture_output=True, text=True, timeout=60
    )


def _ephemeral_range() -> tuple[int, int]:
    if not RANGE_FILE.exists():
        return 32768, 60999  # Linux's default
    low, high = RANGE_FILE.read_text().split()
    return int(low), int(high)


def test_default_ports_are_outside_the_ephemeral_range(tmp_path) -> None:
    result = _ha("url", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    nodes = [int(port) for port in re.findall(r"127\.0\.0\.1:(\d+)", result.stdout)]
    assert len(nodes) == 2 and nodes[1] == nodes[0] + 1
    low, high = _ephemeral_range()
    for port in (nodes[0] - 1, *nodes):  # the monitor, then node1 and node2
        assert not low <= port <= high, (port, low, high)
        assert port > 1024
    assert not (low <= 25432 <= high)  # what docs/ha.md and the Makefile say


@pytest.mark.parametrize(("offset", "node"), [(0, "monitor"), (1, "node1"), (2, "node2")])
@pytest.mark.parametrize("command", ["check-ports", "up"])
def test_a_taken_port_stops_it_at_once_naming_the_port(tmp_path, offset, node, command) -> None:
    # A listening socket at base + offset; the base is a port just freed by the kernel.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1] - offset
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + offset))
        holder.listen()
        result = _ha(command, tmp_path=tmp_path, HA_PORT=str(base))
    assert result.returncode != 0
    assert f"port {base + offset} ({node}) is taken" in result.stderr, result.stderr
    assert "HA_PORT" in result.stderr
    assert not (tmp_path / "ha").exists()  # nothing was created


def _three_free_ports() -> int:
    for base in range(40100, 40400, 3):  # inside the ephemeral range, on purpose
        sockets = [socket.socket() for _ in range(3)]
        try:
            for offset, sock in enumerate(sockets):
                sock.bind(("0.0.0.0", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    pytest.fail("no three free ports in 40100-40400")


def test_free_ports_pass_and_the_ephemeral_range_is_warned_of(tmp_path) -> None:
    base = _three_free_ports()
    result = _ha("check-ports", tmp_path=tmp_path, HA_PORT=str(base))
    assert result.returncode == 0, result.stderr
    low, high = _ephemeral_range()
    if low <= base <= high:
        assert f"port {base} (monitor) is inside the ephemeral range" in result.stderr
