"""A model of pictures in the page: a tiny seeded ViT of yours (transformers' code, its
image processor saved beside it) served with `attnviz serve --model vit=PATH`. The page
asks for a picture; a sample, a file of yours or one dropped is sent and drawn, its
patches tinted by the query's attention, which the readout names as the API's own weights
say; hovering a patch makes it the query within a frame; in Chinese on a phone the
picture fits the screen; a link whose picture the server does not hold says so. Beside it
(`--model naflex=PATH`, `--model mae=PATH`): SigLIP 2's tower with its NaFlex processor,
which reads a picture at its own proportions, its sequence padded, and a ViT-MAE, which
reads a quarter of its patches."""

from __future__ import annotations

import io
import re

import httpx2
import numpy as np
import pytest
import torch
import transformers as T
from PIL import Image
from playwright.sync_api import Page, expect

from harness.serving import start_server
from tests.app.test_api import decode

from .conftest import ARTIFACTS, offline, page_of
from .test_page import ready, url_state


@pytest.fixture(scope="module")
def vit_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vit")
    torch.manual_seed(0)
    config = T.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64)  # fmt: skip
    model = T.ViTModel(config).eval()
    with torch.no_grad():  # (away from the initialisation's near-uniform attention)
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    model.save_pretrained(folder)
    T.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    # SigLIP 2's tower with its NaFlex processor: a picture at its own resolution, in at most
    # 16 patches of 8, padded to 16
    naflex = tmp_path_factory.mktemp("naflex")
    torch.manual_seed(0)
    tower = T.Siglip2VisionModel(T.Siglip2VisionConfig(
        patch_size=8, num_patches=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64)).eval()  # fmt: skip
    tower.save_pretrained(naflex)
    T.Siglip2ImageProcessorPil(patch_size=8, max_num_patches=16).save_pretrained(naflex)
    # ViT-MAE: a masked autoencoder that reads a quarter of its 4 x 4 patches
    mae = tmp_path_factory.mktemp("mae")
    torch.manual_seed(0)
    T.ViTMAEModel(T.ViTMAEConfig(image_size=32, patch_size=8, hidden_size=32,
                                 num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64)).eval().save_pretrained(mae)  # fmt: skip
    T.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(mae)
    # pictures kept: about two and a half megabytes (4 bytes a pixel), so that a larger
    # one drops the samples (the page sends a dropped one again)
    proc, base = start_server(
        {"ATTNVIZ_ZOO": '["pronounce"]', "ATTNVIZ_LOG_LEVEL": "warning",
         "ATTNVIZ_IMAGES_BYTES": "2600000"},
        args=["--model", f"vit={folder}", "--model", f"naflex={naflex}", "--model", f"mae={mae}"],
    )  # fmt: skip
    yield base
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def vit_page(browser, vit_server, outside_requests):
    context, page, errors = page_of(browser, vit_server, outside_requests)
    yield page
    assert errors == [], errors
    context.close()


def weights(base: str, digest: str, query: int, head: int, model: str = "vit") -> dict[str, float]:
    """The query's weights (layer 0) over the patches, by label, as the API sends them in
    float32 (the page reads u1: within 1/255 of these)."""
    answer = httpx2.post(
        f"{base}/api/v1/attention",
        json={"model": model, "image": digest, "layers": [0], "encoding": "f4"},
        timeout=60,
    ).json()
    block = answer["blocks"][0]
    row = decode(block["data"])[head, query]
    pairs = zip(block["columns"], row, strict=True)
    return {label: float(w) for label, w in pairs if label.startswith("▦")}


def said_strongest(
    page: Page, base: str, digest: str, query: int, head: int, model: str = "vit"
) -> None:
    """The readout names the query's strongest patch and its weight, as the API's say."""
    shown = re.search(r"(?:most at|最关注) (▦ \d+,\d+) ?[(（](0\.\d\d)[)）]",
                      page.locator("#readout").inner_text())  # fmt: skip
    assert shown, page.locator("#readout").inner_text()
    by_patch = weights(base, digest, query, head, model)
    patch, weight = shown.group(1), float(shown.group(2))
    assert by_patch[patch] >= max(by_patch.values()) - 1 / 255, (patch, by_patch)
    assert abs(weight - by_patch[patch]) <= 0.005 + 1 / 510, (weight, by_patch[patch])


def overlay_worst_ms(page: Page) -> float:
    return page.evaluate(
        "Math.max(0, ...performance.getEntriesByName('attnviz:overlay').map(e => e.duration))"
    )


def test_a_sample_picture_is_read_and_drawn_with_its_attention(vit_page: Page, vit_server):
    page = vit_page
    page.goto("/?model=vit&lang=en")
    expect(page.locator("#status")).to_have_text(
        "Choose a picture first: a file of yours, drop or paste one, or take a sample.",
        timeout=60_000,
    )
    expect(page.locator("#text")).to_be_hidden()
    expect(page.locator("label[for=picture]")).to_have_text("Choose a picture…")
    page.get_by_role("button", name="Sample: a street").click()
    ready(page)
    state = url_state(page)
    assert state["view"] == "picture" and len(state["img"]) == 64
    expect(page.locator("#picture-main img")).to_be_visible()
    expect(page.locator("#picture-name")).to_have_text("Sample: a street · 448 × 336")
    expect(page.locator("#source-tokens")).to_contain_text("▦ 3,3")
    head = int(state.get("head", 0))
    readout = page.locator("#readout")
    expect(readout).to_contain_text("[CLS] looks at · most at ▦ ")
    said_strongest(page, vit_server, state["img"], 0, head)
    expect(readout).to_contain_text("% to [CLS] (no patch: not drawn)")
    # hovering patch (2, 1) makes it the query, redrawn within a frame
    canvas = page.locator("#picture-main canvas")
    box = canvas.bounding_box()
    for column in range(4):
        page.mouse.move(
            box["x"] + box["width"] * (column + 0.5) / 4, box["y"] + box["height"] * 0.6
        )
    expect(readout).to_contain_text("▦ 2,3 looks at")
    said_strongest(page, vit_server, state["img"], 1 + 2 * 4 + 3, head)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "pictures-desktop.png", full_page=True)
    # (its redraw's time is bounded alone: tests/e2e/test_picture_timing.py)
    assert overlay_worst_ms(page) > 0
    # a click keeps it (in the URL); leaving the picture goes back to the kept query
    page.mouse.click(box["x"] + box["width"] * 0.375, box["y"] + box["height"] * 0.125)
    expect(readout).to_contain_text("▦ 0,1 looks at")
    page.mouse.move(0, 0)
    expect(readout).to_contain_text("▦ 0,1 looks at")
    assert url_state(page)["pq"] == "2"
    # each head's map of the query, side by side: a click opens that head
    expect(page.locator(".picture-head")).to_have_count(4)
    expect(page.locator(".picture-view figcaption")).to_have_text(
        "Layer 0, each head's map of the query (click one to open it):"
    )
    page.locator(".picture-head", has_text="Head 2").click()
    expect(page.locator("#convention")).to_have_text("encoder self-attention · Layer 0 · Head 2")
    assert url_state(page)["head"] == "2"
    expect(page.locator(".picture-head", has_text="Head 2")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(readout).to_contain_text("▦ 0,1 looks at")  # (the kept query stays)
    # attention rollout through every layer instead of one head: the lab's answer
    page.locator("#picture-map").select_option("rollout")
    expect(page.locator("#convention")).to_contain_text(
        "attention rollout through all 2 layers (Abnar & Zuidema 2020"
    )
    assert url_state(page)["pmap"] == "rollout"
    rolled = httpx2.post(
        f"{vit_server}/api/v1/lab/rollout", json={"model": "vit", "image": state["img"]}
    ).json()
    row = rolled["matrix"][2]
    best = max(range(1, len(row)), key=row.__getitem__)
    expect(readout).to_contain_text(
        f"▦ 0,1 looks at · most at {rolled['tokens'][best]} ({row[best]:.2f})"
    )
    # attention flow into the kept query: the lab's maximum flows
    page.locator("#picture-map").select_option("flow")
    expect(page.locator("#convention")).to_contain_text(
        "attention flow into the query through all 2 layers"
    )
    flowed = httpx2.post(
        f"{vit_server}/api/v1/lab/flow", json={"model": "vit", "image": state["img"], "query": 2}
    ).json()["flow"]
    best = max(range(1, len(flowed)), key=flowed.__getitem__)
    expect(readout).to_contain_text(
        f"▦ 0,1 looks at · most at {rolled['tokens'][best]} ({flowed[best]:.2f})"
    )


@pytest.mark.parametrize(
    ("width", "lang", "padding"),
    [(1280, "en", "0.0% to padding outside the picture (░ ×4) (no patch: not drawn)"),
     (390, "zh", "0.0% 给 图片外的填充（░ ×4）（不是图块：未画出）")],
)  # fmt: skip
def test_a_picture_read_at_its_own_resolution_names_its_padding(
    browser, vit_server, outside_requests, width, lang, padding
):
    """SigLIP 2's NaFlex tower reads the street sample (448 x 336) at its own proportions:
    3 rows of 4 patches of 8 pixels (32 x 24), its sequence padded to 16. The readout
    names the strongest patch as the API's weights say, and the padding as what it is,
    masked: none of the query's attention goes to it; the output line counts it apart. A
    masked autoencoder's output line says how many of its patches it read."""
    context, page, errors = page_of(browser, vit_server, outside_requests)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/?model=naflex&lang={lang}")
    sample = {"en": "Sample: a street", "zh": "示例：街道"}[lang]
    expect(page.get_by_role("button", name=sample)).to_be_visible(timeout=60_000)
    page.get_by_role("button", name=sample).click()
    ready(page)
    state = url_state(page)
    expect(page.locator("#source-tokens")).to_contain_text("▦ 2,3")
    readout = page.locator("#readout")
    expect(readout).to_contain_text(padding)
    expect(readout).to_contain_text("▦ 0,0")
    said_strongest(page, vit_server, state["img"], 0, int(state.get("head", 0)), "naflex")
    positions = httpx2.post(
        f"{vit_server}/api/v1/analyze", json={"model": "naflex", "image": state["img"]}
    ).json()["source_tokens"]
    assert positions == [f"▦ {r},{c}" for r in range(3) for c in range(4)] + [
        "░ 0",
        "░ 1",
        "░ 2",
        "░ 3",
    ]
    output = {
        "en": "16 positions: 3 × 4 patches and padding outside the picture (░ ×4); the output "
        "is their last hidden states (no task head).",
        "zh": "16 个位置：3 × 4 个图块，以及 图片外的填充（░ ×4）；输出是它们最后一层的隐藏状态"
        "（没有任务头）。",
    }[lang]
    expect(page.locator("#output-text")).to_have_text(output)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # ViT-MAE reads 4 of its 4 x 4 patches: its output line says so
    page.goto(f"/?model=mae&lang={lang}&img={state['img']}")
    kept = {
        "en": "5 positions: 4 of its 4 × 4 patches (it drops the others, as a masked "
        "autoencoder does) and [CLS]; the output is their last hidden states (no task head).",
        "zh": "5 个位置：4 × 4 个图块中的 4 个（其余被丢弃，掩码自编码器就是这样读图的），以及 "
        "[CLS]；输出是它们最后一层的隐藏状态（没有任务头）。",
    }[lang]
    expect(page.locator("#output-text")).to_have_text(kept, timeout=60_000)
    assert errors == [], errors
    context.close()


def test_in_chinese_on_a_phone_a_picture_of_yours_fits_the_screen(browser, vit_server,
                                                                  outside_requests):  # fmt: skip
    context, page, errors = page_of(browser, vit_server, outside_requests)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/?model=vit&lang=zh")
    expect(page.locator("#status")).to_contain_text("请先选一张图片", timeout=60_000)
    photo = Image.fromarray(np.random.default_rng(1).integers(0, 256, (600, 800, 3), np.uint8))
    out = io.BytesIO()
    photo.save(out, format="JPEG", quality=90)
    page.locator("#picture").set_input_files(
        {"name": "photo.jpg", "mimeType": "image/jpeg", "buffer": out.getvalue()}
    )
    expect(page.locator("#status")).to_have_text("完成。", timeout=60_000)
    expect(page.locator("#picture-name")).to_have_text("photo.jpg · 800 × 600")
    expect(page.locator("#readout")).to_contain_text("[CLS] 关注 · 最关注 ▦")
    frame = page.locator("#picture-main").bounding_box()
    assert frame["x"] >= 0 and frame["x"] + frame["width"] <= 390, frame
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "pictures-phone-zh.png", full_page=True)
    assert errors == [], errors
    context.close()


def test_a_dropped_picture_is_read_and_a_link_to_one_not_held_says_so(vit_page: Page):
    page = vit_page
    page.goto("/?model=vit&lang=en")
    expect(page.locator("#status")).to_contain_text("Choose a picture first", timeout=60_000)
    red = Image.new("RGB", (64, 48), (200, 20, 20))
    out = io.BytesIO()
    red.save(out, format="PNG")
    page.evaluate(
        """(bytes) => {
            const file = new File([new Uint8Array(bytes)], "red.png", {type: "image/png"});
            const transfer = new DataTransfer();
            transfer.items.add(file);
            document.body.dispatchEvent(new DragEvent("drop", {dataTransfer: transfer,
                                                               bubbles: true}));
        }""",
        list(out.getvalue()),
    )
    ready(page)
    expect(page.locator("#picture-name")).to_have_text("red.png · 64 × 48")
    page.goto(f"/?model=vit&lang=en&view=picture&img={'ab' * 32}")
    expect(page.locator("#status")).to_have_text(
        "This link's picture is not on this server (it keeps the latest pictures sent to "
        "it): choose it again.",
        timeout=60_000,
    )


def test_the_labs_attention_distance_of_a_picture_reads_as_the_api_says(vit_page: Page,
                                                                       vit_server):  # fmt: skip
    page = vit_page
    page.goto("/?model=vit&lang=en")
    expect(page.locator("#status")).to_contain_text("Choose a picture first", timeout=60_000)
    page.get_by_role("button", name="Sample: shapes").click()
    ready(page)
    digest = url_state(page)["img"]
    page.locator("nav.views [data-view=lab]").click()
    expect(page.locator("#lab-experiment")).to_have_value("rollout")  # (the first it runs)
    page.locator("#lab-experiment").select_option("distance")
    said = page.locator("#lab-distance-said")
    expect(said).to_contain_text("In layer 0 the heads look", timeout=60_000)
    expect(page.locator("#lab-distance-plot .point")).to_have_count(2 * 4)
    r = httpx2.post(
        f"{vit_server}/api/v1/lab/distance", json={"model": "vit", "image": digest}
    ).json()
    low, high = min(r["distance"][0]), max(r["distance"][0])
    expect(said).to_contain_text(
        f"In layer 0 the heads look {low:.1f} to {high:.1f} pixels away on average; in layer 1,"
    )
    expect(said).to_contain_text(
        "(the picture the model reads is 32 pixels wide, in patches of 8 × 8)"
    )
    # only what reads a picture is offered: the lab's text experiments are not
    options = page.locator("#lab-experiment option:not([disabled])").all_text_contents()
    assert options == ["Attention rollout", "Attention flow", "Attention distance"], options
    # another model chosen: the lab opens on the first experiment it runs, not on one it
    # cannot (attention distance reads a picture)
    page.select_option("#model", "pronounce")
    expect(page.locator("#status")).to_have_text("Type a sentence first.")
    page.fill("#text", "cat")
    page.press("#text", "Enter")
    first = page.locator("#lab-experiment option:not([disabled])").first
    expect(page.locator("#lab-experiment")).to_have_value(first.get_attribute("value"))
    assert page.locator("#lab-experiment").input_value() != "distance"
    ready(page)
    expect(page.locator("#lab-error")).to_have_count(0)


def test_a_picture_the_server_dropped_is_sent_again_by_the_page(vit_page: Page):
    page = vit_page
    page.goto("/?model=vit&lang=en")
    expect(page.locator("#status")).to_contain_text("Choose a picture first", timeout=60_000)
    page.get_by_role("button", name="Sample: a street").click()
    ready(page)
    street = url_state(page)["img"]
    x = np.linspace(0, 255, 760, dtype=np.uint8)
    gradient = Image.fromarray(np.stack([np.tile(x, (760, 1))] * 3, axis=-1))
    out = io.BytesIO()
    gradient.save(out, format="PNG")
    page.locator("#picture").set_input_files(
        {"name": "gradient.png", "mimeType": "image/png", "buffer": out.getvalue()}
    )
    expect(page.locator("#picture-name")).to_have_text("gradient.png · 760 × 760")
    ready(page)
    assert url_state(page)["img"] != street
    # the server kept the larger one and dropped the street: back to it, the page sends it
    gone = httpx2.get(f"{page.url.split('/?')[0]}/api/v1/images/{street}")
    assert gone.status_code == 404
    page.go_back()
    ready(page)
    assert url_state(page)["img"] == street
    expect(page.locator("#readout")).to_contain_text("[CLS] looks at")
    expect(page.locator("#picture-main img")).to_be_visible()


def test_a_saved_view_of_a_picture_draws_it_offline(vit_page: Page, browser, tmp_path):
    """Save view (.html): the picture goes in the file (as the server drew it back), so
    the saved Picture view shows it under its tints with nothing fetched."""
    page = vit_page
    page.goto("/?model=vit&lang=en")
    expect(page.locator("#status")).to_contain_text("Choose a picture first", timeout=60_000)
    page.get_by_role("button", name="Sample: shapes").click()
    ready(page)
    readout = page.locator("#readout").inner_text()
    with page.expect_download() as download:
        page.click("#save-view")
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    context, opened, asked, errors = offline(browser)
    opened.goto(saved.as_uri())
    frame = opened.frame_locator("iframe[title=attnviz]")
    expect(frame.locator("#readout")).to_have_text(readout, timeout=30_000)
    picture = frame.locator("#picture-main img")
    expect(picture).to_be_visible()
    size = picture.evaluate("img => img.decode().then(() => [img.naturalWidth, img.naturalHeight])")
    assert size == [448, 336], size  # (the sample as drawn back: at most 1,024 a side)
    assert asked == [] and errors == [], (asked, errors)
    context.close()
