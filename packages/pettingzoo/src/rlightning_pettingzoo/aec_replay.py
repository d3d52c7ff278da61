"""Train one shared SB3 off-policy model (DQN) on turn-based (AEC) PettingZoo envs.

:class:`AECReplayCollector` is :class:`~rlightning_pettingzoo.AECRolloutCollector`'s turn
bookkeeping (the same ``_turn`` and ``_act``: who is selected, what ``env.last()`` reports, the
dead steps, opponents) with the replay collector's storage
(:class:`~rlightning_pettingzoo.SharedReplayCollector`'s rows, added with
:func:`rlightning_sb3.add_replay_step`, SB3's ``_store_transition`` and ``collect_rollouts``
bookkeeping: ``num_timesteps``, DQN's exploration rate and target updates, ``train_freq``,
callbacks, the logger). The semantics (``docs/pettingzoo.md``, "AEC environments"):

* A trained agent's transition runs from one of its turns to its next selection: its reward is
  what ``env.last()`` reports there (the rewards the env accumulated for it since it acted, the
  other agents' turns included), its next observation what it observes there.
* A game that ends on another agent's turn closes the agent's transition at its dead step
  (PettingZoo's ``_was_dead_step``): ``done``, with ``TimeLimit.truncated`` where it was
  truncated (SB3's replay buffer then bootstraps it, ``handle_timeout_termination``), the
  final observation as its next observation.
* A transition is complete when it is closed; complete transitions are added in rows of the
  buffer's ``n_envs`` cells (copy order, then ``possible_agents`` order, within one round), each
  row before the next turns are acted (SB3 stores a step before sampling the next). A rollout
  ends at the row where ``add_replay_step`` says ``train_freq`` is reached; transitions still
  open, and complete ones that do not fill a row, wait for the next :meth:`collect`: no value is
  made up and no transition is cut.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from rlightning_pettingzoo._columns import Transition
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    refuse_episodic_columns,
    refuse_sequence_buffer,
    refuse_unstarted,
)
from rlightning_pettingzoo.aec_collector import AECRolloutCollector, Opponent, _Turn
from rlightning_pettingzoo.replay import _add_replay_row

__all__ = ["AECReplayCollector"]


class AECReplayCollector(AECRolloutCollector):
    """Fill one shared off-policy model's ``ReplayBuffer`` from copies of a turn-based env.

    Each :meth:`collect` is one ``OffPolicyAlgorithm.collect_rollouts``: rounds in which every
    copy is stepped (opponents' turns, dead steps) up to a trained agent's turn, the
    transitions those steps closed are added in rows of ``n_envs`` (module docstring), and the
    turns are acted in one batched forward pass (copy order: the model's exploration --
    ``learning_starts`` warm-up, DQN's epsilon -- as ``_sample_action`` over a VecEnv). It
    returns after the row that ends a rollout of ``model.train_freq``; then train as
    ``learn()`` does (``model.train(gradient_steps, batch_size)`` once
    ``num_timesteps > learning_starts``; see ``docs/pettingzoo.md``). A copy whose game is over
    is reset (``seeds`` at its first reset, then no seed).

    Build the model with a VecEnv of ``n_envs`` slots of one agent's spaces (it sizes the
    buffer; it is never stepped here) and call :func:`rlightning_sb3.start_training` first.

    DQN acts without the env's action masks (SB3's DQN has none): its warm-up draws and greedy
    actions may be illegal moves, which PettingZoo's classic games answer as their rules say
    (``TerminateIllegalWrapper``: the game ends, the mover gets the illegal-move penalty). That
    is the env's data, stored as it is.

    Args:
        model: A DQN or other feed-forward ``OffPolicyAlgorithm`` without ``action_noise``.
        env_fns: One function per env copy, each returning a PettingZoo ``AECEnv``.
        opponents: As :class:`~rlightning_pettingzoo.AECRolloutCollector`'s: ``{agent_id:
            opponent}`` for the agents not trained (a frozen SB3 model or ``"random"``),
            acted and never stored; every other agent is acted by ``model`` and stored.
        seeds: The seed of each copy's first reset (None: no seed), also the seed of the
            copy's random opponents.

    Raises:
        TypeError: ``model`` is not an off-policy SB3 model, or what
            ``AECRolloutCollector`` raises for the envs and opponents.
        ValueError: the buffer has ``optimize_memory_usage`` (it reads a cell's next
            observation from the next row, which holds another transition here), its
            ``train_freq`` counts episodes and ``n_envs > 1`` (SB3's one-env rule), the model
            has an ``action_noise`` (no AEC env of PettingZoo has the continuous actions it is
            for; not supported), or what ``AECRolloutCollector`` raises.
    """

    _caller: ClassVar[str] = "AECReplayCollector"

    def __init__(
        self,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]],
        *,
        opponents: Mapping[Any, Opponent] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        super().__init__(model, env_fns, opponents=opponents, seeds=seeds)  # type: ignore[arg-type]
        self._pending: list[Transition] = []  # acted, not yet closed (stays across collects)
        self._ready: list[Transition] = []  # closed, not yet in a row

    def _check_model(self, model: Any) -> None:
        """Refuse a model this collector cannot fill a replay buffer for (before any env).

        Raises:
            TypeError: not an off-policy SB3 model, or a recurrent one.
            ValueError: ``optimize_memory_usage``, an ``NStepReplayBuffer`` or
                ``HerReplayBuffer``, an episodic ``train_freq`` with ``n_envs > 1``, or an
                ``action_noise``.
        """
        if not isinstance(model, OffPolicyAlgorithm):
            raise TypeError(
                f"{self._caller} needs an off-policy SB3 model (DQN, SAC, TD3), "
                f"got {type(model).__name__}"
            )
        _refuse_action_noise(model, self._caller)
        refuse_sequence_buffer(model, self._caller)
        refuse_episodic_columns(model, self._caller)
        adapter_for(model)  # the adapter's own refusals (a recurrent policy has none here)

    def collect(self) -> int:  # type: ignore[override]
        """Collect one rollout of ``model.train_freq`` into ``model.replay_buffer``.

        Returns:
            The agent-steps stored (``n_envs`` per row). The buffer, the model's counters
            (``num_timesteps``: one per stored turn; the exploration rate, the target network,
            episode counts, ``ep_info_buffer``) and the envs are mutated; the callback and
            logger are called where ``collect_rollouts`` calls them.

        Raises:
            ValueError: before any step, :func:`rlightning_sb3.start_training` was not called;
                a trained agent's or opponent's mask allows no action, or is malformed; what
                :func:`rlightning_sb3.add_replay_step` and the adapter raise.
            RuntimeError: a copy gave no trained agent a turn for many steps.
            rlightning_sb3.StopTraining: a callback's ``on_step`` returned False.
        """
        model: Any = self.model
        refuse_unstarted(model, self._caller)  # before any step
        self._start_run()  # a run that reset the model's env resets the copies (_stepper_base)
        n_columns = int(model.replay_buffer.n_envs)
        stored = 0
        while True:
            turns: list[_Turn] = []
            for i in range(len(self._envs)):
                turn = self._turn(i, {}, finishing=False)  # closes transitions on the way
                assert turn is not None
                turns.append(turn)
            closed = [t for t in self._pending if not self._is_open(t)]
            if closed:
                self._pending = [t for t in self._pending if self._is_open(t)]
                closed.sort(key=lambda t: (t.env_index, self._agent_rank(t.env_index, t.agent_id)))
                self._ready.extend(closed)
            while len(self._ready) >= n_columns:
                row, self._ready = self._ready[:n_columns], self._ready[n_columns:]
                stored += n_columns
                if self._add(row):
                    return stored  # the copies wait at their turns: the next collect acts them
            self._act(turns, {}, maskable=False)
            for turn in turns:  # _act opened one transition per turn
                opened = self._open[(turn.index, turn.agent)]
                assert opened is not None
                self._pending.append(opened)

    def _restart_copies(self) -> None:
        """The base's, then: transitions its dead steps closed are complete, the rest dropped.

        A transition a due dead step closed (its agent's game ended) is complete, as SB3 stored
        it at the step that ended the episode: it joins the rows still to be added (copy order,
        then ``possible_agents`` order); the transitions still open are cut by the reset
        (``_start_run`` drops them).
        """
        super()._restart_copies()
        closed = [t for t in self._pending if not self._is_open(t)]
        closed.sort(key=lambda t: (t.env_index, self._agent_rank(t.env_index, t.agent_id)))
        self._ready.extend(closed)
        self._pending = []

    def _add(self, row: list[Transition]) -> bool:
        """Hand one complete row over; True: the rollout of ``train_freq`` ended at it.

        A hook (as ``SharedReplayCollector._add``): here the row goes to the buffer
        (``replay._add_replay_row``: :func:`rlightning_sb3.add_replay_step`);
        :class:`~rlightning_pettingzoo.AECReplayRecorder` keeps it for the learner instead.
        """
        return _add_replay_row(self.model, row)

    def _is_open(self, transition: Transition) -> bool:
        """Whether ``transition`` still waits for its agent's next selection."""
        return self._open.get((transition.env_index, transition.agent_id)) is transition


def _refuse_action_noise(model: Any, caller: str) -> None:
    """Refuse a model with an ``action_noise``: the AEC replay collectors do not support one.

    Args:
        model: The trained off-policy model.
        caller: Named in the message.

    Returns:
        None; nothing is mutated.

    Raises:
        ValueError: ``model.action_noise`` is not None (no AEC env of PettingZoo has the
            continuous actions it is for).
    """
    noise = getattr(model, "action_noise", None)
    if noise is not None:
        raise ValueError(
            f"{caller} does not support action_noise ({type(noise).__name__}): "
            "PettingZoo's turn-based games have discrete actions; build the model with "
            "action_noise=None"
        )
