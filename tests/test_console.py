"""The review console in a real browser: Debian's Chromium, headless, driven by
Playwright (its own browser builds are never downloaded) against the HTTP API served
by uvicorn on loopback over a real PostgreSQL database.

One browser for the module, one fresh context (so a fresh sessionStorage) per test.
Screenshots of every page at 1280 and 390 px wide go to build/console-screenshots/
(git-ignored); docs/CONSOLE.md shows the 1280 px ones, copied to docs/console/.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from prme_pg import MemoryClient, testing

from .live_server import serve

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parent.parent / "build" / "console-screenshots"
WIDTHS = (1280, 390)
# A fresh profile, no network of its own: nothing but the server under test is reached.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Sums the layout shifts not caused by input (CLS): what "no layout shift" measures.
RECORD_SHIFTS = """
window.__layoutShift = 0;
window.__shifted = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (entry.hadRecentInput) continue;
    window.__layoutShift += entry.value;
    for (const source of entry.sources) window.__shifted.push(source.node ? source.node.outerHTML.slice(0, 120) : "?");
  }
}).observe({ type: "layout-shift", buffered: true });
"""


@dataclass
class Site:
    base: str
    dsn: str
    alice: str
    bob: str
    ids: dict[str, uuid.UUID]
    requested: list[str] = field(default_factory=list)


def _seed(dsn: str) -> dict[str, uuid.UUID]:
    past = datetime.now(UTC) - timedelta(days=100)
    with MemoryClient(dsn) as memory:
        said = memory.add_event("I always indent with tabs", user_id="alice")
        tabs = memory.add_node("Prefers tabs over spaces", user_id="alice", confidence_base="0.6")
        for _ in range(2):
            memory.reinforce(tabs.id, said.id, user_id="alice")
            memory.record_outcome(tabs.id, "explicit_reinforcement", user_id="alice")
        memory.record_outcome(tabs.id, "implicit_success", user_id="alice", notes="used in a code review")
        berlin = memory.add_node("Lives in Berlin", user_id="alice", stability="semi-stable")
        for _ in range(2):
            memory.record_outcome(berlin.id, "explicit_correction", user_id="alice")
        vim = memory.add_node(
            "Uses vim for every edit", user_id="alice", confidence_base="0.9", stability="stable", next_review_at=past
        )
        tampered = memory.add_node("Drinks green tea in the morning", user_id="alice")
        memory.reinforce(tampered.id, user_id="alice")
        memory.reinforce(tampered.id, user_id="alice")
        inbox = memory.link_correction("No, the meeting room is on floor three", [], user_id="alice").inbox_id
        assert inbox is not None
        bobs = memory.add_node("Bob prefers spaces", user_id="bob")
    return {"tabs": tabs.id, "berlin": berlin.id, "vim": vim.id, "tea": tampered.id, "bob": bobs.id, "inbox": inbox}


@pytest.fixture(scope="module")
def site(pg_server: testing.Server, template_db: str) -> Iterator[Site]:
    name = testing.create_database(pg_server, template=template_db)
    dsn = pg_server.dsn_for(name)
    try:
        ids = _seed(dsn)
        with MemoryClient(dsn) as memory:
            alice = memory.create_api_token("alice", label="console test")
            bob = memory.create_api_token("bob")
        with serve(dsn, max_size=4) as base:
            yield Site(base, dsn, alice, bob, ids)
    finally:
        testing.drop_database(pg_server, name)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "Debian's chromium is needed: scripts/install-system-deps installs it"
    playwright: Playwright
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, site: Site) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=site.base)
    context.add_init_script(RECORD_SHIFTS)
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    opened.on("request", lambda request: site.requested.append(request.url))
    yield opened
    context.close()


def sign_in(page: Page, token: str) -> None:
    page.goto("/ui/")
    expect(page).to_have_url(re.compile(r"/ui/(sign-in)?$"))
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/ui/memories$"))
    expect(page.locator("#memory-results table")).to_be_visible()


def shoot(page: Page, name: str) -> None:
    """The page at both widths; at 390 px nothing may stick out sideways."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(50)
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{name} is {overflow}px wider than a {width}px screen"
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def assert_no_layout_shift(page: Page) -> None:
    shift = float(page.evaluate("window.__layoutShift"))
    assert shift == 0, f"layout shift {shift}: {page.evaluate('window.__shifted')}"


def unlabelled_controls(page: Page) -> list[str]:
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll('input, select, button, textarea')]
              .filter((el) => !el.closest('[hidden]'))
              .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                              && !(el.tagName === 'BUTTON' && el.textContent.trim()))
              .map((el) => el.outerHTML)"""
        )
    )


def _superuser(dsn: str, sql: str, *params: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # past the append-only triggers
        conn.execute(sql.encode(), params)


# -- the tests ---------------------------------------------------------------------------


def test_sign_in_by_keyboard_keeps_the_token_in_session_storage_only(page: Page, site: Site) -> None:
    page.goto("/ui/memories")
    expect(page).to_have_url(re.compile(r"/ui/sign-in$"))
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    expect(page.get_by_role("navigation")).to_be_hidden()
    assert unlabelled_controls(page) == []
    shoot(page, "sign-in")

    page.get_by_label("API token").fill("prme.YWxpY2U.not-a-real-secret")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_have_text("That token is not valid.")

    # Keyboard only: the page opens with the cursor in the token field.
    page.reload()
    assert page.evaluate("document.activeElement.id") == "token"
    page.keyboard.type(site.alice)
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/ui/memories$"))
    expect(page.locator("#owner")).to_have_text("Signed in as alice")
    expect(page.locator("#health-ready")).to_have_text("Database: ready")

    storage = page.evaluate("() => ({session: {...sessionStorage}, local: {...localStorage}, cookie: document.cookie})")
    assert list(storage["session"].values()) == [site.alice]
    assert storage["local"] == {} and storage["cookie"] == ""
    assert page.context.cookies() == []
    assert all(site.alice not in url and site.alice.split(".")[2] not in url for url in site.requested)

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/ui/sign-in$"))
    assert page.evaluate("sessionStorage.length") == 0


def test_search_filters_and_never_truncates_ids(page: Page, site: Site) -> None:
    sign_in(page, site.alice)
    rows = page.locator("#memory-results tbody tr")
    expect(rows).to_have_count(4)
    assert site.ids["bob"].hex not in page.content().replace("-", "")

    # Keyboard only: a new page focuses its heading; the search field is next.
    assert page.evaluate("document.activeElement.textContent") == "Memories"
    page.keyboard.press("Tab")
    page.keyboard.type("tabs")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/ui/memories\?q=tabs$"))
    # The word's match first; alice's other memories follow by meaning.
    expect(rows.first.get_by_role("link")).to_have_text("Prefers tabs over spaces")
    expect(rows).to_have_count(4)
    # The whole id is shown, and the copy button says which id it copies.
    tabs = str(site.ids["tabs"])
    expect(rows.first.locator("code.id")).to_have_text(tabs)
    expect(page.get_by_role("button", name=f"Copy memory id {tabs}")).to_be_visible()

    page.goto("/ui/memories?stability=stable")
    expect(rows).to_have_count(1)
    expect(rows.first.get_by_role("link")).to_have_text("Uses vim for every edit")
    page.goto("/ui/memories?lifecycle_state=archived")
    expect(page.get_by_text("No memory matches.")).to_be_visible()
    page.goto("/ui/memories")
    expect(rows).to_have_count(4)
    assert unlabelled_controls(page) == []
    assert_no_layout_shift(page)
    shoot(page, "memories")
    # Through the filters and the search button to the first memory, and open it.
    page.locator("h1").focus()
    for _ in range(6):
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == rows.first.get_by_role("link").inner_text()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/ui/memories/[0-9a-f-]{36}$"))


def test_search_finds_a_memory_asked_for_in_other_words(page: Page, site: Site) -> None:
    """The search embeds the question (the server's embedder): "which text editor" shares no
    word with "Uses vim for every edit", yet finds it first."""
    sign_in(page, site.alice)
    rows = page.locator("#memory-results tbody tr")
    expect(rows).to_have_count(4)
    page.get_by_label("Search", exact=True).fill("which text editor")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(r"/ui/memories\?q=which\+text\+editor$"))
    expect(rows.first.get_by_role("link")).to_have_text("Uses vim for every edit")
    page.goto("/ui/memories?q=hot+beverage&lifecycle_state=active")
    expect(rows.first.get_by_role("link")).to_have_text("Drinks green tea in the morning")
    assert site.ids["bob"].hex not in page.content().replace("-", "")


def test_a_memory_shows_its_chart_timeline_outcomes_and_evidence(page: Page, site: Site) -> None:
    sign_in(page, site.alice)
    page.get_by_role("link", name="Prefers tabs over spaces").click()
    expect(page).to_have_url(re.compile(rf"/ui/memories/{site.ids['tabs']}$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Prefers tabs over spaces")
    expect(page.locator("#chain-status")).to_contain_text("The chain verifies: 3 records")
    records = page.locator(".timeline > li")
    expect(records).to_have_count(3)
    expect(records.first).to_contain_text("v3 reinforce")
    expect(records.last).to_contain_text("v1 create")
    expect(page.locator(".timeline .badge.verified")).to_have_count(3)

    chart = page.locator("#memory-chart svg")
    expect(chart).to_have_attribute("role", "img")
    confidence = chart.locator('path[data-series="confidence_base"]')
    boost = chart.locator('path[data-series="reinforcement_boost"]')
    expect(confidence).to_have_count(1)
    expect(boost).to_have_count(1)
    expect(chart.locator("circle")).to_have_count(6)  # two series, three records
    assert "confidence_base from 0.6 to 0.7" in chart.locator("desc").text_content()
    # Higher on screen is a larger value: the boost rises from 0 with each confirmation.
    heights = [float(v) for v in re.findall(r"V([\d.]+)", boost.get_attribute("d") or "")]
    assert heights == sorted(heights, reverse=True) and len(heights) == 2

    expect(page.locator("#outcomes-title + div")).to_contain_text("5 outcomes")
    expect(page.get_by_text("used in a code review")).to_be_visible()
    expect(page.get_by_text("I always indent with tabs")).to_be_visible()
    assert_no_layout_shift(page)
    shoot(page, "memory")


def test_a_tampered_record_is_named_in_red_with_the_verifiers_reason(page: Page, site: Site) -> None:
    tea = site.ids["tea"]
    _superuser(
        site.dsn,
        "UPDATE prme.journal SET record = replace(record, '\"confidence_base\":0.55', '\"confidence_base\":0.95')"
        " WHERE node_id = %s AND node_version = 2",
        tea,
    )
    sign_in(page, site.alice)
    page.goto(f"/ui/memories/{tea}")
    status = page.locator("#chain-status")
    expect(status).to_contain_text("The chain does not verify: 2 of 3 records fail")
    broken = page.locator("#record-2")
    expect(broken).to_have_class(re.compile("broken"))
    expect(broken).to_contain_text("does not verify")
    expect(broken).to_contain_text(
        "checksum_mismatch: sha256 of the stored record text differs from the stored checksum"
    )
    # v3's before no longer equals v2's (edited) after: the break shows on the next record too.
    expect(page.locator("#record-3")).to_contain_text("continuity_break")
    expect(page.locator("#record-1")).not_to_have_class(re.compile("broken"))
    expect(page.locator("#memory-chart svg rect")).to_have_count(4)  # both series, two records
    assert_no_layout_shift(page)
    shoot(page, "memory-tampered")


def test_a_patch_applies_exactly_the_selected_op(page: Page, site: Site) -> None:
    sign_in(page, site.alice)
    page.get_by_role("link", name="Maintenance").click()
    expect(page.get_by_role("heading", name="Maintenance")).to_be_visible()
    expect(page.locator("table").first).to_contain_text(str(site.ids["berlin"]))
    page.get_by_role("button", name="Generate a patch").click()
    expect(page).to_have_url(re.compile(r"/ui/maintenance\?patch=[0-9a-f-]{36}$"))
    ops = page.locator("#patch tbody tr")
    expect(ops).to_have_count(5)  # vim decays, tabs and tea increase, berlin decreases and is contested

    by_op: dict[str, dict[str, Any]] = {}
    for row in ops.all():
        op_id = row.get_attribute("data-op") or ""
        by_op[op_id] = {"text": row.inner_text(), "checked": row.locator("input[type=checkbox]").is_checked()}
    contest = next(op for op, v in by_op.items() if "mark_contested" in v["text"])
    assert "high" in by_op[contest]["text"] and not by_op[contest]["checked"]
    increase = next(op for op, v in by_op.items() if "Prefers tabs" in v["text"])
    assert by_op[increase]["checked"] and "low" in by_op[increase]["text"]
    assert unlabelled_controls(page) == []
    shoot(page, "maintenance")

    # Exactly one op: everything else unchecked, then Apply selected (manual mode).
    for op_id in by_op:
        page.get_by_label(re.compile(f"^Select {op_id}:")).set_checked(op_id == increase)
    page.get_by_role("button", name="Apply selected").click()
    expect(page.locator(f'[data-status-of="{increase}"]')).to_have_text("applied")
    for op_id in set(by_op) - {increase}:
        expect(page.locator(f'[data-status-of="{op_id}"]')).to_have_text("pending")
    expect(page.get_by_label(re.compile(f"^Select {increase}:"))).to_be_disabled()

    page.locator("#patch").get_by_role("link", name="Prefers tabs over spaces").click()
    expect(page.locator("#memory-fields")).to_contain_text("semi-stable")
    expect(page.locator(".timeline > li").first).to_contain_text("v4 update_stability")

    # Back to the patch: "Apply safe ops" is auto mode, the decay and the other increase
    # only; the decrease and the contest wait for a person.
    page.go_back()
    expect(page.locator(f'[data-status-of="{increase}"]')).to_have_text("applied")
    page.get_by_role("button", name="Apply safe ops").click()
    safe = {op for op, v in by_op.items() if "decay_confidence" in v["text"] or "Drinks green tea" in v["text"]}
    assert len(safe) == 2
    for op_id in safe:
        expect(page.locator(f'[data-status-of="{op_id}"]')).to_have_text("applied")
    for op_id in set(by_op) - safe - {increase}:
        expect(page.locator(f'[data-status-of="{op_id}"]')).to_have_text("pending")
    expect(page.locator(f'tr[data-op="{increase}"]')).to_contain_text("manual")


def test_the_inbox_resolves_a_correction_against_a_memory(page: Page, site: Site) -> None:
    sign_in(page, site.alice)
    page.get_by_role("link", name="Correction inbox").click()
    entry = page.locator(f'[data-entry="{site.ids["inbox"]}"]')
    expect(entry).to_contain_text("No, the meeting room is on floor three")
    assert unlabelled_controls(page) == []
    shoot(page, "inbox")
    entry.get_by_label("Memory id to link").fill(str(site.ids["berlin"]))
    entry.get_by_role("button", name="Link").click()
    expect(page.get_by_text("The inbox is empty.")).to_be_visible()
    page.get_by_role("link", name="Show resolved entries too").click()
    expect(entry).to_contain_text("Resolved: linked")
    with MemoryClient(site.dsn) as memory:
        outcomes = memory.node_outcomes(site.ids["berlin"], user_id="alice")
    assert outcomes[0].recorded_by == "resolve_correction"


def test_another_owners_memory_is_not_found(page: Page, site: Site) -> None:
    sign_in(page, site.alice)
    page.goto(f"/ui/memories/{site.ids['bob']}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory not found")
    expect(page.get_by_role("alert")).to_have_text("No memory of yours has this id.")
    assert "Bob prefers spaces" not in page.content()
    page.goto("/ui/memories/not-a-uuid")
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory not found")


def test_pages_are_static_strict_and_the_same_for_every_console_path(site: Site) -> None:
    import httpx

    with httpx.Client(base_url=site.base) as http:
        root = http.get("/ui", follow_redirects=False)
        assert root.status_code == 308 and root.headers["location"] == "/ui/"
        page = http.get("/ui/memories/anything")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.text == http.get("/ui/").text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "no-referrer"
        # Nothing the page loads comes from anywhere else.
        assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
        script = http.get("/ui/assets/console.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert http.get("/ui/assets/nothing.js").status_code == 404
        assert http.get("/ui/assets/..%2Fconsole.py").status_code == 404
        assert "/ui" not in http.get("/openapi.json").text


@pytest.fixture(scope="module", autouse=True)
def _docs_screenshots() -> Iterator[None]:
    """Refresh docs/console/ from this run when asked (PRME_CONSOLE_DOCS=1)."""
    yield
    import os

    if os.environ.get("PRME_CONSOLE_DOCS") == "1":
        docs = Path(__file__).resolve().parent.parent / "docs" / "console"
        docs.mkdir(exist_ok=True)
        for shot in SHOTS.glob("*-1280.png"):
            shutil.copy(shot, docs / shot.name)


# -- issue 33: the console over a memory pack (prme-pg serve --pack) -------------------------


@pytest.fixture(scope="module")
def pack_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    pack = tmp_path_factory.mktemp("console") / "memories"
    with MemoryClient(pack) as memory:
        said = memory.add_event("I always indent with tabs", user_id="alice")
        tabs = memory.add_node("Prefers tabs over spaces", user_id="alice")
        memory.reinforce(tabs.id, said.id, user_id="alice")
        berlin = memory.add_node("Lives in Berlin", user_id="alice", stability="semi-stable")
        for _ in range(2):
            memory.record_outcome(berlin.id, "explicit_correction", user_id="alice")
        memory.link_correction("No, the meeting room is on floor three", [], user_id="alice")
        alice = memory.create_api_token("alice")
    with serve(pack) as base:
        yield base, alice


def test_the_console_signs_in_and_serves_every_page_on_a_pack(browser: Browser, pack_site: tuple[str, str]) -> None:
    base, alice = pack_site
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on(
        "console",
        lambda message: errors.append(f"{message.text} {message.location}") if message.type == "error" else None,
    )
    refused: list[str] = []
    page.on(
        "response",
        lambda response: refused.append(f"{response.status} {response.url}") if response.status >= 400 else None,
    )
    try:
        page.goto("/ui/memories")
        expect(page).to_have_url(re.compile(r"/ui/sign-in$"))
        page.get_by_label("API token").fill(alice)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(re.compile(r"/ui/memories$"))
        expect(page.locator("#memory-results caption")).to_have_text("2 memories")
        expect(page.locator("#health-ledger")).to_have_text("Ledger: none on a memory pack")

        page.get_by_role("link", name="Prefers tabs over spaces").click()
        expect(page.locator("#chain-status")).to_contain_text("The chain verifies: 2 records")

        page.get_by_role("link", name="Maintenance").click()
        report = page.locator("table").first
        expect(report.locator("caption")).to_have_text("1 memory needs attention")
        expect(report.get_by_role("link", name="Lives in Berlin")).to_be_visible()  # its text, not its id
        page.get_by_role("button", name="Generate a patch").click()
        expect(page.locator("#patch tbody tr")).not_to_have_count(0)

        page.get_by_role("link", name="Correction inbox").click()
        expect(page.get_by_text("No, the meeting room is on floor three")).to_be_visible()
        assert refused == [] and errors == [], (refused, errors)
    finally:
        context.close()
