"""Env actors and a policy actor on Ray, exchanging observations and PolicyResponse objects.

Each env actor (a gymnasium CartPole) sends its observation stamped ``ts_env_sent_ns`` to the
policy actor; the policy actor runs a small torch policy, answers with a ``PolicyResponse``
(``action``, ``log_prob``, ``value`` tensors, a large numpy ``features`` array and a large bfloat16
``hidden`` tensor), stamps it with ``mark_policy_sent()`` and records the env->policy latency in
it; the env actor steps with the action and records the policy->env latency.

The response is larger than Ray's inline limit (100 KiB), so it travels through the shared-memory
object store; rlightning's pickling sends numpy arrays and CPU tensors out of band, so the env
actor's arrays and tensors are views of the object-store buffer, not copies, whether or not
``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS`` is set. Each env actor checks that on its first step
(reading the same object twice gives the very same memory; the arrays are read-only).

Run (from the repository root, with the ``ray`` extra installed)::

    python examples/ray_rollout.py --envs 2 --steps 200
    python examples/ray_rollout.py --smoke      # 2 env actors x 20 steps (used by the tests)

Each env actor prints its report when its rollout ends; the driver prints a line as each one
finishes (``ray.wait``), so a long run shows progress.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import ray
import torch

from rlightning import PolicyResponse

if TYPE_CHECKING:
    from ray.actor import ActorProxy  # what ActorClass.remote() returns, as Ray types it

#: Elements of the large fields (float32 features: 256 KiB; bfloat16 hidden: 128 KiB).
LARGE = 64 * 1024


def _quiet_read_only_tensor_warning() -> None:
    # Tensors rebuilt on Ray's read-only object store memory make torch warn once; we never write
    # into them (clone() first if you need to).
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


class PolicyActor:
    """A categorical MLP policy answering one observation at a time.

    A Ray actor (``ray.remote(num_cpus=0.5)(PolicyActor)`` in :func:`rollout`; a class
    decorator would hide ``.remote`` from type checkers); ``@ray.method`` types its handle's
    ``act.remote(...)`` as an ``ObjectRef[PolicyResponse]``.
    """

    def __init__(self, obs_dim: int, n_actions: int, seed: int = 0) -> None:
        _quiet_read_only_tensor_warning()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, n_actions + 1)
        )

    @ray.method
    def act(self, env_id: str, obs: np.ndarray, ts_env_sent_ns: int) -> PolicyResponse:
        response = PolicyResponse(env_id, ts_env_sent_ns=ts_env_sent_ns)
        env_to_policy_s = response.compute_sent_latency()  # seconds, observation in transit
        with torch.no_grad():
            out = self.net(torch.as_tensor(obs, dtype=torch.float32))
            dist = torch.distributions.Categorical(logits=out[:-1])
            action = dist.sample()
            response.action = action
            response.log_prob = dist.log_prob(action)
            response.value = out[-1]
            response.hidden = torch.randn(LARGE, dtype=torch.bfloat16)
        response.features = np.full(LARGE, float(action), dtype=np.float32)
        response.env_to_policy_s = env_to_policy_s
        return response.mark_policy_sent()


def zero_copy_evidence(ref: Any, response: PolicyResponse) -> dict[str, Any]:
    """Show that ``response`` (from ``ray.get(ref)``) lives in the object store, uncopied.

    Reading the object a second time must give arrays and tensors on the very same memory (a
    deserializer that copied would give fresh memory each time), and the numpy arrays must be
    read-only views of the store.
    """
    again = ray.get(ref)
    return {
        "features_read_only": not response.features.flags.writeable,
        "features_same_memory": response.features.ctypes.data == again.features.ctypes.data,
        "hidden_same_memory": response.hidden.data_ptr() == again.hidden.data_ptr(),
        "hidden_dtype": str(response.hidden.dtype),
    }


class EnvActor:
    """One CartPole env stepping with the policy actor's responses (a Ray actor, as
    :class:`PolicyActor`)."""

    def __init__(self, env_id: str, policy: ActorProxy[PolicyActor], seed: int) -> None:
        _quiet_read_only_tensor_warning()
        self.env_id = env_id
        self.policy = policy
        self.env = gym.make("CartPole-v1")
        self.obs, _ = self.env.reset(seed=seed)

    @ray.method
    def run(self, n_steps: int) -> dict[str, Any]:
        env_to_policy: list[float] = []
        policy_to_env: list[float] = []
        evidence: dict[str, Any] = {}
        episodes = 0
        for step in range(n_steps):
            ref = self.policy.act.remote(self.env_id, self.obs, time.time_ns())
            response = ray.get(ref)
            policy_to_env.append(response.compute_policy_latency())
            env_to_policy.append(response.env_to_policy_s)
            if step == 0:
                evidence = zero_copy_evidence(ref, response)
            assert response.env_id == self.env_id
            self.obs, _, terminated, truncated, _ = self.env.step(int(response.action))
            if terminated or truncated:
                episodes += 1
                self.obs, _ = self.env.reset()
        return {
            "env_id": self.env_id,
            "steps": n_steps,
            "episodes": episodes,
            "env_to_policy_ms": 1e3 * statistics.median(env_to_policy),
            "policy_to_env_ms": 1e3 * statistics.median(policy_to_env),
            "zero_copy": evidence,
        }


def rollout(n_envs: int, n_steps: int) -> list[dict[str, Any]]:
    """Run ``n_envs`` env actors for ``n_steps`` each against one policy actor (Ray must be up)."""
    probe = gym.make("CartPole-v1")
    obs_space, action_space = probe.observation_space, probe.action_space
    assert isinstance(obs_space, gym.spaces.Box)
    assert isinstance(action_space, gym.spaces.Discrete)
    policy = ray.remote(num_cpus=0.5)(PolicyActor).remote(obs_space.shape[0], int(action_space.n))
    env_actor = ray.remote(num_cpus=0.5)(EnvActor)
    envs = [env_actor.remote(f"env-{i}", policy, seed=i) for i in range(n_envs)]
    pending = [env.run.remote(n_steps) for env in envs]
    order = {ref: i for i, ref in enumerate(pending)}
    reports: list[dict[str, Any] | None] = [None] * n_envs
    while pending:  # report each env actor as it finishes: progress on a long run
        done, pending = ray.wait(pending, num_returns=1)
        report = ray.get(done[0])
        reports[order[done[0]]] = report
        print(
            f"{report['env_id']}: {report['steps']} steps, {report['episodes']} episodes, "
            f"median env->policy {report['env_to_policy_ms']:.2f} ms, "
            f"policy->env {report['policy_to_env_ms']:.2f} ms, zero copy {report['zero_copy']}",
            flush=True,
        )
    return [report for report in reports if report is not None]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Ray rollout with PolicyResponse")
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help="2 env actors x 20 steps")
    args = parser.parse_args(argv)
    if args.smoke:
        args.envs, args.steps = 2, 20
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        reports = rollout(args.envs, args.steps)
        print(f"{len(reports)} env actors x {args.steps} steps done")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
