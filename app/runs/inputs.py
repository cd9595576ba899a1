"""What a run reads, checked against what its model reads: a text, a picture, or both
(the model's `text` and `pictures` capabilities), and the positions it makes (its price)."""

from __future__ import annotations

from attnviz.model.runner import pictures

from ..catalog.zoo import ModelEntry
from ..errors import CannotServe
from ..images import Picture

# the positions one picture may make (a processor that keeps the picture's shape makes a
# long thin one into tens of thousands: the capture of a run that long takes gigabytes)
MOST_PICTURE_POSITIONS = 8192


def tokens_read(entry: ModelEntry, text: str, picture: Picture | None) -> int:
    """The positions a run of `text` and `picture` reads (its price, before it runs); a
    422 past MOST_PICTURE_POSITIONS for a picture."""
    if picture is None:
        return entry.runner.tokens_read(text)
    width, height = picture.size
    try:  # (a processor's own rule refuses some shapes: Qwen2-VL's past 200 to 1)
        made = pictures(entry.runner).positions_read(width, height)
    except ValueError as exc:
        said = f"{entry.id} cannot read this {width:,} x {height:,} picture: {exc}"
        raise CannotServe(said) from None
    if entry.runner.capabilities.text:  # (a vision-language model reads the text beside it)
        made += entry.runner.tokens_read(text)
    if made > MOST_PICTURE_POSITIONS:
        raise CannotServe(
            f"{entry.id} would read this {width:,} x {height:,} picture as {made:,} positions; "
            f"at most {MOST_PICTURE_POSITIONS:,}: send a smaller or less elongated picture"
        )
    return made


def check_input(entry: ModelEntry, text: str | None, picture: Picture | None) -> None:
    """A 422 where the input is not what the model reads (its `text` and `pictures`
    capabilities): every route's runs come through here, so that a route of text (the
    lab's, generation) refuses a model of pictures, and the other way round."""
    can = entry.runner.capabilities
    if picture is not None and not can.pictures:
        raise CannotServe(f"{entry.id} reads text, not pictures: leave image out")
    if not can.text:
        if picture is None:
            raise CannotServe(
                f"{entry.id} reads pictures"
                + (", not text" if text is not None else "")
                + ": send one as image (the digest POST /api/v1/images answers)"
            )
        if text is not None:
            raise CannotServe(f"{entry.id} reads a picture alone: leave text out")
    elif text is None and picture is None:
        raise CannotServe(f"{entry.id} reads text: text is missing")
