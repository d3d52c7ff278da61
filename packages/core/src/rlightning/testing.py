"""Conformance checkers: does a policy response fit the environment it is meant for?

Run them in your own tests (and in debug builds of a rollout loop) on the responses your policy
produces, the way PettingZoo's ``pettingzoo.test.api_test`` is run on an environment. Every rule
has an id (the keys of :data:`RULES`, the table of :mod:`rlightning.rules`, which owns each rule and
its message; ``RULES`` and :func:`space_violation` are re-exported from there); a broken rule
raises an error whose message names the field or agent, says what is wrong, shows the value and
ends with ``[rule <id>]``::

    agent 'piston_3' action is not in Box(-1.0, 1.0, (1,), float32): element [0] = 1.7 is above
    high = 1.0; got array([1.7], dtype=float32) [rule action-in-space]

:class:`TypeError` means the wrong kind of object was passed (not a response, a space or a
mapping) or a field holds the wrong kind of value (a stamp that is not an int, a mask of strings);
:class:`ValueError` means a response broke a rule (an action not in its space, a missing agent, a
negative stamp, a mask that allows no action, ...). The checkers never modify the response.

Nothing here imports torch: a field holding a tensor is recognised only when torch is already
imported (then no tensor can exist otherwise), so the checkers run without torch installed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gymnasium import spaces

from rlightning._fields import _check_space
from rlightning.rules import (
    RULES,
    SCALAR_FIELDS,
    SHARED_FIELDS,
    STAMP_ORDER,
    check_action,
    check_action_allowed,
    check_action_mask,
    check_buffer_action,
    check_env_id,
    check_has_action,
    check_known_agents,
    check_live_agents,
    check_per_agent_keys,
    check_response_type,
    check_scalar_field,
    check_stamp,
    rule_error,
    space_violation,
    takes_action_mask,
)
from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

__all__ = [
    "RULES",
    "check_multi_agent_policy_response",
    "check_policy_response",
    "space_violation",
]


def _check_fields(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    """Apply the single-agent rules to one agent's fields (``subject`` prefixes messages)."""
    action = check_has_action(fields, subject.rstrip(". "))
    check_action(space, action, f"{subject}action")
    mask = fields.get("action_mask")
    if mask is not None and takes_action_mask(space):
        check_action_allowed(
            space, mask, action, subject=f"{subject}action", mask_subject=f"{subject}action_mask"
        )
    for name in SCALAR_FIELDS:
        value = fields.get(name)
        if value is not None:
            check_scalar_field(name, value, subject)
    buffer_action = fields.get("buffer_action")
    if buffer_action is not None:
        check_buffer_action(space, buffer_action, subject)


def _check_stamps(fields: Mapping[str, Any], subject: str) -> None:
    """Rule ``timestamp`` on every stamp present, in the order a step travels."""
    for name in STAMP_ORDER:
        stamp = fields.get(name)
        if stamp is not None:
            check_stamp(name, stamp, subject)


def _check_waiting(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    """An agent whose action is None waits: its mask allows no action and it has no outputs.

    Rule ``no-legal-action``: the agent's ``action_mask`` is there and allows no action
    (``check_action_mask(..., allow_empty=True)`` gives None), and every other field but those
    one value per response describes (``SHARED_FIELDS``: the stamps and ``policy_version``) is
    None (no policy was asked, so no value or log_prob exists).
    """
    mask = fields.get("action_mask")
    if mask is None or (
        check_action_mask(
            space,
            mask,
            subject=f"{subject}action_mask",
            layout="gymnasium" if isinstance(mask, tuple) else "flat",
            allow_empty=True,
        )
        is not None
    ):
        raise rule_error(
            ValueError,
            "action-in-space",
            f"{subject}action",
            f"is None, which only an agent whose action_mask allows no action may have "
            f"(it waits); otherwise it must be in {space}",
            None,
        )
    made_up = [
        name
        for name, value in fields.items()
        if value is not None
        and name not in ("action", "action_mask", "env_id")
        and name not in SHARED_FIELDS
    ]
    if made_up:
        raise rule_error(
            ValueError,
            "no-legal-action",
            subject.rstrip(),
            f"waits (action None: its mask allows no action) but has policy outputs {made_up}",
            {name: fields[name] for name in made_up},
            fix="a waiting agent has no value, log_prob or buffer_action: give it None",
        )


# ---------------------------------------------------------------------------- public checkers
def check_policy_response(response: PolicyResponse, action_space: spaces.Space[Any]) -> None:
    """Check a single-agent response against the action space of the env it is for.

    Rules (ids from :data:`RULES`): ``response-type``, ``env-id``, ``has-action``,
    ``action-in-space`` (gymnasium's ``action_space.contains(response.action)``), ``action-mask``
    and ``no-legal-action`` (when ``action_mask`` is present and the space is Discrete,
    MultiDiscrete or MultiBinary: :func:`rlightning.rules.mask_violation`, a tuple read in
    gymnasium's layout and an array in sb3-contrib's flat one), ``scalar-field`` (``value``,
    ``log_prob``),
    ``buffer-action`` (Box spaces) and ``timestamp`` (every stamp of
    :data:`rlightning.rules.STAMP_FIELDS`: ``ts_env_sent_ns``, ``ts_policy_recv_ns``,
    ``ts_infer_start_ns``, ``ts_policy_sent_ns``).
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
    check_response_type(response, multi_agent=False)
    _check_space(action_space, "action_space")
    fields = response.__dict__
    check_env_id(fields.get("env_id"), "response.env_id")
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
        live_agents: The agents that must have an action now and the only ones that may:
            ``env.agents`` of a parallel env, as ``rlightning_pettingzoo.to_parallel_actions``
            reads it (:func:`rlightning.rules.check_live_agents`). An agent whose action mask
            allows no action is live too: it waits, with the action None (rule
            ``no-legal-action``: the waiting player of a turn-based game in parallel form, whose
            action ``turn_based_aec_to_parallel`` never reads). None skips the two liveness
            rules.

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
        ValueError: response.action lacks live agent(s) ['b']; got {'a': 1}; expected an action for every live agent ['a', 'b'] [rule live-agents]
    """  # noqa: E501  (doctest output is one line)
    check_response_type(response, multi_agent=True)
    if not isinstance(action_spaces, Mapping):
        raise TypeError(
            "action_spaces must be a mapping {agent_id: gymnasium.Space}, got "
            f"{type(action_spaces).__name__}"
        )
    for agent, space in action_spaces.items():
        _check_space(space, f"action_spaces[{agent!r}]")
    fields = response.__dict__
    check_env_id(fields.get("env_id"), "response.env_id")
    _check_stamps(fields, "response.")
    actions: dict[Any, Any] = fields["action"]
    check_known_agents(actions, action_spaces)
    check_per_agent_keys(fields, actions.keys(), known_agents=action_spaces.keys())
    if live_agents is not None:
        check_live_agents(actions, live_agents)
    for agent in actions:
        view = response.for_agent(agent).__dict__
        if view["action"] is None:
            _check_waiting(view, action_spaces[agent], f"agent {agent!r} ")
        else:
            _check_fields(view, action_spaces[agent], f"agent {agent!r} ")
