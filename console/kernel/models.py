"""The data every job reads through the kernel: roles and grants (console.kernel.policy
decides with them), the audit log and the access log, and the checkpoints of their heads.

Both logs are append-only (a trigger refuses UPDATE, DELETE and TRUNCATE) and hash-chained:
each row stores the hash of the previous row, so `manage.py audit_verify` finds an edit
made with the trigger disabled; checkpoints of each chain's head (append-only too) make a
deleted tail visible.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.db import connection, models
from django.db.models import Q

from console.kernel.guards import append_only_triggers
from console.kernel.wording import counted


class Role(models.Model):
    """A named set of capabilities (see console.kernel.policy.Capability). New roles have none."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    capabilities = ArrayField(models.CharField(max_length=50), default=list, blank=True)
    is_standard = models.BooleanField(
        default=False, help_text="Created by migration; cannot be deleted."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GroupMapping(models.Model):
    """A group at an identity provider → a role, on all agents or on named agents (issue 33).
    The grants it makes (Grant.mapping) follow the person's groups: added and removed at each
    sign-in through that provider (console.access.group_mappings.groups_sync), never by hand."""

    provider = models.CharField(
        max_length=50, help_text="The provider's key (OIDC_PROVIDERS), as its groups come from."
    )
    group = models.CharField(max_length=200, help_text="The group's name as the provider sends it.")
    # A role deleted later (break-glass admin) leaves the mapping pointing at nothing: it then
    # grants nothing, and each sign-in that meets it says so in the audit log.
    role = models.ForeignKey(
        Role, null=True, blank=True, on_delete=models.SET_NULL, related_name="group_mappings"
    )
    role_name = models.CharField(max_length=100, help_text="The role's name when mapped.")
    # "Every agent" is this flag, never an empty set (as for personal tokens).
    all_agents = models.BooleanField(default=False)
    agents = models.ManyToManyField("strategies.Agent", blank=True, related_name="group_mappings")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider", "group", "role_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "group", "role"], name="group_mapping_unique_role"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} group {self.group} → {self.role_name}"


ROLE_NAMES_CACHE_ATTR = "_console_role_names_cache"


def role_labels(rows) -> tuple[str, ...]:
    """ "role@agent" labels ("role@*" on all agents), sorted, of (role name, agent key) rows."""
    return tuple(sorted({f"{name}@{agent_key or '*'}" for name, agent_key in rows}))


# `of(user)` with each grant's role and agent, written out: every signed-in page reads it
# first, and the ORM spent about three times the statement's cost building it
# (docs/PERFORMANCE.md). Who may see is read from the primary, always.
_GRANT_ROWS = """
SELECT g.agent_id, r.capabilities, r.name, a.key
FROM console_grant g
JOIN console_role r ON r.id = g.role_id
LEFT JOIN strategies_agent a ON a.id = g.agent_id
WHERE g.user_id = %(user)s
   OR g.group_id IN (SELECT group_id FROM auth_user_groups WHERE user_id = %(user)s)
"""


class GrantQuerySet(models.QuerySet):
    def of(self, user):
        """The grants a user holds, directly or through one of their groups."""
        return self.filter(Q(user=user) | Q(group__in=user.groups.all()))

    def rows_of(self, user) -> list[tuple[int | None, list[str], str, str | None]]:
        """(agent id or None, role capabilities, role name, agent key or None) of each grant
        `of(user)`."""
        with connection.cursor() as cursor:
            cursor.execute(_GRANT_ROWS, {"user": user.pk})
            return cursor.fetchall()

    def role_names(self, user, agent=None) -> list[str]:
        """ "role@agent" labels of a user's grants (on an agent, or everywhere), recorded
        with each audit row and shown beside the user's name."""
        if user is None or not user.is_authenticated:
            return []
        grants = self.of(user)
        if agent is not None:
            grants = grants.filter(Q(agent=agent) | Q(agent__isnull=True))
            return list(role_labels(grants.values_list("role__name", "agent__key")))
        # Everywhere's are cached on the user object for the request, like its grants (policy,
        # which fills this too): a page's header and its audit row both name them.
        # forget_cached_grants drops it.
        names = getattr(user, ROLE_NAMES_CACHE_ATTR, None)
        if names is None:
            names = role_labels(grants.values_list("role__name", "agent__key"))
            setattr(user, ROLE_NAMES_CACHE_ATTR, names)
        return list(names)


class Grant(models.Model):
    """(user or group) × role × (one agent, or all agents when agent is empty)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="grants",
    )
    group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.CASCADE, related_name="grants"
    )
    role = models.ForeignKey(Role, on_delete=models.PROTECT, related_name="grants")
    agent = models.ForeignKey(
        "strategies.Agent", null=True, blank=True, on_delete=models.CASCADE, related_name="grants"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Set: the grant comes from a group mapping and follows the group (not editable by hand).
    mapping = models.ForeignKey(
        GroupMapping, null=True, blank=True, on_delete=models.CASCADE, related_name="grants"
    )

    objects = GrantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False) & Q(group__isnull=True))
                | (Q(user__isnull=True) & Q(group__isnull=False)),
                name="grant_user_xor_group",
            ),
            # One grant by hand per user × role × agent, and one per mapping: a person keeps a
            # role given by hand when the group that also gave it is gone.
            models.UniqueConstraint(
                fields=["user", "role", "agent", "mapping"],
                name="grant_unique_user",
                nulls_distinct=False,
                condition=Q(user__isnull=False),
            ),
            models.UniqueConstraint(
                fields=["group", "role", "agent"],
                name="grant_unique_group",
                nulls_distinct=False,
                condition=Q(group__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        who = self.user or f"group {self.group}"
        return f"{who}: {self.role} on {self.agent or 'all agents'}"

    @property
    def is_mapped(self) -> bool:
        return self.mapping_id is not None


class ChainedRecord(models.Model):
    """Fields shared by the two append-only, hash-chained logs."""

    occurred_at = models.DateTimeField()
    actor_type = models.CharField(max_length=20)  # user | token | system | anonymous
    actor_id = models.CharField(max_length=64, blank=True)
    actor_label = models.CharField(max_length=200, blank=True)
    actor_roles = models.JSONField(default=list, blank=True)
    # A user acting through a personal API token: the token's id and name ("" otherwise).
    # Hashed only when set, so rows written before these columns still verify.
    actor_token_id = models.CharField(max_length=64, blank=True, default="")
    actor_token_label = models.CharField(max_length=200, blank=True, default="")
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=200, blank=True)
    target_label = models.CharField(max_length=300, blank=True)
    agent_key = models.CharField(max_length=100, blank=True, db_index=True)
    # The id of the agent the row was written for, stored at write time and never a foreign
    # key: the row outlives its agent, and a new agent that takes the key is another agent.
    # Empty for console-wide rows and for rows written before this column (hashed only when
    # set, so those still verify).
    agent_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    request_id = models.CharField(max_length=100, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        abstract = True
        ordering = ["-id"]
        # Append-only in the database: no session setting switches these off (see Guard).
        triggers = append_only_triggers()


class AuditRecord(ChainedRecord):
    """One change: who, in which roles, did what to what, with before/after."""

    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    changes = models.JSONField(
        default=list, blank=True, help_text="Field-level: [{path, before, after}]"
    )

    class Meta(ChainedRecord.Meta):
        indexes = [
            models.Index(fields=["agent_key", "-occurred_at"]),
            models.Index(fields=["actor_label", "-occurred_at"]),
            models.Index(fields=["action", "-occurred_at"]),
            models.Index(fields=["target_type", "target_id"]),
        ]

    def __str__(self) -> str:
        return f"{self.occurred_at:%Y-%m-%d %H:%M} {self.actor_label} {self.action} {self.target_label}"


class AccessLogEntry(ChainedRecord):
    """One look at sensitive data (trace view, search, snapshot view, export) or a refusal."""

    outcome = models.CharField(max_length=20, default="allowed")  # allowed | denied
    reason = models.TextField(blank=True, help_text="The reason typed for a snapshot view.")
    detail = models.JSONField(default=dict, blank=True)

    class Meta(ChainedRecord.Meta):
        indexes = [
            models.Index(fields=["agent_key", "-occurred_at"]),
            models.Index(fields=["actor_label", "-occurred_at"]),
            models.Index(fields=["action", "-occurred_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.occurred_at:%Y-%m-%d %H:%M} {self.actor_label} {self.action} {self.target_label}"


class ChainCheckpoint(models.Model):
    """The head of one log's hash chain at a moment: its last row's id and hash and how many
    rows the chain had up to it. Written every AUDIT_CHECKPOINT_MINUTES by the
    `console.chain_checkpoint` task (which also writes the head to the application log), and
    append-only like the logs: `audit_verify` refuses a chain that no longer reaches its
    checkpoints, so deleting the newest rows of a log is no longer silent."""

    class Log(models.TextChoices):
        AUDIT = "audit", "audit log"
        ACCESS = "access", "access log"

    log = models.CharField(max_length=20, choices=Log.choices)
    last_id = models.BigIntegerField(help_text="The chain's newest row (0: the log was empty).")
    last_hash = models.CharField(max_length=64)
    row_count = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["log", "-id"])]
        triggers = append_only_triggers()

    def __str__(self) -> str:
        return f"{self.get_log_display()} @ #{self.last_id} ({counted(self.row_count, 'row')})"


# --- the audit and access logs streamed to a SIEM (issue 34 item 3, console.access.siem) --------
class SiemDestination(models.Model):
    """Where the console streams its audit and access logs (docs/siem.md): a syslog receiver
    (RFC 5424 over TCP, TLS when `tcp+tls://`), a Splunk HTTP Event Collector or an
    OpenTelemetry logs endpoint (OTLP/HTTP JSON). Its credential is stored encrypted
    (traces.crypto, the snapshot keys) and never shown again; each chain has its own cursor
    (SiemCursor)."""

    class Protocol(models.TextChoices):
        SYSLOG = "syslog", "Syslog (RFC 5424 over TCP)"
        SPLUNK_HEC = "splunk_hec", "Splunk HTTP Event Collector"
        OTLP_HTTP = "otlp_http", "OpenTelemetry logs (OTLP/HTTP JSON)"

    class Status(models.TextChoices):
        ACTIVE = "active", "streaming"
        PAUSED = "paused", "paused"

    name = models.CharField(max_length=100, unique=True)
    protocol = models.CharField(max_length=20, choices=Protocol.choices)
    url = models.CharField(
        max_length=500,
        help_text="syslog: tcp://host:port or tcp+tls://host:port; the others: an http(s) URL.",
    )
    ca_certificate = models.TextField(
        blank=True,
        default="",
        help_text="PEM: the CA a TLS syslog receiver's certificate is checked against.",
    )
    credential_encrypted = models.BinaryField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    paused_reason = models.TextField(blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0, help_text="Tries failed in a row.")
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_protocol_display()})"


class SiemCursor(models.Model):
    """How far one destination has been sent one chain: the last row (and chain checkpoint)
    the sink accepted. Advanced only after the sink accepted a batch, in a transaction of its
    own (console.access.siem.cursor_advance)."""

    destination = models.ForeignKey(
        SiemDestination, on_delete=models.CASCADE, related_name="cursors"
    )
    chain = models.CharField(max_length=10, choices=ChainCheckpoint.Log.choices)
    last_id = models.BigIntegerField(default=0)
    last_checkpoint_id = models.BigIntegerField(default=0)
    sent = models.BigIntegerField(default=0, help_text="Events accepted by the sink so far.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["destination", "chain"], name="siem_cursor_one_per_chain"
            )
        ]

    def __str__(self) -> str:
        return f"{self.destination_id}/{self.chain} @ #{self.last_id}"


def agent_model():
    """The agent model, as the grants name it ("strategies.Agent"): the kernel is the ground
    floor and imports no job's models; it reaches the agents through its own grants' relation
    (as Django's auth reaches the user model through AUTH_USER_MODEL)."""
    return Grant._meta.get_field("agent").related_model
