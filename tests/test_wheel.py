"""The package as a user installs it: the wheel built from this checkout, installed in a
fresh virtual environment with nothing else (its dependencies from the indexes pip is
configured with), imported from outside the checkout and serving the page with
`attnviz serve`."""

from __future__ import annotations

import subprocess
import tomllib
import zipfile

import httpx2

from harness.install import ROOT, build_wheel, fresh_venv
from harness.serving import start_server


def test_the_wheel_installs_alone_imports_as_attnviz_and_serves(tmp_path):
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for inside in ("attnviz/__init__.py", "attnviz/app/main.py", "attnviz/model/transformer.py",
                   "attnviz/static/js/main.js", "attnviz/templates/index.html",
                   "attnviz/models/pronounce/model.safetensors"):  # fmt: skip
        assert inside in names, inside
    # one import name: nothing of a user's own `app` or `model` is shadowed
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"attnviz"}
    no_deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["attnviz"]["no-deps"]
    python = fresh_venv(tmp_path / "venv", str(wheel), no_deps=tuple(no_deps))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    said = subprocess.run(
        [str(python), "-c", "import attnviz, attnviz.app.main, importlib.util as u; "
         "from attnviz.notebook import WIDGET_JS; assert WIDGET_JS.is_file(); "
         "print(attnviz.__file__, attnviz.__version__, u.find_spec('app'), u.find_spec('model'))"],
        cwd=elsewhere, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert said[0].startswith(str(tmp_path / "venv")) and said[1] == "0.1.0"
    assert said[2:] == ["None", "None"]
    attnviz = str(tmp_path / "venv" / "bin" / "attnviz")
    proc, base = start_server({"ATTNVIZ_ZOO": '["minilm"]'}, command=[attnviz], cwd=elsewhere)
    try:
        page = httpx2.get(f"{base}/", timeout=30)
        assert page.status_code == 200 and "attnviz" in page.text
        script = httpx2.get(f"{base}/static/js/main.js", timeout=30)
        assert script.status_code == 200 and "import" in script.text
        body = {"model": "minilm", "text": "The cat sat.", "layers": [0], "heads": [0]}
        answer = httpx2.post(f"{base}/api/v1/attention", json=body, timeout=60)
        assert answer.status_code == 200 and answer.json()["blocks"][0]["shape"][0] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
