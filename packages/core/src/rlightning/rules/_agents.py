"""The multi-agent rules: which agents a response answers for, and its per-agent fields (private).

``known-agent``, ``live-agents``, ``no-inactive-action`` and ``per-agent-keys``. Import these
names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from rlightning.rules._errors import rule_error


# ---------------------------------------------------------------------------- known-agent
def check_known_agents(
    actions: Mapping[Any, Any], action_spaces: Mapping[Any, Any], subject: str = "response.action"
) -> None:
    """Check that every agent with an action has an action space (rule ``known-agent``).

    Args:
        actions: ``{agent_id: action}``.
        action_spaces: ``{agent_id: space}`` (for PettingZoo, every agent of
            ``env.possible_agents``).
        subject: The actions, named in messages.

    Raises:
        ValueError: an agent has no space (the agents named; rule ``known-agent``).

    Examples:
        >>> check_known_agents({"a": 1, "z": 0}, {"a": None})
        Traceback (most recent call last):
        ...
        ValueError: response.action has agent(s) ['z'] with no action space (spaces for ['a']); got {'a': 1, 'z': 0} [rule known-agent]
    """  # noqa: E501  (doctest output is one line)
    unknown = [agent for agent in actions if agent not in action_spaces]
    if unknown:
        raise rule_error(
            ValueError,
            "known-agent",
            subject,
            f"has agent(s) {unknown} with no action space (spaces for {list(action_spaces)})",
            actions,
        )


# ---------------------------------------------------------------------------- live agents
def check_live_agents(
    actions: Mapping[Any, Any],
    live_agents: Collection[Any],
    *,
    subject: str = "response.action",
    allow_inactive: bool = False,
    expected: str | None = None,
    inactive_fix: str | None = None,
) -> list[Any]:
    """Check that the actions are for exactly the live agents (``live-agents``, ``no-inactive-action``).

    PettingZoo's parallel ``step`` takes one action for every agent of ``env.agents`` (None
    for an agent that waits: its mask allows no action, rule ``no-legal-action``) and none for
    an agent that is not live (terminated, truncated or unknown); in an AEC env the live agent
    is ``env.agent_selection`` alone, and actions for the others are ignored
    (``allow_inactive``).

    Args:
        actions: ``{agent_id: action}``; not modified.
        live_agents: The agents that must act now (``env.agents``, ``[env.agent_selection]``).
        subject: The actions, named in messages (``"simple_spread_v3: response.action"``).
        allow_inactive: Return the actions for agents that are not live instead of raising
            (the caller drops them, and says so).
        expected: What a live agent needs, said when one has no action (default: ``"an action
            for every live agent {live}"``).
        inactive_fix: How to fix actions for agents that are not live, said in that error.

    Returns:
        The agents with an action that are not live, in ``actions`` order (empty unless
        ``allow_inactive``).

    Raises:
        ValueError: a live agent has no action (rule ``live-agents``), or, unless
            ``allow_inactive``, an agent that is not live has one (rule
            ``no-inactive-action``); the agents are named.

    Examples:
        >>> check_live_agents({"a": 1}, ["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: response.action lacks live agent(s) ['b']; got {'a': 1}; expected an action for every live agent ['a', 'b'] [rule live-agents]
    """  # noqa: E501  (doctest output is one line)
    live = list(live_agents)
    missing = [agent for agent in live if agent not in actions]
    if missing:
        raise rule_error(
            ValueError,
            "live-agents",
            subject,
            f"lacks live agent(s) {missing}",
            actions,
            expected=expected or f"an action for every live agent {live}",
        )
    live_set = set(live)
    inactive = [agent for agent in actions if agent not in live_set]
    if inactive and not allow_inactive:
        raise rule_error(
            ValueError,
            "no-inactive-action",
            subject,
            f"has action(s) for agent(s) {inactive} that are not live (live: {live})",
            actions,
            fix=inactive_fix
            or "drop them: a terminated, truncated or unknown agent takes no action",
        )
    return inactive


# ---------------------------------------------------------------------------- per-agent keys
def check_per_agent_field(
    name: str,
    value: Any,
    agents: Collection[Any],
    *,
    known_agents: Collection[Any] | None = None,
    subject: str = "response.",
    setting_action: bool = False,
    declared: bool = False,
) -> None:
    """Check one field of a multi-agent response against its agents (rule ``per-agent-keys``).

    A field is per-agent when it is a dict whose keys are exactly ``agents`` (the keys of
    ``action``); any other field is shared by all agents. A non-empty dict whose keys are all
    agent ids but not exactly ``agents`` would be read as shared, handing every agent the whole
    dict (``for_agent("b").log_prob`` would be ``{"a": -0.1}``): it is refused. Agent ids are
    ``agents`` and, when known, ``known_agents`` (an env's possible agents: a dict keyed by an
    agent that has left is stale, not shared). A dict with a key that is not an agent id
    (``info={"team": "red"}``) is shared, and so is an empty one.

    Args:
        name: The field's name (``action`` itself is never checked).
        value: Its value; only a dict is checked.
        agents: The agent ids of ``action`` (its keys).
        known_agents: Other agent ids, or None.
        subject: Prefix naming the response in messages.
        setting_action: ``agents`` are those of an ``action`` being set (said in the message).
        declared: The caller declares ``value`` per-agent (``rlightning_pettingzoo``'s
            ``from_parallel_actions(actions, **per_agent_fields)``): then any mapping not keyed
            by exactly ``agents`` is refused, whatever its keys.

    Raises:
        ValueError: ``value`` is keyed by agent ids (or, ``declared``, is a mapping) but not by
            exactly ``agents`` (the field, the missing and the extra agents named; rule
            ``per-agent-keys``).

    Examples:
        >>> check_per_agent_field("log_prob", {"a": -0.1}, {"a": 0, "b": 1}.keys())
        Traceback (most recent call last):
        ...
        ValueError: response.log_prob is keyed by agent ids but not by exactly action's agents ['a', 'b']: missing ['b'], extra [], so it would be read as shared by all agents and for_agent('b') would get the whole dict; got {'a': -0.1}; fix: give every agent of action an entry (None for an agent that has none), or rekey a dict meant to be shared by all agents [rule per-agent-keys]
    """  # noqa: E501  (doctest output is one line)
    own = _set_like(agents)
    if declared and isinstance(value, Mapping):
        if value.keys() != own:
            _refuse_partial(name, value, agents, subject, setting_action, declared=True)
        return
    if name == "action" or not isinstance(value, dict) or not value:
        return
    keys = value.keys()
    if keys != own and keys <= (own if known_agents is None else set(own).union(known_agents)):
        _refuse_partial(name, value, agents, subject, setting_action)


def check_per_agent_keys(
    fields: Mapping[str, Any],
    agents: Collection[Any],
    *,
    known_agents: Collection[Any] | None = None,
    subject: str = "response.",
    setting_action: bool = False,
) -> None:
    """Check every field of a multi-agent response against its agents (rule ``per-agent-keys``).

    :func:`check_per_agent_field` on each field, in order.

    Args:
        fields: The fields (``response.__dict__``, or the keyword fields of a constructor).
        agents: The agent ids of ``action`` (its keys).
        known_agents: Other agent ids, or None.
        subject: Prefix naming the response in messages.
        setting_action: ``agents`` are those of an ``action`` being set.

    Raises:
        ValueError: a field is keyed by agent ids but not by exactly ``agents`` (rule
            ``per-agent-keys``).

    Examples:
        >>> actions = {"a": 0, "b": 1}
        >>> check_per_agent_keys({"value": {"a": 0.1, "b": 0.2}, "info": {"team": 1}}, actions)
        >>> check_per_agent_keys({"value": {"a": 0.1, "c": 0.2}}, actions, known_agents=["c"])
        Traceback (most recent call last):
        ...
        ValueError: response.value is keyed by agent ids but not by exactly action's agents ['a', 'b']: missing ['b'], extra ['c'], so it would be read as shared by all agents and for_agent('b') would get the whole dict; got {'a': 0.1, 'c': 0.2}; fix: give every agent of action an entry (None for an agent that has none), or rekey a dict meant to be shared by all agents [rule per-agent-keys]
    """  # noqa: E501  (doctest output is one line)
    own = _set_like(agents)
    known = own if known_agents is None else set(own).union(known_agents)
    for name, value in fields.items():
        if isinstance(value, dict) and name != "action":
            keys = value.keys()
            if keys and keys != own and keys <= known:
                _refuse_partial(name, value, agents, subject, setting_action)


_KEYS_VIEW: type = type({}.keys())


def _set_like(agents: Collection[Any]) -> AbstractSet[Any]:
    """``agents`` as a set-like collection (a dict's keys view is one already: no copy)."""
    if type(agents) is _KEYS_VIEW or isinstance(agents, AbstractSet):
        return agents  # type: ignore[return-value]  # a keys view is a Set
    return set(agents)


def _refuse_partial(
    name: str,
    value: Mapping[Any, Any],
    agents: Collection[Any],
    subject: str,
    setting_action: bool,
    *,
    declared: bool = False,
) -> None:
    present = value.keys()
    order = list(agents)
    missing = [agent for agent in order if agent not in present]
    extra = [agent for agent in present if agent not in agents]
    when = "the new action's agents" if setting_action else "action's agents"
    if declared:
        raise rule_error(
            ValueError,
            "per-agent-keys",
            f"{subject}{name}",
            f"is a per-agent field but not keyed by exactly {when} {order}: missing {missing}, "
            f"extra {extra}",
            value,
            fix="give every agent of action an entry (None for an agent that has none)",
        )
    reader = (missing or order)[0]
    raise rule_error(
        ValueError,
        "per-agent-keys",
        f"{subject}{name}",
        f"is keyed by agent ids but not by exactly {when} {order}: missing {missing}, extra "
        f"{extra}, so it would be read as shared by all agents and for_agent({reader!r}) would "
        "get the whole dict",
        value,
        fix="give every agent of action an entry (None for an agent that has none), or rekey a "
        "dict meant to be shared by all agents",
    )
