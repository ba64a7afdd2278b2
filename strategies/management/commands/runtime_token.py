"""Runtime tokens from the command line, for bootstrapping and automation.

manage.py runtime_token create --environment prod [--agent A ...] [--capability C ...] [--name N]
manage.py runtime_token list
manage.py runtime_token revoke <prefix or id>
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q
from django.utils.translation import ngettext

from console.kernel.errors import ApplicationError
from strategies.catalog.models import Agent, Environment
from strategies.runtime.models import RuntimeToken
from strategies.runtime.selectors import tokens_list
from strategies.runtime.tokens import runtime_token_create, runtime_token_revoke


class Command(BaseCommand):
    help = "Create (prints the secret once), list or revoke runtime tokens."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a token and print its secret once.")
        create.add_argument("--environment", required=True)
        create.add_argument("--agent", action="append", default=[], help="Repeat; none = all.")
        create.add_argument(
            "--capability",
            action="append",
            default=[],
            help="config:read, manifest:write, traces:write, outcomes:write (repeat); default config:read.",
        )
        create.add_argument("--name", default="")
        sub.add_parser("list", help="List tokens (never secrets).")
        revoke = sub.add_parser("revoke", help="Revoke a token by id or prefix.")
        revoke.add_argument("token", help="The token's id or its prefix (cc_rt_xxxxxx).")

    def handle(self, *args, **options):
        try:
            getattr(self, f"_{options['action']}")(options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    def _create(self, options):
        environment = Environment.objects.filter(key=options["environment"]).first()
        if environment is None:
            known = ", ".join(Environment.objects.values_list("key", flat=True))
            raise CommandError(f"Unknown environment '{options['environment']}' (known: {known}).")
        agents = list(Agent.objects.filter(key__in=options["agent"]))
        missing = set(options["agent"]) - {a.key for a in agents}
        if missing:
            raise CommandError(
                f"Unknown {ngettext('agent', 'agents', len(missing))}: {', '.join(sorted(missing))}."
            )
        token, secret = runtime_token_create(
            name=options["name"] or f"{environment.key} runtime (command line)",
            environment=environment,
            capabilities=options["capability"] or ["config:read"],
            all_agents=not agents,  # no --agent: every agent, said explicitly
            agents=agents,
        )
        self.stderr.write(
            f"Created token {token.pk} '{token.name}' for {environment.key} "
            f"({', '.join(token.capabilities)}). The secret is shown once:"
        )
        self.stdout.write(secret)

    def _list(self, options):
        for t in tokens_list():
            agents = "all agents" if t.all_agents else ",".join(a.key for a in t.agents.all())
            agents = agents or "no agent"
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
            self.stdout.write(
                f"{t.pk:>4}  {t.prefix}…  {t.environment.key:<10} {state:<24} used {used:<16} "
                f"{','.join(t.capabilities):<40} {agents}  {t.name}"
            )

    def _revoke(self, options):
        ref = options["token"]
        query = Q(prefix=ref) | (Q(pk=int(ref)) if ref.isdigit() else Q())
        matches = list(RuntimeToken.objects.filter(query))
        if len(matches) != 1:
            raise CommandError(f"No single token matches '{ref}' ({len(matches)} found).")
        token = runtime_token_revoke(token=matches[0], actor=None, reason="manage.py runtime_token")
        self.stdout.write(f"Revoked token {token.pk} ({token.prefix}…).")
