"""A model folder's tokenizer probed before it is served: a tokenizer.json may hold a
pre-tokenizer regex (a Split, run by Oniguruma, which backtracks) that takes quadratic
time on a crafted text (`(\\s*\\w)*$`: 1.4 s at 16,000 characters, 90 s at SmolLM2's
131,072), or panics past Oniguruma's retry limit (`(a+)+$`), and the tokenizer runs in
Rust, where no deadline can stop it. So it is run first, in a process of its own, on
texts made to find such a regex, and refused where it fails or does not finish in time."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from ..checkpoints import CheckpointError

PROBE_CHARS = 32_768  # a prompt's characters (SmolLM2's limit is 131,072; GPT-2's regex:
# ~20 ms for all the probes at this size)
PROBE_SECONDS = 5.0  # the probes' process: its start (~0.3 s), the tokenizer's load, them
# texts that make a backtracking regex slow, made in the probes' process: long runs of one
# class, each ended by a character that fails the match at the end
SCRIPT = """
import sys
from tokenizers import Tokenizer
n = int(sys.argv[2])
probes = ["a" * n + "!", " " * n + "!", "a " * (n // 2) + "!", "1" * n + "a",
          "\u00e9" * n + "!", "\u4e00" * n + "!", "aaaa\\n" * (n // 5) + "!"]
tokenizer = Tokenizer.from_file(sys.argv[1])
print("loaded", flush=True)
for text in probes:
    tokenizer.encode(text)
"""


_PASSED: set[str] = set()  # the SHA-256 of each tokenizer.json that passed, this process


def probe_tokenizer(path: Path) -> None:
    """Refuse `path` (a tokenizer.json) where its tokenizer takes over PROBE_SECONDS on the
    probes; one the probes' process cannot load is left to the loader to report. A file
    probed before (by its content) is not probed again."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest in _PASSED:
        return
    try:
        probed = subprocess.run(
            [sys.executable, "-I", "-c", SCRIPT, str(path), str(PROBE_CHARS)],
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CheckpointError(
            f"{path.name}'s tokenizer took over {PROBE_SECONDS:g} s on texts of "
            f"{PROBE_CHARS:,} characters (a pre-tokenizer regex that backtracks): not served"
        ) from None
    if probed.returncode and probed.stdout.startswith("loaded"):
        # loaded, then failed on a probe: Oniguruma gives up on a regex that backtracks
        # past its retry limit ("retry-limit-in-match over"), and the tokenizer panics
        said = [line for line in probed.stderr.splitlines() if "rror" in line][-1:]
        raise CheckpointError(
            f"{path.name}'s tokenizer fails on texts of {PROBE_CHARS:,} characters"
            f"{': ' + said[0].strip()[:200] if said else ''} (a pre-tokenizer regex that "
            "backtracks): not served"
        )
    _PASSED.add(digest)
