"""`attnviz.show` in JupyterLab: examples/notebook.ipynb opened in a real JupyterLab (its
own kernel, offline), its cells run from the Run menu in Chromium, and the widget read as
a person reads it: the heatmap drawn with the tokens, the hover `query → key: weight` with
the weight transformers' own eager attention gives, the arrow keys moving the head."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
from playwright.sync_api import expect

from harness.serving import free_port, wait_for

from .conftest import ARTIFACTS, page_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab on a free port serving a copy of the notebook, every Jupyter folder of
    its own (no user settings, workspaces or kernels of this machine's)."""
    root = tmp_path_factory.mktemp("lab")
    (root / "notebook.ipynb").write_bytes(NOTEBOOK.read_bytes())
    home = tmp_path_factory.mktemp("jupyter")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
    }
    port, token = free_port(), "attnviz-e2e"
    log = (home / "lab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
         f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly"],
        env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    wait_for(f"{base}/api/status?token={token}", proc, 60, "JupyterLab")
    yield base, token
    log.close()
    print((home / "lab.log").read_text()[-3000:])
    proc.terminate()
    proc.wait(timeout=30)


def reference():
    """The notebook's tiny model and text, made here from its first code cell, and their
    attention weights by transformers' eager attention (layer 1, head 0)."""
    cell = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    scope: dict = {}
    exec(cell.source.replace("import attnviz", ""), scope)  # (the model and tokenizer only)
    model, tokenizer, text = scope["model"], scope["tokenizer"], scope["text"]
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        attentions = model(**encoded, output_attentions=True).attentions
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    return tokens, attentions[1][0, 0]


def test_the_widget_in_jupyterlab_draws_hovers_and_moves_heads(browser, lab, outside_requests):
    base, token = lab
    context, page, errors = page_of(browser, base, outside_requests)
    context.set_default_timeout(60_000)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"/lab/tree/notebook.ipynb?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    # the kernel started and connected (the status bar says so), then every cell run
    idle = page.get_by_role("button", name="Python 3 (ipykernel) | Idle")
    expect(idle).to_be_visible(timeout=60_000)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    frame = page.frame_locator("iframe[title=attnviz]")
    title = frame.locator("#plot .gtitle")
    # (the kernel's start and the model's run: the first view's wait is long)
    expect(title).to_have_text("decoder self-attention · Layer 1 · Head 0", timeout=120_000)
    tokens, weights = reference()
    assert frame.locator("#plot .xtick text").all_text_contents() == tokens

    # the cell of query "sat" (row 3) and key "the" (column 1), hovered at its middle, and
    # pointed at again while the readout is empty (plotly.js may still redraw once for
    # automargin, moving the cell under a pointer that has not moved)
    readout = frame.locator("#readout")
    n = len(tokens)
    for attempt in range(100):
        box = frame.locator("#plot .nsewdrag").bounding_box()
        assert box is not None
        x, y = box["x"] + box["width"] * 1.5 / n, box["y"] + box["height"] * 3.5 / n
        page.mouse.move(x + attempt % 2 * 0.5, y)
        if readout.text_content():
            break
        time.sleep(0.05)
    # a continuing model's rows name the step: "step 3: fed sat, predicts …"
    expect(readout).to_have_text(
        re.compile(rf"^step 3: fed {tokens[3]}, predicts .+ → {tokens[1]}: ")
    )
    shown = float(readout.text_content().rsplit(": ", 1)[1])
    # the page draws one byte a weight (design.md, "On the wire"): within half a step of
    # 1/255, and the three decimals' rounding
    assert abs(shown - weights[3, 1].item()) <= 0.5 / 255 + 0.0005, (shown, weights[3, 1])
    expect(frame.locator("#plot .hovertext")).to_contain_text(f"→ {tokens[1]}")

    frame.locator("#view").focus()
    page.keyboard.press("ArrowRight")
    expect(title).to_have_text("decoder self-attention · Layer 1 · Head 1", timeout=30_000)
    expect(frame.locator("#head")).to_have_value("1")

    # the page's figures from the cell: the view saved as one file, through the kernel
    with page.expect_download() as download:
        frame.locator("#save-view").click()
    assert download.value.suggested_filename == "attnviz-LlamaForCausalLM-head.html"
    saved = Path(download.value.path()).read_text(encoding="utf-8")
    assert 'id="attnviz-saved"' in saved and "LlamaForCausalLM" in saved

    # the notebook's own check ran: the captured weights equal the eager ones to 1e-5
    expect(page.get_by_text("layer 1: largest difference")).to_be_visible(timeout=60_000)
    assert not page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "notebook_jupyterlab.png")
    assert not [e for e in errors if re.search(r"attnviz|srcdoc", e)], errors
    context.close()
