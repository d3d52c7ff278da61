"""Action masks: where PettingZoo envs put them, and random actions that honour them.

PettingZoo has two homes for an agent's action mask (PettingZoo docs, "Action Masking"; both are
read, in this order, by ``pettingzoo.test.api_test`` and ``parallel_test.sample_action``):

1. the observation, when it is a dict with an ``"action_mask"`` entry (classic games:
   ``{"observation": ..., "action_mask": ...}``);
2. the agent's info dict, ``infos[agent]["action_mask"]``.

A mask holds 1 for a legal action and 0 for an illegal one, in gymnasium's
``Space.sample(mask=...)`` format: shape ``(n,)`` for ``Discrete(n)``, a tuple of per-dimension
arrays for ``MultiDiscrete``; ``MultiBinary(n)`` has sb3-contrib's ``(2 * n,)`` layout (entries
``2i`` and ``2i + 1`` allow element ``i`` to be 0 and 1), since gymnasium's ``(n,)`` MultiBinary
"mask" forces values instead of listing legal ones. Which masks are read, and how they are
judged, is :mod:`rlightning.rules`' (``takes_action_mask``, ``check_action_mask``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from pettingzoo import AECEnv, ParallelEnv
from rlightning import MultiAgentPolicyResponse
from rlightning.rules import check_action_mask, takes_action_mask
from rlightning.types import response_from_checked
from rlightning_pettingzoo._envs import aec_acting_agent, describe_env, is_aec

__all__ = ["find_action_mask", "sample_response"]


def find_action_mask(
    agent: Any,
    observations: Mapping[Any, Any] | None = None,
    infos: Mapping[Any, Any] | None = None,
) -> Any | None:
    """Find ``agent``'s action mask: in its observation first, then in its info.

    Args:
        agent: The agent id.
        observations: ``{agent_id: observation}`` as ``reset``/``step``/``observe`` give them, or
            None.
        infos: ``{agent_id: info dict}``, or None.

    Returns:
        ``observations[agent]["action_mask"]`` when that observation is a dict holding one, else
        ``infos[agent]["action_mask"]`` when present, else None. The mask object itself is
        returned (not copied).
    """
    if observations is not None:
        observation: Any = observations.get(agent)
        # Exact dict and ndarray first: the common cases, spared the slower ABC Mapping check.
        kind = type(observation)
        if (
            kind is dict or (kind is not np.ndarray and isinstance(observation, Mapping))
        ) and "action_mask" in observation:
            return observation["action_mask"]
    if infos is not None:
        info: Any = infos.get(agent)
        if (type(info) is dict or isinstance(info, Mapping)) and "action_mask" in info:
            return info["action_mask"]
    return None


def _checked_action_mask(space: spaces.Space[Any], mask: Any, agent: Any, env: Any) -> Any:
    """Check ``agent``'s action mask against its action space; return it in gymnasium's format.

    The rule is :func:`rlightning.rules.check_action_mask` (``action-mask``), the same one
    :func:`rlightning.testing.check_multi_agent_policy_response` applies, on the spaces
    :func:`rlightning.rules.takes_action_mask` names: for ``Discrete(n)`` a mask of shape
    ``(n,)`` holding only 0 and 1 (so 0.5, NaN or 2 is refused, never read as "allowed"); for a
    1-D ``MultiDiscrete`` a tuple of such masks, one per dimension; for a 1-D ``MultiBinary(n)``
    sb3-contrib's ``(2 * n,)`` layout (gymnasium's own ``MultiBinary.sample(mask=...)`` takes
    0/1/2 "force 0, force 1, random" entries, not legal-action masks); a multi-dimensional
    ``MultiDiscrete`` or ``MultiBinary`` has no mask (refused). Masks of other spaces (``Box``,
    ``Dict``, ...) are returned unchecked: they are no legal-action masks and nothing reads them
    as such. Used by :func:`sample_response`, :func:`respond` and :class:`SharedPolicyAdapter`
    alike (``aec_action`` asks the same two functions).

    Args:
        space: ``env.action_space(agent)``.
        mask: The mask as found by :func:`find_action_mask` (array-like or tuple); not modified.
        agent: The agent id, for the message.
        env: The env, named in the message (only when raising: no per-step cost).

    Returns:
        For Discrete, an int8 array of shape ``(n,)``; for 1-D MultiDiscrete, a tuple of such
        arrays (the dtype gymnasium's ``Space.sample(mask=...)`` requires); for 1-D MultiBinary
        an int8 array of shape ``(2 * n,)`` (:func:`_sample_masked` turns it into gymnasium's
        sampling mask); otherwise ``mask`` unchanged. None when the mask allows no action (rule
        ``no-legal-action``): the agent waits (the waiting player of a turn-based game in
        parallel form) and gets the action None.

    Raises:
        TypeError: the mask's kind or dtype is wrong (names the env and the agent).
        ValueError: the mask breaks the rule (names the env, the agent, the mask and what is
            wrong).
    """
    if not takes_action_mask(space):
        return mask
    try:
        checked = check_action_mask(
            space, mask, subject=f"action mask of agent {agent!r}", allow_empty=True
        )
    except (TypeError, ValueError) as error:
        raise type(error)(f"{describe_env(env)}: {error}") from None
    if checked is None:
        return None
    if isinstance(checked, tuple):
        return tuple(part.view(np.int8) for part in checked)
    return checked.view(np.int8)


def _sample_masked(space: spaces.Space[Any], mask: Any) -> Any:
    """``space.sample(mask=...)`` with a mask checked by :func:`_checked_action_mask`.

    Discrete and MultiDiscrete take the checked mask as gymnasium does. For a 1-D
    ``MultiBinary(n)`` the legal-action mask (entries ``2i``, ``2i + 1``: value 0, value 1 of
    element ``i`` legal) becomes gymnasium's per-element sampling mask: 2 (either value, drawn
    at random) where both are legal, else the one legal value (a mask with neither was refused:
    the agent waits). So the action is drawn uniformly over the legal ones, as
    ``MultiBinary.sample()`` draws every element when all are legal.
    """
    if isinstance(space, spaces.MultiBinary):
        zero, one = mask[0::2].astype(bool), mask[1::2].astype(bool)
        return space.sample(mask=np.where(zero & one, 2, one).astype(np.int8))
    return space.sample(mask=mask)


# Space type -> is it a gymnasium Dict space. spaces.Dict is also a typing.Mapping, so a plain
# isinstance() goes through ABCMeta (about 0.2 us, on every agent of every step); the answer for
# a type never changes. _NOT_DICT_SPACES holds the types found False, for a set test inline.
_IS_DICT_SPACE: dict[type, bool] = {}
_NOT_DICT_SPACES: set[type] = set()


def _observations_carry_masks(space: spaces.Space[Any]) -> bool:
    kind = type(space)
    is_dict = _IS_DICT_SPACE.get(kind)
    if is_dict is None:
        is_dict = _IS_DICT_SPACE[kind] = issubclass(kind, spaces.Dict)
        if not is_dict:
            _NOT_DICT_SPACES.add(kind)
    return is_dict and "action_mask" in cast("spaces.Dict", space).spaces


def sample_response(
    env: Any,
    env_id: str | None = None,
    observations: Mapping[Any, Any] | None = None,
    infos: Mapping[Any, Any] | None = None,
) -> MultiAgentPolicyResponse:
    """Return a response of random actions for the agents that act now, honouring action masks.

    Which agents act: for a parallel env, every agent in ``env.agents`` (never the keys of
    ``observations``); for an AEC env, ``env.agent_selection`` alone, and no agent when it is
    terminated or truncated (its step takes ``None``, see :func:`aec_action`).

    Each action is ``env.action_space(agent).sample(mask=...)`` with the agent's mask from
    :func:`find_action_mask` (observation first, then info), so no illegal action is sampled. A
    mask that allows no action means the agent cannot act now (the waiting player of a
    turn-based game in parallel form, ``turn_based_aec_to_parallel``, which reads only
    ``agent_selection``'s action): its action is None (rule ``no-legal-action`` of
    :mod:`rlightning.rules`), never a made-up action; :func:`to_parallel_actions` passes it on.
    For an AEC env whose ``observations``/``infos`` are not given, they are read from the env
    (``env.observe(agent)``, ``env.infos``); so is the observation when ``observations`` lacks
    the agent. Sampling advances each action space's RNG (the env is otherwise not changed);
    seed the spaces (``env.action_space(agent).seed(s)``) for reproducible actions.

    Args:
        env: A PettingZoo ``ParallelEnv`` or ``AECEnv`` after ``reset``.
        env_id: The response's ``env_id``.
        observations: ``{agent_id: observation}`` from the last ``reset``/``step``.
        infos: ``{agent_id: info}`` from the last ``reset``/``step``.

    Returns:
        A :class:`MultiAgentPolicyResponse` with ``action`` ``{agent_id: action}`` (None for an
        agent whose mask allows no action) and, when any acting agent has a mask, a per-agent
        ``action_mask`` field (the masks as found, None for agents without one). Its action dict
        is empty when no agent acts.

    Raises:
        TypeError: ``env`` is not a PettingZoo env, or ``env_id`` is neither a str nor None.
        ValueError: an AEC env's game is over (``env.agents`` is empty: call ``env.reset()``)
            or its ``env.agent_selection`` is not in ``env.agents``; a mask breaks the
            ``action-mask`` rule of :data:`rlightning.rules.RULES` (for ``Discrete(n)`` an
            array of shape ``(n,)`` holding only 0 and 1; for a 1-D ``MultiDiscrete`` a tuple
            of such arrays, one per dimension); or a parallel env's
            observation space carries action masks (a Dict with ``"action_mask"``) but
            ``observations`` lacks a live agent's observation, so its mask cannot be honoured.
    """
    if isinstance(env, AECEnv) or not isinstance(env, ParallelEnv):
        is_aec(env)  # raises the TypeError for an object that is neither kind of env
        agent = aec_acting_agent(env)
        if agent is None:
            return MultiAgentPolicyResponse(env_id, action={})
        agents = [agent]
        if observations is None or agent not in observations:
            observations = {agent: env.observe(agent)}
        if infos is None:
            infos = env.infos
    else:
        agents = env.agents  # only read: a copy only when it is not a list
        if type(agents) is not list:
            agents = list(agents)
        observation_space = env.observation_space
        if observations is None:
            # _observations_carry_masks(space) for each agent, with its first test inline: a
            # space of a type known not to be a Dict carries no mask.
            not_dict = _NOT_DICT_SPACES
            blind = []
            for a in agents:
                space = observation_space(a)
                if type(space) not in not_dict and _observations_carry_masks(space):
                    blind.append(a)
        else:
            blind = []
            for a in agents:
                if a not in observations and _observations_carry_masks(observation_space(a)):
                    blind.append(a)
        if blind:
            raise ValueError(
                f"{describe_env(env)}'s observations carry action masks (observation_space has "
                f"'action_mask' for agent(s) {blind}) but observations= does not hold theirs; "
                "pass the observations from the last reset()/step() so no illegal action is "
                "sampled"
            )
        if observations is None and infos is None:
            # No mask can be found: plain samples (the per-step hot path of a random policy).
            action_space = env.action_space
            plain: dict[Any, Any] = {}
            for a in agents:  # a loop, not a comprehension: in CPython 3.11 that is a call more
                plain[a] = action_space(a).sample()
            return _response(env_id, plain)
    action_space = env.action_space
    actions: dict[Any, Any] = {}
    masks: dict[Any, Any] = {}
    masked = False
    for agent in agents:
        space = action_space(agent)
        mask = find_action_mask(agent, observations, infos)
        masks[agent] = mask
        if mask is None:
            actions[agent] = space.sample()
        else:
            masked = True
            mask = _checked_action_mask(space, mask, agent, env)
            actions[agent] = None if mask is None else _sample_masked(space, mask)
    if masked:
        return MultiAgentPolicyResponse(env_id, action=actions, action_mask=masks)
    return _response(env_id, actions)


def _response(env_id: Any, actions: dict[Any, Any]) -> MultiAgentPolicyResponse:
    """``MultiAgentPolicyResponse(env_id, action=actions)``, built without its ``__init__`` call.

    The constructor's Python-level call (keyword packing, a frame) costs about 0.3 us, as much
    as the rest of :func:`sample_response`'s fixed cost. Here its checks hold by construction:
    ``actions`` is an exact dict this module built, and ``"action"`` is no reserved name. Any
    ``env_id`` other than None or an exact str goes to the constructor, which accepts a str
    subclass and raises its own TypeError for anything else; the rest is built by the core's
    ``response_from_checked``, which stores the fields as the constructor does
    (``tests/pettingzoo/test_masks.py`` compares the two).
    """
    if env_id is not None and type(env_id) is not str:
        return MultiAgentPolicyResponse(env_id, action=actions)
    return response_from_checked(MultiAgentPolicyResponse, env_id, {"action": actions})
