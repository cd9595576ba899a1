"""The page's HTML and the plotly.js it loads: the cartesian bundle of the npm package
pinned in package.json (`make test` installs it with npm ci)."""

from __future__ import annotations

import json

import pytest

from attnviz.app.edge.routes.pages import CARTESIAN_JS, COMPILE_HINT, PLOTLY_JS, ROOT


def test_the_page_boots_from_json_and_same_origin_scripts(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert '<script async id="plotly-js" src="/vendor/plotly.min.js"></script>' in html
    # by path, not by the Host asked with: the same page from every replica, behind any proxy
    assert '<link rel="modulepreload" href="/static/js/views/head.js">' in html
    assert "testserver" not in html
    assert '<script id="boot" type="application/json">' in html
    assert "cdn" not in html.lower() and "https://" not in html


def test_plotly_is_the_pinned_cartesian_bundle_behind_a_compile_hint(client):
    assert PLOTLY_JS == CARTESIAN_JS  # installed: not the fallback to the full bundle
    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]
    version = pinned["plotly.js-cartesian-dist-min"]
    assert CARTESIAN_JS.read_bytes()[:120].decode().find(f"(cartesian - minified) v{version}") > 0
    response = client.get("/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert "content-encoding" not in response.headers
    assert response.content == COMPILE_HINT + PLOTLY_JS.read_bytes()
    assert response.content.startswith(b"//# allFunctionsCalledOnLoad\n")
    again = client.get(
        "/vendor/plotly.min.js",
        headers={"If-None-Match": response.headers["etag"], "Accept-Encoding": "identity"},
    )
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize(
    ("accept", "gzipped"),
    [("gzip, deflate, br", True), ("br;q=1.0, gzip;q=0.8", True), ("*", True),
     ("gzip;q=0", False), ("*;q=1, gzip;q=0", False), ("deflate", False), ("", False)],
)  # fmt: skip
def test_plotly_goes_gzipped_to_clients_that_take_it(client, accept, gzipped):
    response = client.get("/vendor/plotly.min.js", headers={"Accept-Encoding": accept})
    assert response.status_code == 200 and response.headers["vary"] == "Accept-Encoding"
    assert response.content == COMPILE_HINT + PLOTLY_JS.read_bytes()  # decoded by the client
    assert (response.headers.get("content-encoding") == "gzip") is gzipped
    if gzipped:  # a third of the bytes on the wire, and its own ETag
        assert int(response.headers["content-length"]) < len(response.content) / 2.5
        assert response.headers["etag"].endswith('-gzip"')
    again = client.get(
        "/vendor/plotly.min.js",
        headers={"Accept-Encoding": accept, "If-None-Match": response.headers["etag"]},
    )
    assert again.status_code == 304 and "content-encoding" not in again.headers
    weak = client.get(
        "/vendor/plotly.min.js",
        headers={"Accept-Encoding": accept, "If-None-Match": "W/" + response.headers["etag"]},
    )
    assert weak.status_code == 304  # If-None-Match compares weakly


def test_the_page_modules_are_gzipped_and_revalidated(client):
    response = client.get("/static/js/main.js", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200 and response.headers["content-encoding"] == "gzip"
    assert response.content == (ROOT / "static/js/main.js").read_bytes()
    assert response.headers["cache-control"] == "no-cache"  # asked again, answered 304
    again = client.get("/static/js/main.js", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_head_of_the_page_answers_its_headers(client):
    response = client.head("/")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"].startswith("text/html")
    assert "content-security-policy" in response.headers


def test_the_api_docs_are_served_from_the_pinned_packages(client):
    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]
    assert {"swagger-ui-dist", "redoc"} <= set(pinned)
    for path, script in (
        ("/docs", "/vendor/swagger-ui/swagger-ui-bundle.js"),
        ("/redoc", "/vendor/redoc/redoc.standalone.js"),
    ):
        html = client.get(path).text
        assert script in html and "https://" not in html  # no CDN, no Google fonts
        assert client.get(script).status_code == 200
    assert client.get("/vendor/swagger-ui/swagger-ui.css").status_code == 200
