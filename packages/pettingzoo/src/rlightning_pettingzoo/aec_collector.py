"""Train one shared SB3 on-policy model on turn-based (AEC) PettingZoo envs: self-play, opponents.

:class:`AECRolloutCollector` steps ``n`` copies of a PettingZoo ``AECEnv`` (``tictactoe_v3``,
``connect_four_v3``, ...) and fills the model's own ``RolloutBuffer`` (``MaskableRolloutBuffer``
for a MaskablePPO) through the parallel collector's layout (:mod:`rlightning_pettingzoo.
_columns`) and ``rlightning_sb3``'s public helpers (:func:`rlightning_sb3.add_rollout_step`,
:func:`rlightning_sb3.finish_rollout`): SB3's rules are applied there, never copied here.

The semantics (``docs/pettingzoo.md``, "Training", "AEC environments"; ``docs/decisions.md``):

* A trained agent's transition runs from one of its turns to its next. Its reward is what
  PettingZoo's ``env.last()`` reports at that next turn (``AECEnv._cumulative_rewards``: the
  rewards the env accumulated for the agent since it acted, the other agents' turns included).
* An agent whose game ends on another agent's turn is still selected once more (PettingZoo's
  dead step, ``AECEnv._was_dead_step``): ``last()`` then gives its final observation, reward and
  flags, which close its last transition (terminated: no bootstrap; truncated: SB3's time-limit
  bootstrap ``gamma * V(final observation)``).
* Agents in ``opponents`` are acted by a frozen SB3 model or uniformly at random, never stored;
  every other agent is acted by the trained model and stored (self-play: no opponents, one
  stream per seat). A frozen RecurrentPPO opponent keeps one LSTM state per (copy, agent) it
  plays, in its own adapter under this collector's row ids: advanced only on that agent's turns
  and reset at its first turn of each game, as sb3-contrib's ``predict(observation, state,
  episode_start)`` steps it game by game.
* Rollout end: the transitions still open are closed by stepping on to their agents' next turn.
  Opponents' turns and dead steps are stepped as usual; a trained agent's turn that comes first
  (self-play) is acted by the model but not stored (counted in :attr:`AECRolloutCollector.
  dropped`). A copy then pauses at the turn where its last open transition closed, and the next
  rollout acts that turn: no value is made up, no row bootstraps from a guess.
* A RecurrentPPO (sb3-contrib) keeps one LSTM state per (copy, trained agent), advanced only on
  that agent's own turns (an AEC agent observes and acts only when selected; opponents' turns,
  the other seats' turns and dead steps leave it as it is), reset at the agent's first turn of
  each game (``episode_start``). Its turns' columns are assigned as they are acted, by the
  parallel collector's rule (:class:`rlightning_pettingzoo._lanes.RecurrentLanes`): an agent
  keeps its column while it has room, and where its run in a column starts below row 0 (its
  own column was full, or taken) its LSTM is reset too, as the buffer then flags the row
  ``episode_start``. Each row's ``lstm_states`` is the state its agent acted from; the turns
  acted but not stored at a rollout's end advance the state like any other turn, and an agent
  that keeps its column starts the next rollout's row 0 from it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from rlightning import rules
from rlightning_pettingzoo._columns import Placed, Transition, owned, pack
from rlightning_pettingzoo._envs import describe_env, require_aec
from rlightning_pettingzoo._lanes import RecurrentLanes
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    is_sb3_model,
    observation_intake,
    observation_shape_mismatch,
    refuse_gsde,
    refuse_unapplied_wrappers,
    refuse_unstarted,
    refuse_unstorable_layout,
    sb3_rows,
)
from rlightning_pettingzoo._stepper_base import CopyBookkeeping, row_prefix
from rlightning_pettingzoo.collector import Segment, _fill_rollout, _segments
from rlightning_pettingzoo.masks import find_action_mask
from rlightning_pettingzoo.policies import _WAITS, _check_model_fits, _checked_masks

__all__ = ["AECRolloutCollector"]

#: What an agent of ``opponents`` is acted by: a frozen SB3 model, or ``"random"``.
Opponent = Any

#: Env steps in a row without a trained agent's turn before the collector gives up.
_MAX_STEPS_WITHOUT_TURN = 100_000


@dataclass
class _Turn:
    """A trained agent's turn, waiting for the batched forward pass."""

    index: int
    agent: Any
    observation: Any
    mask: Any  # the checked mask in gymnasium's format, or None


class AECRolloutCollector(CopyBookkeeping):
    """Fill one shared on-policy model's ``RolloutBuffer`` from copies of a turn-based env.

    Each call to :meth:`collect` is one rollout of ``OnPolicyAlgorithm.collect_rollouts``: it
    steps the copies until ``n_steps * n_envs`` turns of trained agents are taken and stored
    (``model.n_steps`` and the model's ``n_envs``, the buffer's rows and columns). In each round
    every copy is stepped (opponents' turns, dead steps) up to a trained agent's turn, and those
    turns are acted in one batched forward pass (copy order), as many copies as still fit.
    Each (copy, agent) is one stream of the layout of :class:`SharedRolloutCollector`: the
    agent's transitions in time order, cut into segments in the buffer's columns. A copy whose
    game is over (``env.agents`` empty) is reset (``seeds`` at its first reset, then no seed).
    At the first :meth:`collect` of a training run that reset the model's env
    (:func:`rlightning_sb3.training_reset_run_id`) every copy is reset, after the dead steps a
    finished game still owes (``docs/pettingzoo.md``, "A new training run").

    Build the model with a VecEnv of ``n_envs`` slots of one agent's spaces (it sizes the
    buffer; it is never stepped here), call :func:`rlightning_sb3.start_training` first (its
    ``callback``, ``log_interval`` and ``progress_bar`` then act as in ``learn()``), and
    ``model.train()`` after each :meth:`collect`.

    A RecurrentPPO keeps one LSTM state per (copy, trained agent), stepped on the agent's own
    turns only and reset at its first turn of each game; its columns are assigned as its
    agents act (see the module docstring): give it one column per (copy, trained agent), or
    more, so that an agent changes column (and its LSTM is reset there) only where the seats'
    turn counts differ near a rollout's end.

    Args:
        model: A PPO, A2C, MaskablePPO, RecurrentPPO or other ``OnPolicyAlgorithm``. A
            MaskablePPO gets each turn's mask (``observe(agent)["action_mask"]`` or
            ``infos[agent]["action_mask"]``, see :func:`find_action_mask`) and stores it;
            the other models get none (a mask in a Dict observation is part of what they
            observe; an illegal move is the env's to handle).
        env_fns: One function per env copy, each returning a PettingZoo ``AECEnv``.
        opponents: ``{agent_id: opponent}`` for the agents that are not trained: a frozen SB3
            model (pass a copy, e.g. ``MaskablePPO.load(path)``; it acts through its own
            adapter as SB3 collects with it: an on-policy model samples, as
            ``predict(deterministic=False)``; an off-policy one follows ``_sample_action``,
            random while its ``num_timesteps < learning_starts``; a RecurrentPPO keeps an LSTM
            state per (copy, agent) it plays, stepped on that agent's turns only and reset at
            its first turn of each game) or ``"random"`` (uniform over
            the legal actions of the agent's mask, or its whole ``Discrete`` space without one;
            drawn from a generator per copy seeded with that copy's seed). Every other agent is
            acted by ``model`` and stored. Not modified.
        seeds: The seed of each copy's first reset (None: no seed), also the seed of the
            copy's random opponents.

    Raises:
        TypeError: ``model`` is not an on-policy SB3 model, an env is not an
            ``AECEnv``, an opponent is neither an SB3 model nor ``"random"``, or a ``"random"``
            opponent's action space is not ``Discrete``.
        ValueError: ``env_fns`` is empty, ``seeds`` is not one per copy, an opponent's agent is
            not in an env's ``possible_agents``, every agent is an opponent, an opponent is
            ``model`` itself (leave the agent out of ``opponents`` for self-play), or an
            opponent model's spaces do not fit its agent's. At :meth:`collect` with
            ``update_model``, before any step: :func:`rlightning_sb3.start_training` was not
            called.
    """

    #: The collector's name in its messages.
    _caller: ClassVar[str] = "AECRolloutCollector"

    def __init__(
        self,
        model: OnPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]],
        *,
        opponents: Mapping[Any, Opponent] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        self._check_model(model)
        self.model = model
        self._recurrent = adapter_for(model).is_recurrent
        self._make_envs(env_fns, self._caller, require_aec, "an AECEnv")
        refuse_unapplied_wrappers(model, self._caller)
        refuse_gsde(model, self._caller)
        # a trained agent's observation: a copy, transposed as SB3's VecTransposeImage where
        # SB3 wrapped the model's env in one (opponents' models transpose their own input)
        self._intake = observation_intake(model)
        n = len(self._envs)
        # seeds, open transitions, episodes, steps, ranks, dropped (trained agents' turns acted
        # but not stored: self-play, closing the open transitions at the rollout's end),
        # agent_returns (per trained agent): _stepper_base.CopyBookkeeping
        self._start_bookkeeping(seeds, self._caller)
        self._rngs = [np.random.default_rng(seed) for seed in self._seeds]
        self.opponents: dict[Any, Opponent] = dict(opponents or {})
        self._check_opponents()
        self._live = [False] * n  # the copy's game is on (reset and not over)
        # a recurrent opponent model: per copy, the opponents whose next turn is their first of
        # the game (their LSTM is reset there); their states are carried by the opponent's
        # adapter under this collector's row ids, one per (copy, agent)
        self._recurrent_opponents = {
            agent
            for agent, opponent in self.opponents.items()
            if not isinstance(opponent, str) and adapter_for(opponent).is_recurrent
        }
        self._opponent_starting: list[set[Any]] = [set() for _ in range(n)]
        self._acted: set[tuple[int, Any]] = set()  # acted since its last turn (reward owed)
        # a RecurrentPPO: this collector's row ids in the model's adapter (one LSTM state per
        # (copy, agent)), and each stored turn's column, chosen as it acts (_lanes)
        self._row_prefix = row_prefix(self._caller)
        self._lanes = RecurrentLanes(int(model.n_envs))

    def _check_model(self, model: Any) -> None:
        """Refuse a trained model this collector cannot fill a buffer for (before any env).

        Raises:
            TypeError: ``model`` is not an on-policy SB3 model.
        """
        if not isinstance(model, OnPolicyAlgorithm):
            raise TypeError(
                f"{self._caller} needs an on-policy SB3 model (PPO, A2C, MaskablePPO, "
                f"RecurrentPPO), got {type(model).__name__}"
            )

    def _check_opponents(self) -> None:
        for agent, opponent in self.opponents.items():
            _check_opponent(agent, opponent, self.model, self._caller)
        for i, env in enumerate(self._envs):
            possible = list(env.possible_agents)
            unknown = [a for a in self.opponents if a not in possible]
            if unknown:
                raise ValueError(
                    f"opponents names agent(s) {unknown} that {describe_env(env)} (copy {i}) "
                    f"does not have; its possible_agents are {possible}"
                )
            if all(a in self.opponents for a in possible):
                raise ValueError(
                    f"every agent of {describe_env(env)} (copy {i}) is in opponents "
                    f"({possible}): no agent is left to train"
                )
            _check_opponent_spaces(env, i, self.opponents)
            # the trained agents' spaces fit the model (the parallel collectors check it at each
            # agent's first round; an AEC env declares every seat's spaces up front)
            self._check_trained(env, i, [a for a in possible if a not in self.opponents])

    def _check_trained(self, env: Any, i: int, trained: list[Any]) -> None:
        """Refuse trained agents (of copy ``i``) the model cannot act for or store.

        A hook: :class:`~rlightning_pettingzoo.AECGroupRolloutCollector` checks each agent
        against its group's model.
        """
        _check_model_fits(env, self.model, trained, {})
        refuse_unstorable_layout(env, i, self.model, trained, self._caller)

    def _model_of(self, agent: Any) -> Any:
        """The model that acts for trained ``agent`` and stores its turns.

        A hook: ``model`` here, the agent's group's model in ``AECGroupRolloutCollector``.
        """
        return self.model

    def _intake_of(self, agent: Any) -> Callable[[Any], Any]:
        """Trained ``agent``'s observation intake (that of :meth:`_model_of`'s model; a hook)."""
        return self._intake

    def _lanes_of(self, agent: Any) -> RecurrentLanes | None:
        """The columns of trained ``agent``'s recurrent model; None for a feed-forward one.

        A hook: ``AECGroupRolloutCollector`` keeps one :class:`RecurrentLanes` per recurrent
        group (each group's model has its own buffer columns).
        """
        return self._lanes if self._recurrent else None

    def _reset(self, i: int) -> None:
        env = self._envs[i]
        env.reset(seed=self._seeds[i])
        self._seeds[i] = None
        self._live[i] = True
        self._starting[i] = {a for a in env.agents if a not in self.opponents}
        self._opponent_starting[i] = {a for a in env.agents if a in self._recurrent_opponents}
        for agent in self._starting[i]:
            self._episode[(i, agent)] = [0.0, 0]

    def _turn(
        self, i: int, streams: dict[tuple[int, Any], list[Transition]], finishing: bool
    ) -> _Turn | None:
        """Step copy ``i`` up to a trained agent's live turn; close transitions on the way.

        Returns that turn (the env is left there), or None when ``finishing`` and the copy has
        no open transition left (it pauses at the turn where the last one closed).
        """
        env = self._envs[i]
        for _ in range(_MAX_STEPS_WITHOUT_TURN):
            if not self._live[i]:
                self._reset(i)
            agent = env.agent_selection
            observation, reward, terminated, truncated, info = env.last()
            trained = agent not in self.opponents
            # observe() may return the env's own arrays: a copy (transposed for an image model)
            observation = self._intake_of(agent)(observation) if trained else owned(observation)
            done = bool(terminated or truncated)
            if trained:
                self._close(i, agent, observation, reward, terminated, truncated, streams)
            if finishing and not any(k[0] == i and t is not None for k, t in self._open.items()):
                return None
            if done:
                env.step(None)  # PettingZoo's dead step (AECEnv._was_dead_step)
                self._steps[i] += 1
                if not env.agents:
                    self._live[i] = False
                continue
            mask = self._mask(i, agent, observation, info)
            if trained:
                return _Turn(i, agent, observation, mask)
            env.step(self._opponent_action(i, agent, observation, mask))
            self._steps[i] += 1
            if not env.agents:
                self._live[i] = False
        raise RuntimeError(
            f"{describe_env(env)} (copy {i}) gave no trained agent a turn in "
            f"{_MAX_STEPS_WITHOUT_TURN} steps"
        )

    def _close(
        self,
        i: int,
        agent: Any,
        observation: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        streams: dict[tuple[int, Any], list[Transition]],
    ) -> None:
        """Trained ``agent``'s selection in copy ``i``: its reward since it acted, its episode.

        What ``env.last()`` reported closes the agent's open transition (reward, next
        observation, and the end where it is done) and adds to its episode; a done agent's
        episode is recorded (``agent_returns``, the transition's or its last stored row's
        ``episode``). Nothing when it has not acted since its last selection.
        """
        slot = (i, agent)
        if slot not in self._acted:
            return
        self._acted.discard(slot)
        episode = self._episode.setdefault(slot, [0.0, 0])
        episode[0] += float(reward)
        open_ = self._open.pop(slot, None)
        if open_ is not None:
            open_.reward = float(reward)
            open_.next_observation = observation
        if terminated or truncated:
            ended = {
                "r": episode[0],
                "l": episode[1],
                "t": round(time.time() - self._start_time, 6),
            }
            self.agent_returns.setdefault(agent, deque(maxlen=100)).append(episode[0])
            del self._episode[slot]
            if open_ is not None:
                open_.end = "terminated" if terminated else "truncated"
                open_.episode = ended
            elif streams.get(slot) and streams[slot][-1].end is None:
                # it ended after a dropped turn: its last stored row (cut there) carries the
                # episode for rollout/ep_rew_mean
                streams[slot][-1].episode = ended

    def _restart_copies(self) -> None:
        """Take each copy's due steps, then mark it for a reset (``_start_run``).

        A game that is over (or an agent that is done) still owes the done agents' dead steps
        (PettingZoo's ``_was_dead_step``), where their last rewards and episodes are taken:
        those episodes ended (SB3's ``VecMonitor`` recorded them at the step that ended them),
        so they are taken here (:meth:`_close`, into ``agent_returns`` and the transitions they
        close); a live turn stops it (the episodes still running are cut, as
        ``VecMonitor.reset`` cuts them). A game found over is then reset and stepped to a
        trained agent's turn first, as the collector would at its next round: SB3's VecEnv
        reset the env at the step that ended its episode, before ``_setup_learn`` resets it
        again (the env's and the random opponents' generators move on as they do in SB3).
        """
        for i, env in enumerate(self._envs):
            while self._live[i] and env.agents:
                agent = env.agent_selection
                observation, reward, terminated, truncated, _ = env.last()
                if not (terminated or truncated):
                    break
                if agent not in self.opponents:
                    observation = self._intake_of(agent)(observation)
                    self._close(i, agent, observation, reward, terminated, truncated, {})
                env.step(None)  # PettingZoo's dead step
                self._steps[i] += 1
            if self._live[i] and not env.agents:
                self._live[i] = False
            if not self._live[i] and self._steps[i]:  # over: the reset SB3 made at its end
                self._turn(i, {}, finishing=False)
            self._live[i] = False
        self._acted.clear()

    def _mask(self, i: int, agent: Any, observation: Any, info: Any) -> Any:
        env = self._envs[i]
        found = find_action_mask(agent, {agent: observation}, {agent: info})
        checked = _checked_masks([agent], [found], env)[0]
        if checked is _WAITS:
            raise ValueError(
                f"agent {agent!r} of {describe_env(env)} (copy {i}) has its turn but its action "
                "mask allows no action; an AEC agent cannot wait (env.step needs its action), "
                f"so {self._caller} refuses"
            )
        return checked

    def _opponent_action(self, i: int, agent: Any, observation: Any, mask: Any) -> Any:
        opponent = self.opponents[agent]
        space = self._envs[i].action_space(agent)
        if isinstance(opponent, str):  # "random"
            if isinstance(space, spaces.Discrete):
                legal = np.arange(int(space.n)) if mask is None else np.flatnonzero(mask)
                return np.int64(space.start + self._rngs[i].choice(legal))
            raise TypeError(
                f"the random opponent {agent!r} of {describe_env(self._envs[i])} needs a "
                f"Discrete action space, got {space}"
            )
        if agent in self._recurrent_opponents:  # its LSTM: reset at its game's first turn
            start = agent in self._opponent_starting[i]
            self._opponent_starting[i].discard(agent)
            key = (i, agent)
            rows = sb3_rows(
                opponent,
                [key],
                [observation],
                [mask],
                space,
                deterministic=False,
                episode_starts=[start],
                row_prefix=self._row_prefix,
            )
            return rows[key]["action"]
        rows = sb3_rows(opponent, [agent], [observation], [mask], space, deterministic=False)
        return rows[agent]["action"]

    def _act(
        self,
        turns: list[_Turn],
        streams: dict[tuple[int, Any], list[Transition]] | None,
        maskable: bool,
    ) -> None:
        """One batched forward pass for ``turns``; step each copy; store when ``streams``."""
        if not turns:
            return
        first = turns[0]
        action_space = self._envs[first.index].action_space(first.agent)
        keys = [(t.index, t.agent) for t in turns]
        starts: list[bool] | None = None
        lanes = self._lanes_of(first.agent)  # one model (and its columns) for all ``turns``
        if lanes is not None:  # the LSTM resets: where an episode or a run in a column starts
            chosen = lanes.assign(keys if streams is not None else [], self._starting)
            starts = RecurrentLanes.starts(keys, chosen, self._starting)
        model = self._model_of(first.agent)
        try:
            rows = sb3_rows(
                model,
                keys,
                [t.observation for t in turns],
                [t.mask for t in turns],
                action_space,
                deterministic=False,
                episode_starts=starts,
                row_prefix=self._row_prefix,
            )
        except ValueError as error:  # np.stack's or SB3's shape error: name the agent
            for t in turns:
                reason = observation_shape_mismatch(model.observation_space, t.observation)
                if reason is not None:
                    raise ValueError(
                        f"observation of agent {t.agent!r} of {describe_env(self._envs[t.index])}"
                        f" (copy {t.index}) does not fit the model's observation_space "
                        f"{model.observation_space} (as the collector holds it): {reason} "
                        "(PettingZoo: an agent's observation is an element of "
                        "env.observation_space(agent))"
                    ) from error
            raise
        for turn, key in zip(turns, keys, strict=True):
            i, agent = key
            env = self._envs[i]
            fields = dict(rows[key])
            if streams is None:
                self.dropped += 1
            else:
                if maskable:  # what MaskableRolloutBuffer stores for this row
                    space = env.action_space(agent)
                    fields["action_mask"] = (
                        np.ones(rules.mask_size(space), dtype=bool)
                        if turn.mask is None
                        else rules.flat_mask(space, turn.mask)
                    )
                transition = Transition(
                    i,
                    agent,
                    self._steps[i],
                    turn.observation,
                    fields,
                    agent in self._starting[i],
                )
                streams.setdefault(key, []).append(transition)
                self._open[key] = transition
                if lanes is not None:
                    lanes.place(key, transition)
            self._starting[i].discard(agent)
            self._acted.add(key)
            self._episode.setdefault(key, [0.0, 0])[1] += 1
            action = fields["action"]
            env.step(
                action.item() if isinstance(action, np.ndarray) and action.ndim == 0 else action
            )
            self._steps[i] += 1
            if not env.agents:
                self._live[i] = False

    def collect(self, *, update_model: bool = True) -> list[Segment]:
        """Collect one full rollout into ``model.rollout_buffer`` and compute its advantages.

        Args:
            update_model: As in :func:`rlightning_sb3.add_rollout_step`: advance
                ``num_timesteps`` (by one per stored turn), record finished agent episodes for
                ``rollout/ep_rew_mean``, call the callback and dump the logger where
                ``learn()`` does (needs :func:`rlightning_sb3.start_training`); also records
                ``rollout/ep_rew_mean/<agent_id>`` (mean of the trained agent's last 100
                episode returns) before the dump.

        Returns:
            The buffer's segments, column by column, row by row (:class:`Segment`;
            ``env_steps`` count every ``env.step`` of the copy, opponents' turns and dead
            steps included). The buffer is filled (``reset`` first when full) and its
            ``returns`` and ``advantages`` computed; the envs are stepped.

        Raises:
            TypeError: ``update_model`` is not a bool (e.g. the string ``"no"``), before
                any step.
            ValueError: a trained agent's or opponent's mask allows no action, or is malformed;
                what the SB3 helpers and the adapter raise (spaces, masks).
            RuntimeError: a copy gave no trained agent a turn for many steps.
            rlightning_sb3.StopTraining: a callback's ``on_step`` returned False while the rows
                were added (as :meth:`SharedRolloutCollector.collect`).
        """
        model: Any = self.model
        update_model = rules.check_flag(update_model, "update_model", f"{self._caller}.collect")
        if update_model:  # before any step: add_rollout_step would refuse only at the end
            refuse_unstarted(model, self._caller)
        self._start_run()  # a run that reset the model's env resets the copies (_stepper_base)
        buf = model.rollout_buffer
        n_rows, n_columns = int(buf.buffer_size), int(buf.n_envs)
        capacity = n_rows * n_columns
        maskable = hasattr(buf, "action_masks")
        streams: dict[tuple[int, Any], list[Transition]] = {}
        self.dropped = 0
        count = 0
        if self._recurrent:
            self._lanes.begin(n_rows)
        while count < capacity:
            turns: list[_Turn] = []
            for i in range(len(self._envs)):
                if len(turns) == capacity - count:
                    break
                turn = self._turn(i, streams, finishing=False)
                assert turn is not None
                turns.append(turn)
            self._act(turns, streams, maskable)
            count += len(turns)
        self._close_open(streams, maskable)
        if self._recurrent:
            placed = self._lanes.packed()
        else:
            order = sorted(streams, key=lambda s: (s[0], self._agent_rank(*s)))
            placed = pack([streams[s] for s in order], n_rows, n_columns)
        self._fill(placed, update_model)
        return _segments(placed, n_rows, n_columns)

    def _close_open(self, streams: dict[tuple[int, Any], list[Transition]], maskable: bool) -> None:
        """The rollout's end: step each copy on to the turns that close its open transitions.

        Trained agents' turns on the way are acted by :meth:`_act` and not stored (``dropped``);
        each copy pauses at the turn where its last open transition closed.
        """
        for _ in range(_MAX_STEPS_WITHOUT_TURN):
            turns = []
            for i in range(len(self._envs)):
                turn = self._turn(i, streams, finishing=True)
                if turn is not None:
                    turns.append(turn)
            if not turns:
                break
            self._act(turns, None, maskable)
        else:
            raise RuntimeError(
                f"the open transitions were not closed in {_MAX_STEPS_WITHOUT_TURN} rounds "
                "after the rollout's end (their agents were never selected again)"
            )
        self._open.clear()

    def _fill(self, placed: list[list[Placed]], update_model: bool) -> None:
        """Hand the rows to ``add_rollout_step``, then ``finish_rollout``."""
        _fill_rollout(self.model, placed, update_model, self.agent_returns)


def _check_opponent(agent: Any, opponent: Opponent, model: Any, caller: str) -> None:
    """Refuse an ``opponents`` entry that is not ``"random"`` or a frozen SB3 model.

    What :class:`AECRolloutCollector` checks of each opponent before it looks at the envs (the
    spaces are checked against each env copy there).

    Args:
        agent: The opponent's agent id (named in the messages).
        opponent: The entry: ``"random"`` or an SB3 model.
        model: The trained model (an opponent must not be it).
        caller: The collector's name (the messages name the entry; kept for the callers').

    Returns:
        None; nothing is mutated.

    Raises:
        TypeError: a string other than ``"random"``, or neither a string nor an SB3 model (a
            recurrent one, sb3-contrib's RecurrentPPO, is accepted: its LSTM state is kept per
            (copy, agent), see :class:`AECRolloutCollector`).
        ValueError: ``opponent`` is ``model`` itself.
    """
    if isinstance(opponent, str):
        if opponent != "random":
            raise TypeError(
                f"opponents[{agent!r}] must be a frozen SB3 model or 'random', "
                f"got the string {opponent!r}"
            )
    elif opponent is model:
        raise ValueError(
            f"opponents[{agent!r}] is the trained model itself; leave {agent!r} out "
            "of opponents for self-play (its turns are then acted and stored), or "
            "pass a frozen copy"
        )
    elif not is_sb3_model(opponent):
        raise TypeError(
            f"opponents[{agent!r}] must be a frozen SB3 model or 'random', "
            f"got {type(opponent).__name__}"
        )


def _check_opponent_spaces(env: Any, i: int, opponents: Mapping[Any, Opponent]) -> None:
    """Refuse, at construction, an opponent that could not act for its agent's spaces.

    A ``"random"`` opponent needs a ``Discrete`` action space (it draws uniformly from the legal
    actions); a model opponent must fit its agent's spaces (the check :func:`respond` applies,
    ``policies._check_model_fits``). Both were found only at the opponent's first turn.

    Raises:
        TypeError: a random opponent's action space is not ``Discrete``.
        ValueError: a model opponent's spaces do not fit its agent's (names both).
    """
    for agent, opponent in opponents.items():
        if isinstance(opponent, str):
            space = env.action_space(agent)
            if not isinstance(space, spaces.Discrete):
                raise TypeError(
                    f"the random opponent {agent!r} of {describe_env(env)} (copy {i}) needs a "
                    f"Discrete action space, got {space}"
                )
        else:
            try:
                _check_model_fits(env, opponent, [agent], {})
            except ValueError as error:
                raise ValueError(f"opponents[{agent!r}]: {error}") from error
