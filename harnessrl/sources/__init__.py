"""Real code as the task suites and the data build both use it: copies of sources (copies.py) and
the environments their tests run in (envs.py). Below both tasks/ and data/, so neither reaches up."""
