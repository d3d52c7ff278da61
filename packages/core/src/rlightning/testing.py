"""Conformance checkers: does a policy response fit the environment it is meant for?

Run them in your own tests (and in debug builds of a rollout loop) on the responses your policy
produces, the way PettingZoo's ``pettingzoo.test.api_test`` is run on an environment. Every rule
has an id (the keys of :data:`RULES`); a broken rule raises an error whose message names the field
or agent, says what is wrong, shows the value and ends with ``[rule <id>]``::

    agent 'piston_3' action is not in Box(-1.0, 1.0, (1,), float32): element [0] = 1.7 is above
    high = 1.0; got array([1.7], dtype=float32) [rule action-in-space]

:class:`TypeError` means the wrong kind of object was passed (not a response, a space or a
mapping); :class:`ValueError` means a response broke a rule (an action not in its space, a missing
agent, a bad stamp, ...). The checkers never modify the response.

Nothing here imports torch: a field holding a tensor is recognised only when torch is already
imported (then no tensor can exist otherwise), so the checkers run without torch installed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning._checks_multi import _check_known_agents, _check_live_agents, _check_per_agent_keys
from rlightning._checks_single import (
    _check_action_mask,
    _check_buffer_action,
    _check_env_id,
    _check_scalar_fields,
    _check_stamps,
    _fail,
)
from rlightning._fields import _check_space
from rlightning._space_reasons import (
    _box_reason,
    _contains,
    _discrete_reason,
    _is_tensor,
    _multi_binary_reason,
    _multi_discrete_reason,
)
from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

__all__ = [
    "RULES",
    "check_multi_agent_policy_response",
    "check_policy_response",
    "space_violation",
]

#: Every rule the checkers enforce: id -> what it requires and the upstream rule it follows.
RULES: dict[str, str] = {
    "response-type": (
        "check_policy_response takes a PolicyResponse that is not multi-agent; "
        "check_multi_agent_policy_response takes a MultiAgentPolicyResponse"
    ),
    "env-id": "env_id is a str, or None (rlightning API page: PolicyResponse(env_id, **data))",
    "has-action": "the response has an 'action' field, what the env's step() takes",
    "action-in-space": (
        "each action is an element of its action space, exactly as gymnasium's "
        "Space.contains decides (dtype, shape, bounds); PettingZoo's AssertOutOfBoundsWrapper "
        "and api_test apply the same test"
    ),
    "action-mask": (
        "an action_mask is 0/1 values of shape (n,) for Discrete(n) (a tuple of such per "
        "dimension for a 1-D MultiDiscrete), gymnasium's Space.sample(mask=...) format; the "
        "action must be one the mask allows (PettingZoo: 1 = legal, 0 = illegal). A mask of all "
        "zeros means the agent has no legal action now (e.g. the waiting player of a turn-based "
        "game in parallel form); its action is a placeholder the env ignores and is not checked "
        "(gymnasium's sample() returns space.start then)"
    ),
    "scalar-field": (
        "value and log_prob, when present, each hold one real number (a Python or numpy "
        "number, or an array/tensor of one element, as SB3's collect_rollouts gives per env); "
        "value is finite and log_prob is not NaN"
    ),
    "buffer-action": (
        "buffer_action, when present for a Box action space, has the space's shape, as SB3's "
        "collect_rollouts stores the policy's raw action"
    ),
    "timestamp": (
        "ts_env_sent_ns and ts_policy_sent_ns, when present and not None, are non-negative "
        "integers of nanoseconds since the epoch (time.time_ns())"
    ),
    "known-agent": "every agent with an action has an action space",
    "live-agents": (
        "every live agent has an action (PettingZoo parallel API: step() takes an action for "
        "each agent in env.agents)"
    ),
    "no-inactive-action": (
        "no action for an agent that is not live (PettingZoo parallel API: an agent removed "
        "from env.agents, terminated or truncated, takes no further actions)"
    ),
    "per-agent-keys": (
        "a dict field keyed by agent ids is keyed by exactly the agents of action "
        "(rlightning: a field is per-agent when its keys equal action's keys)"
    ),
}


# ---------------------------------------------------------------------------- space membership
def space_violation(space: spaces.Space[Any], value: Any) -> str | None:
    """Say why ``value`` is not an element of ``space``, or return None when it is.

    The verdict is gymnasium's own ``space.contains(value)``; this function only explains a
    rejection: for Box the dtype that cannot be cast safely, the shape, or the first element
    outside ``[low, high]`` (or NaN); for Discrete a value that is not an integer or is out of
    range; for MultiDiscrete and MultiBinary likewise; for Dict and Tuple the path to the part that
    fails. A torch tensor is never in a gymnasium space: the reason says to call ``numpy()``.

    Args:
        space: Any gymnasium space.
        value: The candidate element.

    Returns:
        None if ``space.contains(value)``; otherwise a short reason in words (no trailing period).

    Examples:
        >>> import numpy as np
        >>> from gymnasium.spaces import Box, Discrete
        >>> space_violation(Discrete(3), 5)
        '5 is outside [0, 2]'
        >>> space_violation(Box(-1, 1, (2,)), np.array([0.5, 2.0], dtype=np.float32))
        'element [1] = 2.0 is above high = 1.0'
        >>> space_violation(Discrete(3), 2) is None
        True
    """
    if _is_tensor(value):
        return (
            f"it is a torch tensor (device {value.device}); environments take numpy or Python "
            "values: convert with response.numpy() first"
        )
    if _contains(space, value):
        return None
    if isinstance(space, spaces.Box):
        return _box_reason(space, value)
    if isinstance(space, spaces.Discrete):
        return _discrete_reason(space, value)
    if isinstance(space, spaces.MultiDiscrete):
        return _multi_discrete_reason(space, value)
    if isinstance(space, spaces.MultiBinary):
        return _multi_binary_reason(space, value)
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            return f"it is a {type(value).__name__}, not a dict"
        missing = [k for k in space.spaces if k not in value]
        extra = [k for k in value if k not in space.spaces]
        if missing or extra:
            return f"its keys differ from the space's: missing {missing}, unexpected {extra}"
        for key, sub in space.spaces.items():
            reason = space_violation(sub, value[key])
            if reason is not None:
                return f"[{key!r}] is not in {sub}: {reason}"
    if isinstance(space, spaces.Tuple):
        if isinstance(value, (list, np.ndarray)):
            value = tuple(value)
        if not isinstance(value, tuple):
            return f"it is a {type(value).__name__}, not a tuple"
        if len(value) != len(space.spaces):
            return f"it has {len(value)} items, the space has {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            reason = space_violation(sub, value[i])
            if reason is not None:
                return f"[{i}] is not in {sub}: {reason}"
    return f"gymnasium's {type(space).__name__}.contains rejects it"


def _check_fields(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    """Apply the single-agent rules to one agent's fields (``subject`` prefixes messages)."""
    if "action" not in fields:
        raise _fail(ValueError, "has-action", subject.rstrip(". "), "has no action field", None)
    action = fields["action"]
    reason = space_violation(space, action)
    if reason is not None:
        raise _fail(
            ValueError,
            "action-in-space",
            f"{subject}action",
            f"is not in {space}: {reason}",
            action,
        )
    _check_action_mask(fields, space, subject)
    _check_scalar_fields(fields, subject)
    _check_buffer_action(fields, space, subject)


# ---------------------------------------------------------------------------- public checkers
def check_policy_response(response: PolicyResponse, action_space: spaces.Space[Any]) -> None:
    """Check a single-agent response against the action space of the env it is for.

    Rules (ids from :data:`RULES`): ``response-type``, ``env-id``, ``has-action``,
    ``action-in-space`` (gymnasium's ``action_space.contains(response.action)``), ``action-mask``
    (when ``action_mask`` is present), ``scalar-field`` (``value``, ``log_prob``),
    ``buffer-action`` (Box spaces) and ``timestamp`` (``ts_env_sent_ns``, ``ts_policy_sent_ns``).
    Other fields are not checked. Tensors are accepted in ``value``, ``log_prob``,
    ``buffer_action`` and ``action_mask``; an ``action`` must be what the env takes (numpy or
    Python), so a tensor action breaks ``action-in-space``.

    Args:
        response: The response to check; not modified.
        action_space: The env's action space (for a vectorised env, the single env's space).

    Raises:
        TypeError: ``response`` is not a single-agent :class:`PolicyResponse`
            (``response-type``), its ``env_id`` is not a str or None, or ``action_space`` is not a
            gymnasium space.
        ValueError: a rule is broken; the message names the field, the rule and the value.

    Examples:
        >>> from gymnasium.spaces import Discrete
        >>> check_policy_response(PolicyResponse("env-0", action=1), Discrete(2))
        >>> check_policy_response(PolicyResponse("env-0", action=2), Discrete(2))
        Traceback (most recent call last):
        ...
        ValueError: response.action is not in Discrete(2): 2 is outside [0, 1]; got 2 [rule action-in-space]
    """  # noqa: E501  (doctest output is one line)
    if not isinstance(response, PolicyResponse) or isinstance(response, MultiAgentPolicyResponse):
        hint = (
            "; use check_multi_agent_policy_response for a MultiAgentPolicyResponse"
            if isinstance(response, MultiAgentPolicyResponse)
            else ""
        )
        raise TypeError(
            f"response must be a single-agent PolicyResponse, got {type(response).__name__}"
            f"{hint} [rule response-type]"
        )
    _check_space(action_space, "action_space")
    _check_env_id(response)
    fields = response.__dict__
    _check_stamps(fields, "response.")
    _check_fields(fields, action_space, "response.")


def check_multi_agent_policy_response(
    response: MultiAgentPolicyResponse,
    action_spaces: Mapping[Any, spaces.Space[Any]],
    live_agents: Collection[Any] | None = None,
) -> None:
    """Check a multi-agent response against the agents' action spaces (and who is live).

    Rules (ids from :data:`RULES`): ``response-type``, ``env-id``, ``timestamp``,
    ``known-agent`` (each agent with an action has a space in ``action_spaces``),
    ``per-agent-keys`` (a dict field keyed by agent ids has exactly the agents of ``action``),
    then, when ``live_agents`` is given, ``live-agents`` and ``no-inactive-action`` (PettingZoo's
    parallel ``step`` takes exactly one action per agent of ``env.agents``), then every
    single-agent rule of :func:`check_policy_response` on each agent's view
    (:meth:`MultiAgentPolicyResponse.for_agent`) against that agent's space.

    Args:
        response: The response to check; not modified.
        action_spaces: ``{agent_id: gymnasium.Space}``; for a PettingZoo env
            ``{a: env.action_space(a) for a in env.possible_agents}``. Agents it lists need not all
            have actions.
        live_agents: The agents that must act now and the only ones that may (``env.agents`` of a
            parallel env). None skips the two liveness rules.

    Raises:
        TypeError: ``response`` is not a :class:`MultiAgentPolicyResponse`, ``action_spaces`` is
            not a mapping of gymnasium spaces, or ``env_id`` is not a str or None.
        ValueError: a rule is broken; the message names the agent or field, the rule and the
            value.

    Examples:
        >>> from gymnasium.spaces import Discrete
        >>> spaces_ = {"a": Discrete(2), "b": Discrete(2)}
        >>> r = MultiAgentPolicyResponse("env-0", action={"a": 1})
        >>> check_multi_agent_policy_response(r, spaces_, live_agents=["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: response.action lacks live agent(s) ['b']; got {'a': 1} [rule live-agents]
    """
    if not isinstance(response, MultiAgentPolicyResponse):
        raise TypeError(
            "response must be a MultiAgentPolicyResponse, got "
            f"{type(response).__name__} [rule response-type]"
        )
    if not isinstance(action_spaces, Mapping):
        raise TypeError(
            "action_spaces must be a mapping {agent_id: gymnasium.Space}, got "
            f"{type(action_spaces).__name__}"
        )
    for agent, space in action_spaces.items():
        _check_space(space, f"action_spaces[{agent!r}]")
    _check_env_id(response)
    fields = response.__dict__
    _check_stamps(fields, "response.")
    actions: dict[Any, Any] = fields["action"]
    _check_known_agents(actions, action_spaces)
    _check_per_agent_keys(fields, actions, action_spaces)
    if live_agents is not None:
        _check_live_agents(actions, live_agents)
    for agent in actions:
        view = response.for_agent(agent).__dict__
        _check_fields(view, action_spaces[agent], f"agent {agent!r} ")
