"""Erase a principal's traces, snapshots and outcomes for a data-protection request:
`manage.py erase_principal --principal shop-a/user-417 --reference DPO-2026-17 --as admin`.

The same service as the page and the API (traces.protection.services.principal_erase):
audited as the named user, who needs the data-protection capability; prints the receipt (JSON)
or writes it to --receipt."""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.kernel.errors import ApplicationError
from traces.protection import services


class Command(BaseCommand):
    help = "Erase every trace, snapshot and outcome of one principal; print the receipt."

    def add_arguments(self, parser):
        parser.add_argument("--principal", required=True)
        parser.add_argument("--reference", required=True, help="The request's reference.")
        parser.add_argument("--as", dest="username", required=True, help="Who asks (audited).")
        parser.add_argument("--receipt", help="Write the receipt to this file.")

    def handle(self, *args, principal, reference, username, receipt=None, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user {username!r}.")
        try:
            erasure = services.principal_erase(principal=principal, reference=reference, actor=user)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        text = json.dumps(services.erasure_receipt(erasure), indent=2)
        if receipt:
            with open(receipt, "w", encoding="utf-8") as out:
                out.write(text + "\n")
            self.stdout.write(f"Erasure {erasure.pk}: receipt written to {receipt}")
        else:
            self.stdout.write(text)
