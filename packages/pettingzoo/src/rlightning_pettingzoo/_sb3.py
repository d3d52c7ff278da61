"""Driving a Stable-Baselines3 model for a batch of PettingZoo agents, through ``rlightning_sb3``.

SB3's semantics live in ``rlightning_sb3`` only: this module stacks the agents' observations
and masks into one batch and asks :meth:`rlightning_sb3.SB3PolicyAdapter.act` once, with one
row per agent, so the agents get exactly what SB3's own rollout collection would give an env
(``collect_rollouts``, ``OffPolicyAlgorithm._sample_action`` with DQN's epsilon-greedy,
``learning_starts`` warm-up and action noise drawn per row, sb3-contrib's ``MaskablePPO``).
``rlightning_sb3`` (and so SB3 and torch) is imported only when a model is used: it comes with
the ``rlightning-pettingzoo[sb3]`` extra.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from rlightning import rules
from rlightning_pettingzoo._columns import _same_plain_arrays, owned
from rlightning_pettingzoo._envs import describe_env

if TYPE_CHECKING:
    from rlightning_sb3 import SB3PolicyAdapter

__all__ = [
    "adapter_for",
    "is_sb3_model",
    "observation_intake",
    "observation_shape_mismatch",
    "refuse_episodic_columns",
    "refuse_unstarted",
    "refuse_unstorable_layout",
    "sb3_rows",
    "stack_named",
    "stack_observations",
]

#: The model attribute holding its cached adapter (:class:`_AdapterHolder`).
_HOLDER = "_rlightning_pettingzoo_adapter"


class _AdapterHolder(dict):  # type: ignore[type-arg]
    """Holds a model's cached ``SB3PolicyAdapter`` on the model itself, so it dies with it.

    A module-level ``WeakKeyDictionary`` keyed by the model cannot: its value, the adapter,
    holds the model strongly, so no model would ever be freed (self-play makes many frozen
    opponent copies). On the model, model and adapter are one cycle the garbage collector
    frees. An empty ``dict`` to everything that copies or saves the model: SB3's ``save``
    stores it as the JSON ``{}`` (``data_to_json``: it is JSON-serializable; a load gets a
    plain ``{}``, which :func:`adapter_for` replaces), and ``copy``/``deepcopy``/pickle give an
    empty holder (a copy of a model is another model: it gets its own adapter).
    """

    __slots__ = ("adapter",)

    def __init__(self) -> None:
        super().__init__()
        self.adapter: SB3PolicyAdapter | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_AdapterHolder, ())

    def __copy__(self) -> _AdapterHolder:
        return _AdapterHolder()

    def __deepcopy__(self, memo: dict[int, Any]) -> _AdapterHolder:
        return _AdapterHolder()


def is_sb3_model(obj: object) -> bool:
    """True for an SB3 algorithm (``PPO``, ``DQN``, ``SAC``, ..., sb3-contrib's too).

    Checked as ``isinstance(obj, BaseAlgorithm)`` once SB3 is imported; without SB3 imported no
    SB3 model can exist, so nothing is imported to answer.
    """
    base = sys.modules.get("stable_baselines3.common.base_class")
    return base is not None and isinstance(obj, base.BaseAlgorithm)


def adapter_for(model: Any) -> SB3PolicyAdapter:
    """The cached :class:`rlightning_sb3.SB3PolicyAdapter` of ``model`` (made on first use).

    Kept on the model (:class:`_AdapterHolder`, the attribute ``_rlightning_pettingzoo_adapter``):
    it lives as long as the model and no longer.

    Raises:
        ImportError: ``rlightning-sb3`` is not installed (install ``rlightning-pettingzoo[sb3]``).
    """
    holder = getattr(model, _HOLDER, None)
    adapter = holder.adapter if isinstance(holder, _AdapterHolder) else None
    if adapter is None:
        try:
            from rlightning_sb3 import SB3PolicyAdapter
        except ModuleNotFoundError as error:  # pragma: no cover - the [sb3] extra is missing
            raise ImportError(
                "driving Stable-Baselines3 models needs rlightning-sb3: "
                "pip install 'rlightning-pettingzoo[sb3]'"
            ) from error
        adapter = SB3PolicyAdapter(model)
        if not isinstance(holder, _AdapterHolder):
            holder = _AdapterHolder()
            setattr(model, _HOLDER, holder)
        holder.adapter = adapter
    return adapter


def refuse_unapplied_wrappers(model: Any, caller: str, group: str | None = None) -> None:
    """Refuse a model whose VecEnv wrappers a collector would not apply (one check for all).

    A collector steps the PettingZoo envs itself; the model's VecEnv only sizes its buffer. A
    ``VecNormalize`` or ``VecFrameStack`` around it (:func:`rlightning_sb3.unapplied_wrappers`)
    would be skipped, and raw observations and rewards acted on and stored where ``learn()``
    stores normalized or stacked ones.

    Raises:
        ValueError: ``model``'s env has such wrappers (named, with the group if given).
    """
    from rlightning_sb3 import unapplied_wrappers

    names = unapplied_wrappers(model)
    if names:
        whose = f"the model of group {group!r}" if group is not None else "the model"
        raise ValueError(
            f"{caller}: {whose} has an env wrapped in {names}, which the collector does not "
            "apply (it steps the PettingZoo envs itself): learn() would act on and store the "
            "wrapped values, the collector the raw ones. Build the model over a VecEnv of the "
            "agents' spaces without them (normalize or stack inside the PettingZoo env)"
        )


def refuse_gsde(model: Any, caller: str, group: str | None = None) -> None:
    """Refuse a model that explores with gSDE (``use_sde=True``): no collector resamples it.

    SB3's ``collect_rollouts`` (on- and off-policy) calls ``policy.reset_noise(n_envs)``
    (off-policy: ``actor.reset_noise``) at each rollout's start and before every
    ``sde_sample_freq``-th step; the PettingZoo collectors act through
    :meth:`rlightning_sb3.SB3PolicyAdapter.act`, which leaves that to its caller (its note), and
    none of them makes those calls, so a gSDE model would explore with a noise matrix SB3 never
    used there (the one ``train`` last sampled), silently. The Ray collectors refuse it too
    (``check_rollout_model``, ``check_replay_model``).

    Raises:
        ValueError: ``model.use_sde`` is True (named, with the group if given).
    """
    if getattr(model, "use_sde", False):
        whose = f" (the model of group {group!r})" if group is not None else ""
        raise ValueError(
            f"{caller}{whose} does not support gSDE (use_sde=True): SB3's collect_rollouts "
            "resamples the exploration matrix (policy.reset_noise(n_envs)) at each rollout's "
            "start and every sde_sample_freq steps, which this collector does not do, so it "
            "would explore with another noise than SB3's; build the model with use_sde=False"
        )


def observation_intake(model: Any) -> Callable[[Any], Any]:
    """What a collector does to each agent observation an env returns, before acting and storing.

    An owned copy (:func:`rlightning_pettingzoo._columns.owned`: the env may write into the
    same arrays), transposed as SB3's ``VecTransposeImage`` transposes it when SB3 wrapped the
    model's env in one (channel-last image observations, ``HxWxC`` to ``CxHxW``:
    :func:`rlightning_sb3.image_transpose`, which applies SB3's own
    ``VecTransposeImage.transpose_image``), so that the model acts on and its buffer stores what
    ``learn()`` over a VecEnv of the agents would.

    Args:
        model: The SB3 model that acts for (and stores) the observations.

    Returns:
        ``intake(observation) -> observation``; the input is not modified.
    """
    from rlightning_sb3 import image_transpose

    transpose = image_transpose(model)
    if transpose is None:
        return owned
    transposed = transpose.observations

    def intake(observation: Any) -> Any:
        return transposed(owned(observation))

    return intake


def _shapes(space: spaces.Space[Any]) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: _shapes(sub) for key, sub in space.spaces.items()}
    return space.shape


def refuse_unstorable_layout(
    env: Any, i: int, model: Any, agents: Sequence[Any], caller: str, group: str | None = None
) -> None:
    """Refuse, at construction, agents whose observations the model acts on but cannot store.

    SB3's ``obs_to_tensor`` (``maybe_transpose``) lets a model of channel-first images
    (``CxHxW``) act on channel-last ones (``HxWxC``), and ``respond`` accepts that pair
    (:func:`rlightning_sb3.observation_space_mismatch`); but a buffer stores the observations
    as the collector holds them (:func:`observation_intake`: transposed only where SB3 wrapped
    the model's env in ``VecTransposeImage``), and ``add_rollout_step``/``add_replay_step``
    would refuse the layout only once a rollout was collected (``learn()`` refuses such an
    env at once: ``check_for_correct_spaces``).

    Args:
        env: A PettingZoo env copy (parallel or AEC).
        i: The copy's index (for the message).
        model: The model that acts for and stores ``agents``.
        agents: The agents to check (e.g. ``env.possible_agents``).
        caller: The collector's name.
        group: The model's group, for the message.

    Raises:
        ValueError: an agent's observations, as stored, have not the shapes of the model's
            ``observation_space`` although the model could act on them (names the agent, the
            copy, both shapes and the fix); or the model's env is wrapped in
            ``VecTransposeImage`` but the agent's observation space is not one SB3 transposes
            (e.g. channel-first images equal to the model's space: :func:`observation_intake`
            would transpose them, ``learn()`` over the agents would store them as they are).
    """
    from rlightning_sb3 import ImageTranspose, image_transpose, observation_space_mismatch

    transpose = image_transpose(model)
    want = _shapes(model.observation_space)
    for agent in agents:
        raw = env.observation_space(agent)
        if observation_space_mismatch(raw, model.observation_space) is not None:
            continue  # the model cannot act for it: the fit check names it when it is live
        stored = raw
        whose = f" (the model of group {group!r})" if group is not None else ""
        if transpose is not None:
            found = ImageTranspose.for_space(raw)
            if found is None:  # observation_intake would transpose what learn() stores as is
                raise ValueError(
                    f"{caller}{whose}: agent {agent!r} of {describe_env(env)} (copy {i}) "
                    f"observes {raw}, which SB3 does not transpose (not a channel-last "
                    "image), but the model's env is wrapped in VecTransposeImage (of "
                    f"{transpose.raw_space}), so the collector would transpose its "
                    "observations as that wrapper does. Build the model over a VecEnv of the "
                    "agents' own spaces"
                )
            stored = found.observation_space
        if _shapes(stored) != want:
            raise ValueError(
                f"{caller}{whose}: agent {agent!r} of {describe_env(env)} (copy {i}) observes "
                f"{raw}, which the model ({model.observation_space}) acts on but its buffer "
                f"cannot store (shapes {_shapes(stored)}, not {want}); SB3's learn() refuses "
                "such an env. Build the model over a VecEnv of the agents' own spaces (for "
                "channel-last images SB3 then wraps it in VecTransposeImage, which the "
                "collector applies)"
            )


def refuse_episodic_columns(model: Any, caller: str, group: str | None = None) -> None:
    """Refuse ``train_freq`` counted in episodes with more than one buffer column.

    SB3 trains per episode with one env only: ``OffPolicyAlgorithm._setup_learn`` and
    ``collect_rollouts`` assert "You must use only one env when doing episodic training" where
    ``train_freq.unit`` is ``TrainFrequencyUnit.EPISODE`` and ``env.num_envs > 1``. A replay
    collector's columns are its model's ``n_envs``; the same rule, before any env is built or
    stepped. Nothing is mutated.

    Args:
        model: An off-policy SB3 model (``train_freq`` a ``TrainFreq`` since ``_setup_model``).
        caller: The collector's name, for the message.
        group: The model's group, for the message (None: the collector's one model).

    Raises:
        ValueError: ``train_freq`` counts episodes and ``model.n_envs > 1`` (the collector,
            the group, the ``train_freq`` and the ``n_envs`` named).
    """
    from stable_baselines3.common.type_aliases import TrainFrequencyUnit

    train_freq: Any = model.train_freq
    n_envs = int(model.n_envs)
    if train_freq.unit == TrainFrequencyUnit.EPISODE and n_envs > 1:
        whose = "" if group is None else f" (group {group!r})"
        raise ValueError(
            f"{caller}{whose}: train_freq=({train_freq.frequency}, {train_freq.unit.value!r}) "
            f"counts episodes, which SB3 allows with one env only ('You must use only one env "
            f"when doing episodic training'), but the model has n_envs={n_envs} buffer "
            "columns; build it over one env (n_envs=1), or use a train_freq counted in steps"
        )


def refuse_sequence_buffer(model: Any, caller: str, group: str | None = None) -> None:
    """Refuse a replay buffer that reads a column's consecutive rows as one env's trajectory.

    ``optimize_memory_usage=True`` (SB3's ``ReplayBuffer`` then reads a cell's next
    observation from the next row of its column), SB3's ``NStepReplayBuffer`` (``n_steps > 1``
    on an off-policy model) sums the rewards of the ``n_steps`` rows below a sampled cell in its
    column (``_get_samples``) and ``HerReplayBuffer`` tracks episodes per column
    (``ep_start``, ``ep_length``): each takes a column's rows as one env's consecutive steps.
    The multi-agent replay collectors fill a column with whichever transitions completed (other
    agents, other copies), so such a buffer would sample next observations, returns and goals
    of no agent's trajectory: refused.

    Args:
        model: An off-policy SB3 model.
        caller: Named in the message.
        group: The model's group, named in the message (None: not a group collector).

    Returns:
        None; nothing is mutated.

    Raises:
        ValueError: ``model.replay_buffer`` has ``optimize_memory_usage``, or is an
            ``NStepReplayBuffer`` or a ``HerReplayBuffer`` (or a subclass of either).
    """
    whose = f" (the model of group {group!r})" if group is not None else ""
    if getattr(model.replay_buffer, "optimize_memory_usage", False):
        raise ValueError(
            f"{caller}{whose} cannot fill a replay buffer with optimize_memory_usage=True: it "
            "reads each cell's next observation from the next row, which holds another agent's "
            "transition here; build the model with optimize_memory_usage=False"
        )
    from stable_baselines3.common import buffers
    from stable_baselines3.her.her_replay_buffer import HerReplayBuffer

    # NStepReplayBuffer is new in stable-baselines3 2.x (absent from the lowest supported 2.4)
    n_step = getattr(buffers, "NStepReplayBuffer", None)
    kinds: tuple[type, ...] = (HerReplayBuffer,) if n_step is None else (n_step, HerReplayBuffer)
    buffer = getattr(model, "replay_buffer", None)
    if isinstance(buffer, kinds):
        raise ValueError(
            f"{caller}{whose} cannot fill a {type(buffer).__name__} (n_steps="
            f"{getattr(model, 'n_steps', None)}, replay_buffer_class="
            f"{type(buffer).__name__}): it reads a column's consecutive rows as one env's "
            "trajectory, while a column here holds the transitions of different agents and "
            "copies; build the model with n_steps=1 and a plain ReplayBuffer/DictReplayBuffer"
        )


def refuse_unstarted(model: Any, caller: str, group: str | None = None) -> None:
    """Refuse, before any env is stepped, a collect() that updates a model that cannot take steps.

    ``add_rollout_step``/``add_replay_step`` with ``update_model`` refuse a model that
    :func:`rlightning_sb3.start_training` has not started and raise ``StopTraining`` again once
    a callback stopped its run (:func:`rlightning_sb3.check_training`): the very same rules,
    applied here before the first step, where a rollout collector would reach them only after
    stepping its envs for a whole rollout.

    Raises:
        ValueError: ``model`` has no step budget (named with the caller and the group).
        rlightning_sb3.StopTraining: a callback stopped ``model``'s run (call
            ``finish_training``).
    """
    from rlightning_sb3 import StopTraining, check_training

    whose = f" (the model of group {group!r})" if group is not None else ""
    try:
        check_training(model)
    except ValueError as error:
        raise ValueError(f"{caller}{whose}: {error}") from None
    except StopTraining as error:
        raise StopTraining(f"{caller}{whose}: {error}") from None


def observation_shape_mismatch(space: spaces.Space[Any], observation: Any) -> str | None:
    """Why ``observation`` has not the shape (or Dict keys) of ``space``, or None.

    Only shapes and keys are compared: enough to name the agent whose observation breaks a
    batch (``np.stack`` needs one shape), cheap enough for the error path.
    """
    if isinstance(space, spaces.Dict):
        if not isinstance(observation, dict):
            return f"it is a {type(observation).__name__}, not a dict"
        if observation.keys() != space.spaces.keys():
            return f"its keys {sorted(observation)} are not {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            reason = observation_shape_mismatch(sub, observation[key])
            if reason is not None:
                return f"[{key!r}]: {reason}"
        return None
    shape = space.shape
    if shape is not None and np.shape(observation) != shape:
        return f"its shape is {np.shape(observation)}, not {shape}"
    return None


def stack_observations(observations: Sequence[Any]) -> Any:
    """Stack per-agent observations into one batch: ``(n_agents, *obs_shape)``.

    Dict observations (``{"observation": ..., "action_mask": ...}``) are stacked key by key into a
    dict of batches, the layout SB3's ``MultiInputPolicy`` takes.
    """
    first = observations[0]
    if isinstance(first, dict):
        return {key: np.stack([np.asarray(o[key]) for o in observations]) for key in first}
    if _same_plain_arrays(observations):  # np.stack's array, at less cost (_columns.stack_rows)
        return np.array(observations)
    return np.stack([np.asarray(o) for o in observations])


def stack_named(
    model: Any, transitions: Sequence[Any], name: str, stack: Callable[[Sequence[Any]], Any]
) -> Any:
    """``stack`` of the transitions' ``name`` observations; a misshapen one is named.

    Args:
        model: The model whose buffer stores them (its ``observation_space``: the stored shape).
        transitions: ``_columns.Transition`` objects (``agent_id``, ``env_index``, ``name``).
        name: ``"observation"`` or ``"next_observation"``.
        stack: ``stack_observations`` or ``_columns.stack_agent_observations``.

    Returns:
        What ``stack`` returns.

    Raises:
        ValueError: ``stack``'s shape error, as the agent (and copy) whose observation has not
            the shape of ``model.observation_space``, where one has; else ``stack``'s own.
    """
    values = [getattr(t, name) for t in transitions]
    try:
        return stack(values)
    except ValueError as error:
        for t, value in zip(transitions, values, strict=True):
            reason = observation_shape_mismatch(model.observation_space, value)
            if reason is not None:
                raise ValueError(
                    f"{name} of agent {t.agent_id!r} (copy {t.env_index}) does not fit the "
                    f"model's observation_space {model.observation_space}: {reason} "
                    "(PettingZoo: an agent's observation is an element of "
                    "env.observation_space(agent))"
                ) from error
        raise


def _row_ids(agents: Sequence[Any], prefix: str = "") -> list[str]:
    """One distinct str per agent, the row ids the SB3 adapter needs (``repr`` keeps 1 != '1')."""
    return [f"{prefix}{agent!r}" for agent in agents]


def sb3_rows(
    model: Any,
    agents: Sequence[Any],
    observations: Sequence[Any],
    masks: Sequence[Any | None],
    action_space: spaces.Space[Any],
    *,
    deterministic: bool,
    episode_starts: Sequence[bool] | None = None,
    row_prefix: str = "",
) -> dict[Any, dict[str, Any]]:
    """Ask ``model`` once for every agent of ``agents``; row ``i`` goes to ``agents[i]``.

    Runs :meth:`rlightning_sb3.SB3PolicyAdapter.act` with ``explore=not deterministic`` on the
    stacked observations (see that method for what SB3 function each field follows). The
    agents' masks (already checked, in gymnasium's format) go to sb3-contrib's MaskablePPO as
    its flat ``action_masks`` rows, an agent without a mask allowing every action; other
    models get no mask.

    Args:
        model: An SB3 algorithm; a recurrent one (sb3-contrib's RecurrentPPO) only with
            ``episode_starts``.
        agents: The agents, in batch order.
        observations: One observation per agent, each in the model's observation space.
        masks: One checked mask (or None) per agent.
        action_space: The agents' action space (the model's).
        deterministic: Take the deterministic action (no sampling, epsilon, warm-up or noise).
        episode_starts: For a recurrent model, one flag per agent: its LSTM state is reset
            (RecurrentPPO's ``episode_starts``) before it acts. The adapter carries each
            agent's state under the row id ``row_prefix + repr(agent)`` from one call to the
            next.
        row_prefix: Put before each row id: a collector's own prefix keeps its agents' LSTM
            states apart from another caller's on the same model (the adapter is per model).

    Returns:
        ``{agent: fields}``: ``action`` and ``buffer_action`` (numpy rows of SB3's batched
        output), for on-policy models ``value`` and ``log_prob`` (np.float32 scalars), and for a
        recurrent model ``state`` (the agent's LSTM ``RNNStates`` after acting) and
        ``buffer_state`` (the one it acted from, before the reset: what ``RecurrentPPO``
        stores as ``lstm_states``).

    Raises:
        TypeError: the model is recurrent and no ``episode_starts`` are given (it needs a
            hidden state per agent), or it is neither on- nor off-policy.
        ValueError: what ``SB3PolicyAdapter.act`` raises for the batch (shapes, NaN).
    """
    adapter = adapter_for(model)
    if adapter.is_recurrent and episode_starts is None:
        raise TypeError(
            f"{type(model).__name__} has a recurrent policy ({type(model.policy).__name__}), "
            "which needs a hidden state per agent; rlightning_pettingzoo drives feed-forward "
            "SB3 policies only"
        )
    action_masks = None
    if adapter.is_maskable and any(mask is not None for mask in masks):
        size = rules.mask_size(action_space)
        action_masks = np.stack(
            [
                np.ones(size, dtype=bool) if mask is None else rules.flat_mask(action_space, mask)
                for mask in masks
            ]
        )
    batch = adapter.act(
        stack_observations(observations),
        _row_ids(agents, row_prefix),
        action_masks=action_masks,
        explore=not deterministic,
        **({} if episode_starts is None else {"episode_start": np.asarray(episode_starts, bool)}),
    )
    stacked = batch.stacked
    assert stacked is not None  # a fresh batch of the adapter is stacked
    columns: dict[str, Any] = {
        "action": stacked.action,
        "buffer_action": stacked.buffer_action,
    }
    data = stacked.__dict__
    for name in ("value", "log_prob"):
        if name in data:
            columns[name] = data[name].cpu().numpy().reshape(-1)
    for name in ("state", "buffer_state"):
        if name in data:  # RecurrentPPO: one RNNStates per row
            columns[name] = list(data[name])
    names = tuple(columns)  # row i of every column, by zip (iterating a column gives col[i])
    rows = [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    return dict(zip(agents, rows, strict=True))


def predict_values(model: Any, observations: Sequence[Any]) -> np.ndarray:
    """The critic's values of a batch of observations: ``(n,)`` float32.

    As SB3's ``collect_rollouts`` bootstraps a truncated episode (see
    :meth:`rlightning_sb3.SB3PolicyAdapter.predict_values`).
    """
    return adapter_for(model).predict_values(stack_observations(observations))
