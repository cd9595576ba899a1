"""Runs: the text read, the run limits and queue, the run cache, progress, long runs'
head summaries, and generation."""
