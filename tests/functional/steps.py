"""Steps several browser journeys take the same way."""

from __future__ import annotations

import re


def run_impact_preview(page, *, agent: str, document: str, version: int, environment: str):
    """On the strategy page, Preview impact of `version` on `environment`'s traffic; returns
    once the report is shown (the progress card is polled by htmx until the worker is done)."""
    page.goto(f"/agents/{agent}/documents/{document}/")
    page.click("#preview-impact")
    page.select_option("#preview-version", str(version))
    page.select_option("#preview-environment", environment)
    page.click("#preview-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/previews/\d+/$"))
    page.wait_for_selector('#preview-body[data-state="complete"]', timeout=60_000)
