"""The demo's closing report."""

from robotctl.crawler._view import compact_levels


def test_long_policies_are_run_length_coded_in_the_report() -> None:
    assert compact_levels((3, 3, 3, 1, 1, 1)) == "3,3,3,1,1,1"
    assert compact_levels((16,) * 14 + (1,) * 37) == "16x14,1x37"
    assert compact_levels((4, 3, 3) + (2,) * 20) == "4x1,3x2,2x20"
