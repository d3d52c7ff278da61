"""One SB3 policy per group of PettingZoo agents (or per agent), over copies of a parallel env.

:class:`GroupRolloutCollector` (PPO, A2C, MaskablePPO, RecurrentPPO) and
:class:`GroupReplayCollector` (DQN, SAC, TD3) are the shared collectors
(:class:`~rlightning_pettingzoo.SharedRolloutCollector`,
:class:`~rlightning_pettingzoo.SharedReplayCollector`) with one model per *group*: ``group_of``
names each agent's group, the agents of a group share their spaces and their model, and each
group's model fills its **own** buffer with its agents' trajectories only, under the same
layout rules (no row for a dead, not-yet-joined or waiting agent; see ``docs/pettingzoo.md``,
"Training"). A policy per agent is one agent per group. Every round acts with one batched
forward pass per group (the groups in ``models`` order; within a group copy-major, then
``possible_agents`` order) and steps the env copies once with every group's actions.

Each ``collect()`` fills every group's buffer once (on-policy: ``n_steps * n_envs`` agent-steps
of the group; off-policy: one rollout of the group's ``train_freq``). Groups fill at different
rates where their agents live, die or wait differently: once a group's buffer is full, its
agents still act (the envs step all live agents at once) but their steps are not stored; they
are counted in :attr:`GroupRolloutCollector.group_dropped`. The replay collector drops nothing:
a group whose rollout is done keeps its complete transitions for its next ``collect()``
(off-policy, the policy that acted does not matter).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from stable_baselines3.common.noise import VectorizedActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from rlightning.rules import check_flag
from rlightning_pettingzoo._columns import Placed, Transition, pack
from rlightning_pettingzoo._envs import describe_env
from rlightning_pettingzoo._lanes import RecurrentLanes
from rlightning_pettingzoo._noise import SlotNoise, slot_noise
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    observation_intake,
    refuse_episodic_columns,
    refuse_gsde,
    refuse_sequence_buffer,
    refuse_unapplied_wrappers,
    refuse_unstarted,
    refuse_unstorable_layout,
    sb3_rows,
)
from rlightning_pettingzoo._stepping import _MAX_IDLE_ROUNDS, AgentStepper, _Copy
from rlightning_pettingzoo.collector import Segment, _fill_rollout, _segments
from rlightning_pettingzoo.policies import SharedPolicyAdapter
from rlightning_pettingzoo.replay import _add_replay_row
from rlightning_sb3 import training_run_id

__all__ = ["GroupReplayCollector", "GroupRolloutCollector"]

#: What ``group_of`` may be: agent id -> group name, as a mapping or a function.
GroupOf = Mapping[Any, str] | Callable[[Any], str]


def _refuse_shared_models(models: Mapping[str, Any], caller: str) -> None:
    """Refuse no group, or two groups with one model object (``ValueError``, both named).

    Also refuses ``models`` that is not a mapping (``TypeError``: a list of models has no
    group names).
    """
    if not isinstance(models, Mapping):
        raise TypeError(
            f"{caller} needs models: a mapping group name -> SB3 model, got "
            f"{type(models).__name__} {models!r}"
        )
    if not models:
        raise ValueError(f"{caller} needs at least one group in models")
    owner: dict[int, str] = {}
    for group, model in models.items():
        other = owner.setdefault(id(model), group)
        if other != group:
            raise ValueError(
                f"{caller}: groups {other!r} and {group!r} have the same model object; each "
                "group's model fills its own buffer (one buffer cannot hold two groups' "
                "rollouts): give each group a model of its own, or put the agents in one group"
            )


def _lookup_group(
    group_of: GroupOf,
    models: Mapping[str, Any],
    agent: Any,
    where: str,
    caller: str,
    otherwise: str = "",
) -> str:
    """``group_of``'s group for ``agent``, checked to be a key of ``models``.

    Args:
        group_of: Agent id -> group name, a mapping or a function.
        models: Group name -> model.
        agent: The agent id.
        where: Where the agent lives, for the messages (`` of simple_spread_v3 (copy 0)``).
        caller: The collector's name, for the messages.
        otherwise: Appended to the no-group message (what else the agent may be).

    Returns:
        The group's name; nothing is mutated.

    Raises:
        ValueError: ``group_of`` has no group for the agent, or names one not in ``models``;
            a ``group_of`` function raised for the agent (its error chained as the cause,
            e.g. the ``KeyError`` of an agent it does not know).
    """
    if callable(group_of):
        try:
            group = group_of(agent)
        except Exception as err:
            raise ValueError(
                f"{caller}: the group_of function raised {err!r} for "
                f"agent {agent!r}{where}; it must return a group of models "
                f"({sorted(models)}) for every agent it is asked about{otherwise}"
            ) from err
    elif agent in group_of:
        group = group_of[agent]
    else:
        raise ValueError(
            f"agent {agent!r}{where} has no group: group_of maps only "
            f"{sorted(map(repr, group_of))}; give every agent a group of models "
            f"({sorted(models)}){otherwise}"
        )
    if group not in models:
        raise ValueError(
            f"group_of gives agent {agent!r}{where} the group {group!r}, which is not a "
            f"group of models ({sorted(models)})"
        )
    return group


class _GroupStepper(AgentStepper):
    """The stepper with a model per group: group lookup, space checks, one forward per group.

    ``models`` (group -> model, in acting order) is what the collectors use; the base's
    ``model`` is the first group's, used only for the base's agent order (no model's).
    """

    def __init__(
        self,
        models: Mapping[str, Any],
        env_fns: Sequence[Callable[[], Any]],
        group_of: GroupOf,
        seeds: Sequence[int | None] | None,
        caller: str,
    ) -> None:
        _refuse_shared_models(models, caller)
        for group, model in models.items():
            refuse_unapplied_wrappers(model, caller, group)
            refuse_gsde(model, caller, group)
        self.models: dict[str, Any] = dict(models)
        self._group_of = group_of
        self._group_caller = caller  # group()'s messages name the collector
        self._groups: dict[Any, str] = {}
        # per group: its model's observation intake (a CnnPolicy's VecTransposeImage)
        self._intakes = {g: observation_intake(m) for g, m in self.models.items()}
        super().__init__(next(iter(self.models.values())), env_fns, seeds, caller)
        # per copy and group: the model-fit checks of that copy's space objects
        self._fits = [
            {g: SharedPolicyAdapter(m) for g, m in self.models.items()} for _ in self._envs
        ]
        self._reference: dict[str, tuple[Any, Any, Any]] = {}  # group -> (agent, obs, act)
        self._known: dict[tuple[int, Any], tuple[Any, Any]] = {}
        # group -> its model's per-slot action noise (GroupReplayCollector; _noise)
        self._noises: dict[str, SlotNoise] = {}
        # group -> the columns of its recurrent model (GroupRolloutCollector; _lanes)
        self._recurrent: dict[str, RecurrentLanes] = {}
        for i, env in enumerate(self._envs):
            possible = list(getattr(env, "possible_agents", None) or [])
            for agent in possible:
                self.group(agent, env, i)
            if possible:
                empty = [g for g in self.models if g not in {self._groups[a] for a in possible}]
                if empty:
                    raise ValueError(
                        f"group(s) {empty} of models have no agent among the possible_agents "
                        f"{possible} of {describe_env(env)} (copy {i}); their buffers could "
                        "never be filled"
                    )

    def _run_models(self) -> list[Any]:
        """Every group's model, in ``models`` order (``CopyBookkeeping._start_run``'s models).

        The shared copies are reset for a new run only once each of them began one that reset
        its env (``docs/decisions.md``).
        """
        return list(self.models.values())

    def group(self, agent: Any, env: Any = None, i: int | None = None) -> str:
        """The group of ``agent`` (``group_of``'s answer, remembered).

        Args:
            agent: An agent id.
            env: The env copy it lives in (for the error message only).
            i: The copy's index (for the error message only).

        Returns:
            The group's name, a key of :attr:`models`.

        Raises:
            ValueError: ``group_of`` has no group for the agent, or names a group that is not
                a key of ``models``, or a ``group_of`` function raised for it (the collector
                and the agent named, the function's error chained as the cause).
        """
        found = self._groups.get(agent)
        if found is not None:
            return found
        where = "" if env is None else f" of {describe_env(env)} (copy {i})"
        group = _lookup_group(self._group_of, self.models, agent, where, self._group_caller)
        self._groups[agent] = group
        return group

    def _refuse_unstorable(self, caller: str) -> None:
        """The base's check, each possible agent against its group's model."""
        for i, env in enumerate(self._envs):
            by_group: dict[str, list[Any]] = {}
            for agent in list(getattr(env, "possible_agents", None) or []):
                by_group.setdefault(self.group(agent, env, i), []).append(agent)
            for group, agents in by_group.items():
                refuse_unstorable_layout(env, i, self.models[group], agents, caller, group)

    def _own(self, observations: dict[Any, Any]) -> dict[Any, Any]:
        """Each agent's observation as its group's model acts on and stores it."""
        intakes, group = self._intakes, self.group
        return {agent: intakes[group(agent)](obs) for agent, obs in observations.items()}

    def _check_agents(self, i: int, env: Any, agents: list[Any]) -> None:
        """Each live agent has a group, shares its group's spaces and fits the group's model."""
        by_group: dict[str, list[Any]] = {}
        for agent in agents:
            group = self.group(agent, env, i)
            by_group.setdefault(group, []).append(agent)
            obs_space, act_space = env.observation_space(agent), env.action_space(agent)
            known = self._known.get((i, agent))
            if known is not None and known[0] is obs_space and known[1] is act_space:
                continue
            reference = self._reference.setdefault(group, (agent, obs_space, act_space))
            if (obs_space, act_space) != reference[1:]:
                raise ValueError(
                    f"agent {agent!r} of {describe_env(env)} (copy {i}) is in group {group!r}, "
                    f"whose agents observe {reference[1]} and act in {reference[2]} (as agent "
                    f"{reference[0]!r}), but it observes {obs_space} and acts in {act_space}; "
                    "a group's agents share one model, so they must share spaces (give it "
                    "a group of its own)"
                )
            self._known[(i, agent)] = (obs_space, act_space)
        for group, members in by_group.items():
            try:
                self._fits[i][group]._check_homogeneous(env, members)
            except ValueError as error:
                raise ValueError(f"group {group!r}: {error}") from error

    def _act(
        self,
        plan: list[_Copy],
        keys: list[tuple[int, Any]],
        starts: list[bool] | None = None,
    ) -> dict[tuple[int, Any], dict[str, Any]]:
        """One batched forward pass per group, in ``models`` order, for its acting agents.

        ``starts`` (one per key, in ``keys`` order: ``GroupRolloutCollector``'s LSTM resets)
        go, for each recurrent group, to its model's forward pass (its agents' LSTM states are
        kept in its adapter under this collector's row ids); feed-forward groups ignore them.
        """
        start_of = {} if starts is None else dict(zip(keys, starts, strict=True))
        rows: dict[tuple[int, Any], dict[str, Any]] = {}
        for group, model in self.models.items():
            group_keys: list[tuple[int, Any]] = []
            observations: list[Any] = []
            masks: list[Any] = []
            for copy in plan:
                obs = self._observations[copy.index]
                assert obs is not None
                for agent in copy.acting:
                    if self._groups[agent] == group:
                        group_keys.append((copy.index, agent))
                        observations.append(obs[agent])
                        masks.append(copy.checked[agent])
            if group_keys:
                first_copy, first_agent = group_keys[0]
                space = self._envs[first_copy].action_space(first_agent)
                noise = self._noises.get(group)
                # a recurrent group's LSTM resets, its states under this collector's row ids
                # (feed-forward groups: no prefix; the replay groups' noise reads the ids)
                episode_starts, prefix = (
                    ([start_of[k] for k in group_keys], self._row_prefix)
                    if group in self._recurrent
                    else (None, "")
                )
                try:
                    with nullcontext() if noise is None else noise.drawing(group_keys):
                        rows.update(
                            sb3_rows(
                                model,
                                group_keys,
                                observations,
                                masks,
                                space,
                                deterministic=False,
                                episode_starts=episode_starts,
                                row_prefix=prefix,
                            )
                        )
                except ValueError as error:  # a shape error: name the agent (the base's)
                    culprit = self._culprit(plan, lambda agent: self.models[self._groups[agent]])
                    if culprit is None:
                        raise
                    raise ValueError(f"group {group!r}: {culprit}") from error
        return rows

    def _ordered(self, slots: Sequence[tuple[int, Any]]) -> list[tuple[int, Any]]:
        return sorted(slots, key=lambda s: (s[0], self._agent_rank(*s)))


class GroupRolloutCollector(_GroupStepper):
    """Fill one on-policy model's ``RolloutBuffer`` per group of agents (see the module).

    Each :meth:`collect` is one ``collect_rollouts`` for every group: rounds of one batched
    forward pass per group (``models`` order) for the acting agents of the stepped copies,
    each followed by one ``step`` of those copies with every group's actions, until every
    group's buffer holds ``n_steps * n_envs`` of its agents' steps. Each group's buffer is laid
    out as :class:`SharedRolloutCollector`'s (each column a stream of its agents' trajectory
    segments, slot order: copy, then ``possible_agents``), filled through
    :func:`rlightning_sb3.add_rollout_step` and :func:`rlightning_sb3.finish_rollout` with that
    group's model: its callback, logger, ``num_timesteps`` and its agents'
    ``rollout/ep_rew_mean/<agent_id>``. Near a buffer's end only copies whose acting agents
    of the groups not yet full fit are stepped (as the shared collector); when none fits, the
    copy with the fewest agent-steps to drop is stepped. Agents of a full group act and are
    not stored; once the copies before it in a round fill every buffer, a copy with acting
    agents waits, untouched, for the next rollout (as the shared collector's: nothing of it
    could be stored). So a single group of every agent steps as ``SharedRolloutCollector``.

    A RecurrentPPO group (sb3-contrib) is driven as :class:`SharedRolloutCollector` drives a
    RecurrentPPO (the same code, ``_lanes.RecurrentLanes``): one LSTM state per (copy,
    agent) of the group, kept from one :meth:`collect` to the next in the model's adapter,
    reset where the agent's trajectory starts and where its run in a column starts below row
    0; the group's columns are assigned as its agents act, each row's ``lstm_states`` is the
    state its agent acted from. An agent of a full group acts on with its state carried (its
    step is not stored). So a single group of every agent fills its RecurrentPPO's buffer as
    ``SharedRolloutCollector`` does (``tests/pettingzoo/test_collector_groups_recurrent.py``).

    Build each model with a VecEnv of ``n_envs`` slots of its group's spaces (it sizes the
    buffer; never stepped) and, with ``update_model``, call
    :func:`rlightning_sb3.start_training` for each model (its own callback).

    Args:
        models: Group name -> a PPO, A2C, MaskablePPO or RecurrentPPO.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        group_of: Agent id -> group name: a mapping or a function. A policy per agent is
            ``{agent: agent}`` with ``models`` keyed by agent id.
        seeds: The seed of each copy's first reset (None: no seed).

    Raises:
        TypeError: a model is not an on-policy SB3 model, or an env is not a ``ParallelEnv``.
        ValueError: ``models`` or ``env_fns`` is empty, ``seeds`` is not one per copy, a
            possible agent has no group (or one not in ``models``), a group has no
            possible agent, or a possible agent observes channel-last images its group's
            model acts on but cannot store. At :meth:`collect`: an agent's spaces differ
            from its group's or do not fit its group's model; before any step, with
            ``update_model``, a model was not given ``start_training``.
    """

    def __init__(
        self,
        models: Mapping[str, OnPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]],
        *,
        group_of: GroupOf,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        _refuse_shared_models(models, "GroupRolloutCollector")  # a mapping, before its models
        _refuse_unfit_rollout_models(models)
        super().__init__(models, env_fns, group_of, seeds, "GroupRolloutCollector")
        #: Per group, the agent-steps of the last :meth:`collect` that were acted, not stored.
        self.group_dropped: dict[str, int] = dict.fromkeys(self.models, 0)
        # per RecurrentPPO group: its columns, assigned as its agents act (as the shared
        # collector's: one LSTM state per (copy, agent), kept from one collect to the next)
        self._recurrent = {
            group: RecurrentLanes(int(model.rollout_buffer.n_envs))
            for group, model in self.models.items()
            if adapter_for(model).is_recurrent
        }

    def _group_plan(self, remaining: dict[str, int]) -> tuple[list[_Copy], dict[str, int]]:
        """The copies to step, each with its ``kept_agents``, and what they store per group."""
        candidates = self._candidates()
        plan: list[_Copy] = []
        left = dict(remaining)
        stored = dict.fromkeys(self.models, 0)

        def per_group(copy: _Copy) -> dict[str, list[Any]]:
            out: dict[str, list[Any]] = {}
            for agent in copy.acting:
                out.setdefault(self._groups[agent], []).append(agent)
            return out

        for copy in candidates:
            if copy.acting and not any(left.values()):
                continue  # every buffer full this round: it waits (as the shared collector's)
            members = per_group(copy)
            if all(len(a) <= left[g] for g, a in members.items() if left[g] > 0):
                copy.kept_agents = {a for g, ags in members.items() if left[g] > 0 for a in ags}
                for g, ags in members.items():
                    if left[g] > 0:
                        left[g] -= len(ags)
                        stored[g] += len(ags)
                plan.append(copy)
        if any(left.values()) and not any(stored.values()):
            useful = [c for c in candidates if any(left[self._groups[a]] > 0 for a in c.acting)]
            if useful:

                def drops(copy: _Copy) -> tuple[int, int]:
                    members = per_group(copy)
                    kept = sum(min(len(a), left[g]) for g, a in members.items())
                    return len(copy.acting) - kept, len(copy.acting)

                best = min(useful, key=drops)
                best.kept_agents = set()
                stored = dict.fromkeys(self.models, 0)
                for g, ags in per_group(best).items():
                    best.kept_agents.update(ags[: left[g]])  # the rest is dropped
                    stored[g] += min(len(ags), left[g])
                plan = [best]
        for copy in plan:
            for agent in copy.acting:
                if copy.kept_agents is not None and agent not in copy.kept_agents:
                    self.group_dropped[self._groups[agent]] += 1
        return plan, stored

    def collect(self, *, update_model: bool = True) -> dict[str, list[Segment]]:
        """Collect one full rollout into every group's ``model.rollout_buffer``.

        Args:
            update_model: As in :func:`rlightning_sb3.add_rollout_step`, per group model:
                its ``num_timesteps`` (one per stored agent-step of the group), its episodes
                for ``rollout/ep_rew_mean``, its callback and logger (needs
                :func:`rlightning_sb3.start_training` for each model), and
                ``rollout/ep_rew_mean/<agent_id>`` for the group's agents.

        Returns:
            Group -> the group buffer's segments, column by column, row by row. Every buffer
            is filled (``reset`` first when full) and its ``returns`` and ``advantages``
            computed, group by group in ``models`` order; the envs are stepped;
            :attr:`group_dropped` and ``dropped`` (their total) are set.

        Raises:
            TypeError: ``update_model`` is not a bool (e.g. the string ``"no"``), before
                any step.
            ValueError: an agent left without being terminated or truncated, or has no
                observation; an agent has no group, its spaces differ from its group's or do
                not fit its model; what the SB3 helpers and the adapter raise.
            RuntimeError: no agent of a group whose buffer is not full could act for many
                rounds in a row.
            rlightning_sb3.StopTraining: a model's callback returned False (the groups
                before it in ``models`` are filled; see :class:`SharedRolloutCollector`).
        """
        shapes = {}
        for group, model in self.models.items():
            buf = model.rollout_buffer
            shapes[group] = (int(buf.buffer_size), int(buf.n_envs))
        remaining = {g: rows * columns for g, (rows, columns) in shapes.items()}
        update_model = check_flag(update_model, "update_model", "GroupRolloutCollector.collect")
        if update_model:  # before any step: add_rollout_step would refuse only at the end
            for group, model in self.models.items():
                refuse_unstarted(model, "GroupRolloutCollector", group)
        self._start_run()  # every group's run reset its env: reset the copies (_stepper_base)
        # a row's mask is stored only for the agents of a MaskablePPO group (MaskableRolloutBuffer)
        masked = {g for g, m in self.models.items() if hasattr(m.rollout_buffer, "action_masks")}
        groups = self._groups
        maskable: bool | Callable[[Any], bool] = (
            (lambda agent: groups[agent] in masked) if masked else False
        )
        streams: dict[tuple[int, Any], list[Transition]] = {}
        self.dropped = 0
        self.group_dropped = dict.fromkeys(self.models, 0)
        recurrent = self._recurrent
        for group, lanes in recurrent.items():
            lanes.begin(shapes[group][0])
        idle = 0
        while any(remaining.values()):
            plan, stored = self._group_plan(remaining)
            idle = 0 if any(stored.values()) else idle + 1
            if idle > _MAX_IDLE_ROUNDS:
                waiting = [g for g, n in remaining.items() if n]
                raise RuntimeError(
                    f"no agent of group(s) {waiting} (buffers not full) could act for "
                    f"{_MAX_IDLE_ROUNDS} rounds (none live, or every one's mask allows nothing)"
                )
            keys = [(copy.index, agent) for copy in plan for agent in copy.acting]
            if not recurrent:
                rows = self._act(plan, keys)
                for copy in plan:
                    self._step(copy, rows, streams, maskable)
            else:  # the shared collector's LSTM resets and columns, per recurrent group
                chosen = {
                    group: lanes.assign(
                        [
                            (copy.index, agent)
                            for copy in plan
                            for agent in copy.acting
                            if groups[agent] == group
                            and (copy.kept_agents is None or agent in copy.kept_agents)
                        ],
                        self._starting,
                    )
                    for group, lanes in recurrent.items()
                }
                every = {key: at for found in chosen.values() for key, at in found.items()}
                starts = RecurrentLanes.starts(keys, every, self._starting)
                rows = self._act(plan, keys, starts)
                for copy in plan:
                    self._step(copy, rows, streams, maskable)
                for group, lanes in recurrent.items():
                    for key in chosen[group]:
                        lanes.place(key, streams[key][-1])
            for group, n in stored.items():
                remaining[group] -= n
        self._open.clear()  # the rollout cuts the trajectories still open
        out: dict[str, list[Segment]] = {}
        for group in self.models:
            n_rows, n_columns = shapes[group]
            if group in recurrent:
                placed = recurrent[group].packed()
            else:
                order = self._ordered([s for s in streams if self._groups[s[1]] == group])
                placed = pack([streams[s] for s in order], n_rows, n_columns)
            returns = {a: r for a, r in self.agent_returns.items() if self._groups[a] == group}
            self._fill(group, placed, update_model, returns)
            out[group] = _segments(placed, n_rows, n_columns)
        return out

    def _fill(
        self,
        group: str,
        placed: list[list[Placed]],
        update_model: bool,
        returns: Mapping[Any, Sequence[float]],
    ) -> None:
        """Fill ``group``'s buffer from its packed rows (``remote_groups`` keeps them instead)."""
        _fill_rollout(self.models[group], placed, update_model, returns)


class GroupReplayCollector(_GroupStepper):
    """Fill one off-policy model's ``ReplayBuffer`` per group of agents (see the module).

    :class:`SharedReplayCollector` with a model per group: each round acts with one batched
    forward pass per group (``models`` order) and steps every copy; each agent's complete
    transition (it acts again or ends) goes, in rows of its group buffer's ``n_envs`` cells,
    to :func:`rlightning_sb3.add_replay_step` with its group's model (its ``num_timesteps``,
    exploration rate, target updates, callback and logger) before the next round acts.
    :meth:`collect` returns once every group has finished one rollout of its model's
    ``train_freq``; a group that finished first keeps its further complete transitions, in
    order, for its next rollout (nothing is dropped). Then train each model as ``learn()``
    does. A group model's ``action_noise`` gets one process per (copy, agent) slot of its
    agents, drawn when the agent acts and reset after the step that ends its episode, and all
    of a group's reset when its model begins a new training run (a new
    :func:`rlightning_sb3.start_training`), as :class:`SharedReplayCollector`'s
    (:mod:`rlightning_pettingzoo._noise`).

    Build each model with a VecEnv of ``n_envs`` slots of its group's spaces and call
    :func:`rlightning_sb3.start_training` for each model first.

    Args:
        models: Group name -> a DQN, SAC, TD3 or other ``OffPolicyAlgorithm``.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        group_of: Agent id -> group name: a mapping or a function.
        seeds: The seed of each copy's first reset (None: no seed).

    Raises:
        TypeError: a model is not an off-policy SB3 model, or an env is not a ``ParallelEnv``.
        ValueError: a buffer has ``optimize_memory_usage`` or is an ``NStepReplayBuffer`` /
            ``HerReplayBuffer``; a model's ``train_freq`` counts episodes and its
            ``n_envs > 1`` (SB3's one-env rule, named by group); ``models`` or ``env_fns`` is
            empty, ``seeds`` is not one per copy, a possible agent has no group (or one not in
            ``models``), a group has no possible agent, or a possible agent observes
            channel-last images its group's model acts on but cannot store. At
            :meth:`collect`: an agent's spaces differ from its group's or do not fit its
            group's model; before any step, a model was not given ``start_training``.
    """

    def __init__(
        self,
        models: Mapping[str, OffPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]],
        *,
        group_of: GroupOf,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        _refuse_shared_models(models, "GroupReplayCollector")  # a mapping, before its models
        for group, model in models.items():
            if not isinstance(model, OffPolicyAlgorithm):
                raise TypeError(
                    "GroupReplayCollector needs an off-policy SB3 model (DQN, SAC, TD3) for "
                    f"each group, got {type(model).__name__} for group {group!r}"
                )
            refuse_sequence_buffer(model, "GroupReplayCollector", group)
            refuse_episodic_columns(model, "GroupReplayCollector", group)
            adapter_for(model)
        super().__init__(models, env_fns, group_of, seeds, "GroupReplayCollector")
        # per group with action noise: one process per (copy, agent) slot of its agents
        # (_noise; the group collectors' row ids have no prefix)
        for group, model in self.models.items():
            found = slot_noise(model, self._envs, "", lambda a, g=group: self._groups[a] == g)
            if found is not None:
                self._noises[group] = found
        self._ready: dict[str, deque[Transition]] = {g: deque() for g in self.models}
        self._ended: list[Transition] = []

    def noise_processes(self, group: str) -> VectorizedActionNoise | None:
        """Group ``group``'s per-slot action-noise processes (None without ``action_noise``).

        As :attr:`SharedReplayCollector.noise_processes`, over the group's agents' slots (copy
        order, then ``possible_agents`` order). Read it; do not draw from it or reset it.

        Raises:
            KeyError: ``group`` is not a key of ``models`` (the groups named).
        """
        if group not in self.models:
            raise KeyError(f"no group {group!r}: the groups are {list(self.models)}")
        noise = self._noises.get(group)
        return None if noise is None else noise.noise

    def _noise_run(self, model: Any) -> int | None:
        """The run that resets a group's noise processes: its model's (a recorder: its learner's).

        Returns:
            :func:`rlightning_sb3.training_run_id` of ``model``, or None (no run).
        """
        return training_run_id(model)

    def collect(self) -> dict[str, int]:
        """Collect one rollout of each group model's ``train_freq`` into its replay buffer.

        Returns:
            Group -> the agent-steps stored in its buffer (``n_envs`` per row). Each buffer,
            each model's counters and the envs are mutated; each model's callback and logger
            are called where ``collect_rollouts`` calls them.

        Raises:
            ValueError: an agent left without being terminated or truncated, or has no
                observation; an agent has no group, its spaces differ from its group's or do
                not fit its model; with ``action_noise``, an acting agent is not in its
                copy's ``possible_agents`` (it has no noise process); what
                :func:`rlightning_sb3.add_replay_step` raises.
            RuntimeError: no agent of a group still collecting could act for many rounds.
            rlightning_sb3.StopTraining: a model's callback stopped training.
        """
        for group, model in self.models.items():  # before any step (add_replay_step's rule)
            refuse_unstarted(model, "GroupReplayCollector", group)
        for group, noise in self._noises.items():  # a new run: _setup_learn's noise reset
            noise.start_run(self._noise_run(self.models[group]))
        self._start_run()  # every group's run reset its env: reset the copies (_stepper_base)
        stored = dict.fromkeys(self.models, 0)
        done = dict.fromkeys(self.models, False)
        idle = 0
        while True:
            plan = self._plan(sys.maxsize)
            complete = self._ended  # ended at the last step
            for copy in plan:  # acting again: their open transitions are complete
                for agent in copy.acting:
                    open_ = self._open.pop((copy.index, agent), None)
                    if open_ is not None:
                        complete.append(open_)
            complete.sort(key=lambda t: (t.env_index, self._agent_rank(t.env_index, t.agent_id)))
            for t in complete:
                self._ready[self._groups[t.agent_id]].append(t)
            self._ended = []
            for group, model in self.models.items():
                ready, n_columns = self._ready[group], int(model.replay_buffer.n_envs)
                while not done[group] and len(ready) >= n_columns:
                    row = [ready.popleft() for _ in range(n_columns)]
                    stored[group] += n_columns
                    done[group] = self._add(group, row)
            if all(done.values()):
                return stored
            keys = [(copy.index, agent) for copy in plan for agent in copy.acting]
            collecting = any(not done[self._groups[agent]] for _, agent in keys)
            idle = 0 if collecting else idle + 1
            if idle > _MAX_IDLE_ROUNDS:
                waiting = [g for g, d in done.items() if not d]
                raise RuntimeError(
                    f"no agent of group(s) {waiting} (rollouts not done) could act for "
                    f"{_MAX_IDLE_ROUNDS} rounds (none live, or every one's mask allows nothing)"
                )
            rows = self._act(plan, keys)
            for copy in plan:
                self._step(copy, rows, {}, False, self._ended)
            ended = [(t.env_index, t.agent_id) for t in self._ended]
            for noise in self._noises.values():  # after the step that ended them
                noise.ended(ended)

    def _add(self, group: str, row: list[Transition]) -> bool:
        """One row of ``group``'s complete transitions, through ``add_replay_step``.

        True where the row ends the group's rollout (``remote_group_replay`` keeps it instead).
        """
        return _add_replay_row(self.models[group], row)


def _refuse_unfit_rollout_models(models: Mapping[str, Any]) -> None:
    """Refuse group models :class:`GroupRolloutCollector` cannot drive (its one check).

    Also run by ``rlightning_pettingzoo.check_group_models`` (the Ray group collector's).

    Raises:
        TypeError: a model is not an on-policy SB3 model, named by group.
    """
    for group, model in models.items():
        if not isinstance(model, OnPolicyAlgorithm):
            raise TypeError(
                f"GroupRolloutCollector needs an on-policy SB3 model (PPO, A2C, MaskablePPO, "
                f"RecurrentPPO) for each group, got {type(model).__name__} for group {group!r}"
            )
        adapter_for(model)  # rlightning-sb3 is installed (the [sb3] extra)
