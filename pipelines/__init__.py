"""Only the DAG: a recipe becomes one KFP pipeline, which runs locally, compiles or is submitted."""
