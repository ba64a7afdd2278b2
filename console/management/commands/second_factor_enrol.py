"""Give a local account an authenticator app (TOTP) and ten recovery codes from the
operator's shell, printed once: the way a break-glass account gets its first factor when
single sign-on is already enforced (it cannot sign in to enrol one on its account page).
Replaces any app the account had; audited (`second_factor.enrol`)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.accounts.second_factors import totp_enrol_by_operator, totp_secret, totp_uri
from console.kernel.errors import ApplicationError


class Command(BaseCommand):
    help = (
        "Enrol an authenticator app and recovery codes for a local account (e.g. a "
        "break-glass account under enforced single sign-on); prints the key, its otpauth:// "
        "address and the codes once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        try:
            device, codes = totp_enrol_by_operator(user=user)
        except ApplicationError as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"Authenticator app for {username} (shown once, give it to them only):")
        self.stdout.write(f"  key:     {totp_secret(device)}")
        self.stdout.write(f"  address: {totp_uri(device)}")
        self.stdout.write("Recovery codes (each signs in once):")
        for code in codes:
            self.stdout.write(f"  {code}")
