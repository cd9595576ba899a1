"""Server settings, read from ATTNVIZ_* environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from model.pronounce.pronouncer import SHIPPED


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNVIZ_")

    host: str = Field("127.0.0.1", description="Address uvicorn binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port uvicorn listens on.")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    torch_threads: int = Field(
        0, ge=0, description="Torch threads per operation; 0: the CPUs this process may use."
    )
    pronounce_dir: Path = Field(SHIPPED, description="Checkpoint folder of the default model.")
