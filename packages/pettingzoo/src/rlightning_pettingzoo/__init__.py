"""rlightning-pettingzoo: drive PettingZoo environments with ``MultiAgentPolicyResponse``.

* Parallel API: :func:`to_parallel_actions` (response -> the dict ``step`` takes, checked against
  ``env.agents`` and the action spaces) and :func:`from_parallel_actions` (dict -> response).
* AEC API: :func:`aec_action` (the action for ``env.agent_selection``; None once it is done).
* Masks: :func:`find_action_mask` and :func:`sample_response` (random actions that honour them).
* Policies: :func:`respond` (a policy per agent) and :class:`SharedPolicyAdapter` (one SB3 model
  for all homogeneous agents, one batched forward pass).
* Training: :class:`SharedRolloutCollector` (one shared on-policy SB3 model over ``n`` copies of
  a parallel env whose agents die and join, filling SB3's own ``RolloutBuffer`` with each
  agent's own trajectory, nothing fabricated) and its :class:`Segment` records;
  :class:`SharedReplayCollector` (the same for an off-policy model's ``ReplayBuffer``);
  :class:`GroupRolloutCollector` and :class:`GroupReplayCollector` (the same with one model per
  group of agents that share spaces, or per agent, each filling its own buffer);
  :class:`AECRolloutCollector` (turn-based AEC envs: self-play, or against frozen or random
  opponents), :class:`AECReplayCollector` (the same for DQN's ``ReplayBuffer``) and
  :class:`AECGroupRolloutCollector` (one on-policy model per group of agents, or per agent);
  :class:`RolloutRecorder`/:func:`fill_recorded` and
  :class:`ReplayRecorder`/:func:`fill_recorded_replay` (the shared collectors split in two
  processes, for ``rlightning_ray``'s runners; :class:`AECRolloutRecorder` and
  :class:`AECReplayRecorder`, the AEC ones; :func:`replica_noise`, the base action noise a
  replay replica carries), and the group ones
  (:class:`GroupRolloutRecorder`/:func:`fill_recorded_groups`,
  :class:`GroupReplayRecorder`/:func:`fill_recorded_group_replay`, and
  :class:`AECGroupRolloutRecorder` for the AEC group collector); with the ``[sb3]`` extra,
  imported on first use.
* Env groups: :class:`ParallelEnvGroup` (``k`` parallel envs stepped together: observe, step,
  reset with this package's rules, copies of everything kept), its :class:`ParallelStep`,
  :class:`ParallelFragment` and :class:`ParallelEnvError` (what ``rlightning_ray``'s runners
  step PettingZoo envs with).

Importing this package checks the installed PettingZoo against :data:`PETTINGZOO_SUPPORTED`: an
older PettingZoo raises an :class:`ImportError` naming the range; one newer than the highest
tested release imports with an :class:`UntestedVersionWarning` naming the tested range.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from rlightning_pettingzoo._versions import (
    PETTINGZOO_SUPPORTED,
    PETTINGZOO_TESTED,
    UntestedVersionWarning,
    check_pettingzoo_version,
    installed_pettingzoo_version,
)

check_pettingzoo_version(installed_pettingzoo_version())

from rlightning_pettingzoo.aec import aec_action  # noqa: E402  (after the version check)
from rlightning_pettingzoo.env_group import (  # noqa: E402
    ParallelEnvError,
    ParallelEnvGroup,
    ParallelFragment,
    ParallelObservation,
    ParallelStep,
)
from rlightning_pettingzoo.masks import find_action_mask, sample_response  # noqa: E402
from rlightning_pettingzoo.parallel import (  # noqa: E402
    InactiveAgentActionWarning,
    from_parallel_actions,
    to_parallel_actions,
)
from rlightning_pettingzoo.policies import Policy, SharedPolicyAdapter, respond  # noqa: E402

try:
    __version__ = version("rlightning-pettingzoo")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

_SB3_NAMES = {
    "AECRolloutCollector": "aec_collector",
    "AECGroupRolloutCollector": "aec_groups",
    "AECReplayCollector": "aec_replay",
    "Segment": "collector",
    "SharedRolloutCollector": "collector",
    "SharedReplayCollector": "replay",
    "GroupRolloutCollector": "groups",
    "GroupReplayCollector": "groups",
    "RecordedRollout": "remote",
    "RolloutRecorder": "remote",
    "check_rollout_model": "remote",
    "fill_recorded": "remote",
    "replica_slots": "remote",
    "AECRolloutRecorder": "remote_aec",
    "AECReplayRecorder": "remote_aec_replay",
    "AECGroupRolloutRecorder": "remote_aec_groups",
    "GroupRolloutRecorder": "remote_groups",
    "GroupReplayRecorder": "remote_group_replay",
    "RecordedReplay": "remote_replay",
    "ReplayRecorder": "remote_replay",
    "check_aec_model": "remote_aec",
    "check_aec_replay_model": "remote_aec_replay",
    "check_aec_group_models": "remote_aec_groups",
    "check_group_models": "remote_groups",
    "check_group_replay_models": "remote_group_replay",
    "check_group_training": "remote_groups",
    "check_replay_model": "remote_replay",
    "fill_recorded_group_replay": "remote_group_replay",
    "fill_recorded_groups": "remote_groups",
    "group_action_seed": "remote_group_replay",
    "set_group_acting_seed": "remote_group_replay",
    "fill_recorded_replay": "remote_replay",
    "replica_noise": "remote_replay",
    "refuse_group_kind": "remote_groups",
}


def __getattr__(name: str) -> Any:
    """The training names, imported on first use: they need the ``[sb3]`` extra."""
    if name in _SB3_NAMES:
        import importlib

        return getattr(importlib.import_module(f"rlightning_pettingzoo.{_SB3_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PETTINGZOO_SUPPORTED",
    "PETTINGZOO_TESTED",
    "AECGroupRolloutCollector",
    "AECGroupRolloutRecorder",
    "AECReplayCollector",
    "AECReplayRecorder",
    "AECRolloutCollector",
    "AECRolloutRecorder",
    "GroupReplayCollector",
    "GroupReplayRecorder",
    "GroupRolloutCollector",
    "GroupRolloutRecorder",
    "InactiveAgentActionWarning",
    "ParallelEnvError",
    "ParallelEnvGroup",
    "ParallelFragment",
    "ParallelObservation",
    "ParallelStep",
    "Policy",
    "RecordedReplay",
    "RecordedRollout",
    "ReplayRecorder",
    "RolloutRecorder",
    "Segment",
    "SharedPolicyAdapter",
    "SharedReplayCollector",
    "SharedRolloutCollector",
    "UntestedVersionWarning",
    "__version__",
    "aec_action",
    "check_aec_group_models",
    "check_aec_model",
    "check_aec_replay_model",
    "check_group_models",
    "check_group_replay_models",
    "check_group_training",
    "check_replay_model",
    "check_rollout_model",
    "fill_recorded",
    "fill_recorded_group_replay",
    "fill_recorded_groups",
    "fill_recorded_replay",
    "find_action_mask",
    "from_parallel_actions",
    "group_action_seed",
    "refuse_group_kind",
    "replica_noise",
    "replica_slots",
    "respond",
    "sample_response",
    "set_group_acting_seed",
    "to_parallel_actions",
]
