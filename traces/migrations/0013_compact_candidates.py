"""Issue 36: a trace's candidates move into its row — one compact value (`traces.compact`)
and the numbers of its kinds of candidate (`traces_candidate_kind`, GIN-indexed) — and the
candidate table goes: ≈ 2 KB a 50-candidate trace instead of ≈ 11.7 KB (docs/capacity.md).

The conversion runs here, in the migration's transaction, a chunk of traces at a time: fine
for new and small installations. A large one converts day by day off-peak as
docs/capacity.md § Migration plan says (a new partition per day, filled, swapped in), then
runs `migrate --fake traces 0013`.
"""

import json

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
from django.db import migrations, models

CHUNK = 2_000
# A frozen copy of the old rows' mapping to the wire (traces.replay.wire_candidate as it was):
# the old table kept "" where the runtime sent none.
_CANDIDATES = """
SELECT trace_id, item_id, source, decision, version, size, required, bundle, reason, outcome,
       relevance, depends_on, conflicts_with, note, provider_bundle, reason_code
FROM traces_candidate
WHERE trace_id = ANY(%s) AND occurred_at >= %s AND occurred_at <= %s
ORDER BY trace_id, position
"""


def _ids(value) -> tuple:
    # Django's PostgreSQL connection reads jsonb as its text (JSONField decodes it itself).
    return tuple((json.loads(value) if isinstance(value, str) else value) or ())


def _wire(row):
    from context_runtime import wire

    (_, item_id, source, decision, version, size, required, bundle, reason, outcome,
     relevance, depends_on, conflicts_with, note, provider_bundle, reason_code) = row  # fmt: skip
    return wire.Candidate(
        id=item_id,
        source=source,
        decision=decision,
        version=version,
        size=size,
        required=required,
        bundle=bundle or None,
        reason=reason,
        outcome=outcome or None,
        relevance=relevance,
        depends_on=_ids(depends_on),
        conflicts_with=_ids(conflicts_with),
        note=note,
        provider_bundle=provider_bundle or None,
        reason_code=reason_code or None,
    )


def _number(cursor, numbers: dict, kinds) -> None:
    for kind in sorted(set(kinds) - numbers.keys()):
        cursor.execute(
            "INSERT INTO traces_candidate_kind (source, decision, reason) VALUES (%s, %s, %s) "
            "ON CONFLICT (source, decision, reason) DO UPDATE SET source = EXCLUDED.source "
            "RETURNING id",
            list(kind),
        )
        numbers[kind] = cursor.fetchone()[0]


def convert(apps, schema_editor):
    from traces import compact  # format 1 stays readable for as long as values carry it

    numbers: dict = {}
    with schema_editor.connection.cursor() as cursor:
        after = None
        while True:
            cursor.execute(
                "SELECT id, occurred_at FROM traces_trace"
                + (" WHERE (occurred_at, id) > (%s, %s)" if after else "")
                + " ORDER BY occurred_at, id LIMIT %s",
                [*(after or ()), CHUNK],
            )
            keys = cursor.fetchall()
            if not keys:
                return
            after = keys[-1][1], keys[-1][0]  # (occurred_at, id): the order of the paging
            cursor.execute(_CANDIDATES, [[k[0] for k in keys], keys[0][1], keys[-1][1]])
            by_trace: dict = {}
            for row in cursor.fetchall():
                by_trace.setdefault(row[0], []).append(_wire(row))
            updates = []
            for trace_id, occurred_at in keys:
                candidates = by_trace.get(trace_id, [])
                kinds = compact.kinds(candidates)
                _number(cursor, numbers, kinds)
                updates.append(
                    (compact.encode(candidates), [numbers[k] for k in kinds], trace_id, occurred_at)
                )
            cursor.executemany(
                "UPDATE traces_trace SET packed_candidates = %s, kinds = %s "
                "WHERE id = %s AND occurred_at = %s",
                updates,
            )


class Migration(migrations.Migration):
    dependencies = [
        ("strategies", "0020_schedules_and_freezes"),
        ("traces", "0012_data_protection"),
    ]

    operations = [
        migrations.CreateModel(
            name="CandidateKind",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("source", models.CharField(db_collation="C", max_length=100)),
                ("decision", models.CharField(db_collation="C", max_length=30)),
                ("reason", models.CharField(db_collation="C", max_length=200)),
            ],
            options={"db_table": "traces_candidate_kind"},
        ),
        migrations.AddConstraint(
            model_name="candidatekind",
            constraint=models.UniqueConstraint(
                fields=("source", "decision", "reason"), name="candidate_kind"
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="kinds",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.IntegerField(), blank=True, default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="packed_candidates",
            field=models.BinaryField(default=bytes, help_text="traces.compact.encode."),
        ),
        # A request_id is found through traces_request_key (its trace id and day), then the
        # trace by primary key: this index was ≈ 45 B a trace that no read used any more.
        migrations.RemoveIndex(model_name="trace", name="trace_request_id_env"),
        migrations.RunPython(convert, migrations.RunPython.noop, elidable=False),
        migrations.DeleteModel(name="Candidate"),
        migrations.AddIndex(
            model_name="trace",
            index=models.Index(fields=["-occurred_at", "-id"], name="trace_time_id"),
        ),
        migrations.AddIndex(
            model_name="trace",
            index=django.contrib.postgres.indexes.GinIndex(fields=["kinds"], name="trace_kinds"),
        ),
    ]
