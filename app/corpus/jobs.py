"""Corpus runs as background jobs: one at a time on a thread of their own, clients in turn,
each batch of sentences run on the tensor threads in a run slot of its own (so that the
page's requests go on between two batches), every head's statistics per sentence kept
(model/methods/corpus_stats.py), and, for the heads asked for, every token's query and key
vectors. A run is counted in tokens and charged for them when it is sent
(ATTNVIZ_CORPUS_MAX_TOKENS); its results' bytes are reserved when it starts, within a
budget (ATTNVIZ_CORPUS_RESULTS_BYTES) whose oldest finished results are dropped past it."""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from typing import ClassVar

import numpy as np
import torch

from attnviz.model.methods.corpus_stats import STATISTICS
from attnviz.model.runtime import lower_priority

from ..catalog.zoo import ModelEntry
from ..errors import AttnvizError, Busy, CannotServe, NotAllowed, NotFound, OverClientLimit
from ..request import charge
from ..runs.inference import Inference, work_units
from . import compute
from .results import HeadKey, Job, Vectors, heads_of

LOG = logging.getLogger("attnviz")
QUEUED_AT_MOST = 16  # jobs waiting behind the running one, every client's; past it: 503


class CorpusRuns:
    """The corpus runs of a server: submitted, run one at a time, kept within a budget.
    One a server, found from its `Inference` (`of`): the runs do not know it."""

    _of: ClassVar[weakref.WeakKeyDictionary[Inference, CorpusRuns]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, inference: Inference) -> CorpusRuns:
        """The corpus runs made for a server's inference at its start (app/main.py)."""
        return cls._of[inference]

    def __init__(self, inference: Inference, max_bytes: int) -> None:
        CorpusRuns._of[inference] = self
        self.inference = inference
        self.max_bytes = max_bytes
        self.jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._served: dict[str, float] = {}  # each client's last run started (turns)
        self._stopped = False
        self._thread = threading.Thread(target=self._work, name="attnviz-corpus", daemon=True)
        self._thread.start()

    def submit(
        self,
        entry: ModelEntry,
        sentences: list[str],
        origin: str,
        keep: list[HeadKey],
        owner: str | None = None,
        client: str = "",
    ) -> Job:
        """A new run, queued: counted in tokens (a 422 past ATTNVIZ_CORPUS_MAX_TOKENS) and
        charged for them. `owner`: the token of an earlier run of this client's (its runs
        are then one owner's; a new token otherwise). A client with as many runs waiting or
        running as it may have gets a 429; a full queue, or results kept for other clients
        that leave no room for this one's, a 503. Its results' room is taken when it
        starts, not while it waits."""
        heads = heads_of(entry)
        estimate = self.estimate(len(sentences), len(heads))
        if estimate > self.max_bytes:
            raise CannotServe(
                f"its statistics would take {estimate:,} bytes, over what the server keeps "
                f"({self.max_bytes:,}, ATTNVIZ_CORPUS_RESULTS_BYTES): send fewer sentences",
            )
        if keep and self.inference.settings.ray_address:
            raise CannotServe(
                "vectors are kept by corpus runs in this process only, not on Ray "
                "(ATTNVIZ_RAY_ADDRESS is set)",
            )
        job = Job(uuid.uuid4().hex[:16], entry, sentences, origin, keep, heads)
        job.owner = owner if owner and self._owns(owner) else secrets.token_urlsafe(18)
        job.client = client
        with self._lock:
            self._admissible(job, estimate)  # (before its tokens are counted)
        _, job.tokens = compute.planned(entry, sentences)  # (seconds at 20,000: unlocked)
        most = self.inference.settings.corpus_max_tokens
        if job.tokens > most:
            raise CannotServe(
                f"its sentences are {job.tokens:,} tokens as {entry.id} reads them; a run "
                f"may read {most:,} (ATTNVIZ_CORPUS_MAX_TOKENS): send fewer sentences",
            )
        with self._lock:
            self._admissible(job, estimate)  # (again: others may have been sent meanwhile)
            # charged once it is sure to be queued (the budget's own lock, taken briefly)
            charge(work_units(entry.config, job.tokens), f"a corpus run of {job.tokens:,} tokens")
            job.vectors = {head: Vectors() for head in keep}  # before any reader sees the job
            self.jobs[job.id] = job
            self._wake.notify()
        return job

    @staticmethod
    def estimate(sentences: int, heads: int) -> int:
        """The bytes of a run's statistics."""
        return sentences * len(STATISTICS) * heads * 4

    def _admissible(self, job: Job, estimate: int) -> None:
        """A 429 where its client has as many runs waiting or running as it may, a 503
        where the queue is full or the results kept leave it no room even once those that
        may be dropped for it are. (Called holding the lock.)"""
        per_client = self.inference.settings.corpus_runs_per_client
        active = [j for j in self.jobs.values() if j.status in ("queued", "running")]
        mine = sum(j.client == job.client for j in active)
        if mine >= per_client:
            raise OverClientLimit(
                f"this client has {mine} corpus runs waiting or running, the most one "
                "client may (ATTNVIZ_CORPUS_RUNS_PER_CLIENT): wait for one or cancel it",
                headers={"Retry-After": "30"},
            )
        waiting = sum(j.status == "queued" for j in active)
        if waiting >= QUEUED_AT_MOST:
            raise Busy(
                f"{waiting} corpus runs are waiting already; retry when one is done",
                headers={"Retry-After": "30"},
            )
        if not self._make_room(job, estimate, drop=False):
            raise Busy(
                "the results the server keeps for other runs leave no room for this one "
                f"(ATTNVIZ_CORPUS_RESULTS_BYTES, {self.max_bytes:,} bytes): send fewer "
                "sentences or retry later",
                headers={"Retry-After": "60"},
            )

    def _owns(self, owner: str) -> bool:
        given = owner.encode()  # (compare_digest takes no str beyond ASCII)
        with self._lock:
            return any(secrets.compare_digest(j.owner.encode(), given) for j in self.jobs.values())

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(
                f"no corpus run {job_id!r} (finished ones are kept within "
                "ATTNVIZ_CORPUS_RESULTS_BYTES, the oldest dropped)",
            )
        return job

    def cancel(self, job_id: str, owner: str | None) -> Job:
        """Stop a run: its owner's token only (403 otherwise)."""
        job = self.get(job_id)
        if not owner or not secrets.compare_digest(owner.encode(), job.owner.encode()):
            raise NotAllowed(
                "only the run's owner may cancel it: send the owner token its creation "
                "answered, as X-Owner-Token",
            )
        job.cancelled.set()
        with self._lock:
            if job.status == "queued":
                job.status, job.finished = "cancelled", time.time()
        return job

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for job in self.jobs.values():
                job.cancelled.set()
            self._wake.notify()

    def _work(self) -> None:
        lower_priority()  # (below the event loop's, as the tensor threads)
        while True:
            with self._lock:
                while not self._stopped and not any(
                    j.status == "queued" for j in self.jobs.values()
                ):
                    self._wake.wait()
                if self._stopped:
                    return
                job = self._next_in_turn()
                job.status, job.started = "running", time.time()
                self._served[job.client] = time.monotonic()
                # its results' room, taken now (a run waiting holds none)
                estimate = self.estimate(job.total, len(job.heads))
                # (nothing dropped for a run that would not fit even so)
                room = self._make_room(job, estimate, drop=False) and self._make_room(job, estimate)
                if room:
                    job.start(len(STATISTICS), len(job.heads))
            try:
                if not room:
                    raise CannotServe(
                        "when it started, the results kept for other runs left no room for "
                        f"its own (ATTNVIZ_CORPUS_RESULTS_BYTES, {self.max_bytes:,} bytes): "
                        "send it again later, or fewer sentences",
                    )
                self._run(job)
                status = "cancelled" if job.cancelled.is_set() else "done"
            except AttnvizError as exc:  # a sentence the model refuses ends the run, said
                LOG.info("corpus run %s stopped: %s", job.id, exc.detail)
                job.error, status = exc.detail, "failed"
            except Exception:  # (its text, a path or a library's, is the operator's: logged)
                LOG.exception("corpus run %s failed", job.id)
                job.error = f"the run failed on the server (its log says why: corpus run {job.id})"
                status = "failed"
            with self._lock:
                job.status, job.finished = status, time.time()
                self._make_room(job, 0)

    def _next_in_turn(self) -> Job:
        """The queued run of the client served longest ago (never served: first), its
        oldest: clients take turns, so that one client's runs, sent first, do not all run
        before another's. (Called holding the lock.)"""
        queued = [j for j in self.jobs.values() if j.status == "queued"]
        if len(self._served) > 4096:  # (the clients with runs kept: the others forgotten)
            kept = {j.client for j in self.jobs.values()}
            self._served = {c: t for c, t in self._served.items() if c in kept}
        return min(queued, key=lambda j: (self._served.get(j.client, 0.0), j.created))

    def _make_room(self, job: Job, more: int, drop: bool = True) -> bool:
        """Drop finished runs, the oldest first, while the kept results and `more` bytes
        pass the budget: only `job`'s owner's (or its client's) older runs, and runs
        finished longer ago than ATTNVIZ_CORPUS_KEEP_S (another client's newer runs never
        drop one's results). Whether they fit now (without `drop`: whether they would,
        dropping nothing). (Called holding the lock.)"""
        aged = time.time() - self.inference.settings.corpus_keep_s

        def droppable(j: Job) -> bool:
            if j is job or j.finished is None or j.status not in ("done", "cancelled", "failed"):
                return False
            mine = j.owner == job.owner or bool(job.client and j.client == job.client)
            return (mine and j.created <= job.created) or j.finished < aged

        candidates = [j for j in self.jobs.values() if droppable(j)]
        kept = sum(j.bytes for j in self.jobs.values() if j is not job) + job.bytes + more
        if not drop:
            return kept - sum(j.bytes for j in candidates) <= self.max_bytes
        while kept > self.max_bytes:
            if not candidates:
                return False
            oldest = candidates.pop(0)
            kept -= oldest.bytes
            del self.jobs[oldest.id]
            LOG.info("corpus run %s dropped: past ATTNVIZ_CORPUS_RESULTS_BYTES", oldest.id)
        return True

    def _run(self, job: Job) -> None:
        entry = job.entry
        if self.inference.settings.ray_address:
            return self._run_on_ray(job)
        names = compute.names_of(entry, job.keep)
        for batch in compute.batches(entry, job.sentences):
            if job.cancelled.is_set():
                return
            self.inference.threads.submit(self._batch, job, batch, names).result()
            job.done += len(batch)
            with self._lock:
                fits = self._make_room(job, 0)
            if not fits:
                job.error = (f"stopped after {job.done} sentences: the results kept, its and "
                             "other runs', passed ATTNVIZ_CORPUS_RESULTS_BYTES "
                             f"({self.max_bytes:,} bytes); keep "
                             "fewer heads' vectors or read fewer sentences")  # fmt: skip
                job.cancelled.set()
                return

    def _batch(self, job: Job, batch: compute.Batch, names: list[str]) -> None:
        """One batch's pass, in a run slot of its own, and its sentences' results. A
        background run waits for its slot however busy the server is (never refused)."""
        with self.inference.limiter.running():
            rows = compute.run_batch(job.entry, batch, job.sentences.__getitem__, names)
        for index, result, row in rows:
            job.add(index, compute.statistics(job.entry, result, row))
            for head, kept in job.vectors.items():
                q, k, query_tokens, key_tokens = compute.vectors(job.entry, head, result, row)
                kept.queries.append(q)
                kept.keys.append(k)
                kept.rows.append(query_tokens)
                kept.columns.append(key_tokens)
                kept.sentence.append(index)

    def _run_on_ray(self, job: Job) -> None:
        """The run as a Ray Data pipeline on ATTNVIZ_RAY_ADDRESS's cluster (app/corpus/
        on_ray.py), its progress as the workers' batches come back."""
        from .on_ray import statistics_on_ray

        settings = self.inference.settings
        parts = statistics_on_ray(
            settings.ray_address, job.entry.id, job.sentences, settings.model_dump()
        )
        for indices, stats in parts:
            job.add(torch.from_numpy(np.array(indices)), torch.from_numpy(np.array(stats)))
            job.done += len(indices)
            if job.cancelled.is_set():
                return
