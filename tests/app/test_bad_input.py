"""The bad input corpus, through the real app: what a careless or hostile client may send.

Each refusal gets its documented 4xx with a message that says what to change (never a 500,
never a hang), and the next normal request is still served. Input that is odd but valid
(emoji, right-to-left text and marks, zero-width joiners, combining characters) is read,
and the test names say what a user gets back. The bodies over the limit and the chunked
bodies also go to a real uvicorn server, where framing is real."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import httpx2
import pytest
from fastapi.testclient import TestClient

from harness.serving import start_server

ANALYZE = "/api/v1/analyze"
ATTENTION = "/api/v1/attention"
POSITIONAL = "/api/v1/models/{}/positional-encoding"
LIMIT = 4000  # ATTNVIZ_MAX_TEXT_CHARS
BODY_LIMIT = 262144  # ATTNVIZ_MAX_BODY_BYTES
JSON = {"content-type": "application/json"}
TEN_MB = 10 * 2**20


def still_serves(client: TestClient | httpx2.Client) -> None:
    """A normal request right after: answered, and correctly."""
    response = client.post(ANALYZE, json={"text": "猫追狗"})
    assert response.status_code == 200, response.text
    assert response.json()["output"] == ["mao1", "zhui1", "gou3"]


def assert_refused(response: httpx2.Response, status: int, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in str(response.json()["detail"]), response.text


def nested(depth: int) -> bytes:
    return b'{"text": "hi", "layers": ' + b"[" * depth + b"]" * depth + b"}"


# (path, JSON body or raw bytes, status, what the message says)
REFUSED = {
    # texts
    "empty_text": (ANALYZE, {"text": ""}, 422, "text is empty"),
    "whitespace_only_text": (ANALYZE, {"text": " \t\n\r\u3000\u00a0\u2003 "}, 422, "text is empty"),
    "invisible_only_text": (ANALYZE, {"text": "\u200b\u200d\u200f\ufeff"}, 422, "text is empty"),
    "text_one_past_the_limit": (
        ANALYZE,
        {"text": "长" * (LIMIT + 1)},
        422,
        f"text has {LIMIT + 1} characters; the limit is {LIMIT}",
    ),
    "compare_one_past_the_limit": (  # (MiniLM reads 512 tokens: 16 characters a token)
        ANALYZE,
        {"text": "hi", "compare": "a" * (16 * 512 + 1), "model": "minilm"},
        422,
        f"compare has {16 * 512 + 1} characters; the limit is {16 * 512}",
    ),
    "nul_byte": (ANALYZE, {"text": "a\x00b"}, 422, "control character U+0000 at position 1"),
    "terminal_escape": (ANALYZE, {"text": "\x1b[31mred"}, 422, "control character U+001B"),
    "delete_character": (ATTENTION, {"text": "ok\x7f"}, 422, "control character U+007F"),
    "nul_byte_in_compare": (
        ANALYZE,
        {"text": "ok", "compare": "\x00", "model": "minilm"},
        422,
        "control character U+0000",
    ),
    "lone_low_surrogate": (ANALYZE, b'{"text": "ok \\udfff"}', 422, "unpaired surrogate"),
    "lone_high_surrogate": (ATTENTION, b'{"text": "\\ud83d"}', 422, "unpaired surrogate"),
    "surrogates_in_the_wrong_order": (
        ANALYZE,
        b'{"text": "\\ude00\\ud83d"}',
        422,
        "unpaired surrogate",
    ),
    "a_text_minilm_cannot_tokenize": (
        ANALYZE,
        {"text": "\u0301", "model": "minilm"},  # a combining accent: stripped by WordPiece
        422,
        "text cannot be read",
    ),
    # wrong JSON types
    "text_as_a_number": (ANALYZE, {"text": 5}, 422, "valid string"),
    "text_as_a_list": (ANALYZE, {"text": ["hi"]}, 422, "valid string"),
    "text_as_null": (ANALYZE, {"text": None}, 422, "give text (a sentence), or image"),
    "text_as_an_object": (ANALYZE, {"text": {"a": 1}}, 422, "valid string"),
    "text_misspelled": (ANALYZE, {"txt": "hi"}, 422, "unknown field 'txt'; the fields are"),
    "text_missing": (ANALYZE, {"model": "minilm"}, 422, "give text (a sentence), or image"),
    "an_unknown_field": (
        ANALYZE,
        {"text": "hi", "temperature": 1},
        422,
        "unknown field 'temperature'; the fields are model, text, image, chat",
    ),
    "model_as_a_number": (ANALYZE, {"text": "hi", "model": 5}, 422, "valid string"),
    "layers_as_a_string": (ATTENTION, {"text": "hi", "layers": "0"}, 422, "valid list"),
    "layers_as_a_number": (ATTENTION, {"text": "hi", "layers": 0}, 422, "valid list"),
    "layer_as_a_string": (ATTENTION, {"text": "hi", "layers": ["1"]}, 422, "valid integer"),
    "layer_as_a_boolean": (ATTENTION, {"text": "hi", "layers": [True]}, 422, "valid integer"),
    "head_as_a_fraction": (ATTENTION, {"text": "hi", "heads": [1.5]}, 422, "valid integer"),
    "kinds_as_a_string": (ATTENTION, {"text": "hi", "kinds": "weights"}, 422, "valid list"),
    "hide_special_as_a_number": (
        ATTENTION,
        {"text": "hi", "hide_special": 0},
        422,
        "valid boolean",
    ),
    "hide_special_as_a_string": (
        ATTENTION,
        {"text": "hi", "hide_special": "yes"},
        422,
        "valid boolean",
    ),
    "body_as_a_list": (ANALYZE, [{"text": "hi"}], 422, "must be a JSON object"),
    "body_as_a_string": (ANALYZE, "hi", 422, "must be a JSON object"),
    "body_as_null": (ANALYZE, b"null", 422, "must be a JSON object"),
    "empty_body": (ANALYZE, b"", 422, "Field required"),
    # NaN and infinities (Python's JSON reads them; they are no integers nor text)
    "nan_layer": (ATTENTION, b'{"text": "hi", "layers": [NaN]}', 422, "valid integer"),
    "infinite_head": (ATTENTION, b'{"text": "hi", "heads": [Infinity]}', 422, "valid integer"),
    "minus_infinite_layer": (
        ATTENTION,
        b'{"text": "hi", "layers": [-Infinity]}',
        422,
        "valid integer",
    ),
    "overflowing_float_layer": (ATTENTION, b'{"text": "hi", "layers": [1e400]}', 422, "integer"),
    "nan_text": (ANALYZE, b'{"text": NaN}', 422, "valid string"),
    # indices
    "negative_layer": (ATTENTION, {"text": "hi", "layers": [-1]}, 422, "greater than or equal"),
    "negative_head": (ATTENTION, {"text": "hi", "heads": [-8]}, 422, "greater than or equal"),
    "huge_layer": (ATTENTION, {"text": "hi", "layers": [10**30]}, 422, "less than or equal"),
    "huge_head": (ATTENTION, {"text": "hi", "heads": [2**64]}, 422, "less than or equal"),
    "layer_the_model_lacks": (ATTENTION, {"text": "hi", "layers": [3]}, 422, "layers are 0..2"),
    "head_the_model_lacks": (ATTENTION, {"text": "hi", "heads": [10_000]}, 422, "heads are 0..7"),
    "minilm_head_it_lacks": (
        ATTENTION,
        {"text": "hi", "model": "minilm", "heads": [12]},
        422,
        "heads are 0..11",
    ),
    # names
    "unknown_model": (ANALYZE, {"text": "hi", "model": "gpt-5"}, 404, "unknown model 'gpt-5'"),
    "model_in_the_wrong_case": (
        ATTENTION,
        {"text": "hi", "model": "PRONOUNCE"},
        404,
        "the models are: pronounce",
    ),
    "empty_model": (ANALYZE, {"text": "hi", "model": ""}, 404, "unknown model ''"),
    "unknown_encoding": (ATTENTION, {"text": "hi", "encoding": "f8"}, 422, "'json', 'u1'"),
    "unknown_kind": (ATTENTION, {"text": "hi", "kinds": ["attention"]}, 422, "'weights'"),
    "unknown_attention_type": (
        ATTENTION,
        {"text": "hi", "types": ["encoder.cross"]},
        422,
        "'encoder.self'",
    ),
    # not JSON
    "truncated_json": (ANALYZE, b'{"text": "hi"', 422, "JSON decode error"),
    "json_with_trailing_garbage": (ANALYZE, b'{"text": "hi"} x', 422, "Extra data"),
    "single_quoted_json": (ANALYZE, b"{'text': 'hi'}", 422, "JSON decode error"),
    "json_nested_too_deeply": (ATTENTION, nested(20_000), 400, "nested too deeply"),
    "a_body_that_is_not_utf8": (ANALYZE, b'{"text": "caf\xe9"}', 400, "not UTF-8"),
}


@pytest.mark.parametrize("path, body, status, message", REFUSED.values(), ids=list(REFUSED))
def test_bad_input_is_refused_with_a_clear_4xx(client, path, body, status, message):
    if isinstance(body, bytes):
        response = client.post(path, content=body, headers=JSON)
    else:
        response = client.post(path, json=body)
    assert_refused(response, status, message)
    still_serves(client)


# bodies under the body limit whose every item is wrong (issue 43): one error each, or at
# most twenty errors and a line saying how many more
MANY_WRONG = {
    "forty_thousand_layers": (ATTENTION, {"text": "hi", "layers": ["x"] * 40_000}),
    "twenty_thousand_unknown_fields": (
        ANALYZE,
        {"text": "hi", **{f"k{i}": 0 for i in range(20_000)}},
    ),
    "thirty_thousand_nested_layers": (ATTENTION, {"text": "hi", "layers": [[1]] * 30_000}),
    "a_wrong_permutation_of_forty_thousand": (
        "/api/v1/lab/positions",
        {"text": "hi", "type": "encoder.self", "layer": 0, "head": 0, "order": ["x"] * 40_000},
    ),
    "five_hundred_wrong_items_in_bounds": (ATTENTION, {"text": "hi", "layers": ["x"] * 500}),
}


@pytest.mark.parametrize("path, body", MANY_WRONG.values(), ids=list(MANY_WRONG))
def test_a_body_of_many_wrong_items_is_one_short_422(client, path, body):
    """Validation's work and its answer are bounded whatever a body holds: a 250 KB body
    of wrong items answered a 5.9 MB 422 after 0.4 s of the event loop."""
    import json
    import time

    sent = json.dumps(body).encode()
    assert len(sent) < 262_144
    began = time.perf_counter()
    response = client.post(path, content=sent, headers=JSON)
    took = time.perf_counter() - began
    assert response.status_code == 422 and len(response.content) < 8_000, response.text[:300]
    errors = response.json()["detail"]
    assert 1 <= len(errors) <= 21
    said = " ".join(e["msg"] for e in errors)
    assert (
        "at most 1024 items" in said
        or "at most 10001 items" in said
        or "unknown field 'k0' and 19999 more" in said
        or "and 480 more errors (the first 20 are shown)" in said
    ), said
    assert took < 0.2, took
    still_serves(client)


WRONG_CONTENT = {
    "text_plain": {"content-type": "text/plain"},
    "form_encoded_as_curl_d_sends": {"content-type": "application/x-www-form-urlencoded"},
    "xml": {"content-type": "application/xml"},
    "no_content_type": {},
}


@pytest.mark.parametrize("headers", WRONG_CONTENT.values(), ids=list(WRONG_CONTENT))
def test_a_body_not_sent_as_json_is_415(client, headers):
    response = client.post(ANALYZE, content=b'{"text": "hi"}', headers=headers)
    assert_refused(response, 415, "Content-Type: application/json")
    still_serves(client)


POSITIONAL_REFUSED = {
    "unknown_model": ("gpt-5", "", 404, "unknown model 'gpt-5'"),
    "zero_positions": ("pronounce", "?positions=0", 422, "greater than or equal to 1"),
    "negative_positions": ("pronounce", "?positions=-1", 422, "greater than or equal to 1"),
    "huge_positions": ("pronounce", f"?positions={10**30}", 422, "less than or equal to 4096"),
    "nan_positions": ("pronounce", "?positions=NaN", 422, "valid integer"),
    "infinite_dims": ("pronounce", "?dims=inf", 422, "valid integer"),
    "fractional_dims": ("pronounce", "?dims=1.5", 422, "valid integer"),
    "more_positions_than_the_model": ("pronounce", "?positions=257", 422, "at most 256"),
    "more_dims_than_the_model": ("minilm", "?dims=385", 422, "at most 384"),
}


@pytest.mark.parametrize(
    "model, query, status, message", POSITIONAL_REFUSED.values(), ids=list(POSITIONAL_REFUSED)
)
def test_bad_positional_parameters_are_refused(client, model, query, status, message):
    response = client.get(POSITIONAL.format(model) + query)
    assert_refused(response, status, message)
    still_serves(client)


def read(client: TestClient, text: str, model: str = "pronounce") -> dict:
    response = client.post(ANALYZE, json={"text": text, "model": model})
    assert response.status_code == 200, response.text
    return response.json()


def test_text_of_exactly_the_limit_is_read_up_to_max_tokens_and_says_truncated(client):
    for model, max_tokens in (("pronounce", 128), ("minilm", 512)):
        body = read(client, "好人" * (LIMIT // 2), model)
        assert body["truncated"] is True and len(body["source_tokens"]) == max_tokens
        assert body["source_length"] >= LIMIT
    still_serves(client)


def test_emoji_are_unknown_tokens_and_the_words_around_them_still_read(client):
    body = read(client, "I ❤️ 🐱 cats")  # ❤️ is U+2764 with a variation selector
    assert body["source_tokens"] == ["i", "␣", "<unk>", "␣", "<unk>", "␣", "c", "a", "t", "s"]
    assert body["source_raw"] == ["i", " ", "<unk>", " ", "<unk>", " ", "c", "a", "t", "s"]
    assert body["output"][0] == "AY1" and body["output"][-4:] == ["K", "AE1", "T", "S"]
    words = read(client, "I ❤️ 🐱 cats", "minilm")["source_tokens"]
    assert words == ["[CLS]", "i", "[UNK]", "[UNK]", "cats", "[SEP]"]
    still_serves(client)


def test_a_zwj_emoji_sequence_is_one_unknown_token_per_emoji(client):
    body = read(client, "👨\u200d👩\u200d👧 family")
    assert body["source_tokens"][:4] == ["<unk>", "<unk>", "<unk>", "␣"]  # the space, shown
    assert body["output"][-6:] == ["F", "AE1", "M", "AH0", "L", "IY0"]
    still_serves(client)


@pytest.mark.parametrize(
    "marked, plain",
    [
        ("hello \u200fworld", "hello world"),  # a right-to-left mark
        ("\u200ehello world\u200f", "hello world"),  # left-to-right and right-to-left marks
        ("\u202eolleh\u202c", "olleh"),  # a right-to-left override: the text is not reversed
        ("hel\u200dlo", "hello"),  # a zero-width joiner inside a word
        ("银\u200d行\u200b", "银行"),  # a zero-width joiner and space
        ("\ufeff猫追狗", "猫追狗"),  # a byte order mark pasted from a file
        ("in\xadcred\xadi\xadble", "incredible"),  # soft hyphens
    ],
    ids=[
        "rtl_mark",
        "ltr_and_rtl_marks",
        "rtl_override",
        "zwj_in_a_word",
        "zwj_and_zwsp",
        "bom",
        "soft_hyphens",
    ],
)
def test_invisible_marks_are_left_out_and_do_not_change_the_reading(client, marked, plain):
    for model in ("pronounce", "minilm"):
        body, expected = read(client, marked, model), read(client, plain, model)
        assert body["text"] == expected["text"] == plain
        assert body["source_tokens"] == expected["source_tokens"]
        assert body["output"] == expected["output"]
    still_serves(client)


def test_right_to_left_script_is_read_as_the_characters_each_model_knows(client):
    body = read(client, "\u200fשלום\u200f")  # Hebrew: the pronunciation model reads zh and en
    assert body["text"] == "שלום" and body["source_tokens"] == ["<unk>"] * 4
    words = read(client, "שלום", "minilm")["source_tokens"]
    assert words == ["[CLS]", "ש", "##ל", "##ו", "##ם", "[SEP]"]
    still_serves(client)


def test_combining_characters_read_like_the_composed_character(client):
    decomposed, composed = "cafe\u0301", "caf\u00e9"  # e + combining acute, and é
    for model in ("pronounce", "minilm"):
        body, expected = read(client, decomposed, model), read(client, composed, model)
        assert body["text"] == expected["text"]
        assert body["source_tokens"] == expected["source_tokens"]
        assert body["output"] == expected["output"]
    assert read(client, decomposed)["source_tokens"] == ["c", "a", "f", "<unk>"]
    assert read(client, decomposed, "minilm")["source_tokens"] == ["[CLS]", "cafe", "[SEP]"]
    stacked = read(client, "n\u0303o\u0308\u0301")  # ñ composes; ö + acute has no single form
    assert stacked["source_tokens"] == ["<unk>", "<unk>", "<unk>"]
    still_serves(client)


def test_a_10_mb_body_is_413_in_process(client):
    body = b'{"text": "' + b"a" * TEN_MB + b'"}'
    assert_refused(client.post(ANALYZE, content=body, headers=JSON), 413, "request body over")
    still_serves(client)


@pytest.fixture(scope="module")
def server() -> Iterator[httpx2.Client]:
    """A real `attnviz serve` (uvicorn), and a client that keeps its connection."""
    proc, base = start_server({"ATTNVIZ_TORCH_THREADS": "1", "ATTNVIZ_LOG_LEVEL": "warning"})
    try:
        with httpx2.Client(base_url=base, timeout=30) as http:
            yield http
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    yield b'{"text": "'
    for start in range(0, total, size):
        yield b"a" * min(size, total - start)
    yield b'"}'


def test_a_10_mb_body_with_its_length_is_413_at_once_over_http(server):
    started = time.monotonic()
    response = server.post(ANALYZE, content=b'{"text": "' + b"a" * TEN_MB + b'"}', headers=JSON)
    assert_refused(response, 413, f"request body over {BODY_LIMIT} bytes")
    assert response.request.headers["content-length"] == str(TEN_MB + 12)
    assert time.monotonic() - started < 10  # refused from the header, not after reading it
    still_serves(server)


def test_a_chunked_10_mb_body_without_a_length_is_413_over_http(server):
    response = server.post(ANALYZE, content=chunks(TEN_MB), headers=JSON)
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_refused(response, 413, f"request body over {BODY_LIMIT} bytes")
    still_serves(server)


def send_whole_body_then_read(base: str, body: bytes, chunked: bool = False) -> tuple[int, dict]:
    """As a client that sends all of its body before it reads anything (urllib; or
    http.client sending chunks): the status and JSON it reads, or an OSError (a reset)."""
    if not chunked:
        request = urllib.request.Request(base + ANALYZE, data=body, headers=JSON)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as refused:
            return refused.code, json.load(refused)
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        pieces = (body[i : i + 65536] for i in range(0, len(body), 65536))
        connection.request("POST", ANALYZE, body=pieces, headers=JSON, encode_chunked=True)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize("size", [3_000_000, 9_000_000])
@pytest.mark.parametrize("chunked", [False, True], ids=["with_length", "chunked"])
def test_clients_that_send_the_whole_body_first_read_the_413(server, size, chunked):
    """The rest of an over-limit body is read and thrown away (up to 10 MiB) before the
    413, so that such a client reads it instead of finding its connection reset."""
    base = str(server.base_url).rstrip("/")
    body = b'{"text": "' + b"a" * size + b'"}'
    for _ in range(3):
        status, answer = send_whole_body_then_read(base, body, chunked)
        assert status == 413 and answer == {
            "detail": f"request body over {BODY_LIMIT} bytes: send a shorter text"
        }
    still_serves(server)


def test_a_body_over_the_drain_bound_is_refused_at_once_and_closed(server):
    base = str(server.base_url).rstrip("/")
    body = b'{"text": "' + b"a" * (12 * 2**20) + b'"}'
    started = time.monotonic()
    try:  # the 413 is sent at once with Connection: close; a client still sending may be reset
        status, _ = send_whole_body_then_read(base, body)
        assert status == 413
    except OSError:
        pass
    assert time.monotonic() - started < 10
    still_serves(server)


def test_a_chunked_body_that_fits_is_served_over_http(server):
    def pieces() -> Iterator[bytes]:
        yield from (b'{"te', b'xt": "', "猫追".encode(), "狗".encode(), b'"}')

    response = server.post(ANALYZE, content=pieces(), headers=JSON)
    assert "content-length" not in response.request.headers
    assert response.status_code == 200 and response.json()["output"] == ["mao1", "zhui1", "gou3"]
    assert server.get("/healthz").status_code == 200
