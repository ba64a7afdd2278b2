"""Browser journey: ops downloads the agent's configuration from its page, raises a budget in
the file (to go live in sg-test), uploads it, reads the dry run's plain-English change and
check against sg-test's runtime, applies it and finds the new version, live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strategies.documents.models import Version
from tests.factories import STRATEGY_KEY, publish, release_setup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"config-{name}.png"), full_page=True)


def test_config_as_code__download_edit_upload_dry_run_apply__new_version(
    page, login, live_server, tmp_path
):
    world = release_setup()
    publish(world.strategy[3], world.envs["sg-test"], actor=world.ops)
    login("ops", "ops-pass-1")
    page.goto(f"{live_server.url}/agents/assistant_professional/strategies/")

    # Export: the header link downloads one file
    with page.expect_download() as info:
        page.click("#config-export")
    download = info.value
    assert download.suggested_filename == "assistant_professional.config.json"
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    data = json.loads(path.read_text())

    # Change the file: the latest strategy version gets a larger budget, as a new version
    strategy = next(d for d in data["documents"] if d["key"] == STRATEGY_KEY)
    new = json.loads(json.dumps(strategy["versions"][-1]))
    new.update(number=4, note="More room for the policy")
    new["body"]["budget"]["max_input_tokens"] = 9000
    strategy["versions"].append(new)
    data["live"]["sg-test"][STRATEGY_KEY] = 4
    path.write_text(json.dumps(data, indent=2))

    # Upload it: the dry run shows the change in words and writes nothing
    page.click("#config-import")
    page.set_input_files("#id_file", str(path))
    page.click("#upload-form button[type=submit]")
    plan = page.locator("#import-plan")
    plan.wait_for()
    assert "New version v4" in plan.inner_text()
    change = plan.locator("[data-version='4'] tr[data-path='budget.max_input_tokens']")
    assert "9000" in change.inner_text() and "8000" in change.inner_text()
    sg_test = plan.locator(f"li[data-release='sg-test/{STRATEGY_KEY}']")
    assert "v3 → v4" in sg_test.inner_text() and "published" in sg_test.inner_text()
    assert "The runtime implements everything" in sg_test.inner_text()
    shot(page, "dry-run")
    assert not Version.objects.filter(document__key=STRATEGY_KEY, number=4).exists()

    # Apply: the new version is there, frozen, with the file's note
    page.click("#apply-form button[type=submit]")
    page.wait_for_selector("#import-applied")
    assert "v4 is live in sg-test" in page.inner_text("#import-outcome")
    shot(page, "applied")
    page.click(f"#import-outcome >> text={STRATEGY_KEY} v4")
    page.wait_for_url(f"**/documents/{STRATEGY_KEY}/versions/4/")
    assert "More room for the policy" in page.inner_text("main")
    version = Version.objects.get(document__key=STRATEGY_KEY, number=4)
    assert version.state == "frozen" and version.body["budget"]["max_input_tokens"] == 9000
