"""The sample pictures the page offers (static/samples/) are the project's own: each
shipped file's pixels are what harness/samples.py draws, and the page lists each one."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from harness.samples import DRAWN, SAMPLES


@pytest.mark.parametrize("name", sorted(DRAWN))
def test_each_shipped_sample_is_what_the_harness_draws(name):
    with Image.open(SAMPLES / name) as shipped:
        assert (np.asarray(shipped.convert("RGB")) == np.asarray(DRAWN[name]())).all(), (
            f"static/samples/{name} differs: run python -m harness.samples"
        )


def test_the_page_offers_every_sample_and_only_those():
    page = (SAMPLES.parent / "js" / "pictures.js").read_text(encoding="utf-8")
    offered = set(re.findall(r'file: "([^"]+)"', page))
    assert offered == set(DRAWN) == {p.name for p in SAMPLES.glob("*.png")}
