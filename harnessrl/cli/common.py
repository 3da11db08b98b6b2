"""What the command modules share: the bad-input exit code and the recipe-overrides arguments."""

from __future__ import annotations

import argparse

EXIT_BAD_INPUT = 2


def add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra overrides, e.g. stages.cpt.steps=10")
    p.add_argument("--recipe", help="the recipe (conf/recipe/NAME.yaml): the same as the override recipe=NAME")
