"""Property tests over randomly built gymnasium spaces (nested Dict/Tuple included).

make_example -> numpy() -> cpu() -> pickle round trip -> equal to what went in; and with torch,
tensors made from the sampled arrays come back through numpy() equal to the samples.
"""

from __future__ import annotations

import copy
import importlib.util
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning._tree import map_leaves

HAS_TORCH = importlib.util.find_spec("torch") is not None

shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)

box = st.builds(
    lambda shape, dtype, seed: gym.spaces.Box(
        low=0 if dtype == np.uint8 else -2, high=3, shape=shape, dtype=dtype, seed=seed
    ),
    shapes,
    st.sampled_from([np.float32, np.float64, np.int64, np.uint8]),
    st.integers(0, 2**16),
)
discrete = st.builds(
    lambda n, start, seed: gym.spaces.Discrete(n, start=start, seed=seed),
    st.integers(1, 10),
    st.integers(-3, 3),
    st.integers(0, 2**16),
)
multi_discrete = st.builds(
    lambda nvec, seed: gym.spaces.MultiDiscrete(nvec, seed=seed),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.integers(0, 2**16),
)
multi_binary = st.builds(
    lambda n, seed: gym.spaces.MultiBinary(n, seed=seed), st.integers(1, 6), st.integers(0, 2**16)
)
text = st.builds(
    lambda n, seed: gym.spaces.Text(n, seed=seed), st.integers(1, 8), st.integers(0, 2**16)
)
leaf_spaces = st.one_of(box, discrete, multi_discrete, multi_binary, text)
names = st.text(alphabet="abcdefgh_", min_size=1, max_size=5)


def _extend(children: st.SearchStrategy[gym.Space[Any]]) -> st.SearchStrategy[gym.Space[Any]]:
    return st.one_of(
        st.dictionaries(names, children, min_size=1, max_size=3).map(gym.spaces.Dict),
        st.lists(children, min_size=1, max_size=3).map(lambda s: gym.spaces.Tuple(tuple(s))),
    )


spaces = st.recursive(leaf_spaces, _extend, max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    space=spaces,
    env_id=st.one_of(st.none(), st.text(max_size=5)),
    protocol=st.sampled_from([2, 4, 5]),
)
def test_make_example_conversions_pickle_round_trip(space, env_id, protocol):
    response = PolicyResponse.make_example(space, env_id, value=np.float32(0.5))
    reference = copy.deepcopy(response)
    assert space.contains(response.action)
    assert response.numpy() is response
    assert response.cpu() is response
    back = pickle.loads(pickle.dumps(response, protocol=protocol))
    assert back == reference
    assert back.to_dict().keys() == {"action", "value"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agent_spaces=st.dictionaries(names, spaces, min_size=1, max_size=4))
def test_multi_agent_make_example_split_and_rebuild(agent_spaces):
    response = MultiAgentPolicyResponse.make_example(agent_spaces, "env")
    parts = {agent: response.for_agent(agent) for agent in response.agent_ids}
    for agent, part in parts.items():
        assert agent_spaces[agent].contains(part.action)
    rebuilt = MultiAgentPolicyResponse.from_agents("env", parts)
    assert rebuilt == response
    assert pickle.loads(pickle.dumps(rebuilt, 5)) == response


@pytest.mark.torch
@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (core-notorch env)")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=spaces)
def test_tensors_of_samples_come_back_through_numpy(space):
    import torch

    sample = space.sample()

    def to_tensor(leaf: Any) -> Any:
        if isinstance(leaf, np.ndarray) and leaf.dtype != np.uint16:
            return torch.from_numpy(leaf.copy())
        return leaf

    response = PolicyResponse("e", action=map_leaves(to_tensor, sample))
    restored = pickle.loads(pickle.dumps(response, 5)).cpu().numpy()
    assert restored == PolicyResponse("e", action=sample)
