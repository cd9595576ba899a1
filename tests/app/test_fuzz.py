"""Schema fuzzing: schemathesis generates requests from the app's own OpenAPI schema (valid
and invalid: its examples, the boundaries of every constraint, then random data) against
the app in-process, with its lifespan and real settings, and checks every answer: no 5xx,
only documented status codes and content types, bodies that fit the documented schema,
invalid data refused and valid data accepted.

`make test` runs FUZZ_EXAMPLES=25 random examples per route with a fixed seed, in process,
with the client limiter off (every request comes from one client: with it on, the budget of
the minute would answer most of them 429 and the fuzz would not reach the logic).
`make fuzz` runs 5000 against a real server (FUZZ_LIVE=1: `attnviz serve` with the same
settings), with the limiter off, then on (FUZZ_LIMITER=on). Its event loop's lag is
watched by the server itself (ATTNVIZ_LOOP_STALL_WARN_MS: a warning per stall, read from
its log) and /healthz polled every 20 ms from a process of its own (bench/hostile.py);
both are reported, and with FUZZ_STALL_MS set (`make fuzz`: 50) a stall longer fails the
run. (In process, the fuzzer's own work, such as decoding a large answer, holds the same
interpreter's lock as the server's event loop, so the loop's lag there is not the
server's.) FUZZ_SEED picks another fixed seed."""

from __future__ import annotations

import atexit
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, HookContext, Response
from schemathesis.checks import not_a_server_error
from schemathesis.config import HealthCheck
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import positive_data_acceptance

from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from bench.hostile import Healthz
from harness.serving import start_server

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
SEED = int(os.environ.get("FUZZ_SEED", "8"))
LIVE = os.environ.get("FUZZ_LIVE") == "1"
LIMITER = os.environ.get("FUZZ_LIMITER", "off") == "on"
STALL_MS = float(os.environ.get("FUZZ_STALL_MS", "0"))  # 0: reported, not bounded

# generations of at most 8 tokens: a fuzzed one is quick (more asked: the documented 422)
# and corpus runs of at most 50 sentences: a fuzzed one ends soon
# SmolLM2 kept to 512 tokens (its capture budget's floor): a schema-valid text of 131,072
# characters would run an 8,192-token pass of half a minute for each such example
SETTINGS = {
    "torch_threads": 1,
    "max_new_tokens": 8,
    "corpus_max_sentences": 50,
    "max_capture_bytes": 1_000_000,
    **({} if LIMITER else {"client_requests": 0, "client_cost_per_minute": 0}),
}
app = create_app(Settings(**SETTINGS))  # (FUZZ_LIVE: its schema only)
# Hypothesis' too_slow health check times data generation, which a loaded machine slows.
config = schemathesis.Config(seed=SEED, suppress_health_check=[HealthCheck.too_slow])
if LIVE:
    LOG = Path(tempfile.mkdtemp()) / "server.log"
    server, BASE = start_server(
        {
            **{f"ATTNVIZ_{name.upper()}": str(value) for name, value in SETTINGS.items()},
            "ATTNVIZ_LOG_FORMAT": "json",
            "ATTNVIZ_LOOP_STALL_WARN_MS": str(STALL_MS or 50),
        },
        stdout=LOG.open("w"),  # (the server's, for its life)
    )
    atexit.register(server.terminate)
    schema = schemathesis.openapi.from_url(f"{BASE}/openapi.json", config=config)
else:
    # the app's own schema, its lifespan (the models' loading) started by its first case,
    # not at import: every pytest process collects this file, one runs it
    schema = schemathesis.openapi.from_dict(app.openapi(), config=config)
    schema.app, schema.location = app, "/openapi.json"
schema.config.generation.update(max_examples=EXAMPLES, deterministic=True, database="none")
# a request answered within the server's own bounds (its run deadline, 300 s), however
# busy: schemathesis' default of 10 s failed an induction of 512 SmolLM2 tokens under load
schema.config.update(request_timeout=300)
# A body over ATTNVIZ_MAX_BODY_BYTES is refused with its documented 413 before it is parsed,
# valid or not: the limit is in bytes of the encoded request (a character takes 1 to 12),
# which a JSON Schema cannot state. So 413 counts as refusing invalid data, and as the
# documented answer to valid data that is too long to send.
checks = schema.config.checks
for check in (checks.negative_data_rejection, checks.positive_data_acceptance):
    check.expected_statuses = [*check.expected_statuses, "413"]
SERVED = ["pronounce", "pronounce-untrained", "minilm", "minilm-untrained", "smollm2"]
GENERATED = "(the generated id)"
OPENAPI = app.openapi()


def takes_model(case: Case) -> bool:
    """Whether the case's JSON body has a `model` field (a stop request's has none)."""
    operation = OPENAPI["paths"][case.path][case.method.lower()]
    content = operation.get("requestBody", {}).get("content", {})
    ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    body = OPENAPI["components"]["schemas"].get(ref.rpartition("/")[2], {})
    return "model" in body.get("properties", {})


@schema.hook
def flatmap_case(context: HookContext, case: Case) -> st.SearchStrategy[Case]:
    """A random model id is unknown (a quick 404): five valid cases in six name a served
    model or none (the default) instead, so that every model's code runs."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return st.just(case)

    def named(model: str | None) -> Case:
        if model == GENERATED:
            return case
        named = case.derive()
        if "model_id" in named.path_parameters:
            named.path_parameters["model_id"] = model or "pronounce"
        elif isinstance(named.body, dict) and takes_model(case):
            named.body.pop("model", None)
            if model is not None:
                named.body["model"] = model
        return named

    return st.sampled_from([GENERATED, None, *SERVED]).map(named)


# A schema-valid request that the chosen model cannot serve is refused with 422, and OpenAPI
# has no way to say so: the ranges depend on the model named in the same body (its layers,
# heads, attention types, max_seq_len, d_model, tokenizer, decoder) or on the text's tokens,
# or on several fields together (u1 only for weights and masks, the word view only for
# weights). These are the server's messages for exactly those cases; any other refusal of
# valid data still fails the check.
MODEL_DEPENDENT = (
    "out of range:",  # a layer or head the model lacks
    "has no attention of type",
    "u1 holds values in [0, 1] only",
    "granularity=word and hide_special apply to weights only",
    "has no word pieces",
    "makes no sentence embedding to compare",
    "positions must be at most",  # the model's max_seq_len
    "dims must be at most",  # the model's d_model
    "text cannot be read",  # e.g. MiniLM's tokenizer drops every character
    "the response would take about",  # ATTNVIZ_MAX_RESPONSE_BYTES
    "(ATTNVIZ_MAX_RESPONSE_BYTES)",  # a positional table, export or kv-cache answer past it
    "must be a permutation of",  # lab: an order of the text's tokens
    "attention: it has",  # lab: an attention type the model lacks
    "this needs self-attention",  # lab: rollout of a cross-attention type
    "ALTI here reads self-attention alone",  # lab: ALTI of a decoder that reads an encoder
    "the same length, so nothing is padded",  # lab: a second sentence as long as the text
    "does not decode",  # lab: an encoder-only model has no KV cache
    "does not predict the next token",  # lab: induction heads on a model that does not generate
    "repeated twice is longer than",  # lab: induction's sequence past the model's length
    "with room for the answer: at most",  # lab: the needle's prompt past what is read
    "it has no encoder",  # lab: a decoder-only model's positions and padding
    "are for models that continue a prompt",  # chat, continuation on another model
    "does not continue a prompt",  # /generate on another model
    "token id out of range",  # a continuation past the model's vocabulary
    "(ATTNVIZ_MAX_NEW_TOKENS)",  # a generation or continuation past the server's limit
    "needs at least 5 points",  # qk-space: UMAP or t-SNE of a text too short for it
    "(ATTNVIZ_CORPUS_MAX_SENTENCES)",  # a corpus run past the server's limit
    "is not UTF-8 (byte",  # corpus-runs/upload: a text file's line by line checks
    "holds a control character",
    "the text has no sentence",
    "; a sentence may have",
    "name a shipped corpus or send sentences: one of the two",  # corpus-runs: two fields
    "has no encoder.self attention",  # corpus-runs: vectors of a type the model lacks
    "has no decoder.self attention",
    "has no decoder.cross attention",
    "vectors: ",  # corpus-runs: vectors of a layer or head the model lacks
    "kept no vectors",  # qk-space: a corpus run that did not keep the head
    "corpus run",  # qk-space or corpus-runs: a run id that is not there or of another model
    "characters; the limit is",  # a model's text limit: 16 characters a token of its own
    "is not a window of",  # attention: rows or columns past the text's tokens
    "rows, columns and pool apply to",  # attention: a window of q, k or v
    "need whole heads",  # attention: word view or hidden specials of a long input
    "heads' windows of a long input",  # attention: more heads than a request recomputes
    "read whole heads: at most",  # lab, neuron, qk-space: a long input
    "attention matrices reads at most",  # qk-space: a further text over 512 tokens
    "the body is not an SVG document",  # figure/pdf: bytes a schema cannot call SVG or not
    "not a PNG, JPEG or WebP file",  # images: bytes a schema cannot call a picture or not
    "image cannot be read",  # images: a broken file
    "data is not base64",  # images: contentEncoding is a note in JSON Schema, not a rule
    "reads text, not pictures",  # a picture for a model of text
    "reads pictures, not text",  # a text for a model of pictures
    "reads pictures: send one as image",
    "reads a picture alone",
    "reads no picture, and this measures",  # lab: attention distance on a model of text
    "edges are above",  # lab/graph: a text whose graph has more edges than are sent
)
# The 503s a valid request may get, each documented and with Retry-After: a full queue of
# runs or of corpus runs, or UMAP / t-SNE asked for before its first run has compiled it
# (the compile runs in the background). Any other 5xx fails.
RETRY_LATER = (
    "projection is being prepared",
    "corpus runs are waiting already",
    "leave no room for this one",  # corpus runs: other runs' results fill the budget
    "the server is busy running other requests",
)


def warming(response: Response) -> bool:
    if response.status_code != 503 or "retry-after" not in response.headers:
        return False
    detail = str(json.loads(response.content).get("detail"))
    return any(said in detail for said in RETRY_LATER)


def no_server_error(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """schemathesis' not_a_server_error, less the documented warming 503 above."""
    if warming(response):
        return None
    return not_a_server_error(ctx, response, case)


def valid_data_is_accepted(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """schemathesis' positive_data_acceptance, less the model-dependent 422s above."""
    if warming(response):
        return None
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code == 422:
            detail = json.loads(response.content).get("detail")
            if isinstance(detail, str) and any(m in detail for m in MODEL_DEPENDENT):
                return None
        raise


@pytest.fixture(scope="module", autouse=True)
def stop_the_app() -> Iterator[None]:
    """The models stay loaded for this module only (schemathesis starts the lifespan). A
    real server's /healthz is polled meanwhile: its latency reported (and bounded, with
    FUZZ_STALL_MS)."""
    if not LIVE:
        yield
        shutdown_lifespans()
        return
    with Healthz(BASE) as healthz:
        yield
    server.terminate()
    server.wait(timeout=30)
    lines = LOG.read_text().split("\n")  # (one record a line: app/edge/logs.py)
    records = [json.loads(line) for line in lines if line.startswith("{")]
    stalls = sorted(r["stall_ms"] for r in records if "stall_ms" in r)
    statuses = Counter(r["status"] for r in records if r.get("logger") == "attnviz.access")
    limiter = "on" if LIMITER else "off"
    print(
        f"\nfuzz of a real server (limiter {limiter}, {EXAMPLES} examples a route): "
        f"{sum(statuses.values())} requests, {dict(sorted(statuses.items()))}; the event "
        f"loop held over {STALL_MS or 50:g} ms {len(stalls)} times {stalls[-5:]}; /healthz "
        f"over {healthz.probes} probes: 95th percentile {healthz.p95 * 1000:.1f} ms, worst "
        f"{healthz.worst * 1000:.1f} ms, {healthz.failures} failures"
    )
    assert not healthz.failures
    assert not any(500 <= s < 600 and s != 503 for s in statuses), statuses
    for record in records:  # (each stall with the requests in flight then)
        if "stall_ms" in record:
            print(f"  held {record['stall_ms']} ms; in flight: {record.get('in_flight')}")
    assert not STALL_MS or not stalls, stalls


@schema.parametrize()
def test_every_route_holds_to_its_schema(case: Case) -> None:
    case.call_and_validate(
        excluded_checks=[positive_data_acceptance, not_a_server_error],
        additional_checks=[valid_data_is_accepted, no_server_error],
    )
