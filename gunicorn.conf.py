"""gunicorn settings for the sendlater web app (`gunicorn -c gunicorn.conf.py sendlater_site.wsgi`).

Every value can be overridden by the environment (GUNICORN_*) or the command line.
"""

import multiprocessing
import os
import shutil
import tempfile

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# The API is I/O-bound on the database: two workers per core, plus one.
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count() * 2 + 1))
threads = int(os.environ.get("GUNICORN_THREADS", "2"))
# gunicorn's gthread worker, taking new connections only while it holds at most one
# more than the fewest of all workers, and handing some back while it holds three or
# more above: keep-alive clients spread evenly (sendlater_site/balancedworker.py).
worker_class = os.environ.get(
    "GUNICORN_WORKER_CLASS", "sendlater_site.balancedworker.BalancedThreadWorker"
)
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
# Recycle workers now and then so a slow leak never becomes an outage.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "10000"))
max_requests_jitter = int(os.environ.get("GUNICORN_MAX_REQUESTS_JITTER", "1000"))
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-")
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
proc_name = "sendlater-web"
# gunicorn answers an over-long request line itself, in plain text; the app bounds URLs
# instead and answers 414 in its JSON error shape (sendlater_site/urllimit.py). Header
# fields keep gunicorn's own bound (8,190 bytes): lifting it would let any size in.
limit_request_line = int(os.environ.get("GUNICORN_LIMIT_REQUEST_LINE", "0"))
limit_request_field_size = int(os.environ.get("GUNICORN_LIMIT_REQUEST_FIELD_SIZE", "8190"))

# Prometheus counters from every worker are aggregated through files in this dir.
_metrics_dir = os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="sendlater-metrics-")
)


def on_starting(server):
    # Stale files from an earlier run would be summed into the new counters.
    shutil.rmtree(_metrics_dir, ignore_errors=True)
    os.makedirs(_metrics_dir, exist_ok=True)


def pre_fork(server, worker):
    from sendlater_site import balancedworker

    balancedworker.slot_give(server, worker)


def child_exit(server, worker):
    from prometheus_client import multiprocess

    from sendlater_site import balancedworker

    balancedworker.slot_take_back(server, worker)
    multiprocess.mark_process_dead(worker.pid)
