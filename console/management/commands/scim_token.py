"""SCIM tokens from the command line (issue 33; console.accounts.scim), for the first setup of
an identity provider's provisioning. The person named by --by is the actor: they need what
the Provisioning page asks (manage access on all agents, and every role the provider's
mappings grant), and the audit names them.

manage.py scim_token create --provider okta --name "Okta production" --by alice
manage.py scim_token list
manage.py scim_token revoke --provider okta --name "Okta production" --by alice
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.accounts.models import ScimToken
from console.accounts.scim import provider_configured, scim_token_create, scim_token_revoke
from console.kernel.errors import ApplicationError


class Command(BaseCommand):
    help = "Create (prints the secret once), list or revoke SCIM tokens."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for action in ("create", "revoke"):
            each = sub.add_parser(action)
            each.add_argument("--provider", required=True, help="The provider's key.")
            each.add_argument("--name", required=True)
            each.add_argument("--by", required=True, help="Your username (the audit's actor).")
        sub.add_parser("list", help="List tokens (never secrets).")

    def handle(self, *args, **options):
        try:
            getattr(self, f"_{options['action']}")(options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    def _actor(self, options):
        actor = get_user_model().objects.filter(username=options["by"], is_active=True).first()
        if actor is None:
            raise CommandError(f"No active account named {options['by']!r}.")
        return actor

    def _create(self, options):
        token, secret = scim_token_create(
            actor=self._actor(options), provider=options["provider"], name=options["name"]
        )
        if not provider_configured(token.provider):
            self.stderr.write(
                f"Note: {token.provider} is not a configured identity provider (yet)."
            )
        self.stderr.write(f"Created SCIM token '{token.name}' for {token.provider}. Shown once:")
        self.stdout.write(secret)

    def _revoke(self, options):
        token = ScimToken.objects.filter(
            provider=options["provider"], name=options["name"], revoked_at__isnull=True
        ).first()
        if token is None:
            raise CommandError("No unrevoked SCIM token of that provider and name.")
        scim_token_revoke(actor=self._actor(options), token=token)
        self.stderr.write(f"Revoked SCIM token '{token.name}' of {token.provider}.")

    def _list(self, options):
        for t in ScimToken.objects.all():
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
            self.stdout.write(f"{t.provider:<20} {t.prefix}…  {state:<24} used {used:<16} {t.name}")
