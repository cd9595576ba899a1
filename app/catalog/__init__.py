"""The catalog of models: the zoo's families, your models (read when first used) and
what /api/v1/models says of each."""
