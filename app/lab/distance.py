"""Each head's mean attention distance against depth (the ViT paper's figure 7,
Dosovitskiy et al. 2021): for a picture's run, how far each patch looks, in the pixels the
model reads, weighted by its attention to the other patches and averaged over the patches.
Low in a head that looks around itself, like a convolution; about half the picture's width
in one that reads it whole."""

from __future__ import annotations

import torch
from pydantic import BaseModel, Field

from ..errors import CannotServe
from ..payloads.schemas import AttentionType, InputRequest
from .context import LabContext


class DistanceRequest(InputRequest):
    type: AttentionType | None = Field(None, description="A self-attention type.")


class DistanceResponse(BaseModel):
    model: str
    type: AttentionType
    distance: list[list[float | None]] = Field(
        description="Per layer, per head: the mean attention distance, in pixels of the "
        "model's input (the processor's resized and cropped picture); null for a head whose "
        "patches give the patches (almost) nothing (under a millionth): no distance to tell."
    )
    patch: tuple[float, float] = Field(description="A patch's height and width in those pixels.")
    grid: tuple[int, int] = Field(description="Rows and columns of the patch grid.")
    elsewhere: list[list[float]] = Field(
        description="Per layer, per head: the share of the patches' attention that goes to "
        "positions that are no patch (a class or register token), left out of the distance."
    )
    assumes: str


ASSUMES = (
    "Per head, each patch's attention over the patches (renormalised: its weight on the "
    "class and register tokens is left out, and stated apart) weights the distance from "
    "its centre to each patch's centre, in the pixels the model reads; the mean over the "
    "patches of the picture. The ViT paper averages the same over 128 pictures."
)


def distance(ctx: LabContext, req: DistanceRequest) -> DistanceResponse:
    image = ctx.result.image
    if image is None:  # (the need `pictures` keeps text models out; a run says it read one)
        raise CannotServe("this run read no picture: attention distance is a picture's")
    spec = ctx.spec(req.type, self_only=True)
    patches = [i for i, p in enumerate(image.positions) if p.kind == "patch"]
    if len(patches) < 2:
        raise CannotServe("the picture makes fewer than two patches: no distance to measure")
    height, width = image.patch
    centres = torch.tensor(
        [
            ((image.positions[i].row or 0) + 0.5, (image.positions[i].column or 0) + 0.5)
            for i in patches
        ],
        dtype=torch.float64,
    ) * torch.tensor([height, width], dtype=torch.float64)
    apart = torch.cdist(centres, centres)  # (P, P) pixels
    index = torch.tensor(patches)
    distances, elsewhere = [], []
    for layer in range(spec.layers):
        weights = ctx.weights(ctx.result.captured, spec, layer).double()  # (H, T, T)
        rows = weights[:, index]  # (H, P, T): the patches as queries
        on_patches = rows[:, :, index]  # (H, P, P)
        kept = on_patches.sum(-1, keepdim=True)
        weighted = (on_patches / kept.clamp_min(1e-30) * apart).sum(-1)  # (H, P)
        told = kept.squeeze(-1).mean(-1) >= 1e-6  # (H,): a head that looks at the patches
        distances.append(
            [
                round(float(v), 4) if ok else None
                for v, ok in zip(weighted.mean(-1), told, strict=True)
            ]
        )
        elsewhere.append([round(float(v), 6) for v in (1 - kept.squeeze(-1)).mean(-1)])
    return DistanceResponse(
        model=ctx.entry.id,
        type=spec.type,
        distance=distances,
        patch=(height, width),
        grid=image.grid,
        elsewhere=elsewhere,
        assumes=ASSUMES,
    )
