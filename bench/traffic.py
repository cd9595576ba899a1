"""The traffic of `make load` and `make soak`: texts, requests, and the server under test.

Texts are Chinese, English or mixed, short (4-30 characters) or long (60-128 for
`pronounce`, 40-90 words for `minilm`). A share of them repeats from a fixed pool (the same
for every client, so the server's capture cache answers those after their first run); the
rest are fresh random word sequences that the cache has never seen and the model must run.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # harness/ is not an installed package
    sys.path.insert(0, str(ROOT))

from harness.serving import start_server  # noqa: E402


def words(text: str) -> list[str]:
    return text.split()


ZH_WORDS = words(
    "银行 行走 苹果 公司 发布 新款 手机 采用 最新 芯片 学生 老师 学校 "
    "今天 明天 天气 我们 喜欢 音乐 电影 北京 上海 朋友 吃饭 睡觉 工作 "
    "城市 街上 人们 时间 问题 重要 快乐 长城 中国 世界 历史 文化 图书馆 "
    "医生 医院 火车 飞机 机场 电脑 程序 语言 汉字 声音 音乐会 重新 开始 "
    "长大 还是 银行家 行业 觉得 休息 猫 狗 追 在 的 了 和 很 好 大 "
    "小 长"
)
EN_WORDS = words(
    "the a cat dog runs after bank river walks city street people time music movie "
    "friend school teacher student phone chip company new latest weather today tomorrow "
    "we like read write language sound train plane airport computer program history "
    "culture world quick brown fox jumps over lazy quietly morning evening light "
    "attention model head layer token sentence between through because although window "
    "garden kitchen yellow"
)
PUNCT = {"zh": "，。；", "en": ",.;"}


def sentence(rng: random.Random, language: str, chars: int) -> str:
    """Random words of `language` (zh, en or mixed), at most `chars` characters long."""
    pieces: list[str] = []
    length = 0
    while True:
        lang = rng.choice(("zh", "en")) if language == "mixed" else language
        word = rng.choice(ZH_WORDS if lang == "zh" else EN_WORDS)
        if rng.random() < 0.12:
            word += rng.choice(PUNCT[lang])
        sep = " " if pieces and (lang == "en" or pieces[-1][-1].isascii()) else ""
        if length + len(sep) + len(word) > chars:
            break
        pieces.append(sep + word)
        length += len(sep) + len(word)
    return "".join(pieces) or rng.choice(ZH_WORDS)


def pronounce_text(rng: random.Random, long: bool) -> str:
    language = rng.choice(("zh", "zh", "en", "mixed"))
    return sentence(rng, language, rng.randint(60, 128) if long else rng.randint(4, 30))


def minilm_text(rng: random.Random, long: bool) -> str:
    language = rng.choice(("en", "en", "en", "zh", "mixed"))
    chars = rng.randint(250, 550) if long else rng.randint(10, 60)
    return sentence(rng, language, chars if language == "en" else chars // 3)


@dataclass
class Call:
    """One HTTP request and the status it should get."""

    method: str
    path: str
    name: str  # the label its latency is counted under
    body: dict | None = None
    expect: tuple[int, ...] = (200,)
    raw: bytes | None = None  # a body sent as is, not JSON-encoded


@dataclass
class Mix:
    """Requests drawn at random: `model_calls` for the load test, `soak_calls` add the other
    routes and some invalid input."""

    seed: int
    repeat_share: float = 0.5
    minilm_share: float = 0.2
    long_share: float = 0.4
    rng: random.Random = field(init=False)
    pools: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        fixed = random.Random(0)  # the repeated texts: the same for every client
        self.pools = {
            "pronounce": [pronounce_text(fixed, long=i % 3 == 0) for i in range(24)],
            "minilm": [minilm_text(fixed, long=i % 3 == 0) for i in range(12)],
        }

    def text(self, model: str) -> str:
        if self.rng.random() < self.repeat_share:
            return self.rng.choice(self.pools[model])
        long = self.rng.random() < self.long_share
        return (pronounce_text if model == "pronounce" else minilm_text)(self.rng, long)

    def model_call(self) -> Call:
        """analyze or attention, as the page asks them: one type and layer, every head."""
        rng = self.rng
        model = "minilm" if rng.random() < self.minilm_share else "pronounce"
        body: dict = {"text": self.text(model)}
        if model != "pronounce":
            body["model"] = model
        if rng.random() < 0.5:
            if model == "minilm" and rng.random() < 0.3:
                body["compare"] = self.text(model)
            return Call("POST", "/api/v1/analyze", f"analyze {model}", body)
        types = ["encoder.self", "decoder.self", "decoder.cross"] if model == "pronounce" else []
        attention_type = rng.choice(types or ["encoder.self"])
        kind = rng.choice(("weights", "weights", "weights", "scores", "mask"))
        body |= {
            "types": [attention_type],
            "layers": [rng.randrange(3 if model == "pronounce" else 6)],
            "kinds": [kind],
            "encoding": "f4" if kind == "scores" else "u1",
        }
        if model == "minilm" and kind == "weights" and rng.random() < 0.5:
            body |= {"granularity": "word", "hide_special": True}
        if rng.random() < 0.1:  # one head as JSON lists
            body |= {"heads": [rng.randrange(8)], "encoding": "json"}
        return Call("POST", "/api/v1/attention", f"attention {model}", body)

    def soak_call(self) -> Call:
        """Mostly `model_call`; also the page, models, positional tables, exports, health,
        and invalid requests that must get their documented 4xx."""
        roll = self.rng.random()
        if roll < 0.80:
            return self.model_call()
        if roll < 0.83:
            model = self.rng.choice(("pronounce", "minilm"))
            body = {"model": model, "text": self.text(model)}
            return Call("POST", "/api/v1/export", "export", body)
        if roll < 0.86:
            model = self.rng.choice(("pronounce", "minilm"))
            path = f"/api/v1/models/{model}/positional-encoding?positions=64&dims=32"
            return Call("GET", path, "positional-encoding")
        if roll < 0.89:
            return Call("GET", self.rng.choice(("/", "/api/v1/models", "/healthz")), "other GET")
        return self.invalid_call()

    def invalid_call(self) -> Call:
        """Input the docs document a 4xx for (a body that is not JSON: 400 or 422)."""
        text = self.text("pronounce")
        route, body, expect, raw = self.rng.choice(
            [
                ("analyze", {"text": "   "}, (422,), None),
                ("analyze", {"text": text, "model": "no-such-model"}, (404,), None),
                ("attention", {"text": text, "layers": [99]}, (422,), None),
                ("attention", {"text": text, "heads": [-1]}, (422,), None),
                ("analyze", {"text": "猫" * 4001}, (422,), None),
                ("analyze", None, (422,), b'{"text": NaN}'),
                ("analyze", None, (413,), json.dumps({"text": "x" * 300_000}).encode()),
                ("analyze", None, (400, 422), b'{"text": "unterminated'),
            ]
        )
        name = f"invalid {'/'.join(map(str, expect))}"
        return Call("POST", f"/api/v1/{route}", name, body, expect=expect, raw=raw)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


class Server:
    """`attnviz serve` with default settings (harness/serving.py), its log read as it goes:
    the status of every request and every line at error level or carrying a traceback."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.proc, self.base = start_server(env, capture_output=True)
        self.process = psutil.Process(self.proc.pid)
        self.statuses: Counter[int] = Counter()
        self.healthz_ms: list[float] = []  # as the server's access log times it
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                record = {"level": "?", "message": line.rstrip()}
            with self._lock:
                if record.get("logger") == "attnviz.access":
                    self.statuses[record.get("status", 0)] += 1
                    if record.get("path") == "/healthz":
                        self.healthz_ms.append(record.get("duration_ms", math.nan))
                if record.get("level") in ("error", "critical", "?") or "exc" in record:
                    self.problems.append(line.rstrip()[:2000])

    def status_counts(self) -> Counter[int]:
        with self._lock:
            return Counter(self.statuses)

    def usage(self) -> tuple[int, int]:
        """(resident bytes, threads) of the server and any child processes."""
        processes = [self.process, *self.process.children(recursive=True)]
        rss = sum(p.memory_info().rss for p in processes)
        threads = sum(p.num_threads() for p in processes)
        return rss, threads

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


class UsageSampler:
    """The server's resident memory and thread count every `interval` seconds, in a thread."""

    def __init__(self, server: Server, interval: float = 0.25) -> None:
        self.server = server
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []  # (time, rss, threads)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), *self.server.usage()))
            except psutil.Error:
                return
            self._stop.wait(self.interval)

    def since(self, start: float) -> list[tuple[float, int, int]]:
        return [s for s in self.samples if s[0] >= start]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
