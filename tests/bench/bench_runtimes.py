"""The releases page's Runtimes card (issue 31, item 2): polled every 3 s by every open
releases page, with 10 runtimes (the baseline, measured in the same run), 2,000 (what made the
card take 1.4–3.2 s and 1.36 MiB before it counted in SQL) and 10,000. A script, not a test:

    python -m tests.bench.bench_runtimes [--sizes 10,2000,10000] [--runs 30]

Runs against a separate database (bench_runtimes, created and dropped here) on the server of
DATABASE_URL. One agent with its live configuration in sg-test; the runtimes are inserted with
SQL as heartbeats leave them: 90 % serving what is live, 6 % on an older configuration
(lagging), 3 % stopped a minute ago, 1 % unheard for 5 minutes. Times, in process with
Django's test client and in turn (one agent per size), the card as htmx asks for it (the whole
view: middleware, policy, queries, template) and the heartbeat of a live runtime and of a new
one (counted under the token's lock), printing median and p95 in ms, the bytes and the queries
of the card, and the ratio to the 10-runtime baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from tests.bench._database import BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_RUNTIMES_DB", "bench_runtimes")
AGENT = "assistant_professional"

_FILL = """
INSERT INTO strategies_runtimeinstance
    (environment_id, agent_id, instance, token_id, sdk_version, runtime, transport, resolution,
     etag, documents, serving_since, first_seen, last_seen)
SELECT %(environment)s, %(agent)s, 'pod-' || i, %(token)s, '0.2.0', 'bench 1.0',
       CASE WHEN i %% 100 BETWEEN 96 AND 98 THEN 'stopped' ELSE 'stream' END, 'fresh',
       CASE WHEN i %% 100 BETWEEN 90 AND 95 THEN '"r1-old"' ELSE %(live)s END,
       '{"profile": 1, "after_sales_consultation": 3}'::jsonb, now(), now(),
       CASE WHEN i %% 100 BETWEEN 96 AND 98 THEN now() - interval '1 minute'
            WHEN i %% 100 = 99 THEN now() - interval '5 minutes' ELSE now() END
FROM generate_series(1, %(count)s) AS i
"""


def interleaved(calls: dict, runs: int) -> dict[str, tuple[float, float]]:
    """Median and p95 (ms) of each call, run in turn so that a busy moment of the machine
    weighs on every size alike (the baseline is measured in the same run, beside the others)."""
    samples: dict = {name: [] for name in calls}
    for fn in calls.values():
        fn()  # warm: the first call pays for imports and plans
    for _ in range(runs):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1000)
    result = {}
    for name, values in samples.items():
        values.sort()
        result[name] = (statistics.median(values), values[max(0, int(len(values) * 0.95) - 1)])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,2000,10000")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    try:
        database.create()
        django_setup(database.url)
        from django.db import connection
        from django.test import Client

        from strategies.delivery.models import ConfigPayload
        from strategies.releases.services import release_publish
        from strategies.runtime.auth import token_hash
        from strategies.runtime.models import RuntimeInstance, RuntimeToken
        from tests.factories import AgentFactory, bearer, release_setup, runtime_token

        world = release_setup()
        sg_test = world.envs["sg-test"]
        release_publish(version=world.profile[1], environment=sg_test, actor=world.ops)
        release_publish(version=world.strategy[3], environment=sg_test, actor=world.ops)
        payload = ConfigPayload.objects.get(agent=world.agent, environment=sg_test)
        token = RuntimeToken.objects.get(token_hash=token_hash(runtime_token(sg_test)))
        # One agent per size, each with the same live configuration in sg-test: the cards are
        # timed in turn, so each size meets the same load on the machine.
        agents = {}
        for size in sizes:
            agent = AgentFactory(key=f"bench_{size}")
            ConfigPayload.objects.create(
                agent=agent, environment=sg_test, etag=payload.etag, body=payload.body
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    _FILL,
                    {
                        "environment": sg_test.pk,
                        "agent": agent.pk,
                        "token": token.pk,
                        "live": payload.etag,
                        "count": size,
                    },
                )
            agents[size] = agent
        # A fleet of 250 live runtimes of another token that heartbeat (the bound's count).
        secret = runtime_token(sg_test)
        fleet = RuntimeToken.objects.get(token_hash=token_hash(secret))
        with connection.cursor() as cursor:
            cursor.execute(
                _FILL.replace("'pod-'", "'fleet-'").replace("i %% 100", "0"),
                {
                    "environment": sg_test.pk,
                    "agent": world.agent.pk,
                    "token": fleet.pk,
                    "live": payload.etag,
                    "count": 250,
                },
            )
            cursor.execute("ANALYZE strategies_runtimeinstance")
        client = Client()
        client.force_login(world.admin)
        served = {"etag": payload.etag, "documents": {"profile": 1}, "resolution": "fresh"}

        def card(size: int):
            response = client.get(f"/releases/{agents[size].key}/runtimes/", HTTP_HX_REQUEST="true")
            assert response.status_code == 200, response.status_code
            return response

        def heartbeat(instance: str):
            body = {"instance": instance, "sdk_version": "0.2.0", "transport": "stream"}
            response = client.post(
                "/api/v1/runtime/heartbeat",
                data=json.dumps({**body, "agents": {AGENT: served}}),
                content_type="application/json",
                **bearer(secret),
            )
            assert response.status_code == 200, response.content
            RuntimeInstance.objects.filter(instance__startswith="new-").delete()

        calls = {f"card {size}": (lambda size=size: card(size)) for size in sizes}
        calls["heartbeat, a live runtime"] = lambda: heartbeat("fleet-7")
        calls["heartbeat, a new runtime"] = lambda: heartbeat("new-1")
        timings = interleaved(calls, args.runs)
        baseline = timings[f"card {sizes[0]}"][0]
        print(
            "\nthe Runtimes card of one agent (GET /releases/<agent>/runtimes/, HX-Request, the "
            f"whole view), {args.runs} runs each, in turn:"
        )
        for size in sizes:
            queries = []

            def count(execute, sql, params, many, context, queries=queries):
                queries.append(sql)
                return execute(sql, params, many, context)

            with connection.execute_wrapper(count):
                response = card(size)
            summary = response.content.decode().split("data-summary>", 1)[1].split("<", 1)[0]
            median, p95 = timings[f"card {size}"]
            print(
                f"  {size:>6,} runtimes: median {median:6.1f} ms, p95 {p95:6.1f} ms "
                f"({median / baseline:4.2f}× the {sizes[0]}-runtime card), "
                f"{len(response.content) / 1024:5.1f} KiB, {len(queries)} queries — “{summary}”"
            )
        print("heartbeats of a token with 250 live runtimes:")
        for name in ("heartbeat, a live runtime", "heartbeat, a new runtime"):
            median, p95 = timings[name]
            print(f"  {name[11:]:<15} median {median:5.1f} ms, p95 {p95:5.1f} ms")
    finally:
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
