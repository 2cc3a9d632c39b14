"""A check has three outcomes (issue #30): passed, failed, skipped with its reason. A skipped check never counts as
passed, and does not fail the validation; every report shows it as skipped, with the reason."""
from __future__ import annotations

import json

from robo_ray.stages.report_html import checks_section
from robo_ray.stages.check_records import ValidationResult
from robo_ray.stages.validation_report import diff_summary, diff_summary_text, validation_markdown

REASON = "tensorflow-datasets is not installed (pip install 'robo-ray[tf]')"


def _result(failed: bool = False) -> ValidationResult:
    res = ValidationResult()
    res.add("metadata", True, "dataset_info.json parses")
    res.skip("tfds read-back", REASON)
    if failed:
        res.add("checksums", False, "shard 0 differs")
    return res


def test_skipped_is_neither_passed_nor_failed() -> None:
    res = _result()
    skipped = res.checks[1]
    assert (skipped.status, skipped.passed, skipped.failed, skipped.detail) == ("skipped", False, False, REASON)
    assert res.passed, "a skipped check must not fail the validation (exit code 0)"
    assert res.counts() == {"passed": 1, "failed": 0, "skipped": 1}
    assert res.problems == []
    failing = _result(failed=True)
    assert not failing.passed and failing.counts() == {"passed": 1, "failed": 1, "skipped": 1}


def test_validation_report_shows_skipped_with_its_reason() -> None:
    text = validation_markdown(_result(), "demo", 1.0)
    assert "- **Status**: ✅ PASSED (1 passed, 0 failed, 1 skipped)" in text, text
    assert f"| tfds read-back | ⏭️ skipped | {REASON} |" in text and "| metadata | ✅ |" in text, text
    assert "❌ FAILED (1 passed, 1 failed, 1 skipped)" in validation_markdown(_result(True), "demo", 1.0)


def test_diff_summary_says_skipped_never_passed() -> None:
    d = diff_summary(_result())
    assert d["passed"] is True and d["counts"] == {"passed": 1, "failed": 0, "skipped": 1}
    assert d["checks"][1] == {"name": "tfds read-back", "status": "skipped", "passed": False, "detail": REASON}
    assert d["checks"][0]["status"] == "passed" and d["checks"][0]["passed"] is True
    assert json.loads(diff_summary_text(_result())) == d


def test_report_html_checks_table_shows_three_outcomes() -> None:
    html = checks_section(_result(failed=True))
    assert html.count('data-status="passed"') == 1 and html.count('data-status="failed"') == 1
    assert '<span class="skip" data-status="skipped">– skipped</span></td><td>tfds read-back</td>' in html, html
    assert "✔" not in html.split("tfds read-back")[0].rsplit("<tr>", 1)[1], "the skipped row is marked passed"
