"""A real uvicorn server and headless Debian Chromium driven by Playwright."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright

from harness.browser import CHROMIUM, FLAGS
from harness.serving import start_server

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "e2e"


@pytest.fixture(scope="session")
def server() -> str:
    # every test's page and client is one address that asks far more a minute than a person
    # does: no cost budget here (tests/app/hostile tests it); the in-flight share stays
    settings = {"ATTNVIZ_LOG_LEVEL": "warning", "ATTNVIZ_CLIENT_COST_PER_MINUTE": "0"}
    proc, base = start_server(settings)
    yield base
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: `make test` installs it (as root)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def outside_requests() -> list[str]:
    """Every request the pages tried to send anywhere but 127.0.0.1 (all are blocked)."""
    seen: list[str] = []
    yield seen
    assert seen == [], f"requests left 127.0.0.1: {seen}"


def block_outside(context, outside_requests: list[str]) -> None:
    """Let the context's pages reach 127.0.0.1 (and data:/blob: URLs) only: anything else
    is recorded in `outside_requests` and aborted."""

    def guard(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            outside_requests.append(route.request.url)
            route.abort()

    context.route("**/*", guard)


@pytest.fixture
def page(browser, server, outside_requests, request):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=server)
    block_outside(context, outside_requests)
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in request.node.name)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)
    assert page.errors == [], page.errors
    context.close()


def page_of(browser, base: str, outside_requests: list[str]):
    """(context, page, its errors) on another server of a test's own: loopback only, the
    page's uncaught errors collected."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=base)
    block_outside(context, outside_requests)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, errors


def offline(browser) -> tuple[BrowserContext, Page, list[str], list[str]]:
    """A desktop-sized page that fetches nothing but a file and what it makes (blob:,
    about:): its context, the page, the addresses it was asked for, and its errors (page
    errors and what breaks a Content Security Policy)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    asked: list[str] = []

    def refuse(route):
        if route.request.url.startswith(("http:", "https:", "ws:")):
            asked.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", refuse)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return context, page, asked, errors
