"""Start `attnviz serve` as a real uvicorn process on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import IO

import httpx2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    env: dict[str, str] | None = None,
    capture_output: bool = False,
    timeout: float = 90,
    args: list[str] | None = None,
    cwd: str | os.PathLike | None = None,
    stdout: IO[str] | None = None,
    command: list[str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """The process (`attnviz serve` with `args`, in `cwd`; its output piped, or written to
    `stdout`) and its base URL, once /healthz answers. `command`: what runs `attnviz`
    (default: this interpreter's, `python -m attnviz.app.cli`)."""
    port = free_port()
    full_env = {**os.environ, "ATTNVIZ_PORT": str(port), **(env or {})}
    output = subprocess.PIPE if capture_output else stdout
    proc = subprocess.Popen(
        [*(command or [sys.executable, "-m", "attnviz.app.cli"]), "serve", *(args or [])],
        env=full_env,
        stdout=output,
        stderr=subprocess.STDOUT if capture_output or stdout else None,
        text=True,
        cwd=cwd,
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(f"{base}/healthz", proc, timeout, "the server", status=None)
    return proc, base


def wait_for(
    url: str, proc: subprocess.Popen, timeout: float, what: str, status: int | None = 200
) -> None:
    """Once `url` answers (with `status`; None: anything), polled every 0.2 s; `proc`
    killed and a RuntimeError naming `what` where it exits or `timeout` s pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = httpx2.get(url, timeout=2)
            if status is None or answer.status_code == status:
                return
        except httpx2.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{what} did not answer within {timeout} s")
        time.sleep(0.2)
