"""``EnvRunner``: a Ray actor hosting an env group of ``k`` envs, stepped with a server's answers.

The runner owns what every kind of env shares: the request to the server (the observation
batch, episode starts and action masks the group observes, the ``ts_env_sent_ns`` stamp and,
from a :class:`~rlightning_ray.Collector`, the step's lockstep tag), the checks of each answer
(:func:`~rlightning_ray.check_answer`: its env ids, in order, and its policy version; every
row's echoed ``ts_env_sent_ns``; the server's stamps), the per-hop times, the error that names
the env that raised, restarts (a runner Ray re-creates resets its envs unseeded), the reset at a
new training run that resets the env (:meth:`EnvRunner.sample`'s ``reset_run_id``, as SB3's
``_setup_learn`` resets its VecEnv), ``describe`` and ``ping``. The envs and their framework's
semantics are the env group's
(:mod:`rlightning_ray.groups`): :class:`~rlightning_ray.GymEnvGroup` (SB3's ``DummyVecEnv``)
by default, ``rlightning_pettingzoo.ParallelEnvGroup`` for
:class:`rlightning_ray.pettingzoo.ParallelEnvRunner`.

In the local mode (``policy=``, :mod:`rlightning_ray.local`) the runner asks no server: its own
:class:`~rlightning_ray.LocalPolicy` answers each step, stamped and versioned as a server's, and
loads newer weights before each fragment; everything else above is the same.

In the **pipelined** server mode (``pipeline=True``; docs/ray.md, "Pipelined server mode") the
runner splits its ``k`` envs into two halves, each its own env group (the first ``k - k // 2``
envs, then the last ``k // 2``; every env keeps its seed), that alternate as Sample Factory's
double-buffered sampling: one half steps while the other half's request is in the server. Each
half is its own stream of requests, answers and checks, and ``sample`` returns one fragment per
half; the pipeline is drained before ``sample`` returns (no request crosses a fragment boundary).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from rlightning.rules import check_env_ids, check_flag, check_stamp
from rlightning_ray.checks import check_answer
from rlightning_ray.groups import (
    EnvContractError,
    EnvGroup,
    Fragment,
    GroupObservation,
    GymEnvGroup,
    stack_observations,
)
from rlightning_ray.latency import HOPS
from rlightning_ray.local import LocalPolicy

__all__ = [
    "EnvRunner",
    "Fragment",
    "StepTag",
    "check_pipeline",
    "checked_env_ids",
    "pipeline_halves",
    "stack_observations",
]

#: A request's lockstep tag: ``(call_id, step, restarted, incarnation)`` -- the collector's id
#: of the ``sample`` call, the step index in it, whether the runner is a restarted one, and the
#: runner process's id (a new one after a restart). The server's deterministic mode checks it.
StepTag = tuple[str, int, bool, str]

#: The largest stamp :func:`rlightning.rules.check_stamp` accepts (rule ``timestamp``).
_STAMP_MAX = 2**64 - 1


class EnvRunner:
    """An env group of ``k`` envs in one process, stepped with a :class:`PolicyServer`'s answers.

    Create it as a Ray actor (:func:`rlightning_ray.start_runners` does, with restarts); the
    methods are then called with ``.remote``. The group is built and reset in the constructor,
    env ``i`` with ``seeds[i]``, so a runner Ray restarts after a crash is ready at once; a
    restarted runner resets its envs without seeds (fresh episodes, never a replay of the dead
    one's).

    Args:
        runner_id: This runner's name (in answers, messages and fragments).
        env_fns: One callable per env returning a fresh env of the group's kind (gymnasium by
            default: wrap it, e.g. in SB3's ``Monitor``, inside the callable).
        server: The :class:`PolicyServer` actor handle to ask (None in the local mode).
        env_ids: One str id per env (default ``f"{runner_id}-{i}"``).
        seeds: One seed (or None) per env for its first reset (and, in the gymnasium group, its
            action space), as ``make_vec_env(..., seed=s)`` seeds env ``i`` with ``s + i``.
        env_group: Builds the :class:`~rlightning_ray.EnvGroup` from ``env_fns`` (default:
            :attr:`default_env_group`, :class:`~rlightning_ray.GymEnvGroup`).
        policy: The local mode (:mod:`rlightning_ray.local`): a factory of the
            :class:`~rlightning_ray.BatchPolicy` this runner acts with in its own process (built
            after its envs are reset; no server is asked). None: the server mode.
        registry: In the local mode, the :class:`~rlightning_ray.WeightsRegistry` the runner
            loads newer weights from before each fragment (None: the factory's weights).
        pipeline: The pipelined server mode (module docstring): two env groups of the first
            ``k - k // 2`` and the last ``k // 2`` envs (env ``i`` still reset with
            ``seeds[i]``), alternating; :meth:`sample` then returns one fragment per half.

    Raises:
        ValueError: no env, ``env_ids`` or ``seeds`` of another length than ``env_fns``, or
            repeated env ids (:func:`checked_env_ids`); both or neither of ``server`` and
            ``policy`` given; ``pipeline=True`` with fewer than 2 envs or in the local mode
            (:func:`check_pipeline`); an env's first ``reset`` broke gymnasium's API (an old-gym
            ``reset``, an observation of another shape: names the env, the runner and the
            space); or what the group's constructor raises.
        RuntimeError: an env raised in its first ``reset`` (names the env and the runner).
        TypeError: the group built is no :class:`~rlightning_ray.EnvGroup`, ``policy`` is
            not callable, or ``pipeline`` is not a bool.
    """

    #: The group a runner builds when ``env_group`` is not given.
    default_env_group: ClassVar[Callable[[Sequence[Callable[[], Any]]], Any]] = GymEnvGroup

    #: Whether the runner resets its envs at a new resetting training run (:meth:`sample`'s
    #: ``reset_run_id``; docs/ray.md, "A new run"). True for every runner class here, including
    #: :class:`rlightning_ray.pettingzoo.ParallelEnvRunner`; a subclass may set it False.
    resets_at_new_run: ClassVar[bool] = True

    def __init__(
        self,
        runner_id: str,
        env_fns: Sequence[Callable[[], Any]],
        server: Any,
        *,
        env_ids: Sequence[str] | None = None,
        seeds: Sequence[int | None] | None = None,
        env_group: Callable[[Sequence[Callable[[], Any]]], Any] | None = None,
        policy: Callable[[], Any] | None = None,
        registry: Any = None,
        pipeline: bool = False,
    ) -> None:
        ids = checked_env_ids(runner_id, env_fns, env_ids, seeds)
        if (server is None) == (policy is None):
            raise ValueError(
                f"runner {runner_id!r} needs a server to ask (server mode) or a policy factory "
                f"to act with in its own process (local mode), exactly one; got server={server!r}"
                f" and policy={policy!r}"
            )
        pipeline = check_pipeline(
            pipeline, len(ids), local=policy is not None, subject=f"runner {runner_id!r}"
        )
        self.runner_id = runner_id
        self.env_ids = ids
        self._server = server
        factory = type(self).default_env_group if env_group is None else env_group
        #: The row ranges of the runner's streams: one (all envs), or two halves (pipelined).
        self._slices = pipeline_halves(len(ids)) if pipeline else [slice(0, len(ids))]
        fns = list(env_fns)
        self._groups: list[EnvGroup] = []
        for rows in self._slices:
            group = factory(fns[rows])
            if not isinstance(group, EnvGroup):
                raise TypeError(
                    f"runner {runner_id!r}: env_group built a {type(group).__name__}, which is "
                    "no EnvGroup (it needs num_envs, reset, observe, step and fragment)"
                )
            if group.num_envs != len(fns[rows]):
                raise ValueError(
                    f"runner {runner_id!r}: env_group built {group.num_envs} envs for "
                    f"{len(fns[rows])} env_fns"
                )
            self._groups.append(group)
        self._group = self._groups[0]
        self.restarted, self._incarnation = self._actor_identity()
        first = [None] * len(ids) if seeds is None or self.restarted else list(seeds)
        for rows, group in zip(self._slices, self._groups, strict=True):
            try:
                group.reset(first[rows])
            except Exception as exc:
                named = self._env_error(exc, "in its first reset", offset=rows.start or 0)
                if named is None:
                    raise
                raise named from exc.__cause__ or exc
        self._local: LocalPolicy | None = None
        if policy is not None:  # built last: its seeding is not consumed by the envs
            self._local = LocalPolicy(policy, registry=registry, runner_id=runner_id)
        self._owner: str | None = None  # the token of the Collector it serves (claim)
        #: The learner's resetting run the envs were last reset for (None: none seen yet).
        self._reset_run: int | None = None
        #: Whether the envs were stepped since their last reset (the constructor's included).
        self._stepped = False

    def _actor_identity(self) -> tuple[bool, str]:
        """``(restarted, incarnation)`` of the Ray actor this runner lives in.

        ``restarted``: whether Ray re-created the actor after a crash; ``incarnation``: the
        worker's id and the process id (a new one after a restart), the lockstep tag's last
        part. Read once, in the constructor (benchmarks/ray_runner_cost.py overrides it to
        build a runner in-process, outside any actor).
        """
        import ray

        context = ray.get_runtime_context()
        return (
            bool(context.was_current_actor_reconstructed),
            f"{context.get_worker_id()}:{os.getpid()}",
        )

    @property
    def group(self) -> EnvGroup:
        """The runner's env group (pipelined: the first half's; :attr:`groups` has both)."""
        return self._group

    @property
    def groups(self) -> list[EnvGroup]:
        """The runner's env groups: one, or the two halves' in the pipelined mode (a new list)."""
        return list(self._groups)

    @property
    def streams(self) -> list[list[str]]:
        """The env ids of each stream (one fragment per stream): all, or each half's."""
        return [self.env_ids[rows] for rows in self._slices]

    def describe(self) -> dict[str, Any]:
        """Where this runner lives, and what it asks.

        Keys: ``runner_id``, ``env_ids``, Ray ``node_id``, ``restarted``, ``server`` (the handle
        it asks; None in the local mode), ``env_group`` (its group's class name), ``mode``
        (``"server"`` or ``"local"``), ``registry`` (the local mode's weights registry, else
        None), ``policy_version`` (the local policy's version, else None), ``pipeline`` (whether
        the runner pipelines two halves) and ``streams`` (the env ids of each fragment
        :meth:`sample` returns, in order: ``[env_ids]``, or the two halves' when pipelined).
        ``restarted`` is True in a runner Ray re-created after a crash.
        """
        import ray

        context = ray.get_runtime_context()
        return {
            "runner_id": self.runner_id,
            "env_ids": self.env_ids,
            "node_id": context.get_node_id(),
            "restarted": bool(context.was_current_actor_reconstructed),
            "server": self._server,
            "env_group": type(self._group).__name__,
            "mode": "server" if self._local is None else "local",
            "registry": None if self._local is None else self._local._registry,
            "policy_version": None if self._local is None else self._local.version,
            "pipeline": len(self._slices) > 1,
            "streams": self.streams,
        }

    def claim(self, owner: str) -> None:
        """Serve the local-mode :class:`~rlightning_ray.Collector` of token ``owner`` from now on.

        A Collector calls it on each of its local runners when it is built (after claiming
        their :class:`~rlightning_ray.WeightsRegistry`); a ``sample`` handed another token is
        refused from then on (that Collector was replaced by a newer one over this runner).
        """
        self._owner = owner

    def _check_owner(self, owner: str) -> None:
        """Refuse a ``sample`` from a Collector this runner no longer serves.

        A runner Ray re-created lost its claim: it reads the registry's owner once.

        Raises:
            RuntimeError: ``owner`` is not the token of the newest Collector over the runner.
        """
        if self._owner is None:
            import ray

            registry = None if self._local is None else self._local._registry
            if registry is not None:
                self._owner = ray.get(registry.owner.remote())
        if owner != self._owner:
            raise RuntimeError(
                f"runner {self.runner_id!r} serves the newest Collector built over it, not this "
                "one (its weights handed with sample may be older than that Collector's): "
                "sample and publish with the newest Collector"
            )

    def sample(
        self,
        n_steps: int,
        *,
        current_version: int | None = None,
        max_staleness: int = 0,
        call_id: str | None = None,
        owner: str | None = None,
        latest: Any = None,
        reset_run_id: int | None = None,
    ) -> Any:
        """Step every env ``n_steps`` times with the server's answers; return the finished steps.

        Each step: ``observe()`` the group, stamp ``ts_env_sent_ns`` (``time.time_ns()``), send
        the observation, episode starts, masks, stamp and (with ``call_id``) the lockstep tag
        ``(call_id, t, restarted, incarnation)`` to the server, wait for its answer (this
        runner's rows), check it (:func:`~rlightning_ray.check_answer`: env ids in order,
        policy version; every row's ``ts_env_sent_ns`` is the one sent; the server's three
        stamps are valid) and ``step`` the group with it. In the local mode the runner first
        loads the newest published weights (:meth:`LocalPolicy.refresh
        <rlightning_ray.local.LocalPolicy.refresh>`; never inside a fragment) and each step's
        answer comes from its own policy, stamped and versioned as a server's, and checked the
        same way.

        Args:
            n_steps: Steps per env, > 0.
            current_version: The newest published policy version (None: not checked).
            max_staleness: How many versions older than ``current_version`` an answer may be.
            call_id: The collector's id of this call (the same for every runner of one
                :meth:`Collector.sample <rlightning_ray.Collector.sample>`), which the server's
                deterministic mode uses to keep the runners in lockstep; None sends no tag.
            owner: In the local mode, the token of the :class:`~rlightning_ray.Collector`
                asking (it claimed the runner's registry: only it publishes there), with
                ``latest``; None: the runner reads its registry for the newest weights.
            latest: With ``owner``: the newest ``(version, [ObjectRef])`` that Collector
                published (None: nothing yet), loaded if newer than the runner's (no registry
                read).
            reset_run_id: The learner's latest training run that reset its env
                (:func:`rlightning_sb3.training_reset_run_id`), or None; in the local mode None
                falls back to the ``reset_run_id`` of the :class:`~rlightning_sb3.ActingState`
                loaded (:attr:`LocalPolicy.reset_run_id
                <rlightning_ray.local.LocalPolicy.reset_run_id>`). See :meth:`_start_run`: a
                newer one than the runner recorded resets every env before the first step, as
                SB3's ``_setup_learn``. A call that stepped an env and then raised leaves the
                run unrecorded (no fragment of it was delivered), so the next call resets again.

        Pipelined (``pipeline=True``): each half is its own stream. Both halves' step-0
        requests are sent (``.remote()``, not waited for); then, per step, for each half in
        turn: wait for its answer, check it (the same rules, against the half's env ids),
        ``step`` the half, and send its next request at once, so that the other half's request
        is in the server while this half steps. The last step's requests are the last sent: the
        pipeline is empty when ``sample`` returns.

        Returns:
            The group's fragment of the ``n_steps`` steps (:class:`~rlightning_ray.Fragment`
            for gymnasium envs); pipelined, a list of the two halves' fragments, in env order
            (each with its half's env ids, answers, hops). The runner keeps its envs' state for
            the next call.

        Raises:
            ValueError: ``n_steps`` is not positive, an answer breaks a rule of
                :func:`~rlightning_ray.check_answer` or lost its stamps, or an env broke
                gymnasium's API (a 4-tuple ``step``, an observation of another shape than the
                observation space's: names the env, the runner and the space).
            RuntimeError: an env raised in ``step`` or ``reset`` (names the env, the runner and
                the step; the cause is chained), the server failed this runner's request
                (e.g. ``LockstepError`` in the deterministic mode), or ``owner`` is not the
                newest Collector's over this runner.
            TypeError: ``reset_run_id`` is neither an int nor None.
        """
        import ray

        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
            raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
        if reset_run_id is not None and (
            isinstance(reset_run_id, bool) or not isinstance(reset_run_id, int)
        ):
            raise TypeError(
                f"runner {self.runner_id!r}: reset_run_id must be an int (the learner's "
                f"training_reset_run_id) or None, got {type(reset_run_id).__name__} "
                f"{reset_run_id!r}"
            )
        # a call that fails after stepping delivers no fragment: the run it began is not
        # recorded, so the next call (the run's first delivered rollout) resets again, as SB3's
        # run starts every episode; one refused before any step keeps the run recorded
        previous_run = self._reset_run
        try:
            if len(self._slices) > 1:
                self._start_run(reset_run_id)
                return self._sample_pipelined(n_steps, current_version, max_staleness, call_id)
            group = self._group
            local = self._local
            if local is not None:
                if owner is None:
                    local.refresh()
                else:
                    self._check_owner(owner)
                    local.refresh(latest)
                if reset_run_id is None:
                    reset_run_id = local.reset_run_id
            self._start_run(reset_run_id)
            stream = _Stream(self, group, self.env_ids, slice(0, len(self.env_ids)), n_steps)
            for t in range(n_steps):
                seen = group.observe()
                sent = time.time_ns()
                if local is not None:
                    answer = local.act(
                        seen.observation,
                        self.env_ids,
                        seen.episode_start,
                        sent,
                        action_masks=seen.action_masks,
                    )
                else:
                    answer = ray.get(self._request(seen, self.env_ids, sent, t, call_id))
                stream.take(t, seen, answer, sent, time.time_ns(), current_version, max_staleness)
            frag = stream.fragment()
            self.restarted = False  # the next fragment continues this one's episodes
            return frag
        except BaseException:
            if self._stepped:
                self._reset_run = previous_run
            raise

    def _sample_pipelined(
        self,
        n_steps: int,
        current_version: int | None,
        max_staleness: int,
        call_id: str | None,
    ) -> list[Any]:
        """:meth:`sample` of the pipelined mode: the halves alternate (see :meth:`sample`)."""
        import ray

        halves = [
            _Stream(self, group, self.env_ids[rows], rows, n_steps)
            for group, rows in zip(self._groups, self._slices, strict=True)
        ]

        def send(half: _Stream, t: int) -> tuple[GroupObservation, int, Any]:
            seen = half.group.observe()
            sent = time.time_ns()
            return seen, sent, self._request(seen, half.env_ids, sent, t, call_id)

        in_flight = [send(half, 0) for half in halves]
        for t in range(n_steps):
            for h, half in enumerate(halves):
                seen, sent, ref = in_flight[h]
                answer = ray.get(ref)
                half.take(t, seen, answer, sent, time.time_ns(), current_version, max_staleness)
                if t + 1 < n_steps:  # the next request leaves at once; the other half steps
                    in_flight[h] = send(half, t + 1)
        fragments = [half.fragment() for half in halves]
        self.restarted = False
        return fragments

    def _start_run(self, reset_run_id: int | None) -> bool:
        """Before a fragment's first step: reset every env where a new training run reset SB3's.

        SB3's ``BaseAlgorithm._setup_learn`` (``common/base_class.py``) resets the model's VecEnv
        when a run begins with ``reset_num_timesteps`` (or without a last observation):
        ``DummyVecEnv.reset`` resets every env with the seeds it was given once (a second reset
        has none; ``common/vec_env/dummy_vec_env.py``), each env's ``Monitor.reset`` forgets
        the cut episode's rewards and ``VecMonitor.reset`` its return and length, and the next
        step starts every episode (``_last_episode_starts`` all True). The runner does the same
        here when ``reset_run_id`` is not None and newer than the run it last saw: every env of
        every group is reset unseeded (the constructor's reset used the seeds) and the next
        observation's episode starts are all True, so the buffer's first row of the run is
        SB3's. The cut episodes' open steps are dropped (no fragment holds them: a reset
        happens only between fragments). Where the envs were not stepped since their last
        reset (a new runner, or one Ray restarted) they are fresh, as SB3's env after that
        reset: the run is only recorded, so that the first run does not reset them twice
        (which would consume the seeds as ``DummyVecEnv`` never does). A runner whose class
        has :attr:`resets_at_new_run` False changes nothing.

        Args:
            reset_run_id: The learner's latest resetting run
                (:func:`rlightning_sb3.training_reset_run_id`), or None (nothing changes).

        Returns:
            Whether the envs were reset (mutated: the groups' envs, observations and episode
            starts; the run recorded).

        Raises:
            ValueError, RuntimeError: an env's ``reset`` broke gymnasium's API or raised
                (names the env and the runner; the cause chained).
        """
        if (
            not self.resets_at_new_run
            or reset_run_id is None
            # Run ids are start_training's start_time (ns, strictly increasing per model): an
            # older id than the one recorded is another learner's earlier run (two models
            # sharing the runners), not a new run; resetting on it would cut every episode at
            # every alternation.
            or (self._reset_run is not None and reset_run_id <= self._reset_run)
        ):
            return False
        self._reset_run = reset_run_id
        if not self._stepped:
            return False
        for rows, group in zip(self._slices, self._groups, strict=True):
            try:
                group.reset([None] * group.num_envs)
            except Exception as exc:
                named = self._env_error(
                    exc, "in its reset for a new training run", offset=rows.start or 0
                )
                if named is None:
                    raise
                raise named from exc.__cause__ or exc
        self._stepped = False
        return True

    def _request(
        self, seen: GroupObservation, env_ids: list[str], sent: int, t: int, call_id: str | None
    ) -> Any:
        """Send one step's request of ``env_ids`` to the server; return its ``ObjectRef``.

        The request carries the observation, episode starts, masks, ``sent`` (``ts_env_sent_ns``)
        and, with ``call_id``, the lockstep tag ``(call_id, t, restarted, incarnation)``.
        """
        tag: StepTag | None = (
            None if call_id is None else (call_id, t, self.restarted, self._incarnation)
        )
        return self._server.act.remote(
            self.runner_id,
            seen.observation,
            env_ids,
            seen.episode_start,
            sent,
            action_masks=seen.action_masks,
            step=tag,
        )

    def _env_error(self, exc: BaseException, where: str, *, offset: int = 0) -> Exception | None:
        """The error naming this runner and the env of ``exc`` (its ``env_index``), or None.

        An :class:`~rlightning_ray.groups.EnvContractError` (gymnasium's API broken: an old-gym
        ``reset`` or ``step``, an observation of another shape than the space's) becomes a
        ``ValueError``; what an env raised, a ``RuntimeError`` with the env's message.
        ``offset`` is the first row of the group that raised (a pipelined runner's second half).
        """
        index = getattr(exc, "env_index", None)
        if isinstance(index, int) and not isinstance(index, bool):
            index += offset
        if not isinstance(index, int) or not 0 <= index < len(self.env_ids):
            return None
        env = f"env {self.env_ids[index]!r} of runner {self.runner_id!r}"
        if isinstance(exc, EnvContractError):
            return ValueError(f"{env} broke gymnasium's API {where}: {exc}")
        cause = exc.__cause__ or exc
        return RuntimeError(f"{env} raised {where}: {type(cause).__name__}: {cause}")

    def _hops(
        self, answer: Any, sent: int, received: int, env_ids: list[str] | None = None
    ) -> tuple[int, int, int, int]:
        """The four hop durations of one answer, ns (see :data:`rlightning_ray.HOPS`).

        Checks every part's stamps: a stacked response has one part, a multi-agent answer one
        per env; a ``ts_env_sent_ns`` may be one int for its rows or one per row. ``env_ids``
        are the answer's envs, for the message (None: the runner's; a pipelined half's own).
        A stacked response whose ``ts_env_sent_ns`` is the int ``sent`` and whose three server
        stamps are plain ints in ``check_stamp``'s range passes at once (the common answer);
        any other takes the full check below.

        Raises:
            ValueError: a row's ``ts_env_sent_ns`` is not ``sent`` (the stamp did not cross
                intact), or a server stamp is missing or invalid (``check_stamp``).
        """
        if not isinstance(answer, list | tuple):
            echo = getattr(answer, "ts_env_sent_ns", None)
            recv = getattr(answer, "ts_policy_recv_ns", None)
            start = getattr(answer, "ts_infer_start_ns", None)
            done = getattr(answer, "ts_policy_sent_ns", None)
            if (
                type(echo) is int
                and echo == sent
                and type(recv) is int
                and type(start) is int
                and type(done) is int
                and 0 <= recv <= _STAMP_MAX
                and 0 <= start <= _STAMP_MAX
                and 0 <= done <= _STAMP_MAX
            ):
                return (recv - sent, start - recv, done - start, received - done)
        parts = list(answer) if isinstance(answer, list | tuple) else [answer]
        echoed: list[Any] = []
        for part in parts:
            value = getattr(part, "ts_env_sent_ns", None)
            echoed.extend(value if isinstance(value, list | tuple) else [value])
        if not echoed or any(check_stamp("ts_env_sent_ns", e, "answer.") != sent for e in echoed):
            raise ValueError(
                f"runner {self.runner_id!r} sent ts_env_sent_ns={sent} but the answer for envs "
                f"{self.env_ids if env_ids is None else env_ids} carries {echoed}: the stamp did "
                "not cross intact"
            )
        first = parts[0]
        recv = check_stamp("ts_policy_recv_ns", first.ts_policy_recv_ns, "answer.")
        start = check_stamp("ts_infer_start_ns", first.ts_infer_start_ns, "answer.")
        done = check_stamp("ts_policy_sent_ns", first.ts_policy_sent_ns, "answer.")
        for part in parts[1:]:
            for name, value in (
                ("ts_policy_recv_ns", recv),
                ("ts_infer_start_ns", start),
                ("ts_policy_sent_ns", done),
            ):
                if check_stamp(name, getattr(part, name, None), "answer.") != value:
                    raise ValueError(
                        f"runner {self.runner_id!r} got one answer whose envs carry different "
                        f"{name} stamps ({value} and {getattr(part, name)}): one request is "
                        "answered by one batch"
                    )
        return (recv - sent, start - recv, done - start, received - done)

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

    The one place a runner's env ids and seeds are checked (every runner class calls it).

    Raises:
        TypeError: ``env_ids`` is not a sequence of str (rule ``env-id`` of
            :func:`rlightning.rules.check_env_ids`; the runner named).
        ValueError: no env, ``env_ids`` or ``seeds`` of another length than ``env_fns``, or
            repeated env ids (the runner named).
    """
    if not env_fns:
        raise ValueError(f"runner {runner_id!r} needs at least one env, got env_fns=[]")
    if env_ids is None:
        ids = [f"{runner_id}-{i}" for i in range(len(env_fns))]
    else:  # the env-id rule's owner: str ids (by type), one per env, distinct
        ids = check_env_ids(
            env_ids,
            len(env_fns),
            subject=f"runner {runner_id!r} env_ids",
            count=f"runner {runner_id!r} has {len(env_fns)} envs",
        )
    if seeds is not None and len(seeds) != len(env_fns):
        raise ValueError(
            f"runner {runner_id!r} got {len(seeds)} seeds for {len(env_fns)} envs: "
            "give one seed (or None) per env"
        )
    return ids


def pipeline_halves(k: int) -> list[slice]:
    """The row ranges of a pipelined runner's two halves: ``[0, k - k // 2)`` and the rest.

    Args:
        k: The runner's env count, >= 2.

    Returns:
        Two slices in env order (the first half is the larger one for an odd ``k``).

    Raises:
        ValueError: ``k`` < 2.
    """
    if k < 2:
        raise ValueError(f"pipelining needs >= 2 envs per runner to split in two halves, got {k}")
    first = k - k // 2
    return [slice(0, first), slice(first, k)]


def check_pipeline(pipeline: Any, k: int, *, local: bool, subject: str) -> bool:
    """Refuse a ``pipeline`` argument that cannot be honoured (docs/ray.md, "Pipelined ...").

    Args:
        pipeline: The argument (a bool).
        k: Envs per runner.
        local: Whether the runners act with their own policy (the local mode).
        subject: Who got it, for the message (``"start_runners"``, ``"runner 'runner-0'"``).

    Returns:
        ``pipeline`` as a Python bool (a ``numpy.bool_`` converted). Nothing is mutated.

    Raises:
        TypeError: ``pipeline`` is not a bool (:func:`rlightning.rules.check_flag`, rule
            ``flag``).
        ValueError: ``pipeline=True`` with fewer than 2 envs per runner (nothing to split), or
            in the local mode (there is no server whose inference the other half could overlap:
            the runner's own process infers).
    """
    pipeline = check_flag(pipeline, "pipeline", subject)
    if not pipeline:
        return False
    if k < 2:
        raise ValueError(
            f"{subject}: pipeline=True splits each runner's envs in two halves that alternate, "
            f"so it needs envs_per_runner >= 2, got {k} env(s) per runner"
        )
    if local:
        raise ValueError(
            f"{subject}: pipeline=True overlaps one half's env steps with the other half's "
            "inference in the policy server; in the local mode (policy=...) the runner infers "
            "in its own process, so there is nothing to overlap: pass pipeline=False, or a "
            "server instead of policy"
        )
    return True


class _Stream:
    """One stream of a :meth:`EnvRunner.sample` call: a group's steps, checked, and its fragment.

    A runner has one stream (all its envs) or, pipelined, one per half; each checks its answers
    against its own env ids and builds its own fragment.
    """

    def __init__(
        self, runner: EnvRunner, group: EnvGroup, env_ids: list[str], rows: slice, n_steps: int
    ) -> None:
        self.runner = runner
        self.group = group
        self.env_ids = env_ids
        self.offset = rows.start or 0  # the group's first row among the runner's envs
        self.observed: list[GroupObservation] = []
        self.answers: list[Any] = []
        self.records: list[Any] = []
        self.hops: list[tuple[int, int, int, int]] = []  # one row per step taken

    def take(
        self,
        t: int,
        seen: GroupObservation,
        answer: Any,
        sent: int,
        received: int,
        current_version: int | None,
        max_staleness: int,
    ) -> None:
        """Check step ``t``'s answer (:func:`check_answer`, the stamps), step the group with it.

        Raises:
            ValueError: the answer breaks a rule, or an env broke gymnasium's API (named).
            RuntimeError: an env raised in ``step`` (named, the cause chained).
        """
        runner = self.runner
        check_answer(
            answer,
            self.env_ids,
            runner_id=runner.runner_id,
            current_version=current_version,
            max_staleness=max_staleness,
        )
        hops = runner._hops(answer, sent, received, self.env_ids)
        runner._stepped = True  # set where an env steps: a call refused before keeps them fresh
        try:
            self.records.append(self.group.step(answer))
        except Exception as exc:
            named = runner._env_error(exc, f"in step {t} of this fragment", offset=self.offset)
            if named is None:
                raise
            raise named from exc.__cause__ or exc
        self.observed.append(seen)
        self.answers.append(answer)
        self.hops.append(hops)

    def fragment(self) -> Any:
        """The group's fragment of the steps taken (the runner's ``restarted`` flag in it)."""
        return self.group.fragment(
            runner_id=self.runner.runner_id,
            env_ids=list(self.env_ids),
            observed=self.observed,
            answers=self.answers,
            records=self.records,
            last=self.group.observe(),
            hops_ns=np.array(self.hops, np.int64).reshape(len(self.hops), len(HOPS)),
            restarted=self.runner.restarted,
        )
