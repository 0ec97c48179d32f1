"""The memory inspector at /ui, in a real headless Chromium (Debian's, driven by Selenium with
the OS's chromedriver: nothing is downloaded), against the running stack: what a person sees
after pasting a key and clicking through. Each tenant here is this module's own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.running import Running

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

TURN = "Book the Lisbon flight for order Osprey-4417 on Tuesday"
XSS = "<img src=x onerror=alert(1)>"
DOC = "Kestrel-Gateway-9081 restarts with systemctl restart kestrel after a config change."
B_ONLY = "Walrus-Ledger-3390"  # tenant B's alone, in a turn, a document and a skill
TASK = "Apply the Terraform plan for the network module"
TRACE = [
    {"command": "terraform plan -out plan.tfplan"},
    {"command": "terraform apply plan.tfplan", "output": "Apply complete! Resources: 3 added"},
]
WAIT_S = 60.0  # how long a page may take to show what it was asked for, on a loaded machine

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        f"the inspector test needs Chromium and its driver from the OS packages ({CHROMIUM}, {CHROMEDRIVER}): "
        "apt-get install chromium chromium-driver",
        allow_module_level=True,
    )


@dataclass
class Tenants:
    a: str  # tenant A's key, may write
    a_read_only: str
    a_session: str  # tenant A's, for the session "hostile" only
    b: str
    skill_id: str


def ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json()


@pytest.fixture(scope="module")
def tenants(agents_stack: Running) -> Tenants:
    """Tenant A: three sessions (one to forget, one hostile), a document, a skill used twice;
    tenant B: a turn, a document and a skill that carry ``B_ONLY``."""
    s = agents_stack
    a, b = s.new_key("create", "inspector-a"), s.new_key("create", "inspector-b")
    a_read_only = s.new_key("create", "inspector-a", "--read-only")
    a_session = s.new_key("create", "inspector-a", "--session", "hostile")
    ok(s.post("/v1/sessions/trip-planning/turns", {"user": TURN, "agent": "Booked, seat 14C."}, key=a))
    ok(s.post("/v1/sessions/hostile/turns", {"user": XSS, "agent": f"<script>alert(2)</script>{XSS}"}, key=a))
    ok(s.post("/v1/sessions/scratch/turns", {"user": "A note to forget"}, key=a))
    ok(s.post("/v1/documents", {"doc_id": "runbook-a", "title": "Gateway runbook", "text": DOC}, key=a))
    skill = ok(s.post("/v1/skills:extract", {"task": TASK, "trace": TRACE}, key=a))
    for success in (True, False):
        ok(s.post(f"/v1/skills/{skill['skill_id']}/outcomes", {"success": success}, key=a))

    ok(s.post("/v1/sessions/b-private/turns", {"user": f"The {B_ONLY} vault opens at noon"}, key=b))
    ok(s.post("/v1/documents", {"doc_id": "b-notes", "title": f"Notes {B_ONLY}", "text": f"{B_ONLY} ledger"}, key=b))
    ok(s.post("/v1/skills:extract", {"task": f"Open the {B_ONLY} vault", "trace": TRACE}, key=b))
    return Tenants(a=a, a_read_only=a_read_only, a_session=a_session, b=b, skill_id=skill["skill_id"])


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
    ):
        options.add_argument(arg)
    # The driver's path is given: Selenium Manager has nothing to look up or download.
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The inspector as a person uses it: clicks, typing, and the text on the screen."""

    def __init__(self, driver: webdriver.Chrome, url: str) -> None:
        self.driver, self.url = driver, url

    def until(self, what: str, check: Callable[[], Any]) -> Any:
        def probe(_: Any) -> Any:
            self.no_alert()
            return check()

        return WebDriverWait(self.driver, WAIT_S, poll_frequency=0.1).until(probe, message=what)

    def no_alert(self) -> None:
        try:
            text = self.driver.switch_to.alert.text
        except NoAlertPresentException:
            return
        raise AssertionError(f"the page opened an alert: {text!r}")

    def by_id(self, element_id: str) -> WebElement:
        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        return str(self.by_id(element_id).text)

    def shows(self, element_id: str, words: str) -> str:
        """Wait until ``words`` are visible in the element; its text."""
        self.until(f"{words!r} in #{element_id}", lambda: words in self.text(element_id))
        return self.text(element_id)

    def paste_key(self, key: str) -> None:
        if self.by_id("disconnect").is_displayed():
            self.by_id("disconnect").click()
        self.by_id("key").send_keys(key)
        self.by_id("connect").click()

    def tab(self, name: str) -> None:
        self.driver.find_element(By.CSS_SELECTOR, f'#tabs button[data-tab="{name}"]').click()

    def click(self, css: str) -> None:
        self.until(f"{css} to be shown", lambda: self.driver.find_element(By.CSS_SELECTOR, css).is_displayed())
        self.driver.find_element(By.CSS_SELECTOR, css).click()

    def everything(self) -> str:
        """All the text the page holds, hidden panels included (not the typed-in inputs)."""
        return str(self.driver.execute_script("return document.body.textContent"))


@pytest.fixture()
def page(browser: webdriver.Chrome, agents_stack: Running) -> Page:
    browser.get(agents_stack.url + "/ui")  # redirected to /ui/
    browser.execute_script("sessionStorage.clear()")
    browser.get(agents_stack.url + "/ui/")
    return Page(browser, agents_stack.url)


def test_a_person_finds_what_was_recorded(page: Page, tenants: Tenants, agents_stack: Running) -> None:
    started = time.monotonic()
    assert page.driver.current_url.endswith("/ui/") and "Strata memory inspector" in page.driver.title
    page.paste_key(tenants.a)
    assert "sk-strata" not in page.driver.current_url  # the key is not in the URL

    sessions = page.shows("session-list", "trip-planning")
    assert "hostile" in sessions and "scratch" in sessions
    page.click('#session-list button[data-open="trip-planning"]')
    assert TURN in page.shows("turn-list", TURN)
    working = page.shows("working-list", TURN)
    summary = page.text("working-summary")
    assert "tokens" in summary and "Importance" in working and "Tokens" in working
    row = page.driver.find_element(By.CSS_SELECTOR, "#working-list tbody tr")
    importance, tokens = (c.text for c in row.find_elements(By.CSS_SELECTOR, "td.num"))
    assert 0 <= float(importance) <= 1 and int(tokens) > 0

    page.tab("documents")
    page.shows("document-list", "Gateway runbook")
    page.click('#document-list button[data-open="runbook-a"]')
    assert DOC in page.shows("document-text", DOC)
    assert "Chunks" in page.text("document-facts")

    page.tab("skills")
    page.shows("skill-list", "50 %")
    page.click(f'#skill-list button[data-open="{tenants.skill_id}"]')
    history = page.shows("skill-history", "outcome")
    assert "created" in history and history.count("outcome") == 2
    assert "1 of 2 uses" in page.text("skill-body")

    page.tab("audit")
    audit = page.shows("audit-list", "runbook-a")
    assert "trip-planning" in audit and tenants.skill_id in audit and "semantic" in audit

    page.tab("search")
    page.by_id("query").send_keys("How do I restart the Kestrel gateway?")
    page.by_id("search-session").clear()
    page.by_id("search-session").send_keys("trip-planning")
    page.by_id("task-type").clear()
    page.by_id("task-type").send_keys("debugging")  # a task type whose context holds documents
    page.by_id("search-button").click()
    page.shows("hit-list", "Kestrel-Gateway-9081")
    hits = page.driver.find_elements(By.CSS_SELECTOR, "#hit-list li.hit")
    hit = next(h for h in hits if "Kestrel-Gateway-9081" in h.text)
    ranks = {r.get_attribute("data-path"): r.text for r in hit.find_elements(By.CSS_SELECTOR, ".rank")}
    assert set(ranks) >= {"dense", "lexical", "graph"}
    assert ranks["dense"].startswith("dense #") and ranks["lexical"].startswith("BM25 #"), ranks
    assert "relevance 0." in hit.text or "relevance 1.00" in hit.text, hit.text
    context = page.shows("context-summary", "tokens used of a budget of")
    used, budget = [int(w) for w in context.split() if w.isdigit()][:2]
    assert 0 < used <= budget
    assert "Kestrel-Gateway-9081" in page.text("context-text") and "semantic" in page.text("context-sections")
    print(f"\ninspector walk-through: {time.monotonic() - started:.1f} s")


def test_a_forget_asks_first_then_removes_the_session(page: Page, tenants: Tenants, agents_stack: Running) -> None:
    page.paste_key(tenants.a)
    page.shows("session-list", "scratch")
    page.click('#session-list button[data-forget="session"]')  # the first row: "hostile"
    page.click('#session-list button[data-cancel="session"]')
    forget = '#session-list tr[data-session="scratch"] button[data-forget="session"]'
    page.click(forget)
    assert "Forget session scratch?" in page.text("session-list")
    # Asked, not yet done.
    assert agents_stack.call("GET", "/v1/sessions/scratch/turns", tenants.a).status_code == 200
    page.click('#session-list tr[data-session="scratch"] button[data-confirm="session"]')
    page.shows("notice", "Forgot session scratch")
    page.until("scratch to leave the list", lambda: "scratch" not in page.text("session-list"))
    assert "hostile" in page.text("session-list")  # the one whose forget was cancelled
    assert agents_stack.call("GET", "/v1/sessions/scratch/turns", tenants.a).status_code == 404


def test_errors_are_the_apis_message(page: Page, tenants: Tenants) -> None:
    page.paste_key("sk-strata-not-a-key-of-anyone")
    assert "401" in page.shows("error", "unknown API key")
    page.paste_key(tenants.a_read_only)
    page.shows("session-list", "trip-planning")
    page.click('#session-list tr[data-session="trip-planning"] button[data-forget="session"]')
    page.click('#session-list tr[data-session="trip-planning"] button[data-confirm="session"]')
    refused = page.shows("error", "403")
    assert "read-only" in refused
    # From then on the page is read-only: no forget button, the reason in the status line.
    page.until("the forget buttons to go", lambda: not page.driver.find_elements(By.CSS_SELECTOR, "[data-forget]"))
    assert "trip-planning" in page.text("session-list") and "read-only" in page.text("session-list")
    assert page.text("status").startswith("Read-only")


def test_a_session_key_opens_its_own_session_by_id(page: Page, tenants: Tenants) -> None:
    page.paste_key(tenants.a_session)
    assert "403" in page.shows("error", "every session")  # it may not list the tenant's sessions
    page.by_id("session-id").send_keys("hostile")
    page.click("#session-open-form button")
    page.shows("turn-list", XSS)
    page.by_id("session-id").clear()
    page.by_id("session-id").send_keys("trip-planning")
    page.click("#session-open-form button")
    assert "403" in page.shows("error", "'trip-planning'")
    assert TURN not in page.everything()


def test_memory_text_is_shown_as_text(page: Page, tenants: Tenants) -> None:
    page.paste_key(tenants.a)
    page.shows("session-list", "hostile")
    page.click('#session-list button[data-open="hostile"]')
    assert XSS in page.shows("turn-list", XSS)
    assert "<script>alert(2)</script>" in page.text("turn-list")
    page.shows("working-list", XSS)
    page.no_alert()
    assert page.driver.find_elements(By.TAG_NAME, "img") == []
    assert page.driver.find_elements(By.CSS_SELECTOR, "main script") == []


def test_a_key_of_tenant_a_never_shows_tenant_b(page: Page, tenants: Tenants) -> None:
    # B's key shows B's words: the page can show them, so their absence below means something.
    page.paste_key(tenants.b)
    page.click('#session-list button[data-open="b-private"]')
    page.shows("turn-list", B_ONLY)

    page.paste_key(tenants.a)
    page.shows("session-list", "trip-planning")
    assert B_ONLY not in page.everything()  # nothing of B's stays after the key changes
    page.click('#session-list button[data-open="trip-planning"]')
    page.shows("working-list", TURN)
    for tab, listing, shown in (
        ("documents", "document-list", "runbook-a"),
        ("skills", "skill-list", "50 %"),
        ("audit", "audit-list", "runbook-a"),
    ):
        page.tab(tab)
        page.shows(listing, shown)
    page.tab("search")
    page.by_id("query").send_keys(f"{B_ONLY} vault opens at noon ledger notes")
    page.by_id("search-session").clear()  # the whole tenant's memory
    page.by_id("search-button").click()
    page.shows("context-summary", "Pick a session")
    page.until("the search to finish", lambda: "Searching" not in page.text("hits-summary"))
    text = page.everything()
    assert "b-private" not in page.text("session-list") and "b-notes" not in text
    assert B_ONLY not in text


def test_the_audit_pages_through_every_entry(page: Page, agents_stack: Running) -> None:
    """"Later entries" follows the history's cursor: 101 changes show as 100, then all 101."""
    key = agents_stack.new_key("create", "inspector-audit")
    for i in range(101):
        ok(agents_stack.post(f"/v1/sessions/s{i % 3}/turns", {"user": f"note {i}"}, key=key))
    page.paste_key(key)
    page.tab("audit")

    def rows() -> int:
        return len(page.driver.find_elements(By.CSS_SELECTOR, "#audit-list tbody tr"))

    page.until("the first page of the history", lambda: rows() == 100)
    page.click("#audit-more")
    page.until(
        "every entry, and no more to load", lambda: rows() == 101 and not page.by_id("audit-more").is_displayed()
    )


def test_the_usage_panel_shows_what_the_usage_route_answers(page: Page, tenants: Tenants,
                                                            agents_stack: Running) -> None:
    def usage() -> dict[str, Any]:
        return dict(ok(agents_stack.call("GET", "/v1/usage", tenants.a)))

    # The layer shards write their counts every serve.usage_flush_s (5 s), and the fixture's
    # document and skill are indexed in the background: wait until two reads a flush apart agree.
    before, deadline = usage(), time.monotonic() + WAIT_S
    while True:
        time.sleep(6.0)
        after = usage()
        if (after["tokens"], after["items"]) == (before["tokens"], before["items"]) or time.monotonic() > deadline:
            break
        before = after
    page.paste_key(tenants.a)
    page.tab("usage")
    page.until("the usage tables", lambda: page.driver.find_elements(By.CSS_SELECTOR, "#usage-calls tbody tr"))
    expected = usage()  # after the panel's own usage call: it counts once answered

    def cells(css: str, attribute: str) -> dict[str, int]:
        rows = page.driver.find_elements(By.CSS_SELECTOR, css)
        return {str(r.get_attribute(attribute)): int(r.find_element(By.CSS_SELECTOR, "td.num").text) for r in rows}

    tokens = cells("#usage-tokens tbody tr", "data-token")
    assert tokens == expected["tokens"] and tokens["embedding"] > 0
    items = cells("#usage-items tbody tr", "data-usage")
    assert items == {f"{layer}.{what}": n for layer, counts in expected["items"].items() for what, n in counts.items()}
    assert items["episodic.turns"] >= 2 and items["procedural.skills"] == 1
    calls = cells("#usage-calls tbody tr", "data-route")
    assert {r: n for r, n in calls.items() if r != "usage"} == {
        r: n for r, n in expected["calls"].items() if r != "usage"
    }
    assert calls["record_turn"] >= 3
