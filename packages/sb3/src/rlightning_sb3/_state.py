"""``AdapterState``: what an :class:`~rlightning_sb3.SB3PolicyAdapter` remembers between calls.

One small typed object per adapter, and the only code that changes it: its own methods. The
``predict`` and ``act`` steps (:mod:`rlightning_sb3._calls`, :mod:`rlightning_sb3._step`,
:mod:`rlightning_sb3._predict`) call those methods and never write its fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common import torch_layers
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
from stable_baselines3.common.preprocessing import is_image_space

from rlightning_sb3._batch import resolve_env_ids
from rlightning_sb3._noise import bind_new_env_ids, bound_env_ids, unbind
from rlightning_sb3._observations import batch_observation, native_arrays

__all__ = [
    "MODE_FREE",
    "AdapterState",
    "any_training",
    "mode_dependent_modules",
    "policy_facts",
]


class AdapterState:
    """Per-adapter state: env ids seen, carried LSTM states, and two caches of the fast paths.

    Attributes:
        carried: env id -> carried LSTM state (RecurrentPPO; an sb3-contrib ``RNNStates`` of
            tensors on the model's device) or None (env seen, nothing carried). Its keys are the
            env ids seen since construction or the last :meth:`forget`.
        last_ids: The env ids of the last successful batched call, all of them in ``carried``:
            a call with an equal list skips the id checks and needs no new registration
            (:meth:`read`).
        ready_form: ``(observation space, shape, strides, dtype)`` of the last observation
            batch :meth:`read` passed to ``obs_as_tensor`` as it is, or None.
        policy_modules: ``(policy, its modules whose mode matters, its first parameter when
            its ``predict`` can be run directly (:meth:`direct_predict`) else None, its
            observation space then, the methods that decided it)``, as of the first
            :meth:`eval_mode` or :meth:`direct_predict` for that policy object (and its
            methods) (:func:`mode_dependent_modules`, :func:`policy_facts`).

    Which env id each process of a ``VectorizedActionNoise`` is is not kept here but in
    :mod:`rlightning_sb3._noise`, its one owner (``add_replay_step`` and ``ActingReplica``
    read it too).
    """

    __slots__ = ("carried", "last_ids", "policy_modules", "ready_form")

    def __init__(self) -> None:
        self.carried: dict[str, Any] = {}
        self.last_ids: list[str] | None = None
        self.ready_form: tuple[Any, tuple[int, ...], tuple[int, ...], np.dtype[Any]] | None = None
        self.policy_modules: (
            tuple[Any, tuple[th.nn.Module, ...], Any, Any, tuple[Any, ...] | None] | None
        ) = None

    def noise_rows(self, noise: ActionNoise | None, ids: list[str]) -> list[int] | None:
        """Which env of a ``VectorizedActionNoise`` each row of this call is.

        SB3 gives env ``i`` of its VecEnv the noise process ``noises[i]``, and
        ``collect_rollouts`` (and ``add_replay_step``) reset an env's process by that index.
        Here each env id is bound to a process the first time an exploring call meets it
        (:func:`rlightning_sb3._noise.bind_new_env_ids`): the ids not bound yet take the next
        free processes, in row order. So a first call of every env in env order (a loop passes
        the VecEnv's observations in env order) binds env ``i`` to process ``i``, as SB3; a
        dynamically batching policy server, whose first batch holds whichever runners asked
        first, binds the other envs as their first batches come. Later calls may name the bound
        envs in any order, or any subset of them: each row gets its own env's process. An env
        id for which no process is left is refused, naming it.

        Returns:
            None when row ``i`` is env ``i`` of all the noise's processes (also for a noise
            that is not vectorized: the noise is called as it is); else the process index of
            each row.

        Raises:
            ValueError: ``ids`` name envs the noise has no process for, bound or free (those
                ids, the bound ones and the process count named); nothing is bound then.
        """
        if not isinstance(noise, VectorizedActionNoise):
            return None
        envs = bound_env_ids(noise)
        full = envs is not None and len(envs) == len(noise.noises)
        if full and (ids is envs or ids == envs):
            return None
        envs = bind_new_env_ids(noise, ids)
        if envs is None:
            bound = bound_env_ids(noise) or []
            known = set(bound)
            unknown = [env_id for env_id in ids if env_id not in known]
            free = len(noise.noises) - len(bound)
            raise ValueError(
                f"model.action_noise draws one sample per env for the envs {bound} (bound to "
                f"its {len(noise.noises)} processes in the order act() first met them, "
                f"{free} process(es) left free); this call's env_ids {unknown} have no noise "
                f"process: call act() with the bound envs (any subset, in any order), give "
                f"the model a VectorizedActionNoise of one process per env (SB3's "
                f"_setup_learn builds one of model.n_envs processes: build the model with a "
                f"VecEnv of every env), or set model.action_noise to its base noise, "
                f"{noise.base_noise!r}, to start over"
            )
        if len(envs) == len(noise.noises) and ids == envs:
            return None  # the first call of every env, in env order: SB3's own draw
        index = {env_id: i for i, env_id in enumerate(envs)}
        return [index[env_id] for env_id in ids]

    def read(
        self, policy: Any, observation: Any, env_ids: object
    ) -> tuple[Any, int, bool, bool, list[str], bool]:
        """Read one call's observation batch and env ids; return them and what was found.

        The observation: :func:`~rlightning_sb3._observations.batch_observation`, with a fast
        path for the common step. A numpy array of shape ``(n_envs, *space.shape)`` for a Box
        observation space is a batch by SB3's rule (``is_vectorized_box_observation``; no
        ``maybe_transpose`` applies to an array of the space's own shape) and is what
        ``collect_rollouts`` hands to ``obs_as_tensor``, so the general checks are skipped
        when its byte order is native and no stride is negative. Its form (shape, strides,
        dtype) is remembered: an array of the same form, for the same space, passes with
        three comparisons (a loop's observations all have one form). Arrays torch cannot view
        (a negative stride, a non-native byte order) are read from a native copy
        (:func:`~rlightning_sb3._observations.native_arrays`): the same values, where SB3's
        ``obs_as_tensor`` would raise.

        The env ids: ``resolve_env_ids``. A loop passes the same ids every step: a list equal
        to the last successful call's ids was checked then, and every one of its ids is in
        ``carried``, so the checks and the per-env look-ups are skipped.

        Args:
            policy: The model's policy (its ``observation_space`` is read).
            observation: The call's observation, as given.
            env_ids: The call's ``env_ids``, as given.

        Returns:
            ``(batch, n_envs, vectorized, ready, ids, seen)``: ``ready`` True means the batch
            goes to ``obs_as_tensor`` as it is (False: let ``obs_tensor`` decide); ``ids`` the
            checked ids in row order; ``seen`` whether all of them were seen (they are then the
            remembered list itself, and need no :meth:`register`). Nothing is changed but the
            remembered form.

        Raises:
            TypeError, ValueError: the observation or the ids do not fit (as ``predict``
                documents).
        """
        space = policy.observation_space
        if type(observation) is np.ndarray and (
            (form := self.ready_form) is not None
            and observation.shape == form[1]
            and observation.strides == form[2]
            and observation.dtype is form[3]
            and space is form[0]
        ):
            batch, n_envs, vectorized, ready = observation, form[1][0], True, True
        elif (
            type(observation) is np.ndarray
            and type(space) is spaces.Box
            # ``shape[1:] == space.shape`` with ``shape`` not empty: ndim is one more
            and (rows := observation.shape)[1:] == space.shape
            and rows
            and rows[0]
            and observation.dtype.isnative
            and min(observation.strides) >= 0
        ):
            self.ready_form = (space, rows, observation.strides, observation.dtype)
            batch, n_envs, vectorized, ready = observation, rows[0], True, True
        else:
            batch, n_envs, vectorized = batch_observation(policy, observation)
            batch, ready = native_arrays(batch), False
        last = self.last_ids
        if (
            last is not None
            and vectorized
            and type(env_ids) is list
            and len(last) == n_envs
            and env_ids == last
        ):
            return batch, n_envs, True, ready, last, True
        return (
            batch,
            n_envs,
            vectorized,
            ready,
            resolve_env_ids(env_ids, n_envs, vectorized),
            False,
        )

    def register(self, ids: list[str], vectorized: bool) -> None:
        """Mark ``ids`` as seen (after a successful call) and remember them for the next.

        Not needed after a call whose ids :meth:`read` found seen: those ids are the
        remembered ones, all of them seen.
        """
        carried = self.carried
        for env_id in ids:
            carried.setdefault(env_id, None)
        if vectorized:
            self.last_ids = ids

    def default_starts(self, ids: Sequence[str]) -> list[bool]:
        """``act``'s default ``episode_start``: True for the ids not seen yet."""
        carried = self.carried
        return [env_id not in carried for env_id in ids]

    def states_in(self, ids: Sequence[str], zero: Any) -> list[Any]:
        """The LSTM state each env carries into this step (``zero`` for a fresh env)."""
        carried = self.carried
        return [carried.get(env_id) or zero for env_id in ids]

    def carry(self, ids: Sequence[str], states: Iterable[Any]) -> None:
        """Carry each env's LSTM state after this step to its next call."""
        self.carried.update(zip(ids, states, strict=True))

    def load(self, ids: Sequence[str], states: Sequence[Any] | None) -> None:
        """Carry ``states[i]`` (None: nothing) into ``ids[i]``'s next call; every id is seen.

        :meth:`SB3PolicyAdapter.load_training_state
        <rlightning_sb3.SB3PolicyAdapter.load_training_state>`: the model's training state
        replaces what the adapter carried for these ids. The next call skips no check:
        ``last_ids`` is cleared.
        """
        self.last_ids = None
        if states is None:
            self.carried.update(dict.fromkeys(ids))
        else:
            self.carry(ids, states)

    def forget(self, env_ids: str | Sequence[str] | None, noise: ActionNoise | None) -> None:
        """Forget some env ids (all when None): :meth:`SB3PolicyAdapter.reset_state`.

        Forgetting every env also forgets which env id each action-noise index is, and what
        was read of the policy (``policy_modules``: it is read again on the next call).

        Args:
            env_ids: One id, several, or None for every env.
            noise: ``model.action_noise``, unbound (:func:`rlightning_sb3._noise.unbind`) when
                every env is forgotten.
        """
        self.last_ids = None
        if env_ids is None:
            self.carried.clear()
            unbind(noise)
            self.policy_modules = None
            return
        for env_id in [env_ids] if isinstance(env_ids, str) else env_ids:
            self.carried.pop(env_id, None)

    def eval_mode(self, policy: Any) -> None:
        """Put ``policy`` in eval mode as ``collect_rollouts`` does, only when it is not already.

        SB3 calls ``policy.set_training_mode(False)`` once at the start of each rollout (and
        ``train()`` switches back with ``set_training_mode(True)``); calling it every step
        costs more than a small MLP's forward pass. The policy and every submodule whose output
        can depend on its mode are checked (a ``train()`` on the policy or on any of them is
        seen), and the call is made when one of them is in training mode. Submodules of the
        exact types in :data:`MODE_FREE` (``Linear``, activations, ``Sequential``, SB3's
        ``MlpExtractor``, ...) compute the same numbers in either mode, so their flags are not
        read; a subclass of one of them is checked. The modules are listed once per policy
        object: a submodule assigned into the policy after the first ``act`` is not checked, so
        call ``model.policy.set_training_mode(False)`` after such surgery, as SB3's next
        rollout would.
        """
        cached = self.policy_modules
        if cached is None or cached[0] is not policy:
            cached = self.policy_modules = policy_facts(policy, None)
        for module in cached[1]:
            if module.training:
                policy.set_training_mode(False)
                return

    def direct_predict(self, model: Any) -> th.device | None:
        """Whether ``model.predict`` can be run directly; if so, eval mode and the device.

        Direct means :func:`~rlightning_sb3._predict.direct_predict` computes what
        ``model.predict`` computes. The caller has checked that the model's class keeps
        ``BaseAlgorithm.predict``; here, neither the model nor the policy has ``predict`` (or
        the policy ``obs_to_tensor`` or ``set_training_mode``) set on the instance, the
        policy's class keeps SB3's ``BasePolicy`` ones, its observation space is a Box that is
        not an image (``is_image_space``: ``obs_to_tensor`` copies such a batch with
        ``np.array``), and it has a parameter.

        Then the policy is put in eval mode as ``BasePolicy.predict`` leaves it: SB3 calls
        ``set_training_mode(False)`` on every call (it walks every module through
        ``nn.Module.__setattr__``: on an MLP policy a quarter of the whole call); here every
        module of the policy's current tree is read (:func:`any_training`, a tenth of that)
        and the call is made when one of them is in training mode. So a module swapped in, or
        a hook that reads ``self.training``, is seen as SB3 sees it; only a ``train()``
        override with side effects beyond the flag would notice the difference (SB3 calls it
        even when nothing is in training mode). The device ``policy.device`` returns (its first
        parameter's) is read from that parameter, kept from the first call for this policy
        object (``policy.device`` walks every module: ~5% of the call). A parameter moved with
        ``.to()`` keeps its object, so its device is current; parameters replaced by new
        objects (``load_state_dict(assign=True)``) on another device are not seen, and the
        forward pass then raises torch's device error (call
        :meth:`SB3PolicyAdapter.reset_state` after such surgery).

        Returns:
            The device, or None (nothing done: use ``model.predict``).
        """
        policy = model.policy
        kind = type(policy)
        # looked up on every call: a class patched after the first call is seen
        methods = (
            type(model).predict,
            getattr(kind, "predict", None),  # (a torch.compile wrapper has none of them)
            getattr(kind, "obs_to_tensor", None),
            getattr(kind, "set_training_mode", None),
            getattr(kind, "train", None),
        )
        cached = self.policy_modules
        if cached is None or cached[0] is not policy or cached[4] != methods:
            cached = self.policy_modules = policy_facts(policy, methods)
        first = cached[2]
        if first is None or policy.observation_space is not cached[3]:
            return None
        own = policy.__dict__
        if (
            "predict" in own
            or "obs_to_tensor" in own
            or "set_training_mode" in own
            or "train" in own
            or "predict" in model.__dict__
        ):
            return None  # set on the instance: call it
        if any_training(policy):
            policy.set_training_mode(False)
        return first.device  # type: ignore[no-any-return]


#: More modules than any policy has: a module graph that keeps growing has a cycle, which SB3's
#: own ``set_training_mode`` meets (and raises ``RecursionError`` on).
_MAX_MODULES = 100_000


def any_training(policy: th.nn.Module) -> bool:
    """Whether ``policy`` or any module in its current tree is in training mode.

    Reads the ``training`` flag of every module reachable through ``_modules`` (a module
    shared by two parents is read twice), as ``nn.Module.train`` reaches them. True also for
    a module that is not a plain ``nn.Module`` (no ``training`` or ``_modules`` of its own)
    and for a module graph of more than ``_MAX_MODULES`` modules (a cycle), so that the
    caller's ``set_training_mode`` meets them as SB3 would.
    """
    stack: list[Any] = [policy]
    for module in stack:
        if module is None:
            continue  # a submodule registered as None
        fields = module.__dict__
        if fields.get("training", True):
            return True
        children = fields.get("_modules")
        if children is None or len(stack) > _MAX_MODULES:
            return True
        stack.extend(children.values())
    return False


#: SB3's own functions that ``predict``'s direct path stands in for, by module and qualified
#: name (``obs_to_tensor`` and ``set_training_mode`` are defined on ``BaseModel``; a function
#: patched in, even before this module was imported, is not one of them): ``model.predict``,
#: ``policy.predict``, ``policy.obs_to_tensor``, ``policy.set_training_mode`` (SB3's SAC and
#: TD3 policies switch their actor and critic, leaving ``critic_target`` in eval mode as it
#: always is) and ``policy.train``.
_SB3_OWN: tuple[frozenset[tuple[str, str]], ...] = (
    frozenset({("stable_baselines3.common.base_class", "BaseAlgorithm.predict")}),
    frozenset({("stable_baselines3.common.policies", "BasePolicy.predict")}),
    frozenset(
        {
            ("stable_baselines3.common.policies", "BaseModel.obs_to_tensor"),
            ("stable_baselines3.common.policies", "BasePolicy.obs_to_tensor"),
        }
    ),
    frozenset(
        {
            ("stable_baselines3.common.policies", "BaseModel.set_training_mode"),
            ("stable_baselines3.common.policies", "BasePolicy.set_training_mode"),
            ("stable_baselines3.sac.policies", "SACPolicy.set_training_mode"),
            ("stable_baselines3.td3.policies", "TD3Policy.set_training_mode"),
        }
    ),
    frozenset({("torch.nn.modules.module", "Module.train")}),
)


def _sb3_own(function: object, own: frozenset[tuple[str, str]]) -> bool:
    name = (getattr(function, "__module__", None), getattr(function, "__qualname__", None))
    return type(name[0]) is str and type(name[1]) is str and name in own


def policy_facts(
    policy: Any, methods: tuple[Any, ...] | None
) -> tuple[Any, tuple[th.nn.Module, ...], Any, Any, tuple[Any, ...] | None]:
    """``AdapterState.policy_modules`` for ``policy`` (see there).

    Args:
        policy: The model's policy.
        methods: The functions ``AdapterState.direct_predict`` looked up (``model.predict``,
            then the policy class's ``predict``, ``obs_to_tensor``, ``set_training_mode``,
            ``train``), or None (``eval_mode``: no direct path then).
    """
    space = policy.observation_space
    direct = (
        methods is not None
        and all(_sb3_own(f, own) for f, own in zip(methods, _SB3_OWN, strict=True))
        and type(space) is spaces.Box
        and not is_image_space(space)
    )
    first = next(iter(policy.parameters()), None) if direct else None
    return (policy, mode_dependent_modules(policy), first, space, methods)


def mode_dependent_modules(policy: th.nn.Module) -> tuple[th.nn.Module, ...]:
    """``policy`` and those of its submodules whose output may depend on train/eval mode.

    Every module of ``policy.modules()`` except those whose exact type is in
    :data:`MODE_FREE` and that have no forward hook or forward pre-hook of their own (a hook,
    such as ``torch.nn.utils.spectral_norm``'s, may read ``self.training``); ``policy`` itself
    is always first.
    """
    return (
        policy,
        *(
            m
            for m in policy.modules()
            if m is not policy
            and (
                type(m) not in MODE_FREE
                or getattr(m, "_forward_hooks", None)
                or getattr(m, "_forward_pre_hooks", None)
            )
        ),
    )


#: Module types whose ``forward`` never reads ``self.training`` (torch's and SB3's own, matched
#: by exact type): their train/eval flag changes no number, so ``eval_mode`` does not read it.
#: Not here, as their output depends on the mode: ``Dropout*``, ``BatchNorm*``,
#: ``InstanceNorm*``, ``RReLU``, ``RNN``/``LSTM``/``GRU`` (dropout between layers),
#: ``MultiheadAttention`` and ``Transformer*`` (dropout), and every user-defined module.
MODE_FREE: frozenset[type] = frozenset(
    {
        th.nn.Linear,
        th.nn.Identity,
        th.nn.Flatten,
        th.nn.Unflatten,
        th.nn.Sequential,
        th.nn.ModuleList,
        th.nn.ModuleDict,
        th.nn.Conv1d,
        th.nn.Conv2d,
        th.nn.Conv3d,
        th.nn.MaxPool1d,
        th.nn.MaxPool2d,
        th.nn.AvgPool1d,
        th.nn.AvgPool2d,
        th.nn.AdaptiveAvgPool2d,
        th.nn.LayerNorm,
        th.nn.Embedding,
        th.nn.ReLU,
        th.nn.ReLU6,
        th.nn.LeakyReLU,
        th.nn.ELU,
        th.nn.SELU,
        th.nn.CELU,
        th.nn.GELU,
        th.nn.SiLU,
        th.nn.Mish,
        th.nn.Tanh,
        th.nn.Sigmoid,
        th.nn.Softplus,
        th.nn.Softsign,
        th.nn.Hardtanh,
        th.nn.Softmax,
        th.nn.LogSoftmax,
        torch_layers.FlattenExtractor,
        torch_layers.NatureCNN,
        torch_layers.MlpExtractor,
        torch_layers.CombinedExtractor,
    }
)
