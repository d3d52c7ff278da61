"""MultiBinary action masks: the PettingZoo adapter reads them by rlightning.rules' one predicate.

A MultiBinary(n) mask has sb3-contrib's (2 * n,) layout (entries 2i and 2i + 1 allow element i
to be 0 and 1). The adapter once checked masks of Discrete and 1-D MultiDiscrete spaces only and
handed a MultiBinary mask to gymnasium's ``MultiBinary.sample(mask=...)``, which reads another
(n,) "force 0 / force 1 / random" format: a legal-action mask then failed inside gymnasium, and a
(n,) 0/1 mask silently forced every element.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.conversions import parallel_to_aec

from pettingzoo import ParallelEnv
from rlightning import MultiAgentPolicyResponse
from rlightning.rules import action_allowed
from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import (
    SharedPolicyAdapter,
    aec_action,
    respond,
    sample_response,
    to_parallel_actions,
)

#: Agent "a": element 0 must be 0, element 1 must be 1, element 2 either. Agent "b": element 1
#: allows neither value, so "b" has no legal action and waits.
MASKS = {
    "a": np.array([1, 0, 0, 1, 1, 1], np.int8),
    "b": np.array([1, 1, 0, 0, 1, 1], np.int8),
}


class _BitsEnv(ParallelEnv):  # type: ignore[misc]
    """A real ParallelEnv of two agents acting in MultiBinary(3), masks in the observations."""

    metadata: ClassVar[dict[str, Any]] = {"name": "bits_v0", "render_modes": []}

    def __init__(self, masks: dict[str, np.ndarray]) -> None:
        self.possible_agents = ["a", "b"]
        self.masks = masks
        self._act = {agent: spaces.MultiBinary(3, seed=i) for i, agent in enumerate("ab")}
        self._obs = {
            agent: spaces.Dict(
                {
                    "observation": spaces.Box(0.0, 1.0, (3,), np.float32),
                    "action_mask": spaces.Box(0, 1, np.shape(masks[agent]), np.int8),
                }
            )
            for agent in self.possible_agents
        }

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._obs[agent]

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._act[agent]

    def _observe(self) -> dict[str, Any]:
        return {
            a: {"observation": np.full(3, 0.5, np.float32), "action_mask": self.masks[a]}
            for a in self.agents
        }

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.agents = list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        for agent, action in actions.items():
            if action is not None:
                assert action_allowed(self._act[agent], self.masks[agent], action), action
        zeros = dict.fromkeys(self.agents, 0.0)
        done = dict.fromkeys(self.agents, False)
        return self._observe(), zeros, done, dict(done), {a: {} for a in self.agents}


def test_sample_response_honours_a_multibinary_mask_and_lets_an_agent_without_one_wait() -> None:
    env = _BitsEnv(MASKS)
    observations, infos = env.reset()
    seen = set()
    for _ in range(40):
        response = sample_response(env, "bits", observations, infos)
        assert response.action["b"] is None  # no legal value for its element 1: it waits
        action = response.action["a"]
        assert env.action_space("a").contains(action)
        assert action_allowed(env.action_space("a"), MASKS["a"], action)
        seen.add(int(action[2]))
        check_multi_agent_policy_response(
            response, {a: env.action_space(a) for a in env.agents}, live_agents=env.agents
        )
        assert to_parallel_actions(response, env)["b"] is None
        env.step(to_parallel_actions(response, env))
    assert seen == {0, 1}  # element 2, legal either way, is drawn at random


def test_a_gymnasium_sampling_mask_is_no_legal_action_mask() -> None:
    """(n,) 0/1 entries are gymnasium's "force this value" format: refused, never obeyed."""
    env = _BitsEnv({"a": np.array([0, 1, 1], np.int8), "b": np.ones(6, np.int8)})
    observations, infos = env.reset()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "bits_v0: action mask of agent 'a' must have shape (6,), not (3,); got "
            "array([0, 1, 1], dtype=int8); expected 6 0/1 entries for MultiBinary(3) "
            "[rule action-mask]"
        ),
    ):
        sample_response(env, "bits", observations, infos)


def test_respond_and_shared_policy_pass_multibinary_masks_to_maskable_ppo(make_sb3: Any) -> None:
    from sb3_contrib import MaskablePPO

    env = _BitsEnv(MASKS)
    observations, _ = env.reset()
    model = make_sb3(
        MaskablePPO, "MultiInputPolicy", env.observation_space("a"), env.action_space("a")
    )
    for response in (
        respond(env, observations, dict.fromkeys(env.agents, model), "bits"),
        SharedPolicyAdapter(model).act(env, observations, "bits"),
    ):
        assert response.action["b"] is None and response.log_prob["b"] is None  # waits
        assert action_allowed(env.action_space("a"), MASKS["a"], response.action["a"])
        np.testing.assert_array_equal(response.action_mask["a"], MASKS["a"], strict=True)
        env.step(to_parallel_actions(response, env))


def test_aec_action_checks_a_multibinary_move_against_its_mask() -> None:
    env = parallel_to_aec(_BitsEnv({"a": MASKS["a"], "b": np.ones(6, np.int8)}))
    env.reset()
    agent = env.agent_selection
    assert agent == "a"
    legal = MultiAgentPolicyResponse("bits", action={"a": np.array([0, 1, 0], np.int8)})
    assert aec_action(legal, env) is legal.action["a"]
    illegal = MultiAgentPolicyResponse("bits", action={"a": np.array([1, 1, 0], np.int8)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "bits_v0 (response env_id='bits'): agent 'a' action element [0] = 1 is masked out "
            "by the action mask (entry [1] is 0; legal: [0]); got array([1, 1, 0], dtype=int8) "
            "[rule action-mask]"
        ),
    ):
        aec_action(illegal, env)
    assert aec_action(illegal, env, check_mask=False) is illegal.action["a"]
