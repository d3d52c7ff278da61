"""``Collector``: the driver's side -- asks every runner for a fragment, checks what comes back."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

from rlightning_ray.checks import check_answer
from rlightning_ray.latency import LatencyReport, latency_report
from rlightning_ray.server import LockstepError

__all__ = ["DEFAULT_TIMEOUT_S", "Collector"]

#: Seconds a :meth:`Collector.sample` call waits for its fragments unless told otherwise.
DEFAULT_TIMEOUT_S = 600.0

_FAIL_POLL_S = 0.1  # how often a failed sample repeats fail_pending until every runner returned


def _root(exc: BaseException) -> BaseException:
    """What a remote call raised, under Ray's ``RayTaskError`` wrappers (nested calls nest)."""
    seen = 0
    while seen < 8:
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            return exc
        exc, seen = cause, seen + 1
    return exc


def _cause(exc: BaseException) -> str:
    """``Type: message`` of what a remote call raised (a RayTaskError's own cause)."""
    cause = _root(exc)
    return f"{type(cause).__name__}: {cause}"


def _checked_timeout(timeout_s: Any, name: str) -> float:
    """``timeout_s`` as a positive float seconds (``math.inf``: no limit)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(timeout_s).__name__}")
    if math.isnan(timeout_s) or timeout_s <= 0:
        raise ValueError(f"{name} must be > 0 seconds (math.inf: no limit), got {timeout_s!r}")
    return float(timeout_s)


class Collector:
    """Gathers fragments from runners, in runner order, and keeps their latencies.

    Args:
        runners: :class:`~rlightning_ray.EnvRunner` actor handles; fragments come back in this
            order (the deterministic mode's buffer column order).
        max_staleness: Policy versions an answer may lag behind the newest published one.
        timeout_s: Seconds each :meth:`sample` call (and so each ``collect_*`` call) waits for
            its fragments unless it is given its own: :data:`DEFAULT_TIMEOUT_S` (600 s) by
            default; ``math.inf`` for no limit.

    Building it claims the local-mode runners and their
    :class:`~rlightning_ray.WeightsRegistry`: from then on this collector is their only
    publisher (:meth:`publish`) and hands each runner the newest weights with each
    :meth:`sample`, so no runner reads the registry before a fragment. A newer Collector built
    over the same runners takes them over (this one's ``publish`` and ``sample`` are refused
    then, naming why).

    Raises:
        ValueError: no runner, a runner id or env id repeated (the same runner twice, or two
            ``start_runners`` calls naming theirs alike), a server's deterministic ``order`` is
            not this collector's runner ids in this order (another set would hang; another
            order would put each runner's rows in another runner's buffer columns), pipelined
            runners with a server in the deterministic mode (it would hang), or
            ``timeout_s`` is not > 0.
        TypeError: ``timeout_s`` is not a number.

    Attributes:
        env_ids: Every runner's env ids, concatenated in runner order (the buffer's columns).
        restarts: How many fragments came from a restarted runner so far (a pipelined runner's
            two halves count once).
        pipelined: Whether some runner is pipelined (its fragments come per half).
        runner_streams: Per runner, the env ids of each fragment it returns.
        deterministic: Whether the runners' servers all batch in the deterministic mode
            (``order=``: every batch holds every runner's rows, in that order).
        local: Whether every runner acts with its own policy (the local mode,
            :mod:`rlightning_ray.local`: every call of a runner's policy holds all its envs).
        timeout_s: The default of :meth:`sample`'s ``timeout_s``.
    """

    def __init__(
        self,
        runners: Sequence[Any],
        *,
        max_staleness: int = 0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        import ray

        self.timeout_s = _checked_timeout(timeout_s, "timeout_s")
        if not runners:
            raise ValueError("a Collector needs at least one runner, got none")
        self.runners = list(runners)
        self.max_staleness = max_staleness
        described = ray.get([r.describe.remote() for r in self.runners])
        self.runner_ids: list[str] = [d["runner_id"] for d in described]
        self.runner_env_ids: list[list[str]] = [list(d["env_ids"]) for d in described]
        self.env_ids: list[str] = [e for ids in self.runner_env_ids for e in ids]
        # per runner, the env ids of each fragment it returns (pipelined: its two halves')
        self.runner_streams: list[list[list[str]]] = [
            [list(ids) for ids in d.get("streams", [d["env_ids"]])] for d in described
        ]
        self.pipelined = any(len(streams) > 1 for streams in self.runner_streams)
        for kind, ids in (("runner", self.runner_ids), ("env", self.env_ids)):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            if repeated:
                raise ValueError(
                    f"a Collector needs distinct {kind} ids, got {repeated} more than once in "
                    f"{ids}: pass each runner once, and start all the runners in one "
                    f"start_runners call (separate calls name theirs alike: runner-0, env-0, ...)"
                )
        modes = [d.get("mode", "server") for d in described]
        self.local = all(m == "local" for m in modes)
        self._registries: list[Any] = []  # the local runners' registries, one per actor
        # per runner: the index of its registry in _registries (None: none, server mode)
        self._runner_registry: list[int | None] = []
        for d in described:
            handle = d.get("registry")
            if handle is not None and all(handle != h for h in self._registries):
                self._registries.append(handle)
            self._runner_registry.append(
                None if handle is None else [h == handle for h in self._registries].index(True)
            )
        # Claim the registries (only this collector publishes there from now on) and the
        # runners: each sample hands a runner the newest weights, no registry read per fragment.
        self._owner = uuid.uuid4().hex
        #: per registry, the newest (version, [ObjectRef]) published there (None: none yet)
        self._latest: list[Any] = ray.get([h.claim.remote(self._owner) for h in self._registries])
        ray.get(
            [
                r.claim.remote(self._owner)
                for r, k in zip(self.runners, self._runner_registry, strict=True)
                if k is not None
            ]
        )
        self.restarts = 0
        self._hops: list[Any] = []
        served = [(d["runner_id"], d["server"]) for d in described if d.get("server") is not None]
        infos = ray.get([h.info.remote() for _, h in served])
        self._servers: list[Any] = []  # one handle per distinct server actor
        # per server (same index): its first contact's info, and the runners it serves
        self._server_infos: list[dict[str, Any]] = []
        self._server_runners: list[list[str]] = []
        self._server_lost: str | None = None  # set once a server restarted: every call refused
        self.deterministic = bool(infos) and all(i.get("order") is not None for i in infos)
        ordered = [i.get("order") for i in infos if i.get("order") is not None]
        if self.pipelined and ordered:
            piped = [
                r for r, st in zip(self.runner_ids, self.runner_streams, strict=True) if len(st) > 1
            ]
            raise ValueError(
                f"runners {piped} are pipelined (start_runners(..., pipeline=True)) but their "
                f"server is in the deterministic mode (order={ordered[0]}): its batches need "
                f"every runner's same step, which one half cannot reach while the other half's "
                f"request waits, so sampling would hang; start the server without order="
            )
        seen: dict[str, int] = {}
        for (runner_id, handle), info in zip(served, infos, strict=True):
            if info["actor_id"] not in seen:
                seen[info["actor_id"]] = len(self._servers)
                self._servers.append(handle)
                self._server_infos.append(info)
                self._server_runners.append([])
                self._check_order(info.get("order"))
            self._server_runners[seen[info["actor_id"]]].append(runner_id)

    def _check_order(self, order: list[str] | None) -> None:
        """Refuse a deterministic ``order`` that is not these runners in this order.

        Other runners would hang (a batch waits for every runner of the order); the same runners
        in another order would put each runner's rows in another runner's buffer columns (the
        server's one forward pass follows its order, the buffer the collector's).
        """
        if order is None:
            return
        unknown = [r for r in order if r not in self.runner_ids]
        missing = [r for r in self.runner_ids if r not in order]
        if unknown or missing:
            raise ValueError(
                f"the server's order {order} does not name exactly this collector's runners "
                f"{self.runner_ids}: order entries with no runner {unknown}, runners missing "
                f"from the order {missing} (a batch waits for every runner of the order, so "
                f"sampling would hang)"
            )
        if list(order) != self.runner_ids:
            raise ValueError(
                f"the server's order {list(order)} is not this collector's runner order "
                f"{self.runner_ids}: the deterministic batch (SB3's env order) follows the "
                f"server's order and the buffer's columns the collector's, so every runner's "
                f"rows would land in another runner's columns; pass the runners to Collector in "
                f"the server's order (start_runners' order, for order=[runner-0, runner-1, ...])"
            )

    def _check_servers(self, timeout_s: float | None) -> None:
        """Refuse the call when a server's incarnation changed (Ray restarted it).

        Raises:
            RuntimeError: a server's :meth:`~rlightning_ray.PolicyServer.incarnation` is not
                the one this collector recorded at first contact (names the server, its node
                and runners, both tokens, and what to do). The message is kept: every later
                :meth:`sample` raises it at once.
        """
        import ray

        tokens = ray.get([s.incarnation.remote() for s in self._servers], timeout=timeout_s)
        for info, runners, token in zip(
            self._server_infos, self._server_runners, tokens, strict=True
        ):
            if token != info["incarnation"]:
                self._server_lost = (
                    f"the policy server {info['actor_id']} (node {info['node_id']}, serving "
                    f"runners {runners}) restarted since this collector first reached it "
                    f"(incarnation {info['incarnation']} -> {token}): Ray re-created it after a "
                    f"crash from the newest published weights, but the acting state it held "
                    f"(num_timesteps, the exploration rate, the action-noise processes) was "
                    f"lost, so its answers may come from a policy state SB3 would never have "
                    f"had. This call's fragments were dropped (nothing reached a buffer) and "
                    f"this collector refuses every later call. To go on, publish the learner's "
                    f"state again (publish_weights with acting_state(model) or "
                    f"policy_weights(model), a newer version) and make a new Collector (its "
                    f"action-noise processes start afresh, not SB3's), or restart training"
                )
                raise RuntimeError(self._server_lost)

    def sample(
        self,
        n_steps: int,
        current_version: int | None = None,
        *,
        timeout_s: float | None = None,
        reset_run_id: int | None = None,
    ) -> list[Any]:
        """Ask every runner for ``n_steps`` steps (concurrently) and check the fragments.

        The runners get one call id (their requests' lockstep tag, which the server's
        deterministic mode checks). When a runner fails (an env raised, an answer was refused,
        the server refused its call), the collector tells every server to fail the requests
        still waiting for a batch (:meth:`~rlightning_ray.PolicyServer.fail_pending`, repeated
        until every runner has returned): in the deterministic mode the other runners would
        otherwise wait forever for the failed runner's request. They raise promptly, and their
        fragments are dropped; their envs keep the state they reached. When ``timeout_s``
        passes first, the collector fails the waiting requests the same way and raises without
        waiting for the runners still sampling. Either way the servers abandon the call: a late
        request of it (a runner that was in a slow env step) is refused on arrival, so the next
        call starts clean. After the fragments arrive, every server's incarnation is compared
        with the one recorded at first contact: a server Ray restarted lost its acting state.

        Args:
            n_steps: Steps per env.
            current_version: The newest published policy version (None: not checked).
            timeout_s: Seconds to wait for all the fragments (None: the collector's
                ``timeout_s``, :data:`DEFAULT_TIMEOUT_S` unless set; ``math.inf``: no limit).
            reset_run_id: The learner's latest training run that reset its env
                (:func:`rlightning_sb3.training_reset_run_id`; ``collect_rollout`` and
                ``collect_replay`` pass the model's), sent to every runner: a runner that sees
                a new one resets its envs before this call's first step, as SB3's
                ``_setup_learn`` resets its VecEnv (:meth:`EnvRunner.sample
                <rlightning_ray.EnvRunner.sample>`). None: the runners decide by what they
                know (in the local mode, the ``reset_run_id`` of the published
                :class:`~rlightning_sb3.ActingState` they loaded).

        Returns:
            One :class:`~rlightning_ray.Fragment` per runner, in runner order
            (:class:`~rlightning_pettingzoo.ParallelFragment` for PettingZoo runners); for a
            pipelined runner (``start_runners(..., pipeline=True)``) one per half, in env
            order, in its runner's place: their env ids, concatenated, are always
            :attr:`env_ids` (the buffer's columns), each checked as its own runner's.

        Raises:
            RuntimeError: a runner failed; the message names it and its envs (and the runner's
                own message names the env that raised); the runner's error is the cause. In the
                deterministic mode a runner Ray restarted in the middle of this call
                (:class:`~rlightning_ray.LockstepError` from the server) is the one named. Or a
                server restarted (its incarnation changed) since this collector first reached
                it: its acting state was lost, so this call and every later one is refused
                (the message names the server and says how to go on).
            TimeoutError: ``timeout_s`` passed first (names the runners still sampling, and
                apart the runners that only waited in the server for them).
            ValueError: a fragment is not its runner's (env ids), holds another number of
                steps, or an answer breaks :func:`~rlightning_ray.check_answer`'s rules; or
                ``timeout_s`` is not > 0.
            TypeError: ``reset_run_id`` is neither an int nor None (nothing is sampled).
        """
        import ray

        limit = self.timeout_s if timeout_s is None else _checked_timeout(timeout_s, "timeout_s")
        if reset_run_id is not None and (
            isinstance(reset_run_id, bool) or not isinstance(reset_run_id, int)
        ):
            raise TypeError(
                f"Collector.sample: reset_run_id must be an int (the learner's "
                f"training_reset_run_id(model)) or None, got {type(reset_run_id).__name__} "
                f"{reset_run_id!r}"
            )
        if self._server_lost is not None:
            raise RuntimeError(self._server_lost)
        call_id = uuid.uuid4().hex
        refs = [
            r.sample.remote(
                n_steps,
                current_version=current_version,
                max_staleness=self.max_staleness,
                call_id=call_id,
                **({} if k is None else {"owner": self._owner, "latest": self._latest[k]}),
                **({} if reset_run_id is None else {"reset_run_id": reset_run_id}),
            )
            for r, k in zip(self.runners, self._runner_registry, strict=True)
        ]
        fragments: list[Any] = [None] * len(refs)
        deadline = None if math.isinf(limit) else time.monotonic() + limit
        remaining = list(refs)
        failures: list[tuple[int, BaseException]] = []
        while remaining:
            wait = None if not failures else _FAIL_POLL_S
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                wait = left if wait is None else min(wait, left)
            ready, remaining = ray.wait(remaining, num_returns=1, timeout=wait)
            for ref in ready:
                i = refs.index(ref)
                try:
                    fragments[i] = ray.get(ref)
                except Exception as error:  # re-raised below, naming the runner
                    failures.append((i, error))
            if failures and remaining:
                i, exc = failures[0]
                reason = (
                    f"runner {self.runner_ids[i]!r} (envs {self.runner_env_ids[i]}) failed, so "
                    f"the collector failed the requests waiting for it: {_cause(exc)}"
                )
                self._fail_pending(reason, call_id)
            if remaining and deadline is not None and time.monotonic() >= deadline:
                self._time_out(call_id, limit, [refs.index(r) for r in remaining])
        if failures:
            i, exc = self._first_failure(failures)
            raise RuntimeError(
                f"runner {self.runner_ids[i]!r} (envs {self.runner_env_ids[i]}) failed: "
                f"{_cause(exc)}"
            ) from exc
        if self._servers:
            budget = None if deadline is None else max(1.0, deadline - time.monotonic())
            self._check_servers(budget)
        streams: list[tuple[str, list[str], Any]] = []
        for runner_id, expected, got in zip(
            self.runner_ids, self.runner_streams, fragments, strict=True
        ):
            parts = list(got) if isinstance(got, list) else [got]
            if len(parts) != len(expected):
                raise ValueError(
                    f"runner {runner_id!r} returned {len(parts)} fragments, expected "
                    f"{len(expected)} (one per stream of envs {expected})"
                )
            streams.extend(
                (runner_id, ids, part) for ids, part in zip(expected, parts, strict=True)
            )
        for runner_id, env_ids, frag in streams:
            if frag.runner_id != runner_id or frag.env_ids != env_ids:
                raise ValueError(
                    f"runner {runner_id!r} (envs {env_ids}) returned the fragment of runner "
                    f"{frag.runner_id!r} (envs {frag.env_ids})"
                )
            if len(frag.answers) != n_steps:
                raise ValueError(
                    f"runner {runner_id!r} returned {len(frag.answers)} steps, asked {n_steps}"
                )
            for answer in frag.answers:
                check_answer(
                    answer,
                    env_ids,
                    runner_id=runner_id,
                    current_version=current_version,
                    max_staleness=self.max_staleness,
                )
            self._hops.append(frag.hops_ns)
        self.restarts += sum(int(p[2].restarted) for p in streams if p[1] == self._first(p[0]))
        return [frag for _, _, frag in streams]

    def _first(self, runner_id: str) -> list[str]:
        """The env ids of ``runner_id``'s first stream (a restart is counted once per runner)."""
        return self.runner_streams[self.runner_ids.index(runner_id)][0]

    def _fail_pending(self, reason: str, call_id: str) -> list[str]:
        """Fail the requests waiting in every server and abandon ``call_id`` there.

        Returns:
            The runner ids whose requests were failed (they return promptly).
        """
        import ray

        refs = [s.fail_pending.remote(reason, call_id=call_id) for s in self._servers]
        released: list[list[str]] = ray.get(refs)
        return [runner for ids in released for runner in ids]

    def _time_out(self, call_id: str, limit: float, late: list[int]) -> None:
        """Abandon the call in the servers and raise, naming the runners still sampling.

        ``late`` are the indices of the runners that returned nothing yet; those whose requests
        were waiting in a server (released here) are named apart: they only waited for the
        others (in the deterministic mode a batch needs every runner).

        Raises:
            TimeoutError: always.
        """
        names = [self.runner_ids[i] for i in late]
        reason = f"the collector's sample timed out after {limit} s waiting for runners {names}"
        released = set(self._fail_pending(reason, call_id))
        still = [i for i in late if self.runner_ids[i] not in released]
        waited = [self.runner_ids[i] for i in late if self.runner_ids[i] in released]
        if still:
            others = (
                f"runners {waited} only waited in the server for them; their requests were failed"
                if waited
                else "the other runners returned"
            )
        else:  # every late runner was waiting in a server: its batches were slow
            still, others = late, "their requests were waiting in the server, and were failed"
        envs = [e for i in still for e in self.runner_env_ids[i]]
        raise TimeoutError(
            f"runners {[self.runner_ids[i] for i in still]} (envs {envs}) returned no fragment "
            f"within {limit} s (timeout_s; {others}): their envs may be slow or stuck, or their "
            f"requests waited in the server. The call was abandoned in the servers (its later "
            f"requests are refused, so the next call starts clean); pass a larger timeout_s "
            f"(Collector(..., timeout_s=...) or per call) for slow envs"
        )

    def _first_failure(
        self, failures: list[tuple[int, BaseException]]
    ) -> tuple[int, BaseException]:
        """The failure to report: the runner a :class:`LockstepError` names, else the first."""
        for _, exc in failures:
            root = _root(exc)
            if isinstance(root, LockstepError) and root.runner_id in self.runner_ids:
                i = self.runner_ids.index(root.runner_id)
                own = [e for j, e in failures if j == i]
                return i, own[0] if own else exc
        return failures[0]

    def publish(self, version: int, weights: Any) -> int:
        """Publish ``weights`` as ``version`` to the local-mode runners, once.

        The weights are put in the object store once (``ray.put``) and each runner's
        :class:`~rlightning_ray.WeightsRegistry` gets the reference; this collector hands it to
        every runner with its next :meth:`sample`, and the runner loads it at the start of that
        fragment (:meth:`LocalPolicy.refresh <rlightning_ray.local.LocalPolicy.refresh>`),
        never inside one. The collector claimed the registries when it was built: only it
        publishes there (a newer Collector over the same runners takes them over; this one's
        publish and sample are refused then). For runners of a server, use
        :func:`~rlightning_ray.publish_weights` with the server and its registry.

        Args:
            version: A new int version, larger than every earlier one.
            weights: What the runners' policies' ``set_weights`` take (for SB3:
                :func:`rlightning_ray.sb3.acting_state` or ``policy_weights``).

        Returns:
            ``version``.

        Raises:
            TypeError: ``version`` is not an int.
            ValueError: the runners are not all in the local mode (names the mode),
                ``version`` is not newer than the last published, or a newer Collector over
                the same runners claimed their registry.
        """
        import ray

        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, got {type(version).__name__} {version!r}")
        if not self.local:
            raise ValueError(
                f"Collector.publish publishes to local-mode runners (start_runners(..., "
                f"policy=...)), but runners {self.runner_ids} ask a server: publish with "
                "rlightning_ray.publish_weights(server, registry, version, weights)"
            )
        ref = ray.put(weights)
        ray.get([r.publish.remote(version, [ref], self._owner) for r in self._registries])
        self._latest = [(version, [ref]) for _ in self._registries]
        return version

    def latency(self, *, reset: bool = False) -> LatencyReport:
        """p50/p99 of each hop over the fragments sampled so far (since the last ``reset``)."""
        report = latency_report(self._hops)
        if reset:
            self._hops = []
        return report
