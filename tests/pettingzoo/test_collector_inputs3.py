"""The collectors against inputs found by a third adversarial review (each test failed before).

* A model whose env SB3 wrapped in ``VecTransposeImage`` (built over channel-last images) with
  agents that observe channel-first images equal to the model's ``observation_space``: the
  collector transposed every observation as that wrapper does (``(C, H, W)`` became
  ``(W, C, H)``) and crashed deep inside SB3 (``Unexpected observation shape (2, 36, 3, 36)``,
  no agent named), where ``learn()`` over a VecEnv of those agents stores them as they are.
  Now refused at construction, by all three rollout collectors, naming the agent and the fix.
* An agent whose observation has not its space's shape at some step: the parallel collectors
  (shared, group, replay) raised numpy's "all input arrays must have the same shape" or SB3's
  "Unexpected observation shape (2, 3)", naming no agent, where ``respond`` and
  ``SharedPolicyAdapter`` name it. Now the agent, its copy (and its group) are named (the replay
  collector names it where it stores it: as a transition's next observation). Likewise the AEC
  collector, and a rollout collector whose agent's final observation is misshapen (never acted
  on: numpy's error at the fill).

Also checked here, and passing before (no finding): a ``MultiInputPolicy`` over Dict observations
with a channel-last image key, written in place by the env, fills the buffer ``learn()`` fills
over a VecEnv of the agents (the image key transposed as ``VecTransposeImage`` does).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from benchmarks.agents_vec_env import AgentsVecEnv
from gymnasium import spaces
from rlightning_test_support import sibling
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from pettingzoo import ParallelEnv
from rlightning_pettingzoo import (
    AECRolloutCollector,
    GroupRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)
from rlightning_sb3 import finish_training, start_training

INPUTS2 = sibling(__file__, "test_collector_inputs2.py")
PARITY = sibling(__file__, "test_collector_parity.py")
INPUTS = sibling(__file__, "test_collector_inputs.py")
InPlaceParallel, InPlaceTurns, OBS = INPUTS.InPlaceParallel, INPUTS.InPlaceTurns, INPUTS.OBS
IMAGE, ACT, ImageParallel, ImageTurns, slots = (
    INPUTS2.IMAGE,
    INPUTS2.ACT,
    INPUTS2.ImageParallel,
    INPUTS2.ImageTurns,
    INPUTS2._slots,
)
CHANNELS_FIRST = spaces.Box(0, 255, (IMAGE.shape[2], *IMAGE.shape[:2]), np.uint8)


class ChannelsFirstParallel(ImageParallel):  # type: ignore[misc, valid-type]
    """``ImageParallel``'s images, channel first (what SB3 stores of them without a transpose)."""

    def observation_space(self, agent: str) -> spaces.Box:
        return CHANNELS_FIRST

    def _observe(self, actions: dict[str, Any]) -> dict[str, np.ndarray]:
        return {
            agent: np.ascontiguousarray(np.transpose(image, (2, 0, 1)))
            for agent, image in super()._observe(actions).items()
        }


class ChannelsFirstTurns(ImageTurns):  # type: ignore[misc, valid-type]
    """``ImageTurns``' images, channel first."""

    def observation_space(self, agent: str) -> spaces.Box:
        return CHANNELS_FIRST

    def observe(self, agent: str) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(super().observe(agent), (2, 0, 1)))


def test_a_transposing_model_with_channel_first_agents_is_refused_at_construction() -> None:
    kwargs: dict[str, Any] = {
        "n_steps": 4,
        "batch_size": 8,
        "device": "cpu",
        "policy_kwargs": {"features_extractor_kwargs": {"features_dim": 8}, "net_arch": [8]},
    }
    model = PPO("CnnPolicy", slots(IMAGE, ACT, 2), **kwargs)
    # the agents' space is the model's own: SB3's learn() over them would store them as they are
    assert model.observation_space == CHANNELS_FIRST
    match = r"agent 'a0' of .*ChannelsFirstParallel \(copy 0\) observes .*does not transpose"
    with pytest.raises(ValueError, match=match):
        SharedRolloutCollector(model, [ChannelsFirstParallel], seeds=[0])
    with pytest.raises(
        ValueError, match=r"\(the model of group 'g'\).*" + "observes .*does not transpose"
    ):
        GroupRolloutCollector({"g": model}, [ChannelsFirstParallel], group_of=lambda agent: "g")
    with pytest.raises(
        ValueError, match=r"agent 'p0' of .*ChannelsFirstTurns .*does not transpose"
    ):
        AECRolloutCollector(model, [ChannelsFirstTurns], opponents={"p1": "random"})


class MisshapenAt2(InPlaceParallel):  # type: ignore[misc, valid-type]
    """``InPlaceParallel`` whose agent ``a1`` observes a 3-vector (its space: 2) at step 2."""

    def _observe(self) -> dict[str, np.ndarray]:
        observations = super()._observe()
        if self.t == 2:
            observations["a1"] = np.zeros(3, np.float32)
        return observations


@pytest.mark.parametrize("kind", ["shared", "group", "replay"])
def test_a_misshapen_observation_names_its_agent(kind: str) -> None:
    env = slots(OBS, ACT, 2)
    if kind == "replay":
        model: Any = DQN("MlpPolicy", env, learning_starts=0, train_freq=8, device="cpu")
        collector: Any = SharedReplayCollector(model, [MisshapenAt2], seeds=[0])
    else:
        model = PPO("MlpPolicy", env, n_steps=8, batch_size=16, device="cpu")
        if kind == "shared":
            collector = SharedRolloutCollector(model, [MisshapenAt2], seeds=[0])
        else:
            collector = GroupRolloutCollector(
                {"g": model}, [MisshapenAt2], group_of=lambda agent: "g", seeds=[0]
            )
    start_training(model, 16)
    where = r"group 'g': " if kind == "group" else ""
    match = (
        where + r"observation of agent 'a1' of .*MisshapenAt2 \(copy 0\) does not fit "
        r"observation_space\('a1'\) .*its shape is \(3,\), not \(2,\)"
    )
    if kind == "replay":  # stored (as the next observation) before it is acted on
        match = r"next_observation of agent 'a1' \(copy 0\) does not fit .*\(3,\), not \(2,\)"
    with pytest.raises(ValueError, match=match):
        collector.collect()


class MisshapenTurns(InPlaceTurns):  # type: ignore[misc, valid-type]
    """``InPlaceTurns`` whose player ``p0`` observes a 3-vector (its space: 2) at move 2."""

    def observe(self, agent: str) -> np.ndarray:
        observation = super().observe(agent)
        return np.zeros(3, np.float32) if self.moves == 2 else observation


class MisshapenAtTheEnd(InPlaceParallel):  # type: ignore[misc, valid-type]
    """``InPlaceParallel`` whose agent ``a1``'s final observation is a 3-vector (its space: 2)."""

    def _observe(self) -> dict[str, np.ndarray]:
        observations = super()._observe()
        if self.t >= self.length:
            observations["a1"] = np.zeros(3, np.float32)
        return observations


def test_a_misshapen_turn_or_final_observation_names_its_agent() -> None:
    model = PPO("MlpPolicy", slots(OBS, ACT, 2), n_steps=8, batch_size=16, device="cpu")
    start_training(model, 32)
    turns = AECRolloutCollector(model, [MisshapenTurns], opponents={"p1": "random"}, seeds=[0])
    match = r"observation of agent 'p0' of .*MisshapenTurns \(copy 0\) does not fit .*\(3,\)"
    with pytest.raises(ValueError, match=match):
        turns.collect()
    shared = SharedRolloutCollector(model, [lambda: MisshapenAtTheEnd(3)], seeds=[0])
    match = r"next_observation of agent 'a1' \(copy 0\) does not fit .*\(3,\), not \(2,\)"
    with pytest.raises(ValueError, match=match):
        shared.collect()


DICT_IMAGE = spaces.Dict({"img": IMAGE, "vec": spaces.Box(-100.0, 100.0, (2,), np.float32)})


class DictImageParallel(ParallelEnv):  # type: ignore[misc]
    """Two agents observing ``{"img": 36x36x3 uint8, "vec": (2,)}``, written in place per step."""

    metadata: ClassVar[dict[str, Any]] = {"name": "dict_image_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["a0", "a1"]
        self._base = np.arange(36 * 36 * 3).reshape(36, 36, 3)
        self._arrays = {
            a: {"img": np.zeros((36, 36, 3), np.uint8), "vec": np.zeros(2, np.float32)}
            for a in self.possible_agents
        }

    def observation_space(self, agent: str) -> spaces.Dict:
        return DICT_IMAGE

    def action_space(self, agent: str) -> spaces.Discrete:
        return ACT

    def _observe(self, actions: dict[str, Any]) -> dict[str, Any]:
        for k, agent in enumerate(self.possible_agents):
            salt = 7 * self.t + 31 * k + 13 * int(actions.get(agent, 0))
            arrays = self._arrays[agent]
            arrays["img"][...] = (self._base * (k + 1) + salt) % 256
            arrays["vec"][...] = [self.t, salt]
        return dict(self._arrays)

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe({}), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        self.t += 1
        truncated = self.t >= 5
        out = (
            {a: {key: v.copy() for key, v in o.items()} for a, o in self._observe(actions).items()}
            if truncated
            else self._observe(actions),
            {a: float(actions[a]) - 0.5 * k for k, a in enumerate(self.agents)},
            {a: False for a in self.agents},
            {a: truncated for a in self.agents},
            {a: {} for a in self.agents},
        )
        if truncated:
            self.agents = []
        return out


class DictAgentsVecEnv(AgentsVecEnv):  # type: ignore[misc]
    """``AgentsVecEnv`` stacking Dict observations key by key (as ``DummyVecEnv`` does)."""

    @staticmethod
    def _stack(rows: list[Any]) -> Any:
        return {key: np.stack([row[key] for row in rows]) for key in rows[0]}

    def reset(self) -> Any:
        rows: list[Any] = []
        for c in range(len(self.envs)):
            observations = self._reset_copy(c)
            rows.extend(observations[a] for a in self.agents)
        return self._stack([{k: v.copy() for k, v in r.items()} for r in rows])

    def step_wait(self) -> Any:
        n = len(self.agents)
        rows: list[Any] = []
        rewards: list[float] = []
        dones: list[bool] = []
        infos: list[dict[str, Any]] = []
        for c, env in enumerate(self.envs):
            actions = {a: self._actions[c * n + j] for j, a in enumerate(self.agents)}
            observations, reward, _, truncated, _ = env.step(actions)
            done = not env.agents
            copy_infos: list[dict[str, Any]] = [{} for _ in self.agents]
            if done:
                for j, a in enumerate(self.agents):
                    copy_infos[j]["terminal_observation"] = observations[a]
                    copy_infos[j]["TimeLimit.truncated"] = bool(truncated[a])
                observations = self._reset_copy(c)
            rows.extend({k: v.copy() for k, v in observations[a].items()} for a in self.agents)
            rewards.extend(float(reward[a]) for a in self.agents)
            dones.extend([done] * n)
            infos.extend(copy_infos)
        return self._stack(rows), np.array(rewards, np.float32), np.array(dones), infos


class DictSlot(PARITY.AgentSlot):  # type: ignore[misc, name-defined]
    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return DICT_IMAGE.sample(), {}


def _copied(buf: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in PARITY.FIELDS:
        value = getattr(buf, name)
        out[name] = (
            {k: v.copy() for k, v in value.items()} if isinstance(value, dict) else value.copy()
        )
    return out


class DeepSnapshot(PARITY.Snapshot):  # type: ignore[misc, name-defined]
    def _on_rollout_end(self) -> None:
        self.rollouts.append(_copied(self.model.rollout_buffer))


def test_dict_image_observations_fill_what_learn_fills() -> None:
    n_copies, n_steps = 2, 8
    kwargs: dict[str, Any] = {
        "n_steps": n_steps,
        "batch_size": 16,
        "n_epochs": 1,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [8], "features_extractor_kwargs": {"cnn_output_dim": 8}},
    }
    venv = DictAgentsVecEnv(DictImageParallel, n_copies)
    n_columns = venv.num_envs
    reference = PPO("MultiInputPolicy", venv, **kwargs)
    assert isinstance(reference.get_env(), VecTransposeImage)
    snapshots = DeepSnapshot()
    reference.learn(total_timesteps=2 * n_steps * n_columns, callback=snapshots)
    model = PPO(
        "MultiInputPolicy", DummyVecEnv([lambda: DictSlot(DICT_IMAGE, ACT)] * n_columns), **kwargs
    )
    start_training(model, 2 * n_steps * n_columns)
    collector = SharedRolloutCollector(model, [DictImageParallel] * n_copies, seeds=[0, 1])
    ours = []
    for _ in range(2):
        collector.collect()
        ours.append(_copied(model.rollout_buffer))
        model.train()
    finish_training(model)
    assert ours[0]["observations"]["img"].shape == (n_steps, n_columns, 3, 36, 36)
    for t, (theirs, mine) in enumerate(zip(snapshots.rollouts, ours, strict=True)):
        for name in PARITY.FIELDS:
            if isinstance(theirs[name], dict):
                for key in theirs[name]:
                    np.testing.assert_array_equal(
                        mine[name][key], theirs[name][key], err_msg=f"rollout {t} {name}[{key}]"
                    )
            else:
                np.testing.assert_array_equal(
                    mine[name], theirs[name], err_msg=f"rollout {t} {name}"
                )
