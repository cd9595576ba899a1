"""The `attnviz` command."""

from __future__ import annotations

import argparse

import uvicorn

from .settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="attnviz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the app (settings from ATTNVIZ_*)")
    serve.add_argument("--host", help="bind address (default: ATTNVIZ_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: ATTNVIZ_PORT or 8000)")
    args = parser.parse_args(argv)

    if args.command == "serve":
        settings = Settings()
        uvicorn.run(
            "app.main:create_app",
            factory=True,
            host=args.host or settings.host,
            port=args.port or settings.port,
            log_level=settings.log_level,
        )


if __name__ == "__main__":
    main()
