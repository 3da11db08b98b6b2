"""The pipeline: which stages a recipe runs and what each gets (routing.py), as one KFP DAG that runs
locally, compiles or is submitted."""
