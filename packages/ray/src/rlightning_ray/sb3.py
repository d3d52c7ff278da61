"""Stable-Baselines3 on Ray: a batch policy for the server and a rollout filled from fragments.

Needs the ``[sb3]`` extra (``pip install "rlightning-ray[sb3]"``). SB3's semantics stay in
``rlightning_sb3``: the server answers through :meth:`rlightning_sb3.SB3PolicyAdapter.act` and the
driver fills the model's ``RolloutBuffer`` with :func:`rlightning_sb3.add_rollout_step` and
:func:`rlightning_sb3.finish_rollout`, as SB3's ``OnPolicyAlgorithm.collect_rollouts`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning import PolicyResponse, ResponseBatch
from rlightning_ray._rows import concat_observations
from rlightning_ray.collector import Collector
from rlightning_ray.runner import Fragment

try:
    import torch
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
    from stable_baselines3.common.utils import set_random_seed

    from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f'rlightning_ray.sb3 needs the [sb3] extra: pip install "rlightning-ray[sb3]" ({exc})'
    ) from exc

__all__ = ["SB3BatchPolicy", "collect_rollout", "policy_weights"]


class SB3BatchPolicy:
    """A :class:`~rlightning_ray.BatchPolicy` running an SB3 model through ``SB3PolicyAdapter``.

    Built in the server's process by a factory, e.g.
    ``lambda: SB3BatchPolicy(lambda: PPO("MlpPolicy", env, device="cpu"))``.

    Args:
        make_model: Builds the SB3 model (its spaces must be the runners' envs' spaces; its
            weights are replaced by each publish).
        seed: When given, ``stable_baselines3.common.utils.set_random_seed(seed)`` runs after the
            model is built, so the server's random draws (torch's global RNG, which
            ``collect_rollouts`` samples from) start from a known state.
        explore: ``act``'s ``explore`` (False: deterministic actions).
    """

    def __init__(
        self,
        make_model: Callable[[], BaseAlgorithm],
        *,
        seed: int | None = None,
        explore: bool = True,
    ) -> None:
        self.model = make_model()
        self.adapter = SB3PolicyAdapter(self.model)
        self.explore = explore
        if seed is not None:
            set_random_seed(seed)

    def __call__(
        self,
        observation: Any,
        env_ids: list[str],
        episode_start: np.ndarray,
        ts_env_sent_ns: list[int],
    ) -> ResponseBatch[PolicyResponse]:
        """One ``SB3PolicyAdapter.act`` call for the whole batch (see its docstring)."""
        return self.adapter.act(
            observation,
            env_ids,
            episode_start=episode_start,
            explore=self.explore,
            ts_env_sent_ns=ts_env_sent_ns,
        )

    def set_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Load a ``policy.state_dict()`` (from :func:`policy_weights`) into the model's policy."""
        self.model.policy.load_state_dict(weights)


def policy_weights(model: BaseAlgorithm) -> dict[str, torch.Tensor]:
    """A CPU copy of ``model.policy.state_dict()`` for :func:`~rlightning_ray.publish_weights`.

    Returns:
        ``{name: tensor}``, detached CPU copies (the learner may train on while they travel).
    """
    return {k: v.detach().to("cpu", copy=True) for k, v in model.policy.state_dict().items()}


def collect_rollout(
    model: OnPolicyAlgorithm, collector: Collector, *, current_version: int | None = None
) -> list[Fragment]:
    """Fill ``model.rollout_buffer`` with one rollout from the runners, as ``collect_rollouts``.

    Asks every runner for ``model.n_steps`` steps, then adds step ``t`` of all runners (columns
    in runner order: :attr:`Collector.env_ids`) with :func:`rlightning_sb3.add_rollout_step`
    (truncation bootstrap, ``num_timesteps``, episode infos) and finishes with
    :func:`rlightning_sb3.finish_rollout` (returns and advantages). The model must have been
    prepared with :func:`rlightning_sb3.start_training` and built with a VecEnv of
    ``len(collector.env_ids)`` envs (its spaces and ``n_envs`` size the buffer; it is never
    stepped here).

    Args:
        model: An on-policy SB3 model (PPO, A2C).
        collector: The runners' collector.
        current_version: The policy version published for this rollout (answers older than
            ``current_version - collector.max_staleness`` are refused).

    Returns:
        The fragments, in runner order (``collector.latency()`` has their hops). Mutates the
        model's buffer and bookkeeping as the helpers document.

    Raises:
        ValueError: the model's ``n_envs`` is not the runners' env count, or a helper refuses a
            step (its message names the env).
    """
    env_ids = collector.env_ids
    if model.n_envs != len(env_ids):
        raise ValueError(
            f"the model has n_envs={model.n_envs} but the runners host {len(env_ids)} envs "
            f"{env_ids}: build the model with a VecEnv of {len(env_ids)} envs"
        )
    fragments = collector.sample(model.n_steps, current_version)
    for t in range(model.n_steps):
        responses = [r for f in fragments for r in ResponseBatch(f.answers[t])]
        add_rollout_step(
            model,
            concat_observations([f.observations[t] for f in fragments]),
            responses,
            np.concatenate([f.rewards[t] for f in fragments]),
            np.concatenate([f.dones[t] for f in fragments]),
            [info for f in fragments for info in f.infos[t]],
            env_ids=env_ids,
        )
    finish_rollout(
        model,
        concat_observations([f.last_observation for f in fragments]),
        np.concatenate([f.last_dones for f in fragments]),
        env_ids=env_ids,
    )
    return fragments
