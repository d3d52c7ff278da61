"""``ModelFacts``: what an :class:`~rlightning_sb3.SB3PolicyAdapter` knows of its model.

Read once, when the adapter is built, and never changed: the model itself and which of SB3's
collection paths it takes. The ``predict`` and ``act`` steps (:mod:`rlightning_sb3._calls`,
:mod:`rlightning_sb3._step`, :mod:`rlightning_sb3._predict`) are given this object and the
adapter's :class:`~rlightning_sb3._state.AdapterState`, never the adapter itself.
"""

from __future__ import annotations

from typing import Any, NoReturn

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from rlightning_sb3._contrib import contrib_kind

__all__ = ["ModelFacts"]


class ModelFacts:
    """The adapter's model and what kind of model it is; frozen (assignment raises).

    Attributes:
        model: The SB3 model (used, not copied).
        recurrent: sb3-contrib's RecurrentPPO (``RecurrentPPO.collect_rollouts``).
        maskable: sb3-contrib's MaskablePPO (``MaskablePPO.collect_rollouts``).
        on_policy: An ``OnPolicyAlgorithm`` (``OnPolicyAlgorithm.collect_rollouts``).
        off_policy: An ``OffPolicyAlgorithm`` (``OffPolicyAlgorithm._sample_action``).
        direct: ``type(model).predict`` is ``BaseAlgorithm.predict`` (``policy.predict`` called
            as it is): ``predict`` may then run the policy's ``predict`` directly (DQN's
            epsilon-greedy, RecurrentPPO's and MaskablePPO's own are always called).
    """

    __slots__ = ("direct", "maskable", "model", "off_policy", "on_policy", "recurrent")

    model: BaseAlgorithm
    recurrent: bool
    maskable: bool
    on_policy: bool
    off_policy: bool
    direct: bool

    def __init__(self, model: BaseAlgorithm) -> None:
        kind = contrib_kind(model)
        init = object.__setattr__
        init(self, "model", model)
        init(self, "recurrent", kind == "recurrent")
        init(self, "maskable", kind == "maskable")
        init(self, "on_policy", isinstance(model, OnPolicyAlgorithm))
        init(self, "off_policy", isinstance(model, OffPolicyAlgorithm))
        init(self, "direct", type(model).predict is BaseAlgorithm.predict)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"ModelFacts is read-only (tried to set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"ModelFacts is read-only (tried to delete {name!r})")
