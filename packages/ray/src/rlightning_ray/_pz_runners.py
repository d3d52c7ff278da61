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
from collections.abc import Callable, Sequence
from typing import Any

from rlightning.rules import check_count, check_seeds

__all__ = [
    "RunnerPool",
    "check_timeout",
    "copy_seeds",
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


def runner_seeds(model: Any, acting_seeds: Any, n_runners: int, name: str) -> list[int | None]:
    """Each runner's acting seed: ``acting_seeds`` checked, or ``model.seed + r``, or None.

    Raises:
        TypeError, ValueError: what :func:`rlightning.rules.check_seeds` raises, or
            ``acting_seeds`` is not one per runner.
    """
    if acting_seeds is None:
        base = getattr(model, "seed", None)
        return [None if base is None else int(base) + r for r in range(n_runners)]
    out = check_seeds(acting_seeds, f"{name} acting_seeds")
    if len(out) != n_runners:
        raise ValueError(
            f"{name}: acting_seeds must hold one seed per runner ({n_runners}), got {len(out)}"
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
            RuntimeError: as :meth:`get`.
        """
        return self.get([getattr(runner, method).remote(*args) for runner in self.actors], what)

    def close(self) -> None:
        """End the actors (their envs are not closed: they die with the process)."""
        import ray

        for runner in self.actors:
            ray.kill(runner)
        self.actors = []
