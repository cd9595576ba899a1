"""Image encoders on transformers' own code (model/hf/vision.py): tiny seeded random models
of ViT, DeiT, BEiT (its relative position bias), DINOv2 with and without registers, and the
vision towers of SigLIP and CLIP, saved with their image processors and read back as the
server reads them: every head's weights equal transformers' own eager attention
(`output_attentions`), every position named; and the patch map, checked by a mark drawn
on the picture where the map puts one patch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T
from PIL import Image, ImageDraw

from attnviz.model.hf.pictures import load_image_encoder

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
GRID = dict(image_size=32, patch_size=8)  # 4 x 4 patches
SQUARE = {"height": 32, "width": 32}
# (model class, config, image processor (their PIL backends: no torchvision), the labels of
# the positions before the patches)
CASES = {
    "vit": (T.ViTModel, T.ViTConfig(**GRID, **SMALL), T.ViTImageProcessorPil(size=SQUARE),
            ["[CLS]"]),
    "deit": (T.DeiTModel, T.DeiTConfig(**GRID, **SMALL),
             T.DeiTImageProcessorPil(size={"height": 40, "width": 40}, crop_size=SQUARE),
             ["[CLS]", "[DIST]"]),
    "beit": (T.BeitModel, T.BeitConfig(**GRID, use_relative_position_bias=True, **SMALL),
             T.BeitImageProcessorPil(size=SQUARE, do_center_crop=False), ["[CLS]"]),
    "dinov2": (T.Dinov2Model, T.Dinov2Config(**GRID, **SMALL),
               T.BitImageProcessorPil(size={"shortest_edge": 40}, crop_size=SQUARE), ["[CLS]"]),
    "dinov2_with_registers": (
        T.Dinov2WithRegistersModel,
        T.Dinov2WithRegistersConfig(**GRID, num_register_tokens=4, **SMALL),
        T.BitImageProcessorPil(size={"shortest_edge": 40}, crop_size=SQUARE),
        ["[CLS]", "[REG 0]", "[REG 1]", "[REG 2]", "[REG 3]"],
    ),
    "siglip": (T.SiglipVisionModel, T.SiglipVisionConfig(**GRID, **SMALL),
               T.SiglipImageProcessorPil(size=SQUARE), []),
    "clip": (T.CLIPVisionModel, T.CLIPVisionConfig(**GRID, projection_dim=16, **SMALL),
             T.CLIPImageProcessorPil(size={"shortest_edge": 40}, crop_size=SQUARE), ["[CLS]"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    made = {}
    for name, (cls, config, processor, _) in CASES.items():
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(name)
        cls(config).eval().save_pretrained(folder)
        processor.save_pretrained(folder)
        made[name] = folder
    return made


def noise(width: int = 70, height: int = 50) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize("name", list(CASES))
def test_every_heads_weights_are_transformers_eager_attention(folders, name):
    cls, _, _, leading = CASES[name]
    encoder = load_image_encoder(folders[name])
    reading = encoder.read(noise())
    reference = cls.from_pretrained(folders[name], attn_implementation="eager").eval()
    with torch.no_grad():
        out = reference(pixel_values=reading.pixel_values[None], output_attentions=True)
    assert len(out.attentions) == 2
    for layer, expected in enumerate(out.attentions):
        got = reading.capture[f"encoder.{layer}.self_attn.hook_weights"]
        assert got.shape == expected.shape
        assert (got - expected).abs().max() <= 1e-5, (name, layer)
    assert (reading.states - out.last_hidden_state[0]).abs().max() <= 1e-5
    labels = [p.label for p in reading.positions]
    assert labels == leading + [f"▦ {r},{c}" for r in range(4) for c in range(4)]
    assert len(labels) == out.attentions[0].shape[-1]


@pytest.mark.parametrize(
    ("name", "patch"), [("vit", (1, 2)), ("siglip", (3, 0)), ("deit", (2, 1)), ("clip", (1, 1))]
)
def test_the_patch_map_puts_a_patchs_box_over_the_mark_drawn_there(folders, name, patch):
    """A grey picture of 300 x 200 (resized to a square, or its short side to 40 and its
    centre cropped) with a red mark over the box the map gives one patch: in the pixels the
    processor makes, that patch is the reddest, and most of it is red."""
    encoder = load_image_encoder(folders[name])
    picture = Image.new("RGB", (300, 200), (128, 128, 128))
    grey = encoder.read(picture)
    r, c = patch
    (box,) = [p.box for p in grey.positions if (p.row, p.column) == (r, c)]
    assert box is not None
    left, top, right, bottom = box
    # (a pixel in from each side: a resize blends the edges with their neighbours)
    inset = max((right - left), (bottom - top)) / 8
    ImageDraw.Draw(picture).rectangle(
        (left + inset, top + inset, right - inset - 1, bottom - inset - 1), fill=(255, 0, 0)
    )
    pixels = encoder.read(picture).pixel_values.numpy()
    red = pixels[0] - (pixels[1] + pixels[2]) / 2  # (normalised: red is positive)
    tiles = red.reshape(4, 8, 4, 8).transpose(0, 2, 1, 3).reshape(4, 4, 64)
    redness = (tiles > 0.5).mean(-1)
    assert np.unravel_index(redness.argmax(), redness.shape) == (r, c), redness
    assert redness[r, c] >= 0.5 and np.delete(redness.ravel(), r * 4 + c).max() <= 0.1, redness


def test_a_crop_leaves_the_picture_s_sides_out_of_every_box(folders):
    """Resized to 60 x 40 and cropped to its centre 32 x 32: the boxes cover the middle of
    the picture only, from (14, 4) to (46, 36) in resized pixels, times 300 / 60."""
    reading = load_image_encoder(folders["clip"]).read(Image.new("RGB", (300, 200)))
    boxes = [p.box for p in reading.positions if p.kind == "patch"]
    assert boxes[0] == pytest.approx((70.0, 20.0, 110.0, 60.0))
    assert boxes[-1] == pytest.approx((190.0, 140.0, 230.0, 180.0))
    assert reading.geometry.resized == (60, 40) and reading.geometry.offset == (14, 4)


def test_attnviz_capture_reads_a_picture_from_a_file_an_image_or_an_array(folders, tmp_path):
    """`attnviz.capture(folder, image=...)`: a PNG file (its EXIF orientation applied, as
    the server reads it), the same picture as a PIL image and as an array: one run; its
    tokens are the positions' labels and `positions` their boxes."""
    import attnviz

    stored = noise(50, 70)  # stored 50 wide, 70 high; shown turned: 70 wide, 50 high
    exif = Image.Exif()
    exif[0x0112] = 8  # (shown turned 90° counter-clockwise)
    path = tmp_path / "turned.png"
    stored.save(path, exif=exif.tobytes())
    upright = stored.transpose(Image.Transpose.ROTATE_90)
    runs = [
        attnviz.capture(folders["deit"], image=path),
        attnviz.capture(folders["deit"], image=upright),
        attnviz.capture(folders["deit"], image=np.asarray(upright)),
    ]
    for run in runs:
        assert run.source_tokens[:3] == ["[CLS]", "[DIST]", "▦ 0,0"]
        assert torch.equal(run.weights(layer=1), runs[0].weights(layer=1))
    first = runs[0]
    assert first.weights(layer=0).shape == (4, 18, 18)
    assert [p.box for p in first.positions[:2]] == [None, None]
    # resized to 40 x 40 from 70 x 50 and cropped to the middle 32: patch 0,0 starts 4 in
    assert first.positions[2].box == pytest.approx((7.0, 5.0, 21.0, 15.0))
    assert first.get("q", layer=0).shape == (4, 18, 8)
    norms = first.get("norms", layer=0)
    assert norms.shape == (4, 18, 18) and torch.isfinite(norms).all()


def test_a_model_in_memory_is_read_with_its_processor_and_left_as_it_was(folders):
    """A classifier in memory: its encoder read (the head left out), its weights shared,
    its own attention implementation and hooks untouched."""
    import attnviz

    config = T.ViTConfig(**GRID, **SMALL, num_labels=3)
    torch.manual_seed(1)
    classifier = T.ViTForImageClassification(config).eval()
    classifier.set_attn_implementation("sdpa")
    calls = []
    classifier.register_forward_hook(lambda *args: calls.append(1))
    processor = T.ViTImageProcessorPil(size=SQUARE)
    run = attnviz.capture(classifier, image=noise(), processor=processor)
    assert classifier.config._attn_implementation == "sdpa" and calls == []
    eager = T.ViTModel(config, add_pooling_layer=False).eval()
    eager.load_state_dict(classifier.vit.state_dict())
    eager.set_attn_implementation("eager")
    pixels = processor(images=noise(), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = eager(pixel_values=pixels, output_attentions=True).attentions
    assert (run.weights(layer=1) - expected[1][0]).abs().max() <= 1e-5
    with pytest.raises(TypeError, match="image processor="):
        attnviz.capture(classifier, image=noise())
    with pytest.raises(TypeError, match="a picture alone"):
        attnviz.capture(folders["vit"], "some text", image=noise())


def test_a_masked_autoencoder_reads_the_patches_its_seeded_noise_keeps(tmp_path):
    """ViT-MAE keeps a quarter of its patches (mask ratio 0.75), chosen by its noise: read
    with attnviz's seeded noise, the run is transformers' own pass with that noise (every
    head's weights within 1e-5), the same patches every time, each named by its place;
    the run's price before it is its length; and a red mark over one kept patch's box is
    that patch's pixels."""
    from attnviz.model.hf.vision import ImageRunner

    torch.manual_seed(0)
    config = T.ViTMAEConfig(**GRID, **SMALL, mask_ratio=0.75)
    T.ViTMAEModel(config).eval().save_pretrained(tmp_path)
    T.ViTImageProcessorPil(size=SQUARE).save_pretrained(tmp_path)
    encoder = load_image_encoder(tmp_path)
    reading = encoder.read(noise())
    kept = T.ViTMAEModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = kept(pixel_values=reading.pixel_values[None], noise=reading.inputs["noise"],
                   output_attentions=True)  # fmt: skip
    for layer, expected in enumerate(out.attentions):
        got = reading.capture[f"encoder.{layer}.self_attn.hook_weights"]
        assert got.shape == expected.shape == (1, 4, 5, 5)
        assert (got - expected).abs().max() <= 1e-5
    # its own record of what it kept: ids_restore undoes the shuffle, mask 0 where kept
    order = out.ids_restore[0].argsort()[:4].tolist()
    labels = [p.label for p in reading.positions]
    assert labels == ["[CLS]"] + [f"▦ {i // 4},{i % 4}" for i in order]
    assert (out.mask[0] == 0).nonzero().flatten().tolist() == sorted(order)
    assert [p.label for p in encoder.read(noise()).positions] == labels  # (seeded)
    assert ImageRunner(encoder).positions_read(70, 50) == len(labels)
    # a mark over the first kept patch's box lands in that patch's pixels
    picture = Image.new("RGB", (320, 320), (128, 128, 128))
    first = encoder.read(picture).positions[1]
    assert first.label == labels[1]  # (the same grid: the same patches kept)
    left, top, right, bottom = first.box
    ImageDraw.Draw(picture).rectangle((left + 10, top + 10, right - 11, bottom - 11), fill="red")
    pixels = encoder.read(picture).pixel_values.numpy()
    red = pixels[0] - (pixels[1] + pixels[2]) / 2
    tiles = (red.reshape(4, 8, 4, 8).transpose(0, 2, 1, 3).reshape(16, 64) > 0.5).mean(-1)
    assert tiles.argmax() == first.row * 4 + first.column and tiles.max() >= 0.5


def test_siglip2_reads_a_picture_at_its_own_resolution_as_a_padded_sequence(tmp_path):
    """SigLIP 2's NaFlex processor resizes a picture, its sides kept in proportion, to at
    most `max_num_patches` patches, flattens them row by row and pads the sequence: a 300 x
    200 picture in at most 16 patches of 8 is 40 x 24 pixels, 3 rows of 5 patches and one
    of padding. Every head's weights are transformers' own pass on the processor's inputs;
    the patches are named row by row, the padding "░"; the price is the padded length; and
    a red mark over one patch's box is that patch's pixels."""
    from attnviz.model.hf.vision import ImageRunner

    torch.manual_seed(0)
    config = T.Siglip2VisionConfig(patch_size=8, num_patches=16, **SMALL)
    T.Siglip2VisionModel(config).eval().save_pretrained(tmp_path)
    T.Siglip2ImageProcessorPil(patch_size=8, max_num_patches=16).save_pretrained(tmp_path)
    encoder = load_image_encoder(tmp_path)
    picture = Image.new("RGB", (300, 200), (128, 128, 128))
    reading = encoder.read(picture)
    assert reading.geometry.resized == (40, 24)
    labels = [p.label for p in reading.positions]
    assert labels == [f"▦ {r},{c}" for r in range(3) for c in range(5)] + ["░ 0"]
    # (priced before the run at its padded length, whatever the picture's size)
    runner = ImageRunner(encoder)
    assert runner.positions_read(300, 200) == runner.positions_read(20, 900) == len(labels)
    reference = T.Siglip2VisionModel.from_pretrained(tmp_path, attn_implementation="eager")
    made = T.Siglip2ImageProcessorPil(patch_size=8, max_num_patches=16)(
        images=noise(), return_tensors="pt"
    )
    read = encoder.read(noise())
    with torch.no_grad():
        out = reference.eval()(**made, output_attentions=True)
    for layer, expected in enumerate(out.attentions):
        got = read.capture[f"encoder.{layer}.self_attn.hook_weights"]
        assert got.shape == expected.shape == (1, 4, 16, 16)
        assert (got - expected).abs().max() <= 1e-5
    # a mark over the box of row 1, column 3 (60 x 66.7 picture pixels a patch)
    (box,) = [p.box for p in reading.positions if (p.row, p.column) == (1, 3)]
    left, top, right, bottom = box
    ImageDraw.Draw(picture).rectangle((left + 8, top + 8, right - 9, bottom - 9), fill="red")
    patches = encoder.read(picture).pixel_values.numpy()[:15].reshape(15, 8, 8, 3)
    red = patches[..., 0] - (patches[..., 1] + patches[..., 2]) / 2
    redness = (red > 0.5).reshape(15, 64).mean(-1)
    assert redness.argmax() == 1 * 5 + 3 and redness.max() >= 0.5, redness
    assert np.delete(redness, 8).max() <= 0.1, redness
