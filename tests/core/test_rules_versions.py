"""rlightning.rules' framework-version check: the one verdict every adapter applies at import.

The adapters' own tests (``tests/{sb3,pettingzoo,ray}/test_versions.py``) run the same verdict
table (``tests/conftest.py``) through their public check functions; this file tests the owner
with a made-up framework. Needs ``packaging`` (pytest's own dependency), not torch.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
from packaging.version import InvalidVersion

import rlightning
from rlightning.rules import (
    RULES,
    UntestedVersionWarning,
    check_framework_version,
    framework_tested_range,
    framework_version_verdict,
)

SUPPORTED, HIGHEST = ">=1.2.3,<2", "1.5.0"


def _check(version: str) -> Any:
    return check_framework_version("rlightning-x", "frame", version, SUPPORTED, HIGHEST)


def test_the_verdict_table(
    version_row: tuple[str, str, str], version_of_row: Any, judge_version: Any
) -> None:
    _, template, verdict = version_row
    version = version_of_row(template, "1.2.3", HIGHEST)
    assert framework_version_verdict(version, SUPPORTED, HIGHEST) == verdict
    assert judge_version(_check, version) == verdict


def test_the_messages() -> None:
    assert _check("1.2.3") == "tested"
    with pytest.raises(
        ImportError,
        match=re.escape(
            "the installed frame is older than the lowest release rlightning-x supports; got "
            "'1.2.3rc1'; expected frame>=1.2.3,<2; fix: `pip install \"frame>=1.2.3,<2\"` "
            "[rule framework-version]"
        ),
    ):
        _check("1.2.3rc1")
    with pytest.raises(
        ImportError,
        match=re.escape(
            "the installed frame reports a version that is not a PEP 440 version; got 'x.y'"
        ),
    ):
        _check("x.y")
    with pytest.warns(UntestedVersionWarning) as caught:
        assert _check("2.0.0") == "untested"
    assert str(caught[0].message) == (
        "the installed frame is newer than any release rlightning-x is tested with; it may "
        "work, but nothing has checked that it does; got '2.0.0'; expected frame>=1.2.3,<=1.5.0; "
        'fix: if it misbehaves, `pip install "frame>=1.2.3,<=1.5.0"`; once you have checked it, '
        'silence this with warnings.filterwarnings("ignore", '
        "category=rlightning.UntestedVersionWarning) [rule framework-version]"
    )
    assert caught[0].filename == __file__  # stacklevel: the caller of the check


def test_an_excluded_release_is_refused_and_only_upper_caps_warn() -> None:
    with pytest.raises(ImportError, match=re.escape("is a release rlightning-x does not support")):
        check_framework_version("rlightning-x", "frame", "1.4.0", ">=1.2,!=1.4.0,<2", "1.5")
    assert framework_version_verdict("1.4.1", ">=1.2,!=1.4.0,<2", "1.5") == "tested"
    assert framework_version_verdict("1.3", "~=1.2", None) == "tested"
    assert framework_version_verdict("2.0", "~=1.2", None) == "unsupported"  # ~= is no cap


def test_without_a_highest_tested_release_the_caps_bound_theframework_tested_range() -> None:
    assert framework_tested_range(">=1.0,<2", None) == ">=1.0,<2"
    assert framework_version_verdict("1.9.9", ">=1.0,<2") == "tested"
    assert framework_version_verdict("2.0.0", ">=1.0,<2") == "untested"
    assert framework_tested_range(">=1.0, <2", "1.4") == ">=1.0,<=1.4"
    assert framework_tested_range(">=2.60.0,<3", "2.60.0") == ">=2.60.0,<=2.60.0"


def test_a_typo_in_the_highest_tested_release_is_a_bug_not_a_verdict() -> None:
    with pytest.raises(InvalidVersion):
        framework_version_verdict("1.0", ">=1.0", "one")


def test_one_warning_class_and_one_rule() -> None:
    assert rlightning.UntestedVersionWarning is UntestedVersionWarning
    assert issubclass(UntestedVersionWarning, UserWarning)
    assert UntestedVersionWarning.__module__ == "rlightning.rules"
    assert "framework-version" in RULES
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=rlightning.UntestedVersionWarning)
        _check("1.9.0")
    assert caught == []
