"""``PolicyServer``: a Ray actor answering every runner's requests with dynamic batching.

Requests (one per runner and step: ``k`` observation rows) wait in the server until ``max_batch``
rows are pending or the oldest has waited ``max_wait_us``; then one forward pass of the policy
answers all of them, and each runner gets its own rows of the stacked answer (views of the batch's
arrays and tensors: slicing copies nothing; Ray then pickles each runner's rows out of band). With
``order`` (the deterministic mode), a batch is formed when every runner named there has a request
pending, in that order, whatever the arrival order: a fixed batch composition, so the random draws
of a sampling policy are the ones a single ``DummyVecEnv`` of all the envs would get.

In the deterministic mode every batch also holds the same step of the same ``sample`` call of
every runner (the lockstep tag a :class:`~rlightning_ray.Collector`'s runners send): a request that
falls behind -- a runner Ray restarted in the middle of a ``sample`` retries it from step 0 while
the others are further on -- can never join a batch of its step, so the server refuses every
request of that call at once with :class:`LockstepError` naming the runner, instead of leaving them
waiting forever. A request of a runner's new process replaces one its dead process left pending.

A call the collector abandoned (it timed out, or a runner failed: :meth:`PolicyServer.fail_pending`
with its call id) is refused from then on: a late request of it, from a runner that was stuck in
a slow env step, raises at once instead of waiting for a batch or meeting the next call's requests.

Each server process draws an **incarnation** token (``uuid4``) in its constructor, so a server Ray
restarted after a crash has a new one (:meth:`PolicyServer.incarnation`, ``info()["incarnation"]``).
The acting-side state it held (the replica's ``num_timesteps``, the exploration rate, the
action-noise processes) is lost in a restart (the new process starts from the newest published
weights): the :class:`~rlightning_ray.Collector` compares the token after every call and refuses
the call when it changed, rather than adding answers of a state the learner never had.

Every answer carries ``policy_version`` (the weights that produced it) and the stamps
``ts_policy_recv_ns`` (the request arrived), ``ts_infer_start_ns`` (its batch's forward began)
and ``ts_policy_sent_ns`` (the forward ended), ``time.time_ns()`` nanoseconds since the epoch, with
the runner's ``ts_env_sent_ns`` echoed per row.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rlightning import MultiAgentPolicyResponse, PolicyResponse, ResponseBatch
from rlightning.rules import as_bools
from rlightning_ray._rows import concat_observations, slice_rows
from rlightning_ray.checks import POLICY_VERSION_FIELD

__all__ = ["BatchPolicy", "LockstepError", "PolicyServer"]


class BatchPolicy(Protocol):
    """What a :class:`PolicyServer` runs: one call answers a whole batch.

    ``rlightning_ray.sb3.SB3BatchPolicy`` is one (``rlightning_sb3.ActingReplica.act``); any
    callable of this signature is another. ``set_weights`` is optional (needed only to publish
    weights). ``action_masks`` is passed (by keyword) only for a batch whose envs sent masks, so
    a policy for envs without masks may leave it out.
    """

    def __call__(
        self,
        observation: Any,
        env_ids: list[str],
        episode_start: np.ndarray,
        ts_env_sent_ns: list[int],
        *,
        action_masks: Any = None,
    ) -> Any:
        """Answer ``(n, *obs_shape)`` rows: a ResponseBatch, a stacked response or a list.

        ``episode_start`` is ``(n,)`` bool; ``action_masks`` the rows' masks, concatenated in
        batch order (``(n, mask_dims)`` for gymnasium envs, a list of ``n`` per-env dicts for
        PettingZoo, ``{}`` for an env none of whose live agents has a mask at this step).
        """


class LockstepError(RuntimeError):
    """A deterministic-mode request fell out of lockstep (a runner restarted mid-``sample``).

    Raised by :class:`PolicyServer` into every request of the ``sample`` call concerned (see the
    module docstring); the :class:`~rlightning_ray.Collector` raises a ``RuntimeError`` naming
    :attr:`runner_id`.

    Args:
        message: What happened and what to do.
        runner_id: The runner that fell behind.

    Attributes:
        runner_id: As given.
    """

    def __init__(self, message: str, runner_id: str) -> None:
        super().__init__(message)
        self.runner_id = runner_id

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as ``LockstepError(message, runner_id)`` (it crosses Ray)."""
        return (type(self), (str(self), self.runner_id))


@dataclass
class _Request:
    runner_id: str
    observation: Any
    env_ids: list[str]
    episode_start: np.ndarray
    ts_env_sent_ns: int
    ts_policy_recv_ns: int
    future: asyncio.Future[PolicyResponse]
    action_masks: Any = None
    step: tuple[str, int, bool, str] | None = None


def _stacked(answer: Any) -> PolicyResponse | list[MultiAgentPolicyResponse]:
    """A policy's answer as one stacked response (the batch's own when it was never split).

    A list of :class:`~rlightning.MultiAgentPolicyResponse` stays a list (envs may have
    different live agents, which ``stack`` refuses).
    """
    if (
        isinstance(answer, list | tuple)
        and answer
        and all(isinstance(a, MultiAgentPolicyResponse) for a in answer)
    ):
        return list(answer)
    if isinstance(answer, ResponseBatch):
        if answer.stacked is not None:
            stacked: PolicyResponse = answer.stacked
            return stacked
        answer = list(answer)
    if isinstance(answer, PolicyResponse) and getattr(answer, "env_ids", None) is not None:
        return answer
    if isinstance(answer, list | tuple) and all(isinstance(a, PolicyResponse) for a in answer):
        return PolicyResponse.stack(list(answer))
    raise TypeError(
        "a BatchPolicy must answer a ResponseBatch, a stacked PolicyResponse or a list of "
        f"PolicyResponse or MultiAgentPolicyResponse, got {type(answer).__name__}"
    )


def _per_agent_masks(batch: list[_Request]) -> bool:
    """Whether the batch's masks are per-env ``{agent: mask}`` dicts (PettingZoo runners)."""
    return any(
        isinstance(r.action_masks, list) and all(isinstance(m, dict) for m in r.action_masks)
        for r in batch
        if r.action_masks is not None
    )


def _fail(batch: list[_Request], error: BaseException) -> None:
    """Set ``error`` on every request of ``batch`` not answered yet."""
    for request in batch:
        if not request.future.done():
            request.future.set_exception(error)


#: How many abandoned call ids a server remembers (a later request of one of them is refused).
_ABANDONED_KEPT = 64


class PolicyServer:
    """Dynamic batching over the requests of every runner (see the module docstring).

    Create it as a Ray actor with :func:`rlightning_ray.start_server` (restarts and retries
    set). Its methods are coroutines: Ray runs it as an async actor, so requests arriving while a
    batch waits join it.

    Args:
        policy_factory: Builds the :class:`BatchPolicy` in the server's process (called again
            when Ray restarts the server).
        max_batch: Rows that trigger a forward pass at once (a request is never split: a batch
            may exceed it by less than one request).
        max_wait_us: Microseconds the oldest pending request waits before a forward pass runs
            with what is there.
        order: Deterministic mode: the runner ids whose requests form each batch, in this order
            (``max_batch`` and ``max_wait_us`` are then unused).
        registry: A :class:`~rlightning_ray.WeightsRegistry` handle: the server starts from its
            newest weights (after a restart, what the learner last published).

    Raises:
        ValueError: ``max_batch`` < 1, ``max_wait_us`` < 0, or ``order`` empty or repeating.
    """

    def __init__(
        self,
        policy_factory: Callable[[], BatchPolicy],
        *,
        max_batch: int = 256,
        max_wait_us: int = 1000,
        order: Sequence[str] | None = None,
        registry: Any = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 row, got {max_batch!r}")
        if max_wait_us < 0:
            raise ValueError(f"max_wait_us must be >= 0 microseconds, got {max_wait_us!r}")
        if order is not None and (not order or len(set(order)) != len(order)):
            raise ValueError(f"order must name each runner once, got {list(order)!r}")
        self._policy = policy_factory()
        self._incarnation = uuid.uuid4().hex  # a new one in every process (a restart included)
        self._abandoned: dict[str, str] = {}  # call id -> why (insertion order: oldest first)
        self._max_batch = max_batch
        self._max_wait_s = max_wait_us / 1e6
        self._order = None if order is None else list(order)
        self._pending: list[_Request] = []
        self._timer: asyncio.TimerHandle | None = None
        self._version = 0
        self._next: tuple[int, Any] | None = None
        self._batch_rows: list[int] = []
        self._restarted = False
        # Deterministic mode: the (call id, step) of the last batch, and the call refused last.
        self._last_step: tuple[str, int] | None = None
        self._refused: tuple[str, LockstepError] | None = None
        if registry is not None:
            import ray

            self._restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
            latest = ray.get(registry.latest.remote())
            if latest is not None:
                version, refs = latest
                self._next = (version, ray.get(refs[0]))

    async def act(
        self,
        runner_id: str,
        observation: Any,
        env_ids: list[str],
        episode_start: Any,
        ts_env_sent_ns: int,
        *,
        action_masks: Any = None,
        step: tuple[str, int, bool, str] | None = None,
    ) -> PolicyResponse:
        """Answer one runner's rows (waiting for the batch they join).

        Args:
            runner_id: The asking runner.
            observation: ``(k, *obs_shape)`` (a dict of such arrays for a Dict space).
            env_ids: The runner's ``k`` env ids, in row order.
            episode_start: ``(k,)`` booleans (0/1 accepted; anything else is refused, as
                :func:`rlightning.rules.as_bools` refuses it), the previous step's dones.
            ts_env_sent_ns: When the runner sent it (``time.time_ns()``).
            action_masks: The rows' action masks (``(k, mask_dims)`` for gymnasium envs, ``k``
                per-env dicts for PettingZoo), or None when the envs have none. A batch mixing
                gymnasium requests with and without masks is refused (envs of two kinds on
                one server); a PettingZoo request without masks joins a batch with masks as
                ``k`` empty dicts (its agents have no mask at this step: every action legal,
                as ``rlightning_pettingzoo.find_action_mask`` decides for an agent without
                one).
            step: The lockstep tag ``(call_id, t, restarted, incarnation)``
                (:data:`rlightning_ray.runner.StepTag`; None: untagged), checked in the
                deterministic mode (module docstring).

        Returns:
            A stacked :class:`~rlightning.PolicyResponse` of the runner's ``k`` rows, in its
            order, with ``policy_version`` and the stamps (module docstring); for a policy
            answering :class:`~rlightning.MultiAgentPolicyResponse` s, a list of the ``k``
            responses, each stamped and versioned.

        Raises:
            ValueError: ``episode_start`` is not ``(k,)`` booleans or 0/1 (the env named); in
                the deterministic mode, ``runner_id`` is not one of ``order``'s runners (its
                request could never join a batch: refused instead of waiting forever; the
                message names both).
            LockstepError: in the deterministic mode, this request's ``sample`` call fell out
                of lockstep (names the runner that fell behind).
            RuntimeError: this request's ``sample`` call was abandoned by the collector
                (:meth:`fail_pending` with its call id: it timed out, or a runner failed), or
                :meth:`fail_pending` failed it while it waited.
            Exception: what the policy raised for the batch this request was in.
        """
        recv = time.time_ns()
        ids = list(env_ids)
        starts = as_bools(episode_start, "episode_start", shape=(len(ids),), labels=ids)
        if self._order is not None and runner_id not in self._order:
            raise ValueError(
                f"runner {runner_id!r} (envs {ids}) is not in the server's order "
                f"{self._order}: in the deterministic mode a batch is formed only from the "
                f"runners named there, so this request would wait forever; name the runners "
                f"start_runners made (runner-0, runner-1, ...), not env ids"
            )
        if step is not None and str(step[0]) in self._abandoned:
            raise RuntimeError(
                f"runner {runner_id!r} (envs {ids}) asked for step {step[1]} of sample call "
                f"{step[0]!r}, which the collector abandoned ({self._abandoned[str(step[0])]}): "
                "the request is refused so that it cannot join a later call's batch"
            )
        refused = self._refused
        if self._order is not None and step is not None and refused and step[0] == refused[0]:
            raise refused[1]
        future: asyncio.Future[PolicyResponse] = asyncio.get_running_loop().create_future()
        request = _Request(
            runner_id,
            observation,
            ids,
            starts,
            ts_env_sent_ns,
            recv,
            future,
            action_masks,
            None if step is None else (str(step[0]), int(step[1]), bool(step[2]), str(step[3])),
        )
        if self._order is not None and request.step is not None:
            self._drop_stale(request)
        self._pending.append(request)
        self._schedule()
        return await future

    async def set_weights(self, version: int, refs: list[Any]) -> int:
        """Take new weights (``refs``: a one-item list of their ObjectRef) for the next batch.

        The factory's weights are version 0. A version equal to the newest is taken again (a
        retried call, or a restarted server that already read it from the registry).

        Returns:
            ``version``.

        Raises:
            ValueError: ``version`` is older than the weights in use or waiting.
        """
        newest = self._version if self._next is None else self._next[0]
        if version < newest:
            raise ValueError(f"weights version {version} is older than the server's {newest}")
        self._next = (version, await refs[0])
        return version

    async def info(self) -> dict[str, Any]:
        """The server's state.

        Keys: ``version`` in use, ``batch_rows`` (the rows of each batch so far), ``restarted``,
        Ray ``node_id``, ``actor_id`` (hex), ``order`` (the deterministic mode's runner ids, or
        None) and ``incarnation`` (see :meth:`incarnation`).
        """
        import ray

        context = ray.get_runtime_context()
        return {
            "version": self._version,
            "batch_rows": list(self._batch_rows),
            "restarted": self._restarted,
            "node_id": context.get_node_id(),
            "actor_id": context.get_actor_id(),
            "order": None if self._order is None else list(self._order),
            "incarnation": self._incarnation,
        }

    async def incarnation(self) -> str:
        """This server process's token: a ``uuid4`` hex drawn in the constructor.

        A server Ray restarted after a crash draws a new one, so a caller that kept the token
        knows the acting-side state (counters, exploration, noise) was lost in between.
        """
        return self._incarnation

    async def fail_pending(self, reason: str, *, call_id: str | None = None) -> list[str]:
        """Fail every request waiting for a batch with ``RuntimeError(reason)``.

        The :class:`~rlightning_ray.Collector` calls it when a runner failed or its call timed
        out: in the deterministic mode the other runners' requests would otherwise wait forever
        for the missing runner's (and their actors stay busy). With ``call_id`` the call is also
        abandoned: every later request of it is refused on arrival (the last 64 abandoned ids
        are kept), so a runner that was stuck in a slow env step cannot bring that call's
        request into a later call's batch. Nothing else changes (weights, version).

        Args:
            reason: The error message the waiting runners get (names the runner that failed).
            call_id: The collector's id of the abandoned ``sample`` call (None: none abandoned).

        Returns:
            The runner ids whose requests were failed, in arrival order (a runner once).
        """
        if call_id is not None:
            self._abandoned[call_id] = reason
            while len(self._abandoned) > _ABANDONED_KEPT:
                del self._abandoned[next(iter(self._abandoned))]
        pending, self._pending = self._pending, []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _fail(pending, RuntimeError(reason))
        return list(dict.fromkeys(r.runner_id for r in pending))

    # ------------------------------------------------------------------ batching
    def _schedule(self) -> None:
        if self._order is not None:
            self._refuse_behind()
            first: dict[str, _Request] = {}
            for request in self._pending:
                first.setdefault(request.runner_id, request)
            if all(runner in first for runner in self._order):
                batch = [first[runner] for runner in self._order]
                self._pending = [r for r in self._pending if all(r is not b for b in batch)]
                if self._in_lockstep(batch):
                    self._run(batch)
            return
        while sum(len(r.env_ids) for r in self._pending) >= self._max_batch:
            self._run(self._take())
        if self._pending and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._max_wait_s, self._on_timer)

    # ------------------------------------------------------------------ lockstep
    def _drop_stale(self, request: _Request) -> None:
        """Fail a pending request its runner's dead process left (a new process now asks)."""
        assert request.step is not None
        for old in self._pending:
            if (
                old.runner_id == request.runner_id
                and old.step is not None
                and old.step[3] != request.step[3]
            ):
                _fail([old], RuntimeError(f"runner {old.runner_id!r}'s process was replaced"))
        self._pending = [r for r in self._pending if not r.future.done()]

    def _refuse_behind(self) -> None:
        """Refuse the call of a pending request at or before the last batch's step of its call.

        Such a request can never join a batch of its step: the other runners are past it (Ray
        restarted its runner mid-``sample`` and retried the call from step 0).
        """
        last = self._last_step
        if last is None:
            return
        for request in self._pending:
            tag = request.step
            if tag is not None and tag[0] == last[0] and tag[1] <= last[1]:
                self._refuse_call(
                    tag[0],
                    LockstepError(
                        f"runner {request.runner_id!r} (envs {request.env_ids}) asked for step "
                        f"{tag[1]} of sample call {tag[0]!r} after the server had answered step "
                        f"{last[1]} of it: "
                        + (
                            "Ray restarted the runner and retried its sample from step 0"
                            if tag[2]
                            else "the runner fell behind the others"
                        )
                        + ". In the deterministic mode every batch holds the same step of every "
                        "runner (SB3's batch composition), so this call cannot finish and every "
                        "request of it is refused. Each runner keeps the state it reached; "
                        "sample again to go on (a restarted runner's envs start fresh, unseeded "
                        "episodes)",
                        request.runner_id,
                    ),
                )
                return

    def _in_lockstep(self, batch: list[_Request]) -> bool:
        """Whether ``batch``'s tagged requests are one step of one call (else refuse the call)."""
        tags = [(r.step[0], r.step[1]) for r in batch if r.step is not None]
        if not tags:
            return True
        if len(set(tags)) == 1 and len(tags) == len(batch):
            self._last_step = tags[0]
            return True
        untagged = [r for r in batch if r.step is None]
        behind = untagged[0] if untagged else min(batch, key=lambda r: r.step[1] if r.step else 0)
        steps = {r.runner_id: None if r.step is None else r.step[:2] for r in batch}
        error = LockstepError(
            f"the deterministic batch would mix the steps {steps}: runner {behind.runner_id!r} "
            "is out of lockstep (a runner restarted mid-sample, or runners sampled by calls "
            "other than one Collector.sample); every request of these calls is refused",
            behind.runner_id,
        )
        _fail(batch, error)
        for call in {t[0] for t in tags}:
            self._refuse_call(call, error)
        return False

    def _refuse_call(self, call_id: str, error: LockstepError) -> None:
        """Fail every pending request of ``call_id``, and those that come later."""
        self._refused = (call_id, error)
        refused = [r for r in self._pending if r.step is not None and r.step[0] == call_id]
        self._pending = [r for r in self._pending if all(r is not x for x in refused)]
        _fail(refused, error)

    def _on_timer(self) -> None:
        self._timer = None
        if self._pending:
            self._run(self._take())
        self._schedule()

    def _take(self) -> list[_Request]:
        batch, rows = [self._pending[0]], len(self._pending[0].env_ids)
        for request in self._pending[1:]:
            if rows + len(request.env_ids) > self._max_batch:
                break
            batch.append(request)
            rows += len(request.env_ids)
        self._pending = self._pending[len(batch) :]
        if not self._pending and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return batch

    def _run(self, batch: list[_Request]) -> None:
        """One forward pass for ``batch``; each request's future gets its rows or the error.

        Whatever goes wrong (weights that cannot be loaded, the policy raising, an answer of the
        wrong shape) reaches every request of the batch: nothing is raised here, where a timer
        callback would lose it.
        """
        try:
            self._run_batch(batch)
        except Exception as exc:  # every runner of the batch gets the error
            _fail(batch, exc)

    def _run_batch(self, batch: list[_Request]) -> None:
        if self._next is not None:  # between batches only
            version, weights = self._next
            self._next = None
            set_weights = getattr(self._policy, "set_weights", None)
            if set_weights is None:
                _fail(
                    batch,
                    TypeError(
                        f"{type(self._policy).__name__} has no set_weights(); weights version "
                        f"{version} cannot be used"
                    ),
                )
                return
            try:
                set_weights(weights)
            except Exception as exc:
                error = RuntimeError(
                    f"the server could not load the published weights version {version} into "
                    f"{type(self._policy).__name__}: {type(exc).__name__}: {exc}; it keeps "
                    f"version {self._version} (publish weights of the served model's "
                    f"architecture under a newer version)"
                )
                error.__cause__ = exc
                _fail(batch, error)
                return
            self._version = version
        start = time.time_ns()
        env_ids = [env_id for r in batch for env_id in r.env_ids]
        stamps = [r.ts_env_sent_ns for r in batch for _ in r.env_ids]
        masked = [r.action_masks is not None for r in batch]
        extra: dict[str, Any] = {}
        if any(masked):
            if _per_agent_masks(batch):
                # PettingZoo: a mask is an agent's own, found in its info at this step; a runner
                # none of whose agents has one now sends none (no mask: every action legal)
                masks = [r.action_masks or [{} for _ in r.env_ids] for r in batch]
                extra["action_masks"] = [mask for found in masks for mask in found]
            elif not all(masked):
                raise ValueError(
                    f"a batch mixes runners whose envs sent action masks "
                    f"{[r.runner_id for r in batch if r.action_masks is not None]} with runners "
                    f"whose envs sent none {[r.runner_id for r in batch if r.action_masks is None]}"
                    ": serve envs of one kind per server"
                )
            else:
                extra["action_masks"] = concat_observations([r.action_masks for r in batch])
        try:
            stacked = _stacked(
                self._policy(
                    concat_observations([r.observation for r in batch]),
                    env_ids,
                    np.concatenate([r.episode_start for r in batch]),
                    stamps,
                    **extra,
                )
            )
        except Exception as exc:  # every runner of the batch gets the policy's error
            _fail(batch, exc)
            return
        done = time.time_ns()
        self._batch_rows.append(len(env_ids))
        row = 0
        for request in batch:
            rows = slice(row, row + len(request.env_ids))
            row += len(request.env_ids)
            answer: Any
            if isinstance(stacked, list):  # multi-agent: one response per env, each stamped
                answer = stacked[rows]
                parts = answer
            else:
                answer = slice_rows(stacked, rows.start, rows.stop)
                parts = [answer]
            for part in parts:
                part.ts_env_sent_ns = request.ts_env_sent_ns
                part.ts_policy_recv_ns = request.ts_policy_recv_ns
                part.ts_infer_start_ns = start
                part.ts_policy_sent_ns = done
                setattr(part, POLICY_VERSION_FIELD, self._version)
            if not request.future.done():
                request.future.set_result(answer)
