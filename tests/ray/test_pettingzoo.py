"""PettingZoo parallel envs on runners, answered by the shared SB3 policy through the server."""

from __future__ import annotations

import re
from functools import partial
from types import ModuleType

import numpy as np
import pytest
import ray
from stable_baselines3.common.callbacks import BaseCallback

import rlightning_ray
from rlightning import MultiAgentPolicyResponse
from rlightning_pettingzoo import SharedPolicyAdapter
from rlightning_ray.pettingzoo import ParallelEnvRunner, SharedBatchPolicy, collect_shared_rollout
from rlightning_ray.sb3 import policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


def test_agents_that_leave_or_join_are_answered_only_while_live(
    local_ray: None, helpers: ModuleType
) -> None:
    """Only live agents are asked and answered; a shared rollout refuses agents that leave."""
    from pettingzoo.test import parallel_api_test

    parallel_api_test(helpers.dwindle(), num_cycles=12)  # the env follows PettingZoo's API
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, helpers.dwindle_ppo, helpers.dwindle),
        order=["runner-0"],
        num_cpus=0.25,
    )
    (runner,) = rlightning_ray.start_runners(
        helpers.dwindle,
        server,
        n_runners=1,
        envs_per_runner=2,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(helpers.dwindle_ppo()))
    (frag,) = rlightning_ray.Collector([runner]).sample(8, current_version=0)
    live = [["a0", "a1", "a2"], ["a0", "a1", "a2", "a3"], ["a1", "a2", "a3"]]
    live += [["a1", "a2", "a3"], ["a2", "a3"], ["a2"]]
    expected = live + live[:2]  # the env is reset after step 6 (no agent left)
    for t, (asked, answers) in enumerate(zip(frag.observations, frag.answers, strict=True)):
        for env_asked, answer in zip(asked, answers, strict=True):
            # only live agents are asked and answered, in possible_agents order
            assert list(env_asked) == expected[t], t
            assert list(answer.action) == expected[t], t
            assert all(int(answer.action[a]) in (0, 1) for a in expected[t])
            assert all(env_asked[a][1] == t % 6 for a in expected[t])
    assert frag.resets.tolist() == [[t == 5] * 2 for t in range(8)]
    # step t+1's results (index t) name the agents that acted, with those that left
    assert frag.terminations[1][0] == {"a0": True, "a1": False, "a2": False, "a3": False}
    assert frag.terminations[4][0] == {"a2": False, "a3": True}
    assert frag.terminations[5][1] == {"a2": True}
    # a shared rollout needs every agent at every step (one VecEnv slot per agent): refused
    # before the buffer changes. The model's first run resets the envs (as SB3's _setup_learn
    # resets its VecEnv): the rollout starts a new episode, whose step 1 has a3 joining
    model = helpers.spread_slots_ppo(6)
    start_training(model, 1_000)
    message = "env 'env-0' at step 1 has live agents ['a0', 'a1', 'a2', 'a3']"
    with pytest.raises(ValueError, match=re.escape(message)):
        collect_shared_rollout(model, rlightning_ray.Collector([runner]), ["a0", "a1", "a2"])
    assert model.num_timesteps == 0
    for actor in [server, registry, runner]:
        ray.kill(actor)


def test_a_shared_rollout_has_one_row_per_agent_and_step(
    local_ray: None, helpers: ModuleType
) -> None:
    """Parallel envs answered by the shared policy, and the buffer laid out one row per agent."""
    agents = ["agent_0", "agent_1", "agent_2"]
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, helpers.spread_ppo, helpers.spread),
        max_batch=2,
        max_wait_us=5000,
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        helpers.spread,
        server,
        n_runners=2,
        envs_per_runner=1,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    model = helpers.spread_slots_ppo(6)
    start_training(model, 1_000)
    collector = rlightning_ray.Collector(runners)
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    fragments = collect_shared_rollout(model, collector, agents, current_version=0)
    buf = model.rollout_buffer
    assert buf.full and model.num_timesteps == 8 * 6
    adapter = SharedPolicyAdapter(model)
    for frag in fragments:
        assert frag.resets[:, 0].tolist() == [False] * 5 + [True] + [False] * 2  # max_cycles=6
        for asked, answers in zip(frag.observations, frag.answers, strict=True):
            (answer,) = answers
            assert isinstance(answer, MultiAgentPolicyResponse)
            assert answer.env_id == frag.env_ids[0] and answer.policy_version == 0
            assert list(answer.action) == agents
            for agent in agents:
                assert int(answer.action[agent]) in range(5)
                assert answer.log_prob[agent].dtype == np.float32
            # the server's values are the shared model's on these observations (batched over
            # the same 3 agents here and there, yet computed in another process: tolerance)
            values = adapter.predict_values(helpers.spread(), asked[0])
            np.testing.assert_allclose(
                [answer.value[a] for a in agents], [values[a] for a in agents], rtol=1e-5, atol=1e-6
            )
        assert frag.hops_ns.shape == (8, 4) and (frag.hops_ns >= 0).all()
    assert ray.get(server.info.remote())["batch_rows"]
    for r, frag in enumerate(fragments):
        for t in range(8):
            answer = frag.answers[t][0]
            for j, agent in enumerate(agents):
                slot = 3 * r + j
                np.testing.assert_array_equal(
                    buf.observations[t, slot], frag.observations[t][0][agent]
                )
                np.testing.assert_array_equal(buf.actions[t, slot], answer.buffer_action[agent])
                assert buf.values[t, slot] == answer.value[agent]
                assert buf.log_probs[t, slot] == answer.log_prob[agent]
                assert buf.episode_starts[t, slot] == (t in (0, 6))  # max_cycles=6
                reward = frag.rewards[t][0][agent]
                if t == 5:  # truncated: SB3 adds gamma * V(last observation)
                    final = frag.final_observations[t][0]
                    assert final is not None
                    reward += model.gamma * adapter.predict_values(helpers.spread(), final)[agent]
                # the bootstrap's value comes from a batched forward pass: tolerance
                np.testing.assert_allclose(buf.rewards[t, slot], reward, rtol=1e-5, atol=1e-6)
    assert buf.advantages.any() and buf.returns.any()
    for actor in [server, registry, *runners]:
        ray.kill(actor)


def test_envs_that_reuse_their_arrays_and_put_masks_in_infos(
    local_ray: None, helpers: ModuleType, envs: ModuleType
) -> None:
    # The env writes every observation (and info mask) into the same arrays: every kept one is
    # a copy; the masks found in infos reach the server's MaskablePPO (action t % 3 is illegal
    # and raises) and its buffer.
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, helpers.reusing_ppo, envs.reusing_parallel),
        order=["runner-0"],
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        envs.reusing_parallel,
        server,
        n_runners=1,
        envs_per_runner=2,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    assert ray.get(runners[0].ping.remote(), timeout=60) == "runner-0"
    model = helpers.reusing_slots_ppo(4, 6)
    start_training(model, 1_000)
    collector = rlightning_ray.Collector(runners)
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    (frag,) = collect_shared_rollout(model, collector, ["a0", "a1"], current_version=0)
    buffer = model.rollout_buffer
    for t in range(6):
        legal = [a != t % 4 % 3 for a in range(3)]
        for i in range(2):
            for j, agent in enumerate(["a0", "a1"]):
                np.testing.assert_array_equal(frag.observations[t][i][agent], [j, t % 4])
                np.testing.assert_array_equal(buffer.observations[t, 2 * i + j], [j, t % 4])
                assert int(frag.answers[t][i].action[agent]) != t % 4 % 3
                assert frag.action_masks[t][i][agent].astype(bool).tolist() == legal
                # the MaskablePPO buffer stores the mask each action was drawn under
                assert buffer.action_masks[t, 2 * i + j].astype(bool).tolist() == legal
    final = frag.final_observations[3][0]
    assert final is not None and final["a1"].tolist() == [1, 4]
    assert frag.resets[:, 0].tolist() == [False, False, False, True, False, False]
    for actor in [server, registry, *runners]:
        ray.kill(actor)


class _NewObservations(BaseCallback):
    """Records the ``new_obs`` SB3's callback locals hold at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[np.ndarray] = []

    def _on_step(self) -> bool:
        self.seen.append(np.array(self.locals["new_obs"]))
        return True


def test_runners_with_and_without_info_masks_share_a_batch_and_callbacks_see_new_obs(
    local_ray: None, helpers: ModuleType, envs: ModuleType
) -> None:
    # runner-0's env puts masks in its agents' infos, runner-1's has none: the deterministic
    # mode batches their requests together, and runner-1's agents are unmasked (every action
    # legal, all-True rows in the MaskablePPO buffer) rather than the batch being refused
    env_fns = [envs.reusing_parallel, partial(envs.reusing_parallel, masks=False)]
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, helpers.reusing_ppo, envs.reusing_parallel),
        order=["runner-0", "runner-1"],
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        env_fns,
        server,
        n_runners=2,
        envs_per_runner=1,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    model = helpers.reusing_slots_ppo(4, 6)
    callback = _NewObservations()
    start_training(model, 1_000, callback=callback)
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    masked, unmasked = collect_shared_rollout(
        model, rlightning_ray.Collector(runners), ["a0", "a1"], current_version=0
    )
    assert ray.get(server.info.remote())["batch_rows"] == [2] * 6  # one batch per step
    buffer = model.rollout_buffer
    for t in range(6):
        legal = [a != t % 4 % 3 for a in range(3)]
        assert masked.action_masks[t] is not None and unmasked.action_masks[t] is None
        for j in range(2):
            assert buffer.action_masks[t, j].astype(bool).tolist() == legal
            assert buffer.action_masks[t, 2 + j].all()
    # SB3's callback sees new_obs: what the slots' step returned (the reset where done), and
    # the model keeps the last one as _last_obs, as collect_rollouts leaves it
    assert len(callback.seen) == 6
    for t in range(5):
        np.testing.assert_array_equal(callback.seen[t], buffer.observations[t + 1])
    last = np.stack(
        [frag.last_observations[0][a] for frag in (masked, unmasked) for a in ("a0", "a1")]
    )
    np.testing.assert_array_equal(callback.seen[5], last)
    np.testing.assert_array_equal(model._last_obs, last)
    for actor in [server, registry, *runners]:
        ray.kill(actor)


def test_dict_observations_are_stacked_key_by_key(
    local_ray: None, helpers: ModuleType, envs: ModuleType
) -> None:
    # Dict(observation, action_mask) observations and a shared MaskablePPO("MultiInputPolicy"),
    # the layout docs/pettingzoo.md recommends: the slots' observations (and the terminal and
    # last ones) are stacked key by key, as DummyVecEnv stacks a Dict space.
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, helpers.dict_slots_ppo, envs.dict_parallel), num_cpus=0.25
    )
    (runner,) = rlightning_ray.start_runners(
        envs.dict_parallel,
        server,
        n_runners=1,
        envs_per_runner=1,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    model = helpers.dict_slots_ppo(2, 6)
    start_training(model, 1_000)
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    collect_shared_rollout(
        model, rlightning_ray.Collector([runner], timeout_s=60), ["a0", "a1"], current_version=0
    )
    buffer = model.rollout_buffer
    assert buffer.full
    for t in range(6):
        legal = [a != t % 4 % 3 for a in range(3)]
        for j in range(2):
            np.testing.assert_array_equal(buffer.observations["observation"][t, j], [j, t % 4])
            np.testing.assert_array_equal(buffer.observations["action_mask"][t, j], legal)
            assert buffer.action_masks[t, j].astype(bool).tolist() == legal
    np.testing.assert_array_equal(model._last_obs["observation"], [[0, 2], [1, 2]])
    for actor in [server, registry, runner]:
        ray.kill(actor)
