"""Settings for sendlater, read from the environment (see .env.example)."""

from __future__ import annotations

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
    "scheduling",
    "polling",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
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
    if env.bool("SENDLATER_DB_POOL", default=True):
        _db["CONN_MAX_AGE"] = 0  # the pool owns connection lifetime
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": env.int("SENDLATER_DB_POOL_MIN", default=1),
            "max_size": env.int("SENDLATER_DB_POOL_MAX", default=10),
            "timeout": env.int("SENDLATER_DB_POOL_TIMEOUT_SECONDS", default=10),
        }
    else:
        _db["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
        _db["CONN_HEALTH_CHECKS"] = True

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

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
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
SENDLATER_HANDLER_MODULES = env.list("SENDLATER_HANDLER_MODULES", default=[])

# Callback hosts exempt from the SSRF rules: names, addresses or CIDR ranges
# (comma-separated). Tests and the demo allow 127.0.0.1 here; production: empty.
SENDLATER_CALLBACK_ALLOWLIST = env.list("SENDLATER_CALLBACK_ALLOWLIST", default=[])

# Measured jobs/s one poller delivers with the noop handler (bench/burst.py);
# the capacity planner warns when a plan needs more than this per poller.
SENDLATER_POLLER_CAPACITY_PER_SECOND = env.float(
    "SENDLATER_POLLER_CAPACITY_PER_SECOND", default=5000.0
)

# /metrics on the web app: served only with this bearer token (unset: 404).
SENDLATER_METRICS_TOKEN = env.str("SENDLATER_METRICS_TOKEN", default="")
