"""Env groups: the ``k`` envs an :class:`~rlightning_ray.EnvRunner` hosts, behind one protocol.

A runner owns everything about talking to the server (stamps, the Ray call, answer checks, the
hops, restarts, ``describe`` and ``ping``); an **env group** owns the envs and their framework's
semantics, through four operations (:class:`EnvGroup`):

* ``reset(seeds)`` -- start every env's first episode, env ``i`` seeded ``seeds[i]``;
* ``observe()`` -- what the server is asked about now (:class:`GroupObservation`: the
  observation batch, the episode starts, the action masks), copies the envs cannot change;
* ``step(answer)`` -- step every env with its row of the server's answer, reset the envs whose
  episode ended, and return the step's record (what the envs returned);
* ``fragment(...)`` -- assemble the records of one ``sample`` call into the fragment the
  collector gets.

Two groups ship: :class:`GymEnvGroup` (gymnasium envs, SB3's ``DummyVecEnv``; the runner's
default) and ``rlightning_pettingzoo.ParallelEnvGroup`` (PettingZoo parallel envs, through
:class:`rlightning_ray.pettingzoo.ParallelEnvRunner`). Any object with these members is a group
(``EnvRunner(..., env_group=factory)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

from rlightning.batch import pack_responses, pack_steps, reduce_in_band
from rlightning_ray._contract import reset_problem, step_problem
from rlightning_ray.latency import HOPS

__all__ = [
    "EnvContractError",
    "EnvGroup",
    "EnvStepError",
    "Fragment",
    "GroupObservation",
    "GymEnvGroup",
    "stack_observations",
]

#: The name sb3-contrib's ``get_action_masks`` calls on each env (``EXPECTED_METHOD_NAME``).
ACTION_MASKS_METHOD = "action_masks"


class GroupObservation(NamedTuple):
    """What a runner asks the server about at one step: :meth:`EnvGroup.observe`'s answer.

    Each field is documented where it is declared.
    """

    #: The batch the policy gets, row ``i`` env ``i``'s: ``(k, *obs_shape)`` of the space's dtype (a
    #: dict of such arrays for a ``Dict`` space) for gymnasium envs; a list of ``k`` ``{agent:
    #: observation}`` dicts of the live agents for PettingZoo.
    observation: Any
    #: ``(k,)`` bool: whether each env's observation starts an episode (the previous step's dones;
    #: True after ``reset``).
    episode_start: np.ndarray
    #: The envs' action masks, or None when the envs have none: ``(k, mask_dims)`` as sb3-contrib's
    #: ``get_action_masks`` stacks them for gymnasium envs; for PettingZoo, ``k`` ``{agent: mask}``
    #: dicts of the masks found in the agents' infos (masks carried by observations stay in the
    #: observations).
    action_masks: Any = None


@runtime_checkable
class EnvGroup(Protocol):
    """``k`` envs stepped together by one :class:`~rlightning_ray.EnvRunner` (module docstring).

    The runner calls ``reset`` once (from its constructor), then per step ``observe``, the
    server, ``step``; and ``fragment`` at the end of each ``sample`` call. A group never talks
    to Ray; it may be used in-process as well.
    """

    @property
    def num_envs(self) -> int:
        """``k``, the number of envs."""

    def reset(self, seeds: Sequence[int | None]) -> None:
        """Start every env's first episode: env ``i`` reset with ``seeds[i]`` (None: unseeded).

        A restarted runner passes ``None`` for every env (fresh episodes, never a replay).
        """

    def observe(self) -> GroupObservation:
        """The observation batch, episode starts and masks to send now.

        Copies the envs keep no reference to: an env that writes into its arrays later cannot
        change them.
        """

    def step(self, answer: Any) -> Any:
        """Step env ``i`` with row ``i`` of ``answer``; reset the envs whose episode ended.

        Returns:
            The step's record, for :meth:`fragment`.

        Raises:
            Exception: with an int attribute ``env_index`` when env ``env_index``'s own ``step``
                or ``reset`` raised (the runner then names that env, the cause chained); any
                other exception (an action the group refuses) propagates as it is.
        """

    def fragment(
        self,
        *,
        runner_id: str,
        env_ids: list[str],
        observed: list[GroupObservation],
        answers: list[Any],
        records: list[Any],
        last: GroupObservation,
        hops_ns: np.ndarray,
        restarted: bool,
    ) -> Any:
        """The fragment of one ``sample`` call.

        Step ``t`` asked ``observed[t]``, was answered ``answers[t]`` and returned
        ``records[t]``; ``last`` is what the next step will ask.
        """


class EnvStepError(RuntimeError):
    """An env's own ``step`` or ``reset`` raised inside :meth:`GymEnvGroup.step`.

    Args:
        env_index: The env's index in the group.
        message: What happened (the env's exception is the ``__cause__``).

    Attributes:
        env_index: As given (the runner names that env).
    """

    def __init__(self, env_index: int, message: str) -> None:
        super().__init__(message)
        self.env_index = env_index

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as ``EnvStepError(env_index, message)`` (it crosses Ray)."""
        return (type(self), (self.env_index, str(self)))


class EnvContractError(EnvStepError):
    """An env broke gymnasium's API in :class:`GymEnvGroup`: refused before its value is kept.

    Raised for a ``reset`` that does not return ``(observation, info)`` (an old-gym ``reset``
    returning the observation alone), a ``step`` that does not return the 5-tuple
    ``(observation, reward, terminated, truncated, info)`` (an old-gym 4-tuple with ``done``),
    and an observation whose shape (or ``Dict`` keys) is not the observation space's: SB3's
    ``DummyVecEnv`` would store it with numpy's broadcasting (a ``(1,)`` observation fills a
    ``(4,)`` row with copies), a silent wrong value in the buffer. The message names the env's
    index and the observation space; the runner adds its id and the env id. Not chained: the
    env raised nothing.
    """


@dataclass
class Fragment:
    """The finished steps of one gymnasium runner's ``sample`` call, in step order.

    Attributes:
        runner_id: The runner that collected them.
        env_ids: Its env ids, in row order (``k`` of them).
        observations: ``n_steps`` observations, each ``(k, *obs_shape)`` of the space's dtype (a
            dict of such arrays for a ``Dict`` space): what the answers answered.
        answers: ``n_steps`` stacked :class:`~rlightning.PolicyResponse` (``k`` rows each, with
            ``policy_version`` and the four stamps).
        rewards: ``(n_steps, k)`` float32.
        dones: ``(n_steps, k)`` bool, ``terminated or truncated``.
        infos: ``n_steps`` lists of ``k`` info dicts (``terminal_observation`` and
            ``TimeLimit.truncated`` as ``DummyVecEnv`` sets them).
        last_observation: The observation after the last step, ``(k, *obs_shape)``.
        last_dones: The ``(k,)`` dones of the last step (the next step's episode starts).
        hops_ns: ``(n_steps, 4)`` int64 nanoseconds per step: env->server transit, queueing in
            the server, inference, server->env transit (see :data:`rlightning_ray.HOPS`).
        restarted: True when this runner is a restarted one (Ray re-created the actor): its envs
            started fresh episodes, and what its dead predecessor had not delivered was dropped.
        action_masks: For envs with ``action_masks()``, the ``n_steps`` ``(k, mask_dims)`` masks
            sent with ``observations`` (what the answers were masked with); empty otherwise.
        last_action_masks: The masks of ``last_observation`` (None without masks).
    """

    runner_id: str
    env_ids: list[str]
    observations: list[Any] = field(default_factory=list)
    answers: list[Any] = field(default_factory=list)
    rewards: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    dones: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    infos: list[list[dict[str, Any]]] = field(default_factory=list)
    last_observation: Any = None
    last_dones: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    hops_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, len(HOPS)), np.int64))
    restarted: bool = False
    action_masks: list[Any] = field(default_factory=list)
    last_action_masks: Any = None

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Pickle with ``answers``, ``observations`` and ``action_masks`` column-wise (issue 20).

        One stacked array per field of the answers (and one per observation key) instead of
        one small pickled object per step: the fragment's trip through Ray costs a fraction.
        Every value loads as before (type, dtype, shape; ``rlightning._pickle``'s column section
        says how); lists that cannot be stacked exactly travel as lists. With protocol 5 (Ray's)
        the whole state is one standard pickle (:func:`rlightning.batch.reduce_in_band`): Ray's
        cloudpickle calls a Python hook per object it saves, the standard pickler does not.
        Arrays (and CPU tensors) of 64 KiB or more stay out of band, zero-copy, and load
        read-only from Ray's object store; smaller ones are copied in and load writable, with
        their own memory (docs/decisions.md, "Fragments cross Ray as one pickle").
        """
        state = self.__dict__.copy()
        state["answers"] = pack_responses(self.answers)
        state["observations"] = pack_steps(self.observations)
        state["action_masks"] = pack_steps(self.action_masks)
        return reduce_in_band(self, state, protocol)

    def __copy__(self) -> Fragment:
        """A shallow copy (the lists shared), as a dataclass's default copy."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Fragment:
        """A deep copy of every field, as a dataclass's default deep copy."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(deepcopy(self.__dict__, memo))
        return new


def stack_observations(space: spaces.Space[Any], observations: Sequence[Any]) -> Any:
    """Stack one observation per env into a new batch of the space's dtype, as ``DummyVecEnv``.

    Args:
        space: The envs' observation space.
        observations: One observation per env.

    Returns:
        A new ``(n, *shape)`` array of ``space.dtype`` (a dict of them for a ``Dict`` space, key
        by key), each row assigned as ``DummyVecEnv._save_obs`` assigns it into ``buf_obs``.
    """
    batch = _new_batch(space, len(observations))
    for i, obs in enumerate(observations):
        _save(batch, i, obs)
    return batch


def _new_batch(space: spaces.Space[Any], n: int) -> Any:
    """Empty ``(n, *shape)`` arrays of the space's dtypes (SB3's ``obs_space_info`` layout)."""
    if isinstance(space, spaces.Dict):
        return {key: _new_batch(sub, n) for key, sub in space.spaces.items()}
    return np.zeros((n, *(space.shape or ())), dtype=space.dtype)


def _save(batch: Any, i: int, obs: Any) -> None:
    """``batch[i] = obs`` (key by key for a dict), as ``DummyVecEnv._save_obs``: a copy."""
    if isinstance(batch, dict):
        for key, sub in batch.items():
            _save(sub, i, obs[key])
    else:
        batch[i] = obs


class GymEnvGroup:
    """``k`` gymnasium envs that behave exactly as SB3's ``make_vec_env`` + ``DummyVecEnv``.

    Followed here without importing SB3 (``DummyVecEnv.step_wait`` and ``reset``,
    ``make_vec_env``'s seeding, sb3-contrib's ``get_action_masks``):

    * **seeding** (:meth:`reset`): env ``i``'s ``action_space`` is seeded with ``seeds[i]``
      (``make_vec_env``'s ``env.action_space.seed(seed + rank)``: the env's ``action_space``
      as ``env_fn`` returns it, which is the wrapped env's own unless a wrapper replaces the
      space) and env ``i`` is reset with ``seed=seeds[i]``, once (``DummyVecEnv.reset`` uses
      its seeds once); a None seed leaves both unseeded;
    * **step** (:meth:`step`): env ``i`` steps with ``answer.action[i]``; rewards are float32,
      ``done = terminated or truncated``, ``info["TimeLimit.truncated"] = truncated and not
      terminated``; a done env puts the observation it returned in
      ``info["terminal_observation"]`` and is reset at once (unseeded), so the observation
      returned for it is the reset one;
    * **copies**: each env's observation is copied into a new ``(k, *obs_shape)`` batch of the
      space's dtype right after its ``step``/``reset`` (``DummyVecEnv._save_obs``), and the
      step's infos are deep-copied after all envs stepped (``step_wait`` returns
      ``deepcopy(self.buf_infos)``): an env that writes into the arrays it returned cannot
      change a kept observation. As in ``DummyVecEnv``, the terminal observation is copied
      then, after the env's reset: an env whose ``reset`` writes into the array its last
      ``step`` returned loses its terminal observation there as in SB3;
    * **masks**: when every env has ``action_masks()`` (found with gymnasium's
      ``get_wrapper_attr``, as ``DummyVecEnv.env_method`` finds it), each observation is sent
      with ``np.stack`` of the envs' ``action_masks()`` read after the step and resets, as
      sb3-contrib's ``get_action_masks`` reads them through a VecEnv before each step.

    Args:
        env_fns: One callable per env returning a fresh ``gymnasium.Env`` (wrap it, e.g. in
            SB3's ``Monitor``, inside the callable). The first env's observation space is the
            group's (as ``DummyVecEnv``).

    Raises:
        ValueError: ``env_fns`` is empty, two callables returned the same env (as
            ``DummyVecEnv``), or some envs have ``action_masks()`` and others not (named).
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]]) -> None:
        if not env_fns:
            raise ValueError("a GymEnvGroup needs at least one env, got env_fns=[]")
        self._envs = [fn() for fn in env_fns]
        if len({id(getattr(env, "unwrapped", env)) for env in self._envs}) != len(self._envs):
            raise ValueError(
                "env_fns returned the same env instance more than once: give callables that "
                "build a new env at every call (e.g. lambda: gym.make(...)), as DummyVecEnv needs"
            )
        self._space = self._envs[0].observation_space
        masked = [_has_masks(env) for env in self._envs]
        if any(masked) and not all(masked):
            raise ValueError(
                f"envs {[i for i, m in enumerate(masked) if not m]} have no action_masks() but "
                f"envs {[i for i, m in enumerate(masked) if m]} have: give every env of a "
                "runner the same kind (sb3-contrib's get_action_masks needs all of them)"
            )
        self._masked = all(masked)
        #: The space's shape when an ndarray of it passes the contract check at once (a Box,
        #: a MultiBinary ...: :func:`_fits`); None: every observation takes the full check.
        self._shape: tuple[int, ...] | None = _plain_shape(self._space)
        self._obs: Any = None
        self._masks: np.ndarray | None = None
        self._starts = np.ones(len(self._envs), dtype=bool)

    @property
    def num_envs(self) -> int:
        """``k``."""
        return len(self._envs)

    @property
    def envs(self) -> list[Any]:
        """The envs, in row order (a new list; the envs themselves, not copies)."""
        return list(self._envs)

    @property
    def has_action_masks(self) -> bool:
        """Whether the envs have ``action_masks()`` (then every observation carries masks)."""
        return self._masked

    def reset(self, seeds: Sequence[int | None]) -> None:
        """Seed and reset every env (class docstring); the next :meth:`observe` is of the resets.

        Args:
            seeds: One seed or None per env.

        Raises:
            ValueError: ``seeds`` has another length than the envs.
            EnvStepError: env ``i``'s ``reset`` raised (its ``env_index``; the cause chained).
            EnvContractError: an env's ``reset`` broke gymnasium's API (class
                :class:`EnvContractError`).
        """
        if len(seeds) != len(self._envs):
            raise ValueError(f"got {len(seeds)} seeds for {len(self._envs)} envs")
        batch = _new_batch(self._space, len(self._envs))
        for i, (env, seed) in enumerate(zip(self._envs, seeds, strict=True)):
            if seed is not None:
                env.action_space.seed(seed)
            try:
                result = env.reset(seed=seed)
            except Exception as exc:
                raise EnvStepError(i, f"{type(exc).__name__}: {exc}") from exc
            problem = reset_problem(i, result, self._space)
            if problem is not None:
                raise EnvContractError(i, problem)
            _save(batch, i, result[0])
        self._obs = batch
        self._starts = np.ones(len(self._envs), dtype=bool)
        self._masks = self._read_masks()

    def observe(self) -> GroupObservation:
        """The current batch (the group's own copy), episode starts (a copy) and masks."""
        return GroupObservation(self._obs, self._starts.copy(), self._masks)

    def step(self, answer: Any) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every env with its row of ``answer.action`` (class docstring).

        Args:
            answer: The server's stacked answer for the group's envs (its ``action`` is
                ``(k, *action_shape)``).

        Returns:
            ``(rewards, dones, infos)``: ``(k,)`` float32, ``(k,)`` bool and ``k`` info dicts
            (deep copies).

        Raises:
            EnvStepError: env ``i``'s ``step`` or ``reset`` raised (its ``env_index``; the env's
                exception is the cause).
            EnvContractError: env ``i`` broke gymnasium's API (:class:`EnvContractError`);
                nothing of the step is kept.
        """
        actions = answer.action
        k = len(self._envs)
        rewards = np.zeros(k, dtype=np.float32)
        dones = np.zeros(k, dtype=bool)
        infos: list[dict[str, Any]] = []
        batch = _new_batch(self._space, k)
        shape = self._shape
        for i, env in enumerate(self._envs):
            try:
                result = env.step(actions[i])
                # the contract check; its fast path admits only what it would admit
                if not (type(result) is tuple and len(result) == 5 and _fits(result[0], shape)):
                    problem = step_problem(i, result, self._space)
                    if problem is not None:
                        raise EnvContractError(i, problem)
                obs, rewards[i], terminated, truncated, info = result
                dones[i] = terminated or truncated
                info["TimeLimit.truncated"] = truncated and not terminated
                if dones[i]:
                    info["terminal_observation"] = obs
                    reset = env.reset()
                    if not (
                        type(reset) is tuple
                        and len(reset) == 2
                        and type(reset[1]) is dict
                        and _fits(reset[0], shape)
                    ):
                        problem = reset_problem(i, reset, self._space)
                        if problem is not None:
                            raise EnvContractError(i, problem)
                    obs = reset[0]
            except EnvContractError:
                raise
            except Exception as exc:
                raise EnvStepError(i, f"{type(exc).__name__}: {exc}") from exc
            _save(batch, i, obs)
            infos.append(info)
        self._obs = batch
        self._starts = dones.copy()
        self._masks = self._read_masks()
        return rewards, dones, deepcopy(infos)

    def fragment(
        self,
        *,
        runner_id: str,
        env_ids: list[str],
        observed: list[GroupObservation],
        answers: list[Any],
        records: list[Any],
        last: GroupObservation,
        hops_ns: np.ndarray,
        restarted: bool,
    ) -> Fragment:
        """The :class:`Fragment` of one ``sample`` call (see :meth:`EnvGroup.fragment`)."""
        k = len(self._envs)
        n = len(records)
        return Fragment(
            runner_id,
            list(env_ids),
            observations=[o.observation for o in observed],
            answers=list(answers),
            rewards=np.stack([r[0] for r in records]) if n else np.zeros((0, k), np.float32),
            dones=np.stack([r[1] for r in records]) if n else np.zeros((0, k), bool),
            infos=[r[2] for r in records],
            last_observation=last.observation,
            last_dones=last.episode_start,
            hops_ns=hops_ns,
            restarted=restarted,
            action_masks=[o.action_masks for o in observed] if self._masked else [],
            last_action_masks=last.action_masks,
        )

    def _read_masks(self) -> np.ndarray | None:
        """``np.stack`` of every env's ``action_masks()``, as ``get_action_masks`` (or None)."""
        if not self._masked:
            return None
        return np.stack(
            [np.asarray(env.get_wrapper_attr(ACTION_MASKS_METHOD)()) for env in self._envs]
        )


def _plain_shape(space: spaces.Space[Any]) -> tuple[int, ...] | None:
    """The shape an observation of ``space`` must have, for :func:`_fits` (None: no fast path).

    None for a ``Dict`` space (its keys are judged too) and for spaces without a shape
    (``Tuple``, ``Text``, ...), which :func:`rlightning_ray._contract.step_problem` judges.
    """
    if isinstance(space, spaces.Dict):
        return None
    shape = getattr(space, "shape", None)
    return None if shape is None else tuple(shape)


def _fits(obs: Any, shape: tuple[int, ...] | None) -> bool:
    """Whether ``obs`` is an ndarray of ``shape``: then ``observation_problem`` finds none.

    The contract check's fast path (the full check reads ``np.shape(obs)``, a call per env per
    step); anything else (a list, a scalar, another shape, no ``shape``) takes the full check.
    """
    return shape is not None and type(obs) is np.ndarray and obs.shape == shape


def _has_masks(env: Any) -> bool:
    """Whether ``env`` has ``action_masks`` as ``DummyVecEnv.has_attr`` finds it."""
    get = getattr(env, "get_wrapper_attr", None)
    try:
        found = get(ACTION_MASKS_METHOD) if get is not None else getattr(env, ACTION_MASKS_METHOD)
    except AttributeError:
        return False
    return callable(found)
