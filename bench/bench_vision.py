"""Image encoders: our capture of every head against transformers' own eager forward with
`output_attentions=True`, on the same weights in the same run: a ViT-B/16- and a
SigLIP-So400m/14-shaped random model at 224 px (float32, CPU).

    .venv/bin/python bench/bench_vision.py [--repeat 5] [--threads 2] [--only vit]

Ours: the app's run of a picture (model/hf/vision.py's `ImageEncoder.read`'s pass:
`HFTransformer.run_with_capture` with every hook point: q, k, v, scores, mask, weights and
context of every layer) on the processor's pixels; theirs: the same weights loaded with
attn_implementation="eager", asked for every layer's weights. Median of --repeat runs each,
after one warm-up (target: ours at most 1.2 x theirs). The processor's own preprocessing is
the same for both and left out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.model.hf.pictures import load_image_encoder
from bench.bench_capture import median_time

SHAPES = {
    # google/vit-base-patch16-224's config
    "vit": ("ViTModel", "ViTConfig", dict(image_size=224, patch_size=16, hidden_size=768,
            num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)),
    # google/siglip-so400m-patch14-384's vision tower, at 224 px
    "siglip": ("SiglipVisionModel", "SiglipVisionConfig", dict(image_size=224, patch_size=14,
               hidden_size=1152, num_hidden_layers=27, num_attention_heads=16,
               intermediate_size=4304)),
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=list(SHAPES), action="append")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    print(f"{args.threads} torch threads, median of {args.repeat} after a warm-up, float32\n")
    print("| model | positions | transformers eager + output_attentions | ours, every head "
          "captured | ratio |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in args.only or list(SHAPES):
        model_name, config_name, shape = SHAPES[name]
        config = getattr(transformers, config_name)(**shape)
        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as folder:
            getattr(transformers, model_name)(config).save_pretrained(folder)
            size = {"height": shape["image_size"], "width": shape["image_size"]}
            transformers.ViTImageProcessorPil(size=size).save_pretrained(folder)
            ours = load_image_encoder(folder)
            theirs = getattr(transformers, model_name).from_pretrained(
                folder, attn_implementation="eager"
            )
        theirs.eval()
        pixels = torch.randn(1, 3, shape["image_size"], shape["image_size"])

        def eager(theirs=theirs, pixels=pixels) -> None:
            with torch.no_grad():
                theirs(pixel_values=pixels, output_attentions=True)

        def captured(ours=ours, pixels=pixels) -> None:
            ours.model.run_with_capture(pixels)

        first = median_time(eager, args.repeat)
        second = median_time(captured, args.repeat)
        positions = (shape["image_size"] // shape["patch_size"]) ** 2 + (name == "vit")
        print(f"| {name} ({sum(p.numel() for p in theirs.parameters()) / 1e6:.0f} M) | "
              f"{positions} | {first * 1e3:.0f} ms | {second * 1e3:.0f} ms | "
              f"{second / first:.2f}x |")  # fmt: skip
        del ours, theirs


if __name__ == "__main__":
    main()
