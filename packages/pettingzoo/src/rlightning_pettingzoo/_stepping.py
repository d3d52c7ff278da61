"""Stepping copies of a PettingZoo parallel env for one shared SB3 model: the collectors' base.

Acting (one batched ``SB3PolicyAdapter.act`` per round over every acting agent of the stepped
copies, copy-major), stepping, and each agent's open :class:`~rlightning_pettingzoo._columns.
Transition` (from one action to its next, rewards summed while the agent waits; closed where the
agent ends). The collectors decide what goes into which buffer.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlightning import MultiAgentPolicyResponse, rules
from rlightning_pettingzoo._columns import Transition
from rlightning_pettingzoo._envs import describe_env, refuse_done_but_listed, require_parallel
from rlightning_pettingzoo._sb3 import (
    observation_intake,
    observation_shape_mismatch,
    refuse_gsde,
    refuse_unapplied_wrappers,
    refuse_unstorable_layout,
    sb3_rows,
)
from rlightning_pettingzoo._stepper_base import CopyBookkeeping, row_prefix
from rlightning_pettingzoo.masks import find_action_mask
from rlightning_pettingzoo.parallel import to_parallel_actions
from rlightning_pettingzoo.policies import _WAITS, SharedPolicyAdapter, _assemble, _checked_masks

__all__ = ["AgentStepper"]

#: Rounds in a row in which no agent of any copy could act before a collector gives up.
_MAX_IDLE_ROUNDS = 10_000


@dataclass
class _Copy:
    """What one copy does in a round: who acts, how many of them are stored, their masks."""

    index: int
    acting: list[Any]
    kept: int
    checked: dict[Any, Any]  # acting agent -> its checked mask (None: no mask)
    found: dict[Any, Any] | None  # live agent -> its mask as the env gave it (None: no masks)
    kept_agents: set[Any] | None = None  # the acting agents stored (None: the first ``kept``)
    live: list[Any] | None = None  # the copy's live agents in batch order (None: ask the env)


class AgentStepper(CopyBookkeeping):
    """The env copies, their agents' open transitions and episodes (see the module docstring).

    Args:
        model: The shared SB3 model.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        seeds: The seed of each copy's first reset (None: no seed).
        caller: The collector's name, for error messages.

    Raises:
        TypeError: an env is not a ``ParallelEnv``.
        ValueError: ``env_fns`` is empty or ``seeds`` is not one per copy.
    """

    def __init__(
        self,
        model: Any,
        env_fns: Sequence[Callable[[], Any]],
        seeds: Sequence[int | None] | None,
        caller: str,
    ) -> None:
        self.model = model
        self._make_envs(env_fns, caller, require_parallel, "a ParallelEnv")
        self._row_prefix = row_prefix(caller)
        refuse_unapplied_wrappers(model, caller)
        refuse_gsde(model, caller)
        # each observation's copy, transposed where SB3 wrapped the model's env in
        # VecTransposeImage (channel-last images): what learn() acts on and stores
        self._intake = observation_intake(model)
        self._refuse_unstorable(caller)
        n = len(self._envs)
        # one per copy: each caches the space checks of its own copy's space objects
        self._shared = [SharedPolicyAdapter(model) for _ in range(n)]
        # seeds, open transitions, episodes, steps, ranks, dropped (agent-steps taken but not
        # stored), agent_returns: _stepper_base.CopyBookkeeping
        self._start_bookkeeping(seeds, caller)
        self._observations: list[dict[Any, Any] | None] = [None] * n
        self._infos: list[dict[Any, Any]] = [{} for _ in range(n)]
        # per copy: the live agents whose spaces _check_agents passed since the copy's last
        # reset (checked again when they change: a join, a reset), and the copy's env id
        self._checked: list[list[Any] | None] = [None] * n
        self._copy_ids = [f"copy-{i}" for i in range(n)]

    def _reset(self, i: int) -> None:
        env = self._envs[i]
        observations, infos = env.reset(seed=self._seeds[i])
        self._seeds[i] = None
        self._checked[i] = None  # the spaces are checked again after a reset
        # copies: an env may write its next observations into the same arrays (_columns.owned)
        self._observations[i] = self._own(observations)
        self._infos[i] = dict(infos or {})
        self._starting[i] = set(env.agents)
        for agent in env.agents:
            self._episode[(i, agent)] = [0.0, 0]

    def _restart_copies(self) -> None:
        """Mark every copy for a reset at its next round (``CopyBookkeeping._start_run``).

        A copy whose agents are all gone is reset first, as the collector would at its next
        round: SB3's VecEnv reset the env at the step that ended its episode, before
        ``_setup_learn`` resets it again (an env's own generator moves on as it does in SB3).
        Nothing else is due: the episodes that ended were recorded at the step that ended them.
        """
        n = len(self._envs)
        for i in range(n):
            if self._observations[i] is None and self._steps[i]:
                self._reset(i)
        self._observations = [None] * n
        self._infos = [{} for _ in range(n)]

    def _refuse_unstorable(self, caller: str) -> None:
        """Refuse possible agents the model acts on but cannot store (``_sb3``), at construction."""
        for i, env in enumerate(self._envs):
            possible = list(getattr(env, "possible_agents", None) or [])
            refuse_unstorable_layout(env, i, self.model, possible, caller)

    def _own(self, observations: dict[Any, Any]) -> dict[Any, Any]:
        """Each agent's observation as it is acted on and stored (``_sb3.observation_intake``)."""
        intake = self._intake
        return {agent: intake(obs) for agent, obs in observations.items()}

    def _check_agents(self, i: int, env: Any, agents: list[Any]) -> None:
        """Refuse live agents the model cannot act for (one shared model: homogeneous)."""
        self._shared[i]._check_homogeneous(env, agents)

    def _candidates(self) -> list[_Copy]:
        """Every copy (reset where its agents are all gone), with its acting agents and masks."""
        candidates: list[_Copy] = []
        for i, env in enumerate(self._envs):
            if self._observations[i] is None:
                self._reset(i)
            observations = self._observations[i]
            assert observations is not None
            agents = self._shared[i].agent_order(env)
            if agents:
                missing = [a for a in agents if a not in observations]
                if missing:
                    raise ValueError(
                        f"live agent(s) {missing} of {describe_env(env)} (copy {i}) have no "
                        "observation"
                    )
                if agents != self._checked[i]:  # once per set of live agents (and reset)
                    self._check_agents(i, env, agents)
                    self._checked[i] = list(agents)
            infos = self._infos[i]
            found = [find_action_mask(a, observations, infos) for a in agents]
            if all(m is None for m in found):  # no masks: every live agent acts
                candidates.append(
                    _Copy(i, agents, len(agents), dict.fromkeys(agents), None, live=agents)
                )
                continue
            checked = _checked_masks(agents, found, env)
            acting = [a for a, m in zip(agents, checked, strict=True) if m is not _WAITS]
            masks = {a: m for a, m in zip(agents, checked, strict=True) if m is not _WAITS}
            given = dict(zip(agents, found, strict=True))
            candidates.append(_Copy(i, acting, len(acting), masks, given, live=agents))
        return candidates

    def _plan(self, remaining: int) -> list[_Copy]:
        """The copies to step this round, with the agents that act and are stored."""
        candidates = self._candidates()
        plan: list[_Copy] = []
        for copy in candidates:
            if copy.kept <= remaining:
                plan.append(copy)
                remaining -= copy.kept
        if remaining > 0 and not any(copy.kept for copy in plan):
            fits = [copy for copy in candidates if copy.acting]
            if fits:
                smallest = min(fits, key=lambda copy: len(copy.acting))
                smallest.kept = remaining  # the rest of its agent-steps are dropped
                plan = [smallest]
        return plan

    def _act(
        self,
        plan: list[_Copy],
        keys: list[tuple[int, Any]],
        starts: list[bool] | None = None,
    ) -> dict[tuple[int, Any], dict[str, Any]]:
        """One batched forward pass for every acting agent of the planned copies.

        ``starts`` (a recurrent model: one per key) resets the keys' LSTM states first.
        """
        if not keys:
            return {}
        observations: list[Any] = []
        masks: list[Any] = []
        for copy in plan:
            obs = self._observations[copy.index]
            assert obs is not None
            observations += map(obs.__getitem__, copy.acting)
            masks += map(copy.checked.__getitem__, copy.acting)
        first_copy, first_agent = keys[0]
        action_space = self._envs[first_copy].action_space(first_agent)
        try:
            return sb3_rows(
                self.model,
                keys,
                observations,
                masks,
                action_space,
                deterministic=False,
                episode_starts=starts,
                row_prefix=self._row_prefix,
            )
        except ValueError as error:  # np.stack's or SB3's shape error: name the agent
            culprit = self._culprit(plan, lambda agent: self.model)
            if culprit is None:
                raise
            raise ValueError(culprit) from error

    def _culprit(self, plan: list[_Copy], model_of: Callable[[Any], Any]) -> str | None:
        """The first acting agent whose observation has not its space's shape, named; or None.

        Only on the error path of a forward pass (``np.stack``'s "all input arrays must have
        the same shape", SB3's "Unexpected observation shape"). The shape looked for is the
        agent's ``observation_space`` as the collector holds it: transposed as
        ``VecTransposeImage`` transposes it where ``model_of(agent)``'s env is wrapped in one
        (``_sb3.observation_intake``).
        """
        from rlightning_sb3 import ImageTranspose, image_transpose

        for copy in plan:
            env = self._envs[copy.index]
            observations = self._observations[copy.index]
            assert observations is not None
            for agent in copy.acting:
                raw = space = env.observation_space(agent)
                transposed = image_transpose(model_of(agent)) is not None
                if transposed and (found := ImageTranspose.for_space(raw)) is not None:
                    space = found.observation_space
                reason = observation_shape_mismatch(space, observations[agent])
                if reason is not None:
                    after = " (after the VecTransposeImage transpose)" if space is not raw else ""
                    return (
                        f"observation of agent {agent!r} of {describe_env(env)} (copy "
                        f"{copy.index}) does not fit observation_space({agent!r}) {raw}{after}: "
                        f"{reason} (PettingZoo: an agent's observation is an element of "
                        "env.observation_space(agent))"
                    )
        return None

    def _step(
        self,
        copy: _Copy,
        rows: dict[tuple[int, Any], dict[str, Any]],
        streams: dict[tuple[int, Any], list[Transition]],
        maskable: bool | Callable[[Any], bool],
        ended_out: list[Transition] | None = None,
    ) -> int:
        """Step a copy with its acting agents' rows; returns the transitions stored.

        New transitions go to ``streams`` (per slot) and become the agents' open ones;
        transitions that end at this step are also appended to ``ended_out``. ``maskable``
        (True, or per agent: a group collector's MaskablePPO groups) stores each row's mask.
        """
        i, acting, kept, masks = copy.index, copy.acting, copy.kept, copy.checked
        env = self._envs[i]
        before = self._observations[i]
        assert before is not None
        live = self._shared[i].agent_order(env) if copy.live is None else copy.live
        if copy.found is None and len(acting) == len(live):  # every live agent acts, no masks
            action = {a: rows[(i, a)]["action"] for a in live}
            response = MultiAgentPolicyResponse(self._copy_ids[i], action=action)
        else:
            per_agent: dict[Any, dict[str, Any]] = {a: {"action": None} for a in live}
            for agent in acting:
                per_agent[agent] = rows[(i, agent)]
            if copy.found is not None:  # the masks the response answers under
                for agent in live:
                    per_agent[agent] = {**per_agent[agent], "action_mask": copy.found.get(agent)}
            response = _assemble(self._copy_ids[i], live, per_agent)
        actions = to_parallel_actions(response, env)
        env_step = self._steps[i]
        stored = 0
        starting = self._starting[i]
        open_slots = self._open
        for k, agent in enumerate(acting):
            slot = (i, agent)
            if (k >= kept) if copy.kept_agents is None else (agent not in copy.kept_agents):
                open_slots[slot] = None  # dropped: its previous transition is cut here
                self.dropped += 1
                continue
            fields = rows[slot]
            if maskable if isinstance(maskable, bool) else maskable(agent):
                # what MaskableRolloutBuffer stores for this row
                fields = dict(fields)
                mask = masks.get(agent)
                action_space = env.action_space(agent)
                fields["action_mask"] = (
                    np.ones(rules.mask_size(action_space), dtype=bool)
                    if mask is None
                    else rules.flat_mask(action_space, mask)
                )
            start = agent in starting
            if start:
                starting.discard(agent)
            transition = Transition(i, agent, env_step, before[agent], fields, start)
            stream = streams.get(slot)
            if stream is None:
                streams[slot] = [transition]
            else:
                stream.append(transition)
            open_slots[slot] = transition
            stored += 1
        observations, rewards, terminations, truncations, infos = env.step(actions)
        observations = self._own(observations)
        self._steps[i] += 1
        agents_now = env.agents
        now = set(agents_now)
        episodes = self._episode
        for agent in live:
            slot = (i, agent)
            reward = float(rewards.get(agent, 0.0))
            open_ = open_slots.get(slot)
            if open_ is not None:
                open_.reward += reward
            episode = episodes.get(slot)
            if episode is None:
                episode = episodes[slot] = [0.0, 0]
            episode[0] += reward
            episode[1] += agent in acting
            terminated = bool(terminations.get(agent, False))
            truncated = bool(truncations.get(agent, False))
            if agent not in observations and (agent in now or terminated or truncated):
                raise ValueError(
                    f"agent {agent!r} of {describe_env(env)} (copy {i}) has no observation "
                    "after step(): its next (or final) observation is needed"
                )
            if terminated or truncated:
                if agent in now:
                    refuse_done_but_listed(env, i, agent, terminated)
                ended = self._open.pop(slot, None)
                info = {
                    "r": episode[0],
                    "l": episode[1],
                    "t": round(time.time() - self._start_time, 6),
                }
                self.agent_returns.setdefault(agent, deque(maxlen=100)).append(episode[0])
                del self._episode[slot]
                if ended is not None:
                    ended.end = "terminated" if terminated else "truncated"
                    ended.next_observation = observations[agent]
                    ended.episode = info
                    if ended_out is not None:
                        ended_out.append(ended)
                elif streams.get(slot) and streams[slot][-1].end is None:
                    # it ended at a dropped step: its last stored row (of this episode, cut
                    # there) carries the episode for rollout/ep_rew_mean
                    streams[slot][-1].episode = info
            elif agent not in now:
                raise ValueError(
                    f"agent {agent!r} left {describe_env(env)} (copy {i}) without being "
                    "terminated or truncated; PettingZoo ends an agent with one of them"
                )
            elif open_ is not None:
                open_.next_observation = observations[agent]
        for agent in now - set(live):  # joined: a trajectory of its own begins
            self._starting[i].add(agent)
            self._episode[(i, agent)] = [0.0, 0]
        self._observations[i] = observations
        self._infos[i] = dict(infos or {})
        if not agents_now:
            self._observations[i] = None  # reset at the next round (no seed)
        return stored
