"""Settings for sendlater, read from the environment (see .env.example)."""

from __future__ import annotations

import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# A .env file in the project folder is read when present; real environment wins.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)

_DEV_SECRET_KEY = "django-insecure-sendlater-development-only"  # noqa: S105 (DEBUG only)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY in the environment, or DEBUG=true "
            "for a development-only default."
        )
    SECRET_KEY = _DEV_SECRET_KEY

# Keys that encrypt job header values at rest (scheduling/sealing.py): Fernet keys,
# comma-separated, the first encrypting and all decrypting (rotation: docs/delivery.md).
# A development default only with DEBUG or under the test suite (pytest sets
# PYTEST_VERSION, and its subprocesses inherit it); production refuses to start without.
_DEV_ENCRYPTION_KEY = "c2VuZGxhdGVyLWRldmVsb3BtZW50LW9ubHkta2V5ISE="  # DEBUG and tests only
SENDLATER_ENCRYPTION_KEYS = env.list("SENDLATER_ENCRYPTION_KEYS", default=[])
if not SENDLATER_ENCRYPTION_KEYS:
    if not (DEBUG or "PYTEST_VERSION" in os.environ):
        raise ImproperlyConfigured(
            "SENDLATER_ENCRYPTION_KEYS is not set. Set it to a Fernet key (manage.py "
            "reencrypt_headers --new-key prints one), or DEBUG=true for a development-only "
            "default."
        )
    SENDLATER_ENCRYPTION_KEYS = [_DEV_ENCRYPTION_KEY]

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduling",
    "polling",
    # e.g. "sendlater_client.django" in the test suite (make test), for the receiver helper's tests
    *env.list("SENDLATER_EXTRA_APPS", default=[]),
]

MIDDLEWARE = [
    "sendlater_site.urllimit.UrlLengthMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Sessions, the Django user and messages are skipped for /api/v1/ (key-authenticated).
    "sendlater_site.apiroutes.SessionMiddlewareExceptApi",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "sendlater_site.apiroutes.AuthenticationMiddlewareExceptApi",
    "sendlater_site.apiroutes.MessageMiddlewareExceptApi",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "sendlater_site.metrics.ApiMetricsMiddleware",
]

ROOT_URLCONF = "sendlater_site.urls"
WSGI_APPLICATION = "sendlater_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
# Unset DATABASE_URL: an SQLite file in the project folder (the embedded demo).
# Production: postgres://user:password@host:5432/name
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
_db = DATABASES["default"]
DATABASE_IS_POSTGRES = _db["ENGINE"] in (
    "django.db.backends.postgresql",
    "django.db.backends.postgresql_psycopg2",
)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run beside the one writer; IMMEDIATE takes the write lock
    # when a transaction starts, so two processes never deadlock upgrading locks.
    _db.setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": env.int("SENDLATER_SQLITE_TIMEOUT_SECONDS", default=20),
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
            ),
        }
    )
    # Tests that start processes need a file, not an in-memory database.
    _db.setdefault("TEST", {})["NAME"] = str(BASE_DIR / "test_db.sqlite3")
elif DATABASE_IS_POSTGRES:
    # A multi-host URL (docs/ha.md) names every node of a failover formation:
    #   postgres://u@h1:5432,h2:5432/sendlater?target_session_attrs=read-write
    # django-environ splits it into HOST "h1,h2" and PORT "5432,5432", which psycopg
    # takes as they are, trying the hosts in order for the read-write one.
    DATABASE_IS_MULTI_HOST = "," in str(_db.get("HOST") or "")
    _options = _db.setdefault("OPTIONS", {})
    # A host that is down but not refusing (a lost machine) must not hold a connect
    # for the kernel's TCP timeout: psycopg applies this to each host in turn.
    _options.setdefault(
        "connect_timeout", env.int("SENDLATER_DB_CONNECT_TIMEOUT_SECONDS", default=5)
    )
    # Behind pgbouncer in transaction pooling (docs/postgres.md) a named cursor would
    # outlive the transaction that pgbouncer lent its server connection for; and
    # prepared statements default to off there (below).
    SENDLATER_PGBOUNCER = env.bool("SENDLATER_PGBOUNCER", default=False)
    if SENDLATER_PGBOUNCER:
        _db["DISABLE_SERVER_SIDE_CURSORS"] = True
    if env.bool("SENDLATER_DB_POOL", default=True):
        _db["CONN_MAX_AGE"] = 0  # the pool owns connection lifetime
        _options["pool"] = {
            "min_size": env.int("SENDLATER_DB_POOL_MIN", default=1),
            "max_size": env.int("SENDLATER_DB_POOL_MAX", default=10),
            "timeout": env.int("SENDLATER_DB_POOL_TIMEOUT_SECONDS", default=10),
        }
        # After a failover the pool still holds connections to the lost primary:
        # check each one as it is lent (a round trip) when the URL names several hosts.
        _db["CONN_HEALTH_CHECKS"] = env.bool(
            "SENDLATER_DB_HEALTH_CHECKS", default=DATABASE_IS_MULTI_HOST
        )
    else:
        _db["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
        _db["CONN_HEALTH_CHECKS"] = True
# The per-request statements of the single-job API (read by id, the request budget)
# run as prepared statements on PostgreSQL (scheduling.storage.prepared): planned once
# per connection. Off by default behind pgbouncer (SENDLATER_PGBOUNCER): before 1.21
# (Debian 12 ships 1.18) it cannot keep them across the transactions it pools.
SENDLATER_DB_PREPARED_STATEMENTS = env.bool(
    "SENDLATER_DB_PREPARED_STATEMENTS", default=not env.bool("SENDLATER_PGBOUNCER", default=False)
)
if DATABASE_IS_POSTGRES and SENDLATER_DB_PREPARED_STATEMENTS:
    # Django's default (None) makes psycopg refuse to prepare even a statement that
    # asks; a threshold no statement reaches prepares only the ones that ask.
    _db.setdefault("OPTIONS", {}).setdefault("prepare_threshold", 2**31 - 1)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

SENDLATER_LOG_FORMAT = env.str("SENDLATER_LOG_FORMAT", default="plain")
if SENDLATER_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured("SENDLATER_LOG_FORMAT must be 'plain' or 'json'.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "sendlater_site.logformat.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": SENDLATER_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Production hardening (python manage.py check --deploy) -----------------
# Secure by default when DEBUG is off; behind a TLS-terminating proxy set
# SECURE_PROXY_SSL_HEADER_NAME (e.g. HTTP_X_FORWARDED_PROTO).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
# Probes and scrapes come over plain HTTP from inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Submitting a domain to the browsers' HSTS preload list is the operator's call.
SILENCED_SYSTEM_CHECKS = env.list("SILENCED_SYSTEM_CHECKS", default=["security.W021"])
if _proxy_header := env.str("SECURE_PROXY_SSL_HEADER_NAME", default=""):
    SECURE_PROXY_SSL_HEADER = (_proxy_header, "https")


# --- Cache ----------------------------------------------------------------
# Throttle counters live here, so it must be shared by every gunicorn worker (and
# every machine): the database cache by default (its table is made by migration
# scheduling 0003); CACHE_URL may name another (e.g. redis://...).
CACHES = {"default": env.cache_url("CACHE_URL", default="dbcache://sendlater_cache")}
if CACHES["default"]["BACKEND"].endswith("DatabaseCache"):
    # Past MAX_ENTRIES rows the cache culls a third of its live keys, which would
    # reset some teams' counters; every write also counts the rows, so not too big.
    CACHES["default"].setdefault("OPTIONS", {}).setdefault("MAX_ENTRIES", 5000)

# Where request budgets are counted (scheduling.api.access.ratelimit): "database" (one
# statement a request, exact across workers) or "cache" (CACHES["default"]: one INCR
# with CACHE_URL=redis://...).
SENDLATER_THROTTLE_STORE = env.str("SENDLATER_THROTTLE_STORE", default="database")
if SENDLATER_THROTTLE_STORE not in ("database", "cache"):
    raise ImproperlyConfigured("SENDLATER_THROTTLE_STORE must be 'database' or 'cache'.")
# A verified API key is trusted by each process for this long (seconds) before it is
# checked against the database again: the longest a revoked key keeps working.
SENDLATER_API_KEY_CACHE_SECONDS = env.float("SENDLATER_API_KEY_CACHE_SECONDS", default=10.0)
# The single-job create and read answered without DRF's per-request machinery
# (scheduling/api/jobs/fastpath.py; same answers). Off: every call goes through DRF.
SENDLATER_API_FASTPATH = env.bool("SENDLATER_API_FASTPATH", default=True)

# --- API ------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["scheduling.api.parsers.BoundedJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["scheduling.api.access.auth.BearerKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["scheduling.api.access.throttling.TeamScopedRateThrottle"],
    # Per team, shared by all its keys. "jobs": single-job calls and reads;
    # "jobs_bulk": bulk create and bulk cancel (up to 1,000 jobs each).
    "DEFAULT_THROTTLE_RATES": {
        "jobs": env.str("SENDLATER_THROTTLE_JOBS", default="6000/min"),
        "jobs_bulk": env.str("SENDLATER_THROTTLE_JOBS_BULK", default="600/min"),
    },
    "EXCEPTION_HANDLER": "scheduling.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "sendlater API",
    "DESCRIPTION": (
        "Schedule one-shot jobs for a future moment (seconds to "
        f"{env.int('SENDLATER_MAX_HORIZON_DAYS', default=400)} days ahead), delivered "
        "once to a webhook or an in-process handler. Every error has the shape "
        '`{"error": {"code", "message", "fields"?}}`. See docs/api.md.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # 3.1: propertyNames and type lists, so the schema can state every input rule.
    "OAS_VERSION": "3.1.0",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The docs are public; a bad key on them must not turn them into a 401.
    "SERVE_AUTHENTICATION": [],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "scheduling.api.schema.document_headers",
        "scheduling.api.schedules.views.document_schedules",
        "scheduling.api.flow.views.document_flow_controls",
        "scheduling.api.topics.views.document_topics",
        "scheduling.api.schema_rules.document_rules",
    ],
}

# --- sendlater tunables ----------------------------------------------------
# Bucket width W: due times are truncated to multiples of this (seconds).
SENDLATER_BUCKET_SECONDS = env.int("SENDLATER_BUCKET_SECONDS", default=60)
# Shard count seeded into the schedule by the first migration.
SENDLATER_DEFAULT_SHARDS = env.int("SENDLATER_DEFAULT_SHARDS", default=64)
# Upper bound an operator may choose for a shard count.
SENDLATER_MAX_SHARDS = env.int("SENDLATER_MAX_SHARDS", default=4096)
# A bucket closes this long after its end (late commits still land before it).
SENDLATER_CLOSE_GRACE_SECONDS = env.int("SENDLATER_CLOSE_GRACE_SECONDS", default=10)
# Poller lease length; renewed every third of it.
SENDLATER_LEASE_SECONDS = env.int("SENDLATER_LEASE_SECONDS", default=15)
# Due times further ahead than this are refused.
SENDLATER_MAX_HORIZON_DAYS = env.int("SENDLATER_MAX_HORIZON_DAYS", default=400)
# A cutover must start at least this far after the open bucket ends.
SENDLATER_CUTOVER_MARGIN_SECONDS = env.int("SENDLATER_CUTOVER_MARGIN_SECONDS", default=300)

for _name in ("SENDLATER_BUCKET_SECONDS", "SENDLATER_DEFAULT_SHARDS", "SENDLATER_LEASE_SECONDS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be a positive integer.")
if SENDLATER_CLOSE_GRACE_SECONDS < 0:
    raise ImproperlyConfigured("SENDLATER_CLOSE_GRACE_SECONDS must not be negative.")
if not 1 <= SENDLATER_DEFAULT_SHARDS <= SENDLATER_MAX_SHARDS:
    raise ImproperlyConfigured("SENDLATER_DEFAULT_SHARDS must lie in 1..SENDLATER_MAX_SHARDS.")

# Modules imported at start-up that register in-process handlers (@register).
# --- storage (PostgreSQL partitions, retention) --------------------------------
# The jobs table is range-partitioned by bucket on PostgreSQL: one partition per
# this many days, created ahead by the pollers and `manage.py partitions --ensure`.
SENDLATER_PARTITION_DAYS = env.int("SENDLATER_PARTITION_DAYS", default=1)
# How far ahead partitions exist: the horizon plus a margin, so the DEFAULT
# partition only catches strays.
SENDLATER_PARTITION_AHEAD_DAYS = env.int(
    "SENDLATER_PARTITION_AHEAD_DAYS", default=SENDLATER_MAX_HORIZON_DAYS + 2
)
# Terminal jobs (delivered, canceled, expired) older than this go with their
# partition; dead jobs stay for the dead-letter retention (moved forward meanwhile).
SENDLATER_RETENTION_DAYS = env.int("SENDLATER_RETENTION_DAYS", default=30)
SENDLATER_DEAD_RETENTION_DAYS = env.int("SENDLATER_DEAD_RETENTION_DAYS", default=90)
# How often each poller checks that partitions exist ahead (cheap when none is missing).
SENDLATER_PARTITION_CHECK_SECONDS = env.float("SENDLATER_PARTITION_CHECK_SECONDS", default=600)
# How often retention runs (one poller at a time, under an advisory lock); 0 = never.
SENDLATER_PRUNE_SECONDS = env.float("SENDLATER_PRUNE_SECONDS", default=86400)
if SENDLATER_PARTITION_DAYS < 1 or SENDLATER_RETENTION_DAYS < 1:
    raise ImproperlyConfigured(
        "SENDLATER_PARTITION_DAYS and SENDLATER_RETENTION_DAYS must be at least 1."
    )
if SENDLATER_DEAD_RETENTION_DAYS < SENDLATER_RETENTION_DAYS:
    raise ImproperlyConfigured(
        "SENDLATER_DEAD_RETENTION_DAYS must be at least SENDLATER_RETENTION_DAYS."
    )

SENDLATER_HANDLER_MODULES = env.list("SENDLATER_HANDLER_MODULES", default=[])

# Largest job payload, as compact JSON (bytes): larger ones get 413.
SENDLATER_MAX_PAYLOAD_BYTES = env.int("SENDLATER_MAX_PAYLOAD_BYTES", default=64 * 1024)
# Largest API request body (bytes): a bulk call of 1,000 jobs must fit.
# Longest path + query string the API takes (longer: a JSON 414; see urllimit.py).
SENDLATER_MAX_URL_BYTES = env.int("SENDLATER_MAX_URL_BYTES", default=8192)
SENDLATER_MAX_REQUEST_BYTES = env.int("SENDLATER_MAX_REQUEST_BYTES", default=16 * 1024 * 1024)

# Callback hosts exempt from the SSRF rules: names, addresses or CIDR ranges
# (comma-separated). Tests and the demo allow 127.0.0.1 here; production: empty.
SENDLATER_CALLBACK_ALLOWLIST = env.list("SENDLATER_CALLBACK_ALLOWLIST", default=[])

# --- pollers (polling app) --------------------------------------------------
# Retry backoff: base * 2**(attempt-1) seconds with jitter, capped; dead after max.
SENDLATER_RETRY_BASE_SECONDS = env.float("SENDLATER_RETRY_BASE_SECONDS", default=10)
SENDLATER_RETRY_CAP_SECONDS = env.float("SENDLATER_RETRY_CAP_SECONDS", default=3600)
SENDLATER_MAX_ATTEMPTS = env.int("SENDLATER_MAX_ATTEMPTS", default=10)
# runpoller defaults (each can be overridden on the command line).
SENDLATER_POLL_INTERVAL_SECONDS = env.float("SENDLATER_POLL_INTERVAL_SECONDS", default=1.0)
SENDLATER_BATCH_SIZE = env.int("SENDLATER_BATCH_SIZE", default=500)
# Handler threads per poller (in-process handlers run on a pool of this size).
SENDLATER_CONCURRENCY = env.int("SENDLATER_CONCURRENCY", default=8)
# The dispatch pipeline (polling.engine.pipeline): jobs in flight per poller (read, not yet
# written back: the duplicate bound of a crash), and results written back in groups of
# up to this many, or after this many milliseconds, whichever comes first.
SENDLATER_WINDOW = env.int("SENDLATER_WINDOW", default=4000)
SENDLATER_WRITEBACK_GROUP = env.int("SENDLATER_WRITEBACK_GROUP", default=1000)
SENDLATER_WRITEBACK_MILLISECONDS = env.float("SENDLATER_WRITEBACK_MILLISECONDS", default=50.0)
# Jobs in flight are still pending rows: a poller reads a (shard, bucket) from past the
# ones it has out, and re-reads it from its start this often for rows written behind
# that point meanwhile (late writes into the open bucket): their extra wait at most.
SENDLATER_RESCAN_MILLISECONDS = env.float("SENDLATER_RESCAN_MILLISECONDS", default=1000.0)
# A poller's write-back that inserts jobs due now (callbacks, topic children) wakes the
# pollers owning their shards at once (polling.common.wakeups); across processes on
# PostgreSQL through LISTEN/NOTIFY, which needs a session of its own: off by default
# behind pgbouncer's transaction pooling (the wake-ups then reach this process only).
SENDLATER_WAKE_LISTEN = env.bool(
    "SENDLATER_WAKE_LISTEN", default=not env.bool("SENDLATER_PGBOUNCER", default=False)
)
# How often each poller sweeps late writes behind its shards' checkpoints.
SENDLATER_SWEEP_SECONDS = env.float("SENDLATER_SWEEP_SECONDS", default=30)
# Recurring schedules: each occurrence becomes a job at least this many seconds ahead
# of its instant (docs/schedules.md); the planner takes this many schedules a statement.
SENDLATER_SCHEDULE_AHEAD_SECONDS = env.int("SENDLATER_SCHEDULE_AHEAD_SECONDS", default=300)
SENDLATER_SCHEDULE_BATCH = env.int("SENDLATER_SCHEDULE_BATCH", default=1000)
if SENDLATER_SCHEDULE_AHEAD_SECONDS < 1 or SENDLATER_SCHEDULE_BATCH < 1:
    raise ImproperlyConfigured(
        "SENDLATER_SCHEDULE_AHEAD_SECONDS and SENDLATER_SCHEDULE_BATCH must be at least 1."
    )
# The schedule ledger (one row per materialized occurrence) keeps this long behind each
# schedule's cursor; each poller prunes its shards' schedules' older rows this often
# (docs/schedules.md, "The ledger stays bounded"; 0 turns pruning off).
SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS = env.int(
    "SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS", default=3600
)
SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS = env.float(
    "SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS", default=300
)
if SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS < 1 or SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS < 0:
    raise ImproperlyConfigured(
        "SENDLATER_SCHEDULE_LEDGER_KEEP_SECONDS must be at least 1 and "
        "SENDLATER_SCHEDULE_LEDGER_PRUNE_SECONDS at least 0."
    )
# Topics: an endpoint whose deliveries have all failed for this long is disabled (its
# deliveries wait until it is enabled again); the team's failure callback hears it.
SENDLATER_TOPIC_DISABLE_AFTER_SECONDS = env.int(
    "SENDLATER_TOPIC_DISABLE_AFTER_SECONDS", default=86_400
)
if SENDLATER_TOPIC_DISABLE_AFTER_SECONDS < 1:
    raise ImproperlyConfigured("SENDLATER_TOPIC_DISABLE_AFTER_SECONDS must be at least 1.")
# On SIGTERM a poller finishes its batch; past this it exits anyway (code 1).
SENDLATER_SHUTDOWN_GRACE_SECONDS = env.float("SENDLATER_SHUTDOWN_GRACE_SECONDS", default=30)
# Sinks by target kind: dotted path of a class taking (concurrency=...).
SENDLATER_SINKS = {
    "handler": "polling.dispatch.handlers.HandlerSink",
    "webhook": "polling.dispatch.webhook.WebhookSink",
}
SENDLATER_SINKS.update(env.dict("SENDLATER_SINKS", default={}))

if SENDLATER_MAX_ATTEMPTS < 1:
    raise ImproperlyConfigured("SENDLATER_MAX_ATTEMPTS must be a positive integer.")
if not 0 < SENDLATER_RETRY_BASE_SECONDS <= SENDLATER_RETRY_CAP_SECONDS:
    raise ImproperlyConfigured(
        "SENDLATER_RETRY_BASE_SECONDS must be positive and at most SENDLATER_RETRY_CAP_SECONDS."
    )

# Webhook delivery: timeouts, per-host concurrency cap and circuit breaker.
SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS = env.float(
    "SENDLATER_WEBHOOK_CONNECT_TIMEOUT_SECONDS", default=5.0
)
SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS = env.float(
    "SENDLATER_WEBHOOK_READ_TIMEOUT_SECONDS", default=15.0
)
# Requests at once to one host (host:port), and over all hosts (the connection pool).
SENDLATER_WEBHOOK_MAX_PER_HOST = env.int("SENDLATER_WEBHOOK_MAX_PER_HOST", default=64)
SENDLATER_WEBHOOK_MAX_CONNECTIONS = env.int("SENDLATER_WEBHOOK_MAX_CONNECTIONS", default=512)
# Jobs wait for a busy host's slots only as long as this (at the host's measured pace);
# the rest are handed back to pending untried (not an attempt), so a slow host keeps to
# its own slots and never fills a poller's window.
SENDLATER_WEBHOOK_QUEUE_SECONDS = env.float("SENDLATER_WEBHOOK_QUEUE_SECONDS", default=2.0)
SENDLATER_BREAKER_FAILURES = env.int("SENDLATER_BREAKER_FAILURES", default=5)
SENDLATER_BREAKER_COOLDOWN_SECONDS = env.float("SENDLATER_BREAKER_COOLDOWN_SECONDS", default=10.0)
SENDLATER_BREAKER_MAX_COOLDOWN_SECONDS = env.float(
    "SENDLATER_BREAKER_MAX_COOLDOWN_SECONDS", default=300.0
)
for _name in (
    "SENDLATER_WINDOW",
    "SENDLATER_WRITEBACK_GROUP",
    "SENDLATER_WEBHOOK_MAX_PER_HOST",
    "SENDLATER_WEBHOOK_MAX_CONNECTIONS",
):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be a positive integer.")
if not 0 < SENDLATER_WEBHOOK_QUEUE_SECONDS <= 3600:
    raise ImproperlyConfigured("SENDLATER_WEBHOOK_QUEUE_SECONDS must lie in (0, 3600].")
if not 0 < SENDLATER_WRITEBACK_MILLISECONDS <= 10_000:
    raise ImproperlyConfigured("SENDLATER_WRITEBACK_MILLISECONDS must lie in (0, 10000].")
if not 10 <= SENDLATER_RESCAN_MILLISECONDS <= 60_000:
    raise ImproperlyConfigured("SENDLATER_RESCAN_MILLISECONDS must lie in [10, 60000].")
if SENDLATER_WEBHOOK_MAX_CONNECTIONS > 800:
    # The transport waits with select(), whose descriptors stop at 1024 per process.
    raise ImproperlyConfigured("SENDLATER_WEBHOOK_MAX_CONNECTIONS must be at most 800.")

# Django's Tasks framework stores tasks as sendlater jobs (scheduling.tasks).
TASKS = {
    "default": {
        "BACKEND": "scheduling.tasks.SendLaterBackend",
        "OPTIONS": {"TEAM": env.str("SENDLATER_TASKS_TEAM", default="django-tasks")},
    }
}

# Measured jobs/s one poller delivers with the noop handler (bench/burst.py);
# the capacity planner warns when a plan needs more than this per poller.
SENDLATER_POLLER_CAPACITY_PER_SECOND = env.float(
    "SENDLATER_POLLER_CAPACITY_PER_SECOND", default=6000.0
)

# Operator console: shards lagging more than this (seconds) are highlighted.
SENDLATER_LAG_THRESHOLD_SECONDS = env.float("SENDLATER_LAG_THRESHOLD_SECONDS", default=60.0)
# The lag dashboard reloads itself this often (seconds; 0 turns it off).
SENDLATER_DASHBOARD_REFRESH_SECONDS = env.int("SENDLATER_DASHBOARD_REFRESH_SECONDS", default=5)

# /metrics on the web app: served only with this bearer token (unset: 404).
SENDLATER_METRICS_TOKEN = env.str("SENDLATER_METRICS_TOKEN", default="")
# Flow-control keys with series of their own on /metrics (most waiting first); the
# rest are summed into one series, key="_other", so series never grow with the keys.
SENDLATER_METRICS_FLOW_KEYS = env.int("SENDLATER_METRICS_FLOW_KEYS", default=20)
if SENDLATER_METRICS_FLOW_KEYS < 0:
    raise ImproperlyConfigured("SENDLATER_METRICS_FLOW_KEYS must not be negative.")
