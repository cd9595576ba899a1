"""The FastAPI application: `create_app()` builds it; uvicorn serves
`attnviz.app.main:create_app`."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnviz.model.placement import devices_said
from attnviz.model.runtime import keep_freed_memory, set_threads

from .budgets import fit, memory_limit, resident_bytes
from .catalog.yours import OwnRunner, derived
from .catalog.zoo import Zoo, import_plugins, load_zoo
from .corpus.corpora import read_shipped
from .corpus.jobs import CorpusRuns
from .edge.clients import ClientBudget, Clients
from .edge.limits import SHORT_BODY, BodyLimit
from .edge.logs import AccessLog
from .edge.loop_watch import LoopWatch
from .edge.routes import corpus, figures, generate, images, inference, lab, models, pages
from .edge.routes.deps import BODY_ERRORS
from .errors import AttnvizError, Unavailable
from .payloads.schemas import ErrorMessage, Health
from .payloads.text import document_text_limit
from .runs.inference import Inference
from .runs.long_metrics import stop_all
from .runs.reading import text_limit
from .runs.scheduling import tensor_threads
from .settings import Settings


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The model zoo is loaded here, never at import time.
    settings: Settings = app.state.settings
    embedded = app.state.zoo is not None  # (in a notebook's process: attnviz.show)
    if not embedded:  # (a notebook's process keeps its own settings)
        set_threads(settings.torch_threads)
        keep_freed_memory()  # a captured run's blocks reused by the next, not mapped afresh
    if pages.PLOTLY_JS != pages.CARTESIAN_JS:
        logging.getLogger("attnviz").warning(
            "plotly.js's cartesian bundle is not installed (npm ci): the page gets the full "
            "bundle of the plotly package, which takes longer to start"
        )
    threads = tensor_threads(settings)
    # loaded on a tensor thread: the event loop's thread never runs torch (tensor_threads)
    loader = app.state.zoo or load_zoo
    zoo = await asyncio.get_running_loop().run_in_executor(threads, loader, settings)
    await asyncio.get_running_loop().run_in_executor(threads, read_shipped)
    if not embedded:  # (a notebook's process is the user's to size)
        # (a CUDA image started on a machine without a GPU says so here, and serves on the CPU)
        logging.getLogger("attnviz").info("%s", devices_said(settings.device))
        settings = fitted_settings(settings, zoo)
    app.state.inference = served = Inference(zoo, settings, threads)
    # corpus runs read the served models, one sentence a run slot
    app.state.corpus_runs = corpus_runs = CorpusRuns(served, settings.corpus_results_bytes)
    app.state.openapi_json = await asyncio.to_thread(
        lambda: json.dumps(app.openapi(), separators=(",", ":")).encode()
    )
    # What start-up made (the models' modules, the tokenizers, the libraries) stays for the
    # server's life: kept out of the collector's full passes, each of which held the GIL,
    # and with it /healthz, for 0.1-0.3 s while a corpus run made garbage (measured).
    if not embedded:  # (a notebook's objects are the user's to collect)
        gc.collect()
        gc.freeze()
    app.state.loop_watch = watch = LoopWatch(settings.loop_stall_warn_ms)
    watch.start()
    yield
    watch.stop()
    stop_all()  # a long run's head summaries
    corpus_runs.stop()
    app.state.inference = None
    threads.shutdown(wait=False)


def fitted_settings(settings: Settings, zoo: Zoo) -> Settings:
    """The settings with the caches' budgets that fit this server's memory, its models
    loaded (app/budgets.py): DoesNotFit, which stops the start, where they cannot. The
    bound of models of yours in the CPU's memory, derived or fitted, is stated in the log."""
    limit, source = memory_limit(settings)
    fitted = fit(settings, resident_bytes(), limit, source)
    log = logging.getLogger("attnviz")
    if fitted.changed:
        log.warning("%s", fitted.changed)
    pools = {id(e.runner.pool): e.runner.pool for e in zoo.models.values()
             if isinstance(e.runner, OwnRunner)}  # fmt: skip
    for pool in pools.values():
        if pool.device == "cpu":
            pool.max_bytes = fitted.own_models_bytes
            if not settings.own_models_bytes:
                pool.source = derived(limit, source)
        log.info(
            "models of yours on %s: %s bytes of weights at once (%s)",
            pool.device, f"{pool.max_bytes:,}", pool.source,
        )  # fmt: skip
    for entry in zoo.models.values():  # (admitted against the bound before it was fitted)
        runner = entry.runner
        if isinstance(runner, OwnRunner) and runner.bytes > runner.pool.max_bytes:
            log.warning(
                "model %s: its weights take %s bytes, more than the %s bytes models of yours "
                "may now hold on %s: once it is read, every other model of yours there is freed",
                entry.id, f"{runner.bytes:,}", f"{runner.pool.max_bytes:,}", runner.pool.device,
            )  # fmt: skip
    if not fitted.changed:
        return settings
    return settings.model_copy(
        update={
            "cache_bytes": fitted.cache_bytes,
            "corpus_results_bytes": fitted.corpus_results_bytes,
            "own_models_bytes": fitted.own_models_bytes,
            "images_bytes": fitted.images_bytes,
        }
    )


def create_app(
    settings: Settings | None = None, zoo: Callable[[Settings], Zoo] | None = None
) -> FastAPI:
    """The app; `zoo` makes its models instead of `load_zoo` (attnviz.show's one model, in
    the notebook's own process: torch's threads, the allocator and the collector are then
    left as the notebook has them)."""
    settings = settings or Settings()
    app = FastAPI(
        title="attnviz",
        summary="Every attention head of a Transformer, as JSON for interactive heatmaps.",
        description="Per-head attention weights, raw scores, masks, q/k/v and positional "
        'encodings of the served models. Errors are `{"detail": ...}` with real status codes.',
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc are the pages router's: offline, from npm packages
        redoc_url=None,
        openapi_url=None,  # (served below, made once)
    )
    app.state.settings = settings
    app.state.zoo = zoo
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        drain_bytes=max(settings.drain_body_bytes, settings.corpus_max_bytes),
        limits={
            "/api/v1/corpus-runs/upload": settings.corpus_max_bytes,
            "/api/v1/figure/pdf": figures.FIGURE_BYTES,
            "/api/v1/generate/stop": SHORT_BODY,
            "/api/v1/images": images.body_limit(settings),
        },
        send_timeout=settings.send_timeout_s,
        least_rate=settings.least_read_rate,
    )
    clients = Clients(
        settings.client_requests,
        settings.client_cost_per_minute,
        settings.trusted_proxies,
        settings.api_keys,
    )
    app.add_middleware(ClientBudget, clients=clients)  # a 429 before the body is read
    app.add_middleware(AccessLog)  # outermost: it also logs the 413s and 429s
    app.include_router(models.router)
    app.include_router(inference.router)
    app.include_router(generate.router)
    app.include_router(images.router)
    import_plugins(settings)  # (before the lab's routes: a plugin may add an experiment)
    for router in lab.routers():
        app.include_router(router)
    app.include_router(corpus.router)
    app.include_router(figures.router)
    app.include_router(pages.router)
    app.mount("/static", pages.static_files(), name="static")
    for path, assets in pages.docs_assets().items():
        app.mount(path, assets)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        if isinstance(exc.body, bytes) and exc.body:  # FastAPI kept a body it did not parse
            content_type = request.headers.get("content-type")
            sent = f"not {content_type[:100]}" if content_type else "the request had none"
            detail = f"send the body as JSON, with Content-Type: application/json ({sent})"
            return JSONResponse({"detail": detail}, status_code=415)
        # Only where and what (the offending input may be NaN, huge, or not JSON at all),
        # of the first ERRORS_SHOWN errors, each bounded
        found = exc.errors()
        errors = [
            {
                "loc": [p if isinstance(p, int) else str(p)[:100] for p in e.get("loc", ())][:16],
                "msg": _message(e)[:500],
                "type": str(e.get("type", ""))[:100],
            }
            for e in itertools.islice(found, ERRORS_SHOWN)
        ]
        if len(found) > ERRORS_SHOWN:
            errors.append(
                {
                    "loc": ["body"],
                    "msg": f"and {len(found) - ERRORS_SHOWN} more errors (the first "
                    f"{ERRORS_SHOWN} are shown)",
                    "type": "more_errors",
                }
            )
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI's 400 for a body it could not decode says only "error parsing the body"
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            detail = f"the body is not UTF-8 text ({exc.__cause__.reason}): send it as UTF-8"
            return JSONResponse({"detail": detail}, status_code=400)
        if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
            detail = "the body's JSON is nested too deeply to read"
            return JSONResponse({"detail": detail}, status_code=400)
        return await http_exception_handler(request, exc)

    @app.exception_handler(AttnvizError)
    async def domain_error(request: Request, exc: AttnvizError) -> JSONResponse:
        # what the code outside the routes raises, answered as FastAPI answers HTTPException
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    generate_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        # the character limit is a setting: the schema states this server's (the largest
        # of its models': a long-context model's prompt takes more)
        served = getattr(app.state, "inference", None)
        runners = [e.runner for e in served.zoo.models.values()] if served else []
        limit = max((text_limit(settings, r) for r in runners), default=settings.max_text_chars)
        return document_text_limit(generate_openapi(), limit)

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi_json(request: Request) -> Response:
        # made once, at start-up, its models loaded (the text limit is theirs), off the event
        # loop (it held the loop 140 ms): FastAPI's own route made it on the loop, and
        # serialised the whole schema for every request
        return Response(request.app.state.openapi_json, media_type="application/json")

    @app.get("/healthz", tags=["health"], responses=BODY_ERRORS)
    async def healthz(request: Request) -> Health:
        """Liveness and the ids of the loaded models."""
        return Health(status="ok", models=request.app.state.inference.zoo.ids())

    @app.get("/readyz", tags=["health"], responses={503: {"model": ErrorMessage}})
    async def readyz(request: Request) -> Health:
        """Ready to serve: the models loaded and the tensor threads not stuck (requests
        waiting, and none started or ended for longer than a request's deadline and a
        minute: 503, which takes the replica out of its Service)."""
        inference = request.app.state.inference
        stuck = inference.wedged()
        if stuck is not None:
            raise Unavailable(stuck)
        return Health(status="ok", models=inference.zoo.ids())

    return app


ERRORS_SHOWN = 20  # a 422's errors, at most (each its where and what, bounded)


def _message(error: Any) -> str:
    """A validation error's message, with the reason where the JSON did not parse."""
    message = str(error.get("msg", ""))
    if error.get("type") == "json_invalid" and "error" in error.get("ctx", {}):
        message += f": {error['ctx']['error']}"
    elif error.get("type") == "value_error":  # our validators' own messages
        message = message.removeprefix("Value error, ")
    elif error.get("type") == "model_attributes_type" and tuple(error.get("loc", ())) == ("body",):
        message = 'the body must be a JSON object such as {"text": "..."}'
    return message
