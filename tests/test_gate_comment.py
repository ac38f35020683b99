"""The pull-request comment a maintainer reads first, and the base cache that makes a PR gate one suite run."""

from harness.checks import failure
from harness.gate import base_cache, comment, expectations, runner, single, specs
from harness.gate.tiers import BUDGET, CONTRACT, HARDENING
from harness.gate.verdicts import FAIL, PASS, UNSUPPORTED, Run, Verdict

ONE_HOT = "regressions/test_one_hot_oom.py::test_no_one_hot_at_historic_scale[nemo-rl]"
BAD = "properties/test_bad_inputs_distributed.py::test_every_rank_raises_a_clear_error"


def run(*verdicts) -> Run:
    return Run("t", {v.id: v for v in verdicts})


def _many_hardening(n: int) -> list[Verdict]:
    return [
        Verdict(f"{BAD}[row{i}]", FAIL, HARDENING, reason="accepted " * 20, kind=failure.ACCEPTED) for i in range(n)
    ]


def test_the_first_section_is_the_blocking_failure_and_repeats_fold():
    blocking = Verdict(
        ONE_HOT, FAIL, CONTRACT, reason="CheckFailure: a one_hot", kind=failure.MEMORY, case='{"rows": 8}', replay="r"
    )
    verdicts = [*_many_hardening(14), blocking, Verdict("properties/p.py::t", UNSUPPORTED, CONTRACT, missing=["bshd"])]
    decision = single.classify(run(*verdicts), {})
    text = decision.summary()
    first = next(line for line in text.splitlines() if line.startswith("###"))
    assert first == f"### BLOCKING `{ONE_HOT}`"
    assert "named regression, docs/bugs.md #3" in text and '{"rows": 8}' in text
    assert text.index("BLOCKING") < text.index("<details>")
    assert f"14 x `{BAD}` (FAIL, accepted)" in text  # one line for the fourteen rows
    assert text.count(BAD) == 1


def test_the_comment_stays_under_githubs_limit_whatever_the_failures():
    huge_case = '{"x": "' + "y" * 5000 + '"}'
    blocking = [
        Verdict(f"properties/p{i}.py::t", FAIL, CONTRACT, reason="wrong", kind=failure.VALUE, case=huge_case)
        for i in range(200)
    ]
    hardening = [
        Verdict(f"properties/h{i}.py::t[{i}]", FAIL, HARDENING, reason="r" * 300, kind=failure.VALUE)
        for i in range(5000)
    ]
    text = single.classify(run(*blocking, *hardening), {}).summary()
    assert len(text) <= comment.LIMIT < 65_536
    assert text.startswith("## logprob-harness") and "left out to stay under GitHub's comment limit" in text


def test_known_and_budget_failures_are_folded_not_listed_first():
    known_id = "properties/test_backward_parity.py::test_token_backward_parity_special_values"
    verdicts = [
        Verdict(known_id, FAIL, HARDENING, reason="NaN", kind=failure.VALUE),
        Verdict("properties/test_memory_bounds.py::m", FAIL, BUDGET, reason="3x", kind=failure.MEMORY),
        Verdict("properties/q.py::t", PASS, CONTRACT),
    ]
    decision = single.classify(run(*verdicts), {(known_id, None): expectations.Expectation(known_id, "NaN at -inf")})
    text = decision.summary()
    assert "###" not in text and text.splitlines()[0].endswith("green, 0 blocking (gated tiers: contract)")
    assert "KNOWN, value" in text and "FAIL, memory" in text


def test_base_cache_key_follows_the_code_under_test(tmp_path, monkeypatch):
    checkout = tmp_path / "slime"
    (checkout / "slime").mkdir(parents=True)
    (checkout / "slime" / "loss.py").write_text("x = 1\n")
    (checkout / "tests").mkdir()
    resolved = specs.resolve(f"slime={checkout}")
    first = base_cache.key(resolved, ["regressions"], environ={})
    (checkout / "tests" / "test_loss.py").write_text("pass\n")  # not code under test
    assert base_cache.key(resolved, ["regressions"], environ={}) == first
    moved = tmp_path / "elsewhere"
    checkout.rename(moved)
    assert base_cache.key(specs.resolve(f"slime={moved}"), ["regressions"], environ={}) == first  # contents, not path
    (moved / "slime" / "loss.py").write_text("x = 2\n")
    changed = base_cache.key(specs.resolve(f"slime={moved}"), ["regressions"], environ={})
    assert changed != first
    assert base_cache.key(specs.resolve(f"slime={moved}"), ["properties"], environ={}) != changed
    assert base_cache.key(specs.resolve(f"slime={moved}"), ["regressions"], environ={"CI": "true"}) != changed
    assert base_cache.key(specs.resolve("mutant=one_hot_backward"), [], environ={}) != base_cache.key(
        specs.resolve("impl"), [], environ={}
    )
    assert base_cache.key(specs.resolve("some.installed.module:Target"), [], environ={}) is None


def test_a_warm_base_cache_runs_the_suite_once(tmp_path, monkeypatch):
    ran = []

    def fake_run_checked(resolved, out, pytest_args):
        ran.append(resolved.spec)
        verdict = Verdict("properties/p.py::t", PASS, CONTRACT)
        result = run(verdict)
        result.save(out)
        return result, 1.0

    monkeypatch.setattr(runner, "run_checked", fake_run_checked)
    cache = tmp_path / "cache"
    for _ in range(2):
        code = runner.main(
            ["mutant=one_hot_backward", "--baseline", "impl", "--reports", str(tmp_path), "--base-cache", str(cache)]
        )
        assert code == 0
    assert ran == ["impl", "mutant=one_hot_backward", "mutant=one_hot_backward"]  # the base ran once
