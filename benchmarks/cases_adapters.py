"""Items 6 and 7 of the performance issue: the SB3 and PettingZoo adapters per step.

Item 6 compares ``SB3PolicyAdapter.predict`` with SB3's own ``model.predict`` and
``SB3PolicyAdapter.act`` with the raw per-step work of SB3's ``OnPolicyAlgorithm.collect_rollouts``
(``obs_as_tensor`` and ``policy(obs)`` under ``torch.no_grad()``, ``actions.cpu().numpy()``, the
Box clip/unscale branch and the Discrete ``actions.reshape(-1, 1)`` for the buffer), for an
untrained PPO ``MlpPolicy`` on CartPole-v1 at 1, 16 and 64 envs. The act floor leaves out what
SB3 does once per rollout, not per step (``policy.set_training_mode(False)``), and what the
adapter's responses do not do (``env.step``, callbacks, ``RolloutBuffer.add``).

Change (sb3perf branch): the act floor used to stop at ``actions.cpu().numpy()``; it now also
does the action-space handling ``collect_rollouts`` does on every step (the ``isinstance(...,
spaces.Box)`` clip/unscale branch, a no-op for CartPole's Discrete space, and the Discrete
reshape to ``(n_envs, 1)``), since the adapter's ``act`` must do the same work to return
``action`` and ``buffer_action``. It is about a microsecond per step.

Item 7 times ``to_parallel_actions(sample_response(env), env)`` per step on a PettingZoo
``ParallelEnv`` with 2 to 2000 agents, per agent. The env is a minimal real ``ParallelEnv``
(``Discrete(5)`` actions, one space object per agent, ``step`` never called): no bundled env
takes 2000 agents in reasonable time, and the figure is about the adapter, not the env's
dynamics. Its floor is sampling one action per live agent by hand
(``{a: env.action_space(a).sample() for a in env.agents}``).

When an adapter is not importable (its package is being built elsewhere) every row of its item
is present and says so, rather than missing.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from benchmarks._harness import Bench, skipped

N_ENVS = (1, 16, 64)
N_AGENTS = (2, 20, 200, 2000)

CASES: tuple[tuple[str, int, str, str], ...] = tuple(
    [
        (
            f"6.predict_n{n}",
            6,
            f"SB3 predict, PPO MlpPolicy CartPole-v1, n_envs={n}",
            "model.predict(obs)",
        )
        for n in N_ENVS
    ]
    + [
        (
            f"6.act_n{n}",
            6,
            f"SB3 act (rollout step), PPO MlpPolicy CartPole-v1, n_envs={n}",
            "collect_rollouts step: no_grad policy(obs_as_tensor(obs)), actions.cpu().numpy(), "
            "clip / Discrete reshape",
        )
        for n in N_ENVS
    ]
    + [
        (
            f"7.pz_n{n}",
            7,
            f"to_parallel_actions(sample_response(env), env), {n} agents, per agent",
            "{a: env.action_space(a).sample() for a in env.agents}",
        )
        for n in N_AGENTS
    ]
)

CASE_IMPLS: dict[str, tuple[str, ...]] = {
    case: ("floor", "bare_batch", "rlightning")
    if case.startswith("6.act")
    else ("floor", "rlightning")
    for case, *_ in CASES
}


def _import_attrs(module: str, names: tuple[str, ...]) -> tuple[list[Any], str | None]:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError, or a version-range check failing at import
        return [], f"{module} is not importable here ({type(exc).__name__}: {exc})"
    missing = [name for name in names if not _has_path(mod, name)]
    if missing:
        return [], f"{module} has no {', '.join(missing)} yet"
    return [_get_path(mod, name) for name in names], None


def _has_path(obj: Any, dotted: str) -> bool:
    try:
        _get_path(obj, dotted)
    except AttributeError:
        return False
    return True


def _get_path(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------------------------------- item 6
_MODELS: dict[int, Any] = {}


def _model(n_envs: int) -> Any:
    if n_envs not in _MODELS:
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env

        env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=0)
        _MODELS[n_envs] = PPO("MlpPolicy", env, device="cpu", seed=0)
    return _MODELS[n_envs]


def sb3_observation(n_envs: int) -> Any:
    """The observation batch item 6 feeds every implementation: ``(n_envs, 4)`` float32.

    Args:
        n_envs: Number of envs (rows).

    Returns:
        Rows sampled from the model's observation space, seeded (the same batch every time).
    """
    space = _model(n_envs).observation_space
    space.seed(0)
    return np.stack([space.sample() for _ in range(n_envs)])


def sb3_call(kind: str, impl: str, n_envs: int) -> Callable[[Any], object]:
    """One step of item 6 for ``impl``: a function of the observation batch.

    The timed rows (:func:`adapter_benches`) and the instruction counts
    (``benchmarks.callgrind``) call these same functions, so both measure the same work.

    Args:
        kind: ``"predict"`` or ``"act"``.
        impl: ``"floor"`` (``model.predict``, or one step of SB3's ``collect_rollouts`` for
            ``act``), ``"bare_batch"`` (``act`` only) or ``"rlightning"``.
        n_envs: Number of envs of the CartPole PPO model (built once per ``n_envs``).

    Returns:
        ``call(obs)`` doing one step on a ``(n_envs, 4)`` batch.

    Raises:
        ImportError: stable-baselines3 or rlightning_sb3 is not importable.
    """
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.utils import obs_as_tensor

    model = _model(n_envs)
    env_ids = [f"env-{i}" for i in range(n_envs)]
    policy, device, action_space = model.policy, model.device, model.action_space
    if impl == "floor" and kind == "predict":

        def call(o: Any) -> object:
            return model.predict(o, deterministic=False)

    elif impl == "floor":

        def call(o: Any) -> object:
            # One step of OnPolicyAlgorithm.collect_rollouts, less env.step and the buffer.
            with torch.no_grad():
                actions, _values, _log_probs = policy(obs_as_tensor(o, device))
            actions = actions.cpu().numpy()
            clipped_actions = actions
            if isinstance(action_space, spaces.Box):
                if policy.squash_output:
                    clipped_actions = policy.unscale_action(clipped_actions)
                else:
                    clipped_actions = np.clip(actions, action_space.low, action_space.high)
            if isinstance(action_space, spaces.Discrete):
                actions = actions.reshape(-1, 1)
            return clipped_actions, actions

    elif impl == "bare_batch":
        # Not an anchor: the act floor plus the least an adapter answering with responses must
        # do -- one stacked PolicyResponse (env ids, actions, buffer actions, values, log-probs,
        # episode starts) wrapped in a ResponseBatch -- with no input checked, and the torch
        # calls the adapter uses on the CPU (th.from_numpy for obs_as_tensor, .numpy() for
        # .cpu().numpy(), autograd switched off directly for `with no_grad()`: the same
        # tensors and arrays, cheaper). The structural floor of act's contract, to show what
        # is left for the checks.
        from rlightning import PerEnv, PolicyResponse, ResponseBatch

        set_grad = torch._C._set_grad_enabled

        def call(o: Any) -> object:
            grad = torch.is_grad_enabled()
            set_grad(False)
            try:
                actions, values, log_probs = policy(torch.from_numpy(o))
            finally:
                set_grad(grad)
            actions = actions.numpy()
            if isinstance(action_space, spaces.Box):
                np.clip(actions, action_space.low, action_space.high)
            buffer = (
                actions.reshape(-1, 1) if isinstance(action_space, spaces.Discrete) else actions
            )
            return ResponseBatch.trusted_from_fields(
                PolicyResponse,
                {
                    "env_id": None,
                    "env_ids": list(env_ids),
                    "action": actions,
                    "buffer_action": buffer,
                    "value": values.ravel(),
                    "log_prob": log_probs,
                    "episode_start": PerEnv([False] * n_envs),
                },
            )

    elif impl == "rlightning":
        from rlightning_sb3 import SB3PolicyAdapter

        method = getattr(SB3PolicyAdapter(model), kind)

        def call(o: Any) -> object:
            return method(o, env_ids=env_ids)

    else:
        raise ValueError(f"no item-6 implementation {impl!r} for {kind!r}")
    return call


def _sb3_bench(case: str, impl: str) -> Bench:
    kind, n_part = case.split(".", 1)[1].split("_n")
    n_envs = int(n_part)
    if impl == "rlightning":
        wanted = f"SB3PolicyAdapter.{kind}"
        _attrs, reason = _import_attrs("rlightning_sb3", (wanted,))
        if reason is not None:
            return skipped(case, impl, reason)
    try:
        call = sb3_call(kind, impl, n_envs)
        obs = sb3_observation(n_envs)
    except ImportError as exc:
        return skipped(case, impl, f"stable-baselines3 is not importable here ({exc})")

    def run(items: list[Any]) -> None:
        for o in items:
            call(o)

    return Bench(case=case, impl=impl, prepare=lambda n: [obs] * n, run=run, max_n=5_000)


# ---------------------------------------------------------------------------------------- item 7
def make_many_agent_env(n_agents: int) -> Any:
    """A minimal PettingZoo ``ParallelEnv`` with ``n_agents`` agents and ``Discrete(5)`` actions.

    Args:
        n_agents: Number of agents, ids ``"agent_0"`` ... in order.

    Returns:
        The env, reset (``env.agents`` lists every agent), each action space seeded.
    """
    from gymnasium import spaces

    from pettingzoo import ParallelEnv

    class ManyAgentsEnv(ParallelEnv):  # type: ignore[misc]
        metadata: ClassVar[dict[str, Any]] = {"name": "many_agents_v0", "render_modes": []}

        def __init__(self, n: int) -> None:
            self.possible_agents = [f"agent_{i}" for i in range(n)]
            self._obs = {a: spaces.Box(-1.0, 1.0, (2,), np.float32) for a in self.possible_agents}
            self._act = {a: spaces.Discrete(5, seed=i) for i, a in enumerate(self.possible_agents)}

        def observation_space(self, agent: str) -> Any:
            return self._obs[agent]

        def action_space(self, agent: str) -> Any:
            return self._act[agent]

        def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
            self.agents = list(self.possible_agents)
            obs = {a: np.zeros(2, np.float32) for a in self.agents}
            return obs, {a: {} for a in self.agents}

        def step(self, actions: dict[str, Any]) -> Any:
            zeros = dict.fromkeys(self.agents, 0.0)
            falses = dict.fromkeys(self.agents, False)
            obs = {a: np.zeros(2, np.float32) for a in self.agents}
            return obs, zeros, falses, dict(falses), {a: {} for a in self.agents}

    env = ManyAgentsEnv(n_agents)
    env.reset(seed=0)
    return env


def _pz_bench(case: str, impl: str) -> Bench:
    n_agents = int(case.rsplit("_n", 1)[1])
    run: Callable[[list[Any]], None]
    if importlib.util.find_spec("pettingzoo") is None:
        return skipped(case, impl, "pettingzoo is not installed in this interpreter")
    if impl == "rlightning":
        attrs, reason = _import_attrs(
            "rlightning_pettingzoo", ("to_parallel_actions", "sample_response")
        )
        if reason is not None:
            return skipped(case, impl, reason)
        to_parallel_actions, sample_response = attrs
        env = make_many_agent_env(n_agents)

        def run(items: list[Any]) -> None:
            for e in items:
                to_parallel_actions(sample_response(e), e)

    else:
        env = make_many_agent_env(n_agents)

        def run(items: list[Any]) -> None:
            for e in items:
                space = e.action_space
                {a: space(a).sample() for a in e.agents}

    return Bench(
        case=case,
        impl=impl,
        prepare=lambda n: [env] * n,
        run=run,
        max_n=100_000,
        per_divisor=n_agents,
    )


def adapter_benches(case: str, impls: tuple[str, ...]) -> list[Bench]:
    """Benches of one case of items 6-7 (a skipped row where the adapter is not importable).

    Args:
        case: A case id from :data:`CASES`.
        impls: ``("floor", "rlightning")`` or a subset.

    Returns:
        One bench per implementation.
    """
    make = _sb3_bench if case.startswith("6.") else _pz_bench
    return [make(case, impl) for impl in impls]
