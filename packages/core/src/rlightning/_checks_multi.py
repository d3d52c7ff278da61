"""The multi-agent rules of ``rlightning.testing`` (see :data:`rlightning.rules.RULES`).

``known-agent``, ``per-agent-keys``, ``live-agents`` and ``no-inactive-action``, applied by
:func:`rlightning.testing.check_multi_agent_policy_response` in that order. Private: use that
checker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gymnasium import spaces

from rlightning.rules import rule_error


def _action_error(rule: str, problem: str, actions: Mapping[Any, Any]) -> Exception:
    return rule_error(ValueError, rule, "response.action", problem, actions)


def _check_known_agents(
    actions: Mapping[Any, Any], action_spaces: Mapping[Any, spaces.Space[Any]]
) -> None:
    unknown = [a for a in actions if a not in action_spaces]
    if unknown:
        raise _action_error(
            "known-agent",
            f"has agent(s) {unknown} with no action space (spaces for {list(action_spaces)})",
            actions,
        )


def _check_per_agent_keys(
    fields: Mapping[str, Any],
    actions: Mapping[Any, Any],
    action_spaces: Mapping[Any, spaces.Space[Any]],
) -> None:
    agent_keys = actions.keys()
    known = set(action_spaces).union(agent_keys)
    for name, value in fields.items():
        if name == "action" or not isinstance(value, dict) or not value:
            continue
        keys = value.keys()
        if keys != agent_keys and known.issuperset(keys):
            missing = [a for a in actions if a not in keys]
            extra = [a for a in keys if a not in agent_keys]
            raise rule_error(
                ValueError,
                "per-agent-keys",
                f"response.{name}",
                f"is keyed by agents but not by exactly those of action: missing {missing}, "
                f"extra {extra}",
                value,
            )


def _check_live_agents(actions: Mapping[Any, Any], live_agents: Collection[Any]) -> None:
    live = list(live_agents)
    missing = [a for a in live if a not in actions]
    if missing:
        raise _action_error("live-agents", f"lacks live agent(s) {missing}", actions)
    inactive = [a for a in actions if a not in live]
    if inactive:
        raise _action_error(
            "no-inactive-action",
            f"has action(s) for agent(s) {inactive} that are not live (live: {live})",
            actions,
        )
