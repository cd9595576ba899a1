"""Server settings, read from ATTNVIZ_* environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from attnviz.model.placement import Placement, device_check, dtype_check
from attnviz.model.pronounce.pronouncer import SHIPPED
from attnviz.model.runtime import usable_cpus


class ApiKey(BaseModel):
    """A key a known user sends (Authorization: Bearer KEY, or X-API-Key): kept as the
    SHA-256 of the key alone (`attnviz key` makes one), with its own share of the server
    where it is to differ from an address's."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    requests: int | None = Field(None, ge=0, description="in flight at once; default: a client's")
    cost_per_minute: int | None = Field(None, ge=0, description="default: a client's")


Device = Annotated[str, AfterValidator(device_check)]
Dtype = Annotated[str, AfterValidator(dtype_check)]
MaxMemory = dict[str, str | int]
Quantize = Literal["none", "4bit", "8bit"]


class OwnModel(BaseModel):
    """A model of yours with its own placement (ATTNVIZ_MODELS's value as an object:
    {"path": "/models/llama", "device": "cuda:1", "dtype": "bfloat16"}); what it leaves
    out is the server's (ATTNVIZ_DEVICE, ATTNVIZ_DTYPE, ATTNVIZ_MAX_MEMORY)."""

    model_config = ConfigDict(extra="forbid")

    path: Path
    device: Device | None = None
    dtype: Dtype | None = None
    max_memory: MaxMemory | None = None
    quantize: Quantize | None = None


def _as_key(value: object) -> object:
    return {"sha256": value} if isinstance(value, str) else value


class Settings(BaseSettings):
    # an empty variable (compose passes one for a setting left unset) means the default
    model_config = SettingsConfigDict(env_prefix="ATTNVIZ_", env_ignore_empty=True)

    host: str = Field("127.0.0.1", description="Address uvicorn binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port uvicorn listens on.")
    workers: int = Field(1, ge=1, description="uvicorn worker processes (each loads the models).")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["json", "text"] = Field(
        "json", description="Lines on stdout: JSON objects (request id, route, status, duration)."
    )
    torch_threads: int = Field(
        0,
        ge=0,
        description="Torch threads per operation; 0: OMP_NUM_THREADS where set, else the CPUs "
        "this process may use.",
    )
    pronounce_dir: Path = Field(SHIPPED, description="Checkpoint folder of the default model.")
    zoo: list[str] = Field(
        [],
        description='Model families to load, by registry id (JSON: ["pronounce"]); empty: all. '
        "Each comes with its untrained twin.",
    )
    models: dict[str, Path | OwnModel] = Field(
        {},
        description='Models of your own, by id (JSON: {"mine": "/models/my-llama"}): a folder '
        "in Hugging Face's layout (config.json, safetensors, tokenizer.json) of any "
        "architecture transformers has whose attention goes through its attention interface "
        "(Llama, Qwen2, Mistral, GPT-2 and BERT on model/), or a .gguf file of an architecture "
        "transformers reads from GGUF (Llama's on model/), or the "
        "repo id of one in the Hugging Face cache; or an object with its own placement "
        '({"path": ..., "device": "cuda:1", "dtype": "bfloat16", "max_memory": {...}}). One '
        "that cannot be read is listed as refused, with its reason.",
    )
    device: Device = Field(
        "auto",
        description="Where your models run: auto (every CUDA GPU, the model spread over them "
        "by accelerate where there are several; else mps; else the CPU), cpu, cuda, cuda:N, "
        "mps. A device torch does not see refuses the model, saying so. The shipped models "
        "run on the CPU, in float32, on model/'s code.",
    )
    dtype: Dtype = Field(
        "auto",
        description="The dtype your models compute in: auto (the checkpoint's own: "
        "config.json's, else its safetensors'; a GGUF file's: float32), bfloat16, float16, "
        "float32. model/'s code computes in float32 on the CPU only: a model it reads that "
        "runs otherwise runs on transformers' code.",
    )
    quantize: Quantize = Field(
        "none",
        description="Your models' matrices read in 4 bits (NF4) or 8 bits (LLM.int8()) by "
        "bitsandbytes, on CUDA only (the `quantized` extra); placed elsewhere such a model is "
        "refused, saying so, and so is a .gguf file (already quantized). Views that read "
        "weight matrices (value-weighted norms, ALTI, the logit lens, DLA, the graph) are "
        "refused for it; attention itself is captured as for any model.",
    )
    max_memory: MaxMemory = Field(
        {},
        description='Bytes per device a model of yours may take (JSON: {"0": "70GiB", "1": '
        '"70GiB", "cpu": "20GiB"}), as accelerate reads them: given, the model is spread '
        "over them by device_map='auto' (past the GPUs, on the CPU; past that, offloaded to "
        "disk); only the devices a model may use count (on cpu: the CPU and the disk; on "
        "cuda:N: that GPU, the CPU and the disk).",
    )
    backend: Literal["auto", "transformers"] = Field(
        "auto",
        description="Which code runs your models: auto, the table of "
        "model/pretrained/backends.py (model/ for the families it reads, transformers' "
        "own code for the rest); transformers: transformers' code for every folder.",
    )
    own_models_bytes: int = Field(
        0,
        ge=0,
        description="Bytes of weights of your models kept loaded at once in the CPU's memory, "
        "in the dtype each runs in; past it the least recently used is freed (read again when "
        "next used). A model larger than this is refused at start-up, with the figures. 0: "
        "the room the memory limit (ATTNVIZ_MEMORY_LIMIT_BYTES, the cgroup's, the machine's) "
        "leaves after the server's needs and its other caches, stated at start-up. A model "
        "on a GPU counts against that GPU's memory instead.",
    )
    max_model_bytes: int = Field(
        64 * 2**30,
        ge=1,
        description="Bytes of weight files a model of yours may have; larger: refused before "
        "it is read.",
    )
    plugins: list[str] = Field(
        [],
        description="Python modules imported when the app is made (JSON list); each may "
        "register model families (attnviz.app.catalog.zoo.register) or lab experiments "
        "(attnviz.app.lab.register).",
    )
    default_model: str = Field(
        "pronounce", description="The model a request without one runs (if loaded; else the first)."
    )
    max_text_chars: int = Field(
        4000,
        ge=1,
        description="Characters per text (512 English WordPieces fit), or 16 per token a model "
        "reads where that is more (SmolLM2: 8,192 tokens, 131,072 characters: any real text "
        "of 8,192 tokens); longer: 422. A text of more tokens than its model reads is read "
        "up to them and marked truncated.",
    )
    max_capture_bytes: int = Field(
        1_500_000_000,
        ge=1_000_000,
        description="Bytes one run of a long-context model (SmolLM2) may capture: its longest "
        "prompt is what fits (8,192 tokens take about 1.2 GB); longer: 422 naming it.",
    )
    max_new_tokens: int = Field(
        64,
        ge=1,
        le=4096,
        description="Tokens one generation may add to a prompt (models that continue one); "
        "more asked: 422.",
    )
    max_body_bytes: int = Field(
        262144, ge=1024, description="Request body bytes (a long prompt fits); larger: 413."
    )
    drain_body_bytes: int = Field(
        10 * 2**20,
        ge=0,
        description="An over-limit body up to this size is read and discarded before its 413, "
        "so that a client sending all of it first reads the answer; larger: 413 and close.",
    )
    max_response_bytes: int = Field(
        50_000_000, ge=1000, description="Estimated attention response size; larger: 422."
    )
    max_concurrent_runs: int = Field(
        0,
        ge=0,
        description="Model runs at once, each on a thread of its own; 0: as many as the cores "
        "hold runs of ATTNVIZ_TORCH_THREADS threads (1 where that is 0: a run then uses every "
        "core, or the threads OMP_NUM_THREADS gives torch; more runs than the cores hold slow "
        "every run down, see app.runs.tensor_threads).",
    )
    max_queued_runs: int = Field(
        16,
        ge=0,
        description="Model runs waiting; past that: 503. One client's runs may hold a "
        "quarter of the places (running and waiting), or 4 where that is more; more: 429.",
    )
    client_requests: int = Field(
        8,
        ge=0,
        description="API requests one client (address) may have in flight at once; more: "
        "429. 0: no limit (nor a share of the run queue's places).",
    )
    client_cost_per_minute: int = Field(
        1200,
        ge=0,
        description="Cost of API requests one client may spend a minute (a GET 1, a model "
        "run 2, an experiment 5, an export 10, a corpus run 20), and, as much again apart, "
        "the work of its model runs and corpus runs, each charged before it runs (a unit per "
        "256 tokens through one layer); more: 429. 0: no limit.",
    )
    api_keys: dict[str, Annotated[ApiKey, BeforeValidator(_as_key)]] = Field(
        {},
        description='Named API keys, JSON: {"lab-a": "<hex SHA-256 of the key>"} or {"lab-a": '
        '{"sha256": ..., "requests": 16, "cost_per_minute": 6000}}. A request with a known '
        "key is its key's client (its own share); an unknown key: 401; none: its address.",
    )
    anonymous_max_tokens: int = Field(
        0,
        ge=0,
        description="Tokens a model run of a client without an API key may read; more: "
        "422 saying so. 0: as many as the model reads.",
    )
    trusted_proxies: list[str] = Field(
        [],
        description='Proxies (addresses or networks, JSON: ["10.0.0.0/8"]) whose '
        "X-Forwarded-For names the client; from anyone else the header is ignored.",
    )
    memory_limit_bytes: int = Field(
        0,
        ge=0,
        description="Memory the server may hold: its budgets are checked against it at "
        "start-up. 0: its cgroup's limit (a container's), else the machine's memory.",
    )
    run_deadline_s: float = Field(
        300.0,
        gt=0,
        description="Seconds of a tensor thread one request's work may take (a generation, "
        "or an experiment run in steps such as needle: the time its steps run, in all, not its "
        "waits between them); past it, it is stopped at "
        "its next layer: 422 saying so.",
    )
    turn_s: float = Field(
        1.0,
        ge=0,
        description="Seconds a model pass of our code (SmolLM2's, the seed's, MiniLM's) runs "
        "before it gives way, between two of its layers, to other clients' short runs "
        "waiting (analyses and attention of a capture under ATTNVIZ_TURN_BYTES), one a "
        "client, on its own thread and slot; its deadline is moved by their time. 0: "
        "passes never give way (a 7,800-token SmolLM2 pass held everyone for ~38 s).",
    )
    turn_bytes: int = Field(
        128 * 2**20,
        ge=0,
        description="The most a run lent a long pass's turn (ATTNVIZ_TURN_S) may capture, "
        "as estimated before it runs (SmolLM2: ~125 tokens; MiniLM: ~340); counted in the "
        "memory budgets besides the runs' own captures, once a run at once. 0: none is lent one.",
    )
    loop_stall_warn_ms: float = Field(
        100.0,
        ge=0,
        description="Log a warning when the event loop woke this many ms late (something "
        "held it, or the interpreter's lock, that long: every request waited). 0: not watched.",
    )
    send_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds a piece of an answer may wait for a client that does not "
        "read; past it the request is dropped and its work cancelled.",
    )
    least_read_rate: int = Field(
        65536,
        ge=1024,
        description="Bytes a second a client must read an answer at, on average, once the "
        "send timeout's grace is spent (a 50 MB answer: 13 minutes); slower: dropped.",
    )
    image_max_bytes: int = Field(
        20_000_000,
        ge=1024,
        description="Bytes of one picture's file (PNG, JPEG or WebP); larger: 413, unread.",
    )
    image_max_pixels: int = Field(
        50_000_000,
        ge=1024,
        description="Pixels of one picture (width x height, read from its header before "
        "anything is decoded; a side at most 16,384); larger: 413 naming the limit.",
    )
    images_bytes: int = Field(
        256 * 2**20,
        ge=0,
        description="Bytes of decoded pictures the server keeps for runs to name by digest "
        "(RGB as held, 4 bytes a pixel, and their previews), least recently used dropped "
        "first; one dropped is asked for again (404); a picture larger than this: 413. "
        "Scaled with the other caches where the memory is short.",
    )
    corpus_max_bytes: int = Field(
        4 * 2**20, ge=1024, description="Bytes of a text file a corpus run reads (upload)."
    )
    corpus_max_sentences: int = Field(
        20_000, ge=1, description="Sentences one corpus run reads at most."
    )
    corpus_max_tokens: int = Field(
        500_000,
        ge=1,
        description="Tokens one corpus run reads at most: its sentences' tokens, as its model "
        "reads them (counted when it is sent); more: 422. A run is charged its tokens times "
        "its model's layers, as a model run is.",
    )
    ray_address: str | None = Field(
        None,
        description="Run corpus runs on this Ray cluster (Ray Data; the `ray` extra). Unset: "
        "in this process, and nothing of Ray is imported.",
    )
    corpus_runs_per_client: int = Field(
        2, ge=1, description="Corpus runs one client may have waiting or running; more: 429."
    )
    corpus_keep_s: float = Field(
        3600.0,
        gt=0,
        description="Seconds a finished corpus run is kept from other clients' runs: before "
        "that, only its owner's newer runs drop it.",
    )
    corpus_results_bytes: int = Field(
        512 * 2**20,
        ge=2**20,
        description="Bytes of corpus runs' results kept; past it, the oldest finished dropped.",
    )
    cache_bytes: int = Field(
        1536 * 2**20,
        ge=0,
        description="Bytes of captures kept for repeated requests (a long prompt's views read "
        "its capture from here: 8,192 SmolLM2 tokens take about 1 GB).",
    )

    def capture_budget(self) -> int:
        """What one long run may capture: max_capture_bytes, and no more than the run cache
        holds (its views read the capture from there: one that does not fit would be run
        again for every window)."""
        if not self.cache_bytes:
            return self.max_capture_bytes
        return min(self.max_capture_bytes, self.cache_bytes)

    def placement(self, model_id: str) -> Placement:
        """Where a model of yours runs: its own entry's placement, the server's otherwise."""
        entry = self.models.get(model_id)
        own = entry if isinstance(entry, OwnModel) else OwnModel(path=Path(str(entry)))
        return Placement(
            own.device or self.device,
            own.dtype or self.dtype,
            own.max_memory if own.max_memory is not None else self.max_memory,
            own.quantize or self.quantize,
        )

    def model_path(self, model_id: str) -> Path:
        entry = self.models[model_id]
        return entry.path if isinstance(entry, OwnModel) else entry

    def concurrent_runs(self) -> int:
        """max_concurrent_runs, or where it is 0 the runs the usable cores hold at once."""
        if self.max_concurrent_runs:
            return self.max_concurrent_runs
        cpus = usable_cpus()
        return max(1, cpus // (self.torch_threads or cpus))
