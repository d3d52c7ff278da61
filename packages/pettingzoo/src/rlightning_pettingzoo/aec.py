"""PettingZoo's AEC (agent environment cycle) API: the one action ``env.step`` takes next.

The rules followed (PettingZoo docs, "AEC API"; ``pettingzoo.test.api_test.play_test``;
``AECEnv._was_dead_step``):

* ``step(action)`` acts for ``env.agent_selection`` only, the agent ``agent_iter()`` just yielded.
* When that agent is terminated or truncated, the only valid action is ``None``: that step removes
  the agent (``_was_dead_step``); any other value is an error in PettingZoo.
* A live agent's action is an element of ``env.action_space(agent)`` and, where the env gives a
  mask (``observe(agent)["action_mask"]`` or ``infos[agent]["action_mask"]``), one the mask
  allows: classic games end the game with a penalty on an illegal move
  (``TerminateIllegalWrapper``).
"""

from __future__ import annotations

from typing import Any

from rlightning import MultiAgentPolicyResponse
from rlightning.rules import (
    check_action,
    check_action_allowed,
    check_live_agents,
    response_type_error,
    takes_action_mask,
)
from rlightning_pettingzoo._envs import aec_acting_agent, describe_env, require_aec
from rlightning_pettingzoo.masks import find_action_mask
from rlightning_pettingzoo.parallel import _how_to_make

__all__ = ["aec_action"]


def aec_action(
    response: MultiAgentPolicyResponse | None, env: Any, *, check_mask: bool = True
) -> Any | None:
    """Return the action to pass to an AEC env's ``step`` for ``env.agent_selection``.

    Typical loop (whole games of ``tictactoe_v3``, ``connect_four_v3``, ``rps_v2``)::

        env.reset(seed=0)
        for agent in env.agent_iter():
            observation, reward, termination, truncation, info = env.last()
            response = respond(env, {agent: observation}, policies, infos={agent: info})
            env.step(aec_action(response, env))

    Args:
        response: The policy's answer, holding at least the selected agent's action (actions for
            other agents are ignored: in AEC only ``env.agent_selection`` acts). May be None, or
            lack the agent, when the agent is terminated or truncated. Not modified.
        env: A PettingZoo ``AECEnv`` after ``reset``.
        check_mask: Also check the action against the agent's current action mask (read with
            ``env.observe(agent)`` and ``env.infos``, see :func:`find_action_mask`), so an
            illegal move is an error here instead of a lost game. Costs one ``observe`` call.

    Returns:
        None when ``env.agent_selection`` is terminated or truncated (as PettingZoo requires;
        whatever action the response holds for it is not sent); otherwise the response's action
        for that agent (the object itself, not a copy).

    Raises:
        TypeError: ``env`` is not a PettingZoo ``AECEnv``, or ``response`` is neither a
            :class:`MultiAgentPolicyResponse` nor (for a finished agent) None.
        ValueError: the game is over (``env.agents`` is empty: call ``env.reset()``),
            ``env.agent_selection`` is not in ``env.agents``, the selected live agent has no
            action in the response, the action is not in its action space (names the agent,
            space and value), or, with ``check_mask``, the env's mask is malformed (rule
            ``action-mask``, see ``sample_response``) or forbids the action.
    """
    env = require_aec(env, "aec_action()")
    agent = aec_acting_agent(env)
    if agent is None:
        if response is not None and not isinstance(response, MultiAgentPolicyResponse):
            raise response_type_error(
                response,
                multi_agent=True,
                subject="response for a finished agent",
                fix="pass None (a terminated or truncated agent steps None) or a "
                "MultiAgentPolicyResponse",
            )
        return None
    if not isinstance(response, MultiAgentPolicyResponse):
        raise response_type_error(
            response,
            multi_agent=True,
            subject=f"response for live agent {agent!r}",
            fix=_how_to_make(
                response,
                why=f"an AEC env's response holds the acting agent's action keyed by its id "
                f"(action={{{agent!r}: ...}})",
            ),
        )
    actions: dict[Any, Any] = response.action
    where = _where(env, response)
    # Rule live-agents with env.agent_selection the one live agent; the others' actions are
    # ignored (allow_inactive): in AEC only env.agent_selection acts.
    check_live_agents(
        actions,
        [agent],
        subject=f"{where}: response.action",
        allow_inactive=True,
        expected=f"an action for agent {agent!r}, the env.agent_selection that acts now",
    )
    action = actions[agent]
    space = env.action_space(agent)
    check_action(space, action, f"{where}: action for agent {agent!r}")
    if check_mask and takes_action_mask(space):
        mask = find_action_mask(agent, {agent: env.observe(agent)}, env.infos)
        if mask is not None:
            check_action_allowed(
                space,
                mask,
                action,
                layout="gymnasium",
                subject=f"{where}: agent {agent!r} action",
                mask_subject=f"action mask of agent {agent!r}",
            )
    return action


def _where(env: Any, response: MultiAgentPolicyResponse) -> str:
    """The env and response an error message is about (built only when raising)."""
    return f"{describe_env(env)} (response env_id={response.env_id!r})"
