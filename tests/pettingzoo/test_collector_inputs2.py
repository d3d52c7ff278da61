"""The collectors against more inputs found by an adversarial review (each test failed before).

* An agent that ``step()`` reports done but leaves in ``env.agents`` (PettingZoo removes it;
  ``parallel_api_test`` asserts it): refused at that step, naming the agent and the copy, where
  before the next step acted for the dead agent and made up its transition.
* Channel-last image observations with a ``CnnPolicy``: SB3 wraps the model's env in
  ``VecTransposeImage``; the collector now transposes each observation as that wrapper does, so
  the buffer equals what ``learn()`` stores (differential, over the tests' VecEnv of the agents).
  Before, the whole rollout was collected and then refused (a shape error at the fill).
* A group collector with a MaskablePPO group and a Box-action PPO group crashed (a mask was made
  for the Box agent); each row's mask is now stored for the MaskablePPO group's agents only.
* Refusals that came only after a rollout was collected now come before any env step:
  ``update_model`` without ``start_training``; an AEC ``"random"`` opponent on a non-Discrete
  action space and an opponent model that does not fit its agent's spaces are refused at
  construction (a recurrent, RecurrentPPO, opponent, once refused too, is now accepted:
  tests/pettingzoo/test_aec_recurrent_opponents.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import parallel_api_test
from rlightning_test_support import sibling
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from rlightning_pettingzoo import (
    AECRolloutCollector,
    GroupReplayCollector,
    GroupRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)
from rlightning_sb3 import StopTraining, finish_training, start_training

INPUTS = sibling(__file__, "test_collector_inputs.py")
ENVS = sibling(__file__, "collector_envs.py")
PARITY = sibling(__file__, "test_collector_parity.py")
InPlaceParallel, InPlaceTurns, OBS, ACT = (
    INPUTS.InPlaceParallel,
    INPUTS.InPlaceTurns,
    INPUTS.OBS,
    INPUTS.ACT,
)
AgentSlot, Snapshot, FIELDS, AgentsVecEnv = (
    PARITY.AgentSlot,
    PARITY.Snapshot,
    PARITY.FIELDS,
    PARITY.AgentsVecEnv,
)
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


def _slots(obs: spaces.Space[Any], act: spaces.Space[Any], n: int) -> DummyVecEnv:
    return DummyVecEnv([lambda: AgentSlot(obs, act)] * n)


class Zombie(InPlaceParallel):  # type: ignore[misc, valid-type]
    """Reports ``a1`` done at step 2 but keeps it in ``agents`` (breaks PettingZoo's contract)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "zombie_v0"}

    def __init__(self, flag: str = "terminated") -> None:
        super().__init__()
        self.flag = flag

    def step(self, actions: dict[str, Any]) -> Any:
        out = super().step(actions)
        if self.t == 2:
            (out[2] if self.flag == "terminated" else out[3])["a1"] = True
        return out


def test_pettingzoo_own_api_test_rejects_the_zombie_env() -> None:
    with pytest.raises(AssertionError, match=r"\['a0', 'a1'\] != \{'a0'\}"):
        parallel_api_test(Zombie(), num_cycles=5)


@pytest.mark.parametrize("flag", ["terminated", "truncated"])
@pytest.mark.parametrize("kind", ["rollout", "replay", "group-rollout", "group-replay"])
def test_an_agent_reported_done_but_left_in_agents_is_refused(kind: str, flag: str) -> None:
    def make() -> Zombie:
        return Zombie(flag)

    collector: Any
    if kind in ("rollout", "group-rollout"):
        model: Any = PPO("MlpPolicy", _slots(OBS, ACT, 2), n_steps=8, batch_size=16, device="cpu")
        if kind == "rollout":
            collector = SharedRolloutCollector(model, [InPlaceParallel, make])
        else:
            collector = GroupRolloutCollector(
                {"all": model}, [InPlaceParallel, make], group_of=lambda agent: "all"
            )
    else:
        model = DQN("MlpPolicy", _slots(OBS, ACT, 2), learning_starts=10, device="cpu")
        start_training(model, 1000)
        if kind == "replay":
            collector = SharedReplayCollector(model, [InPlaceParallel, make])
        else:
            collector = GroupReplayCollector(
                {"all": model}, [InPlaceParallel, make], group_of=lambda agent: "all"
            )
    match = (
        rf"agent 'a1' of zombie_v0 \(copy 1\) was reported {flag} by step\(\) but is still in "
        r"env.agents"
    )
    kwargs = {"update_model": False} if kind in ("rollout", "group-rollout") else {}
    with pytest.raises(ValueError, match=match):
        collector.collect(**kwargs)
    assert collector.envs[1].t == 2  # refused at that very step
    assert collector.envs[0].t == 2


IMAGE, ImageParallel = ENVS.IMAGE, ENVS.ImageParallel


def test_a_cnn_policy_buffer_equals_learn_over_a_vec_env_of_the_agents() -> None:
    n_copies, n_steps = 2, 8
    ppo: dict[str, Any] = {
        "n_steps": n_steps,
        "batch_size": 16,
        "n_epochs": 1,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"features_extractor_kwargs": {"features_dim": 8}, "net_arch": [8]},
    }
    venv = AgentsVecEnv(ImageParallel, n_copies)
    n_columns = venv.num_envs
    reference = PPO("CnnPolicy", venv, **ppo)
    assert isinstance(reference.get_env(), VecTransposeImage)  # SB3 wrapped it
    snapshots = Snapshot()
    reference.learn(total_timesteps=2 * n_steps * n_columns, callback=snapshots)
    assert len(snapshots.rollouts) == 2

    model = PPO("CnnPolicy", _slots(IMAGE, ACT, n_columns), **ppo)
    assert model.observation_space.shape == (3, 36, 36)
    start_training(model, 2 * n_steps * n_columns)
    collector = SharedRolloutCollector(model, [ImageParallel] * n_copies, seeds=[0, 1])
    ours = []
    for _ in range(2):
        collector.collect()
        ours.append({name: getattr(model.rollout_buffer, name).copy() for name in FIELDS})
        model.train()
    finish_training(model)
    for t, (theirs, mine) in enumerate(zip(snapshots.rollouts, ours, strict=True)):
        for name in FIELDS:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=f"rollout {t} {name}")
    # the rows are the env's images, transposed as VecTransposeImage.transpose_image does
    first = ImageParallel().reset()[0]
    np.testing.assert_array_equal(
        ours[0]["observations"][0, 1], VecTransposeImage.transpose_image(first["a1"])
    )


def test_group_and_aec_collectors_transpose_a_cnn_policy_model_observations() -> None:
    kwargs: dict[str, Any] = {
        "n_steps": 4,
        "batch_size": 4,
        "device": "cpu",
        "policy_kwargs": {"features_extractor_kwargs": {"features_dim": 8}, "net_arch": [8]},
    }
    cnn = PPO("CnnPolicy", _slots(IMAGE, ACT, 1), **kwargs)
    other = PPO("CnnPolicy", _slots(IMAGE, ACT, 1), **kwargs)
    collector = GroupRolloutCollector(
        {"a0": cnn, "a1": other}, [ImageParallel], group_of=lambda agent: agent, seeds=[0]
    )
    collector.collect(update_model=False)
    env = ImageParallel()
    observations, _ = env.reset()
    np.testing.assert_array_equal(
        other.rollout_buffer.observations[0, 0],
        VecTransposeImage.transpose_image(observations["a1"]),
    )
    aec = PPO("CnnPolicy", _slots(IMAGE, ACT, 1), **kwargs)
    turns = AECRolloutCollector(aec, [ImageTurns], opponents={"p1": "random"}, seeds=[0])
    turns.collect(update_model=False)
    for row, moves in enumerate((0, 2, 4, 6)):  # p0 moves at moves = 0, 2, ...
        np.testing.assert_array_equal(
            aec.rollout_buffer.observations[row, 0],
            VecTransposeImage.transpose_image(ImageTurns.image(moves, 0)),
        )


class ImageTurns(InPlaceTurns):  # type: ignore[misc, valid-type]
    """InPlaceTurns observing 36x36x3 uint8 images of the move count and the player."""

    @staticmethod
    def image(moves: int, k: int) -> np.ndarray:
        return ((ImageParallel._base * (k + 1) + 7 * moves) % 256).astype(np.uint8)

    def observation_space(self, agent: str) -> spaces.Box:
        return IMAGE

    def observe(self, agent: str) -> np.ndarray:
        return self.image(self.moves, self.possible_agents.index(agent))


def _masked_infos(infos: dict[str, Any]) -> dict[str, Any]:
    infos["a0"] = {"action_mask": np.array([1, 1, 0], np.int8)}
    return infos


class MixedParallel(InPlaceParallel):  # type: ignore[misc, valid-type]
    """``a0``: Discrete(3) with a mask in its info (action 2 illegal); ``a1``: Box actions."""

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return ACT if agent == "a0" else BOX

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        observations, infos = super().reset(seed)
        return observations, _masked_infos(infos)

    def step(self, actions: dict[str, Any]) -> Any:
        assert actions["a0"] in (0, 1), actions
        assert BOX.contains(actions["a1"]), actions
        *out, infos = super().step(actions)
        return (*out, _masked_infos(infos))


def test_a_maskable_group_and_a_box_action_group_fill_their_own_buffers() -> None:
    masked = MaskablePPO(
        "MlpPolicy", _slots(OBS, ACT, 2), n_steps=4, batch_size=8, seed=0, device="cpu"
    )
    boxed = PPO("MlpPolicy", _slots(OBS, BOX, 2), n_steps=4, batch_size=8, seed=0, device="cpu")
    collector = GroupRolloutCollector(
        {"m": masked, "c": boxed}, [MixedParallel] * 2, group_of={"a0": "m", "a1": "c"}
    )
    collector.collect(update_model=False)
    # MaskableRolloutBuffer stores each row's mask: a0's, action 2 illegal
    expected = np.broadcast_to(
        np.array([True, True, False]), masked.rollout_buffer.action_masks.shape
    )
    np.testing.assert_array_equal(masked.rollout_buffer.action_masks, expected)
    assert set(np.unique(masked.rollout_buffer.actions)) <= {0.0, 1.0}
    assert boxed.rollout_buffer.actions.shape == (4, 2, 2)
    assert collector.dropped == 0


class CountingParallel(InPlaceParallel):  # type: ignore[misc, valid-type]
    steps = 0

    def step(self, actions: dict[str, Any]) -> Any:
        CountingParallel.steps += 1
        return super().step(actions)


class CountingTurns(InPlaceTurns):  # type: ignore[misc, valid-type]
    steps = 0

    def step(self, action: Any) -> None:
        CountingTurns.steps += 1
        super().step(action)


START = r"the model has no step budget yet: call start_training\(model, total_timesteps\)"


def test_collecting_for_a_model_never_started_is_refused_before_any_step() -> None:
    CountingParallel.steps = CountingTurns.steps = 0
    ppo = PPO("MlpPolicy", _slots(OBS, ACT, 2), n_steps=64, batch_size=16, device="cpu")
    dqn = DQN("MlpPolicy", _slots(OBS, ACT, 2), device="cpu")
    with pytest.raises(ValueError, match=rf"^SharedRolloutCollector: {START}"):
        SharedRolloutCollector(ppo, [CountingParallel]).collect()
    with pytest.raises(ValueError, match=rf"^SharedReplayCollector: {START}"):
        SharedReplayCollector(dqn, [CountingParallel]).collect()
    with pytest.raises(ValueError, match=rf"\(the model of group 'all'\): {START}"):
        GroupRolloutCollector({"all": ppo}, [CountingParallel], group_of=lambda a: "all").collect()
    with pytest.raises(ValueError, match=rf"\(the model of group 'all'\): {START}"):
        GroupReplayCollector({"all": dqn}, [CountingParallel], group_of=lambda a: "all").collect()
    aec = PPO("MlpPolicy", _slots(OBS, ACT, 1), n_steps=64, batch_size=16, device="cpu")
    with pytest.raises(ValueError, match=rf"^AECRolloutCollector: {START}"):
        AECRolloutCollector(aec, [CountingTurns], opponents={"p1": "random"}).collect()
    assert CountingParallel.steps == 0
    assert CountingTurns.steps == 0


class BoxTurns(InPlaceTurns):  # type: ignore[misc, valid-type]
    def action_space(self, agent: str) -> spaces.Space[Any]:
        return BOX if agent == "p1" else ACT


def test_aec_opponents_that_cannot_act_are_refused_at_construction() -> None:
    model = PPO("MlpPolicy", _slots(OBS, ACT, 1), n_steps=4, batch_size=4, device="cpu")
    with pytest.raises(TypeError, match=r"random opponent 'p1' of .* needs a Discrete action"):
        AECRolloutCollector(model, [BoxTurns], opponents={"p1": "random"})
    wide = spaces.Box(-1e6, 1e6, (3,), np.float32)
    misfit = PPO("MlpPolicy", _slots(wide, ACT, 1), n_steps=4, batch_size=4, device="cpu")
    with pytest.raises(ValueError, match=r"^opponents\['p1'\]: .*'p1'"):
        AECRolloutCollector(model, [InPlaceTurns], opponents={"p1": misfit})


def test_a_recurrent_aec_opponent_is_accepted_and_plays() -> None:
    # once refused at construction; its turns are now acted with its own LSTM state
    # (tests/pettingzoo/test_aec_recurrent_opponents.py checks them against its predict loop)
    model = PPO("MlpPolicy", _slots(OBS, ACT, 1), n_steps=4, batch_size=4, device="cpu")
    opponent = RecurrentPPO(
        "MlpLstmPolicy", _slots(OBS, ACT, 1), n_steps=4, batch_size=4, device="cpu"
    )
    collector = AECRolloutCollector(model, [InPlaceTurns], opponents={"p1": opponent})
    segments = collector.collect(update_model=False)
    assert sum(s.stop_row - s.start_row for s in segments) == 4
    assert all(s.agent_id != "p1" for s in segments)


def test_an_aec_model_that_does_not_fit_its_trained_agents_is_refused_at_construction() -> None:
    # before: a Discrete(2) model acted for Discrete(3) seats silently (actions 0 and 1 only)
    narrow = PPO("MlpPolicy", _slots(OBS, spaces.Discrete(2), 1), n_steps=4, device="cpu")
    with pytest.raises(ValueError, match=r"agent 'p0' of inplace_turns_v0 acts in Discrete\(3\)"):
        AECRolloutCollector(narrow, [InPlaceTurns], opponents={"p1": "random"})
    wide = spaces.Box(-1e6, 1e6, (3,), np.float32)
    model = PPO("MlpPolicy", _slots(wide, ACT, 1), n_steps=4, batch_size=4, device="cpu")
    with pytest.raises(ValueError, match=r"'p0'"):
        AECRolloutCollector(model, [InPlaceTurns], opponents={"p1": "random"})


CHANNELS_FIRST = spaces.Box(0, 255, (3, 36, 36), np.uint8)
UNSTORABLE = r"observes Box\(0, 255, \(36, 36, 3\), uint8\), which the model .* acts on but its"


def test_a_channel_first_model_for_channel_last_agents_is_refused_at_construction() -> None:
    # SB3's predict transposes such images (maybe_transpose), but nothing would store them: the
    # buffer refused them after the whole rollout
    kwargs: dict[str, Any] = {
        "n_steps": 4,
        "batch_size": 8,
        "device": "cpu",
        "policy_kwargs": {"features_extractor_kwargs": {"features_dim": 8}, "net_arch": [8]},
    }
    model = PPO("CnnPolicy", _slots(CHANNELS_FIRST, ACT, 2), **kwargs)
    assert not isinstance(model.get_env(), VecTransposeImage)
    with pytest.raises(ValueError, match=rf"^SharedRolloutCollector: agent 'a0' .*{UNSTORABLE}"):
        SharedRolloutCollector(model, [ImageParallel])
    with pytest.raises(
        ValueError, match=rf"\(the model of group 'a1'\): agent 'a1' .*{UNSTORABLE}"
    ):
        GroupRolloutCollector(
            {"a0": PPO("CnnPolicy", _slots(IMAGE, ACT, 1), **kwargs), "a1": model},
            [ImageParallel],
            group_of=lambda agent: agent,
        )
    dqn = DQN("CnnPolicy", _slots(CHANNELS_FIRST, ACT, 2), buffer_size=100, device="cpu")
    with pytest.raises(ValueError, match=rf"^SharedReplayCollector: agent 'a0' .*{UNSTORABLE}"):
        SharedReplayCollector(dqn, [ImageParallel])
    with pytest.raises(ValueError, match=rf"^AECRolloutCollector: agent 'p0' .*{UNSTORABLE}"):
        AECRolloutCollector(model, [ImageTurns], opponents={"p1": "random"})


class StopAtFirstStep(BaseCallback):
    def _on_step(self) -> bool:
        return False


def test_collecting_after_a_callback_stopped_training_is_refused_before_any_step() -> None:
    model = PPO("MlpPolicy", _slots(OBS, ACT, 2), n_steps=64, batch_size=16, device="cpu")
    start_training(model, 10_000, callback=StopAtFirstStep())
    collector = SharedRolloutCollector(model, [CountingParallel])
    CountingParallel.steps = 0
    with pytest.raises(StopTraining, match=r"on_step\(\) returned False"):
        collector.collect()  # the rollout is stepped, then its first row stops training
    assert CountingParallel.steps == 64
    with pytest.raises(StopTraining, match=r"^SharedRolloutCollector: a callback stopped this"):
        collector.collect()
    assert CountingParallel.steps == 64  # before: a second whole rollout, then the refusal
    finish_training(model)


def test_a_cnn_policy_replay_buffer_stores_transposed_observations() -> None:
    model = DQN(
        "CnnPolicy",
        _slots(IMAGE, ACT, 2),
        buffer_size=64,
        learning_starts=100,
        train_freq=3,
        device="cpu",
        policy_kwargs={"features_extractor_kwargs": {"features_dim": 8}, "net_arch": [8]},
    )
    assert isinstance(model.get_env(), VecTransposeImage)
    start_training(model, 100)
    SharedReplayCollector(model, [ImageParallel], seeds=[0]).collect()
    buf = model.replay_buffer
    env = ImageParallel()
    observations, _ = env.reset()
    for t in range(3):  # row t: both agents' transitions from step t (a0 then a1)
        actions = {a: int(buf.actions[t, k, 0]) for k, a in enumerate(env.possible_agents)}
        following = env.step(actions)[0]
        for k, agent in enumerate(env.possible_agents):
            transpose = VecTransposeImage.transpose_image
            np.testing.assert_array_equal(buf.observations[t, k], transpose(observations[agent]))
            np.testing.assert_array_equal(buf.next_observations[t, k], transpose(following[agent]))
        observations = following
