"""What the app computes from a served model's runs, reading only what it declares
(model/served.py): value-weighted norms, ALTI, the logit lens and direct logit
attribution, the contribution graph, head statistics, the query-key space and the
lab's interventions."""
