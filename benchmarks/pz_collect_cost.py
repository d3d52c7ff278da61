"""Instructions per agent-step of a shared-PPO rollout: SharedRolloutCollector vs SB3's own.

Issue 19 asks that collecting a shared-policy rollout through
``rlightning_pettingzoo.SharedRolloutCollector`` costs at most 1.1x SB3's ``collect_rollouts``
over a VecEnv of the agents (``benchmarks.agents_vec_env.AgentsVecEnv``, one slot per agent of
each copy: what SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` give SB3),
counted with callgrind, per agent-step.

What is counted. mpe2's ``simple_spread_v3`` (``max_cycles=25``), 8 copies x 3 agents (24 buffer
columns), two PPO models built alike (``seed=0``, ``n_steps`` rows per column), each prepared as
``learn()`` prepares it:

* ``collect_rollouts``: ``model.collect_rollouts`` over ``AgentsVecEnv`` (``n_steps`` forward
  passes over the 24 slots, ``env.step`` of each copy, ``RolloutBuffer.add``, GAE);
* ``rlightning``: ``SharedRolloutCollector(model, [make] * 8, seeds=[0..7]).collect()``: the
  same rollout (every agent stays: one agent per column), every action checked against
  ``env.agents`` and the spaces, the rows through ``add_rollout_step`` and ``finish_rollout``.

After the warm-up (two rollouts each, torch's global RNG seeded alike before each) the worker
checks that the two buffers hold the same observations, actions, episode starts and rewards
(exactly) and values (to float tolerance): both rows count the same work. Regions are delimited
as in :mod:`benchmarks.callgrind`; each is counted twice (two rounds), the figure is the mean.

Usage (from the repository root)::

    python -m benchmarks.pz_collect_cost                  # 2 rollouts of 32 rows, counted
    python -m benchmarks.pz_collect_cost --smoke --native # 1 rollout of 8 rows, not counted
    python -m benchmarks.pz_collect_cost --merge benchmarks/results.json   # and re-render docs

``tox -e bench`` (``benchmarks.run --callgrind``) counts it after :mod:`benchmarks.loop_cost`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.callgrind import RolloutCost

N_COPIES = 8
N_STEPS = 32
N_STEPS_SMOKE = 8
ITERATIONS = 2
ITERATIONS_SMOKE = 1
#: The issue's limit: the collector's instructions over SB3's, as a fraction.
LIMIT = 0.10
IMPLS = RolloutCost.IMPLS
CASE = "19.pz_collect"


def iterations(n_copies: int, n_steps: int) -> dict[str, Callable[[], None]]:
    """The two rollouts (module docstring), each on a PPO model of its own.

    Args:
        n_copies: Env copies (x3 agents = buffer columns).
        n_steps: The models' ``n_steps`` (rows per column).

    Returns:
        ``{"collect_rollouts": ..., "rlightning": ...}``: callables of no argument, each
        collecting one rollout (mutating its model, envs and buffer); ``rlightning`` carries
        ``same_work()``, which raises ``AssertionError`` unless the two buffers agree.
    """
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from benchmarks.agents_vec_env import AgentsVecEnv
    from rlightning_pettingzoo import SharedRolloutCollector
    from rlightning_sb3 import start_training

    try:
        from mpe2 import simple_spread_v3
    except ImportError:  # PettingZoo before MPE moved to mpe2
        from pettingzoo.mpe import simple_spread_v3

    def make() -> Any:
        return simple_spread_v3.parallel_env(max_cycles=25)

    kwargs: dict[str, Any] = {"n_steps": n_steps, "seed": 0, "device": "cpu"}
    total = 10**9
    venv = AgentsVecEnv(make, n_copies)
    sb3 = PPO("MlpPolicy", venv, batch_size=n_steps * venv.num_envs, **kwargs)
    _total, callback = sb3._setup_learn(total, None)
    callback.on_training_start(locals(), globals())

    sb3_env = sb3.env  # the VecEnv learn() steps (venv itself: it is a VecEnv already)
    assert sb3_env is not None

    def sb3_rollout() -> None:
        sb3.collect_rollouts(sb3_env, callback, sb3.rollout_buffer, n_rollout_steps=n_steps)

    import gymnasium as gym

    space = make()
    agent = space.possible_agents[0]

    class Slot(gym.Env[Any, Any]):
        observation_space = space.observation_space(agent)
        action_space = space.action_space(agent)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return np.zeros(self.observation_space.shape or (), np.float32), {}

    ours = PPO(
        "MlpPolicy",
        DummyVecEnv([Slot] * venv.num_envs),
        batch_size=n_steps * venv.num_envs,
        **kwargs,
    )
    start_training(ours, total)
    collector = SharedRolloutCollector(ours, [make] * n_copies, seeds=list(range(n_copies)))

    def our_rollout() -> None:
        collector.collect()

    def same_work() -> None:
        a, b = sb3.rollout_buffer, ours.rollout_buffer
        for name in ("observations", "actions", "episode_starts", "rewards"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-6)

    our_rollout.same_work = same_work  # type: ignore[attr-defined]
    return {"collect_rollouts": sb3_rollout, "rlightning": our_rollout}


BENCH = RolloutCost(
    module="benchmarks.pz_collect_cost",
    section="pz_collect_cost",
    doc=__doc__ or "",
    iterations=iterations,
    size_arg="n_copies",
    sizes=(N_COPIES,),
    smoke_sizes=(N_COPIES,),
    n_steps=N_STEPS,
    n_steps_smoke=N_STEPS_SMOKE,
    calls=ITERATIONS,
    calls_smoke=ITERATIONS_SMOKE,
    units=lambda payload: payload["calls"] * payload["n_steps"] * payload["n_copies"] * 3,
    per_key="ir_per_agent_step",
    ok_extra={},
    meta_size=True,
    case=lambda n_copies: CASE,
    item=19,
    limit=LIMIT,
    target_text=lambda n_copies: (
        f"a shared-PPO rollout through SharedRolloutCollector <= {1 + LIMIT:.1f}x "
        "SB3's collect_rollouts over a VecEnv of the agents, per agent-step, counted with "
        f"callgrind (simple_spread, {n_copies} copies x 3 agents)"
    ),
    intro=lambda meta: (
        "A shared-PPO rollout through `SharedRolloutCollector` against SB3's `collect_rollouts` "
        f"over a VecEnv of the agents (issue 19), counted with callgrind (Python "
        f"{meta['python']}, {meta['date_utc']}, {meta['mode']} mode): simple_spread_v3, "
        f"{meta['n_copies']} copies x 3 agents, {meta['iterations']} rollouts of "
        f"{meta['n_steps']} rows, env steps included (`python -m benchmarks.pz_collect_cost`)."
    ),
    unit_header="instructions per agent-step",
    missing=(
        "Shared-policy rollout (issue 19): not measured in this run (`python -m "
        "benchmarks.pz_collect_cost`, needs valgrind)."
    ),
    smoke_help="1 rollout of 8 rows",
)

#: The driver's parts (benchmarks.callgrind.RolloutCost), under the names run.py, report.py
#: and targets.py use.
summarise = BENCH.summarise
measure = BENCH.measure
targets = BENCH.targets
table = BENCH.table
merge = BENCH.merge
main = BENCH.main


if __name__ == "__main__":
    raise SystemExit(main())
