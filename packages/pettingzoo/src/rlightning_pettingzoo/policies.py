"""Policies for PettingZoo agents: one per agent, or one shared by all, as one response.

:func:`respond` asks each agent's own policy; :class:`SharedPolicyAdapter` runs one model for all
homogeneous agents in one batched forward pass. Both answer with one
:class:`MultiAgentPolicyResponse`.

Which agents act follows PettingZoo: every agent of ``env.agents`` in a parallel env, only
``env.agent_selection`` (and none once it is terminated or truncated) in an AEC env. Agents that
have left never get an action.

A policy is either a Stable-Baselines3 model (``PPO``, ``A2C``, ``DQN``, ``SAC``, ``TD3``,
sb3-contrib's ``MaskablePPO``, ...: any ``BaseAlgorithm``), driven through
:class:`rlightning_sb3.SB3PolicyAdapter` (the ``[sb3]`` extra; SB3's semantics live in
``rlightning_sb3`` only), or a callable ``(observation) -> action | PolicyResponse``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.rules import check_env_id, check_env_id_matches, check_flag, check_has_action
from rlightning_pettingzoo._envs import aec_acting_agent, describe_env, is_aec, require_parallel
from rlightning_pettingzoo._sb3 import (
    is_sb3_model,
    observation_shape_mismatch,
    predict_values,
    sb3_rows,
)
from rlightning_pettingzoo.masks import _checked_action_mask, find_action_mask

__all__ = ["Policy", "SharedPolicyAdapter", "respond"]

#: A per-agent policy: an SB3 model, or a callable ``(observation) -> action | PolicyResponse``.
Policy = Any


def _acting_agents(env: Any) -> list[Any]:
    """The agents that act now: ``env.agents`` (parallel) or the live selected agent (AEC)."""
    if is_aec(env):
        agent = aec_acting_agent(env)
        return [] if agent is None else [agent]
    return list(env.agents)


def _require_entries(
    mapping: Mapping[Any, Any], agents: Sequence[Any], what: str, env: Any
) -> None:
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must be a mapping {{agent_id: ...}}, got {type(mapping).__name__}")
    missing = [agent for agent in agents if agent not in mapping]
    if missing:
        raise ValueError(
            f"{what} has no entry for acting agent(s) {missing} of {describe_env(env)}; "
            f"it has {list(mapping)}"
        )


def _call_policy(
    policy: Callable[[Any], Any], agent: Any, observation: Any, env_id: str | None
) -> dict[str, Any]:
    answer = policy(observation)
    if isinstance(answer, MultiAgentPolicyResponse):
        raise TypeError(
            f"policy for agent {agent!r} returned a MultiAgentPolicyResponse; a per-agent policy "
            "returns an action or a single-agent PolicyResponse"
        )
    if isinstance(answer, PolicyResponse):
        subject = f"the PolicyResponse the policy for agent {agent!r} returned"
        check_env_id_matches(answer.env_id, env_id, subject)
        fields = answer.to_dict()
        check_has_action(fields, subject)
        return fields
    return {"action": answer}


def _assemble(
    env_id: str | None, agents: Sequence[Any], per_agent: Mapping[Any, dict[str, Any]]
) -> MultiAgentPolicyResponse:
    """Per-agent dicts for every field any agent has (None where an agent lacks it)."""
    names: dict[str, None] = {"action": None}
    for fields in per_agent.values():
        names.update(dict.fromkeys(fields))
    data = {name: {a: per_agent[a].get(name) for a in agents} for name in names}
    return MultiAgentPolicyResponse(env_id, **data)


_WAITS = object()  # marks an agent whose mask allows no action (see _checked_masks)


def _checked_masks(agents: Sequence[Any], masks: Sequence[Any], env: Any) -> list[Any]:
    """Each found mask checked against its agent's action space (rule ``action-mask``).

    Returns the masks in gymnasium's format (int8), None where an agent has none, and
    :data:`_WAITS` where the mask allows no action (rule ``no-legal-action``: the agent cannot
    act now, so no policy is asked and its action is None); raises the ValueError of
    ``_checked_action_mask`` naming the agent for a malformed one (a 0.5, NaN or 2 entry, a
    wrong length), which ``np.asarray(mask, dtype=bool)`` would otherwise turn into "allowed"
    or a bare reshape error inside sb3-contrib.
    """
    if all(mask is None for mask in masks):
        return list(masks)
    action_space = env.action_space
    out: list[Any] = []
    for agent, mask in zip(agents, masks, strict=True):
        if mask is None:
            out.append(None)
            continue
        checked = _checked_action_mask(action_space(agent), mask, agent, env)
        out.append(_WAITS if checked is None else checked)
    return out


def _sb3_rows(
    env: Any,
    model: Any,
    agents: Sequence[Any],
    observations: Sequence[Any],
    masks: Sequence[Any],
    det: bool,
) -> dict[Any, dict[str, Any]]:
    """One batched call of the model for ``agents``; row ``i`` goes to ``agents[i]``.

    When the batch cannot be built or SB3 refuses it (a ValueError: ``np.stack`` of differing
    shapes, SB3's "Unexpected observation shape"), the agent at fault is looked for and named
    (:func:`_observation_culprit`); the per-step path pays nothing for this.
    """
    try:
        return sb3_rows(
            model, agents, observations, masks, env.action_space(agents[0]), deterministic=det
        )
    except ValueError as error:
        culprit = _observation_culprit(env, model, agents, observations)
        if culprit is None:
            raise
        raise ValueError(culprit) from error


def _observation_culprit(
    env: Any, model: Any, agents: Sequence[Any], observations: Sequence[Any]
) -> str | None:
    """The message naming the first agent whose observation (or space) does not fit, or None."""
    from rlightning_sb3 import observation_space_mismatch

    model_space = model.observation_space
    for agent, observation in zip(agents, observations, strict=True):
        space = env.observation_space(agent)
        reason = observation_shape_mismatch(space, observation)
        if reason is not None:
            return (
                f"observation of agent {agent!r} of {describe_env(env)} does not fit "
                f"observation_space({agent!r}) {space}: {reason} (PettingZoo: an agent's "
                "observation is an element of env.observation_space(agent))"
            )
        reason = observation_space_mismatch(space, model_space)
        if reason is not None:
            return _model_space_message(env, agent, space, model, reason)
    return None


def _model_space_message(env: Any, agent: Any, space: Any, model: Any, reason: str) -> str:
    return (
        f"agent {agent!r} of {describe_env(env)} observes {space}, but the model "
        f"({type(model).__name__}) takes observations of {model.observation_space}: {reason} "
        "(SB3's obs_to_tensor accepts only its observation space's shape)"
    )


#: Per model, ``{agent: (observation space, action space, the model's two)}`` of the agents
#: :func:`_check_model_fits` has passed: checked again only when one of the four space objects
#: changes (PettingZoo requires ``observation_space(agent)`` and ``action_space(agent)`` to
#: return the same object every call). :func:`respond` keeps them here; each
#: :class:`SharedPolicyAdapter` keeps its own.
_FITTED: weakref.WeakKeyDictionary[Any, dict[Any, tuple[Any, Any, Any, Any]]] = (
    weakref.WeakKeyDictionary()
)


def _check_model_fits(
    env: Any, model: Any, agents: Sequence[Any], fitted: dict[Any, tuple[Any, Any, Any, Any]]
) -> None:
    """Refuse an SB3 model whose spaces do not fit an agent's (what a model may act for).

    The one check of :func:`respond` and :class:`SharedPolicyAdapter`, run before the model
    sees a batch: each agent's observation space must fit the model's
    (:func:`rlightning_sb3.observation_space_mismatch`, SB3's ``obs_to_tensor`` rules), and
    its action space must equal the model's (an SB3 model acts in its own ``action_space``: a
    ``Box(-1, 1)`` model clips and scales to ``[-1, 1]``, so its actions for a ``Box(-3, 3)``
    agent would be elements of the wrong space, silently). Passed agents are remembered in
    ``fitted`` with the space objects they were checked with.

    Raises:
        ValueError: naming the agent, the env and both spaces.
    """
    model_obs, model_act = model.observation_space, model.action_space
    unchecked = []
    for agent in agents:
        obs_space = env.observation_space(agent)
        act_space = env.action_space(agent)
        known = fitted.get(agent)
        if (
            known is None
            or known[0] is not obs_space
            or known[1] is not act_space
            or known[2] is not model_obs
            or known[3] is not model_act
        ):
            unchecked.append((agent, obs_space, act_space))
    if not unchecked:
        return
    from rlightning_sb3 import observation_space_mismatch

    for agent, obs_space, act_space in unchecked:
        reason = observation_space_mismatch(obs_space, model_obs)
        if reason is not None:
            raise ValueError(_model_space_message(env, agent, obs_space, model, reason))
        if act_space != model_act:
            raise ValueError(
                f"agent {agent!r} of {describe_env(env)} acts in {act_space}, but the model "
                f"({type(model).__name__}) acts in {model_act} (PettingZoo: an agent's action "
                "is an element of env.action_space(agent); an SB3 model acts in its own "
                "action_space, so its actions would not be the agent's)"
            )
        fitted[agent] = (obs_space, act_space, model_obs, model_act)


def respond(
    env: Any,
    observations: Mapping[Any, Any],
    policies: Mapping[Any, Policy],
    env_id: str | None = None,
    *,
    infos: Mapping[Any, Any] | None = None,
    deterministic: bool = False,
) -> MultiAgentPolicyResponse:
    """Ask each acting agent's own policy for its action; return one multi-agent response.

    An SB3 model acts only for agents whose spaces fit its own: the agent's observation space
    fits the model's (``rlightning_sb3.observation_space_mismatch``) and its action space equals
    the model's (a ``Box(-1, 1)`` model's actions are no elements of a ``Box(-3, 3)`` agent's
    space), the very check :class:`SharedPolicyAdapter` applies, run for every model before any
    policy is asked. Agents whose policy is the same SB3 model object are run together in one
    batched call of :meth:`rlightning_sb3.SB3PolicyAdapter.act` (one row per agent, in the order
    of the acting
    agents), so each agent gets exactly what SB3's own rollout collection gives an env: with
    ``deterministic=False`` sampling, DQN's epsilon-greedy, the ``learning_starts`` warm-up and
    action noise drawn per agent; with ``deterministic=True`` what ``model.predict(...,
    deterministic=True)`` gives. The fields are ``action`` (what the env takes), ``buffer_action``
    (what SB3's buffer stores; ``(1,)`` for Discrete, as ``collect_rollouts`` reshapes it) and,
    for on-policy models, ``value`` and ``log_prob`` (np.float32). Each other policy is called
    once per agent; a callable returning a :class:`PolicyResponse` contributes all of its data
    fields. An agent's action mask, when found (:func:`find_action_mask`), is checked against its
    action space by :func:`rlightning.rules.check_action_mask` (rule ``action-mask``: 0/1 values,
    one entry per action; a mask that allows no action is refused, since the agent cannot act),
    passed to sb3-contrib's ``MaskablePPO`` and added as the field ``action_mask`` (the object as
    found); other policies get no mask, so check their actions (e.g. with
    :func:`rlightning.testing.check_multi_agent_policy_response`) where masks matter.

    Args:
        env: A PettingZoo ``ParallelEnv`` or ``AECEnv`` after ``reset``.
        observations: ``{agent_id: observation}`` from the last ``reset``/``step`` (AEC: at least
            ``env.agent_selection``'s, e.g. ``{agent: env.last()[0]}``). Extra keys are ignored.
        policies: ``{agent_id: policy}`` for at least every acting agent. Extra keys are ignored.
        env_id: The response's ``env_id``.
        infos: ``{agent_id: info}``, where masks may live.
        deterministic: SB3 models take their deterministic action (``explore=False``);
            callables do not get it.

    Returns:
        A :class:`MultiAgentPolicyResponse` whose ``action`` and every other field are per-agent
        dicts keyed by the acting agents (in ``env.agents`` order); a field some agents' policies
        do not give is None for those agents. An agent whose mask allows no action (the waiting
        player of a turn-based game in parallel form) is asked nothing: its action and every
        other field but ``action_mask`` are None (rule ``no-legal-action``), which
        :func:`to_parallel_actions` passes on. Empty ``action`` when no agent acts.

    Raises:
        TypeError: ``env`` is not a PettingZoo env, a mapping argument is not a mapping, a policy
            is neither an SB3 model nor callable, returns a multi-agent response, or is recurrent.
        ValueError: an AEC env's game is over (``env.agents`` is empty: call ``env.reset()``)
            or its ``env.agent_selection`` is not in ``env.agents``; an acting agent has no
            observation or no policy (names the agents); an acting agent's action mask breaks
            the ``action-mask`` rule (names the agent); an SB3 model's observation or action
            space does not fit an agent's it is asked to act for (names the agent and both
            spaces; checked before any policy runs, as :class:`SharedPolicyAdapter` checks);
            an SB3 model's batch fails because an agent's observation does not fit
            ``env.observation_space(agent)`` (names the agent); or a returned response has
            another ``env_id`` (rule ``env-id``) or no action (rule ``has-action``).
        TypeError: also ``env_id`` is neither a str nor None (rule ``env-id``), or
            ``deterministic`` is not a bool (rule ``flag``: a ``numpy.bool_`` is one), raised
            before any policy is asked.
    """
    check_env_id(env_id)  # before any policy runs (an SB3 model's act advances its state)
    deterministic = check_flag(deterministic, "deterministic", "respond")
    agents = _acting_agents(env)
    _require_entries(observations, agents, "observations", env)
    _require_entries(policies, agents, "policies", env)
    per_agent: dict[Any, dict[str, Any]] = {}
    masks = {agent: find_action_mask(agent, observations, infos) for agent in agents}
    checked = dict(zip(agents, _checked_masks(agents, list(masks.values()), env), strict=True))
    groups: dict[int, list[Any]] = {}
    called: list[Any] = []
    for agent in agents:
        if checked[agent] is _WAITS:
            per_agent[agent] = {"action": None}  # no legal action: no policy is asked
            continue
        policy = policies[agent]
        if is_sb3_model(policy):
            groups.setdefault(id(policy), []).append(agent)
        elif callable(policy):
            called.append(agent)
        else:
            raise TypeError(
                f"policy for agent {agent!r} must be an SB3 model or a callable "
                f"(observation) -> action | PolicyResponse, got {type(policy).__name__}"
            )
    # Every check before any policy is asked (an SB3 model's act advances its RNG and state).
    for group in groups.values():
        model = policies[group[0]]
        fitted = _FITTED.get(model)
        if fitted is None:
            fitted = _FITTED[model] = {}
        _check_model_fits(env, model, group, fitted)  # SharedPolicyAdapter's check
    for agent in called:
        per_agent[agent] = _call_policy(policies[agent], agent, observations[agent], env_id)
    for group in groups.values():
        model = policies[group[0]]
        rows = _sb3_rows(
            env,
            model,
            group,
            [observations[a] for a in group],
            [checked[a] for a in group],
            deterministic,
        )
        per_agent.update(rows)
    for agent, mask in masks.items():
        if mask is not None:
            per_agent[agent].setdefault("action_mask", mask)
    return _assemble(env_id, agents, per_agent)


class SharedPolicyAdapter:
    """One SB3 model acting for every (homogeneous) agent of a parallel env, in one forward pass.

    Parameter sharing, as in PettingZoo's SB3 tutorials: all live agents' observations are
    stacked into one batch ``(n_agents, *obs_shape)`` (dict observations key by key), the model
    runs once, and row ``i`` of each output goes to the ``i``-th agent. The agent order is stable:
    ``env.possible_agents`` order restricted to the live agents (``env.agents`` order for an env
    without ``possible_agents``), so an agent's row does not move when others leave.

    Homogeneous means every live agent has the same observation space and an action space equal
    to the model's; this is checked once per agent and space object (PettingZoo requires
    ``action_space(agent)`` to return the same object every call).

    Args:
        model: An SB3 algorithm (``PPO``, ``A2C``, sb3-contrib's ``MaskablePPO``, or an
            off-policy one such as ``DQN``/``SAC``, which give no value or log_prob). It is used
            through ``model.policy`` and put in evaluation mode on each call.

    Raises:
        TypeError: ``model`` is not an SB3 model.

    Examples:
        An untrained PPO for ``simple_spread_v3``'s three agents (SB3 reads only the spaces of
        the env it is given; train it as in ``examples/pettingzoo_shared_policy.py``):

        >>> import gymnasium as gym
        >>> from mpe2 import simple_spread_v3
        >>> from stable_baselines3 import PPO
        >>> from rlightning_pettingzoo import to_parallel_actions
        >>> env = simple_spread_v3.parallel_env(max_cycles=5)
        >>> observations, infos = env.reset(seed=0)
        >>> class AgentSpaces(gym.Env):  # one agent's spaces, for SB3's constructor
        ...     observation_space = env.observation_space("agent_0")
        ...     action_space = env.action_space("agent_0")
        >>> model = PPO("MlpPolicy", AgentSpaces(), seed=0, device="cpu")
        >>> adapter = SharedPolicyAdapter(model)
        >>> response = adapter.act(env, observations, "env-0")  # one forward pass, 3 agents
        >>> list(response.action)
        ['agent_0', 'agent_1', 'agent_2']
        >>> sorted(response.to_dict())
        ['action', 'buffer_action', 'log_prob', 'value']
        >>> one = response.for_agent("agent_1")
        >>> int(one.action) in range(5), one.log_prob.dtype
        (True, dtype('float32'))
        >>> observations, rewards, terminations, truncations, infos = env.step(
        ...     to_parallel_actions(response, env)
        ... )
    """

    def __init__(self, model: Any) -> None:
        if not is_sb3_model(model):
            raise TypeError(
                "SharedPolicyAdapter needs a Stable-Baselines3 model (PPO, A2C, DQN, SAC, ...), "
                f"got {type(model).__name__}"
            )
        self.model = model
        self._fitted: dict[Any, tuple[Any, Any, Any, Any]] = {}

    def agent_order(self, env: Any) -> list[Any]:
        """The live agents in the stable batch order (see the class docstring).

        Args:
            env: A PettingZoo ``ParallelEnv`` after ``reset``.

        Returns:
            The agents of ``env.agents``, ordered as in ``env.possible_agents``.
        """
        live = list(env.agents)
        possible = getattr(env, "possible_agents", None)
        if not possible:
            return live
        live_set = set(live)
        ordered = [agent for agent in possible if agent in live_set]
        if len(ordered) != len(live):  # agents outside possible_agents: keep env.agents order
            return live
        return ordered

    def _check_homogeneous(self, env: Any, agents: Sequence[Any]) -> None:
        """One observation space for all agents, and spaces that fit the model.

        The fit is :func:`_check_model_fits`, the check :func:`respond` applies to every SB3
        model it asks: each agent's observation space fits the model's
        (:func:`observation_space_mismatch`) and its action space is the model's. Each agent is
        checked once per set of space objects.
        """
        fitted = self._fitted
        reference = env.observation_space(agents[0])
        for agent in agents:
            obs_space = env.observation_space(agent)
            known = fitted.get(agent)
            if known is not None and known[0] is obs_space:
                continue
            if obs_space != reference:
                raise ValueError(
                    f"agents of {describe_env(env)} are not homogeneous: agent {agent!r} observes "
                    f"{obs_space}, agent {agents[0]!r} observes {reference}; a shared policy "
                    "needs one observation space (use respond() with a policy per agent type)"
                )
        _check_model_fits(env, self.model, agents, fitted)

    def act(
        self,
        env: Any,
        observations: Mapping[Any, Any],
        env_id: str | None = None,
        *,
        infos: Mapping[Any, Any] | None = None,
        deterministic: bool = False,
    ) -> MultiAgentPolicyResponse:
        """Act for every live agent with one batched forward pass.

        Args:
            env: A PettingZoo ``ParallelEnv`` after ``reset``.
            observations: ``{agent_id: observation}`` from the last ``reset``/``step``; must hold
                every live agent (extra keys, e.g. agents that just left, are ignored).
            env_id: The response's ``env_id``.
            infos: ``{agent_id: info}``, where masks may live.
            deterministic: Use the policy's deterministic actions.

        Returns:
            A :class:`MultiAgentPolicyResponse` with per-agent dicts, in :meth:`agent_order`:
            the fields of :func:`respond` for an SB3 model (one batched
            :meth:`rlightning_sb3.SB3PolicyAdapter.act` call, row ``i`` for the ``i``-th agent):
            ``action`` (np.int64 for Discrete, a float32 array for Box, clipped or unscaled as
            SB3's ``collect_rollouts`` does; off-policy models: as ``_sample_action``, with
            warm-up, epsilon and per-agent noise unless ``deterministic``), ``buffer_action``
            (what SB3's buffer stores: the raw sampled action, ``(1,)`` for Discrete, for
            on-policy models; the action scaled to [-1, 1] with noise for an off-policy Box),
            and for on-policy models ``value`` and ``log_prob`` (np.float32), plus
            ``action_mask`` when masks were found. An agent whose mask allows no action waits:
            it is not in the batch, and its action and outputs are None (as in :func:`respond`).
            Empty ``action`` when no
            agent is live (no forward pass then). Split it with ``for_agent``.

        Raises:
            TypeError: ``env`` is not a ``ParallelEnv``, ``observations`` is not a mapping,
                ``deterministic`` is not a bool (rule ``flag``), or the model's policy is
                recurrent.
            ValueError: the model has ``action_noise`` and ``deterministic`` is False (the
                adapter keys noise processes by agent only, not by (env, agent) slot, and
                never resets them at an episode end as SB3 does), a live agent has no
                observation, its action mask breaks the
                ``action-mask`` rule (as in :func:`sample_response`), the agents are not
                homogeneous or an agent's spaces do not fit the model's (names the agent and
                both spaces), or an observation does not fit its agent's observation space
                (names the agent).
        """
        env = require_parallel(env, "SharedPolicyAdapter.act()")
        deterministic = check_flag(deterministic, "deterministic", "SharedPolicyAdapter.act()")
        if not deterministic and getattr(self.model, "action_noise", None) is not None:
            raise ValueError(
                f"SharedPolicyAdapter.act() cannot draw {type(self.model).__name__}'s action "
                f"noise ({type(self.model.action_noise).__name__}): its rows are keyed by agent "
                "only, so the same agent in two envs would share one noise process, and no "
                "process is reset when its episode ends (SB3 keeps one process per (env, agent) "
                "slot and resets it at that slot's episode end); build the model with "
                "action_noise=None or act with deterministic=True"
            )
        agents = self.agent_order(env)
        if not agents:
            return MultiAgentPolicyResponse(env_id, action={})
        _require_entries(observations, agents, "observations", env)
        self._check_homogeneous(env, agents)
        masks = [find_action_mask(agent, observations, infos) for agent in agents]
        checked = _checked_masks(agents, masks, env)
        acting = [a for a, m in zip(agents, checked, strict=True) if m is not _WAITS]
        rows: dict[Any, dict[str, Any]] = {}
        if acting:
            rows = _sb3_rows(
                env,
                self.model,
                acting,
                [observations[a] for a in acting],
                [m for m in checked if m is not _WAITS],
                deterministic,
            )
        for agent in agents:
            rows.setdefault(agent, {"action": None})  # no legal action: the agent waits
        if any(mask is not None for mask in masks):
            for agent, mask in zip(agents, masks, strict=True):
                rows[agent]["action_mask"] = mask
        return _assemble(env_id, agents, rows)

    def predict_values(self, env: Any, observations: Mapping[Any, Any]) -> dict[Any, float]:
        """The critic's value of each given agent's observation, in one forward pass.

        Use it to bootstrap a truncated episode's last observation, as SB3's
        ``collect_rollouts`` does with ``policy.predict_values`` on the terminal observation.

        Args:
            env: The PettingZoo ``ParallelEnv`` the observations come from (for agent order).
            observations: ``{agent_id: observation}``; agents that are no longer live may be
                included (a terminal observation is exactly that).

        Returns:
            ``{agent_id: value}`` as Python floats, in ``possible_agents`` order.

        Raises:
            TypeError: the model is not an actor-critic (no value function).
            ValueError: the observations have differing shapes (``np.stack``) or SB3's
                ``obs_to_tensor`` refuses their shape.
        """
        possible = list(getattr(env, "possible_agents", None) or [])
        agents = [a for a in possible if a in observations] + [
            a for a in observations if a not in set(possible)
        ]
        if not agents:
            return {}
        values = predict_values(self.model, [observations[a] for a in agents])
        return {agent: float(values[i]) for i, agent in enumerate(agents)}
