"""What tests, benches and deploy checks share: a real uvicorn server on a free port
(serving), the headless Chromium's path and flags (browser), tiny random checkpoints made
with transformers (checkpoints), the architecture matrix (families).

Not part of the installed distribution (pyproject.toml packages `app` and `model` only):
bench/ and deploy/ scripts put the repository's root on sys.path, as pytest does."""
