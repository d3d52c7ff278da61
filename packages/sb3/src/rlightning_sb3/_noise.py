"""The one owner of which env id each process of a ``VectorizedActionNoise`` is.

SB3 gives env ``i`` of its VecEnv the process ``noises[i]`` of a ``VectorizedActionNoise`` and
``collect_rollouts`` resets env ``i``'s process by that index (``action_noise.reset(indices=
[i])``): process ``i``, env ``i`` and replay-buffer column ``i`` are one env. Here the env ids
of the first exploring :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>` call
that meets the noise, in row order, are bound to it, and the env ids a later call meets first
take the next free processes (:func:`bind_new_env_ids`: a dynamically batching policy server's
batches hold any subset of the envs); every later draw
(``AdapterState.noise_rows``), every reset of an :class:`~rlightning_sb3.ActingReplica` and
every reset of :func:`~rlightning_sb3.add_replay_step` reads that binding, so they cannot
disagree. :func:`noise_indices` is the reset side's reading; :func:`check_replay_columns`
refuses a replay buffer whose columns are not the noise's envs in process order.

The binding is kept in a ``WeakKeyDictionary`` keyed by the noise object (nothing is added to
the noise, so a saved model pickles as SB3 pickles it); a new noise object starts unbound.
"""

from __future__ import annotations

from collections.abc import Sequence
from weakref import WeakKeyDictionary

from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise

__all__ = [
    "bind_env_ids",
    "bind_new_env_ids",
    "bound_env_ids",
    "check_replay_columns",
    "noise_indices",
    "unbind",
]

_BOUND: WeakKeyDictionary[VectorizedActionNoise, list[str]] = WeakKeyDictionary()


def bound_env_ids(noise: ActionNoise | None) -> list[str] | None:
    """The env id of each process of ``noise``, in process order; None when unbound.

    Returns:
        The bound list (not a copy: do not mutate it), or None for an unbound or
        non-vectorized noise.
    """
    if not isinstance(noise, VectorizedActionNoise):
        return None
    return _BOUND.get(noise)


def bind_env_ids(noise: VectorizedActionNoise, ids: list[str]) -> None:
    """Bind ``ids`` (one per process, in process order) to ``noise``; replaces a binding.

    :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>` then draws row ``r``'s
    sample from process ``ids.index(env_ids[r])``: for a call of every id in this order with
    one ``noise()`` (SB3's ``VectorizedActionNoise.__call__``, process order), for a subset
    ``noise.noises[j]()`` per row, in row order. Used by the PettingZoo replay collectors to
    give each (copy, agent) slot its process, in slot order, before any draw.

    Args:
        noise: The vectorized noise (mutated: nothing; the binding is kept beside it).
        ids: One distinct env id per process of ``noise``, in process order.
    """
    _BOUND[noise] = list(ids)


def bind_new_env_ids(noise: VectorizedActionNoise, ids: Sequence[str]) -> list[str] | None:
    """Bind each of ``ids`` not bound yet to the next free process of ``noise``, in row order.

    The binding grows as an exploring ``act`` meets new env ids: a first call of all the
    noise's envs in env order binds env ``i`` to process ``i``, as SB3's VecEnv does; a call
    holding a subset (a dynamically batching policy server's first batch) binds those envs
    to the first processes, and the envs of later batches take the next ones. Every process
    of a ``VectorizedActionNoise`` is a deep copy of its base noise, reset: which free process
    an env takes does not change the values it draws.

    Args:
        noise: A vectorized noise (bound, partly bound or not).
        ids: The call's env ids (distinct), in row order.

    Returns:
        The binding after the call (not a copy: do not mutate it), or None when the new ids
        are more than the free processes (then nothing is bound).
    """
    bound = _BOUND.get(noise)
    if bound is None:
        bound = []
    known = set(bound)
    new = [env_id for env_id in ids if env_id not in known]
    if not new:
        return bound
    if len(bound) + len(new) > len(noise.noises):
        return None
    bound = _BOUND[noise] = bound + new
    return bound


def unbind(noise: ActionNoise | None) -> None:
    """Forget the binding of ``noise`` (nothing for an unbound or non-vectorized noise)."""
    if isinstance(noise, VectorizedActionNoise):
        _BOUND.pop(noise, None)


def noise_indices(noise: VectorizedActionNoise, env_ids: Sequence[str]) -> list[int]:
    """The process index of each of ``env_ids`` that ``noise`` has a process for.

    Args:
        noise: A vectorized noise (bound or not).
        env_ids: Env ids.

    Returns:
        Their indices in the bound order, skipping ids the noise has no process for; [] when
        the noise is unbound.
    """
    bound = _BOUND.get(noise)
    if bound is None:
        return []
    index = {env_id: i for i, env_id in enumerate(bound)}
    return [index[e] for e in env_ids if e in index]


def check_replay_columns(noise: ActionNoise | None, columns: list[str]) -> None:
    """Refuse replay-buffer columns that are not the bound noise's envs in process order.

    ``add_replay_step`` resets the process of a done env by its column index, as SB3's
    ``collect_rollouts`` does (process ``i`` is env ``i`` is column ``i``). When the first
    exploring ``act`` named the envs in another order than the buffer's columns, that index
    would reset another env's process, silently: refused instead.

    Args:
        noise: ``model.action_noise``.
        columns: The buffer's env ids in column order (``add_replay_step``'s ``env_ids``, or
            the responses' order).

    Raises:
        ValueError: ``noise`` is a bound ``VectorizedActionNoise`` and ``columns`` are not its
            env ids in process order (both lists named).
    """
    if not isinstance(noise, VectorizedActionNoise):
        return
    bound = _BOUND.get(noise)
    if bound is None or bound == columns:
        return
    raise ValueError(
        f"model.action_noise keeps one noise process per env, bound to the envs {bound} in "
        f"that order (the rows of the first exploring SB3PolicyAdapter.act() call), but the "
        f"replay buffer's columns are the envs {columns} (add_replay_step's env_ids, or the "
        f"responses' order): SB3 resets the noise of the env in column i by process index i "
        f"(collect_rollouts: action_noise.reset(indices=[i])), which would reset another env's "
        f"noise. Make the first exploring act() name the envs in the buffer's column order "
        f"{columns} (the VecEnv's order; adapter.reset_state() forgets the binding)"
    )
