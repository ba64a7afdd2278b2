"""Settings for the Context Console, read from the environment (12-factor).

CONSOLE_ENV selects the mode: "development" (default) or "production". Development has
defaults and embedded engines; production refuses to start without the values it needs.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from console.kernel.tracing_links import template_problem

BASE_DIR = Path(__file__).resolve().parent.parent
CONSOLE_ENV = os.environ.get("CONSOLE_ENV", "development").strip().lower()
if CONSOLE_ENV not in {"development", "production"}:
    raise ImproperlyConfigured(
        f"CONSOLE_ENV must be 'development' or 'production', not {CONSOLE_ENV!r}"
    )
PRODUCTION = CONSOLE_ENV == "production"


def env(name: str, default: str | None = None) -> str | None:
    """An environment value; in production a missing required one stops the start."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if PRODUCTION and default is None:
        raise ImproperlyConfigured(f"{name} is required in production (CONSOLE_ENV=production)")
    return default


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def env_count(name: str, default: int, *, minimum: int = 0) -> int:
    """A whole number from the environment (at least `minimum`); anything else stops the start."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < minimum:
        raise ImproperlyConfigured(f"{name} must be a whole number >= {minimum}, not {value!r}")
    return int(value)


# --- core -------------------------------------------------------------------------------
# The development key is only ever used outside production (env() refuses it there).
SECRET_KEY = env("SECRET_KEY", None if PRODUCTION else "dev-only-insecure-key-not-for-production")
DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = [
    h.strip()
    for h in (env("ALLOWED_HOSTS", "" if PRODUCTION else "*") or "").split(",")
    if h.strip()
]
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required in production (comma-separated)")
CSRF_TRUSTED_ORIGINS = [o for o in (env("CSRF_TRUSTED_ORIGINS", "") or "").split(",") if o]
# Where people reach the console (e.g. https://console.bank.example): links in webhook
# payloads (approval.requested) are absolute with it, paths without it.
CONSOLE_PUBLIC_URL = (env("CONSOLE_PUBLIC_URL", "") or "").rstrip("/")
# The trace page links a trace to the users' tracing system, e.g.
# https://grafana.example/explore?traceId={trace_id}: `{trace_id}` and `{span_id}` are the
# OpenTelemetry ids the runtime recorded (the SDK's assembly span), `{request_id}` the
# console's id; each replaced URL-encoded (console/kernel/tracing_links.py). A trace without
# the ids a template needs gets no link, and its page says why. Empty: no link.
TRACE_LINK_URL_TEMPLATE = env("TRACE_LINK_URL_TEMPLATE", "") or ""
if TRACE_LINK_URL_TEMPLATE and (problem := template_problem(TRACE_LINK_URL_TEMPLATE)):
    raise ImproperlyConfigured(
        f"TRACE_LINK_URL_TEMPLATE {problem}, not {TRACE_LINK_URL_TEMPLATE!r}"
    )

# Snapshot encryption keys: comma-separated Fernet keys, newest first (rotation: prepend).
SNAPSHOT_KEYS = [
    k.strip()
    for k in (env("SNAPSHOT_KEYS", None if PRODUCTION else "") or "").split(",")
    if k.strip()
]
if PRODUCTION and not SNAPSHOT_KEYS:  # e.g. SNAPSHOT_KEYS="," — never the development key
    raise ImproperlyConfigured(
        "SNAPSHOT_KEYS is required in production: comma-separated Fernet keys, newest first"
    )
if not SNAPSHOT_KEYS:
    # Development only: a fixed, obviously-non-secret key so demo snapshots decrypt across restarts.
    SNAPSHOT_KEYS = ["ZGV2LW9ubHktc25hcHNob3Qta2V5LW5vdC1zZWNyZXQ="]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "pgtrigger",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp_webauthn",
    "console",
    "strategies",
    "traces",
    "traces.previews",
    "traces.outcomes",
    "traces.health",
    "traces.alerts",
    "traces.regressions",
    "traces.rollouts",
]

MIDDLEWARE = [
    # First: it sees every answer, so every error under /api/ leaves in the API's shape.
    "console.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django_otp.middleware.OTPMiddleware",  # request.user.is_verified(): a second factor used
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "console.middleware.RequestIdMiddleware",
    "console.middleware.UnstorableInputMiddleware",
    # After the request id (its audit rows carry it), htmx (its answers differ) and CSRF (a
    # confirmed password is only read from a form that passed it).
    "console.middleware.SessionLifetimeMiddleware",
    "console.middleware.ApplicationErrorMiddleware",
    # Last, as django-axes asks: it turns a sign-in that axes locked into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

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
                "console.context_processors.layout",
            ],
        },
    },
]

# --- database: PostgreSQL only (embedded in development when DATABASE_URL is unset) ------
# Settings never start a server: the launchers (scripts/run.py, scripts/test.sh) start the
# embedded engines when no URL is given and pass the URLs in (scripts/embedded.py).
_database_url = env("DATABASE_URL", "")
if not _database_url:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set. `make run` and `make test` start an embedded PostgreSQL and "
        'set it; for other commands run `eval "$(.venv/bin/python scripts/embedded.py env)"` '
        "first, or point DATABASE_URL at a PostgreSQL server."
    )
if not _database_url.startswith(("postgres://", "postgresql://")):
    raise ImproperlyConfigured(
        f"DATABASE_URL must be a PostgreSQL URL (postgresql://...), got scheme "
        f"{_database_url.split(':', 1)[0]!r}"
    )
DATABASES = {
    "default": dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)
}
DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = 5
# A streaming standby of the primary for the reads that can wait for replication (trace search
# and pages, health pages, previews' replays, exports): console.kernel.standby, docs/scale-out.md.
# Used while it answers and is at most STANDBY_MAX_LAG_SECONDS behind (checked every
# STANDBY_CHECK_SECONDS per process); otherwise those reads go to the primary, logged.
_standby_url = env("STANDBY_DATABASE_URL", "")
if _standby_url:
    if not _standby_url.startswith(("postgres://", "postgresql://")):
        raise ImproperlyConfigured(
            "STANDBY_DATABASE_URL must be a PostgreSQL URL (postgresql://...)"
        )
    DATABASES["standby"] = dj_database_url.parse(
        _standby_url, conn_max_age=60, conn_health_checks=True
    )
    # A standby that stopped answering must not hold a page for long: the primary takes over.
    DATABASES["standby"].setdefault("OPTIONS", {})["connect_timeout"] = 2
    DATABASES["standby"]["TEST"] = {"MIRROR": "default"}
    DATABASE_ROUTERS = ["console.kernel.standby.StandbyRouter"]
STANDBY_MAX_LAG_SECONDS = float(env("STANDBY_MAX_LAG_SECONDS", "30") or 30)
STANDBY_CHECK_SECONDS = float(env("STANDBY_CHECK_SECONDS", "5") or 5)
# A page read from the standby says so when the standby is more than this many seconds behind.
STANDBY_SHOW_LAG_SECONDS = float(env("STANDBY_SHOW_LAG_SECONDS", "2") or 2)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- broker and cache: Redis (embedded in development when REDIS_URL is unset) -----------
REDIS_URL = env("REDIS_URL", "")
if not REDIS_URL:
    raise ImproperlyConfigured(
        "REDIS_URL is not set. `make run` and `make test` start an embedded Redis and set it; "
        'for other commands run `eval "$(.venv/bin/python scripts/embedded.py env)"` first.'
    )
if not REDIS_URL.startswith(("redis://", "rediss://", "redis+socket://", "unix://")):
    raise ImproperlyConfigured("REDIS_URL must be a Redis URL (redis://host:port/db)")
_cache_location = REDIS_URL.replace("redis+socket://", "unix://")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _cache_location,
        "KEY_PREFIX": env("CACHE_PREFIX", "console") or "console",
        # Short: a request never waits long on a hung Redis (it reads PostgreSQL instead,
        # strategies.delivery.config.redis_call), and skips Redis for a while after an error.
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True  # a task is acknowledged only after it ran
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # a killed worker's task goes back to the queue
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_QUEUE", "console") or "console"
# Shard tasks per impact preview, run side by side on the worker pool (1: one task);
# more than the worker's concurrency only queues them (docs/previews.md).
PREVIEW_SHARDS = env_count("PREVIEW_SHARDS", 2, minimum=1)
# Minutes between two anchors of the audit chains (console.chain_checkpoint, below).
# Rows newer than the last anchor are what a superuser could still delete unseen: keep it short.
AUDIT_CHECKPOINT_MINUTES = env_count("AUDIT_CHECKPOINT_MINUTES", 1, minimum=1)
# Minutes between two trace purges: a retention change applies at the next one (the
# environment form says so, from this).
TRACES_PURGE_MINUTES = 15
# Seconds between two judgements of the running rollouts' guards (30: a breach in traffic is
# rolled back within a minute). Shorter only where traffic is dense enough to judge sooner.
ROLLOUTS_EVALUATE_SECONDS = float(env_count("ROLLOUTS_EVALUATE_SECONDS", 30, minimum=1))
# Scheduled go-lives (docs/schedules-and-freezes.md): the beat claims the due ones every this
# many seconds (20: a schedule fires within 60 s of its time with room to spare); a claim whose
# worker died is taken over after SCHEDULES_CLAIM_TIMEOUT_SECONDS (above a run's time limit).
SCHEDULES_POLL_SECONDS = float(env_count("SCHEDULES_POLL_SECONDS", 20, minimum=1))
SCHEDULES_CLAIM_TIMEOUT_SECONDS = env_count("SCHEDULES_CLAIM_TIMEOUT_SECONDS", 600, minimum=10)
# The longest a freeze break-glass lets go-lives through a freeze or outside change hours.
FREEZE_BREAK_GLASS_MAX_MINUTES = env_count("FREEZE_BREAK_GLASS_MAX_MINUTES", 240, minimum=1)
# Days a completed rollout stays in its paired watch (issue 23 item 4: the previous version as
# shadow on the environment's `watch_share` of units; a breach warns). 0 turns the watch off.
ROLLOUTS_WATCH_DAYS = float(env_count("ROLLOUTS_WATCH_DAYS", 7, minimum=0))
# The SIEM streaming (docs/siem.md, console.access.siem): seconds between two drains, events
# per batch, seconds one drain may go on, the HOSTNAME the events carry (default: the host's).
SIEM_DRAIN_SECONDS = float(env_count("SIEM_DRAIN_SECONDS", 10, minimum=1))
SIEM_BATCH_SIZE = env_count("SIEM_BATCH_SIZE", 500, minimum=1)
SIEM_DRAIN_BUDGET_SECONDS = float(env_count("SIEM_DRAIN_BUDGET_SECONDS", 50, minimum=1))
SIEM_HOSTNAME = env("SIEM_HOSTNAME", "") or ""
# External change approvals (docs/change-approvals.md): how often the beat polls waiting
# records' status URLs (and relays unsent requests, expires ended windows), how far a signed
# callback's timestamp may be from now, and the send retries (first delay, doubling; tries).
CHANGE_RECORD_POLL_SECONDS = float(env_count("CHANGE_RECORD_POLL_SECONDS", 60, minimum=1))
CHANGE_CALLBACK_TOLERANCE_SECONDS = env_count("CHANGE_CALLBACK_TOLERANCE_SECONDS", 300, minimum=1)
CHANGE_RECORD_RETRY_BASE_SECONDS = float(
    env_count("CHANGE_RECORD_RETRY_BASE_SECONDS", 10, minimum=1)
)
CHANGE_RECORD_MAX_TRIES = env_count("CHANGE_RECORD_MAX_TRIES", 8, minimum=1)
# Seconds between two evaluations of the standing alert rules (traces.alerts, docs/alerts.md):
# a rule fires within two of them of its window's value crossing its threshold.
ALERT_EVALUATION_SECONDS = float(env_count("ALERT_EVALUATION_SECONDS", 60, minimum=1))
# Every periodic task, in one place; `celery -A console beat` runs them.
CELERY_BEAT_SCHEDULE: dict = {
    "traces-purge-expired": {
        "task": "traces.purge_expired",
        "schedule": TRACES_PURGE_MINUTES * 60.0,
    },
    "traces-rollup-recent-hours": {"task": "traces.rollup_recent_hours", "schedule": 3600.0},
    # Day partitions of traces and candidates a week ahead (docs/traces-storage.md; the purge
    # above drops the expired days). Every 6 hours: a missed run is harmless.
    "traces-partitions-maintain": {"task": "traces.partitions_maintain", "schedule": 6 * 3600.0},
    # An outcome reported before its trace is counted once the trace is stored: the health
    # figures are at most this late (issue 22: visible within 60 s).
    "traces-count-pending-outcomes": {"task": "traces.count_pending_outcomes", "schedule": 30.0},
    # Staged rollouts' guards (issue 23): a breach is rolled back within two periods (60 s).
    "rollouts-evaluate": {"task": "rollouts.evaluate", "schedule": ROLLOUTS_EVALUATE_SECONDS},
    # Go-lives scheduled for a time: claimed when due, judged again, fired or refused.
    "schedules-run-due": {
        "task": "strategies.schedules_run_due",
        "schedule": SCHEDULES_POLL_SECONDS,
    },
    # Version-health and rollout counters are kept 30 days (traces.health, traces.rollouts).
    "health-purge-expired": {"task": "health.purge_expired", "schedule": 6 * 3600.0},
    # Standing alerts on context health (issue 35.4): every rule judged on the counters.
    "alerts-evaluate": {"task": "alerts.evaluate", "schedule": ALERT_EVALUATION_SECONDS},
    "rollouts-purge-expired": {"task": "rollouts.purge_expired", "schedule": 6 * 3600.0},
    # Regression set members past their set's retention (issue 35; docs/regression-sets.md).
    "regressions-purge-expired": {"task": "regressions.purge_expired", "schedule": 24 * 3600.0},
    "strategies.flush_token_last_used": {
        "task": "strategies.flush_token_last_used",
        "schedule": 60.0,
    },
    # PostgreSQL is the truth of the runtime read path: rewrite in Redis (and every mirror)
    # what a lost push after commit left stale — payloads, revoked tokens' tombstones.
    "strategies.reconcile_runtime_cache": {
        "task": "strategies.reconcile_runtime_cache",
        "schedule": 30.0,
    },
    # Webhook deliveries left pending by a lost message (a broker error at commit).
    "strategies.relay_webhook_deliveries": {
        "task": "strategies.relay_webhook_deliveries",
        "schedule": 60.0,
    },
    # The audit and access logs' chain heads: a checkpoint row and a line on the
    # `console.kernel.audit.anchor` logger (audit_verify checks the chains reach them).
    "console-chain-checkpoint": {
        "task": "console.chain_checkpoint",
        "schedule": AUDIT_CHECKPOINT_MINUTES * 60.0,
    },
    # External change records: poll waiting ones, relay unsent requests, expire windows.
    "strategies.change_records_tick": {
        "task": "strategies.change_records_tick",
        "schedule": CHANGE_RECORD_POLL_SECONDS,
    },
    # The audit and access logs streamed to the SIEM destinations (docs/siem.md).
    "console-siem-drain": {"task": "console.siem_drain", "schedule": SIEM_DRAIN_SECONDS},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(BASE_DIR / ".data" / "celerybeat-schedule")

# --- auth --------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 8},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The test suite builds thousands of users; Django's default hasher spends ~0.3 s on each, so
# (as Django's testing docs recommend) the suite sets CONSOLE_FAST_PASSWORD_HASHER for itself
# and every process it starts. Ignored in production: MD5 is no password hash for real people.
FAST_PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
if env_bool("CONSOLE_FAST_PASSWORD_HASHER", False) and not PRODUCTION:
    PASSWORD_HASHERS = FAST_PASSWORD_HASHERS
# Sessions a bank accepts (console.kernel.sessions, enforced per request by
# console.middleware.SessionLifetimeMiddleware): signed out after SESSION_IDLE_MINUTES without
# activity, and SESSION_ABSOLUTE_HOURS after signing in however active; the dangerous actions
# (approve, break-glass, switch a sensitive section on, view a snapshot) need a sign-in or a
# password confirmed within REAUTHENTICATION_MINUTES. Personal API tokens are no sessions:
# their own expiry and revocation rules apply, none of these.
SESSION_IDLE_MINUTES = env_count("SESSION_IDLE_MINUTES", 30, minimum=1)
SESSION_ABSOLUTE_HOURS = env_count("SESSION_ABSOLUTE_HOURS", 12, minimum=1)
REAUTHENTICATION_MINUTES = env_count("REAUTHENTICATION_MINUTES", 10, minimum=1)
if os.environ.get("SESSION_COOKIE_AGE", "").strip():
    # It used to be the lifetime; one setting now says it (the stored session and its cookie
    # last as long as the absolute lifetime), so an old value is not silently ignored.
    raise ImproperlyConfigured(
        "SESSION_COOKIE_AGE is no longer read: set SESSION_ABSOLUTE_HOURS (default 12) and "
        "SESSION_IDLE_MINUTES (default 30) instead"
    )
SESSION_COOKIE_AGE = SESSION_ABSOLUTE_HOURS * 3600
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
# Sign-in lockout (django-axes). AXES_FAILURE_LIMIT failed sign-ins for one username from one
# address within AXES_COOLOFF_TIME lock that pair — that username from that address only, so
# nobody can lock an admin out from everywhere (the sign-in locks page states both, from
# here). Counted in PostgreSQL (works with Redis down); admins unlock
# at /access/sign-in-locks/. The access log keeps every attempt (console.access.forms.SignInMixin).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked pair before any check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_RESET_ON_SUCCESS = True
# A refused attempt during the lock is not another failure: the lock lifts AXES_COOLOFF_TIME
# after the failure that set it, however often someone keeps trying.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# The one place that decides the client address (also used by the access log).
AXES_CLIENT_IP_CALLABLE = "console.kernel.request_context.client_ip"
# How many reverse proxies in front of the console append the address they saw to
# X-Forwarded-For. 0 (the default): the header is ignored and REMOTE_ADDR is the client;
# N: the N-th entry from the right (what the outermost of our proxies wrote). Anything to
# its left is what the client sent and is never trusted.
TRUSTED_PROXY_HOPS = env_count("TRUSTED_PROXY_HOPS", 0)
# The sign-in page again, with the lockout message and the username as typed (status 429).
AXES_LOCKOUT_CALLABLE = "console.views.login_lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
# Unlocks go through the console page (audited), not the break-glass admin; successful
# sign-ins are in the console's access log, so axes keeps no second log of them.
AXES_ENABLE_ADMIN = False
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no start-up banner on stderr (commands print one-line errors)

# Single sign-on through OpenID Connect providers (docs/sso.md): a JSON list, one object per
# provider (key, name, issuer, client_id, client_secret, scopes, groups_claim, timeout). Empty:
# local accounts only, as before. console.accounts.oidc checks each entry.
try:
    OIDC_PROVIDERS = json.loads(env("OIDC_PROVIDERS", "[]") or "[]")
except ValueError as exc:
    raise ImproperlyConfigured(f"OIDC_PROVIDERS is not valid JSON: {exc}") from exc
# How far a provider's clock may be off (seconds) when its ID token's times are checked.
OIDC_CLOCK_SKEW_SECONDS = env_count("OIDC_CLOCK_SKEW_SECONDS", 60)

# Enforced single sign-on, break-glass accounts and second factors (docs/sso.md,
# console.accounts.second_factors). SSO_ENFORCED "all": password sign-in only for break-glass
# accounts (with their second factor); SSO_ENFORCED_DOMAINS: the same for accounts whose
# e-mail is in one of these domains. An account linked to a provider never signs in with a
# password while either is set. Neither set (the default): as before.
SSO_ENFORCED = (env("SSO_ENFORCED", "") or "").strip().lower()
if SSO_ENFORCED not in ("", "off", "all"):
    raise ImproperlyConfigured(f'SSO_ENFORCED must be "all" or empty, not {SSO_ENFORCED!r}')
SSO_ENFORCED_DOMAINS = [
    d.strip().lower().lstrip("@")
    for d in (env("SSO_ENFORCED_DOMAINS", "") or "").split(",")
    if d.strip()
]
BREAK_GLASS_ACCOUNTS_MAX = env_count("BREAK_GLASS_ACCOUNTS_MAX", 3, minimum=1)
# Wrong second-factor codes wait 1, 2, 4, … seconds (django-otp's throttling, per device).
OTP_TOTP_THROTTLE_FACTOR = 1
OTP_TOTP_ISSUER = env("OTP_TOTP_ISSUER", "Context Console") or "Context Console"
# Security keys and passkeys are a second factor here, never a way round the password.
OTP_WEBAUTHN_ALLOW_PASSWORDLESS_LOGIN = False
OTP_WEBAUTHN_RP_NAME = OTP_TOTP_ISSUER
# A security key is bound to this domain and only answers pages from these origins (the
# console's own address, as people's browsers see it). Set both in production.
OTP_WEBAUTHN_RP_ID = env("WEBAUTHN_RP_ID", "localhost") or "localhost"
OTP_WEBAUTHN_ALLOWED_ORIGINS = [
    o.strip()
    for o in (env("WEBAUTHN_ORIGINS", "http://localhost:8000") or "").split(",")
    if o.strip()
]
# Single sign-on through SAML 2.0 identity providers (docs/sso.md, console.accounts.saml): a
# JSON list (key, name, metadata_url or metadata_file, groups_attribute, email_attribute,
# username_attribute, name_attribute, sp_entity_id, timeout). Keys are unique across both
# lists. The clock skew allowed on an assertion's times is OIDC_CLOCK_SKEW_SECONDS. The
# pending sign-in rides in its own cookie (djangosaml2's), SameSite=None over HTTPS: the
# provider's answer is a cross-site POST, which a Lax cookie does not come with.
try:
    SAML_PROVIDERS = json.loads(env("SAML_PROVIDERS", "[]") or "[]")
except ValueError as exc:
    raise ImproperlyConfigured(f"SAML_PROVIDERS is not valid JSON: {exc}") from exc
SAML_SESSION_COOKIE_NAME = "console_saml"
SAML_SESSION_COOKIE_SAMESITE = "None" if PRODUCTION else "Lax"

if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(env("SECURE_HSTS_SECONDS", "31536000") or 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
    X_FRAME_OPTIONS = "DENY"

# --- i18n, static --------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / ".data" / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = DEBUG

# --- API -----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "console.accounts.authentication.PersonalTokenAuthentication",  # Authorization: Bearer ccp_…
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["console.kernel.parsers.StrictJSONParser"],
    "EXCEPTION_HANDLER": "console.kernel.api_errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Context Console API",
    "DESCRIPTION": "Operator API (/api/v1/) and runtime contract (/api/v1/runtime/).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Closed lists several components share (a trace's status; the reason codes of a
    # candidate, a replay and a shadow — one list since not_requested is a live decision too)
    # get one name each.
    "ENUM_NAME_OVERRIDES": {
        "TraceStatusEnum": "context_runtime.wire.STATUSES",
        "ReasonCodeEnum": "context_runtime.wire.REASON_CODES",
        "RedactionActionEnum": "traces.redaction.engine.ACTIONS",  # issue 34.4
        "ScheduleKindEnum": "strategies.releases.serializers.schedules.SCHEDULE_KINDS",  # issue 34.2
        "ScheduleStateEnum": "strategies.releases.serializers.schedules.SCHEDULE_STATES",
        "RegressionOutcomeEnum": "traces.regressions.checks.OUTCOMES",  # issue 35
        "RegressionSetOutcomeEnum": "traces.regressions.checks.SET_OUTCOMES",
    },
    # The schema and its docs page are for signed-in operators only (found by the access matrix).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "console.kernel.api_schema.document_every_operation_answers",
    ],
}
DATA_UPLOAD_MAX_MEMORY_SIZE = (
    2 * 1024 * 1024
)  # forms and operator API; trace ingest reads its body itself (traces/ingest.py)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO") or "INFO"},
    "loggers": {
        # Without handlers of its own: Django's default console handler (DEBUG only) would
        # print every django.* record (each 4xx of django.request) a second time beside the
        # root's. The records still reach the root's console handler, once.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.db.backends": {"level": "WARNING"},
        # SAML (console.accounts.saml): pysaml2's schema loader chatters at INFO on import, and
        # pysaml2 logs each refused answer at ERROR — the console's own line says why, once.
        "xmlschema": {"level": "WARNING"},
        "saml2": {"level": "CRITICAL"},
        # The audit chains' anchors are for the off-host log: written whatever level the
        # process runs at (`make run` and production run worker and beat at WARNING).
        "console.kernel.audit.anchor": {
            "handlers": ["console"],
            "level": "INFO",
            "propagate": False,
        },
    },
}

# Webhook targets: private, loopback and link-local addresses are refused at registration and
# at delivery unless this is on (tests, on-premise receivers); see strategies/delivery/transport.py.
# The config stream (strategies.runtime.stream, docs/runtime-contract.md §1a): where runtimes
# reach it, advertised in the config answers' X-Config-Stream header — an absolute base URL
# (https://stream.console.example) or ":<port>" (the console's host and scheme, that port);
# empty: not advertised (runtimes poll, unless configured with a stream_url).
STREAM_URL = (env("STREAM_URL", "") or "").rstrip("/")
# The ingest server (console.ingest_server, docs/runtime-contract.md §3): where runtimes send
# trace batches and outcomes when it runs apart (`make run`: INGEST_PORT), named in /healthz
# and in the main web server's `ingest_busy` refusals ("" : the web server is the ingest
# server too). On the main web server, at most INGEST_ON_WEB_CONCURRENCY ingest requests at a
# time per process (0: none); one more gets 503 with Retry-After INGEST_RETRY_AFTER_SECONDS.
# Unset, the bound is 1 where an ingest server runs apart (INGEST_URL) and none where it does
# not (None): a console without one keeps taking every batch on its web server, as before.
INGEST_URL = (env("INGEST_URL", "") or "").rstrip("/")
INGEST_ON_WEB_CONCURRENCY: int | None = (
    env_count("INGEST_ON_WEB_CONCURRENCY", 1 if INGEST_URL else 0, minimum=0)
    if (INGEST_URL or os.environ.get("INGEST_ON_WEB_CONCURRENCY", "").strip())
    else None
)
INGEST_RETRY_AFTER_SECONDS = env_count("INGEST_RETRY_AFTER_SECONDS", 1, minimum=1)
# The ingest server's CPU priority (nice, 0–19; 0: as the web server): under a flood of batches
# the config reads are scheduled first (console.ingest_server.lower_priority).
INGEST_NICE = min(19, env_count("INGEST_NICE", 10, minimum=0))


def env_cpus(name: str) -> frozenset[int]:
    """A CPU list from the environment, as taskset writes it ("3", "2-3", "0,2"); empty: any."""
    value = os.environ.get(name, "").strip()
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in value.split(","))):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a CPU list such as 3, 2-3 or 0,2") from None
    return frozenset(cpus)


# …and on these CPUs only (INGEST_CPUS, e.g. "3"; `make run` gives it the last core of two or
# more), with the PostgreSQL backends it opens on this machine: a flood of batches then keeps
# the other cores free for config reads (docs/runtime-contract.md §3, issue 36).
INGEST_CPUS = env_cpus("INGEST_CPUS")
STREAM_HEARTBEAT_SECONDS = float(env("STREAM_HEARTBEAT_SECONDS", "15") or 15)
STREAM_MAX_PER_TOKEN = env_count("STREAM_MAX_PER_TOKEN", 256, minimum=1)
# Live runtime instances (heartbeats, docs/runtime-contract.md §2a) one runtime token may have;
# a heartbeat of one more is refused with 429 `too_many_instances`.
RUNTIME_INSTANCES_PER_TOKEN = env_count("RUNTIME_INSTANCES_PER_TOKEN", 256, minimum=1)
# Streams one stream server process holds; one more gets 503 with Retry-After at once. Below
# granian's --backpressure (10000 in scripts/run.py), which otherwise stops answering at all.
STREAM_CAPACITY = env_count("STREAM_CAPACITY", 9000, minimum=1)
STREAM_QUEUE_SIZE = env_count("STREAM_QUEUE_SIZE", 16, minimum=1)
STREAM_WRITE_TIMEOUT = float(env("STREAM_WRITE_TIMEOUT", "10") or 10)

WEBHOOK_ALLOW_PRIVATE_TARGETS = env_bool("WEBHOOK_ALLOW_PRIVATE_TARGETS", False)
# Webhooks' old headers (X-Console-Event, X-Console-Delivery, and X-Console-Signature over the
# body alone, which a replay passes) go along with the Standard Webhooks ones for receivers not
# updated yet, until this moment (docs/runtime-api.md §4) and never after; an operator whose
# receivers all verify `webhook-signature` stops them now with WEBHOOK_LEGACY_HEADERS=false.
# (Read by strategies.delivery.webhooks.legacy_headers_until, the one place that decides.)
WEBHOOK_LEGACY_HEADERS_UNTIL = datetime(2027, 6, 1, tzinfo=UTC)
WEBHOOK_LEGACY_HEADERS = env_bool("WEBHOOK_LEGACY_HEADERS", True)

DEMO_MODE = env_bool("CONSOLE_DEMO", not PRODUCTION)
