"""The word lists the page reads from the server, kept once: every kind of block has the
wire encoding the page asks it in (sent in the boot JSON), and u1 only where the values
are in [0, 1]."""

from __future__ import annotations

from typing import get_args

from attnviz.app.payloads.blocks import ENCODING_OF_KIND
from attnviz.app.payloads.schemas import Encoding, Kind


def test_every_kind_has_one_encoding_the_wire_has():
    assert set(ENCODING_OF_KIND) == set(get_args(Kind))
    assert set(ENCODING_OF_KIND.values()) <= set(get_args(Encoding)) - {"json"}
    assert {k for k, e in ENCODING_OF_KIND.items() if e == "u1"} == {"weights", "mask"}
