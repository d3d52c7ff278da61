"""What every PettingZoo collector on Ray runners shares (private): split, seeds, actors.

A collector on Ray runners (:class:`rlightning_ray.pettingzoo.RaySharedRolloutCollector` and its
siblings) spreads ``n_runners * copies_per_runner`` env copies over ``n_runners`` Ray actors,
each holding a replica of the learner's model and an in-process collector of
``rlightning_pettingzoo`` over its block of copies. The argument checks, the seeds, building the
actors and waiting for their answers (one deadline for all of them) are written here once.
"""

from __future__ import annotations

import io
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlightning.rules import check_count, check_seeds

__all__ = [
    "PooledCollector",
    "RunnerPlan",
    "RunnerPool",
    "check_picklable",
    "check_timeout",
    "copy_seeds",
    "group_runner_pool",
    "load_replay_replica",
    "load_replica",
    "merge_returns",
    "plan_runners",
    "replay_replica_spec",
    "replica_counters",
    "replica_spec",
    "runner_columns",
    "runner_seeds",
    "saved_model",
    "split_copies",
]


def split_copies(
    name: str,
    env_fns: Sequence[Callable[[], Any]] | None,
    env_fn: Callable[[], Any] | None,
    n_runners: int,
    copies_per_runner: int | None,
) -> tuple[list[Callable[[], Any]], int]:
    """One env function per copy, and the copies per runner (the collectors' ``env_fns`` rule).

    Args:
        name: The collector, for the messages.
        env_fns: One function per copy, or None.
        env_fn: Instead of ``env_fns``: one function for every copy, or None.
        n_runners: The runners (already checked as a count >= 1).
        copies_per_runner: Copies per runner; None: ``len(env_fns) // n_runners`` with
            ``env_fns``, 1 with ``env_fn``.

    Returns:
        ``(fns, copies_per_runner)``: ``n_runners * copies_per_runner`` functions, in copy
        order (runner ``r`` holds ``fns[r * copies_per_runner : (r + 1) * copies_per_runner]``).

    Raises:
        ValueError: neither or both of ``env_fns`` and ``env_fn``; the functions cannot be
            split into ``n_runners`` equal blocks; ``copies_per_runner`` is < 1.
        TypeError: ``copies_per_runner`` is not an int count; a function is not callable
            (named by copy index).
    """
    if (env_fns is None) == (env_fn is None):
        raise ValueError(f"{name}: give exactly one of env_fns (one per copy) and env_fn")
    if env_fns is not None:
        fns = list(env_fns)
        if copies_per_runner is None:
            if len(fns) % n_runners or not fns:
                raise ValueError(
                    f"{name}: {len(fns)} env_fns cannot be split into {n_runners} runners "
                    "of equal copies"
                )
            copies_per_runner = len(fns) // n_runners
        check_count(copies_per_runner, f"{name} copies_per_runner", minimum=1)
        if len(fns) != n_runners * copies_per_runner:
            raise ValueError(
                f"{name}: env_fns holds {len(fns)} functions, n_runners * "
                f"copies_per_runner = {n_runners} * {copies_per_runner} copies need "
                f"{n_runners * copies_per_runner}"
            )
    else:
        copies_per_runner = 1 if copies_per_runner is None else copies_per_runner
        check_count(copies_per_runner, f"{name} copies_per_runner", minimum=1)
        fns = [env_fn] * (n_runners * copies_per_runner)  # type: ignore[list-item]
    for k, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(
                f"{name}: env function of copy {k} must be callable (returning a "
                f"PettingZoo env), got {type(fn).__name__}"
            )
    return fns, int(copies_per_runner)


def check_picklable(value: Any, what: str, name: str, fix: str) -> None:
    """Refuse ``value`` where Ray's cloudpickle cannot send it to the runners (named).

    Args:
        value: What the runners are sent (an env function, ``group_of``).
        what: It, as the caller names it (``"env function of copy 1"``).
        name: The collector, for the message.
        fix: What to give instead.

    Raises:
        TypeError: ``ray.cloudpickle.dumps(value)`` fails (its error in the message, chained).
    """
    import ray

    try:
        ray.cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    except Exception as exc:  # cloudpickle raises TypeError, PicklingError, AttributeError...
        raise TypeError(
            f"{name}: {what} must be picklable (Ray's cloudpickle) to reach the runners, "
            f"which call it in their own processes; {type(value).__name__} {value!r} is not "
            f"({type(exc).__name__}: {exc}): {fix}"
        ) from exc


def copy_seeds(seeds: Any, n_copies: int, name: str) -> list[int | None]:
    """Each copy's first-reset seed (``seeds`` checked by :func:`rlightning.rules.check_seeds`).

    Raises:
        TypeError, ValueError: what ``check_seeds`` raises (named ``"<name> seeds[k]"``), or
            ``seeds`` is not one per copy.
    """
    out: list[int | None] = (
        [None] * n_copies if seeds is None else check_seeds(seeds, f"{name} seeds")
    )
    if len(out) != n_copies:
        raise ValueError(
            f"{name}: seeds must hold one seed per env copy ({n_copies}), got {len(out)}"
        )
    return out


#: One past the largest acting seed: :func:`rlightning_sb3.set_acting_seed` is SB3's
#: ``set_random_seed``, whose ``np.random.seed`` takes seeds in ``[0, 2**32 - 1]``.
ACTING_SEED_LIMIT = 2**32


def runner_seeds(model: Any, acting_seeds: Any, n_runners: int, name: str) -> list[int | None]:
    """Each runner's acting seed: ``acting_seeds`` checked, or ``model.seed + r``, or None.

    Every seed is below :data:`ACTING_SEED_LIMIT` (``np.random.seed``'s range, which each
    runner's :func:`rlightning_sb3.set_acting_seed` would otherwise refuse only after the
    runners were built).

    Raises:
        TypeError, ValueError: what :func:`rlightning.rules.check_seeds` raises, or
            ``acting_seeds`` is not one per runner.
        ValueError: a seed is ``>= 2**32`` (named ``acting_seeds[r]``, or ``model.seed + r``
            for a default one).
    """
    if acting_seeds is None:
        base = getattr(model, "seed", None)
        if base is None:
            return [None] * n_runners
        out: list[int | None] = [int(base) + r for r in range(n_runners)]
        for r, seed in enumerate(out):
            if seed is not None and seed >= ACTING_SEED_LIMIT:
                raise ValueError(
                    f"{name}: runner {r}'s default acting seed model.seed + {r} = {seed} is "
                    f">= 2**32 (np.random.seed's limit, which set_acting_seed applies); give "
                    "acting_seeds (one int in [0, 2**32 - 1] per runner)"
                )
        return out
    out = check_seeds(acting_seeds, f"{name} acting_seeds")
    if len(out) != n_runners:
        raise ValueError(
            f"{name}: acting_seeds must hold one seed per runner ({n_runners}), got {len(out)}"
        )
    for r, seed in enumerate(out):
        if seed is not None and seed >= ACTING_SEED_LIMIT:
            raise ValueError(
                f"{name} acting_seeds[{r}] must be < 2**32 (np.random.seed's limit, which "
                f"set_acting_seed applies in the runner); got {seed}"
            )
    return out


def check_timeout(timeout_s: Any, name: str) -> float | None:
    """``timeout_s`` as None (no limit) or a number of seconds > 0.

    Raises:
        TypeError: not None and not a real number (a bool, a str).
        ValueError: not > 0 (NaN too).
    """
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(
            f"{name}: timeout_s must be None (no limit) or a number of seconds, got "
            f"{type(timeout_s).__name__} {timeout_s!r}"
        )
    if not timeout_s > 0:  # NaN too
        raise ValueError(
            f"{name}: timeout_s must be None (no limit) or a number of seconds > 0, got "
            f"{timeout_s!r}"
        )
    return float(timeout_s)


def saved_model(model: Any) -> bytes:
    """``model`` as SB3's ``model.save`` writes it (what a runner's replica is loaded from)."""
    saved = io.BytesIO()
    model.save(saved)
    return saved.getvalue()


class RunnerPool:
    """``n`` Ray actors of one class, built at once, asked together, waited on with one deadline.

    Args:
        name: The collector, for the messages.
        actor_class: The actors' class (a plain class; made a Ray actor here). It must have a
            ``ready()`` method returning the runner's id.
        args: One tuple of constructor arguments per runner.
        num_cpus: CPUs each actor reserves.
        timeout_s: Seconds to wait for all the runners' answers of one call, together (None:
            no limit).

    Attributes:
        timeout_s: The limit of each call (building included), read at each call: may be
            changed between calls.
        ids: The runners' ids, ``"pz-runner-<r>"``.
        actors: The actor handles, in runner order (empty after :meth:`close`).

    Raises:
        RuntimeError: Ray is not initialised, or a runner failed to build or did not build
            within ``timeout_s`` (named, the cause chained); the runners built are ended.
    """

    def __init__(
        self,
        name: str,
        actor_class: type,
        args: Sequence[tuple[Any, ...]],
        *,
        num_cpus: float,
        timeout_s: float | None,
    ) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError(f"{name} needs Ray: call ray.init(...) first")
        self.name = name
        self.timeout_s = timeout_s
        self.ids = [f"pz-runner-{r}" for r in range(len(args))]
        actor: Any = ray.remote(actor_class).options(num_cpus=num_cpus)
        self.actors: list[Any] = [actor.remote(*a) for a in args]
        try:
            self.get([runner.ready.remote() for runner in self.actors], "build")
        except RuntimeError:
            self.close()  # the runners that were built end too
            raise

    def get(self, refs: Sequence[Any], what: str) -> list[Any]:
        """The runners' answers to ``refs`` (one per runner, in runner order).

        All are waited on together, with one deadline ``timeout_s`` from now (not one per
        runner); the first runner to fail is named.

        Raises:
            RuntimeError: a runner failed (its error in the message, chained), or some runners
                had not answered by the deadline (all of those named).
        """
        import ray

        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        pending = dict(zip(refs, self.ids, strict=True))
        answers: dict[Any, Any] = {}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            if not ready:
                late = ", ".join(repr(runner_id) for runner_id in pending.values())
                raise RuntimeError(
                    f"{self.name}: runner {late} did not {what} within timeout_s={self.timeout_s}"
                )
            for ref in ready:
                runner_id = pending.pop(ref)
                try:
                    answers[ref] = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise RuntimeError(
                        f"{self.name}: runner {runner_id!r} failed to {what}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
        return [answers[ref] for ref in refs]

    def call(self, method: str, *args: Any, what: str) -> list[Any]:
        """Call ``method(*args)`` on every runner at once; their answers in runner order.

        Raises:
            RuntimeError: as :meth:`get`; or the pool was closed (:meth:`close`: no runner is
                left to ask).
        """
        if not self.actors:
            raise RuntimeError(
                f"{self.name} is closed (close() ended its runners): build a new collector to "
                f"{what}"
            )
        return self.get([getattr(runner, method).remote(*args) for runner in self.actors], what)

    def close(self) -> None:
        """End the actors (their envs are not closed: they die with the process)."""
        import ray

        for runner in self.actors:
            ray.kill(runner)
        self.actors = []


class PooledCollector:
    """What a collector over a :class:`RunnerPool` (its ``_pool``) exposes: its limit, close.

    Attributes:
        timeout_s: Seconds to wait for all the runners' answers of one :meth:`collect`
            together (None: no limit): the pool's, read at each call; setting it (checked as
            the constructor's ``timeout_s``) changes the next calls' limit.
    """

    _pool: RunnerPool

    @property
    def timeout_s(self) -> float | None:
        """The runners' limit per call (seconds, None: none), the pool's own."""
        return self._pool.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float | None) -> None:
        self._pool.timeout_s = check_timeout(value, self._pool.name)

    def close(self) -> None:
        """End the runners' actors (their envs are not closed: they die with the process)."""
        self._pool.close()


@dataclass(frozen=True)
class RunnerPlan:
    """The checked copy split of a collector on runners (:func:`plan_runners`).

    Attributes:
        fns: One env function per copy, in copy order.
        copies_per_runner: Copies per runner (runner ``r`` holds copies ``r * k ... (r + 1) *
            k - 1``).
        copy_seeds: Each copy's first-reset seed (None: no seed).
        runner_seeds: Each runner's acting seed (None: no seeding).
        timeout_s: Seconds for all the runners' answers of one call (None: no limit).
    """

    fns: list[Callable[[], Any]]
    copies_per_runner: int
    copy_seeds: list[int | None]
    runner_seeds: list[int | None]
    timeout_s: float | None

    def block(self, r: int) -> tuple[list[Callable[[], Any]], list[int | None]]:
        """Runner ``r``'s env functions and their seeds."""
        k = self.copies_per_runner
        return self.fns[r * k : (r + 1) * k], self.copy_seeds[r * k : (r + 1) * k]


def plan_runners(
    name: str,
    *,
    env_fns: Sequence[Callable[[], Any]] | None,
    env_fn: Callable[[], Any] | None,
    n_runners: int,
    copies_per_runner: int | None,
    seeds: Any,
    acting_seeds: Any,
    seed_model: Any,
    num_cpus: float,
    timeout_s: Any,
) -> RunnerPlan:
    """Check a collector's runner arguments (before any runner is built) and split the copies.

    Args:
        name: The collector, for the messages.
        env_fns: One function per copy, or None (:func:`split_copies`).
        env_fn: Instead of ``env_fns``: one function for every copy, or None.
        copies_per_runner: Copies per runner, or None (:func:`split_copies`'s default).
        n_runners: The runners (a count >= 1).
        seeds: Each copy's first-reset seed (:func:`copy_seeds`).
        acting_seeds: Each runner's acting seed (:func:`runner_seeds`; ``seed_model``'s
            ``seed + r`` when None).
        seed_model: The model whose ``seed`` the default acting seeds count from.
        num_cpus: CPUs each runner reserves (a number >= 0).
        timeout_s: :func:`check_timeout`'s.

    Returns:
        The plan (:class:`RunnerPlan`).

    Raises:
        TypeError, ValueError: what :func:`rlightning.rules.check_count` (``n_runners``,
            ``num_cpus``), :func:`split_copies`, :func:`copy_seeds`, :func:`runner_seeds` and
            :func:`check_timeout` raise.
        TypeError: an env function Ray cannot pickle (:func:`check_picklable`, named by copy
            and runner).
    """
    check_count(n_runners, f"{name} n_runners", minimum=1)
    check_count(num_cpus, f"{name} num_cpus", minimum=0, integer=False)
    fns, k = split_copies(name, env_fns, env_fn, n_runners, copies_per_runner)
    seen: set[int] = set()
    for c, fn in enumerate(fns):  # before any runner is built (Ray's own error names no copy)
        if id(fn) not in seen:
            seen.add(id(fn))
            check_picklable(
                fn,
                f"the env function of copy {c} (runner {c // k})",
                name,
                "give a module-level function or a functools.partial of one",
            )
    return RunnerPlan(
        fns=fns,
        copies_per_runner=k,
        copy_seeds=copy_seeds(seeds, len(fns), name),
        runner_seeds=runner_seeds(seed_model, acting_seeds, n_runners, name),
        timeout_s=check_timeout(timeout_s, name),
    )


def runner_columns(name: str, model: Any, n_runners: int, whose: str = "the model's") -> int:
    """Each runner's share of ``model``'s buffer columns (its replica's ``n_envs``).

    Raises:
        ValueError: ``model.n_envs`` is not a multiple of ``n_runners`` (``whose`` model named).
    """
    n_envs = int(model.n_envs)
    if n_envs % n_runners:
        raise ValueError(
            f"{name}: {whose} n_envs={n_envs} buffer columns cannot be split into "
            f"{n_runners} runners of equal columns: build the model with a multiple of "
            "n_runners slots"
        )
    return n_envs // n_runners


def merge_returns(per_runner: Iterable[Mapping[Any, Sequence[float]]]) -> dict[Any, deque[float]]:
    """Per agent id, the runners' recorded episode returns together, runner after runner."""
    merged: dict[Any, deque[float]] = {}
    for returns_of in per_runner:
        for agent, returns in returns_of.items():
            merged.setdefault(agent, deque()).extend(returns)
    return merged


def replica_spec(model: Any) -> tuple[type, bytes, tuple[Any, Any] | None]:
    """What a runner loads a replica of ``model`` from: its class, its save, its image spaces.

    Returns:
        ``(type(model), saved_model(model), image_spaces)``; ``image_spaces`` is the raw
        (pre-``VecTransposeImage``) observation space and the action space when SB3 wrapped
        the learner's env in ``VecTransposeImage`` (:func:`rlightning_sb3.image_transpose`),
        else None (see :func:`load_replica`).
    """
    from rlightning_sb3 import image_transpose

    transpose = image_transpose(model)  # the replicas transpose images as the learner's env
    image_spaces = None if transpose is None else (transpose.raw_space, model.action_space)
    return type(model), saved_model(model), image_spaces


def load_replica(
    model_class: Any,
    saved: bytes,
    n_columns: int,
    image_spaces: tuple[Any, Any] | None,
    device: str,
) -> Any:
    """A replica of the learner's model with ``n_columns`` buffer columns (in a runner).

    SB3's own ``model_class.load`` of the learner's save, ``n_envs=n_columns`` (``load``'s
    kwargs override the saved attributes before ``_setup_model`` builds the buffer); with
    ``image_spaces``, over :func:`rlightning_pettingzoo.replica_slots` of them, which SB3's
    ``load`` wraps in ``VecTransposeImage`` as it wrapped the learner's env.

    Raises:
        What ``model_class.load`` raises.
    """
    from rlightning_pettingzoo.remote import replica_slots

    env = None if image_spaces is None else replica_slots(*image_spaces, n_columns)
    return model_class.load(io.BytesIO(saved), env=env, device=device, n_envs=n_columns)


def replay_replica_spec(model: Any) -> tuple[type, bytes, tuple[Any, Any], Any]:
    """What a runner loads an off-policy replica of ``model`` from (:func:`load_replay_replica`).

    Returns:
        ``(type(model), saved_model(model), (raw_observation_space, action_space), noise)``:
        the raw observation space is the one before SB3's ``VecTransposeImage``
        (:func:`rlightning_sb3.image_transpose`), else ``model.observation_space``; ``noise``
        the learner's base action noise (:func:`rlightning_pettingzoo.replica_noise`; None
        without one), sent apart from the save (SB3's load drops a noise it cannot unpickle
        with only a warning).
    """
    from rlightning_pettingzoo.remote_replay import replica_noise
    from rlightning_sb3 import image_transpose

    transpose = image_transpose(model)  # the replicas transpose images as the learner's env
    raw = model.observation_space if transpose is None else transpose.raw_space
    return type(model), saved_model(model), (raw, model.action_space), replica_noise(model)


def load_replay_replica(
    model_class: Any,
    saved: bytes,
    n_columns: int,
    spaces: tuple[Any, Any],
    device: str,
    noise: Any = None,
) -> Any:
    """An off-policy replica of the learner's model with ``n_columns`` columns, started.

    SB3's ``model_class.load`` of the learner's save over a never-stepped ``DummyVecEnv`` of
    ``n_columns`` slots of the learner's raw spaces (:func:`rlightning_pettingzoo.replica_slots`;
    SB3 wraps it in ``VecTransposeImage`` where it wrapped the learner's), with
    ``n_envs=n_columns``, a buffer of one row (``buffer_size=n_columns``: never written), no
    tensorboard log and ``verbose=0``; its ``action_noise`` set to ``noise`` (whatever the load
    made of the saved one); then :func:`rlightning_sb3.start_training` (the in-process
    collectors run only on a started model; the budget and counters it sets are replaced by
    each recording's :class:`rlightning_sb3.ActingState`).

    Args:
        model_class: The learner's model class (``DQN``, ``SAC``, ``TD3``).
        saved: The learner's model as SB3's ``model.save`` wrote it (bytes).
        n_columns: The runner's share of the learner's buffer columns (the replica's
            ``n_envs``).
        spaces: The learner's raw observation space and action space
            (:func:`replay_replica_spec`).
        device: The replica's torch device.
        noise: The learner's base action noise (:func:`replay_replica_spec`), or None.

    Returns:
        The replica (its global-seed draws made by SB3's load: reseed after).

    Raises:
        What ``model_class.load`` and ``start_training`` raise.
    """
    from rlightning_pettingzoo.remote import replica_slots
    from rlightning_sb3 import start_training

    # SB3's load: kwargs override the saved attributes before _setup_model builds the buffer
    model = model_class.load(
        io.BytesIO(saved),
        env=replica_slots(*spaces, n_columns),
        device=device,
        n_envs=n_columns,
        buffer_size=n_columns,
        tensorboard_log=None,
        verbose=0,
    )
    model.action_noise = noise  # the learner's, whatever load made of the saved one
    start_training(model, 1, log_interval=None)
    return model


def replica_counters(model: Any) -> tuple[int, float | None]:
    """A replica's ``num_timesteps`` and ``exploration_rate`` (None without one) now."""
    rate = getattr(model, "exploration_rate", None)
    return int(model.num_timesteps), None if rate is None else float(rate)


def group_runner_pool(
    name: str,
    models: Mapping[str, Any],
    group_of: Any,
    runner_class: type,
    replica: Callable[[Any, int], tuple[Any, ...]],
    *,
    env_fns: Sequence[Callable[[], Any]] | None,
    env_fn: Callable[[], Any] | None,
    n_runners: int,
    copies_per_runner: int | None,
    seeds: Any,
    acting_seeds: Any,
    num_cpus: float,
    device: str,
    timeout_s: Any,
    options: Any = None,
) -> tuple[RunnerPool, RunnerPlan]:
    """Check a group collector's runner arguments, then build its runners (a model per group).

    What the group collectors on runners (``RayGroupRolloutCollector``,
    ``RayGroupReplayCollector``) share, after their own model checks: ``group_of`` a mapping or
    a function, :func:`plan_runners` (the first group's model seeds the default acting seeds),
    each group's columns per runner (:func:`runner_columns`), ``group_of`` picklable, Ray
    initialised; then one ``ray.put`` of every group's replica spec and the pool, runner ``r``
    built as ``runner_class(specs, group_of, env_fns_r, seeds_r, acting_seed_r, device,
    "pz-runner-<r>")``, and ``options`` after them where given.

    Args:
        name: The collector, for the messages.
        models: Group name -> the learner's model, in acting order (already checked).
        group_of: Agent id -> group name, a mapping or a function.
        runner_class: The runners' class (:class:`RunnerPool`'s ``actor_class``).
        replica: ``(model, n_columns) -> spec``: what a runner loads the group's replica from.
        env_fns: :func:`plan_runners`'s.
        env_fn: :func:`plan_runners`'s.
        n_runners: :func:`plan_runners`'s.
        copies_per_runner: :func:`plan_runners`'s.
        seeds: :func:`plan_runners`'s.
        acting_seeds: :func:`plan_runners`'s (None: the first group model's ``seed + r``).
        num_cpus: :func:`plan_runners`'s.
        device: The replicas' torch device.
        timeout_s: :func:`plan_runners`'s.
        options: What every runner is also given, as its last argument (one ``ray.put``; the
            AEC group collector's opponents, ``pz_aec._travelling``); None: nothing more.

    Returns:
        ``(pool, plan)``.

    Raises:
        TypeError: ``group_of`` is not a mapping or a callable, or is not picklable; what
            :func:`plan_runners` raises.
        ValueError: a group model's ``n_envs`` is not a multiple of ``n_runners`` (named by
            group); what :func:`plan_runners` raises.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained).
    """
    import ray

    if not (isinstance(group_of, Mapping) or callable(group_of)):
        raise TypeError(
            f"{name}: group_of must map agent ids to group names (a mapping or a "
            f"function), got {type(group_of).__name__} {group_of!r}"
        )
    plan = plan_runners(
        name,
        env_fns=env_fns,
        env_fn=env_fn,
        n_runners=n_runners,
        copies_per_runner=copies_per_runner,
        seeds=seeds,
        acting_seeds=acting_seeds,
        seed_model=next(iter(models.values())),
        num_cpus=num_cpus,
        timeout_s=timeout_s,
    )
    columns = {
        group: runner_columns(name, model, n_runners, f"the model of group {group!r} has")
        for group, model in models.items()
    }
    check_picklable(group_of, "group_of", name, "give a dict or a module-level function")
    if not ray.is_initialized():
        raise RuntimeError(f"{name} needs Ray: call ray.init(...) first")
    specs = {group: replica(model, columns[group]) for group, model in models.items()}
    blob = ray.put(specs)  # once for all runners (a top-level argument: Ray resolves it)
    extra = () if options is None else (ray.put(options),)
    pool = RunnerPool(
        name,
        runner_class,
        [
            (blob, group_of, *plan.block(r), plan.runner_seeds[r], device, f"pz-runner-{r}", *extra)
            for r in range(n_runners)
        ],
        num_cpus=num_cpus,
        timeout_s=plan.timeout_s,
    )
    return pool, plan
