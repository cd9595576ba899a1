"""The page's Content-Security-Policy and the other headers that keep hostile text inert."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from attnviz.app.edge.routes.pages import ROOT


def policy(response) -> dict[str, list[str]]:
    header = response.headers["content-security-policy"]
    return {d.split()[0]: d.split()[1:] for d in header.split(";") if d.strip()}


def test_the_page_allows_only_same_origin_scripts(client):
    response = client.get("/")
    csp = policy(response)
    assert csp["script-src"] == ["'self'"]  # no inline script, no eval, no other origin
    assert csp["default-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["form-action"] == ["'self'"]
    assert csp["connect-src"] == ["'self'"]
    # plotly.js writes style attributes and a <style> of its own; images are data:/blob:
    assert csp["style-src"] == ["'self'", "'unsafe-inline'"]
    assert csp["img-src"] == ["'self'", "data:", "blob:"]
    assert not any("unsafe-eval" in s or "*" in s for values in csp.values() for s in values)
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_plotly_js_is_served_as_javascript_only(client):
    response = client.get("/vendor/plotly.min.js")
    assert response.headers["x-content-type-options"] == "nosniff"
    again = client.get("/vendor/plotly.min.js", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and again.headers["x-content-type-options"] == "nosniff"


class Markup(HTMLParser):
    """Every script element and every attribute of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.attributes: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts.append(dict(attrs))
        self.attributes += [(tag, name, value) for name, value in attrs]


def test_the_page_has_no_inline_script_or_handler(client):
    markup = Markup()
    markup.feed(client.get("/").text)
    assert len(markup.scripts) >= 3
    for script in markup.scripts:  # a file from this origin, or data that never runs
        assert script.get("src") or script.get("type") == "application/json", script
        assert (script.get("src") or "/").startswith(("/", "http://testserver/"))
    assert [a for a in markup.attributes if a[1].startswith("on")] == []
    assert [a for a in markup.attributes if "javascript:" in (a[2] or "").lower()] == []


def test_the_scripts_never_turn_strings_into_markup_or_code():
    """What the CSP does not stop (markup from strings) is kept out of the page's own code;
    labels go to plotly.js through plots.js, which escapes them."""
    sinks = re.compile(
        r"\.innerHTML\s*=|\.outerHTML\s*=|insertAdjacentHTML|document\.write|\beval\(|"
        r"new Function|setTimeout\(\s*[\"'`]|\.html\("
    )
    for path in sorted((ROOT / "static" / "js").rglob("*.js")):
        found = [line for line in path.read_text().splitlines() if sinks.search(line)]
        assert found == [], (path.name, found)
