"""A model per group of agents in turn-based (AEC) PettingZoo envs, with env copies on Ray runners.

:class:`RayAECGroupRolloutCollector` is :class:`rlightning_pettingzoo.AECGroupRolloutCollector`
(``connect_four_v3`` with a MaskablePPO per seat, both learning at once; or a group against a
frozen or random opponent) with its env copies spread over Ray actors. It is composed of what
the other Ray PettingZoo collectors are built of; nothing of PettingZoo's or SB3's rules is
written here again:

* the learner's side is :class:`~rlightning_ray.pettingzoo.RayGroupRolloutCollector`'s
  (``pz_groups._GroupRecordingCollector``): every group's replica spec sent once, every
  group's policy weights published at each :meth:`collect
  <RayAECGroupRolloutCollector.collect>` (one ``ray.put``) with each group's latest resetting
  run (``rlightning_sb3.training_reset_run_id``: the copies reset once every group's model
  began one, as in process), and each group's buffer filled from
  the runners' rollouts of the group with :func:`rlightning_pettingzoo.fill_recorded_groups`
  (the in-process collectors' own fill), group by group in ``models`` order;
* each runner holds one replica per group model (SB3's ``save``/``load``, ``n_envs`` the
  runner's share of the group's columns), the opponents as
  :class:`~rlightning_ray.pettingzoo.RayAECRolloutCollector` sends them (``"random"`` as is, a
  frozen model as its save bytes, class and action space, loaded once before the acting seed is
  set) and a :class:`rlightning_pettingzoo.AECGroupRolloutRecorder` (the in-process AEC group
  collector, its per-group fill replaced by keeping each group's packed rows) over its copies.

With one runner every group's buffer equals the in-process collector's over the same copies,
seeds, opponents and torch seed, array for array; with several, runner ``r``'s columns of each
group's buffer equal the in-process collector's over runner ``r``'s copies
(tests/ray/test_pz_aec_groups.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

# first: pz_rollout refuses a missing [pettingzoo] extra with the message that names it
from rlightning_ray.pz_groups import GroupRolloutRunner, _GroupRecordingCollector  # isort: skip
from rlightning_ray.pz_aec import _OpponentLoading, _travelling  # isort: skip
from rlightning_pettingzoo.groups import GroupOf
from rlightning_pettingzoo.remote_aec_groups import (
    AECGroupRolloutRecorder,
    check_aec_group_models,
)

if TYPE_CHECKING:
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

__all__ = ["AECGroupRolloutRunner", "RayAECGroupRolloutCollector"]


class AECGroupRolloutRunner(_OpponentLoading, GroupRolloutRunner):
    """A Ray actor's state: every group's replica, the opponents, an AEC group recorder.

    Built in the actor's process by :class:`RayAECGroupRolloutCollector` (not meant to be built
    by hand), with the arguments of :class:`~rlightning_ray.pz_groups.GroupRolloutRunner`;
    ``options`` is ``{agent_id: "random" | (model_class, saved, action_space)}``: the opponents
    as ``RayAECRolloutCollector``'s travel (``pz_aec._travelling``), loaded by
    :meth:`recorder_options <rlightning_ray.pz_aec._OpponentLoading.recorder_options>` after
    the replicas and before the acting seed.

    Raises:
        What ``GroupRolloutRunner`` raises, what the opponents' ``model_class.load`` raises,
        and what :class:`rlightning_pettingzoo.AECGroupRolloutRecorder` raises (agents, groups,
        spaces, envs).
    """

    recorder_class: Any = AECGroupRolloutRecorder


class RayAECGroupRolloutCollector(_GroupRecordingCollector):
    """Fill one on-policy model's buffer per group of agents from turn-based envs on Ray runners.

    :class:`rlightning_pettingzoo.AECGroupRolloutCollector` over each runner's copies and
    columns: the copies (``env_fns``, or ``env_fn`` called once per copy) are split into
    ``n_runners`` consecutive blocks of ``copies_per_runner``; runner ``r`` holds copies ``r *
    copies_per_runner ...`` and fills columns ``r * m_g ... (r + 1) * m_g - 1`` of group
    ``g``'s buffer, with ``m_g = models[g].n_envs // n_runners``, as
    :class:`~rlightning_ray.pettingzoo.RayGroupRolloutCollector` splits a parallel env's copies
    (see the module docstring and ``docs/ray.md``, "PettingZoo"). Each :meth:`collect` is one
    rollout of every group. Call :func:`rlightning_sb3.start_training` for each model before,
    each model's ``train()`` after each :meth:`collect`, and :meth:`close` at the end. Needs
    ``ray.init`` first; builds the runners at once and waits until they are built.

    Args:
        models: Group name -> a PPO, A2C or MaskablePPO (feed-forward, no gSDE), each built over
            a VecEnv of ``n_envs`` slots of its group's spaces (never stepped); every
            ``n_envs`` a multiple of ``n_runners``; one model object per group.
        env_fns: One function per copy (``n_runners * copies_per_runner``), each returning a
            PettingZoo ``AECEnv`` (called in the runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        group_of: Trained agent id -> group name, a mapping or a function, as
            ``AECGroupRolloutCollector`` takes it (opponents are not looked up). It must be
            picklable by Ray's cloudpickle (a dict, or a module-level function).
        opponents: ``{agent_id: "random" | frozen SB3 model}`` for the agents in no group, as
            in ``AECGroupRolloutCollector`` (None: every agent trained by its group). A model is
            saved here and loaded in each runner once (never updated: pass a frozen copy, not
            a group's model); not modified.
        n_runners, copies_per_runner, seeds, acting_seeds, num_cpus, device, timeout_s: As in
            :class:`~rlightning_ray.pettingzoo.RayGroupRolloutCollector` (``seeds`` also seed
            each copy's random opponents, as in process; the default acting seeds count from
            the first group's ``model.seed``).

    Raises:
        TypeError: a model is not an on-policy SB3 model (named by group); ``opponents`` is
            not a mapping, or an entry ``check_aec_model`` refuses (neither ``"random"`` nor an
            SB3 model: named by agent); ``group_of`` is not a mapping or a callable, or is not
            picklable; an env function is not callable or not picklable; bad seeds or
            ``timeout_s``.
        ValueError: ``models`` is empty or two groups share a model; a model uses gSDE or has
            VecEnv wrappers the collector does not apply; an opponent is a group's model, or an
            agent of ``opponents`` is in ``group_of`` (named); a group model's ``n_envs`` is
            not a multiple of ``n_runners`` (named by group); neither or both of ``env_fns``
            and ``env_fn``; the copies are not ``n_runners * copies_per_runner``; bad seed
            lengths, ``timeout_s`` or counts.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained: e.g. an env that is no ``AECEnv``, a trained agent without a group, a
            group without agents, an agent whose spaces do not fit its group's model, an
            opponent's agent the env does not have, a model ``AECGroupRolloutCollector``
            refuses), before any runner steps.
    """

    def __init__(
        self,
        models: Mapping[str, OnPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]] | None = None,
        *,
        env_fn: Callable[[], Any] | None = None,
        group_of: GroupOf,
        opponents: Mapping[Any, Any] | None = None,
        n_runners: int = 1,
        copies_per_runner: int | None = None,
        seeds: Sequence[int | None] | None = None,
        acting_seeds: Sequence[int | None] | None = None,
        num_cpus: float = 1,
        device: str = "cpu",
        timeout_s: float | None = None,
    ) -> None:
        name = "RayAECGroupRolloutCollector"
        check_aec_group_models(models, opponents, group_of, name)
        self._start(
            name,
            AECGroupRolloutRunner,
            models,
            group_of,
            options=_travelling(opponents),
            env_fns=env_fns,
            env_fn=env_fn,
            n_runners=n_runners,
            copies_per_runner=copies_per_runner,
            seeds=seeds,
            acting_seeds=acting_seeds,
            num_cpus=num_cpus,
            device=device,
            timeout_s=timeout_s,
        )
