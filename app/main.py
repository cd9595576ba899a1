"""The FastAPI application: `create_app()` builds it; uvicorn serves `app.main:create_app`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from model.runtime import set_threads

from .limits import BodyLimit
from .logs import AccessLog
from .routes import inference, lab, models, pages
from .schemas import Health
from .service import Inference
from .settings import Settings
from .zoo import load_zoo


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The model zoo is loaded here, never at import time.
    settings: Settings = app.state.settings
    set_threads(settings.torch_threads)
    app.state.inference = Inference(load_zoo(settings), settings)
    yield
    app.state.inference = None


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(
        title="attnviz",
        summary="Every attention head of a Transformer, as JSON for interactive heatmaps.",
        description="Per-head attention weights, raw scores, masks, q/k/v and positional "
        'encodings of the served models. Errors are `{"detail": ...}` with real status codes.',
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLog)  # outermost: it also logs the 413s
    app.include_router(models.router)
    app.include_router(inference.router)
    app.include_router(lab.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=pages.ROOT / "static"), name="static")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only where and what: the offending input may be NaN, huge, or not JSON at all.
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.get("/healthz", tags=["health"])
    def healthz(request: Request) -> Health:
        """Liveness and the ids of the loaded models."""
        return Health(status="ok", models=request.app.state.inference.zoo.ids())

    return app
