"""What ``learn()`` does around rollout collection: callbacks, the logger dump, the progress bar.

SB3's ``BaseAlgorithm.learn`` builds the callback (``_setup_learn`` -> ``_init_callback``, which
adds SB3's ``ProgressBarCallback`` when asked), calls ``on_training_start(locals(), globals())``,
and ``collect_rollouts`` calls ``on_rollout_start``, ``update_locals(locals())`` + ``on_step`` after
each ``env.step`` (stopping when it returns False), and ``on_rollout_end``; ``learn`` dumps the
logger every ``log_interval`` iterations (on-policy) or episodes (off-policy) and calls
``on_training_end``. This module keeps that state for a response-driven loop, one :class:`Run` per
model between :func:`start_training` and :func:`finish_training`, and gives each hook the
``locals`` SB3 would give it.

The run lives in a registry keyed weakly by the model, not on the model: ``model.save`` pickles
every attribute of the model, and a callback (which holds an eval env, say) is not part of it.
A run with a callback holds the model (``callback.model``) until :func:`finish_training` or the
next :func:`start_training` on that model; one without holds nothing.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import MaybeCallback, TrainFrequencyUnit
from stable_baselines3.common.utils import obs_as_tensor

from rlightning_sb3._recurrent import stack_rnn_states

__all__ = [
    "Run",
    "StopTraining",
    "finish_training",
    "replay_step_locals",
    "reset_run_of",
    "rollout_step_locals",
    "run_of",
    "start_training",
]


class StopTraining(Exception):  # noqa: N818  # named after what happened, as StopIteration
    """A callback's ``on_step`` returned False: the loop must stop, as ``learn()`` stops.

    Raised by :func:`~rlightning_sb3.add_rollout_step` and :func:`~rlightning_sb3.add_replay_step`
    where SB3's ``collect_rollouts`` returns early (``continue_training=False``): the step is
    counted (``model.num_timesteps``) but not stored, as in SB3, and the model's training state
    is the step's inputs (``_last_obs`` the observation it acted on, not yet updated, as SB3
    returns before updating it). Catch it around the loop and call :func:`finish_training`
    (``learn()`` then calls ``on_training_end``). Every later ``add_*_step`` of that run raises
    it again, before changing anything.
    """


class Run:
    """The state ``learn()`` keeps in its frame, for one model's response-driven loop.

    Attributes:
        callback: SB3's callback as ``_setup_learn`` built it, or None when ``start_training``
            got neither a callback nor ``progress_bar`` (SB3's no-op ``ConvertCallback(None)``
            is then not called at all: nothing could observe it).
        log_interval: As ``learn``'s argument (None: never dump the logger).
        iteration: On-policy rollouts finished (``learn``'s ``iteration``).
        steps: Steps collected in the current rollout, None between rollouts.
        episodes: Off-policy episodes finished in the current rollout.
        stopped: A callback stopped training.
        last_actions: The last on-policy step's buffer actions (``locals["actions"]`` at
            ``on_rollout_end``).
    """

    __slots__ = (
        "callback",
        "episodes",
        "iteration",
        "last_actions",
        "log_interval",
        "steps",
        "stopped",
    )

    def __init__(self, callback: BaseCallback | None, log_interval: int | None) -> None:
        self.callback = callback
        self.log_interval = log_interval
        self.iteration = 0
        self.steps: int | None = None
        self.episodes = 0
        self.stopped = False
        self.last_actions: Any = None


_RUNS: weakref.WeakKeyDictionary[BaseAlgorithm, Run] = weakref.WeakKeyDictionary()

#: Per model, ``(run_id, reset_run_id)`` of its latest :func:`start_training`: that run's
#: ``start_time`` and the ``start_time`` of the latest run begun with an env reset (None: none).
_RESET_RUNS: weakref.WeakKeyDictionary[BaseAlgorithm, tuple[int, int | None]] = (
    weakref.WeakKeyDictionary()
)


def reset_run_of(model: BaseAlgorithm) -> int | None:
    """The ``start_time`` of the model's latest :func:`start_training` run that reset its env.

    See :func:`rlightning_sb3.training_reset_run_id` (its public form) for the rule, also for
    runs begun by ``learn()`` itself. A pure read of the records :func:`start_training` keeps:
    nothing is recorded here, so no query changes a later answer.
    """
    recorded = _RESET_RUNS.get(model)
    return None if recorded is None else recorded[1]


def run_of(model: BaseAlgorithm) -> Run:
    """The model's run; a run without callback or logging when the loop began otherwise."""
    run = _RUNS.get(model)
    if run is None:
        run = _RUNS[model] = Run(None, None)
    return run


def _learn_default(model: BaseAlgorithm, name: str) -> Any:
    """The default of ``type(model).learn``'s argument ``name`` (A2C logs every 100, DQN 4)."""
    parameter = inspect.signature(type(model).learn).parameters.get(name)
    return None if parameter is None else parameter.default


def _learn_globals(model: BaseAlgorithm) -> dict[str, Any]:
    """The globals of the ``learn`` that calls ``on_training_start`` (SB3's or sb3-contrib's)."""
    for cls in type(model).__mro__:
        learn = cls.__dict__.get("learn")
        code = getattr(learn, "__code__", None)
        if code is not None and "on_training_start" in code.co_names:
            return learn.__globals__  # type: ignore[no-any-return, union-attr]
    return {}


def _check_episodic_train_freq(model: BaseAlgorithm) -> None:
    """Refuse per-episode training with several envs, as SB3's ``collect_rollouts`` asserts.

    Args:
        model: The SB3 model; only an ``OffPolicyAlgorithm`` is checked.

    Raises:
        ValueError: ``model.train_freq`` counts episodes and ``model.get_env()`` has more than
            one env.
    """
    if not isinstance(model, OffPolicyAlgorithm):
        return
    env = model.get_env()
    # _setup_model converted the argument to a TrainFreq (SB3 annotates the attribute with the
    # argument's type)
    train_freq: Any = model.train_freq
    unit = getattr(train_freq, "unit", None)
    if env is not None and env.num_envs > 1 and unit == TrainFrequencyUnit.EPISODE:
        raise ValueError(
            f"{type(model).__name__} has train_freq=({train_freq.frequency}, 'episode') "
            f"with {env.num_envs} envs: SB3 trains per episode only with one env "
            "(OffPolicyAlgorithm.collect_rollouts asserts 'You must use only one env when "
            "doing episodic training.'); use train_freq=(n, 'step') or a single env"
        )


def start_training(
    model: BaseAlgorithm,
    total_timesteps: int,
    *,
    callback: MaybeCallback = None,
    log_interval: int | None = -1,
    progress_bar: bool = False,
    reset_num_timesteps: bool = True,
    tb_log_name: str | None = None,
) -> Any:
    """Prepare ``model`` for a training loop, as ``BaseAlgorithm.learn`` does before collecting.

    Calls SB3's ``model._setup_learn``: resets the episode-info buffers, ``num_timesteps`` and
    the action noise, records ``total_timesteps`` (schedules and DQN's exploration rate read it),
    resets the model's env (``model.get_env()``) when ``reset_num_timesteps`` or it was never
    reset, configures the logger ``model.train()`` writes to, and builds the callback
    (``_init_callback``: a list becomes a ``CallbackList``, a function a ``ConvertCallback``, and
    ``progress_bar`` adds SB3's ``ProgressBarCallback``); then calls the callback's
    ``on_training_start`` with the ``locals`` ``learn`` gives it (``self``, ``total_timesteps``,
    ``callback``, ``log_interval``, ...). From then on :func:`~rlightning_sb3.add_rollout_step`,
    :func:`~rlightning_sb3.finish_rollout` and :func:`~rlightning_sb3.add_replay_step` call the
    callback and dump the logger where ``learn`` does, and :func:`finish_training` ends the run.

    ``_setup_learn`` sets ``model.start_time``, the run's identity
    (:func:`rlightning_sb3.training_run_id`: an :class:`~rlightning_sb3.ActingState`'s
    ``run_id``; where the clock returned no later time than the previous run's, it is set 1 ns
    past that one, so each run has its own): noise processes kept outside
    ``model.action_noise`` (an :class:`~rlightning_sb3.ActingReplica`'s, the PettingZoo replay
    collectors' per-slot ones) reset when it changes, as ``_setup_learn`` resets the model's.
    Whether this run reset the env (``reset_num_timesteps``, or ``model._last_obs`` None, read
    before ``_setup_learn``) is recorded with it: :func:`rlightning_sb3.training_reset_run_id`
    (an :class:`~rlightning_sb3.ActingState`'s ``reset_run_id``), which envs stepped outside
    ``model.get_env()`` (the PettingZoo collectors' copies) reset on, as ``_setup_learn``
    resets the model's.

    An on-policy model's rollout buffer is emptied (``RolloutBuffer.reset``), as
    ``collect_rollouts`` empties it when a rollout begins: steps of an earlier run stopped
    mid-rollout are not mixed with this run's.

    Args:
        model: The SB3 model (it must have an env).
        total_timesteps: The step budget of the loop, as passed to ``learn``.
        callback: As ``learn``'s argument: a ``BaseCallback``, a list of them, a function
            ``(locals, globals) -> bool``, or None.
        log_interval: As ``learn``'s argument: dump the logger every ``log_interval`` rollouts
            (on-policy, in :func:`~rlightning_sb3.finish_rollout`) or episodes (off-policy, in
            :func:`~rlightning_sb3.add_replay_step`); None never dumps. The default, -1, takes
            ``type(model).learn``'s default (1 for PPO, 100 for A2C, 4 for DQN, SAC, TD3).
        progress_bar: Show SB3's progress bar (needs ``tqdm`` and ``rich``), as ``learn``'s.
        reset_num_timesteps: As ``learn``'s argument of that name.
        tb_log_name: As ``learn``'s argument of that name; None takes ``learn``'s default
            (the algorithm's name, ``"PPO"``, ``"DQN"``, ...).

    Returns:
        ``model._last_obs``: the observation of ``model.get_env()`` the loop starts from,
        ``(n_envs, *obs_shape)`` (or a dict). After a reset (``reset_num_timesteps``, or a
        model that never trained) the envs' first observations, every env at an episode
        start; with ``reset_num_timesteps=False`` where the last ``learn()`` or loop stopped.
        Then call :meth:`SB3PolicyAdapter.load_training_state
        <rlightning_sb3.SB3PolicyAdapter.load_training_state>` for the episode starts (and
        RecurrentPPO's LSTM states) to continue from. ``total_timesteps`` counts from
        ``model.num_timesteps`` when it is not reset, as in ``learn()``: the loop ends at
        ``model.num_timesteps + total_timesteps`` (as read before this call).

    Raises:
        TypeError: ``total_timesteps`` is not an int (a bool is refused too).
        ValueError: ``total_timesteps`` is not positive, the model has no env, an off-policy
            model trains per episode (``train_freq=(n, "episode")``) with more than one env
            (SB3 refuses it: ``OffPolicyAlgorithm.collect_rollouts`` asserts "You must use only
            one env when doing episodic training."), or a run with a callback was started on
            this model and not finished (:func:`finish_training`).
        ImportError: ``progress_bar`` without ``tqdm`` and ``rich`` (raised by SB3).
    """
    if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, int):
        raise TypeError(
            f"total_timesteps must be a positive int, got {type(total_timesteps).__name__} "
            f"{total_timesteps!r}"
        )
    if total_timesteps <= 0:
        raise ValueError(f"total_timesteps must be a positive int, got {total_timesteps!r}")
    if model.get_env() is None:
        raise ValueError(
            f"{type(model).__name__} has no env: build it with one or call model.set_env(env)"
        )
    _check_episodic_train_freq(model)
    previous = _RUNS.get(model)
    if previous is not None and previous.callback is not None:
        raise ValueError(
            f"this {type(model).__name__} has a training run with a callback that was not "
            "finished: call finish_training(model) first (it calls the callback's "
            "on_training_end, as learn() does when it returns), then start_training again"
        )
    if log_interval == -1:
        log_interval = _learn_default(model, "log_interval")
    if tb_log_name is None:
        tb_log_name = _learn_default(model, "tb_log_name") or "run"
    _RUNS.pop(model, None)
    if isinstance(model, OnPolicyAlgorithm):
        # learn() begins every rollout with an empty buffer (collect_rollouts resets it): rows
        # of a run a callback stopped mid-rollout must not be finished with this run's.
        model.rollout_buffer.reset()
    previous_start = getattr(model, "start_time", 0)
    # read before _setup_learn, whose rule it is: reset the env when reset_num_timesteps or
    # the model has no last observation
    resets = bool(reset_num_timesteps) or model._last_obs is None
    previous_reset = reset_run_of(model)
    total, built = model._setup_learn(
        total_timesteps,
        callback=callback,
        reset_num_timesteps=reset_num_timesteps,
        tb_log_name=tb_log_name,
        progress_bar=progress_bar,
    )
    if model.start_time <= previous_start:
        # time.time_ns() of a coarse clock (Windows before Python 3.13: ~1-16 ms) may repeat:
        # each run gets its own start_time (training_run_id), 1 ns later (SB3's fps only)
        model.start_time = int(previous_start) + 1
    run_id = int(model.start_time)
    _RESET_RUNS[model] = (run_id, run_id if resets else previous_reset)
    active = built if callback is not None or progress_bar else None
    _RUNS[model] = Run(active, log_interval)
    if active is not None:
        learn_locals: dict[str, Any] = {
            name: parameter.default
            for name, parameter in inspect.signature(type(model).learn).parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }
        if isinstance(model, OnPolicyAlgorithm):
            learn_locals["iteration"] = 0
        learn_locals.update(
            self=model,
            total_timesteps=total,
            callback=active,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )
        active.on_training_start(learn_locals, _learn_globals(model))
    return model._last_obs


def finish_training(model: BaseAlgorithm) -> BaseCallback | None:
    """End the loop :func:`start_training` began, as ``learn()`` ends: ``on_training_end``.

    Call it once after the loop, also when a callback stopped it (:class:`StopTraining`): SB3's
    ``ProgressBarCallback`` closes its bar there, and the run (which holds the callback, and the
    callback the model) is released.

    Args:
        model: The model given to :func:`start_training`.

    Returns:
        The callback SB3 built (a ``CallbackList`` with the ``ProgressBarCallback`` when
        ``progress_bar``), or None when the loop ran without one. The model is not changed.

    Raises:
        ValueError: no run to finish: :func:`start_training` was not called for this model, or
            this run was finished already.
    """
    run = _RUNS.pop(model, None)
    if run is None:
        raise ValueError(
            f"no training of this {type(model).__name__} to finish: call "
            "start_training(model, total_timesteps) before the loop, and finish_training once"
        )
    if run.callback is not None:
        run.callback.on_training_end()
    return run.callback


def dump_logs(model: BaseAlgorithm, iteration: int | None) -> None:
    """``model.dump_logs`` (``_dump_logs`` before SB3 2.5), with the on-policy iteration."""
    dump = getattr(model, "dump_logs", None) or getattr(model, "_dump_logs")  # noqa: B009
    if iteration is None:
        dump()
    else:
        dump(iteration)


def stop(run: Run) -> None:
    """Record that a callback stopped training and raise :class:`StopTraining`."""
    run.stopped = True
    raise StopTraining(
        "a callback's on_step() returned False: training stops here, as learn() stops "
        "(call finish_training(model))"
    )


def refuse_stopped(run: Run) -> None:
    """Raise :class:`StopTraining` again for a step after a callback stopped training."""
    if run.stopped:
        raise StopTraining(
            "a callback stopped this training run: no step is added after that "
            "(call finish_training(model), then start_training(...) to train again)"
        )


def require_new_observation(run: Run | None, new_observation: Any) -> bool:
    """Whether the step calls a callback; then ``new_observation`` must be given.

    Raises:
        ValueError: a callback runs and ``new_observation`` is None (SB3 gives callbacks
            ``locals["new_obs"]``; an earlier step's would be there otherwise).
    """
    if run is None or run.callback is None:
        return False
    if new_observation is None:
        raise ValueError(
            "add_rollout_step(..., new_observation=new_obs) is needed when start_training() got "
            "a callback or progress_bar: SB3 gives callbacks locals['new_obs'] (what env.step "
            "returned)"
        )
    return True


def is_sb3_on_policy_collection(model: BaseAlgorithm) -> bool:
    """Whether the model collects with SB3's own ``OnPolicyAlgorithm.collect_rollouts``.

    Only that one calls ``update_locals`` before ``on_rollout_end``; sb3-contrib's RecurrentPPO
    and MaskablePPO do not.
    """
    return isinstance(model, OnPolicyAlgorithm) and (
        type(model).collect_rollouts is OnPolicyAlgorithm.collect_rollouts
    )


def is_off_policy(model: BaseAlgorithm) -> bool:
    """Whether ``model`` is an ``OffPolicyAlgorithm`` (rollouts counted by ``train_freq``)."""
    return isinstance(model, OffPolicyAlgorithm)


def rollout_step_locals(
    model: Any,
    run: Run,
    buf: Any,
    step: Any,
    observation: Any,
    actions: Any,
    values: Any,
    log_probs: Any,
    masks: Any,
    new_observation: Any,
    rewards: Any,
    dones: Any,
    infos: Any,
    episode_starts: Any,
) -> dict[str, Any]:
    """The ``locals()`` of on-policy ``collect_rollouts`` at ``callback.update_locals``.

    SB3's names and forms: ``actions`` as the policy returned them (``(n_envs,)`` for Discrete,
    before the reshape for the buffer), ``clipped_actions`` what the env got, ``values`` the
    ``(n_envs, 1)`` critic output, ``log_probs`` ``(n_envs,)``, ``obs_tensor`` the observation as
    ``obs_as_tensor`` makes it, ``rewards`` the float array the buffer gets (the truncation
    bootstrap is added to it afterwards, in place, as SB3 does); RecurrentPPO adds
    ``lstm_states`` (after the step) and ``episode_starts``, MaskablePPO ``use_masking`` and
    ``action_masks`` (and has no ``clipped_actions``). The loop temporaries of the bootstrap
    (``idx``, ``done``, ``terminal_obs``, ``terminal_value``) are not given.

    """
    found: dict[str, Any] = {
        "self": model,
        "env": model.get_env(),
        "callback": run.callback,
        "rollout_buffer": buf,
        "n_rollout_steps": model.n_steps,
        "n_steps": run.steps,
        "obs_tensor": obs_as_tensor(observation, model.device),
        "actions": actions.reshape((-1, *model.action_space.shape)),
        "values": values.reshape(-1, 1),
        "log_probs": log_probs,
        "new_obs": new_observation,
        "rewards": rewards,
        "dones": dones,
        "infos": infos,
    }
    if hasattr(buf, "action_masks"):  # MaskablePPO.collect_rollouts
        found["use_masking"] = masks is not None
        found["action_masks"] = masks
        return found
    found["clipped_actions"] = step.array("action")
    if hasattr(buf, "hidden_states_pi"):  # RecurrentPPO.collect_rollouts
        found["lstm_states"] = stack_rnn_states(step.items("state"))
        found["episode_starts"] = th.tensor(episode_starts, dtype=th.float32, device=model.device)
    return found


def replay_step_locals(
    model: Any,
    run: Run,
    buf: Any,
    actions: Any,
    buffer_actions: Any,
    new_observation: Any,
    rewards: Any,
    dones: Any,
    infos: Any,
) -> dict[str, Any]:
    """The ``locals()`` of ``OffPolicyAlgorithm.collect_rollouts`` at ``update_locals``.

    ``actions`` are what the env got, ``buffer_actions`` what the buffer stores (scaled to
    [-1, 1] for Box), ``new_obs`` what the env returned (the buffer's copy gets the terminal
    observations); ``num_collected_steps`` counts this step, ``num_collected_episodes`` the
    episodes of this rollout before it. The loop temporaries ``idx``, ``done``, ``kwargs`` are not
    given.
    """
    return {
        "self": model,
        "env": model.get_env(),
        "callback": run.callback,
        "train_freq": model.train_freq,
        "replay_buffer": buf,
        "action_noise": model.action_noise,
        "learning_starts": model.learning_starts,
        "log_interval": run.log_interval,
        "num_collected_steps": run.steps,
        "num_collected_episodes": run.episodes,
        "continue_training": True,
        "actions": actions,
        "buffer_actions": buffer_actions,
        "new_obs": new_observation,
        "rewards": rewards,
        "dones": dones,
        "infos": infos,
    }
