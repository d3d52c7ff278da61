"""``ParallelEnvGroup``: ``k`` PettingZoo parallel envs stepped together, with PettingZoo's rules.

An env group (the protocol of ``rlightning_ray.EnvGroup``: ``reset``, ``observe``, ``step``,
``fragment``; usable in-process too) for PettingZoo parallel envs. It carries this package's
semantics, not a copy of them:

* **live agents** are ``env.agents``: only they are observed (``{agent: observation}`` in
  ``env.agents`` order) and acted for; an agent that leaves is not asked again, one that joins
  is asked from its first observation on;
* **actions** go through :func:`~rlightning_pettingzoo.to_parallel_actions` (every live agent
  acts, no inactive agent does, each action in its space; an agent whose mask allows nothing
  waits with None);
* **masks** are where :func:`~rlightning_pettingzoo.find_action_mask` finds them: a mask in an
  agent's observation stays there; a mask in its info is sent beside the observation (the
  policy gets it back as ``infos``, so ``SharedPolicyAdapter.act`` finds it where it would);
* an env with no agent left is **reset** at once (its last step's results, and the observations
  the reset replaced, are in the fragment).

Every observation, info and mask the group keeps is a deep copy made as soon as the env returns
it: an env that writes into the arrays it returned (many do, to save allocations) cannot change
a step already taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from pettingzoo import ParallelEnv
from rlightning import MultiAgentPolicyResponse
from rlightning_pettingzoo.masks import find_action_mask
from rlightning_pettingzoo.parallel import to_parallel_actions

__all__ = [
    "ParallelEnvError",
    "ParallelEnvGroup",
    "ParallelFragment",
    "ParallelObservation",
    "ParallelStep",
]

#: Columns of ``hops_ns``: the hops a runner times (``rlightning_ray.HOPS``).
_N_HOPS = 4


class ParallelEnvError(RuntimeError):
    """A parallel env's own ``step`` or ``reset`` raised inside :meth:`ParallelEnvGroup.step`.

    Args:
        env_index: The env's index in the group.
        message: What happened (the env's exception is the ``__cause__``).

    Attributes:
        env_index: As given (a runner names that env).
    """

    def __init__(self, env_index: int, message: str) -> None:
        super().__init__(message)
        self.env_index = env_index

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as ``ParallelEnvError(env_index, message)`` (it may cross processes)."""
        return (type(self), (self.env_index, str(self)))


class ParallelObservation(NamedTuple):
    """What :meth:`ParallelEnvGroup.observe` returns (``rlightning_ray.GroupObservation``'s fields).

    Each field is documented where it is declared.
    """

    #: ``k`` ``{agent: observation}`` dicts of the live agents, ``env.agents`` order (copies).
    observation: list[dict[Any, Any]]
    #: ``(k,)`` bool: the env's observations start an episode.
    episode_start: np.ndarray
    #: ``k`` ``{agent: mask}`` dicts of the masks found in live agents' infos (observation-carried
    #: masks stay in the observations), or None when no env has one.
    action_masks: list[dict[Any, Any]] | None = None


@dataclass
class ParallelStep:
    """What ``k`` parallel envs returned at one :meth:`ParallelEnvGroup.step` (copies).

    Attributes:
        rewards: ``k`` ``{agent: reward}`` dicts, as ``env.step`` gave them.
        terminations: ``k`` ``{agent: bool}`` dicts.
        truncations: ``k`` ``{agent: bool}`` dicts.
        infos: ``k`` ``{agent: info}`` dicts.
        resets: ``(k,)`` bool: the env had no agent left and was reset after the step.
        final_observations: ``k`` entries: the ``{agent: observation}`` that ``env.step``
            returned where the env was then reset (the episode's last observations), else None.
    """

    rewards: list[dict[Any, Any]]
    terminations: list[dict[Any, Any]]
    truncations: list[dict[Any, Any]]
    infos: list[dict[Any, Any]]
    resets: np.ndarray
    final_observations: list[dict[Any, Any] | None]


@dataclass
class ParallelFragment:
    """The finished steps of ``k`` parallel envs over one ``sample`` call, per step and env.

    Attributes:
        runner_id: The runner that stepped them.
        env_ids: Its env ids.
        observations: ``n_steps`` lists of ``k`` ``{agent: observation}`` dicts (what was asked).
        answers: ``n_steps`` lists of ``k`` :class:`~rlightning.MultiAgentPolicyResponse`.
        rewards: ``n_steps`` lists of ``k`` ``{agent: reward}`` dicts, as ``env.step`` gave them.
        terminations: Same layout, ``{agent: bool}``.
        truncations: Same layout, ``{agent: bool}``.
        infos: Same layout, ``{agent: info}``.
        resets: ``(n_steps, k)`` bool: the env had no agent left and was reset after the step.
        episode_starts: ``(n_steps, k)`` bool: the env's observation of that step started an
            episode (the previous step's ``resets``; True at a runner's first step), as sent to
            the server.
        final_observations: ``n_steps`` lists of ``k``: the ``{agent: observation}`` that
            ``env.step`` returned where the env was then reset (the episode's last
            observations, which the reset replaced), else None.
        last_observations: The ``k`` ``{agent: observation}`` dicts of the live agents after
            the last step (the next call's first observations).
        last_resets: ``(k,)`` bool, the last step's ``resets`` (the next step's episode starts).
        hops_ns: ``(n_steps, 4)`` int64 ns per step (``rlightning_ray.HOPS``; filled by the
            runner that stepped the group).
        restarted: True when the runner was restarted by Ray (fresh episodes).
        action_masks: ``n_steps`` entries: the info-carried masks sent with ``observations``
            (``k`` ``{agent: mask}`` dicts), or None where no env had one.
    """

    runner_id: str
    env_ids: list[str]
    observations: list[list[dict[Any, Any]]] = field(default_factory=list)
    answers: list[list[MultiAgentPolicyResponse]] = field(default_factory=list)
    rewards: list[list[dict[Any, Any]]] = field(default_factory=list)
    terminations: list[list[dict[Any, Any]]] = field(default_factory=list)
    truncations: list[list[dict[Any, Any]]] = field(default_factory=list)
    infos: list[list[dict[Any, Any]]] = field(default_factory=list)
    resets: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    episode_starts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    final_observations: list[list[dict[Any, Any] | None]] = field(default_factory=list)
    last_observations: list[dict[Any, Any]] = field(default_factory=list)
    last_resets: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    hops_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, _N_HOPS), np.int64))
    restarted: bool = False
    action_masks: list[list[dict[Any, Any]] | None] = field(default_factory=list)


class ParallelEnvGroup:
    """``k`` PettingZoo parallel envs stepped together (see the module docstring).

    Args:
        env_fns: One callable per env returning a fresh ``pettingzoo.ParallelEnv``.

    Raises:
        ValueError: ``env_fns`` is empty, or two callables returned the same env.
        TypeError: a callable returned something that is not a ``ParallelEnv`` (its index named).

    Examples:
        >>> from mpe2 import simple_spread_v3
        >>> group = ParallelEnvGroup([simple_spread_v3.parallel_env] * 2)
        >>> group.reset([0, 1])
        >>> seen = group.observe()
        >>> [list(obs) for obs in seen.observation], seen.episode_start.tolist()
        ([['agent_0', 'agent_1', 'agent_2'], ['agent_0', 'agent_1', 'agent_2']], [True, True])
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]]) -> None:
        if not env_fns:
            raise ValueError("a ParallelEnvGroup needs at least one env, got env_fns=[]")
        self._envs = [fn() for fn in env_fns]
        for i, env in enumerate(self._envs):
            if not isinstance(env, ParallelEnv):
                raise TypeError(
                    f"env_fns[{i}] returned a {type(env).__name__}, not a PettingZoo "
                    "ParallelEnv (e.g. simple_spread_v3.parallel_env())"
                )
        if len({id(env) for env in self._envs}) != len(self._envs):
            raise ValueError(
                "env_fns returned the same env instance more than once: give callables that "
                "build a new env at every call"
            )
        k = len(self._envs)
        self._obs: list[dict[Any, Any]] = [{} for _ in range(k)]
        self._infos: list[dict[Any, Any]] = [{} for _ in range(k)]
        self._starts = np.ones(k, dtype=bool)

    @property
    def num_envs(self) -> int:
        """``k``."""
        return len(self._envs)

    @property
    def envs(self) -> list[Any]:
        """The envs, in row order (a new list; the envs themselves)."""
        return list(self._envs)

    def reset(self, seeds: Sequence[int | None]) -> None:
        """Reset env ``i`` with ``seed=seeds[i]`` (None: unseeded); keep copies of the results.

        Raises:
            ValueError: ``seeds`` has another length than the envs.
            ParallelEnvError: an env's ``reset`` raised (its ``env_index``).
        """
        if len(seeds) != len(self._envs):
            raise ValueError(f"got {len(seeds)} seeds for {len(self._envs)} envs")
        for i, (env, seed) in enumerate(zip(self._envs, seeds, strict=True)):
            self._keep(i, self._reset(i, env, seed))
        self._starts = np.ones(len(self._envs), dtype=bool)

    def observe(self) -> ParallelObservation:
        """The live agents' observations of every env, the episode starts and info masks.

        Returns:
            A :class:`ParallelObservation` (``rlightning_ray``'s ``GroupObservation`` fields).

        Raises:
            ValueError: a live agent of an env has no observation (names the env and agent).
        """
        observations: list[dict[Any, Any]] = []
        masks: list[dict[Any, Any]] = []
        for i, env in enumerate(self._envs):
            obs = self._obs[i]
            missing = [a for a in env.agents if a not in obs]
            if missing:
                raise ValueError(
                    f"env {i}'s live agents {list(env.agents)} include {missing}, which its "
                    f"last reset/step gave no observation (it gave {list(obs)})"
                )
            observations.append({a: obs[a] for a in env.agents})
            masks.append(
                {
                    a: mask
                    for a in env.agents
                    if find_action_mask(a, obs, None) is None
                    and (mask := find_action_mask(a, None, self._infos[i])) is not None
                }
            )
        return ParallelObservation(observations, self._starts.copy(), masks if any(masks) else None)

    def step(self, answers: Sequence[MultiAgentPolicyResponse]) -> ParallelStep:
        """Step env ``i`` with ``to_parallel_actions(answers[i], env)``; reset envs left empty.

        Args:
            answers: One :class:`~rlightning.MultiAgentPolicyResponse` per env, in row order.

        Returns:
            The :class:`ParallelStep` (copies of what the envs returned).

        Raises:
            ValueError: ``answers`` does not hold one response per env, or
                :func:`~rlightning_pettingzoo.to_parallel_actions` refuses an action (it names
                the agent); raised before any env steps.
            TypeError: an answer is not a ``MultiAgentPolicyResponse``.
            ParallelEnvError: an env's ``step`` or ``reset`` raised (its ``env_index``; the
                env's exception is the cause).
        """
        k = len(self._envs)
        if len(answers) != k:
            raise ValueError(f"got {len(answers)} answers for {k} envs: one per env")
        actions = [to_parallel_actions(a, env) for a, env in zip(answers, self._envs, strict=True)]
        record = ParallelStep([], [], [], [], np.zeros(k, dtype=bool), [None] * k)
        for i, env in enumerate(self._envs):
            try:
                obs, rewards, terminations, truncations, infos = env.step(actions[i])
            except Exception as exc:
                raise ParallelEnvError(i, f"{type(exc).__name__}: {exc}") from exc
            record.rewards.append(deepcopy(dict(rewards)))
            record.terminations.append(deepcopy(dict(terminations)))
            record.truncations.append(deepcopy(dict(truncations)))
            record.infos.append(deepcopy(dict(infos)))
            kept = (deepcopy(dict(obs)), deepcopy(dict(infos)))
            if not env.agents:
                record.final_observations[i] = kept[0]
                record.resets[i] = True
                kept = self._reset(i, env, None)
            self._keep(i, kept)
        self._starts = record.resets.copy()
        return record

    def fragment(
        self,
        *,
        runner_id: str,
        env_ids: list[str],
        observed: list[Any],
        answers: list[Any],
        records: list[Any],
        last: Any,
        hops_ns: np.ndarray,
        restarted: bool,
    ) -> ParallelFragment:
        """The :class:`ParallelFragment` of one ``sample`` call.

        Args:
            runner_id: The runner.
            env_ids: Its env ids.
            observed: Step ``t``'s :meth:`observe` result.
            answers: Step ``t``'s answers (one response per env).
            records: Step ``t``'s :meth:`step` result.
            last: :meth:`observe` after the last step.
            hops_ns: ``(n_steps, 4)`` int64 ns.
            restarted: Whether the runner was restarted.

        Returns:
            The fragment (its lists are the given records' own, not copies).
        """
        k = len(self._envs)
        n = len(records)
        return ParallelFragment(
            runner_id,
            list(env_ids),
            observations=[o.observation for o in observed],
            answers=[list(a) for a in answers],
            rewards=[r.rewards for r in records],
            terminations=[r.terminations for r in records],
            truncations=[r.truncations for r in records],
            infos=[r.infos for r in records],
            resets=np.stack([r.resets for r in records]) if n else np.zeros((0, k), bool),
            episode_starts=(
                np.stack([o.episode_start for o in observed]) if n else np.zeros((0, k), bool)
            ),
            final_observations=[r.final_observations for r in records],
            last_observations=list(last.observation),
            last_resets=last.episode_start,
            hops_ns=hops_ns,
            restarted=restarted,
            action_masks=[o.action_masks for o in observed],
        )

    def _reset(self, i: int, env: Any, seed: int | None) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """``env.reset(seed=seed)`` as copies; a raise becomes :class:`ParallelEnvError`."""
        try:
            obs, infos = env.reset(seed=seed)
        except Exception as exc:
            raise ParallelEnvError(i, f"{type(exc).__name__}: {exc} (in reset)") from exc
        return deepcopy(dict(obs)), deepcopy(dict(infos or {}))

    def _keep(self, i: int, kept: tuple[dict[Any, Any], dict[Any, Any]]) -> None:
        self._obs[i], self._infos[i] = kept
