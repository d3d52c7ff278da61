"""Add a step of responses, plus what the env returned, to SB3's rollout and replay buffers.

With :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>`, these helpers make an
SB3 training loop a few lines long and fill the buffers exactly as SB3's own collection does:

* :func:`start_training` -- begin as ``BaseAlgorithm.learn`` begins (``_setup_learn``), with
  ``learn``'s ``callback``, ``log_interval`` and ``progress_bar``;
* :func:`add_rollout_step` / :func:`finish_rollout` -- the buffer half of
  ``OnPolicyAlgorithm.collect_rollouts`` (and of sb3-contrib's ``RecurrentPPO`` /
  ``MaskablePPO`` versions): truncated episodes bootstrapped with the terminal observation's
  value, then returns and advantages;
* :func:`add_replay_step` -- ``OffPolicyAlgorithm._store_transition`` plus the bookkeeping
  ``collect_rollouts`` does after each step (timesteps, exploration schedule, target updates,
  action-noise resets);
* :func:`finish_training` -- end as ``learn`` ends (``callback.on_training_end()``).

The helpers call the callback where ``learn`` and ``collect_rollouts`` do -- ``on_rollout_start``
at a rollout's first step, ``update_locals`` (with SB3's ``locals``) and ``on_step`` at every
step, ``on_rollout_end`` at a rollout's end -- and dump the logger (``rollout/ep_rew_mean``,
``time/fps``, ...) every ``log_interval`` rollouts or episodes. When ``on_step`` returns False
they raise :class:`StopTraining`, where ``collect_rollouts`` returns early.

Observations and rewards are what the VecEnv the model was built with returned
(``model.get_env()``, which SB3 may have wrapped, e.g. in ``VecTransposeImage`` for images):
under ``VecNormalize`` too, its normalized outputs. On-policy SB3 stores them as they are;
off-policy SB3 stores the originals, which :func:`add_replay_step` reads from
``model.get_vec_normalize_env()`` as ``OffPolicyAlgorithm._store_transition`` does (and
refuses outputs that are not the wrapper's).

With ``update_model``, the helpers also leave the model's training state where SB3's
``collect_rollouts`` leaves it (``_last_obs``, ``_last_episode_starts``, ``_last_original_obs``,
RecurrentPPO's ``_last_lstm_states``; see ``_training_state``), so that ``learn(...,
reset_num_timesteps=False)`` or a second :func:`start_training` continues where the loop
stopped; :meth:`SB3PolicyAdapter.load_training_state
<rlightning_sb3.SB3PolicyAdapter.load_training_state>` hands that state to a loop.

The checks on what the env returned live in the private module ``_buffer_checks``, the reading
of a step's responses as stacked columns in ``_columns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import ReplayBuffer, RolloutBuffer
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.utils import should_collect_more_steps

from rlightning import PolicyResponse
from rlightning.rules import as_bools, check_flag
from rlightning_sb3._actions import check_action_masks
from rlightning_sb3._batch import per_env_bools
from rlightning_sb3._buffer_checks import (
    check_buffer_observation,
    check_scaled_actions,
    check_step,
    require_started,
)
from rlightning_sb3._columns import StepColumns
from rlightning_sb3._noise import check_replay_columns
from rlightning_sb3._observations import native_arrays, obs_tensor
from rlightning_sb3._recurrent import stack_rnn_states
from rlightning_sb3._training import (
    StopTraining,
    dump_logs,
    finish_training,
    is_sb3_on_policy_collection,
    refuse_stopped,
    replay_step_locals,
    require_new_observation,
    rollout_step_locals,
    run_of,
    start_training,
    stop,
)
from rlightning_sb3._training_state import (
    last_observation,
    replay_outputs,
    replay_transition,
    rollout_inputs,
    rollout_outputs,
)

__all__ = [
    "StopTraining",
    "add_replay_step",
    "add_rollout_step",
    "check_training",
    "finish_rollout",
    "finish_training",
    "start_training",
]


def check_training(model: BaseAlgorithm) -> None:
    """Refuse a model that ``add_rollout_step``/``add_replay_step`` with ``update_model`` would.

    The same two rules those helpers apply at their first step, for a caller that steps envs
    before it calls them (a rollout collector) and wants the refusal before any env step:
    the model must have been started by :func:`start_training`, and its run must not have been
    stopped by a callback. Reads the model; changes nothing.

    Args:
        model: An SB3 algorithm (``OnPolicyAlgorithm`` or ``OffPolicyAlgorithm``).

    Raises:
        ValueError: :func:`start_training` has not been called on ``model`` (no step budget).
        StopTraining: a callback stopped ``model``'s run (call :func:`finish_training`).
    """
    require_started(model)
    refuse_stopped(run_of(model))


def add_rollout_step(
    model: OnPolicyAlgorithm,
    observation: Any,
    responses: Sequence[PolicyResponse],
    rewards: Any,
    dones: Any,
    infos: Sequence[dict[str, Any]],
    *,
    buffer: RolloutBuffer | None = None,
    env_ids: Sequence[str] | None = None,
    update_model: bool = True,
    new_observation: Any = None,
) -> np.ndarray:
    """Add one step to an on-policy rollout buffer, as ``OnPolicyAlgorithm.collect_rollouts``.

    For each env whose episode was truncated (``done`` with ``infos[i]["TimeLimit.truncated"]``
    and a ``terminal_observation``), ``gamma * V(terminal_observation)`` is added to its reward
    (SB3 issue #633); for RecurrentPPO ``V`` runs from the env's state after the step
    (``response.state.vf``), as sb3-contrib does. Then ``buffer.add(observation, buffer actions,
    rewards, episode starts, values, log_probs)`` -- with ``lstm_states`` (from
    ``buffer_state``) for RecurrentPPO and ``action_masks`` for MaskablePPO (the masks of
    per-env responses are checked as ``act`` checks them; an unsplit ``ResponseBatch`` holds the
    copy ``act`` checked). A full buffer (the
    previous rollout's) is reset first, as ``collect_rollouts`` resets it at each rollout's start.
    At a rollout's first step (the buffer empty or full) the policy is put in eval mode
    (``policy.set_training_mode(False)``, as ``collect_rollouts`` starts), so the bootstraps
    here and :func:`finish_rollout`'s last values are eval-mode values also where the actions
    came from a replica (the model never acted, and ``train()`` left it in training mode).

    With ``update_model``, the step follows ``collect_rollouts``' order: ``num_timesteps +=
    n_envs``; when :func:`start_training` got a callback, ``on_rollout_start`` (the first step of
    a rollout: after :func:`finish_rollout`, at the start, or when the buffer was full), then
    ``callback.update_locals`` with the ``locals`` SB3 gives (``self``, ``env``, ``n_steps``,
    ``obs_tensor``, ``actions``, ``clipped_actions``, ``values``, ``log_probs``, ``new_obs``,
    ``rewards``, ``dones``, ``infos``, ...) and ``on_step``; then ``_update_info_buffer``, the
    truncation bootstrap and ``buffer.add``. SB3 calls ``on_rollout_start`` before the rollout's
    first action; here it runs after that step's ``act`` and ``env.step``.

    Also with ``update_model``, the model's training state as ``collect_rollouts`` keeps it:
    while the step is collected (and so when a callback stops it), ``_last_obs`` is
    ``observation``, ``_last_episode_starts`` the stored episode starts and RecurrentPPO's
    ``_last_lstm_states`` the stored ``lstm_states``; once it is stored, ``_last_obs`` is
    ``new_observation``, ``_last_episode_starts`` is ``dones`` and ``_last_lstm_states`` the
    responses' ``state``. Without ``new_observation``, ``_last_obs`` is None until the next
    step or :func:`finish_rollout` (a ``learn()`` in between resets the env rather than
    continue from an observation already stepped).

    Args:
        model: PPO, A2C, RecurrentPPO, MaskablePPO or another ``OnPolicyAlgorithm``.
        observation: The observation the responses answered, ``(n_envs, *obs_shape)`` (dict for
            a Dict space), as the VecEnv returned it.
        responses: From :meth:`SB3PolicyAdapter.act`, one per env.
        rewards: ``(n_envs,)`` rewards from ``env.step`` (ints or floats, an array or a list);
            not modified (a float copy is bootstrapped).
        dones: ``(n_envs,)`` booleans from ``env.step``.
        infos: ``n_envs`` info dicts from ``env.step``.
        buffer: The buffer to fill; default ``model.rollout_buffer``.
        env_ids: The VecEnv's env ids in env order, when ``responses`` are in another order.
        update_model: Also advance ``model.num_timesteps`` by ``n_envs``, record finished
            episodes (``model._update_info_buffer``) and call the callback, as
            ``collect_rollouts`` does.
        new_observation: What ``env.step`` returned, ``(n_envs, *obs_shape)``: the callback's
            ``locals["new_obs"]`` and the model's ``_last_obs`` (a native copy where torch
            cannot view the array; not stored in the buffer). Needed when
            :func:`start_training` got a callback or ``progress_bar``; pass it always, so that
            the model's state is SB3's after every step.

    Returns:
        The ``(n_envs,)`` rewards as stored (bootstrapped where truncated), a new array:
        float32 or float64 rewards keep their dtype, integer rewards become float32 (as
        ``DummyVecEnv`` returns them), so the bootstrap is never truncated. ``buffer`` is
        mutated (``reset`` when full, then ``add``), and with ``update_model`` so is ``model``
        (``num_timesteps``, ``ep_info_buffer``, ``ep_success_buffer``, ``_last_obs``,
        ``_last_episode_starts``, ``_last_lstm_states``); ``rewards`` and ``responses`` are
        not.

    Raises:
        TypeError: ``update_model`` is not a bool (rule ``flag``; a ``numpy.bool_`` is one;
            before anything is read or changed); ``responses`` is not a sequence of
            PolicyResponse, ``env_ids`` is not a sequence of str, an info is not a dict, the
            rewards are not real numbers (bool, complex, str or object dtype), or
            ``observation`` is a dict for a buffer of arrays (or the reverse).
        ValueError: ``update_model`` is set before :func:`start_training`; the responses
            (empty, a stacked batch, repeated or unmatched env ids), rewards, dones, infos or
            ``observation`` do not match the buffer's envs (counts, shapes ``(n_envs,)`` and
            ``(n_envs, *obs_shape)``, non-boolean dones); a response lacks a field
            :meth:`~SB3PolicyAdapter.act` gives (``buffer_action``, ``value``, ``log_prob``,
            ``episode_start``; ``buffer_state``/``state`` for RecurrentPPO); an
            ``episode_start`` is not a boolean (0/1 accepted); some responses have an
            ``action_mask`` and others not; or a per-env response's ``action_mask`` is one
            :meth:`~SB3PolicyAdapter.act` would refuse (values other than 0/1, the wrong
            length, a sub-space with no legal action -- sb3-contrib would store it and train on
            a made-up log-probability -- or a mask for a model other than MaskablePPO); or
            a callback runs and ``new_observation`` is missing or not ``(n_envs, *obs_shape)``.
        StopTraining: the callback's ``on_step`` returned False (``num_timesteps`` counts the
            step, nothing is stored, as ``collect_rollouts`` returns early), or returned False
            at an earlier step of this run (then nothing is changed).
    """
    update_model = check_flag(update_model, "update_model", "add_rollout_step")
    run = None
    if update_model:
        require_started(model)
        run = run_of(model)
        refuse_stopped(run)
    buf: Any = model.rollout_buffer if buffer is None else buffer
    step = StepColumns(responses, env_ids, "SB3PolicyAdapter.act() on an on-policy model")
    ids = step.ids
    rewards_arr, dones_arr = check_step(buf.n_envs, ids, rewards, dones, infos)
    check_buffer_observation("observation", observation, buf, ids)
    if require_new_observation(run, new_observation):
        check_buffer_observation("new_observation", new_observation, buf, ids)
    actions = step.array("buffer_action")
    values = step.tensor("value")
    log_probs = step.tensor("log_prob")
    episode_starts = per_env_bools(step.bools("episode_start"), "episode_start", ids, None)
    recurrent = hasattr(buf, "hidden_states_pi")
    extra: dict[str, Any] = {}
    if recurrent:
        extra["lstm_states"] = stack_rnn_states(step.items("buffer_state"))
        next_states = step.items("state")
    masks = step.masks()
    if masks is not None:
        if step.stacked is None:  # per-env responses: built or edited after act, so checked
            masks = check_action_masks(model, hasattr(buf, "action_masks"), masks, ids)
        extra["action_masks"] = masks

    policy: Any = model.policy
    if buf.full or buf.pos == 0:
        # collect_rollouts' set_training_mode(False) as a rollout starts: its bootstraps and
        # last values are eval-mode values even where the model never acted (a replica did)
        policy.set_training_mode(False)
    # The values of truncated episodes' terminal observations (SB3 issue #633), computed before
    # anything is changed; added to the rewards after the callbacks, as collect_rollouts does.
    bootstrap: list[tuple[int, Any]] = []
    done_flags = dones_arr.tolist()  # Python bools: no numpy scalar per env on every step
    for idx in range(len(done_flags)) if True in done_flags else ():
        if (
            done_flags[idx]
            and infos[idx].get("terminal_observation") is not None
            and infos[idx].get("TimeLimit.truncated", False)
        ):
            terminal = native_arrays(infos[idx]["terminal_observation"])
            terminal_obs = policy.obs_to_tensor(terminal)[0]
            with th.no_grad():
                if recurrent:
                    vf_h, vf_c = next_states[idx].vf
                    terminal_state = (
                        vf_h.unsqueeze(1).contiguous(),
                        vf_c.unsqueeze(1).contiguous(),
                    )
                    starts = th.tensor([False], dtype=th.float32, device=model.device)
                    terminal_value = policy.predict_values(terminal_obs, terminal_state, starts)[0]
                else:
                    terminal_value = policy.predict_values(terminal_obs)[0]
            bootstrap.append((idx, terminal_value))

    callback = None if run is None else run.callback
    if buf.full:
        buf.reset()  # collect_rollouts resets the buffer as a rollout begins
    if run is not None and (run.steps is None or buf.pos == 0):
        run.steps = 0
        if callback is not None:
            callback.on_rollout_start()
    if update_model:
        # where collect_rollouts stands while this step is collected (and if a callback stops)
        rollout_inputs(model, observation, episode_starts, extra.get("lstm_states"))
        model.num_timesteps += len(ids)
    if run is not None and callback is not None:
        callback.update_locals(
            rollout_step_locals(
                model, run, buf, step, observation, actions, values, log_probs, masks,
                new_observation, rewards_arr, dones_arr, infos, episode_starts,
            )
        )  # fmt: skip
        if not callback.on_step():
            stop(run)
    if update_model:
        # check_step accepted infos: a list (VecEnv.step's) or another Sequence
        model._update_info_buffer(infos if type(infos) is list else list(infos), dones_arr)
    for idx, terminal_value in bootstrap:
        rewards_arr[idx] += model.gamma * terminal_value
    buf.add(observation, actions, rewards_arr, episode_starts, values, log_probs, **extra)
    if update_model:  # collect_rollouts' _last_obs, _last_episode_starts (_last_lstm_states)
        rollout_outputs(
            model, new_observation, dones_arr, stack_rnn_states(next_states) if recurrent else None
        )
    if run is not None:
        run.steps = (run.steps or 0) + 1
        run.last_actions = actions
    return rewards_arr


def finish_rollout(
    model: OnPolicyAlgorithm,
    new_observation: Any,
    dones: Any,
    *,
    responses: Sequence[PolicyResponse] | None = None,
    buffer: RolloutBuffer | None = None,
    env_ids: Sequence[str] | None = None,
    update_model: bool = True,
) -> None:
    """Compute returns and advantages of a full rollout, as the end of ``collect_rollouts``.

    ``values = policy.predict_values(new_observation)`` (RecurrentPPO: from the envs' states
    after the last step, ``responses[i].state.vf``, reset where ``dones``; an array torch cannot
    read, with a negative stride or a non-native byte order, is read from a native copy), then
    ``buffer.compute_returns_and_advantage(last_values=values, dones=dones)``. With
    ``update_model``, the rest of the rollout as ``collect_rollouts`` and ``learn()`` end it:
    the callback's ``update_locals`` (SB3's ``OnPolicyAlgorithm`` only: ``n_steps``, the last
    ``values``, ``new_obs``, ``dones``, ``actions``) and ``on_rollout_end``; then ``learn``'s
    ``iteration += 1``, ``model._update_current_progress_remaining`` (so that ``model.train()``
    reads the right schedule values) and, every ``log_interval`` iterations,
    ``model.dump_logs(iteration)`` (``time/iterations``, ``rollout/ep_rew_mean``,
    ``rollout/ep_len_mean``, ``time/fps``, ``time/time_elapsed``, ``time/total_timesteps``, and
    what the last ``model.train()`` recorded). Call ``model.train()`` after it, as ``learn``.
    With ``update_model`` the model is then where ``collect_rollouts`` leaves it:
    ``_last_obs = new_observation``, ``_last_episode_starts = dones`` and (RecurrentPPO)
    ``_last_lstm_states`` the responses' ``state``.

    Args:
        model: The on-policy model.
        new_observation: The observation ``env.step`` returned at the rollout's last step,
            ``(n_envs, *obs_shape)`` (dict for a Dict space).
        dones: The ``(n_envs,)`` dones of that step.
        responses: The last step's responses; needed for RecurrentPPO (their ``state``).
        buffer: The buffer; default ``model.rollout_buffer``.
        env_ids: The VecEnv's env ids in env order, when ``responses`` are in another order.
        update_model: Also update the model's progress, call the callback and dump the logger
            (needs :func:`start_training` first).

    Returns:
        None. ``buffer`` is mutated (its ``returns`` and ``advantages`` are filled in place),
        and with ``update_model`` so is ``model`` (``_current_progress_remaining``, the
        training state above; the logger's values are written out when it dumps).

    Raises:
        TypeError: ``update_model`` is not a bool (rule ``flag``; before anything is changed);
            ``responses`` or ``env_ids`` is not a sequence of the right kind, or
            ``new_observation`` is a dict for a buffer of arrays (or the reverse).
        ValueError: ``update_model`` is set before :func:`start_training`; the buffer is not
            full; ``dones`` is not ``(n_envs,)`` booleans; ``new_observation`` is not
            ``(n_envs, *obs_shape)``; ``responses`` do not match ``env_ids`` (see
            :func:`add_rollout_step`); or, for RecurrentPPO, ``responses`` are missing or lack
            a ``state`` field.
        StopTraining: a callback stopped this run (nothing is changed).
    """
    update_model = check_flag(update_model, "update_model", "finish_rollout")
    if update_model:
        require_started(model)
        refuse_stopped(run_of(model))
    buf: Any = model.rollout_buffer if buffer is None else buffer
    if not buf.full:
        raise ValueError(
            f"the rollout buffer holds {buf.pos} of {buf.buffer_size} steps; "
            "finish_rollout() needs a full rollout (add_rollout_step n_steps times)"
        )
    step = None if responses is None else StepColumns(responses, env_ids, "SB3PolicyAdapter.act()")
    ids: list[Any] = list(range(buf.n_envs)) if step is None else step.ids
    dones_arr = as_bools(dones, "dones", shape=(len(ids),), labels=ids)
    check_buffer_observation("new_observation", new_observation, buf, ids)
    policy: Any = model.policy
    last_obs = obs_tensor(policy, native_arrays(new_observation), model.device)
    states = None
    with th.no_grad():
        if hasattr(buf, "hidden_states_pi"):
            if step is None:
                raise ValueError(
                    "finish_rollout() needs the last step's responses for a recurrent policy "
                    "(their state holds the LSTM state to compute the last values from)"
                )
            states = stack_rnn_states(step.items("state"))
            starts = th.tensor(dones_arr, dtype=th.float32, device=model.device)
            values = policy.predict_values(last_obs, states.vf, starts)
        else:
            values = policy.predict_values(last_obs)
    buf.compute_returns_and_advantage(last_values=values, dones=dones_arr)
    if not update_model:
        return
    # the rollout's last step as collect_rollouts leaves it (new_obs, dones, LSTM states)
    rollout_outputs(model, new_observation, dones_arr, states)
    run = run_of(model)
    if run.callback is not None:
        if is_sb3_on_policy_collection(model):  # sb3-contrib's versions skip this update
            run.callback.update_locals(
                {
                    "n_steps": run.steps,
                    "values": values,
                    "new_obs": new_observation,
                    "dones": dones_arr,
                    "actions": run.last_actions,
                }
            )
        run.callback.on_rollout_end()
    run.steps = None
    run.iteration += 1
    _update_progress(model)
    if run.log_interval is not None and run.iteration % run.log_interval == 0:
        dump_logs(model, run.iteration)


def _update_progress(model: BaseAlgorithm) -> None:
    model._update_current_progress_remaining(model.num_timesteps, model._total_timesteps)


def add_replay_step(
    model: OffPolicyAlgorithm,
    observation: Any,
    responses: Sequence[PolicyResponse],
    new_observation: Any,
    rewards: Any,
    dones: Any,
    infos: Sequence[dict[str, Any]],
    *,
    buffer: ReplayBuffer | None = None,
    env_ids: Sequence[str] | None = None,
    update_model: bool = True,
) -> bool:
    """Add one step to a replay buffer, as ``OffPolicyAlgorithm._store_transition``.

    The next observation of an env whose episode ended is its ``infos[i]["terminal_observation"]``
    (the VecEnv has already reset it), on a deep copy of ``new_observation``; then
    ``buffer.add(observation, next_obs, buffer actions, rewards, dones, infos)``. The buffer
    itself handles truncation (``handle_timeout_termination``: ``TimeLimit.truncated`` steps are
    not terminal for the TD target).

    With a ``VecNormalize`` in the model's env (``model.get_vec_normalize_env()``), what is
    stored is the originals, as ``_store_transition`` reads them from the wrapper: the
    model's ``_last_original_obs`` as the observation, ``get_original_obs()`` with each done
    env's row its ``unnormalize_obs``'d terminal observation, and ``get_original_reward()``.
    The loop passes what the wrapped env returned (normalized); anything else is refused
    (``ValueError``): ``observation`` must equal the model's ``_last_obs`` (what
    :func:`start_training` returned, then each step's ``new_observation``), and
    ``new_observation`` and ``rewards`` what the wrapper returned at its last step (its
    ``normalize_obs``/``normalize_reward`` of its originals), since the stored originals are
    those of the wrapper's last step. ``update_model=False`` is refused there (the original of
    ``observation`` is the model's ``_last_original_obs``, which it would not keep).

    With ``update_model``, the rest of ``collect_rollouts``' step: ``num_timesteps += n_envs``,
    ``_update_info_buffer``, ``_update_current_progress_remaining``, ``_on_step`` (DQN: target
    update and exploration rate), and for each finished episode ``_episode_num += 1``, the
    env's action-noise reset (``action_noise.reset(indices=[i])`` for column ``i``: the
    buffer's columns must be the env order the first exploring ``act`` gave the noise) and,
    every ``log_interval`` episodes (:func:`start_training`),
    ``model.dump_logs()`` (``time/episodes``, ``rollout/ep_rew_mean``, ``time/fps``, ...). A
    callback given to :func:`start_training` is called in ``collect_rollouts``' order:
    ``on_rollout_start`` at a rollout's first step (after that step's ``act`` and ``env.step``;
    SB3 calls it before the first action), ``update_locals`` (SB3's ``locals``: ``self``,
    ``env``, ``train_freq``, ``replay_buffer``, ``num_collected_steps``, ``actions``,
    ``buffer_actions``, ``new_obs``, ``rewards``, ``dones``, ``infos``, ...) and ``on_step`` right
    after ``num_timesteps += n_envs`` (before the step is stored), and ``on_rollout_end`` when the
    rollout has the steps or episodes ``model.train_freq`` asks for. The model's training state
    follows ``_store_transition``: ``_last_obs`` is ``observation`` while the step is collected
    (when a callback stops it), then ``new_observation``; ``_last_original_obs`` then the
    original of ``new_observation`` (``VecNormalize``) or ``observation`` (otherwise, as SB3
    assigns it ``_last_obs`` before storing).

    Args:
        model: SAC, TD3, DDPG, DQN or another ``OffPolicyAlgorithm``.
        observation: The observation the responses answered, ``(n_envs, *obs_shape)`` (dict for
            a Dict space).
        responses: From :meth:`SB3PolicyAdapter.act`, one per env (their ``buffer_action``,
            ``(*action_shape)``; for a Box space scaled to [-1, 1]).
        new_observation: What ``env.step`` returned, ``(n_envs, *obs_shape)`` (not modified: a
            deep copy gets the terminal observations); the model's ``_last_obs`` after the
            step (a native copy where torch cannot view the array).
        rewards: ``(n_envs,)`` rewards from ``env.step`` (ints or floats, an array or a list).
        dones: ``(n_envs,)`` booleans from ``env.step``.
        infos: ``n_envs`` info dicts from ``env.step``.
        buffer: The buffer to fill; default ``model.replay_buffer``.
        env_ids: The VecEnv's env ids in env order, when ``responses`` are in another order.
        update_model: Also advance the model's counters as described (needs
            :func:`start_training` first).

    Returns:
        True when this step ended a rollout of ``model.train_freq`` (where ``learn()`` trains:
        ``if model.num_timesteps > model.learning_starts: model.train(...)``); always False
        without ``update_model``. ``buffer`` is mutated (``add``), and with ``update_model`` so
        is ``model`` (the counters above; for DQN the exploration rate and target network; the
        action noise; ``_last_obs``, ``_last_original_obs``). ``observation``,
        ``new_observation``, ``rewards`` and ``responses`` are not.

    Raises:
        TypeError: ``update_model`` is not a bool (rule ``flag``; a ``numpy.bool_`` is one;
            before anything is read or changed); ``responses`` is not a sequence of
            PolicyResponse, ``env_ids`` is not a sequence of str, an info is not a dict, the
            rewards are not real numbers, an observation is a dict for a buffer of arrays (or
            the reverse), or for a Box action space the buffer actions are not floats.
        ValueError: ``update_model`` is set before :func:`start_training`; the responses
            (empty, a stacked batch, repeated or unmatched env ids), rewards, dones, infos or
            observations do not match the buffer's envs (counts, shapes ``(n_envs,)`` and
            ``(n_envs, *obs_shape)``, non-boolean dones); a response has no ``buffer_action``;
            for a Box action space the buffer actions are not ``(n_envs, *action_shape)`` or
            lie outside [-1, 1] (SB3's ``policy.scale_action`` range); an
            ``infos[i]["terminal_observation"]`` of a done env does not have one observation's
            shape; or, with a ``VecNormalize`` in the model's env, the observations or rewards
            are not the wrapper's (see above), ``update_model`` is False, a Discrete
            observation's terminal observation would be unnormalized (SB3 raises
            ``IndexError`` there) or :func:`start_training` was not called; or (with
            ``update_model``) ``model.action_noise`` is a ``VectorizedActionNoise`` whose
            processes the first exploring :meth:`SB3PolicyAdapter.act` bound to the envs in
            another order than the buffer's columns (both orders named): SB3 resets the
            process of column ``i``'s env by index ``i``, which would be another env's.
        StopTraining: the callback's ``on_step`` returned False (``num_timesteps`` counts the
            step, nothing is stored, as ``collect_rollouts`` returns early), or returned False
            at an earlier step of this run (then nothing is changed).
    """
    update_model = check_flag(update_model, "update_model", "add_replay_step")
    run = None
    if update_model:
        require_started(model)
        run = run_of(model)
        refuse_stopped(run)
    buf: Any = model.replay_buffer if buffer is None else buffer
    step = StepColumns(responses, env_ids, "SB3PolicyAdapter.act()")
    ids = step.ids
    rewards_arr, dones_arr = check_step(buf.n_envs, ids, rewards, dones, infos)
    check_buffer_observation("observation", observation, buf, ids)
    check_buffer_observation("new_observation", new_observation, buf, ids)
    actions = step.array("buffer_action")
    if isinstance(model.action_space, spaces.Box):
        check_scaled_actions(actions, model.action_space, ids)
    if run is None:
        if model.get_vec_normalize_env() is not None:
            raise ValueError(
                "add_replay_step(update_model=False) cannot store a step of a model whose env "
                "has a VecNormalize: SB3 stores the original observations, and the original of "
                "the observation a step acted on is the model's _last_original_obs, which only "
                "update_model=True keeps (as OffPolicyAlgorithm._store_transition does)"
            )
        obs_, next_obs, rewards_, _ = replay_transition(
            model, observation, new_observation, rewards_arr, dones_arr, infos, ids
        )
        buf.add(obs_, next_obs, actions, rewards_, dones_arr, list(infos))
        return False
    # a done env's noise is reset by its column index (collect_rollouts): refused, before
    # anything changes, when the noise's processes are bound to the envs in another order
    check_replay_columns(model.action_noise, ids)
    obs_, next_obs, rewards_, original_new = replay_transition(
        model, observation, new_observation, rewards_arr, dones_arr, infos, ids
    )
    last = model._last_obs = last_observation(observation)  # where SB3 stands if one stops
    n_envs = len(ids)
    callback = run.callback
    env_actions = None if callback is None else step.array("action")
    if run.steps is None:
        run.steps, run.episodes = 0, 0
        if callback is not None:
            callback.on_rollout_start()
    model.num_timesteps += n_envs
    run.steps += 1
    if callback is not None:
        callback.update_locals(
            replay_step_locals(
                model,
                run,
                buf,
                env_actions,
                actions,
                new_observation,
                rewards_arr,
                dones_arr,
                infos,
            )
        )
        if not callback.on_step():
            stop(run)
    model._update_info_buffer(list(infos), dones_arr)
    buf.add(obs_, next_obs, actions, rewards_, dones_arr, list(infos))
    replay_outputs(model, observation, last, new_observation, original_new)
    _update_progress(model)
    model._on_step()
    for idx, done in enumerate(dones_arr):
        if done:
            run.episodes += 1
            model._episode_num += 1
            if model.action_noise is not None:
                kwargs = {"indices": [idx]} if n_envs > 1 else {}
                model.action_noise.reset(**kwargs)
            if run.log_interval is not None and model._episode_num % run.log_interval == 0:
                dump_logs(model, None)
    train_freq: Any = model.train_freq  # a TrainFreq since _setup_model
    if should_collect_more_steps(train_freq, run.steps, run.episodes):
        return False
    run.steps = None
    if callback is not None:
        callback.on_rollout_end()
    return True
