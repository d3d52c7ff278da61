"""PettingZoo's parallel API: ``{agent_id: action}`` dicts to and from responses.

The rules followed (PettingZoo docs, "Parallel API"; ``pettingzoo.test.parallel_api_test``):

* ``step(actions)`` takes one action per *live* agent, the agents in ``env.agents`` at the time of
  the call. Live agents are read from ``env.agents``, never from the keys of the last
  observations: an env may put extra keys in its observation dict, and an agent that has just
  terminated still has a final observation.
* An agent that terminated or truncated leaves ``env.agents`` and takes no further action.
* Each action is an element of ``env.action_space(agent)`` (gymnasium's ``Space.contains``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from operator import index
from typing import Any

from pettingzoo import ParallelEnv
from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.rules import (
    SHARED_FIELDS,
    STAMP_FIELDS,
    MaskLayout,
    check_action,
    check_action_mask,
    check_live_agents,
    check_per_agent_field,
    describe,
    response_type_error,
)
from rlightning_pettingzoo._checks import _CACHES as _CHECKER_CACHES
from rlightning_pettingzoo._checks import cache_entry, checker_cache
from rlightning_pettingzoo._envs import describe_env, require_parallel

__all__ = ["InactiveAgentActionWarning", "from_parallel_actions", "to_parallel_actions"]


class InactiveAgentActionWarning(UserWarning):
    """Emitted when ``to_parallel_actions(..., drop_inactive=True)`` drops actions.

    The message names the env, the response's ``env_id`` and the dropped agents; the same facts
    are attributes, for code that records warnings (``warnings.catch_warnings(record=True)``).
    Filter it like any warning: ``warnings.simplefilter("ignore", InactiveAgentActionWarning)``
    to silence it, ``"error"`` to turn drops into exceptions.

    Attributes:
        agents: The agents whose actions were dropped, in the response's order.
        env_id: The response's ``env_id``.
    """

    def __init__(self, message: str, agents: tuple[Any, ...], env_id: str | None) -> None:
        super().__init__(message)
        self.agents = agents
        self.env_id = env_id


def to_parallel_actions(
    response: MultiAgentPolicyResponse, env: Any, *, drop_inactive: bool = False
) -> dict[Any, Any]:
    """Return the ``{agent_id: action}`` dict a parallel env's ``step`` takes.

    Checks, in order (rule ids as in :data:`rlightning.rules.RULES`):

    1. ``live-agents``: every agent of ``env.agents`` has an action in ``response.action``.
    2. ``no-inactive-action``: no action is given for an agent outside ``env.agents`` (one that
       terminated, truncated or never existed). With ``drop_inactive=True`` such actions are
       dropped instead, and the drop is reported by one :class:`InactiveAgentActionWarning`
       per call naming the agents (nothing is dropped silently). Use it for a policy that answers
       for a fixed set of agents (e.g. ``env.possible_agents``) while agents leave mid-episode.
    3. ``action-in-space``: each action is in ``env.action_space(agent)``, exactly as gymnasium's
       ``Space.contains`` decides (so a float64 array for a float32 Box is refused: cast it).
       The one exception is ``no-legal-action``: an agent whose action is None and whose
       ``response.action_mask`` allows no action waits (the waiting player of a turn-based game
       in parallel form: ``turn_based_aec_to_parallel`` reads only ``agent_selection``'s
       action), and None is passed for it.

    Args:
        response: The policy's answer; it is not modified.
        env: A PettingZoo ``ParallelEnv`` after ``reset``.
        drop_inactive: Drop (with a warning) actions for agents that are not live, instead of
            raising.

    Returns:
        A new dict ``{agent_id: action}`` with exactly the agents of ``env.agents``, in that order;
        the action objects are the response's own (not copied). Empty when no agent is live.

    Raises:
        TypeError: ``response`` is not a :class:`MultiAgentPolicyResponse` (the message says how
            to make one: ``MultiAgentPolicyResponse(env_id, action={agent: action, ...})``, or
            :meth:`MultiAgentPolicyResponse.from_agents` from one single-agent
            :class:`~rlightning.PolicyResponse` per agent) or ``env`` is not a PettingZoo
            ``ParallelEnv``.
        ValueError: a live agent has no action (the message names the missing agents), an
            inactive agent has one and ``drop_inactive`` is False (names it), or an action is not
            in its agent's action space (names the agent, the space and the value).

    Examples:
        >>> from mpe2 import simple_spread_v3
        >>> env = simple_spread_v3.parallel_env()
        >>> _ = env.reset(seed=0)
        >>> response = MultiAgentPolicyResponse("env-0", action={a: 1 for a in env.agents})
        >>> to_parallel_actions(response, env)
        {'agent_0': 1, 'agent_1': 1, 'agent_2': 1}
    """
    if not isinstance(response, MultiAgentPolicyResponse):
        raise response_type_error(response, multi_agent=True, fix=_how_to_make(response))
    if not isinstance(env, ParallelEnv):
        require_parallel(env, "to_parallel_actions()")  # raises the TypeError
    live = env.agents
    if type(live) is not list:
        live = list(live)
    actions: dict[Any, Any] = response.action
    if len(actions) == len(live):
        # Fast path: one pass, cached checkers (rlightning_pettingzoo._checks). Anything amiss
        # (a missing agent, an action not in its space) leaves it for the checked path below,
        # which raises the error in the documented order. This runs on every step: with few
        # agents, its fixed cost (lookups, calls) is most of its cost.
        action_space = env.action_space
        checkers = _CHECKER_CACHES.get(id(env))  # checker_cache(env), minus a call
        if checkers is None:
            checkers = checker_cache(env)
        out: dict[Any, Any] = {}
        for agent in live:
            if agent not in actions:
                break
            action = actions[agent]
            space = action_space(agent)
            entry = checkers.get(agent)
            if entry is None or entry[0] is not space:
                entry = checkers[agent] = cache_entry(space)
            # The checker's int fast path inline (_checks.int_ranges), sparing a call per agent;
            # any other value, or one outside the range, is the checker's to decide.
            try:
                bounds = entry[2].get(type(action))
            except TypeError:  # a class that cannot be hashed: the checker decides
                bounds = None
            if bounds is None or not bounds[0] <= index(action) <= bounds[1]:  # noqa: SIM102
                if not entry[1](action):
                    break
            out[agent] = action
        else:
            if len(out) == len(actions):  # (env.agents repeating an id would leave one out)
                return out
    return _checked_parallel_actions(response, env, drop_inactive)


def _checked_parallel_actions(
    response: MultiAgentPolicyResponse, env: Any, drop_inactive: bool
) -> dict[Any, Any]:
    """The checks of :func:`to_parallel_actions` one by one, each failure with its own error.

    The liveness rules are :func:`rlightning.rules.check_live_agents` (``env.agents`` is the
    live set, a waiting agent included), the membership rule
    :func:`rlightning.rules.check_action`.
    """
    live = list(env.agents)
    actions: dict[Any, Any] = response.action
    where = f"{describe_env(env)} (response env_id={response.env_id!r})"
    inactive = tuple(
        check_live_agents(
            actions,
            live,
            subject=f"{where}: response.action",
            allow_inactive=drop_inactive,
            expected=f"an action for every agent of env.agents {live} (a parallel step() takes "
            "one for each; None for an agent that waits)",
            inactive_fix="drop them (a terminated, truncated or unknown agent takes no action), "
            "or pass drop_inactive=True",
        )
    )
    if inactive:
        warnings.warn(
            InactiveAgentActionWarning(
                f"{where}: dropped action(s) for agent(s) {list(inactive)}, not in env.agents",
                inactive,
                response.env_id,
            ),
            stacklevel=3,  # the caller of to_parallel_actions()
        )
    out: dict[Any, Any] = {}
    masks = response.__dict__.get("action_mask")
    for agent in live:
        action = actions[agent]
        space = env.action_space(agent)
        if action is None and _waits(space, masks, agent):
            out[agent] = None  # no legal action: the agent waits (rule no-legal-action)
            continue
        check_action(space, action, f"{where}: action for agent {agent!r}")
        out[agent] = action
    return out


def _waits(space: Any, masks: Any, agent: Any) -> bool:
    """Whether the response's ``action_mask`` of ``agent`` allows no action (it waits)."""
    if not isinstance(masks, dict) or masks.get(agent) is None:
        return False
    mask = masks[agent]
    layout: MaskLayout = "gymnasium" if isinstance(mask, tuple) else "flat"
    subject = f"response.action_mask[{agent!r}]"
    return check_action_mask(space, mask, subject=subject, layout=layout, allow_empty=True) is None


def from_parallel_actions(
    actions: Mapping[Any, Any], env_id: str | None = None, **per_agent_fields: Mapping[Any, Any]
) -> MultiAgentPolicyResponse:
    """Build a response from a ``{agent_id: action}`` dict (and other per-agent dicts).

    The inverse of :func:`to_parallel_actions`: use it to wrap actions that came from elsewhere
    (a scripted policy, a replay, another framework) so they travel as a response.

    Args:
        actions: ``{agent_id: action}``; copied into a new dict (the actions themselves are not
            copied).
        env_id: The response's ``env_id``.
        **per_agent_fields: Other per-agent fields, each a mapping keyed by exactly the agents of
            ``actions`` (e.g. ``log_prob={...}``); each is copied into a new dict. Not
            ``action`` (the actions are the first argument) and not the timing stamps
            ``ts_env_sent_ns`` / ``ts_policy_sent_ns``, which are one value per response, never
            per agent (as :meth:`MultiAgentPolicyResponse.from_agents` requires): stamp the
            returned response instead (``response.ts_env_sent_ns = ...``, ``mark_policy_sent()``).

    Returns:
        A new :class:`MultiAgentPolicyResponse`.

    Raises:
        TypeError: ``actions`` or a field is not a mapping, a field is named ``action`` (it
            would replace ``actions``), or ``env_id`` is neither a str nor None.
        ValueError: a field's agents differ from those of ``actions`` (names the field and the
            missing and extra agents), a field is a timing stamp, or a field name is reserved.

    Examples:
        >>> r = from_parallel_actions({"a": 0, "b": 1}, "env-0", log_prob={"a": -0.1, "b": -0.2})
        >>> r.for_agent("b")
        PolicyResponse(env_id='env-0', action=1, log_prob=-0.2)
    """
    if not isinstance(actions, Mapping):
        raise TypeError(
            f"actions must be a mapping {{agent_id: action}}, got {type(actions).__name__}"
        )
    if "action" in per_agent_fields:
        raise TypeError(
            "from_parallel_actions() got the actions twice: as actions "
            f"{list(actions)} and as the per-agent field action= "
            f"{describe(per_agent_fields['action'])}; pass them once, as the first argument"
        )
    shared = sorted(SHARED_FIELDS.intersection(per_agent_fields))
    if shared:
        name = shared[0]
        what = (
            "a timing stamp, one value per response (nanoseconds since the epoch)"
            if name in STAMP_FIELDS
            else "one value per response (the policy weights that produced it)"
        )
        raise ValueError(
            f"{name!r} is {what}, not a per-agent field; got "
            f"{describe(per_agent_fields[name])}. Per-agent values would make the latency "
            "methods return 0.0 and break MultiAgentPolicyResponse.from_agents, which shares "
            "them (rlightning.rules.SHARED_FIELDS); set it on the returned response instead "
            f"(response.{name} = ..., response.mark_policy_sent())"
        )
    data: dict[str, Any] = {"action": dict(actions)}
    agents = actions.keys()
    for name, field in per_agent_fields.items():
        if not isinstance(field, Mapping):
            raise TypeError(
                f"per-agent field {name!r} must be a mapping {{agent_id: value}}, "
                f"got {type(field).__name__}"
            )
        check_per_agent_field(
            name, field, agents, subject="from_parallel_actions(): ", declared=True
        )
        data[name] = dict(field)
    return MultiAgentPolicyResponse(env_id, **data)


_HOW = (
    "make one with MultiAgentPolicyResponse(env_id, action={agent: action, ...}) (one action "
    "per agent of env.agents; other fields per-agent as dicts keyed by the same agents), or "
    "MultiAgentPolicyResponse.from_agents(env_id, {agent: response, ...}) from one "
    "single-agent PolicyResponse per agent"
)


def _how_to_make(
    response: object,
    why: str = (
        "a parallel env steps every agent at once, so the response needs one action per agent"
    ),
) -> str:
    """The fix of rule ``response-type`` for a response that is not multi-agent.

    Used by :func:`to_parallel_actions` and ``aec_action``.

    Args:
        response: What was given instead of a :class:`MultiAgentPolicyResponse`.
        why: Why the caller needs a multi-agent response (said for a single-agent one).

    Returns:
        How to make a multi-agent response from it.
    """
    if isinstance(response, PolicyResponse):
        return f"{why}; {_HOW}"
    return _HOW
