"""The page, and plotly.js from the installed plotly package (never a CDN)."""

from __future__ import annotations

from pathlib import Path

import plotly
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from .deps import InferenceDep
from .models import model_info

ROOT = Path(__file__).resolve().parents[2]
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
templates = Jinja2Templates(directory=ROOT / "templates")
router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def index(request: Request, inference: InferenceDep) -> HTMLResponse:
    zoo = inference.zoo
    models = [model_info(e, e.id == zoo.default).model_dump() for e in zoo.models.values()]
    return templates.TemplateResponse(
        request=request,
        name="index.html",
        context={"models": models, "default_model": zoo.default},
    )


@router.get("/vendor/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(
        PLOTLY_JS,
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )
