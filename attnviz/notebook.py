"""`attnviz.show(model, text, view="head")`: the page's views in a notebook cell.

The widget (anywidget: JupyterLab, Notebook 7, VS Code, Colab) draws the page itself, its
own modules unchanged, in an iframe of the cell's output (static/widget/widget.js). Every
request the page makes, its modules and Plotly included, goes through the widget's own
channel to this kernel, where the server's app answers it in this process: no server is
started, no port is opened and nothing leaves the machine. The app runs on a thread of its
own with its own event loop, so the kernel stays free while a model runs.

`model` is what `attnviz.capture` takes: a shipped model's id, a path (a folder in Hugging
Face's layout, a repo id in the Hugging Face cache, a .gguf file), or a transformers model
in memory with its tokenizer (`tokenizer=`), read through the same backends as the server
and never written to disk. Each model's app is made once a process and shared by the cells
that show it."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, MutableMapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode

import anywidget
import torch
import traitlets

from .app.catalog.zoo import Zoo, load_zoo, own_entry
from .app.edge.limits import receiving
from .app.settings import Settings
from .captured import kind_of, memory_name
from .model.pretrained.sources import Origin, load_origin

WIDGET_JS = Path(__file__).resolve().parent / "static" / "widget" / "widget.js"
VIEWS = (
    "head", "picture", "model", "masks", "positional", "lab", "step", "neuron", "qk", "lines",
)  # fmt: skip


class Embedded:
    """The server's app in this process: its lifespan entered on a thread's event loop,
    its requests given to it as ASGI calls, their answers sent back as they come."""

    def __init__(self, zoo: Callable[[Settings], Zoo]) -> None:
        from .app.main import create_app

        # one person's page in their own notebook: no per-client budget (the server's guards
        # a shared server from one address); every other limit as the server's
        self.app = create_app(Settings(client_cost_per_minute=0, client_requests=0), zoo)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="attnviz", daemon=True)
        self._thread.start()
        self._lifespan = self.app.router.lifespan_context(self.app)
        self._calls: dict[str, tuple[Future, asyncio.Event]] = {}
        try:
            self.run(self._lifespan.__aenter__())  # (the model is read now: errors raise here)
        except BaseException:
            self._stop()
            raise
        self.open = True

    def close(self) -> None:
        """The app's end (its lifespan's exit: its threads stopped) and its loop's."""
        if self.open:
            self.open = False
            for future, gone in list(self._calls.values()):
                self.loop.call_soon_threadsafe(gone.set)
                future.cancel()
            self.run(self._lifespan.__aexit__(None, None, None))
            self._stop()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    def run(self, coroutine) -> Any:
        """A coroutine run on the app's loop, waited for."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def submit(self, key: str, request: dict, body: bytes, reply: Callable[..., None]) -> None:
        """Start one request; `reply(content, buffers)` is called with its answer's start,
        each part of its body and its end."""
        gone = asyncio.Event()  # (set on the loop's thread: abort)
        future = asyncio.run_coroutine_threadsafe(self._call(request, body, reply, gone), self.loop)
        self._calls[key] = (future, gone)
        future.add_done_callback(lambda _: self._calls.pop(key, None))

    def abort(self, key: str) -> None:
        """The page stopped reading a request (its Cancel, a newer render): the app reads
        the client gone, as a server's would."""
        call = self._calls.get(key)
        if call is not None:
            self.loop.call_soon_threadsafe(call[1].set)

    async def _call(self, request: dict, body: bytes, reply, gone: asyncio.Event) -> None:
        path, _, query = str(request.get("url", "/")).partition("?")
        headers = request.get("headers") or {}
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": str(request.get("method", "GET")).upper(),
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(str(k).lower().encode(), str(v).encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 0),
            "server": ("attnviz.notebook", 80),
            "state": {},
        }

        async def send(message: MutableMapping[str, Any]) -> None:
            if gone.is_set():
                return
            if message["type"] == "http.response.start":
                answer = {k.decode("latin-1"): v.decode("latin-1") for k, v in message["headers"]}
                reply({"type": "start", "status": message["status"], "headers": answer}, [])
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    reply({"type": "chunk"}, [bytes(message["body"])])
                if not message.get("more_body"):
                    reply({"type": "end"}, [])

        try:
            await self.app(scope, receiving(body, gone), send)
        except Exception as exc:  # (the app answers its own errors: this is a bug's trace)
            reply({"type": "error", "message": f"{type(exc).__name__}: {exc}"}, [])


class View(anywidget.AnyWidget):
    """One cell's view: the page in an iframe, answered by this kernel (see the module)."""

    _esm = WIDGET_JS
    search = traitlets.Unicode("").tag(sync=True)  # the query the page starts from
    height = traitlets.Int(820).tag(sync=True)  # the iframe's height at first, in pixels

    def __init__(self, server: Embedded, search: str, owned: bool = False, **kwargs: Any) -> None:
        super().__init__(search=search, **kwargs)
        self._server = server
        self._owned = owned  # (a model in memory's app: this view's alone, closed with it)
        self.on_msg(self._message)

    def close(self) -> None:
        """The widget closed (`view.close()`), and the app made for it alone with it."""
        if self._owned:
            self._server.close()
        super().close()

    def _message(self, _widget: Any, content: dict, buffers: list) -> None:
        # (each request's id is made unique by the page that sends it: widget.js; this
        # view's own number keeps apart the views sharing one model's app)
        key = f"{id(self)}:{content.get('id', '')}"
        if content.get("type") == "abort":
            self._server.abort(key)
            return
        if content.get("type") != "request":
            return
        body = bytes(buffers[0]) if buffers else b""

        said = str(content.get("id", ""))

        def reply(answer: dict, parts: list[bytes]) -> None:
            self.send({**answer, "id": said}, parts)

        self._server.submit(key, content, body, reply)


_SERVERS: dict[tuple, tuple[Embedded, str]] = {}
_LOCK = threading.Lock()


def served(model: Any, tokenizer: Any = None) -> tuple[Embedded, str]:
    """The app serving `model` and the model's id in it: made once a process for a shipped
    model or a path; for a model in memory, made afresh each time (it reads the weights the
    model has now: one trained since is not shown as it was)."""
    kind = kind_of(model, tokenizer)
    if kind == "memory":
        model_id, zoo = zoo_of(kind, model, tokenizer)
        return Embedded(zoo), model_id
    key = (kind, str(model))
    with _LOCK:
        if key not in _SERVERS:
            model_id, zoo = zoo_of(kind, model, tokenizer)
            _SERVERS[key] = (Embedded(zoo), model_id)
        return _SERVERS[key]


def zoo_of(kind: str, model: Any, tokenizer: Any) -> tuple[str, Callable[[Settings], Zoo]]:
    """The id a model of that kind (`kind_of`) is served under and the function that makes
    its zoo (run in the app's start-up, on its tensor thread)."""
    if kind == "id":
        return model, lambda settings: load_zoo(settings.model_copy(update={"zoo": [model]}))
    if kind == "path":
        model_id = slug(Path(str(model)).name)

        def read(settings: Settings) -> Zoo:
            runner, origin = load_origin(model, model_id, settings.max_model_bytes)
            entry = own_entry(model_id, runner, origin, "read when this view was made")
            return Zoo({model_id: entry}, default=model_id)

        return model_id, read
    from .model.hf.memory import from_memory

    name = memory_name(model)
    model_id = slug(Path(name).name)

    def held(settings: Settings) -> Zoo:
        runner: Any
        if callable(getattr(tokenizer, "preprocess", None)):  # an image processor
            from .model.hf.pictures import image_encoder_of
            from .model.hf.vision import ImageRunner

            runner = ImageRunner(image_encoder_of(model, tokenizer))
        else:
            runner = from_memory(model, tokenizer, model_id)
        stored = next(model.parameters())
        shared = stored.dtype == torch.float32 and stored.device.type == "cpu"
        origin = Origin(
            name,
            getattr(model.config, "model_type", type(model).__name__),
            f"{stored.dtype} on {stored.device.type} in this notebook's memory",
            "transformers",
        )
        read = (
            "its tensors shared with the notebook's model"
            if shared
            else "a float32 copy of the notebook's model made when this view was"
        )
        entry = own_entry(model_id, runner, origin, read)
        return Zoo({model_id: entry}, default=model_id)

    return model_id, held


def slug(name: str) -> str:
    """A name as a model id (letters, digits, '.', '_' and '-')."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:64]
    return cleaned or "model"


def show(
    model: Any,
    text: str | None = None,
    view: str | None = None,
    *,
    tokenizer: Any = None,
    image: Any = None,
    processor: Any = None,
    height: int = 820,
    **choices: Any,
) -> View:
    """The page's `view` of `model` on `text` in this cell (see the module's docstring);
    an image encoder's on `image` instead (a path, a PIL image or an array; a model in
    memory with its `processor=`), opened on its picture; a vision-language model's
    folder on both. `choices` are the page's other URL keys: layer, head, type
    ("encoder.self", ...), kind ("weights", "scores", "mask", "norms"), lang ("en", "zh"),
    and a view's own."""
    if text is None and image is None:
        raise TypeError("show(model, text), show(model, image=...) or, a vision-language "
                        "model, show(model, text, image=...)")  # fmt: skip
    if processor is not None and tokenizer is not None:
        raise TypeError("processor= (a model of pictures) or tokenizer= (of text), not both")
    view = view or ("picture" if image is not None else "head")
    if view not in VIEWS:
        raise ValueError(f"view {view!r} is none of {list(VIEWS)}")
    server, model_id = served(model, tokenizer if processor is None else processor)
    state = {"model": model_id, "view": view, **choices}
    if image is not None:  # (held by the app, as a picture sent to it: its digest in the URL)
        from .app.images import picture_of_pixels
        from .captured import picture_of

        picture = picture_of_pixels(picture_of(image))
        server.app.state.inference.pictures.put(picture)
        state["img"] = picture.digest
    if text is not None:
        state["text"] = text
    # (the page's flags read "1" for on and nothing for off: static/js/state.js)
    shown = {k: "1" if v is True else str(v) for k, v in state.items() if v not in (None, False)}
    owned = kind_of(model, tokenizer if processor is None else processor) == "memory"
    return View(server, "?" + urlencode(shown), owned=owned, height=height)
