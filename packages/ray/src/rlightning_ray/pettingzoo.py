"""PettingZoo on Ray: runners hosting parallel envs, answered by one shared SB3 policy.

Needs the ``[pettingzoo]`` extra (``pip install "rlightning-ray[pettingzoo]"``). PettingZoo's
semantics stay in ``rlightning_pettingzoo``: the server answers each env through
:meth:`rlightning_pettingzoo.SharedPolicyAdapter.act` (one batched SB3 call for that env's live
agents, agents that wait get a None action, as the adapter documents) and the runner's env group,
:class:`rlightning_pettingzoo.ParallelEnvGroup`, steps with
:func:`rlightning_pettingzoo.to_parallel_actions`, which checks each action against
``env.agents`` and the action spaces. Agents that die leave ``env.agents`` and are not asked
again; agents that join are asked from their first observation on; an env whose agents are all
gone is reset at once (its last step's rewards, terminations, infos and observations are in
the fragment, as copies made when the env returned them). :func:`collect_shared_rollout` fills a
shared model's ``RolloutBuffer`` from the runners, one row per agent and env step, through
``rlightning_sb3``'s buffer helpers.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.rules import check_flag, flat_mask, mask_size
from rlightning_ray._parallel import ParallelEnvRunner
from rlightning_ray.collector import Collector
from rlightning_ray.pz_aec import RayAECRolloutCollector
from rlightning_ray.pz_aec_groups import RayAECGroupRolloutCollector
from rlightning_ray.pz_aec_replay import RayAECReplayCollector
from rlightning_ray.pz_group_replay import RayGroupReplayCollector
from rlightning_ray.pz_groups import RayGroupRolloutCollector
from rlightning_ray.pz_replay import RaySharedReplayCollector
from rlightning_ray.pz_rollout import RaySharedRolloutCollector

try:
    import torch

    from pettingzoo import ParallelEnv
    from rlightning_pettingzoo import ParallelFragment, SharedPolicyAdapter
    from rlightning_sb3 import (
        add_rollout_step,
        finish_rollout,
        set_acting_seed,
        training_reset_run_id,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rlightning_ray.pettingzoo needs the [pettingzoo] extra: "
        f'pip install "rlightning-ray[pettingzoo]" ({exc})'
    ) from exc

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

__all__ = [
    "LiveAgents",
    "ParallelEnvRunner",
    "ParallelFragment",
    "RayAECGroupRolloutCollector",
    "RayAECReplayCollector",
    "RayAECRolloutCollector",
    "RayGroupReplayCollector",
    "RayGroupRolloutCollector",
    "RaySharedReplayCollector",
    "RaySharedRolloutCollector",
    "SharedBatchPolicy",
    "collect_shared_rollout",
]


class LiveAgents(ParallelEnv):  # type: ignore[misc]  # pettingzoo ships no type information
    """A runner's env as the server sees it: the template's spaces, the runner's live agents.

    Args:
        template: A parallel env of the runner's kind, built in the server (for its spaces and
            ``possible_agents``); never stepped.
        agents: The agents live in the runner's env now, in ``env.agents`` order.
    """

    def __init__(self, template: Any, agents: Sequence[Any]) -> None:
        self.template = template
        self.agents = list(agents)
        self.possible_agents = list(getattr(template, "possible_agents", agents))
        self.metadata = getattr(template, "metadata", {})

    def observation_space(self, agent: Any) -> Any:
        """The template's observation space of ``agent``."""
        return self.template.observation_space(agent)

    def action_space(self, agent: Any) -> Any:
        """The template's action space of ``agent``."""
        return self.template.action_space(agent)


class SharedBatchPolicy:
    """A :class:`~rlightning_ray.BatchPolicy` answering multi-agent envs with one shared model.

    Each env of the batch gets one :meth:`SharedPolicyAdapter.act` call (one SB3 forward pass over
    its live agents; the adapter's public API acts per env, so a batch of ``n`` envs costs ``n``
    forward passes).

    Args:
        make_model: Builds the shared SB3 model (one agent's spaces).
        make_env: Builds a parallel env of the runners' kind (the template, reset once).
        seed: When given, ``set_random_seed(seed)`` after the model is built.
        deterministic: ``SharedPolicyAdapter.act``'s ``deterministic``.

    Raises:
        TypeError: ``deterministic`` is not a bool (rule ``flag``; a ``numpy.bool_`` is one),
            before the model is built.
    """

    def __init__(
        self,
        make_model: Callable[[], BaseAlgorithm],
        make_env: Callable[[], Any],
        *,
        seed: int | None = None,
        deterministic: bool = False,
    ) -> None:
        self.deterministic = check_flag(deterministic, "deterministic", "SharedBatchPolicy")
        self.model = make_model()
        self.adapter = SharedPolicyAdapter(self.model)
        self.template = make_env()
        self.template.reset(seed=0)
        if seed is not None:
            set_acting_seed(seed)

    def __call__(
        self,
        observation: list[dict[Any, Any]],
        env_ids: list[str],
        episode_start: np.ndarray,
        ts_env_sent_ns: list[int],
        *,
        action_masks: list[dict[Any, Any]] | None = None,
    ) -> list[MultiAgentPolicyResponse]:
        """One response per env: ``observation[i]`` holds env ``i``'s live agents' observations.

        ``action_masks[i]`` (when given) holds the masks the runner found in env ``i``'s agents'
        infos (``rlightning_pettingzoo.ParallelEnvGroup.observe``): they reach
        :meth:`SharedPolicyAdapter.act` as ``infos``, where it looks for them (masks carried by
        the observations are found there).
        """
        masks = action_masks if action_masks is not None else [None] * len(env_ids)
        return [
            self.adapter.act(
                LiveAgents(self.template, list(obs)),
                obs,
                env_id,
                infos=None if not found else {a: {"action_mask": m} for a, m in found.items()},
                deterministic=self.deterministic,
            )
            for obs, env_id, found in zip(observation, env_ids, masks, strict=True)
        ]

    def set_weights(self, weights: Any) -> None:
        """Load a ``policy.state_dict()`` into the shared model's policy."""
        self.model.policy.load_state_dict(weights)


def collect_shared_rollout(
    model: OnPolicyAlgorithm,
    collector: Collector,
    agents: Sequence[Any],
    *,
    current_version: int | None = None,
    timeout_s: float | None = None,
) -> list[ParallelFragment]:
    """Fill a shared model's ``RolloutBuffer`` from :class:`ParallelEnvRunner` s, one row per agent.

    Parameter sharing as SuperSuit's ``pettingzoo_env_to_vec_env_v1`` lays it out: every agent
    of every env is one slot of the model's VecEnv, slot ``e * len(agents) + j`` being agent
    ``agents[j]`` of env ``e`` (envs in :attr:`Collector.env_ids` order). Asks every runner for
    ``model.n_steps`` steps, then adds each step with :func:`rlightning_sb3.add_rollout_step`
    (observation, ``buffer_action``, ``value`` and ``log_prob`` of each agent's
    :meth:`~rlightning_pettingzoo.SharedPolicyAdapter.act` row, reward, the env's episode start
    for all its agents) and finishes with :func:`rlightning_sb3.finish_rollout`, as
    ``OnPolicyAlgorithm.collect_rollouts``. For a MaskablePPO each row also carries the mask
    its agent was answered with (``rlightning.rules.flat_mask`` of the answer's
    ``action_mask``; all-True for an agent without one, as ``MaskableRolloutBuffer`` stores an
    unmasked row), so the buffer stores the masks the actions were drawn under, as sb3-contrib's
    ``MaskablePPO.collect_rollouts`` does. A slot is done when its env's episode ended (no
    agent left; the runner then reset it); its info holds the agent's last observation as
    ``terminal_observation`` and ``TimeLimit.truncated = truncated and not terminated``, as
    SB3's ``DummyVecEnv`` sets them, so truncated episodes are bootstrapped with the critic's
    value of that observation. Run the server with ``SharedBatchPolicy(...,
    deterministic=False)`` (the default) so that the actions are sampled, as in training. At a
    new training run begun with ``start_training(..., reset_num_timesteps=True)`` the runners
    reset every env before the first step (the model's
    :func:`rlightning_sb3.training_reset_run_id`, sent with the request), as SB3's
    ``_setup_learn`` resets its VecEnv; with ``False`` the episodes continue. Finished
    episodes are reported as SB3's ``VecMonitor`` over the slots reports them
    (``common/vec_env/vec_monitor.py``): each slot's return (float32, summed step by step) and
    length since its env's episode start, in ``info["episode"]`` (``"r"``, ``"l"``, ``"t"``:
    seconds since the collector's first call) of the step that ends it, so that
    ``model.ep_info_buffer`` and ``rollout/ep_rew_mean`` are ``learn()``'s. The running sums
    are kept per collector and env between calls; an episode cut by a reset (a new resetting
    run, a restarted runner) is dropped, as ``VecMonitor.reset`` drops it.

    Args:
        model: The shared on-policy model (PPO, A2C), prepared with
            :func:`rlightning_sb3.start_training`, built with a VecEnv of ``len(agents) *
            len(collector.env_ids)`` slots of one agent's spaces (they size the buffer; it is
            never stepped here).
        collector: The :class:`ParallelEnvRunner` s' collector.
        agents: The agents of every env, in slot order (e.g. ``env.possible_agents``); every one
            of them must act at every step until the episode ends (a VecEnv slot cannot leave
            or join); checked for every step before the buffer changes.
        current_version: The policy version published for this rollout.
        timeout_s: Seconds to wait for the fragments (None: the collector's ``timeout_s``).

    Returns:
        The fragments, in runner order. Mutates the model's buffer and bookkeeping as the
        helpers document (``model.num_timesteps`` counts agent-steps: ``len(agents)`` per env
        step).

    Raises:
        ValueError: ``agents`` is empty or repeats an agent; the model's ``n_envs`` is not the
            slot count; an env's live agents at a step are not ``agents`` (named, with the env
            id and step); or a helper refuses a step (its message names the slot).
    """
    agents = list(agents)
    if not agents or len(set(agents)) != len(agents):
        raise ValueError(f"agents must name each agent once, got {agents!r}")
    env_ids = collector.env_ids
    slots = [f"{env_id}/{agent}" for env_id in env_ids for agent in agents]
    if model.n_envs != len(slots):
        raise ValueError(
            f"the model has n_envs={model.n_envs} but the runners' {len(env_ids)} envs x "
            f"{len(agents)} agents make {len(slots)} slots: build the model with a VecEnv of "
            f"{len(slots)} envs"
        )
    fragments: list[Any] = collector.sample(
        model.n_steps,
        current_version,
        timeout_s=timeout_s,
        reset_run_id=training_reset_run_id(model),
    )
    for frag in fragments:
        if not isinstance(frag, ParallelFragment):
            raise TypeError(
                f"collect_shared_rollout needs ParallelEnvRunner fragments, got "
                f"{type(frag).__name__} from runner {getattr(frag, 'runner_id', '?')!r}"
            )
        for i, env_id in enumerate(frag.env_ids):  # all checked before the buffer changes
            for t, asked in enumerate(frag.observations):
                _check_agents(asked[i], agents, env_id, t)
            _check_agents(frag.last_observations[i], agents, env_id, model.n_steps)
    # a MaskablePPO's buffer stores each row's mask (sb3-contrib's MaskableRolloutBuffer)
    maskable = hasattr(model.rollout_buffer, "action_masks")
    monitor = _monitor(collector, len(agents))
    for t in range(model.n_steps):
        # what the slots' env.step returned (reset where done): the callback's new_obs and the
        # model's _last_obs, as collect_rollouts keeps them
        after = _slot_observations(
            [
                f.observations[t + 1] if t + 1 < model.n_steps else f.last_observations
                for f in fragments
            ],
            agents,
        )
        responses: list[PolicyResponse] = []
        rewards: list[float] = []
        dones: list[bool] = []
        infos: list[dict[str, Any]] = []
        for frag in fragments:
            for i, env_id in enumerate(frag.env_ids):
                answer = frag.answers[t][i]
                final = frag.final_observations[t][i]
                done = bool(frag.resets[t, i])
                finished = monitor.step(
                    env_id, bool(frag.episode_starts[t, i]), frag.rewards[t][i], agents, done
                )
                for j, agent in enumerate(agents):
                    extra: dict[str, Any] = {}
                    if maskable:  # the mask this agent was answered with, in SB3's flat form
                        found = getattr(answer, "action_mask", None)
                        mask = None if found is None else found.get(agent)
                        extra["action_mask"] = (
                            np.ones(mask_size(model.action_space), dtype=bool)
                            if mask is None
                            else flat_mask(model.action_space, mask)
                        )
                    responses.append(
                        PolicyResponse(
                            f"{env_id}/{agent}",
                            action=answer.action[agent],
                            buffer_action=answer.buffer_action[agent],
                            # 0-d tensors, as SB3PolicyAdapter.act answers them
                            value=torch.as_tensor(answer.value[agent]),
                            log_prob=torch.as_tensor(answer.log_prob[agent]),
                            episode_start=bool(frag.episode_starts[t, i]),
                            **extra,
                        )
                    )
                    rewards.append(float(frag.rewards[t][i][agent]))
                    dones.append(done)
                    info: dict[str, Any] = {} if finished is None else {"episode": finished[j]}
                    if done and final is not None and agent in final:
                        info["terminal_observation"] = _terminal_observation(final[agent])
                        info["TimeLimit.truncated"] = bool(
                            frag.truncations[t][i].get(agent, False)
                            and not frag.terminations[t][i].get(agent, False)
                        )
                    infos.append(info)
        add_rollout_step(
            model,
            _slot_observations([f.observations[t] for f in fragments], agents),
            responses,
            np.asarray(rewards, dtype=np.float32),
            np.asarray(dones, dtype=bool),
            infos,
            env_ids=slots,
            new_observation=after,
        )
    last = _slot_observations([f.last_observations for f in fragments], agents)
    last_dones = [bool(done) for f in fragments for done in f.last_resets for _ in agents]
    finish_rollout(model, last, np.asarray(last_dones, dtype=bool), env_ids=slots)
    return fragments


class _SlotMonitor:
    """``VecMonitor``'s counters for the slots of a collector's envs, kept between calls.

    Follows stable_baselines3's ``common/vec_env/vec_monitor.py``: per slot a float32 return
    (``episode_returns += rewards``, the rewards as the buffer's float32) and a length, reported
    as ``{"r", "l", "t"}`` at the step that ends the episode and zeroed there; zeroed also at an
    episode start (what ``VecMonitor.reset`` does at a reset, which the runner's envs signal
    with the step's episode start).
    """

    def __init__(self, n_agents: int) -> None:
        self.n_agents = n_agents
        self.start = time.time()
        self.returns: dict[str, np.ndarray] = {}
        self.lengths: dict[str, int] = {}

    def step(
        self,
        env_id: str,
        episode_start: bool,
        rewards: dict[Any, Any],
        agents: list[Any],
        done: bool,
    ) -> list[dict[str, Any]] | None:
        """Add one env step's rewards; the slots' episode infos when it ends the episode.

        Returns:
            One ``{"r": np.float32, "l": int, "t": float}`` per agent (in ``agents`` order)
            when ``done``, else None. Mutates the env's counters.
        """
        if episode_start or env_id not in self.returns:
            self.returns[env_id] = np.zeros(self.n_agents, dtype=np.float32)
            self.lengths[env_id] = 0
        step = np.asarray([rewards[agent] for agent in agents], dtype=np.float32)
        self.returns[env_id] += step
        self.lengths[env_id] += 1
        if not done:
            return None
        elapsed = round(time.time() - self.start, 6)
        length = self.lengths[env_id]
        finished = [{"r": r, "l": length, "t": elapsed} for r in self.returns[env_id]]
        self.returns[env_id] = np.zeros(self.n_agents, dtype=np.float32)
        self.lengths[env_id] = 0
        return finished


#: Per collector (weakly held), its envs' episode counters (:func:`collect_shared_rollout`)
_MONITORS: weakref.WeakKeyDictionary[Collector, _SlotMonitor] = weakref.WeakKeyDictionary()


def _monitor(collector: Collector, n_agents: int) -> _SlotMonitor:
    """The collector's :class:`_SlotMonitor` (a new one for a new agent count)."""
    monitor = _MONITORS.get(collector)
    if monitor is None or monitor.n_agents != n_agents:
        monitor = _MONITORS[collector] = _SlotMonitor(n_agents)
    return monitor


def _slot_observations(steps: list[list[dict[Any, Any]]], agents: list[Any]) -> Any:
    """One step of every runner's envs as the slots' ``(n_slots, *obs_shape)`` array.

    ``steps[r][i]`` is runner ``r``'s env ``i``'s ``{agent: observation}``; slot ``e *
    len(agents) + j`` is agent ``agents[j]`` of env ``e`` (a new array: the fragments are not
    changed). Dict observations are stacked key by key into ``{key: (n_slots, *shape)}``, as
    SB3's ``DummyVecEnv`` stacks a Dict space (and ``rlightning_pettingzoo`` batches them).
    """
    rows = [env[agent] for step in steps for env in step for agent in agents]
    if rows and isinstance(rows[0], dict):
        return {key: np.stack([np.asarray(row[key]) for row in rows]) for key in rows[0]}
    return np.stack([np.asarray(row) for row in rows])


def _terminal_observation(observation: Any) -> Any:
    """A copy of one agent's final observation (a dict of arrays for a Dict space)."""
    if isinstance(observation, dict):
        return {key: np.array(value) for key, value in observation.items()}
    return np.array(observation)


def _check_agents(observations: dict[Any, Any], agents: list[Any], env_id: str, t: int) -> None:
    """Refuse a step whose live agents are not exactly ``agents`` (a VecEnv slot is fixed)."""
    if set(observations) != set(agents):
        raise ValueError(
            f"env {env_id!r} at step {t} has live agents {list(observations)} but "
            f"collect_shared_rollout needs {agents} at every step (one VecEnv slot per agent: "
            "agents may not leave or join before the episode ends)"
        )
