"""The suite's end-of-run summary: skipped tests grouped by reason (tests/_summary.py)."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_skips_are_grouped_by_reason(pytester):
    pytester.makepyfile(
        """
        import pytest

        gpu = pytest.mark.skip(reason="needs a GPU")

        @gpu
        def test_a(): pass

        @gpu
        def test_b(): pass

        def test_c():
            pytest.skip("no g++")

        def test_d(): pass
        """
    )
    result = pytester.runpytest("-p", "_summary", "-q")
    result.assert_outcomes(passed=1, skipped=3)
    out = result.stdout.str()
    result.stdout.re_match_lines(
        [r".*3 skipped, by reason.*", r"\s+2  needs a GPU", r"\s+1  no g\+\+"]
    )
    assert out.index("needs a GPU") < out.index("no g++")  # most frequent first
