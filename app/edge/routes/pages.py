"""The page, and plotly.js from the installed plotly package (never a CDN)."""

from __future__ import annotations

import gzip
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import plotly
from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.middleware.gzip import GZipMiddleware

from ...payloads.blocks import ENCODING_OF_KIND
from .deps import InferenceDep
from .models import model_infos, refused_infos

ROOT = Path(__file__).resolve().parents[3]
# plotly.js's cartesian bundle (heatmap and scatter, the traces the page draws: 1.5 MB
# against the full bundle's 4.8 MB, a third of the compile before the first heatmap), from
# the npm package pinned in package.json; the full bundle of the Python plotly package
# where npm has not installed it.
CARTESIAN_JS = ROOT / "node_modules" / "plotly.js-cartesian-dist-min" / "plotly-cartesian.min.js"
FULL_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_JS = CARTESIAN_JS if CARTESIAN_JS.is_file() else FULL_JS
# the whole of plotly.js, WebGL traces included (the query-key space's scattergl and
# scatter3d), loaded by the page only for the view that needs them: the "strict" bundle,
# whose WebGL code runs without eval (the page's CSP allows none)
STRICT_JS = ROOT / "node_modules" / "plotly.js-strict-dist-min" / "plotly-strict.min.js"
PLOTLY_GL_JS = STRICT_JS if STRICT_JS.is_file() else FULL_JS
# the page's ES modules, preloaded together instead of one import level at a time
MODULES = sorted(str(p.relative_to(ROOT / "static")) for p in (ROOT / "static/js").rglob("*.js"))
templates = Jinja2Templates(directory=ROOT / "templates")
router = APIRouter(include_in_schema=False)

# The page runs only its own files: scripts from this origin (the /static modules and
# /vendor/plotly.min.js; no inline script, no eval), nothing embedded, no <base>, no framing.
# Styles allow 'unsafe-inline' because plotly.js writes style="" attributes (the heatmap's
# image-rendering, the colorbar) and a <style> element of its own rules; img-src data: and
# blob: carry the heatmap's PNG, the favicon and plotly's PNG/SVG export.
CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    )
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


# The API's documentation pages, offline: Swagger UI and ReDoc from the npm packages pinned
# in package.json (FastAPI's defaults load them, and ReDoc Google's fonts, from CDNs).
SWAGGER_UI = ROOT / "node_modules" / "swagger-ui-dist"
REDOC = ROOT / "node_modules" / "redoc" / "bundles"
DOCS_MISSING = (
    "The API documentation's scripts are not installed: run `npm ci` (make serve does). "
    "The schema itself is at /openapi.json."
)


# The docs pages stay on this origin: their scripts and styles (FastAPI writes the start-up
# script inline; ReDoc runs its search in a blob: worker), and no image from elsewhere
# (ReDoc's sidebar shows Redocly's logo from its CDN, which this keeps from loading).
DOCS_CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",
        "worker-src 'self' blob:",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)


def _docs_page(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_CSP
    page.headers["X-Content-Type-Options"] = "nosniff"
    return page


@router.get("/docs", response_class=HTMLResponse)
def swagger_ui() -> HTMLResponse:
    if not (SWAGGER_UI / "swagger-ui-bundle.js").is_file():
        return HTMLResponse(DOCS_MISSING, status_code=503)
    return _docs_page(
        get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="attnviz API",
            swagger_js_url="/vendor/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/vendor/swagger-ui/swagger-ui.css",
            swagger_favicon_url="data:,",
        )
    )


@router.get("/redoc", response_class=HTMLResponse)
def redoc() -> HTMLResponse:
    if not (REDOC / "redoc.standalone.js").is_file():
        return HTMLResponse(DOCS_MISSING, status_code=503)
    return _docs_page(
        get_redoc_html(
            openapi_url="/openapi.json",
            title="attnviz API",
            redoc_js_url="/vendor/redoc/redoc.standalone.js",
            redoc_favicon_url="data:,",
            with_google_fonts=False,
        )
    )


def docs_assets() -> dict[str, StaticFiles]:
    """The documentation pages' scripts by mount path (where installed), as files with
    their ETags (not gzipped per request: the bundles are large and rarely fetched)."""
    found = {"/vendor/swagger-ui": SWAGGER_UI, "/vendor/redoc": REDOC}
    return {
        path: StaticFiles(directory=folder) for path, folder in found.items() if folder.is_dir()
    }


@router.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse)
def index(request: Request, inference: InferenceDep) -> HTMLResponse:
    zoo = inference.zoo
    models = [info.model_dump() for info in model_infos(inference)]
    return templates.TemplateResponse(
        request=request,
        name="index.html",
        context={
            "models": models,
            "refused": [r.model_dump() for r in refused_infos(inference)],
            "default_model": zoo.default,
            "encodings": ENCODING_OF_KIND,
            "modules": MODULES,
        },
        headers=PAGE_HEADERS,
    )


# V8's explicit compile hint (Chromium 136+; a comment elsewhere): compile every function
# of the bundle on the background thread while it downloads, instead of lazily on the
# main thread during its first run (measured: a 350-850 ms start-up task becomes ~55 ms).
COMPILE_HINT = b"//# allFunctionsCalledOnLoad\n"


@lru_cache(maxsize=2)
def plotly_bundle(path: Path = PLOTLY_JS) -> dict[str, tuple[bytes, str]]:
    """A plotly.js bundle behind the compile hint, as is ("identity") and gzipped once (a
    third of its size), each with its own ETag."""
    body = COMPILE_HINT + path.read_bytes()
    tag = hashlib.sha256(body).hexdigest()[:32]
    # mtime=0: the same bytes on every replica
    gzipped = gzip.compress(body, compresslevel=9, mtime=0)
    return {"identity": (body, f'"{tag}"'), "gzip": (gzipped, f'"{tag}-gzip"')}


def accepts_gzip(request: Request) -> bool:
    """Whether the request's Accept-Encoding admits gzip with q > 0: named, or else as *."""
    weights: dict[str, float] = {}
    for item in request.headers.get("accept-encoding", "").split(","):
        coding, *params = item.split(";")
        q = next((p.split("=", 1)[1] for p in params if p.strip().startswith("q=")), "1")
        try:
            weights[coding.strip().lower()] = float(q)
        except ValueError:
            weights[coding.strip().lower()] = 0.0
    return weights.get("gzip", weights.get("*", 0.0)) > 0


def etag_matches(request: Request, etag: str) -> bool:
    """If-None-Match names this ETag (weakly compared, as for a GET) or is *."""
    tags = [
        t.strip().removeprefix("W/") for t in request.headers.get("if-none-match", "").split(",")
    ]
    return etag in tags or "*" in tags


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    return bundle_response(request, PLOTLY_JS)


@router.get("/vendor/plotly-gl.min.js")
def plotly_gl_js(request: Request) -> Response:
    return bundle_response(request, PLOTLY_GL_JS)


def bundle_response(request: Request, path: Path) -> Response:
    encoding = "gzip" if accepts_gzip(request) else "identity"
    body, etag = plotly_bundle(path)[encoding]
    # cached a day, then revalidated by ETag; the encoding varies with Accept-Encoding
    headers = {
        "Cache-Control": "public, max-age=86400",
        "ETag": etag,
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    if encoding == "gzip":
        headers["Content-Encoding"] = "gzip"
    if etag_matches(request, etag):
        headers.pop("Content-Encoding", None)
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="text/javascript", headers=headers)


# plotly.js's Chinese strings (its toolbar's tooltips), from the npm package pinned in
# package.json: a CommonJS module, served wrapped for the browser, where it joins
# window.PlotlyLocales for plots.js to register.
ZH_LOCALE = ROOT / "node_modules" / "plotly.js-locales" / "zh-cn.js"


@lru_cache(maxsize=1)
def zh_locale() -> bytes:
    module = ZH_LOCALE.read_bytes() if ZH_LOCALE.is_file() else b"module.exports = null;"
    return (
        b"(function () {\nvar module = { exports: {} };\n"
        + module
        + b"\nif (module.exports) (window.PlotlyLocales = window.PlotlyLocales || [])"
        b".push(module.exports);\n})();\n"
    )


@router.get("/vendor/plotly-locale-zh-cn.js")
def plotly_locale() -> Response:
    headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
    return Response(zh_locale(), media_type="text/javascript", headers=headers)


class PageFiles(StaticFiles):
    """The page's modules and stylesheet, revalidated on every load (`no-cache`: a 304
    when unchanged by their ETag), so that a new release's modules never mix with an old
    one's; gzipped by the GZipMiddleware around it."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def static_files() -> GZipMiddleware:
    """The /static app: PageFiles, gzipped above 1 kB where the client accepts it."""
    return GZipMiddleware(PageFiles(directory=ROOT / "static"), minimum_size=1024)
