"""The framework-version check every adapter runs at import (private).

Import these names from :mod:`rlightning.rules`. ``packaging`` (a dependency of every adapter,
and of pytest) is imported when a check runs, not when :mod:`rlightning.rules` is imported: the
core itself never checks a framework.
"""

from __future__ import annotations

import warnings
from typing import Literal

from rlightning.rules._errors import rule_error, rule_message

#: A framework version's verdict, see :func:`framework_version_verdict`.
VersionVerdict = Literal["tested", "untested", "unsupported", "invalid"]

# The upper caps of a declared range: above them a release is untested, never refused.
_CAPS = ("<", "<=")


class UntestedVersionWarning(UserWarning):
    """A framework release newer than any the adapter importing it was tested with is installed.

    Rule ``framework-version`` (:func:`check_framework_version`). The import goes on: a new
    framework release must never break ``import rlightning_*`` for everyone the day it ships.
    One class for every adapter (``rlightning_sb3``, ``rlightning_pettingzoo`` and
    ``rlightning_ray`` re-export it under this name), so one filter catches them all, e.g. once
    you have checked the new release yourself::

        warnings.filterwarnings("ignore", category=rlightning.UntestedVersionWarning)
    """


def _clauses(supported: str) -> list[str]:
    """The comma-separated clauses of a specifier set, as spelled, in order."""
    return [clause.strip() for clause in supported.split(",") if clause.strip()]


def framework_tested_range(supported: str, highest_tested: str | None) -> str:
    """Return the tested range: ``supported`` with its upper caps replaced by ``<=highest_tested``.

    Args:
        supported: The declared range, a PEP 440 specifier set (``">=2.4.0,<3.0"``).
        highest_tested: The newest tested release (``"2.9.2"``); None: ``supported`` is the
            tested range.

    Returns:
        The tested range as a specifier set, clauses in the order given (``">=2.4.0,<=2.9.2"``).

    Examples:
        >>> framework_tested_range(">=2.4.0,<3.0", "2.9.2")
        '>=2.4.0,<=2.9.2'
    """
    if highest_tested is None:
        return ",".join(_clauses(supported))
    floor = [c for c in _clauses(supported) if not c.startswith("<")]
    return ",".join([*floor, f"<={highest_tested}"])


def framework_version_verdict(
    installed: str, supported: str, highest_tested: str | None = None
) -> VersionVerdict:
    """Judge an installed framework version against a declared and a tested range.

    The one verdict of rule ``framework-version``, by PEP 440 (``packaging``, what pip applies
    to the declared range), with pre-releases ordered as releases:

    * ``"invalid"``: ``installed`` is not a PEP 440 version;
    * ``"unsupported"``: it breaks a clause of ``supported`` other than an upper cap (``<``,
      ``<=``): older than the lowest release, or excluded by ``!=``/``==``/``~=``. A
      pre-release or dev release *of* the lowest release is older than it (``2.4.0rc1 <
      2.4.0``): refused, as pip refuses it for ``>=2.4.0``;
    * ``"tested"``: it is in :func:`framework_tested_range` (between the lowest and the highest
      tested release). A local build counts as its public release (``2.9.2+cu121`` is ``2.9.2``: PEP
      440 ignores the local label against a specifier without one); a post-release of the
      highest tested one (``2.9.2.post1``) is newer, so untested;
    * ``"untested"``: newer than the highest tested release, a new major release beyond the
      declared cap included (``3.0.0``, ``3.0.0a1``): the cap tells pip what to install, the
      import only warns.

    Args:
        installed: The installed version string (``"2.9.2"``).
        supported: The declared range, a PEP 440 specifier set (``">=2.4.0,<3.0"``).
        highest_tested: The newest tested release; None: every release ``supported`` admits is
            taken as tested (one above its caps is untested).

    Returns:
        The verdict.

    Raises:
        packaging.specifiers.InvalidSpecifier: ``supported`` is not a PEP 440 specifier set.
        packaging.version.InvalidVersion: ``highest_tested`` is not a PEP 440 version.

    Examples:
        >>> [framework_version_verdict(v, ">=2.4.0,<3.0", "2.9.2")
        ...  for v in ("2.4.0", "2.4.0rc1", "2.9.2+cu121", "2.10.0", "3.0.0", "banana")]
        ['tested', 'unsupported', 'tested', 'untested', 'untested', 'invalid']
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if highest_tested is not None:
        Version(highest_tested)  # a caller's typo raises InvalidVersion, not a wrong verdict
    specifiers = SpecifierSet(supported)
    try:
        version = Version(installed)
    except InvalidVersion:
        return "invalid"
    for clause in specifiers:
        if clause.operator not in _CAPS and not clause.contains(version, prereleases=True):
            return "unsupported"
    tested = SpecifierSet(framework_tested_range(supported, highest_tested))
    return "tested" if tested.contains(version, prereleases=True) else "untested"


def check_framework_version(
    package: str,
    distribution: str,
    installed: str,
    supported: str,
    highest_tested: str | None = None,
    *,
    stacklevel: int = 2,
) -> VersionVerdict:
    """Refuse an unsupported framework version; warn about an untested one (rule ``framework-version``).

    What every rlightning adapter runs when it is imported, with the verdict of
    :func:`framework_version_verdict`: ``"tested"`` passes silently, ``"untested"`` warns
    :class:`UntestedVersionWarning` and passes, ``"unsupported"`` and ``"invalid"`` raise
    :class:`ImportError`. Messages name the package, the distribution, the installed version,
    the range expected and the ``pip install`` that fixes it.

    Args:
        package: The distribution asking, named in messages (``"rlightning-sb3"``).
        distribution: The framework's distribution name, as pip spells it
            (``"stable-baselines3"``).
        installed: Its installed version (``"2.9.2"``).
        supported: The range ``package`` declares, a PEP 440 specifier set (``">=2.4.0,<3.0"``).
        highest_tested: The newest release tested; None: all of ``supported`` is tested.
        stacklevel: Passed to :func:`warnings.warn` (2: the caller of this function).

    Returns:
        ``"tested"`` or ``"untested"`` (the others raise).

    Warns:
        UntestedVersionWarning: ``installed`` is newer than ``highest_tested``.

    Raises:
        ImportError: ``installed`` is not a PEP 440 version, or ``supported`` refuses it (older
            than its lowest release, a pre-release of that release, or excluded).
        packaging.specifiers.InvalidSpecifier: ``supported`` is not a PEP 440 specifier set.

    Examples:
        >>> check_framework_version("rlightning-sb3", "stable-baselines3", "2.5.0", ">=2.4.0,<3.0")
        'tested'
        >>> check_framework_version("rlightning-sb3", "stable-baselines3", "2.3.2", ">=2.4.0,<3.0")
        Traceback (most recent call last):
        ...
        ImportError: the installed stable-baselines3 is older than the lowest release rlightning-sb3 supports; got '2.3.2'; expected stable-baselines3>=2.4.0,<3.0; fix: `pip install "stable-baselines3>=2.4.0,<3.0"` [rule framework-version]
    """  # noqa: E501  (doctest output is one line)
    verdict = framework_version_verdict(installed, supported, highest_tested)
    if verdict == "tested":
        return verdict
    subject = f"the installed {distribution}"
    if verdict == "untested":
        tested = framework_tested_range(supported, highest_tested)
        message = rule_message(
            "framework-version",
            subject,
            f"is newer than any release {package} is tested with; it may work, but nothing "
            "has checked that it does",
            installed,
            expected=f"{distribution}{tested}",
            fix=f'if it misbehaves, `pip install "{distribution}{tested}"`; once you have '
            'checked it, silence this with warnings.filterwarnings("ignore", '
            "category=rlightning.UntestedVersionWarning)",
        )
        warnings.warn(message, UntestedVersionWarning, stacklevel=stacklevel + 1)
        return verdict
    if verdict == "invalid":
        problem = "reports a version that is not a PEP 440 version"
    elif _below_floor(installed, supported):
        problem = f"is older than the lowest release {package} supports"
    else:
        problem = f"is a release {package} does not support"
    raise rule_error(
        ImportError,
        "framework-version",
        subject,
        problem,
        installed,
        expected=f"{distribution}{supported}",
        fix=f'`pip install "{distribution}{supported}"`',
    )


def _below_floor(installed: str, supported: str) -> bool:
    """Whether an unsupported ``installed`` is older than a lower bound (``>=``, ``>``)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version = Version(installed)
    return any(
        clause.operator in (">=", ">") and not clause.contains(version, prereleases=True)
        for clause in SpecifierSet(supported)
    )
