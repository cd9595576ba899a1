"""The FastAPI application: `create_app()` builds it; uvicorn serves `app.main:create_app`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from pydantic import BaseModel

from model.runtime import set_threads

from .settings import Settings
from .zoo import load_zoo


class Health(BaseModel):
    status: str
    models: list[str]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The model zoo is loaded here, never at import time.
    settings: Settings = app.state.settings
    set_threads(settings.torch_threads)
    app.state.zoo = load_zoo(settings)
    yield
    app.state.zoo = None


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(
        title="attnviz",
        summary="Every attention head of a Transformer, as JSON for interactive heatmaps.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings or Settings()

    @app.get("/healthz", tags=["health"])
    def healthz(request: Request) -> Health:
        """Liveness and the ids of the loaded models."""
        return Health(status="ok", models=request.app.state.zoo.ids())

    return app
