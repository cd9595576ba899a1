"""The transformers backend: any architecture transformers has, run by its own modeling
code, captured through a capturing attention function registered in its attention
interface (`capture.py`), and served as a `Runner` like the models of model/
(`runners.py`)."""
