"""Run real PettingZoo parallel environments with every action passing through a response.

Two envs, several episodes each:

* mpe2 ``simple_spread_v3``: per-agent scripted policies through ``respond`` (agent ``i`` heads for
  landmark ``i``), compared with random actions from ``sample_response``;
* butterfly ``pistonball_v6``: 20 pistons, random Box actions from ``sample_response``.

Each step the "env worker" stamps ``ts_env_sent_ns`` when it hands the observations over, the
"policy worker" answers with a ``MultiAgentPolicyResponse`` and ``mark_policy_sent()``, and
``to_parallel_actions`` checks the answer against ``env.agents`` and the action spaces before
``env.step``. Prints per-agent mean returns, steps per second and the env->policy latency.

    python examples/pettingzoo_demo.py            # under a minute (examples/README.md)
    python examples/pettingzoo_demo.py --smoke    # one short episode per env (used by the tests)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from pettingzoo.butterfly import pistonball_v6

from rlightning import MultiAgentPolicyResponse
from rlightning_pettingzoo import respond, sample_response, to_parallel_actions

try:
    from mpe2 import simple_spread_v3
except ImportError:  # PettingZoo before MPE moved to mpe2
    from pettingzoo.mpe import simple_spread_v3

# simple_spread's discrete actions: 0 no-op, 1 left, 2 right, 3 down, 4 up.
# Its observation: own velocity (2), own position (2), landmark offsets (2 per landmark), ...
LANDMARKS_AT = 4


def go_to_landmark(index: int) -> Callable[[np.ndarray], int]:
    """A scripted policy: move along the larger axis of the offset to landmark ``index``."""

    def policy(observation: np.ndarray) -> int:
        dx, dy = observation[LANDMARKS_AT + 2 * index : LANDMARKS_AT + 2 * index + 2]
        if max(abs(dx), abs(dy)) < 0.05:
            return 0
        if abs(dx) >= abs(dy):
            return 2 if dx > 0 else 1
        return 4 if dy > 0 else 3

    return policy


Responder = Callable[[Any, dict[str, Any], dict[str, Any], str], MultiAgentPolicyResponse]


def run(env: Any, respond_fn: Responder, episodes: int, seed: int) -> dict[str, Any]:
    """Run ``episodes`` episodes; every action goes through a MultiAgentPolicyResponse."""
    returns: dict[str, list[float]] = {agent: [] for agent in env.possible_agents}
    latencies: list[float] = []
    steps = 0
    start = time.perf_counter()
    for episode in range(episodes):
        observations, infos = env.reset(seed=seed + episode)
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + episode * 100 + i)
        totals = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            sent_ns = time.time_ns()  # env worker: observations leave now
            response = respond_fn(env, observations, infos, f"env-{episode}")
            response.ts_env_sent_ns = sent_ns
            response.mark_policy_sent()  # policy worker: the answer leaves now
            latencies.append(response.compute_sent_latency())
            observations, rewards, _, _, infos = env.step(to_parallel_actions(response, env))
            for agent, reward in rewards.items():
                totals[agent] += float(reward)
            steps += 1
        for agent, total in totals.items():
            returns[agent].append(total)
    elapsed = time.perf_counter() - start
    return {
        "returns": {agent: float(np.mean(values)) for agent, values in returns.items()},
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "latency_p50_us": float(np.percentile(latencies, 50) * 1e6),
        "latency_p99_us": float(np.percentile(latencies, 99) * 1e6),
    }


def report(title: str, result: dict[str, Any], episodes: int, max_agents: int = 6) -> None:
    print(f"{title}: {episodes} episode(s), {result['steps']} steps", flush=True)
    shown = list(result["returns"].items())
    for agent, mean_return in shown[:max_agents]:
        print(f"  {agent:>10}: mean return {mean_return:9.2f}")
    if len(shown) > max_agents:
        rest = [r for _, r in shown[max_agents:]]
        print(f"  ... {len(rest)} more agents, mean return {np.mean(rest):.2f}")
    print(
        f"  steps/s: {result['steps_per_s']:.0f}   env->policy latency p50 "
        f"{result['latency_p50_us']:.1f} us, p99 {result['latency_p99_us']:.1f} us"
    )


def random_responder(
    env: Any, observations: Any, infos: Any, env_id: str
) -> MultiAgentPolicyResponse:
    return sample_response(env, env_id, observations, infos)


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="one short episode per env")
    args = parser.parse_args(argv)
    episodes = 1 if args.smoke else args.episodes
    spread_cycles = 10 if args.smoke else 25
    piston_cycles = 10 if args.smoke else 125

    spread = simple_spread_v3.parallel_env(max_cycles=spread_cycles)
    policies = {agent: go_to_landmark(i) for i, agent in enumerate(spread.possible_agents)}

    def scripted(env: Any, observations: Any, infos: Any, env_id: str) -> MultiAgentPolicyResponse:
        return respond(env, observations, policies, env_id, infos=infos)

    pistonball = pistonball_v6.parallel_env(n_pistons=20, max_cycles=piston_cycles)
    runs: dict[str, tuple[Any, Responder, int]] = {
        "simple_spread_v3/scripted": (spread, scripted, episodes),
        "simple_spread_v3/random": (spread, random_responder, episodes),
        "pistonball_v6/random": (pistonball, random_responder, min(episodes, 3)),
    }
    results = {}
    for title, (env, responder, n_episodes) in runs.items():  # each reported as it finishes
        results[title] = run(env, responder, n_episodes, args.seed)
        report(title, results[title], n_episodes)
    return results


if __name__ == "__main__":
    main()
