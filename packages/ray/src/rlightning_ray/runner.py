"""``EnvRunner``: a Ray actor hosting ``k`` gymnasium envs that steps them with a server's answers.

The runner's envs behave exactly as the envs of Stable-Baselines3's ``DummyVecEnv`` (the rule of
``DummyVecEnv.step_wait`` and ``reset``, followed here without importing SB3): observations are
stacked into ``(k, *obs_shape)`` arrays of the observation space's dtype, rewards are float32,
``done = terminated or truncated``, ``info["TimeLimit.truncated"] = truncated and not
terminated``, and an env that is done puts its last observation in
``info["terminal_observation"]`` and is reset at once, so the observation returned for it is the
reset one. Env ``i`` is reset with ``seeds[i]`` the first time only, as ``DummyVecEnv.reset``
uses its seeds once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning.rules import check_stamp
from rlightning_ray.checks import check_answer
from rlightning_ray.latency import HOPS

__all__ = ["EnvRunner", "Fragment", "stack_observations"]


@dataclass
class Fragment:
    """The finished steps of one runner's ``sample`` call, in step order.

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


def stack_observations(space: spaces.Space[Any], observations: Sequence[Any]) -> Any:
    """Stack one observation per env into a batch of the space's dtype, as ``DummyVecEnv``.

    Args:
        space: The envs' observation space.
        observations: One observation per env.

    Returns:
        A new ``(n, *shape)`` array of ``space.dtype`` (a dict of them for a ``Dict`` space, key
        by key), as ``DummyVecEnv`` copies observations into its ``buf_obs``.
    """
    if isinstance(space, spaces.Dict):
        return {
            key: stack_observations(sub, [obs[key] for obs in observations])
            for key, sub in space.spaces.items()
        }
    return np.stack([np.asarray(obs, dtype=space.dtype) for obs in observations])


class EnvRunner:
    """``k`` gymnasium envs in one process, stepped with a :class:`PolicyServer`'s answers.

    Create it as a Ray actor (:func:`rlightning_ray.start_runners` does, with restarts); the
    methods are then called with ``.remote``. The envs are built and reset in the constructor,
    so a runner Ray restarts after a crash is ready at once; a restarted runner resets its envs
    without seeds (fresh episodes, never a replay of the dead one's).

    Args:
        runner_id: This runner's name (in answers, messages and fragments).
        env_fns: One callable per env returning a fresh ``gymnasium.Env`` (wrap it, e.g. in
            SB3's ``Monitor``, inside the callable). They must share one observation space.
        server: The :class:`PolicyServer` actor handle to ask.
        env_ids: One str id per env (default ``f"{runner_id}-{i}"``).
        seeds: One seed (or None) per env for its first reset, as ``DummyVecEnv``'s seeds.

    Raises:
        ValueError: no env, ``env_ids`` or ``seeds`` of another length than ``env_fns``, or
            repeated env ids.
    """

    def __init__(
        self,
        runner_id: str,
        env_fns: Sequence[Callable[[], Any]],
        server: Any,
        *,
        env_ids: Sequence[str] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        ids = checked_env_ids(runner_id, env_fns, env_ids, seeds)
        import ray

        self.runner_id = runner_id
        self.env_ids = ids
        self._server = server
        self._envs = [fn() for fn in env_fns]
        self._space = self._envs[0].observation_space
        self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        first = [None] * len(self._envs) if seeds is None or self.restarted else list(seeds)
        self._obs = stack_observations(
            self._space,
            [env.reset(seed=seed)[0] for env, seed in zip(self._envs, first, strict=True)],
        )
        self._starts = np.ones(len(self._envs), dtype=bool)

    def describe(self) -> dict[str, Any]:
        """Where this runner lives, and what it asks.

        Keys: ``runner_id``, ``env_ids``, Ray ``node_id``, ``restarted`` and ``server`` (the
        handle it asks). ``restarted`` is True in a runner Ray re-created after a crash.
        """
        import ray

        context = ray.get_runtime_context()
        return {
            "runner_id": self.runner_id,
            "env_ids": self.env_ids,
            "node_id": context.get_node_id(),
            "restarted": bool(context.was_current_actor_reconstructed),
            "server": self._server,
        }

    def sample(
        self, n_steps: int, *, current_version: int | None = None, max_staleness: int = 0
    ) -> Fragment:
        """Step every env ``n_steps`` times with the server's answers; return the finished steps.

        Each step: stamp ``ts_env_sent_ns`` (``time.time_ns()``), send the ``(k, *obs_shape)``
        observation, the episode starts (the previous step's dones) and the stamp to the
        server, wait for its answer (one stacked response of this runner's rows), check it
        (:func:`~rlightning_ray.check_answer`: env ids in order, policy version, and that the
        stamp came back unchanged), step each env with its row of ``answer.action`` and reset
        it where done (``DummyVecEnv``'s rule, see the module docstring).

        Args:
            n_steps: Steps per env, > 0.
            current_version: The newest published policy version (None: not checked).
            max_staleness: How many versions older than ``current_version`` an answer may be.

        Returns:
            The :class:`Fragment` of the ``n_steps`` steps. The runner keeps its envs' state
            (observations, episode starts) for the next call.

        Raises:
            ValueError: ``n_steps`` is not positive, or an answer breaks a rule of
                :func:`~rlightning_ray.check_answer` or lost its ``ts_env_sent_ns`` stamp.
            RuntimeError: an env raised in ``step`` (names the env and the runner; the cause is
                chained), or the server failed this runner's request.
        """
        import ray

        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
            raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
        k = len(self._envs)
        frag = Fragment(self.runner_id, list(self.env_ids), restarted=self.restarted)
        rewards = np.zeros((n_steps, k), dtype=np.float32)
        dones = np.zeros((n_steps, k), dtype=bool)
        hops = np.zeros((n_steps, len(HOPS)), dtype=np.int64)
        for t in range(n_steps):
            sent = time.time_ns()
            answer = ray.get(
                self._server.act.remote(self.runner_id, self._obs, self.env_ids, self._starts, sent)
            )
            received = time.time_ns()
            check_answer(
                answer,
                self.env_ids,
                runner_id=self.runner_id,
                current_version=current_version,
                max_staleness=max_staleness,
            )
            hops[t] = self._hops(answer, sent, received)
            actions = answer.action
            infos: list[dict[str, Any]] = []
            next_obs = []
            for i, env in enumerate(self._envs):
                try:
                    obs, reward, terminated, truncated, info = env.step(actions[i])
                except Exception as exc:
                    raise RuntimeError(
                        f"env {self.env_ids[i]!r} of runner {self.runner_id!r} raised in step "
                        f"{t} of this fragment: {type(exc).__name__}: {exc}"
                    ) from exc
                rewards[t, i] = reward
                dones[t, i] = terminated or truncated
                info = dict(info)
                info["TimeLimit.truncated"] = bool(truncated and not terminated)
                if dones[t, i]:
                    info["terminal_observation"] = obs
                    obs, _ = env.reset()
                infos.append(info)
                next_obs.append(obs)
            frag.observations.append(self._obs)
            frag.answers.append(answer)
            frag.infos.append(deepcopy(infos))
            self._obs = stack_observations(self._space, next_obs)
            self._starts = dones[t].copy()
        frag.rewards, frag.dones, frag.hops_ns = rewards, dones, hops
        frag.last_observation, frag.last_dones = self._obs, self._starts.copy()
        self.restarted = False  # the next fragment continues this one's episodes
        return frag

    def _hops(self, answer: Any, sent: int, received: int) -> np.ndarray:
        """The four hop durations of one answer, ns (see :data:`rlightning_ray.HOPS`)."""
        echoed = answer.ts_env_sent_ns
        echoed_list = list(echoed) if isinstance(echoed, list) else [echoed] * len(self.env_ids)
        if any(check_stamp("ts_env_sent_ns", e, "answer.") != sent for e in echoed_list):
            raise ValueError(
                f"runner {self.runner_id!r} sent ts_env_sent_ns={sent} but the answer for envs "
                f"{self.env_ids} carries {echoed_list}: the stamp did not cross intact"
            )
        recv = check_stamp("ts_policy_recv_ns", answer.ts_policy_recv_ns, "answer.")
        start = check_stamp("ts_infer_start_ns", answer.ts_infer_start_ns, "answer.")
        done = check_stamp("ts_policy_sent_ns", answer.ts_policy_sent_ns, "answer.")
        return np.array([recv - sent, start - recv, done - start, received - done], np.int64)

    def ping(self) -> str:
        """Return ``runner_id`` (a cheap call to wait until the actor is up)."""
        return self.runner_id


def checked_env_ids(
    runner_id: str,
    env_fns: Sequence[Callable[[], Any]],
    env_ids: Sequence[str] | None,
    seeds: Sequence[int | None] | None,
) -> list[str]:
    """A runner's env ids (``f"{runner_id}-{i}"`` when None), after its constructor's checks.

    Shared by :class:`EnvRunner` and ``rlightning_ray.pettingzoo.ParallelEnvRunner``.

    Raises:
        ValueError: no env, ``env_ids`` or ``seeds`` of another length than ``env_fns``, or
            repeated env ids (the runner named).
    """
    if not env_fns:
        raise ValueError(f"runner {runner_id!r} needs at least one env, got env_fns=[]")
    ids = [f"{runner_id}-{i}" for i in range(len(env_fns))] if env_ids is None else env_ids
    if len(ids) != len(env_fns) or len(set(ids)) != len(ids):
        raise ValueError(
            f"runner {runner_id!r} needs one distinct env id per env: got env_ids={list(ids)} "
            f"for {len(env_fns)} envs"
        )
    if seeds is not None and len(seeds) != len(env_fns):
        raise ValueError(
            f"runner {runner_id!r} got {len(seeds)} seeds for {len(env_fns)} envs: "
            "give one seed (or None) per env"
        )
    return list(ids)
