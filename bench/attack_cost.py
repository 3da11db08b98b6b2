"""What the attacks cost at build time, side by side: `harnessrl data build` of the default recipe's
data with every attack at validation, and with only the untouched-snapshot run (what validation did
before the attack library). The issue's bound: at most 1.2x. Also the mined code suites, where the
attacks have most to do: `tasks build` of lint, edit and bugfix from the standard library's json and
email, with and without.

Run: PYTHONPATH=. python bench/attack_cost.py  (about 3 minutes on 2 cores)
"""

from __future__ import annotations

import sysconfig
import tempfile
import time
from pathlib import Path

from harnessrl.config import compose
from harnessrl.data.build import build, data_folder
from harnessrl.tasks import attacks
from harnessrl.tasks.suites import build_suite


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def without_attacks(fn) -> float:
    """Time `fn` with the library cut down to its first attack, "nothing" (the snapshot's run)."""
    saved = dict(attacks.ATTACKS)
    attacks.ATTACKS.clear()
    attacks.ATTACKS["nothing"] = saved["nothing"]
    try:
        return timed(fn)
    finally:
        attacks.ATTACKS.clear()
        attacks.ATTACKS.update(saved)


def main() -> None:
    cfg = compose([]).data
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="attack-cost-") as tmp:
        root = Path(tmp)
        for label, attacked in (("without", False), ("with", True)):
            out = data_folder(cfg, root / label)
            run = lambda out=out: build(cfg, out)
            rows.append(("default data", label, timed(run) if attacked else without_attacks(run)))
        for suite in ("lint", "edit", "bugfix"):
            for label, attacked in (("without", False), ("with", True)):
                out = root / f"{suite}-{label}"
                run = lambda s=suite, o=out: build_suite(s, o, 0, 8, [stdlib / "json", stdlib / "email"])
                rows.append((f"{suite} (json, email)", label, timed(run) if attacked else without_attacks(run)))
    print(f"{'build':<24}{'without s':>11}{'with s':>9}{'ratio':>8}")
    for i in range(0, len(rows), 2):
        name, _, off = rows[i]
        on = rows[i + 1][2]
        print(f"{name:<24}{off:>11.1f}{on:>9.1f}{on / off:>7.2f}x")


if __name__ == "__main__":
    main()
