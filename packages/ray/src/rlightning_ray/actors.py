"""Start the actors with Ray's fault tolerance: restarts for the actors, retries for their calls.

* The server restarts up to ``max_restarts`` times; a runner's ``act`` call that was in flight
  when it died is retried on the new server (``max_task_retries``), which reads the newest
  weights from the :class:`~rlightning_ray.WeightsRegistry`. Runners resume without noticing,
  except for the time lost.
* A runner restarts up to ``max_restarts`` times; a ``sample`` call in flight when it died is
  retried on the new runner (built and reset by its constructor, fresh episodes), so the collector
  gets a complete fragment of new episodes for those envs, marked ``restarted``. What the dead
  runner had stepped since its last delivered fragment is dropped: it never reaches a buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlightning_ray.runner import EnvRunner
from rlightning_ray.server import BatchPolicy, PolicyServer
from rlightning_ray.weights import WeightsRegistry

__all__ = ["start_runners", "start_server"]


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
    """
    import ray

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
    server: Any,
    *,
    n_runners: int,
    envs_per_runner: int,
    seed: int | None = None,
    num_cpus: float = 1,
    resources: dict[str, float] | None = None,
    max_restarts: int = -1,
    runner_class: type = EnvRunner,
) -> list[Any]:
    """Start ``n_runners`` :class:`~rlightning_ray.EnvRunner` actors of ``envs_per_runner`` envs.

    Runner ``r`` is named ``f"runner-{r}"`` and hosts the envs ``env-{r * k}`` to
    ``env-{r * k + k - 1}``; env number ``i`` (counting over all runners) is first reset with
    ``seed + i``, as ``make_vec_env(..., seed=seed)`` seeds its ``i``-th env.

    Args:
        env_fn: Returns a fresh ``gymnasium.Env`` (called once per env, in the runner), or a
            sequence of ``n_runners * envs_per_runner`` such callables, one per env in env order.
        server: The policy server handle.
        n_runners: Number of runners, >= 1.
        envs_per_runner: Envs per runner (``k``), >= 1.
        seed: Base seed (None: unseeded).
        num_cpus: CPUs each runner reserves.
        resources: Custom resources each runner needs (``{"env_node": 0.1}`` places runners on
            the nodes that have it).
        max_restarts: Ray's ``max_restarts`` (-1: always); ``sample`` calls are retried as often.
        runner_class: :class:`~rlightning_ray.EnvRunner`, or
            :class:`rlightning_ray.pettingzoo.ParallelEnvRunner` for PettingZoo parallel envs.

    Returns:
        The runner handles, in runner order.

    Raises:
        ValueError: ``n_runners`` or ``envs_per_runner`` < 1, or a sequence ``env_fn`` of
            another length than ``n_runners * envs_per_runner``.
    """
    import ray

    if n_runners < 1 or envs_per_runner < 1:
        raise ValueError(
            f"n_runners and envs_per_runner must be >= 1, got {n_runners} and {envs_per_runner}"
        )
    total = n_runners * envs_per_runner
    fns = list(env_fn) if isinstance(env_fn, Sequence) else [env_fn] * total
    if len(fns) != total:
        raise ValueError(
            f"env_fn holds {len(fns)} callables for {n_runners} runners x {envs_per_runner} envs"
            f" = {total} envs: give one callable, or one per env"
        )
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
            )
        )
    return runners
