"""Small bugs, planted one token at a time: swap an operator, shift an integer by one (off-by-one or a
changed constant), flip a boolean or and/or. Working on tokens rather than re-printing the AST keeps
every other byte of the file, comments included, so the diff a fixer has to find is one token.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

SWAPS = {
    "+": "-", "-": "+", "*": "+", "//": "*", "/": "*", "%": "//",
    "<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
    "and": "or", "or": "and", "True": "False", "False": "True",
}  # fmt: skip


@dataclass(frozen=True)
class Mutation:
    line: int  # 1-based
    col: int
    old: str
    new: str
    kind: str  # "operator" or "constant"


def mutation_sites(source: str, lines: tuple[int, int]) -> list[Mutation]:
    """Every single-token mutation within the given line range (a function's def)."""
    sites = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    for tok in tokens:
        (row, col), text = tok.start, tok.string
        if not lines[0] <= row <= lines[1]:
            continue
        if tok.type in (tokenize.OP, tokenize.NAME) and text in SWAPS:
            sites.append(Mutation(row, col, text, SWAPS[text], "operator"))
        elif tok.type == tokenize.NUMBER and text.isdigit():
            sites.append(Mutation(row, col, text, str(int(text) + 1), "constant"))
    return sites


def apply(source: str, m: Mutation) -> str | None:
    """The mutated source, or None when the result does not parse (e.g. `*args` turned into `+args`)."""
    rows = io.StringIO(source).readlines()  # split exactly as tokenize reads it
    line = rows[m.line - 1]
    assert line[m.col : m.col + len(m.old)] == m.old, (line, m)
    rows[m.line - 1] = line[: m.col] + m.new + line[m.col + len(m.old) :]
    mutated = "".join(rows)
    try:
        ast.parse(mutated)
    except SyntaxError:
        return None
    return mutated
