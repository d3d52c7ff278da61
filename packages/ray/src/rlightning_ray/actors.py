"""Start the actors with Ray's fault tolerance: restarts for the actors, retries for their calls.

* The server restarts up to ``max_restarts`` times; a runner's ``act`` call that was in flight
  when it died is retried on the new server (``max_task_retries``), which reads the newest
  weights from the :class:`~rlightning_ray.WeightsRegistry`. The runners resume, but the acting
  state the server held (counters, exploration, noise) is lost: a
  :class:`~rlightning_ray.Collector` sees the server's new incarnation and refuses the call.
* A runner restarts up to ``max_restarts`` times; a ``sample`` call in flight when it died is
  retried on the new runner (built and reset by its constructor, fresh episodes), so the collector
  gets a complete fragment of new episodes for those envs, marked ``restarted``. What the dead
  runner had stepped since its last delivered fragment is dropped: it never reaches a buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlightning.rules import check_count
from rlightning_ray.runner import EnvRunner, check_pipeline
from rlightning_ray.server import BatchPolicy, PolicyServer
from rlightning_ray.weights import WeightsRegistry

__all__ = ["UnschedulableWarning", "start_runners", "start_server"]


def start_server(
    policy_factory: Callable[[], BatchPolicy],
    *,
    max_batch: int = 256,
    max_wait_us: int = 1000,
    order: Sequence[str] | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    resources: dict[str, float] | None = None,
    max_restarts: int = -1,
) -> tuple[Any, Any]:
    """Start a :class:`~rlightning_ray.PolicyServer` actor and its weights registry.

    Args:
        policy_factory: Builds the policy in the server's process.
        max_batch: See :class:`~rlightning_ray.PolicyServer`.
        max_wait_us: See :class:`~rlightning_ray.PolicyServer`.
        order: See :class:`~rlightning_ray.PolicyServer` (the deterministic mode).
        num_cpus: CPUs the server reserves.
        num_gpus: GPUs the server reserves (1 places it on a GPU node; the policy must then put
            its model there, e.g. ``PPO(..., device="cuda")``).
        resources: Custom resources it needs (``{"policy_node": 1}`` pins it to nodes having it).
        max_restarts: Ray's ``max_restarts`` (-1: always restart); its calls are retried as often.

    Returns:
        ``(server, registry)`` actor handles.

    Raises:
        TypeError: ``max_batch`` or ``max_wait_us`` is not an int (a bool, float or str
            included), or ``num_cpus``/``num_gpus`` not a number
            (:func:`rlightning.rules.check_count`).
        ValueError: ``max_batch`` < 1, ``max_wait_us`` < 0, or ``num_cpus``/``num_gpus``
            negative or NaN.
    """
    import ray

    check_count(max_batch, "start_server max_batch", minimum=1)
    check_count(max_wait_us, "start_server max_wait_us", minimum=0)
    check_count(num_cpus, "start_server num_cpus", minimum=0, integer=False)
    check_count(num_gpus, "start_server num_gpus", minimum=0, integer=False)

    registry = ray.remote(WeightsRegistry).options(num_cpus=0).remote()
    server = (
        ray.remote(PolicyServer)
        .options(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            resources=resources or {},
            max_restarts=max_restarts,
            max_task_retries=max_restarts,
        )
        .remote(
            policy_factory,
            max_batch=max_batch,
            max_wait_us=max_wait_us,
            order=order,
            registry=registry,
        )
    )
    return server, registry


def start_runners(
    env_fn: Callable[[], Any] | Sequence[Callable[[], Any]],
    server: Any = None,
    *,
    n_runners: int,
    envs_per_runner: int,
    seed: int | None = None,
    num_cpus: float = 1,
    resources: dict[str, float] | None = None,
    max_restarts: int = -1,
    runner_class: type = EnvRunner,
    env_group: Callable[[Sequence[Callable[[], Any]]], Any] | None = None,
    policy: Callable[[], Any] | Sequence[Callable[[], Any]] | None = None,
    pipeline: bool = False,
) -> list[Any]:
    """Start ``n_runners`` :class:`~rlightning_ray.EnvRunner` actors of ``envs_per_runner`` envs.

    Runner ``r`` is named ``f"runner-{r}"`` and hosts the envs ``env-{r * k}`` to
    ``env-{r * k + k - 1}``; env number ``i`` (counting over all runners) is seeded with
    ``seed + i``, as ``make_vec_env(..., seed=seed)`` seeds its ``i``-th env (gymnasium envs:
    its first reset and its action space).

    Two modes (docs/ray.md, "Local or server mode"): with ``server``, each step's observations
    go to that :class:`~rlightning_ray.PolicyServer`; with ``policy`` (the local mode,
    :mod:`rlightning_ray.local`), each runner builds its own policy replica in its process and
    acts with it, loading newer weights between fragments from one
    :class:`~rlightning_ray.WeightsRegistry` started here, which
    :meth:`Collector.publish <rlightning_ray.Collector.publish>` publishes to.

    Args:
        env_fn: Returns a fresh ``gymnasium.Env`` (called once per env, in the runner), or a
            sequence of ``n_runners * envs_per_runner`` such callables, one per env in env order.
        server: The policy server handle (server mode), or None with ``policy``.
        n_runners: Number of runners, >= 1.
        envs_per_runner: Envs per runner (``k``), >= 1.
        seed: Base seed (None: unseeded).
        num_cpus: CPUs each runner reserves.
        resources: Custom resources each runner needs (``{"env_node": 0.1}`` places runners on
            the nodes that have it).
        max_restarts: Ray's ``max_restarts`` (-1: always); ``sample`` calls are retried as often.
        runner_class: :class:`~rlightning_ray.EnvRunner`, or
            :class:`rlightning_ray.pettingzoo.ParallelEnvRunner` for PettingZoo parallel envs
            (an ``EnvRunner`` whose default group is ``rlightning_pettingzoo.ParallelEnvGroup``).
        env_group: Builds each runner's :class:`~rlightning_ray.EnvGroup` from its env
            callables (None: the runner class's ``default_env_group``).
        policy: The local mode: a factory of the :class:`~rlightning_ray.BatchPolicy` each
            runner acts with (e.g. ``partial(rlightning_ray.sb3.SB3BatchPolicy, make_model,
            seed=s)``, whose model is built for ``envs_per_runner`` envs), or one factory per
            runner (distinct seeds: a seeded factory seeds every runner's replica alike).
        pipeline: The pipelined server mode (docs/ray.md, "Pipelined server mode"): each
            runner splits its envs in two halves (the first ``k - k // 2``, then the last
            ``k // 2``; every env keeps its seed) that alternate, one half stepping while the
            other's request is in the server; each runner's ``sample`` returns one fragment per
            half and :class:`~rlightning_ray.Collector` returns them in env order. Needs a
            server with dynamic batching (not the deterministic ``order=``), gymnasium runners
            (:class:`~rlightning_ray.EnvRunner`) and ``envs_per_runner >= 2``.

    Returns:
        The runner handles, in runner order.

    Raises:
        ValueError: ``n_runners`` or ``envs_per_runner`` < 1, a sequence ``env_fn`` (or
            ``policy``) of another length than ``n_runners * envs_per_runner`` (``n_runners``),
            or both or neither of ``server`` and ``policy``; ``pipeline=True`` with
            ``envs_per_runner`` < 2, in the local mode, with a ``runner_class`` other than
            :class:`~rlightning_ray.EnvRunner`, or with a server in the deterministic mode
            (``order=``: its batches need every runner's same step, which one half cannot
            reach while the other half's request waits).
        TypeError: ``n_runners`` or ``envs_per_runner`` is not an int (a bool, float or str
            included; :func:`rlightning.rules.check_count`), ``num_cpus`` not a number, or
            ``pipeline`` not a bool.
    """
    import ray

    check_count(n_runners, "start_runners n_runners", minimum=1)
    check_count(envs_per_runner, "start_runners envs_per_runner", minimum=1)
    check_count(num_cpus, "start_runners num_cpus", minimum=0, integer=False)
    if (server is None) == (policy is None):
        raise ValueError(
            "start_runners needs a server (server mode) or a policy factory (local mode), "
            f"exactly one; got server={server!r} and policy={policy!r}"
        )
    pipeline = check_pipeline(
        pipeline, envs_per_runner, local=policy is not None, subject="start_runners"
    )
    if pipeline and runner_class is not EnvRunner:
        raise ValueError(
            f"start_runners: pipeline=True is for gymnasium runners (runner_class=EnvRunner), "
            f"got runner_class={runner_class.__name__}"
        )
    if pipeline:
        order = ray.get(server.info.remote()).get("order")
        if order is not None:
            raise ValueError(
                f"start_runners: pipeline=True needs a server with dynamic batching, but the "
                f"server is in the deterministic mode (order={order}): each of its batches holds "
                f"the same step of every runner's envs, which one half cannot reach while the "
                f"other half's request waits; start the server without order= (the buffers are "
                f"then not SB3's array for array where the policy samples: docs/ray.md)"
            )
    factories: list[Any] = (
        [None] * n_runners
        if policy is None
        else list(policy)
        if isinstance(policy, Sequence)
        else [policy] * n_runners
    )
    if len(factories) != n_runners:
        raise ValueError(
            f"policy holds {len(factories)} factories for {n_runners} runners: give one "
            "factory, or one per runner"
        )
    total = n_runners * envs_per_runner
    fns = list(env_fn) if isinstance(env_fn, Sequence) else [env_fn] * total
    if len(fns) != total:
        raise ValueError(
            f"env_fn holds {len(fns)} callables for {n_runners} runners x {envs_per_runner} envs"
            f" = {total} envs: give one callable, or one per env"
        )
    registry = None
    if policy is not None:
        registry = ray.remote(WeightsRegistry).options(num_cpus=0).remote()
    _warn_if_unschedulable(ray, server, n_runners, num_cpus)
    actor: Any = ray.remote(runner_class).options(
        num_cpus=num_cpus,
        resources=resources or {},
        max_restarts=max_restarts,
        max_task_retries=max_restarts,
    )
    runners = []
    for r in range(n_runners):
        first = r * envs_per_runner
        indices = range(first, first + envs_per_runner)
        runners.append(
            actor.remote(
                f"runner-{r}",
                fns[first : first + envs_per_runner],
                server,
                env_ids=[f"env-{i}" for i in indices],
                seeds=None if seed is None else [seed + i for i in indices],
                **({} if env_group is None else {"env_group": env_group}),
                **({} if policy is None else {"policy": factories[r], "registry": registry}),
                **({"pipeline": True} if pipeline else {}),
            )
        )
    return runners


class UnschedulableWarning(UserWarning):
    """The runners :func:`start_runners` is asked for need more CPUs than the cluster has free.

    Ray then leaves the runners it cannot place pending, and a collector waiting for them waits
    forever with no error: lower ``num_cpus`` (a runner mostly waits for the server: 0.5 or less
    per runner is usual on a small machine) or add nodes. Clusters with an autoscaler may grow to
    fit, so this is a warning, not an error.
    """


def _warn_if_unschedulable(ray: Any, server: Any, n_runners: int, num_cpus: float) -> None:
    """Warn :class:`UnschedulableWarning` when ``n_runners * num_cpus`` exceeds the free CPUs.

    Waits up to 30 s for the server to start first, so that its own reservation is counted.

    Args:
        ray: The ``ray`` module.
        server: The policy server handle (None in the local mode).
        n_runners: Runners to start.
        num_cpus: CPUs each reserves.

    Warns:
        UnschedulableWarning: the CPUs free after the server started are fewer than the runners
            need; names both figures.
    """
    import contextlib
    import warnings

    # Not started within 30 s (or failing): judge what is free now.
    with contextlib.suppress(Exception):
        if server is not None:
            ray.get(server.info.remote(), timeout=30)
    free = float(ray.available_resources().get("CPU", 0.0))
    need = n_runners * num_cpus
    if need > free:
        warnings.warn(
            f"start_runners: {n_runners} runners x num_cpus={num_cpus} need {need:g} CPUs, but "
            f"the cluster has {free:g} free (the policy server's reservation already taken): "
            f"the runners Ray cannot place stay pending and a collector waits for them forever; "
            f"pass a smaller num_cpus (e.g. num_cpus={max(free, 0.1) / n_runners:.2g}) or add "
            f"nodes",
            UnschedulableWarning,
            stacklevel=3,
        )
