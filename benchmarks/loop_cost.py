"""Instructions of one training iteration through responses against SB3's own (issue 20).

The issue "Scale-out faster than RLlib" asks that an in-process training iteration through
responses -- ``SB3PolicyAdapter.act`` + ``add_rollout_step`` + ``finish_rollout``, the env steps
included -- costs at most 1.03x the instructions of SB3's ``collect_rollouts`` on the same envs
and model, counted with callgrind at ``n_envs`` 1 and 8.

What is counted. Two PPO models on CartPole-v1, built the same way (``make_vec_env(...,
seed=0)``, ``seed=0``, ``n_steps`` steps per rollout), each prepared as ``learn()`` prepares it:

* ``collect_rollouts``: one iteration of ``OnPolicyAlgorithm.learn``'s loop without ``train()``:
  ``collect_rollouts`` (``n_steps`` env steps, each a forward pass, ``env.step``, the callback,
  ``RolloutBuffer.add``; then ``compute_returns_and_advantage``), then the loop's
  bookkeeping (``iteration += 1``, ``_update_current_progress_remaining``, ``dump_logs`` at
  ``log_interval=1``, which ``finish_rollout`` also does);
* ``rlightning``: the loop of docs/sb3.md "Training": ``n_steps`` times ``act``,
  ``env.step(adapter.env_actions(...))`` and ``add_rollout_step(..., new_observation=...)``,
  then ``finish_rollout``.

After the warm-up (two iterations each, torch's global RNG seeded alike before each) the
worker checks that the two rollout buffers hold the same observations, actions, episode starts
and rewards (exactly) and values (to float tolerance): the two rows count the same work. Regions
are delimited as in :mod:`benchmarks.callgrind` (its markers, its malloc setting); each is
counted twice, and the figure is the mean.

Usage (from the repository root)::

    python -m benchmarks.loop_cost                   # n_envs 1 and 8, 4 iterations of 32 steps
    python -m benchmarks.loop_cost --smoke           # n_envs 1, 1 iteration of 8 steps
    python -m benchmarks.loop_cost --merge benchmarks/results.json   # and re-render the docs

Without valgrind the full mode stops with an error; ``--smoke`` then runs the regions without
counting them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.callgrind import RolloutCost

N_ENVS = (1, 8)
N_STEPS = 32
N_STEPS_SMOKE = 8
ITERATIONS = 4
ITERATIONS_SMOKE = 1
#: The issue's limit: the response loop's instructions over SB3's, as a fraction.
LIMIT = 0.03
IMPLS = RolloutCost.IMPLS


def iterations(n_envs: int, n_steps: int) -> dict[str, Callable[[], None]]:
    """The two training iterations (module docstring), each on a model of its own.

    Args:
        n_envs: Envs of each model's ``make_vec_env`` VecEnv.
        n_steps: The models' ``n_steps`` (steps per rollout).

    Returns:
        ``{"collect_rollouts": ..., "rlightning": ...}``: callables of no argument, each running
        one iteration (and mutating its model, env and buffer).
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

    def model() -> Any:
        env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=0)
        return PPO(
            "MlpPolicy", env, n_steps=n_steps, batch_size=n_steps * n_envs, seed=0, device="cpu"
        )

    total = 10**9
    sb3 = model()
    _total, callback = sb3._setup_learn(total, None)
    callback.on_training_start(locals(), globals())
    iteration = [0]

    def sb3_iteration() -> None:
        sb3.collect_rollouts(sb3.env, callback, sb3.rollout_buffer, n_rollout_steps=n_steps)
        iteration[0] += 1
        sb3._update_current_progress_remaining(sb3.num_timesteps, total)
        sb3.dump_logs(iteration[0])

    ours = model()
    adapter = SB3PolicyAdapter(ours)
    env = ours.get_env()
    env_ids = [f"env-{i}" for i in range(n_envs)]
    state = {"obs": start_training(ours, total)}
    state["starts"] = adapter.load_training_state(env_ids)

    def our_iteration() -> None:
        obs, starts = state["obs"], state["starts"]
        responses: Any = None
        dones: Any = None
        for _ in range(n_steps):
            responses = adapter.act(obs, env_ids, episode_start=starts)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids))
            add_rollout_step(
                ours,
                obs,
                responses,
                rewards,
                dones,
                infos,
                env_ids=env_ids,
                new_observation=new_obs,
            )
            obs, starts = new_obs, dones
        finish_rollout(ours, obs, dones, responses=responses, env_ids=env_ids)
        state["obs"], state["starts"] = obs, dones

    def same_work() -> None:
        import numpy as np

        a, b = sb3.rollout_buffer, ours.rollout_buffer
        for name in ("observations", "actions", "episode_starts", "rewards"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-6)

    our_iteration.same_work = same_work  # type: ignore[attr-defined]
    return {"collect_rollouts": sb3_iteration, "rlightning": our_iteration}


BENCH = RolloutCost(
    module="benchmarks.loop_cost",
    section="loop_cost",
    doc=__doc__ or "",
    iterations=iterations,
    size_arg="n_envs",
    sizes=N_ENVS,
    smoke_sizes=(1,),
    n_steps=N_STEPS,
    n_steps_smoke=N_STEPS_SMOKE,
    calls=ITERATIONS,
    calls_smoke=ITERATIONS_SMOKE,
    units=lambda payload: payload["calls"] * payload["n_steps"],  # env steps
    per_key="ir_per_step",
    ok_extra={"wall_s": None},
    meta_size=False,
    case=lambda n_envs: f"20.loop_n{n_envs}",
    item=20,
    limit=LIMIT,
    target_text=lambda n_envs: (
        "a training iteration through responses <= "
        f"{1 + LIMIT:.2f}x SB3's collect_rollouts, counted with callgrind, at n_envs={n_envs}"
    ),
    intro=lambda meta: (
        f"A training iteration through responses against SB3's own (issue 20), counted with "
        f"callgrind (Python {meta['python']}, {meta['date_utc']}, {meta['mode']} mode): CartPole "
        f"PPO, {meta['iterations']} iterations of {meta['n_steps']} steps, env steps included "
        "(`python -m benchmarks.loop_cost`; what each row runs is in its docstring)."
    ),
    unit_header="instructions per env step",
    missing=(
        "Training iteration (issue 20): not measured in this run (`python -m "
        "benchmarks.loop_cost --merge benchmarks/results.json`, needs valgrind)."
    ),
    smoke_help="n_envs=1, 1 iteration of 8 steps",
)

#: The driver's parts (benchmarks.callgrind.RolloutCost), under the names run.py, report.py
#: and targets.py use.
summarise = BENCH.summarise
measure = BENCH.measure
targets = BENCH.targets
table = BENCH.table
main = BENCH.main


if __name__ == "__main__":
    raise SystemExit(main())
