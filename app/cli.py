"""The `attnviz` command."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import uvicorn

from attnviz.model.pronounce.pronouncer import SHIPPED
from attnviz.model.pronounce.train import TrainConfig

from .edge.logs import log_config
from .settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="attnviz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the app (settings from ATTNVIZ_*)")
    serve.add_argument("--host", help="bind address (default: ATTNVIZ_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: ATTNVIZ_PORT or 8000)")
    serve.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="ID=PATH[,device=D][,dtype=T][,quantize=Q]",
        help="serve a model of yours too (repeatable): a Hugging Face folder or a .gguf file, "
        "with its own device and dtype where they differ from --device and --dtype",
    )
    serve.add_argument(
        "--device", help="where your models run: auto, cpu, cuda, cuda:N, mps (ATTNVIZ_DEVICE)"
    )
    serve.add_argument(
        "--dtype", help="their dtype: auto, bfloat16, float16, float32 (ATTNVIZ_DTYPE)"
    )
    train = commands.add_parser("train", help="train a model of the zoo")
    train.add_argument("model", choices=["pronounce"], help="which model")
    train.add_argument("--out", required=True, help="folder for the checkpoint and state")
    train.add_argument("--steps", type=int, default=TrainConfig.steps)
    train.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    train.add_argument("--lr", type=float, default=TrainConfig.lr)
    train.add_argument("--seed", type=int, default=TrainConfig.seed)
    train.add_argument("--eval-every", type=int, default=TrainConfig.eval_every)
    train.add_argument("--eval-n", type=int, default=TrainConfig.eval_n)
    train.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: OMP_NUM_THREADS where set, else all CPUs)",
    )
    evaluate = commands.add_parser("evaluate", help="measure a checkpoint on held-out data")
    evaluate.add_argument("model", choices=["pronounce"], help="which model")
    evaluate.add_argument("--checkpoint", default=str(SHIPPED), help="checkpoint folder")
    evaluate.add_argument("--n", type=int, default=600, help="sentences and words to test")
    evaluate.add_argument(
        "--write-card", action="store_true", help="write metrics.json and MODEL_CARD.md"
    )
    corpus = commands.add_parser(
        "corpus", help="every head's statistics over a text file (one sentence a line)"
    )
    corpus.add_argument("file", help="UTF-8 text, one sentence a line")
    corpus.add_argument("--model", default="minilm", help="model id (default: minilm)")
    corpus.add_argument(
        "--ray", metavar="ADDRESS", help="run on this Ray cluster ('local': start one here)"
    )
    corpus.add_argument("--workers", type=int, default=2, help="Ray workers (default: 2)")
    corpus.add_argument("--out", help="write the statistics here as CSV (sentence, head, ...)")
    key = commands.add_parser(
        "key", help="make an API key: the key for its user, its hash for ATTNVIZ_API_KEYS"
    )
    key.add_argument("name", help="whose key (letters, digits, '.', '_', '-')")
    args = parser.parse_args(argv)

    if args.command == "key":
        import hashlib
        import secrets

        made = secrets.token_urlsafe(32)
        digest = hashlib.sha256(made.encode()).hexdigest()
        print(f"the key, for its user alone (Authorization: Bearer ...):\n  {made}")
        server = json.dumps({args.name: digest})
        print(f"for the server (ATTNVIZ_API_KEYS, merged with the others):\n  {server}")

    if args.command == "corpus":
        from .corpus.command import run_corpus

        run_corpus(args.file, args.model, args.ray, args.workers, args.out)

    if args.command == "evaluate":
        from attnviz.model.pronounce.card import measure, write_card

        metrics = measure(args.checkpoint, n=args.n)
        print(json.dumps(metrics, indent=1))
        if args.write_card:
            write_card(args.checkpoint, metrics)

    if args.command == "train":
        from attnviz.model.pronounce.train import train as train_pronounce

        tc = TrainConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.seed,
            warmup=min(TrainConfig.warmup, max(1, args.steps // 10)),
            eval_every=args.eval_every,
            eval_n=args.eval_n,
            threads=args.threads,
        )
        trained = train_pronounce(args.out, tc)
        print(f"done: {trained.line()}" if trained is not None else "done")

    if args.command == "serve":
        # (the app reads its settings from the environment: the options go there)
        for option, name in ((args.device, "ATTNVIZ_DEVICE"), (args.dtype, "ATTNVIZ_DTYPE")):
            if option:
                os.environ[name] = option
        if args.model:  # added to ATTNVIZ_MODELS
            try:
                models: dict[str, str | dict] = {
                    k: str(v)
                    if isinstance(v, Path)
                    else v.model_dump(exclude_none=True, mode="json")
                    for k, v in Settings().models.items()
                }
            except ValueError as exc:  # (pydantic's ValidationError: a setting it refuses)
                parser.error(str(exc))
            for given in args.model:
                try:
                    model_id, entry = model_option(given)
                except ValueError as exc:
                    parser.error(str(exc))
                models[model_id] = entry
            os.environ["ATTNVIZ_MODELS"] = json.dumps(models, default=str)
        try:
            settings = Settings()
        except ValueError as exc:  # (pydantic's ValidationError: a setting it refuses)
            parser.error(str(exc))
        uvicorn.run(
            "attnviz.app.main:create_app",
            factory=True,
            host=args.host or settings.host,
            port=args.port or settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            log_config=log_config(settings.log_format, settings.log_level),
            access_log=False,  # app.logs.AccessLog writes one line per request instead
        )


PLACED = ("device", "dtype", "quantize")


def model_option(given: str) -> tuple[str, str | dict]:
    """`--model ID=PATH[,device=D][,dtype=T][,quantize=Q]` as (its id, its ATTNVIZ_MODELS
    entry): the path alone, or an object with its placement (a path with a comma in it is
    read whole unless what follows the comma is one of these options)."""
    model_id, sep, rest = given.partition("=")
    if not (sep and model_id and rest):
        raise ValueError(f"--model takes ID=PATH[,device=D][,dtype=T][,quantize=Q], not {given!r}")
    path, options = rest, dict[str, str]()
    while True:
        head, comma, tail = path.rpartition(",")
        name, equals, value = tail.partition("=")
        if not (comma and equals and name in PLACED and value):
            break
        options.setdefault(name, value)  # (the last one given is the one read)
        path = head
    if not path:
        raise ValueError(f"--model {given!r} names no path")
    return model_id, {"path": path, **options} if options else path


if __name__ == "__main__":
    main()
