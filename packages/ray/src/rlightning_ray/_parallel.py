"""``ParallelEnvRunner``, in a module of its own: a runner process needs neither torch nor SB3.

:mod:`rlightning_ray.pettingzoo` (which imports SB3 for its policy and rollout) re-exports it;
Ray loads an actor's class from the module that defines it, so PettingZoo runners import only
``rlightning_pettingzoo`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rlightning_ray.runner import EnvRunner

try:
    from rlightning_pettingzoo import ParallelEnvGroup
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rlightning_ray.pettingzoo needs the [pettingzoo] extra: "
        f'pip install "rlightning-ray[pettingzoo]" ({exc})'
    ) from exc

__all__ = ["ParallelEnvRunner"]


class ParallelEnvRunner(EnvRunner):
    """An :class:`~rlightning_ray.EnvRunner` whose default env group is PettingZoo's.

    Hosts ``k`` PettingZoo parallel envs in a :class:`rlightning_pettingzoo.ParallelEnvGroup`
    (live agents are ``env.agents``, actions through ``to_parallel_actions``, masks as
    ``find_action_mask`` finds them, an env with no agent left reset at once, copies of every
    observation kept); everything else -- stamps, answer checks, restarts, ``describe``,
    ``ping``, and the reset of every env before the first step of a new resetting training run
    (``EnvRunner.sample``'s ``reset_run_id``, which ``collect_shared_rollout`` sends; unseeded,
    as SB3's ``_setup_learn`` resets a VecEnv of slots) -- is :class:`~rlightning_ray.EnvRunner`'s.
    Same constructor (start it with
    ``start_runners(..., runner_class=ParallelEnvRunner)``); ``sample`` returns a
    :class:`~rlightning_pettingzoo.ParallelFragment`.
    """

    default_env_group: ClassVar[Callable[[Sequence[Callable[[], Any]]], Any]] = ParallelEnvGroup
