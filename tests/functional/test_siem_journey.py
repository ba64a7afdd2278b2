"""Browser (issue 34 item 3): an admin adds a SIEM destination under Access → SIEM streaming
(a real syslog receiver on loopback), sees it streaming, then — the receiver down — sees the
backlog grow on the page, and sees it drained when the receiver returns."""

from __future__ import annotations

import pytest

from console.access import siem
from console.kernel.models import SiemDestination
from tests.factories import user_with_grants
from tests.functional.layout import LAPTOP, PHONE, layout_faults
from tests.integration.test_siem_streaming import some_rows
from tests.siem_receivers import SyslogReceiver

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_adds_a_destination__sees_it_streaming__then_its_backlog(
    page, login, live_server, settings
):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the receiver is on loopback
    user_with_grants("root", "root-pass-1", admin=None)
    receiver = SyslogReceiver().start()
    try:
        login("root", "root-pass-1")
        page.goto(f"{live_server.url}/access/")
        page.get_by_role("link", name="SIEM streaming").click()
        page.get_by_label("Name").fill("Bank SOC")
        page.get_by_label("Protocol").select_option("syslog")
        page.get_by_label("Address").fill("tcp://10.1.2.3:6514")
        settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
        page.get_by_role("button", name="Add the destination").click()
        assert "does not stream to internal addresses" in page.content()
        assert not SiemDestination.objects.exists()

        settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
        page.get_by_label("Address").fill(receiver.url)
        page.get_by_role("button", name="Add the destination").click()
        page.get_by_text("Added Bank SOC").wait_for()
        destination = SiemDestination.objects.get()

        siem.destination_drain(destination.pk)  # what the beat's task does
        page.reload()
        row = page.locator(f"tr[data-destination='{destination.pk}']")
        assert row.locator("[data-testid=siem-status]").inner_text().startswith("Streaming")
        assert "None: up to date" in row.locator("[data-testid=siem-backlog]").inner_text()
        assert "siem_destination.create" in [e["action"] for e in receiver.received.events]

        receiver.stop()
        some_rows(4)
        siem.destination_drain(destination.pk)
        page.reload()
        assert row.locator("[data-testid=siem-status]").inner_text().startswith("Not accepting")
        backlog = row.locator("[data-testid=siem-backlog]").inner_text()
        assert "9 rows behind" in backlog and "audit log: 5" in backlog
        assert layout_faults(page, PHONE, LAPTOP) == {}

        receiver.start()
        siem.destination_drain(destination.pk)
        page.reload()
        assert "None: up to date" in row.locator("[data-testid=siem-backlog]").inner_text()
    finally:
        receiver.stop()
