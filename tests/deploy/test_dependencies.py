"""The dependencies as production installs them, and the lock the files are made from.

A venv made the production way (docs/operations.md, "Dependencies": `uv sync --locked
--no-dev`, or plain pip from requirements.txt) must run the service (Django set up, the
URLs and `manage.py check`, the poller command, gunicorn's app and worker class) and hold
exactly the runtime list: no test, lint or benchmark tool.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
# Named by the issue that split the dependencies; the rest of the development groups is
# ruled out by the exact comparison with requirements.txt.
NEVER_IN_PRODUCTION = {
    "pytest",
    "playwright",
    "schemathesis",
    "ruff",
    "py-spy",
    "aiohttp",
    "httpcore",
}

# Run by the production venv's interpreter from the project folder, as systemd does. Then
# every module the service's code imports anywhere (a lazy import in a function too) must
# be found: what `check` and the imports above do not reach is still in the runtime list.
SERVICE_CHECK = """
import ast, importlib.metadata, importlib.util, json, pathlib, sys
import django
django.setup()
from django.core.management import call_command, load_command_class
call_command("check")
load_command_class("polling", "runpoller")
import gunicorn.app.wsgiapp
import sendlater_site.balancedworker
from sendlater_site.wsgi import application
assert callable(application)
ours = {"scheduling", "polling", "sendlater_site"}
files = [p for d in sorted(ours) for p in pathlib.Path(d).rglob("*.py")]
imported = set()
for path in [*files, pathlib.Path("manage.py"), pathlib.Path("gunicorn.conf.py")]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
third_party = imported - ours - set(sys.stdlib_module_names) - {"__future__"}
missing = sorted(m for m in third_party if importlib.util.find_spec(m) is None)
dists = {dist.metadata["Name"] for dist in importlib.metadata.distributions()}
print(json.dumps({"dists": sorted(dists), "missing": missing, "third_party": sorted(third_party)}))
"""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _uv() -> str | None:
    """The uv the Makefile installed into this venv, or one on PATH."""
    own = Path(sys.prefix) / "bin" / "uv"
    return str(own) if own.exists() else shutil.which("uv")


def _runtime_names() -> set[str]:
    text = (ROOT / "requirements.txt").read_text()
    return {_normalized(m) for m in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", text, re.M)}


def _run(args: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _service_env(tmp_path: Path) -> dict[str, str]:
    """A production environment (docs/deploy/env.example), SQLite instead of PostgreSQL."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "DEBUG": "false",
        "SECRET_KEY": "deploy-check-not-a-secret-" + "x" * 40,
        "SENDLATER_ENCRYPTION_KEYS": "ZGVwbG95LWNoZWNrLW5vdC1hLXNlY3JldC14eHh4eHg=",
        "ALLOWED_HOSTS": "sendlater.example.com",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "sendlater_site.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _check_service(python: Path, tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir(exist_ok=True)
    out = _run([str(python), "-c", SERVICE_CHECK], env=_service_env(tmp_path))
    found = json.loads(out.strip().splitlines()[-1])
    assert {"django", "psycopg", "gunicorn", "pycurl"} <= set(found["third_party"])
    assert found["missing"] == [], "imported by the service, not in the runtime dependencies"
    installed = {_normalized(n) for n in found["dists"]}
    assert not installed & NEVER_IN_PRODUCTION, installed & NEVER_IN_PRODUCTION
    assert installed - {"pip"} == _runtime_names()


def test_uv_sync_no_dev_runs_the_service_and_nothing_else(tmp_path: Path) -> None:
    uv = _uv()
    if uv is None:
        pytest.skip("no uv in this venv nor on PATH (installed with plain pip)")
    venv = tmp_path / "venv"
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)])
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    env.pop("VIRTUAL_ENV", None)
    _run([uv, "sync", "--quiet", "--locked", "--no-dev"], env=env)
    _check_service(venv / "bin" / "python", tmp_path)


def test_requirements_txt_with_hashes_runs_the_service_and_nothing_else(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    uv = _uv()
    if uv is not None:
        _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)])
        install = [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
    else:
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
        install += ["install", "--quiet", "--disable-pip-version-check"]
    _run([*install, "--require-hashes", "-r", "requirements.txt"])
    _check_service(venv / "bin" / "python", tmp_path)


def test_lock_matches_pyproject_and_requirements_files() -> None:
    uv = _uv()
    if uv is None:
        pytest.skip("no uv in this venv nor on PATH (installed with plain pip)")
    _run(["scripts/deps.sh", "check"], env={**os.environ, "UV": uv})
