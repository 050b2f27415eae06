"""The mutation score of the last `mutmut run` (`make mutation`), and every surviving mutant that
tests/equivalent_mutants.md does not explain.

    python scripts/mutation_score.py [--target 0.9]

A mutant is killed when a test failed on it (or it ran past mutmut's timeout: an endless loop
is caught too). Survivors are the mutants every selected test passed on, and those no selected
test runs at all ("no tests"). Listed equivalent mutants (they cannot change behaviour) are left
out of the denominator. Exit 1 when the score is below the target or a survivor is unexplained.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT_FILE = REPO_ROOT / "tests" / "equivalent_mutants.md"
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
SURVIVED = {"survived", "no tests", "suspicious"}


def mutant_statuses() -> dict[str, str]:
    """``{mutant name: status}`` from ``mutmut results --all true``."""
    mutmut = Path(sys.executable).parent / "mutmut"
    listing = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    statuses = {}
    for line in listing.splitlines():
        name, separator, status = line.strip().partition(": ")
        if separator:
            statuses[name] = status
    return statuses


def equivalent_mutants() -> set[str]:
    """The mutant names tests/equivalent_mutants.md lists (a line starting with ``- `name```)."""
    if not EQUIVALENT_FILE.exists():
        return set()
    return set(re.findall(r"^- `([^`]+)`", EQUIVALENT_FILE.read_text(), flags=re.MULTILINE))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=float, default=0.9, help="the score to keep (0-1)")
    args = parser.parse_args()
    statuses = mutant_statuses()
    checked = {name: status for name, status in statuses.items() if status != "not checked"}
    if not checked:
        print("no mutation results: run `make mutation` (mutmut run) first", file=sys.stderr)
        return 1
    equivalent = equivalent_mutants() & set(checked)
    counted = {name: status for name, status in checked.items() if name not in equivalent}
    killed = sum(status in KILLED for status in counted.values())
    survivors = sorted(name for name, status in counted.items() if status in SURVIVED)
    score = killed / max(len(counted), 1)
    # mutmut names a function's mutants module.x_function__mutmut_N, a method's
    # module.xǁClassǁmethod__mutmut_N.
    per_module: Counter[str] = Counter(
        re.split(r"\.x[_\u01c1]", name, maxsplit=1)[0] for name in survivors
    )

    print(
        f"mutants: {len(statuses)}, checked: {len(checked)}, equivalent (listed): {len(equivalent)}"
    )
    print(
        f"killed: {killed} of {len(counted)}: mutation score {score:.1%} (target {args.target:.0%})"
    )
    if len(checked) < len(statuses):
        print(f"not checked: {len(statuses) - len(checked)} (an interrupted run)")
    for module, count in per_module.most_common():
        print(f"  survivors in {module}: {count}")
    for name in survivors:
        print(f"survived, not in {EQUIVALENT_FILE.name}: {name} ({counted[name]})")
    untested = sum(status == "no tests" for status in counted.values())
    if untested:
        print(
            f"{untested} mutants ran no test: mutmut maps tests to functions when it collects "
            "its stats, so a function new since then has none; move mutants/mutmut-stats.json "
            "away and run those mutants again before writing a test for them"
        )
    stale = equivalent_mutants() - set(statuses)
    if stale:
        print(
            f"{EQUIVALENT_FILE.name} lists {len(stale)} mutants mutmut no longer makes (their "
            "function changed or went: check that function's entries): " + ", ".join(sorted(stale))
        )
    return 0 if score >= args.target and not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
