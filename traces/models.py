"""Selection traces: what the runtime did for one request, and why.

A trace holds only references and reasons (docs/background.md § Tracing without copying
private data); the optional full request lives apart in `Snapshot`, encrypted, with an
expiry. Tables are sized for tens of millions of rows: see docs/traces-storage.md for the
indexes, the write path (COPY) and how to partition by time.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex, GinIndex
from django.db import models
from django.utils import timezone


class Status(models.TextChoices):
    READY = "ready", "Ready"
    MISSING_REQUIRED_DATA = "missing_required_data", "Missing required data"
    BUDGET_EXCEEDED = "budget_exceeded", "Budget exceeded"
    SOURCE_CONFLICT = "source_conflict", "Source conflict"
    DEGRADED = "degraded", "Degraded"
    INPUT_REFUSED = "input_refused", "Runtime refused its input"


class Trace(models.Model):
    # Byte-wise collation on the indexed identifiers: exact matches only, and index inserts
    # and lookups never pay for locale-aware comparison. Unique per environment (below).
    request_id = models.CharField(max_length=200, db_collation="C")
    agent = models.ForeignKey(
        "strategies.Agent", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    occurred_at = models.DateTimeField(help_text="When the runtime prepared the request.")
    received_at = models.DateTimeField(default=timezone.now)
    strategy = models.CharField(max_length=100, blank=True)
    strategy_version = models.PositiveIntegerField(null=True, blank=True)
    profile_version = models.PositiveIntegerField(null=True, blank=True)
    documents = models.JSONField(default=dict, help_text="Document key → version number used.")
    config_fallback = models.BooleanField(
        default=False, help_text="The runtime served from its last-known-good copy."
    )
    config_resolution = models.CharField(
        max_length=20, blank=True, help_text="fresh, cached, stale, bootstrap or error."
    )
    config_age_seconds = models.FloatField(
        null=True, blank=True, help_text="Age of the runtime's configuration copy."
    )
    task_id = models.CharField(max_length=200, blank=True)
    task_revision = models.BigIntegerField(null=True, blank=True)
    principal = models.CharField(max_length=200, blank=True, help_text="An internal reference.")
    model_name = models.CharField(max_length=200, blank=True)
    model_adapter = models.CharField(max_length=200, blank=True)
    model_context_window = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=30, choices=Status.choices)
    degradation = models.CharField(max_length=100, blank=True, help_text="Handler used.")
    budget_max_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    budget_reserve_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    input_estimate = models.FloatField(null=True, blank=True)
    input_estimate_unit = models.CharField(max_length=30, blank=True)
    input_estimate_estimator = models.CharField(max_length=100, blank=True)
    sources = models.JSONField(default=list, help_text="[{id, version}] of the sources read.")
    shadow = models.JSONField(null=True, blank=True)
    snapshot_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when the runtime sent a snapshot."
    )
    # The trace's `selection` block (docs/runtime-contract.md §3): which engine decided, and
    # the arguments besides the strategy and the candidates, so the selection can be replayed
    # exactly. Blank/null for runtimes that send none: `engine != ""` ⇔ replayable. Plain
    # integers, no CHECK: adding a checked column scans the whole table (the wire bounds them).
    engine = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        help_text="context_runtime <version> rules <hash>; blank: no replay fields sent.",
    )
    fixed_input_tokens = models.IntegerField(null=True, blank=True)
    relevance_threshold = models.FloatField(null=True, blank=True)
    selection_context_window = models.IntegerField(
        null=True, blank=True, help_text="The context_window given to select()."
    )
    selection_max_input_tokens = models.IntegerField(
        null=True, blank=True, help_text="The call's own cap given to select()."
    )
    # Issue 21 (docs/runtime-contract.md §3): a request with more candidates than a trace
    # holds keeps the ones that matter most, the flag and the counts of all by decision; a
    # request whose input the runtime refused (status input_refused) keeps the engine's
    # findings; and the contextSections rendered into the request (keys per block).
    candidates_truncated = models.BooleanField(
        default=False, db_default=False, help_text="Only part of the candidates are stored."
    )
    candidate_counts = models.JSONField(
        null=True, blank=True, help_text="Decision → candidates, all of them (when truncated)."
    )
    input_errors = models.JSONField(
        null=True, blank=True, help_text="[{path, code, message, source, item}] (input_refused)."
    )
    input_errors_total = models.IntegerField(null=True, blank=True)
    sections = models.JSONField(
        null=True, blank=True, help_text="{user_context: [keys], query_context: [keys]} rendered."
    )
    # Issue 23: the staged rollout the request was part of (the trace's `rollout` block):
    # the rollout's public id, the arm that served it and the plan step. Null outside one.
    rollout_key = models.CharField(max_length=100, null=True, blank=True)
    rollout_arm = models.CharField(max_length=10, null=True, blank=True)
    rollout_step = models.IntegerField(null=True, blank=True)
    # Issue 32: the OpenTelemetry span the runtime assembled the request in (the trace's
    # `otel` block): W3C trace id and span id, lowercase hex, checked at ingest
    # (context_runtime.wire.TraceOtel). Null when the runtime recorded no span. No CHECK
    # constraint: adding one scans every day partition under an exclusive lock.
    otel_trace_id = models.CharField(max_length=32, null=True, blank=True)
    otel_span_id = models.CharField(max_length=16, null=True, blank=True)
    # Issue 34.4: what the environment's redaction rules replaced at ingest, per rule
    # (`{"card": 2, "email": 1}`); null when nothing was (docs/data-protection.md).
    redactions = models.JSONField(null=True, blank=True)
    # Issue 36: the candidates in one compact value (`traces.compact.encode`: ≈ 700 bytes for
    # fifty, inline in the row) and the numbers (`CandidateKind`) of the trace's kinds of
    # candidate, GIN-indexed for "traces where S was excluded as D for R". Read through
    # `traces.stored.trace_candidates`, never by hand.
    packed_candidates = models.BinaryField(default=bytes, help_text="traces.compact.encode.")
    kinds = ArrayField(models.IntegerField(), default=list, blank=True)

    class Meta:
        ordering = ["-occurred_at", "-id"]
        constraints = [
            # A request_id is unique per environment (docs/runtime-contract.md §3): sg-test and
            # prod may both have req-92. request_id leads, so the trace page and search (by
            # request_id alone, in every environment the user may see) use this index too;
            # it is also the ingest's ON CONFLICT target.
            # Unique per environment is enforced by RequestKey: the table is partitioned by
            # occurred_at, and a unique index there would have to include it.
        ]
        indexes = [
            models.Index(
                fields=["agent", "environment", "-occurred_at"], name="trace_agent_env_time"
            ),
            models.Index(
                fields=["agent", "strategy", "strategy_version", "-occurred_at"],
                name="trace_agent_strategy_time",
            ),
            models.Index(fields=["status", "-occurred_at"], name="trace_status_time"),
            # Cheap block-range indexes for the time-driven jobs (retention, rollups):
            # both columns grow with insertion order, and BRIN costs almost nothing to keep.
            BrinIndex(fields=["occurred_at"], name="trace_occurred_brin"),
            BrinIndex(fields=["received_at"], name="trace_received_brin"),
            # The candidate search: a common kind is found walking newest first and checking
            # each row's kinds (stops after a page); a rare one off the GIN index.
            models.Index(fields=["-occurred_at", "-id"], name="trace_time_id"),
            GinIndex(fields=["kinds"], name="trace_kinds"),
        ]

    def __str__(self) -> str:
        return self.request_id

    @property
    def has_snapshot(self) -> bool:
        return self.snapshot_expires_at is not None


class CandidateKind(models.Model):
    """A kind of candidate — its (source, decision, reason), selected or not — numbered
    for the traces' `kinds` arrays (docs/capacity.md). Reasons are free text: a number from a
    table, not a hash of them, so thousands of kinds never collide. Rows are only added."""

    id = models.AutoField(primary_key=True)  # int4: what `Trace.kinds` holds
    source = models.CharField(max_length=100, db_collation="C")
    decision = models.CharField(max_length=30, db_collation="C")
    reason = models.CharField(max_length=200, db_collation="C")

    class Meta:
        db_table = "traces_candidate_kind"
        constraints = [
            models.UniqueConstraint(fields=["source", "decision", "reason"], name="candidate_kind")
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.decision}: {self.reason}"


class RequestKey(models.Model):
    """A request_id is unique per environment: the ingest's ON CONFLICT target.

    Not partitioned (traces are, by occurred_at, which a unique index there would have to
    include); purged with the traces' retention. docs/traces-storage.md.
    """

    pk = models.CompositePrimaryKey("environment_id", "request_id")
    environment_id = models.BigIntegerField()
    request_id = models.CharField(max_length=200, db_collation="C")
    trace_id = models.BigIntegerField()
    occurred_at = models.DateTimeField()

    class Meta:
        db_table = "traces_request_key"
        indexes = [BrinIndex(fields=["occurred_at"], name="request_key_occurred_brin")]

    def __str__(self) -> str:
        return self.request_id


class Snapshot(models.Model):
    """The full final request of a trace: sensitive, encrypted at rest, gone after expiry."""

    # No database FK: a FK to a partitioned table needs its whole key (id, occurred_at).
    trace = models.OneToOneField(
        Trace, on_delete=models.CASCADE, related_name="snapshot", db_constraint=False
    )
    ciphertext = models.BinaryField()
    key_id = models.CharField(max_length=16, help_text="Fingerprint of the encrypting key.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"snapshot of trace {self.trace_id}"


class HourlyRollup(models.Model):
    """Counts per closed hour, so charts never scan traces.

    Trace rows have source = decision = reason = "" (count = traces with that status);
    candidate rows carry their source, decision and reason (count = candidates). Recomputed per hour by
    `traces.rollup_recent_hours`, idempotently.
    """

    hour = models.DateTimeField()
    agent = models.ForeignKey("strategies.Agent", on_delete=models.CASCADE, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+"
    )
    strategy = models.CharField(max_length=100, blank=True)
    strategy_version = models.PositiveIntegerField(default=0, help_text="0: none reported.")
    status = models.CharField(max_length=30)
    source = models.CharField(max_length=100, blank=True)
    decision = models.CharField(max_length=30, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    count = models.PositiveBigIntegerField()

    class Meta:
        ordering = ["-hour"]
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "hour",
                    "agent",
                    "environment",
                    "strategy",
                    "strategy_version",
                    "status",
                    "source",
                    "decision",
                    "reason",
                ],
                name="rollup_unique_key_by_source",
            )
        ]
        indexes = [models.Index(fields=["agent", "-hour"], name="rollup_agent_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.status}/{self.decision}: {self.count}"


# --- issue 34.4, personal data kept out of traces (traces.redaction, traces.protection;
# docs/data-protection.md): an environment's redaction rules and the receipts of erasures.
class RedactionRule(models.Model):
    class Detector(models.TextChoices):
        CARD = "card", "Payment card number (Luhn)"
        IBAN = "iban", "IBAN (mod 97)"
        EMAIL = "email", "E-mail address"
        PHONE = "phone", "Phone number"
        NRIC = "nric", "Singapore NRIC/FIN"
        CUSTOM = "custom", "Custom pattern"

    class Action(models.TextChoices):
        REDACT = "redact", "Redact (keep a marker and the count)"
        REFUSE = "refuse", "Refuse the item"

    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+"
    )
    key = models.SlugField(max_length=50, help_text="The marker's name: [redacted:<key>].")
    detector = models.CharField(max_length=10, choices=Detector.choices)
    pattern = models.TextField(blank=True, help_text="A custom rule's regular expression.")
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.REDACT)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["environment", "key"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "key"], name="redaction_rule_key")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.detector}, {self.action})"


class Erasure(models.Model):
    """The receipt of one erasure by principal. Names the principal only by its digest, so
    the receipt itself does not keep what was erased."""

    principal_digest = models.CharField(max_length=64, help_text="SHA-256 of the principal.")
    reference = models.CharField(max_length=200, help_text="The data-protection request's id.")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    counts = models.JSONField(default=dict, help_text="Table → rows removed.")
    removed = models.JSONField(default=dict, help_text="Table → ids removed.")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"erasure {self.pk} ({self.reference})"
