from __future__ import annotations

import pytest

from attnviz.model.pronounce.data import Lexicon, held_out_split
from attnviz.model.pronounce.pronouncer import Pronouncer


@pytest.fixture(scope="session")
def lexicon() -> Lexicon:
    return Lexicon()


@pytest.fixture(scope="session")
def split(lexicon) -> dict:
    return held_out_split(lexicon)


@pytest.fixture(scope="session")
def shipped() -> Pronouncer:
    return Pronouncer.load()
