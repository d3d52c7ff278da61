"""PettingZoo on Ray: runners hosting parallel envs, answered by one shared SB3 policy.

Needs the ``[pettingzoo]`` extra (``pip install "rlightning-ray[pettingzoo]"``). PettingZoo's
semantics stay in ``rlightning_pettingzoo``: the server answers each env through
:meth:`rlightning_pettingzoo.SharedPolicyAdapter.act` (one batched SB3 call for that env's live
agents, agents that wait get a None action, as the adapter documents) and the runner steps with
:func:`rlightning_pettingzoo.to_parallel_actions`, which checks each action against
``env.agents`` and the action spaces. Agents that die leave ``env.agents`` and are not asked
again; agents that join are asked from their first observation on; an env whose agents are all
gone is reset at once (its last step's rewards, terminations, infos and observations are in
the fragment). :func:`collect_shared_rollout` fills a shared model's ``RolloutBuffer`` from the
runners, one row per agent and env step, through ``rlightning_sb3``'s buffer helpers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.rules import check_stamp
from rlightning_ray.checks import check_answer
from rlightning_ray.collector import Collector
from rlightning_ray.latency import HOPS
from rlightning_ray.runner import checked_env_ids

try:
    import torch
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
    from stable_baselines3.common.utils import set_random_seed

    from pettingzoo import ParallelEnv
    from rlightning_pettingzoo import SharedPolicyAdapter, to_parallel_actions
    from rlightning_sb3 import add_rollout_step, finish_rollout
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rlightning_ray.pettingzoo needs the [pettingzoo] extra: "
        f'pip install "rlightning-ray[pettingzoo]" ({exc})'
    ) from exc

__all__ = [
    "LiveAgents",
    "ParallelEnvRunner",
    "ParallelFragment",
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
    """

    def __init__(
        self,
        make_model: Callable[[], BaseAlgorithm],
        make_env: Callable[[], Any],
        *,
        seed: int | None = None,
        deterministic: bool = False,
    ) -> None:
        self.model = make_model()
        self.adapter = SharedPolicyAdapter(self.model)
        self.template = make_env()
        self.template.reset(seed=0)
        self.deterministic = deterministic
        if seed is not None:
            set_random_seed(seed)

    def __call__(
        self,
        observation: list[dict[Any, Any]],
        env_ids: list[str],
        episode_start: np.ndarray,
        ts_env_sent_ns: list[int],
    ) -> list[MultiAgentPolicyResponse]:
        """One response per env: ``observation[i]`` holds env ``i``'s live agents' observations."""
        return [
            self.adapter.act(
                LiveAgents(self.template, list(obs)),
                obs,
                env_id,
                deterministic=self.deterministic,
            )
            for obs, env_id in zip(observation, env_ids, strict=True)
        ]

    def set_weights(self, weights: Any) -> None:
        """Load a ``policy.state_dict()`` into the shared model's policy."""
        self.model.policy.load_state_dict(weights)


@dataclass
class ParallelFragment:
    """The finished steps of one :class:`ParallelEnvRunner` ``sample`` call, per step and env.

    Attributes:
        runner_id: The runner.
        env_ids: Its env ids.
        observations: ``n_steps`` lists of ``k`` ``{agent: observation}`` dicts (what was asked).
        answers: ``n_steps`` lists of ``k`` :class:`~rlightning.MultiAgentPolicyResponse`.
        rewards: ``n_steps`` lists of ``k`` ``{agent: reward}`` dicts, as ``env.step`` gave them.
        terminations: Same layout, ``{agent: bool}``.
        truncations: Same layout, ``{agent: bool}``.
        infos: Same layout, ``{agent: info}``.
        resets: ``(n_steps, k)`` bool: the env had no agent left and was reset after the step.
        episode_starts: ``(n_steps, k)`` bool: the env's observation of that step started an
            episode (the previous step's ``resets``; True at a runner's first step), as sent to
            the server.
        final_observations: ``n_steps`` lists of ``k``: the ``{agent: observation}`` that
            ``env.step`` returned where the env was then reset (the episode's last
            observations, which the reset replaced), else None.
        last_observations: The ``k`` ``{agent: observation}`` dicts of the live agents after
            the last step (the next call's first observations).
        last_resets: ``(k,)`` bool, the last step's ``resets`` (the next step's episode starts).
        hops_ns: ``(n_steps, 4)`` int64 ns per step (:data:`rlightning_ray.HOPS`).
        restarted: True when the runner was restarted by Ray (fresh episodes).
    """

    runner_id: str
    env_ids: list[str]
    observations: list[list[dict[Any, Any]]] = field(default_factory=list)
    answers: list[list[MultiAgentPolicyResponse]] = field(default_factory=list)
    rewards: list[list[dict[Any, Any]]] = field(default_factory=list)
    terminations: list[list[dict[Any, Any]]] = field(default_factory=list)
    truncations: list[list[dict[Any, Any]]] = field(default_factory=list)
    infos: list[list[dict[Any, Any]]] = field(default_factory=list)
    resets: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    episode_starts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    final_observations: list[list[dict[Any, Any] | None]] = field(default_factory=list)
    last_observations: list[dict[Any, Any]] = field(default_factory=list)
    last_resets: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    hops_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, len(HOPS)), np.int64))
    restarted: bool = False


class ParallelEnvRunner:
    """``k`` PettingZoo parallel envs in one process, stepped with a server's answers.

    Same constructor and methods as :class:`~rlightning_ray.EnvRunner` (start it with
    ``start_runners(..., runner_class=ParallelEnvRunner)``); ``sample`` returns a
    :class:`ParallelFragment`.
    """

    def __init__(
        self,
        runner_id: str,
        env_fns: Sequence[Callable[[], Any]],
        server: Any,
        *,
        env_ids: Sequence[str] | None = None,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        import ray

        self.runner_id = runner_id
        self.env_ids = checked_env_ids(runner_id, env_fns, env_ids, seeds)
        self._server = server
        self._envs = [fn() for fn in env_fns]
        self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        first = [None] * len(self._envs) if seeds is None or self.restarted else list(seeds)
        self._obs = [dict(env.reset(seed=s)[0]) for env, s in zip(self._envs, first, strict=True)]
        self._starts = np.ones(len(self._envs), dtype=bool)

    def describe(self) -> dict[str, Any]:
        """``runner_id``, ``env_ids``, Ray ``node_id``, ``restarted`` and the ``server`` handle."""
        import ray

        context = ray.get_runtime_context()
        return {
            "runner_id": self.runner_id,
            "env_ids": self.env_ids,
            "node_id": context.get_node_id(),
            "restarted": bool(context.was_current_actor_reconstructed),
            "server": self._server,
        }

    def sample(
        self, n_steps: int, *, current_version: int | None = None, max_staleness: int = 0
    ) -> ParallelFragment:
        """Step every env ``n_steps`` times (see :meth:`rlightning_ray.EnvRunner.sample`).

        Each step sends the live agents' observations (``{agent: obs}`` per env, agents of
        ``env.agents`` only), checks the answers (:func:`~rlightning_ray.check_answer`), and steps
        env ``i`` with ``to_parallel_actions(answers[i], env)``.

        Raises:
            ValueError: ``n_steps`` is not positive, an answer breaks a routing rule, or an
                action is refused by ``to_parallel_actions`` (it names the agent).
        """
        import ray

        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
            raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
        k = len(self._envs)
        frag = ParallelFragment(self.runner_id, list(self.env_ids), restarted=self.restarted)
        frag.resets = np.zeros((n_steps, k), dtype=bool)
        frag.episode_starts = np.zeros((n_steps, k), dtype=bool)
        frag.hops_ns = np.zeros((n_steps, len(HOPS)), dtype=np.int64)
        for t in range(n_steps):
            asked = [
                {a: obs[a] for a in env.agents}
                for env, obs in zip(self._envs, self._obs, strict=True)
            ]
            frag.episode_starts[t] = self._starts
            sent = time.time_ns()
            answers = ray.get(
                self._server.act.remote(self.runner_id, asked, self.env_ids, self._starts, sent)
            )
            received = time.time_ns()
            check_answer(
                answers,
                self.env_ids,
                runner_id=self.runner_id,
                current_version=current_version,
                max_staleness=max_staleness,
            )
            first = answers[0]
            if check_stamp("ts_env_sent_ns", first.ts_env_sent_ns, "answer.") != sent:
                raise ValueError(
                    f"runner {self.runner_id!r} sent ts_env_sent_ns={sent} but got "
                    f"{first.ts_env_sent_ns}: the stamp did not cross intact"
                )
            recv = check_stamp("ts_policy_recv_ns", first.ts_policy_recv_ns, "answer.")
            start = check_stamp("ts_infer_start_ns", first.ts_infer_start_ns, "answer.")
            done = check_stamp("ts_policy_sent_ns", first.ts_policy_sent_ns, "answer.")
            frag.hops_ns[t] = [recv - sent, start - recv, done - start, received - done]
            steps = [
                env.step(to_parallel_actions(a, env))
                for env, a in zip(self._envs, answers, strict=True)
            ]
            frag.observations.append(asked)
            frag.answers.append(list(answers))
            frag.rewards.append([dict(s[1]) for s in steps])
            frag.terminations.append([dict(s[2]) for s in steps])
            frag.truncations.append([dict(s[3]) for s in steps])
            frag.infos.append([dict(s[4]) for s in steps])
            finals: list[dict[Any, Any] | None] = [None] * k
            for i, (obs, *_) in enumerate(steps):
                if not self._envs[i].agents:
                    finals[i] = dict(obs)
                    obs, _ = self._envs[i].reset()
                    frag.resets[t, i] = True
                self._obs[i] = dict(obs)
            frag.final_observations.append(finals)
            self._starts = frag.resets[t].copy()
        frag.last_observations = [
            {a: obs[a] for a in env.agents} for env, obs in zip(self._envs, self._obs, strict=True)
        ]
        frag.last_resets = self._starts.copy()
        self.restarted = False
        return frag


def collect_shared_rollout(
    model: OnPolicyAlgorithm,
    collector: Collector,
    agents: Sequence[Any],
    *,
    current_version: int | None = None,
) -> list[ParallelFragment]:
    """Fill a shared model's ``RolloutBuffer`` from :class:`ParallelEnvRunner` s, one row per agent.

    Parameter sharing as SuperSuit's ``pettingzoo_env_to_vec_env_v1`` lays it out: every agent
    of every env is one slot of the model's VecEnv, slot ``e * len(agents) + j`` being agent
    ``agents[j]`` of env ``e`` (envs in :attr:`Collector.env_ids` order). Asks every runner for
    ``model.n_steps`` steps, then adds each step with :func:`rlightning_sb3.add_rollout_step`
    (observation, ``buffer_action``, ``value`` and ``log_prob`` of each agent's
    :meth:`~rlightning_pettingzoo.SharedPolicyAdapter.act` row, reward, the env's episode start
    for all its agents) and finishes with :func:`rlightning_sb3.finish_rollout`, as
    ``OnPolicyAlgorithm.collect_rollouts``. A slot is done when its env's episode ended (no
    agent left; the runner then reset it); its info holds the agent's last observation as
    ``terminal_observation`` and ``TimeLimit.truncated = truncated and not terminated``, as
    SB3's ``DummyVecEnv`` sets them, so truncated episodes are bootstrapped with the critic's
    value of that observation. Run the server with ``SharedBatchPolicy(...,
    deterministic=False)`` (the default) so that the actions are sampled, as in training.

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
    fragments: list[Any] = collector.sample(model.n_steps, current_version)
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
    for t in range(model.n_steps):
        observations: list[Any] = []
        responses: list[PolicyResponse] = []
        rewards: list[float] = []
        dones: list[bool] = []
        infos: list[dict[str, Any]] = []
        for frag in fragments:
            for i, env_id in enumerate(frag.env_ids):
                asked = frag.observations[t][i]
                answer = frag.answers[t][i]
                final = frag.final_observations[t][i]
                done = bool(frag.resets[t, i])
                for agent in agents:
                    observations.append(np.asarray(asked[agent]))
                    responses.append(
                        PolicyResponse(
                            f"{env_id}/{agent}",
                            action=answer.action[agent],
                            buffer_action=answer.buffer_action[agent],
                            # 0-d tensors, as SB3PolicyAdapter.act answers them
                            value=torch.as_tensor(answer.value[agent]),
                            log_prob=torch.as_tensor(answer.log_prob[agent]),
                            episode_start=bool(frag.episode_starts[t, i]),
                        )
                    )
                    rewards.append(float(frag.rewards[t][i][agent]))
                    dones.append(done)
                    info: dict[str, Any] = {}
                    if done and final is not None and agent in final:
                        info["terminal_observation"] = np.asarray(final[agent])
                        info["TimeLimit.truncated"] = bool(
                            frag.truncations[t][i].get(agent, False)
                            and not frag.terminations[t][i].get(agent, False)
                        )
                    infos.append(info)
        add_rollout_step(
            model,
            np.stack(observations),
            responses,
            np.asarray(rewards, dtype=np.float32),
            np.asarray(dones, dtype=bool),
            infos,
            env_ids=slots,
        )
    last: list[Any] = []
    last_dones: list[bool] = []
    for frag in fragments:
        for i in range(len(frag.env_ids)):
            last.extend(np.asarray(frag.last_observations[i][agent]) for agent in agents)
            last_dones.extend([bool(frag.last_resets[i])] * len(agents))
    finish_rollout(model, np.stack(last), np.asarray(last_dones, dtype=bool), env_ids=slots)
    return fragments


def _check_agents(observations: dict[Any, Any], agents: list[Any], env_id: str, t: int) -> None:
    """Refuse a step whose live agents are not exactly ``agents`` (a VecEnv slot is fixed)."""
    if set(observations) != set(agents):
        raise ValueError(
            f"env {env_id!r} at step {t} has live agents {list(observations)} but "
            f"collect_shared_rollout needs {agents} at every step (one VecEnv slot per agent: "
            "agents may not leave or join before the episode ends)"
        )
