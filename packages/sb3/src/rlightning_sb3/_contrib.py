"""Which sb3-contrib algorithm a model is, without importing sb3-contrib.

The adapter follows sb3-contrib's own rollout code for RecurrentPPO and MaskablePPO; a model of
those classes exists only once sb3-contrib is imported, so the check reads ``sys.modules``.
"""

from __future__ import annotations

import functools
import sys

from stable_baselines3.common.base_class import BaseAlgorithm

from rlightning_sb3._versions import SB3_CONTRIB_SUPPORTED, check_version, installed_version

__all__ = ["contrib_kind"]


@functools.cache
def _check_contrib_version(module_version: str | None) -> None:
    """Check the imported sb3-contrib against the supported range (once per process)."""
    check_version(
        "sb3-contrib", installed_version("sb3-contrib", module_version), SB3_CONTRIB_SUPPORTED
    )


def contrib_kind(model: BaseAlgorithm) -> str | None:
    """Return ``"recurrent"``/``"maskable"`` for sb3-contrib's RecurrentPPO/MaskablePPO, else None.

    sb3-contrib is never imported here: a model of its classes can only exist once it is.
    """
    contrib = sys.modules.get("sb3_contrib")
    if contrib is None:
        return None
    _check_contrib_version(getattr(contrib, "__version__", None))
    if isinstance(model, contrib.RecurrentPPO):
        return "recurrent"
    if isinstance(model, contrib.MaskablePPO):
        return "maskable"
    return None
