"""Telling PettingZoo's two env APIs apart, and naming an env in error messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pettingzoo import AECEnv, ParallelEnv
from rlightning.rules import rule_error

__all__ = [
    "describe_env",
    "refuse_done_but_listed",
    "require_aec",
    "require_distinct",
    "require_parallel",
]


def describe_env(env: Any) -> str:
    """A short name for ``env`` in messages, e.g. ``"simple_spread_v3"``.

    PettingZoo envs name themselves in ``metadata["name"]``, but that is only reliable when the
    env's own class (or the instance) holds the ``metadata`` dict. mpe2's envs share one
    class-level dict, inherited from ``SimpleEnv``, and each constructor overwrites its
    ``"name"``, so it names whichever MPE env was created last. An inherited ``metadata`` is
    therefore trusted only when its name without the ``_vN`` suffix is a part of the env class's
    module path (``simple_spread_v3`` for ``mpe2.simple_spread.simple_spread.raw_env``);
    otherwise the class's module and qualified name are used
    (``"mpe2.simple_spread.simple_spread.raw_env"``).

    Args:
        env: A PettingZoo env (wrappers are seen through with ``env.unwrapped``) or any object.

    Returns:
        The name; ``type(env).__name__`` for an object with neither.
    """
    unwrapped = getattr(env, "unwrapped", env)
    metadata = getattr(unwrapped, "metadata", None)
    name = metadata.get("name") if isinstance(metadata, dict) else None
    cls = type(unwrapped)
    if name:
        name = str(name)
        own = getattr(unwrapped, "__dict__", {}).get("metadata", vars(cls).get("metadata"))
        if own is metadata:
            return name
        stem = name.rsplit("_v", 1)[0] if name.rsplit("_v", 1)[-1].isdigit() else name
        if stem in cls.__module__.split("."):
            return name
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def require_parallel(env: Any, caller: str) -> ParallelEnv[Any, Any, Any]:
    """Return ``env`` if it is a PettingZoo ``ParallelEnv``; else a TypeError naming ``caller``."""
    if isinstance(env, ParallelEnv):
        return env
    hint = " (an AEC env: use aec_action())" if isinstance(env, AECEnv) else ""
    raise TypeError(
        f"{caller} needs a PettingZoo ParallelEnv (e.g. simple_spread_v3.parallel_env()), "
        f"got {type(env).__name__}{hint}"
    )


def require_distinct(envs: Sequence[Any], caller: str) -> None:
    """Refuse one env object returned for two copies (SB3's ``DummyVecEnv`` refuses it too).

    Raises:
        ValueError: two of ``envs`` are the same object (names both copies and the env).
    """
    first: dict[int, int] = {}
    for i, env in enumerate(envs):
        j = first.setdefault(id(env), i)
        if j != i:
            raise ValueError(
                f"{caller}: env_fns[{j}] and env_fns[{i}] returned the same env object "
                f"({describe_env(env)}); each copy needs an env of its own, as SB3's "
                "DummyVecEnv requires (e.g. [lambda: make_env()] * n, not [lambda: env] * n)"
            )


def refuse_done_but_listed(env: Any, i: int, agent: Any, terminated: bool) -> None:
    """Refuse an agent that ``step()`` ended but left in ``env.agents`` (PettingZoo's contract).

    PettingZoo's parallel API removes an agent from ``env.agents`` at the step that reports it
    terminated or truncated (``pettingzoo.test.parallel_api_test`` asserts ``set(env.agents)``
    equals the previous live agents minus the done ones). An agent still listed would be acted
    for at the next step, after its episode's end, and its transition made up: refused.

    Args:
        env: The parallel env copy, just stepped.
        i: The copy's index (for the message).
        agent: The agent that ``step()`` reported terminated or truncated.
        terminated: Whether it was terminated (else truncated), for the message.

    Raises:
        ValueError: always, naming the agent, the env, the copy and the flag.
    """
    flag = "terminated" if terminated else "truncated"
    raise ValueError(
        f"agent {agent!r} of {describe_env(env)} (copy {i}) was reported {flag} by step() but "
        "is still in env.agents after it; PettingZoo removes a done agent from env.agents at "
        "that step (pettingzoo.test.parallel_api_test checks it), else the next step would act "
        "for a dead agent and make up its transition: remove it in the env's step()"
    )


def require_aec(env: Any, caller: str) -> AECEnv[Any, Any, Any]:
    """Return ``env`` if it is a PettingZoo ``AECEnv``; else a TypeError naming ``caller``."""
    if isinstance(env, AECEnv):
        return env
    hint = " (a parallel env: use to_parallel_actions())" if isinstance(env, ParallelEnv) else ""
    raise TypeError(
        f"{caller} needs a PettingZoo AECEnv (e.g. tictactoe_v3.env()), "
        f"got {type(env).__name__}{hint}"
    )


def is_aec(env: Any) -> bool:
    """True for a PettingZoo ``AECEnv`` (wrapped or not), False for a ``ParallelEnv``.

    Raises:
        TypeError: ``env`` is neither.
    """
    if isinstance(env, AECEnv):
        return True
    if isinstance(env, ParallelEnv):
        return False
    raise TypeError(f"env must be a PettingZoo AECEnv or ParallelEnv, got {type(env).__name__}")


def aec_acting_agent(env: AECEnv[Any, Any, Any]) -> Any | None:
    """The agent that acts now in an AEC env: ``env.agent_selection``, or None when it is done.

    Follows PettingZoo's AEC rules: a terminated or truncated agent's step takes ``None``
    (``AECEnv._was_dead_step``) and so acts with no policy (None is returned); once every agent
    has left, ``env.agents`` is empty, ``agent_iter()`` stops, and ``env.agent_selection`` is a
    stale name of a removed agent (the game is over until ``reset()``).

    Args:
        env: A PettingZoo ``AECEnv`` after ``reset``.

    Returns:
        ``env.agent_selection`` when it is live and neither terminated nor truncated, else None.

    Raises:
        ValueError: the game is over (``env.agents`` is empty), or ``env.agent_selection`` is not
            in ``env.agents``; the message names the env and the agent and says to call
            ``reset()``.
    """
    agent = env.agent_selection
    terminations = env.terminations
    if agent in terminations:  # keyed by env.agents (api_test checks it): live, the fast path
        if terminations[agent] or env.truncations.get(agent, False):
            return None
        return agent
    agents = env.agents  # a wrapper's attribute read costs ~1 us: only off the fast path
    if agent not in agents:
        if not agents:
            raise rule_error(
                ValueError,
                "live-agents",
                f"{describe_env(env)}: env.agent_selection",
                "names a removed agent: the game is over (env.agents is empty: every agent has "
                "left), so no agent acts",
                agent,
                fix="call env.reset() before the next step (PettingZoo AEC API: agent_iter() "
                "stops when env.agents is empty)",
            )
        raise rule_error(
            ValueError,
            "live-agents",
            f"{describe_env(env)}: env.agent_selection",
            f"is not in env.agents {agents}, so it cannot act",
            agent,
            fix="call env.reset() (PettingZoo AEC API: only agents in env.agents are selected)",
        )
    return None if aec_agent_is_done(env, agent) else agent


def aec_agent_is_done(env: AECEnv[Any, Any, Any], agent: Any) -> bool:
    """Whether ``agent`` of an AEC env is terminated or truncated (so it must step ``None``)."""
    return bool(env.terminations.get(agent, False) or env.truncations.get(agent, False))
