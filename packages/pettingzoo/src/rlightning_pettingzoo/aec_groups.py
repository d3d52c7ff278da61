"""One SB3 on-policy model per group of agents (or per agent) in turn-based (AEC) PettingZoo envs.

:class:`AECGroupRolloutCollector` is :class:`~rlightning_pettingzoo.AECRolloutCollector` with
one model per *group*, as :class:`~rlightning_pettingzoo.GroupRolloutCollector` is the shared
parallel collector with one model per group: ``group_of`` names each trained agent's group,
and each group's model acts for its agents and fills its **own** ``RolloutBuffer`` with their
trajectories only (``connect_four_v3`` with ``player_0`` trained by one MaskablePPO and
``player_1`` by another, both learning at once). The turn rules are ``AECRolloutCollector``'s
own code, reached through its hooks (``_turn``, ``_act``, ``_close_open``, ``_model_of``,
``_intake_of``, ``_check_trained``), never copied here:

* A trained agent's transition runs from one of its turns to its next; its reward is what
  ``env.last()`` reports there (PettingZoo's ``_cumulative_rewards``); a game that ends on
  another agent's turn closes the agent's last transition at its dead step.
* ``opponents`` (agents in no group) are acted by a frozen SB3 model or ``"random"`` and never
  stored, as in ``AECRolloutCollector``.

What the groups add (``docs/pettingzoo.md``, "AEC environments, a model per group"):

* **Acting.** Each round every copy is stepped up to a trained agent's turn (opponents' turns
  and dead steps on the way) and the turns are acted with one batched forward pass per group,
  the groups in ``models`` order, copy order within a group.
* **Groups that fill at different rates** (``GroupRolloutCollector``'s rule). Each
  :meth:`~AECGroupRolloutCollector.collect` fills every group's buffer once (its model's
  ``n_steps * n_envs`` turns). In a round, a copy whose turn belongs to a group whose buffer is
  full waits at that turn (unacted) while other copies store; when no copy of the round can
  store (every one waits at a full group's turn), the first such copy's turn is acted and
  **not stored** (counted in :attr:`~AECGroupRolloutCollector.group_dropped`; the agent's
  trajectory is cut before it), so that the env reaches the turns of the groups not yet full.
  Once every buffer is full, the open transitions are closed as ``AECRolloutCollector`` closes
  them (trained turns on the way acted, not stored, counted per group).
* **Per group**: its model's callback, logger and ``num_timesteps`` (one per stored turn of its
  agents), its agents' episodes in its ``rollout/ep_rew_mean`` and
  ``rollout/ep_rew_mean/<agent_id>``; the buffers are filled in ``models`` order at the rollout's
  end.
* **RecurrentPPO groups** (sb3-contrib) are driven as ``AECRolloutCollector`` drives a
  RecurrentPPO, by the same code (its ``_act``, through the ``_lanes_of`` hook, with one
  :class:`~rlightning_pettingzoo._lanes.RecurrentLanes` per recurrent group, kept across
  collects): one LSTM state per (copy, agent) of the group in its model's adapter (under this
  collector's row ids), advanced only on that agent's own turns (a turn acted but not stored,
  waiting for another group or closing the rollout, advances it too), reset at its first turn of
  each game and where its run in one of its group's columns starts below row 0. A feed-forward
  group keeps the slot-ordered layout.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from rlightning.rules import check_flag
from rlightning_pettingzoo._columns import Placed, Transition, pack
from rlightning_pettingzoo._envs import describe_env
from rlightning_pettingzoo._lanes import RecurrentLanes
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    observation_intake,
    refuse_gsde,
    refuse_unapplied_wrappers,
    refuse_unstarted,
    refuse_unstorable_layout,
)
from rlightning_pettingzoo._stepping import _MAX_IDLE_ROUNDS
from rlightning_pettingzoo.aec_collector import AECRolloutCollector, Opponent, _Turn
from rlightning_pettingzoo.collector import Segment, _fill_rollout, _segments
from rlightning_pettingzoo.groups import GroupOf, _lookup_group, _refuse_shared_models
from rlightning_pettingzoo.policies import _check_model_fits

__all__ = ["AECGroupRolloutCollector"]

_CALLER = "AECGroupRolloutCollector"


def _check_group_opponents(
    opponents: Mapping[Any, Any], models: Mapping[str, Any], group_of: GroupOf
) -> None:
    """Refuse an opponent that is a group's model, or an agent both in opponents and group_of.

    ``_GroupTurns``' check before the base's; also run on the learner by
    ``remote_aec_groups.check_aec_group_models`` (a runner gets the opponents as save bytes:
    a group's model would arrive there as a frozen copy).

    Raises:
        ValueError: ``opponents[agent]`` is one of ``models`` (named by agent and group), or
            ``group_of`` (a mapping) names an agent of ``opponents``.
    """
    for agent, opponent in opponents.items():
        for group, model in models.items():
            if opponent is model:
                raise ValueError(
                    f"opponents[{agent!r}] is the model of group {group!r}; put {agent!r} "
                    f"in group {group!r} (its turns are then acted and stored), or pass a "
                    "frozen copy"
                )
        if not callable(group_of) and agent in group_of:
            raise ValueError(
                f"agent {agent!r} is in opponents and in group_of (group "
                f"{group_of[agent]!r}); an agent is either trained by its group's "
                "model or acted by an opponent, not both"
            )


class _GroupTurns(AECRolloutCollector):
    """``AECRolloutCollector`` with a model per group, through its hooks.

    The engine of :class:`AECGroupRolloutCollector`; its own ``collect`` and ``_fill`` (one
    model's) are not used.
    """

    _caller = _CALLER  # the shared checks' messages name the public class

    def __init__(
        self,
        models: Mapping[str, OnPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]],
        *,
        group_of: GroupOf,
        opponents: Mapping[Any, Opponent] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        _refuse_shared_models(models, _CALLER)
        for group, model in models.items():
            if not isinstance(model, OnPolicyAlgorithm):
                raise TypeError(
                    f"{_CALLER} needs an on-policy SB3 model (PPO, A2C, MaskablePPO, "
                    f"RecurrentPPO) for each group, got {type(model).__name__} for group "
                    f"{group!r}"
                )
            refuse_unapplied_wrappers(model, _CALLER, group)
            refuse_gsde(model, _CALLER, group)
        self.models: dict[str, Any] = dict(models)
        # per RecurrentPPO group: its columns, assigned as its agents act (AECRolloutCollector's
        # rule, _lanes.RecurrentLanes; kept across collects: a seat keeps its column and state)
        self._group_lanes = {
            group: RecurrentLanes(int(model.rollout_buffer.n_envs))
            for group, model in self.models.items()
            if adapter_for(model).is_recurrent
        }
        self._group_of = group_of
        self._groups: dict[Any, str] = {}  # agent -> group, as looked up
        # per group: its model's observation intake (a CnnPolicy's VecTransposeImage)
        self._intakes = {g: observation_intake(m) for g, m in self.models.items()}
        self.group_dropped: dict[str, int] = dict.fromkeys(self.models, 0)
        # the base's model is the first group's: the base checks it as any group's (its own
        # checks run the hooks below, which check every group)
        super().__init__(
            next(iter(self.models.values())), env_fns, opponents=opponents, seeds=seeds
        )

    def _run_models(self) -> list[Any]:
        """Every group's model, in ``models`` order (``CopyBookkeeping._start_run``'s models).

        The shared copies are reset for a new run only once each of them began one that reset
        its env (``docs/decisions.md``).
        """
        return list(self.models.values())

    def _group(self, agent: Any, env: Any = None, i: int | None = None) -> str:
        """The group of trained ``agent`` (``group_of``'s answer, remembered).

        Raises:
            ValueError: ``group_of`` has no group for it, or one not in ``models``, or a
                ``group_of`` function raised for it (chained).
        """
        found = self._groups.get(agent)
        if found is not None:
            return found
        where = "" if env is None else f" of {describe_env(env)} (copy {i})"
        group = _lookup_group(
            self._group_of, self.models, agent, where, self._caller, " or name it in opponents"
        )
        self._groups[agent] = group
        return group

    def _check_opponents(self) -> None:
        """The base's checks, after those of the opponents against the groups."""
        _check_group_opponents(self.opponents, self.models, self._group_of)
        super()._check_opponents()

    def _check_trained(self, env: Any, i: int, trained: list[Any]) -> None:
        """Each trained agent has a group; each group has an agent and fits its agents."""
        by_group: dict[str, list[Any]] = {}
        for agent in trained:
            by_group.setdefault(self._group(agent, env, i), []).append(agent)
        empty = [g for g in self.models if g not in by_group]
        if empty:
            raise ValueError(
                f"group(s) {empty} of models have no trained agent among the possible_agents "
                f"{list(env.possible_agents)} of {describe_env(env)} (copy {i}) (opponents: "
                f"{list(self.opponents)}); their buffers could never be filled"
            )
        for group, agents in by_group.items():
            model = self.models[group]
            try:
                _check_model_fits(env, model, agents, {})
            except ValueError as error:
                raise ValueError(f"group {group!r}: {error}") from error
            refuse_unstorable_layout(env, i, model, agents, _CALLER, group)

    def _model_of(self, agent: Any) -> Any:
        return self.models[self._group(agent)]

    def _intake_of(self, agent: Any) -> Callable[[Any], Any]:
        return self._intakes[self._group(agent)]

    def _lanes_of(self, agent: Any) -> RecurrentLanes | None:
        return self._group_lanes.get(self._group(agent))

    def _act(
        self,
        turns: list[_Turn],
        streams: dict[tuple[int, Any], list[Transition]] | None,
        maskable: bool,
    ) -> None:
        """The base's ``_act`` once per group (``models`` order) for that group's ``turns``.

        ``maskable`` is ignored: a group's rows store masks where its buffer is a
        ``MaskableRolloutBuffer``. Unstored turns (``streams`` None) count in ``group_dropped``.
        """
        for group, model in self.models.items():
            mine = [t for t in turns if self._group(t.agent) == group]
            if mine:
                if streams is None:
                    self.group_dropped[group] += len(mine)
                super()._act(mine, streams, hasattr(model.rollout_buffer, "action_masks"))

    def collect_groups(self, update_model: bool) -> dict[str, list[Segment]]:
        """:meth:`AECGroupRolloutCollector.collect`."""
        shapes: dict[str, tuple[int, int]] = {}
        for group, model in self.models.items():
            buf = model.rollout_buffer
            shapes[group] = (int(buf.buffer_size), int(buf.n_envs))
        update_model = check_flag(update_model, "update_model", f"{_CALLER}.collect")
        if update_model:  # before any step: add_rollout_step would refuse only at the end
            for group, model in self.models.items():
                refuse_unstarted(model, _CALLER, group)
        self._start_run()  # every group's run reset its env: reset the copies (_stepper_base)
        for group, lanes in self._group_lanes.items():
            lanes.begin(shapes[group][0])
        remaining = {g: rows * columns for g, (rows, columns) in shapes.items()}
        streams: dict[tuple[int, Any], list[Transition]] = {}
        self.dropped = 0
        self.group_dropped = dict.fromkeys(self.models, 0)
        idle = 0
        while any(remaining.values()):
            stored: list[_Turn] = []
            waiting: list[_Turn] = []
            for i in range(len(self._envs)):
                if not any(remaining.values()):
                    break  # the base's rule: no copy is stepped past what can be stored
                turn = self._turn(i, streams, finishing=False)
                assert turn is not None
                group = self._group(turn.agent)
                if remaining[group]:
                    remaining[group] -= 1
                    stored.append(turn)
                else:  # its group's buffer is full: the copy waits at this turn
                    waiting.append(turn)
            if stored:
                idle = 0
                self._act(stored, streams, False)
                continue
            idle += 1
            if idle > _MAX_IDLE_ROUNDS:
                full = sorted({self._group(t.agent) for t in waiting})
                open_ = [g for g, n in remaining.items() if n]
                raise RuntimeError(
                    f"for {_MAX_IDLE_ROUNDS} rounds every copy was at a turn of group(s) {full}"
                    f" (buffers full), never of group(s) {open_} (buffers not full)"
                )
            self._act(waiting[:1], None, False)  # acted, not stored: the env moves on
        self._close_open(streams, False)
        out: dict[str, list[Segment]] = {}
        for group in self.models:
            n_rows, n_columns = shapes[group]
            if group in self._group_lanes:  # its columns as its agents acted
                placed = self._group_lanes[group].packed()
            else:  # the slots' streams in slot order
                order = sorted(
                    (s for s in streams if self._group(s[1]) == group),
                    key=lambda s: (s[0], self._agent_rank(*s)),
                )
                placed = pack([streams[s] for s in order], n_rows, n_columns)
            returns = {a: r for a, r in self.agent_returns.items() if self._group(a) == group}
            self._fill_group(group, placed, update_model, returns)
            out[group] = _segments(placed, n_rows, n_columns)
        return out

    def _fill_group(
        self,
        group: str,
        placed: list[list[Placed]],
        update_model: bool,
        returns: Mapping[Any, Sequence[float]],
    ) -> None:
        """Fill ``group``'s buffer from its packed rows (add_rollout_step, finish_rollout)."""
        _fill_rollout(self.models[group], placed, update_model, returns)


class AECGroupRolloutCollector:
    """Fill one on-policy model's ``RolloutBuffer`` per group of agents of a turn-based env.

    See the module for the rules. Each :meth:`collect` is one ``collect_rollouts`` for every
    group: each group's buffer is laid out as ``AECRolloutCollector``'s (each (copy, agent) of
    the group one stream of segments; slot order copy, then ``possible_agents``; a RecurrentPPO
    group's columns as its agents act) and filled
    through :func:`rlightning_sb3.add_rollout_step` and :func:`rlightning_sb3.finish_rollout`
    with that group's model. With one group holding every trained agent it is
    ``AECRolloutCollector`` exactly (the same turns, forward passes, rows and values).

    Build each model with a VecEnv of ``n_envs`` slots of its group's spaces (it sizes the
    buffer; it is never stepped) and, with ``update_model``, call
    :func:`rlightning_sb3.start_training` for each model (its own callback); train each model
    after each :meth:`collect`.

    Args:
        models: Group name -> a PPO, A2C, MaskablePPO, RecurrentPPO or other
            ``OnPolicyAlgorithm``, one model object per group (a RecurrentPPO: see the
            module; give it one column per (copy, agent) of its group, or more); ``models``
            order is the order of the forward passes and of the fills. Not copied: the models
            are trained in place.
        env_fns: One function per env copy, each returning a PettingZoo ``AECEnv``.
        group_of: Trained agent id -> group name: a mapping or a function. Opponents are not
            looked up (a function is never called for them); a mapping must not name them. A
            policy per agent is ``{agent: agent}`` with ``models`` keyed by agent id.
        opponents: ``{agent_id: opponent}`` for the agents in no group, as in
            ``AECRolloutCollector``: a frozen SB3 model (not one of ``models``) or
            ``"random"``. Not modified.
        seeds: The seed of each copy's first reset and of its random opponents (None: no
            seed).

    Raises:
        TypeError: a model is not an on-policy SB3 model (named by group);
            what ``AECRolloutCollector`` raises for the envs and the opponents.
        ValueError: ``models`` is empty or two groups share one model object; a model's env
            has VecEnv wrappers the collector would not apply; ``group_of`` (a mapping) names
            an agent of ``opponents``, or an opponent is a group's model; a trained agent has
            no group or one not in ``models``; a group has no trained agent among a copy's
            ``possible_agents``; an agent's spaces do not fit its group's model, or it observes
            channel-last images its group's model acts on but cannot store (each named by
            group); what ``AECRolloutCollector`` raises (seeds, opponents' agents and spaces),
            its messages naming ``AECGroupRolloutCollector``.
    """

    #: The engine (a subclass's own: ``remote_aec_groups``' keeps the rows unfilled).
    _turns_class: type[_GroupTurns] = _GroupTurns

    def __init__(
        self,
        models: Mapping[str, OnPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]],
        *,
        group_of: GroupOf,
        opponents: Mapping[Any, Opponent] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        self._turns = self._turns_class(
            models, env_fns, group_of=group_of, opponents=opponents, seeds=seeds
        )

    @property
    def models(self) -> dict[str, Any]:
        """Group -> its model, in ``models`` order (a new dict of the models trained in place)."""
        return dict(self._turns.models)

    @property
    def opponents(self) -> dict[Any, Opponent]:
        """Agent -> its opponent (``"random"`` or a frozen model), as given (a new dict)."""
        return dict(self._turns.opponents)

    @property
    def envs(self) -> list[Any]:
        """The env copies, in copy order (the collector's own objects, not copies)."""
        return self._turns.envs

    @property
    def dropped(self) -> int:
        """The trained agents' turns the last :meth:`collect` acted but did not store."""
        return self._turns.dropped

    @property
    def group_dropped(self) -> dict[str, int]:
        """Per group, its agents' turns the last :meth:`collect` acted but did not store."""
        return dict(self._turns.group_dropped)

    @property
    def agent_returns(self) -> dict[Any, deque[float]]:
        """Per trained agent id, the returns of its last 100 finished games (all copies)."""
        return self._turns.agent_returns

    def collect(self, *, update_model: bool = True) -> dict[str, list[Segment]]:
        """Collect one full rollout into every group's ``model.rollout_buffer``.

        Args:
            update_model: As in :func:`rlightning_sb3.add_rollout_step`, per group model: its
                ``num_timesteps`` (one per stored turn of its agents), its agents' finished
                episodes for ``rollout/ep_rew_mean``, its callback and logger (needs
                :func:`rlightning_sb3.start_training` for each model), and
                ``rollout/ep_rew_mean/<agent_id>`` for its agents, before its dump.

        Returns:
            Group -> its buffer's segments, column by column, row by row (:class:`Segment`;
            ``env_steps`` count every ``env.step`` of the copy). Every buffer is filled
            (``reset`` first when full) and its ``returns`` and ``advantages`` computed, in
            ``models`` order; the envs are stepped; :attr:`group_dropped` and
            :attr:`dropped` are set.

        Raises:
            TypeError: ``update_model`` is not a bool (e.g. the string ``"no"``), before
                any step.
            ValueError: before any step, with ``update_model``, a model was not given
                ``start_training`` (named by group); a turn's mask allows no action or is
                malformed; what the SB3 helpers and the adapter raise.
            RuntimeError: a copy gave no trained agent a turn for many steps, or for many
                rounds in a row every copy waited at a turn of a group whose buffer is full.
            rlightning_sb3.StopTraining: a model's callback returned False while its rows
                were added (the groups before it in ``models`` are filled, those after not).
        """
        return self._turns.collect_groups(update_model)
