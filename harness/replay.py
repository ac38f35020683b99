"""Replay one check on one Case, outside pytest and Hypothesis.

Every failing check prints a line such as::

    python -m harness.replay harness.checks.parity:check_packed_backward --target impl --case '{"seed": 3, ...}'

which reruns exactly that check on exactly that Case (the Case rebuilds all
its tensors from its seed), printing PASS or the failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from harness.cases.case import Case
from harness.names import resolve
from harness.ranks.pool import shutdown_all


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.replay", description=__doc__.splitlines()[0])
    parser.add_argument("check", help="module:function of the check, e.g. harness.checks.parity:check_token_forward")
    parser.add_argument("--case", required=True, help="the Case as JSON (printed by the failing check)")
    parser.add_argument("--target", default="impl", help="target spec (default: impl)")
    parser.add_argument(
        "--options", default="{}", help="the check's keyword arguments as JSON, e.g. '{\"exact\": true}'"
    )
    args = parser.parse_args(argv)
    check = resolve(args.check)
    case = Case.from_json(args.case)
    try:
        options = json.loads(args.options)
    except json.JSONDecodeError as exc:
        parser.error(f"--options: not JSON ({exc}); give an object such as '{{\"exact\": true}}'")
    if not isinstance(options, dict):
        parser.error(f"--options: give a JSON object such as '{{\"exact\": true}}', not {args.options}")
    print(f"replaying {args.check} on target {args.target}\ncase: {case}")
    try:
        check(case, args.target, **options)
    except Exception:
        traceback.print_exc()
        print("FAIL")
        return 1
    finally:
        shutdown_all()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
