"""The rule table and the one error builder of :mod:`rlightning.rules` (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

from typing import TypeVar

from rlightning._tree import tree_repr

_E = TypeVar("_E", bound=Exception)

_NO_LEGAL_FIX = (
    "an agent that cannot act must not be asked to act (no policy distribution exists over an "
    "empty set of actions, and a made-up action with log_prob 0.0 would poison PPO's ratios); "
    "ask only agents with a legal action (in an AEC env only env.agent_selection acts)"
)

#: Every rule: id -> what it requires and the upstream rule it follows.
RULES: dict[str, str] = {
    "response-type": (
        "check_policy_response takes a PolicyResponse that is not multi-agent; "
        "check_multi_agent_policy_response takes a MultiAgentPolicyResponse"
    ),
    "env-id": (
        "env_id is a str (str or a subclass, judged by type(): an object posing as str is "
        "none), or None for a response not routed to an env (rlightning API page: "
        "PolicyResponse(env_id, **data)); nothing is converted (3 is refused, never read as "
        "'3'); a per-agent response or a routed answer carries None or its env's very id; a "
        "list of env ids (one per env of a vectorized env or runner, one per row of a batch) "
        "is a sequence of such str, one per env or row, all distinct (an env id routes one "
        "env's answers and carries its state)"
    ),
    "has-action": "the response has an 'action' field, what the env's step() takes",
    "action-in-space": (
        "each action is an element of its action space, exactly as gymnasium's "
        "Space.contains decides (dtype, shape, bounds); PettingZoo's AssertOutOfBoundsWrapper "
        "and api_test apply the same test; a torch tensor is never an element (envs take numpy)"
    ),
    "action-mask": (
        "an action_mask holds only 0 and 1 (1 = legal, as PettingZoo and sb3-contrib read it) "
        "in a bool, integer or float dtype, in one of two layouts: gymnasium's "
        "Space.sample(mask=...) layout, shape (n,) for Discrete(n) and a tuple of (nvec[i],) "
        "masks for a 1-D MultiDiscrete; or sb3-contrib's flat layout (MaskableRolloutBuffer), "
        "(n,) for Discrete(n), (sum(nvec),) for MultiDiscrete and (2 * n,) for MultiBinary(n) "
        "(entries 2i and 2i + 1 allow element i to be 0 and 1; gymnasium has no legal-action "
        "mask for MultiBinary, so both layouts are this one); the action is one the mask allows"
    ),
    "no-legal-action": (
        "a mask that allows no action (for MultiDiscrete, no value in some dimension; for "
        "MultiBinary, neither 0 nor 1 for some element) is refused as the mask of an env or "
        "agent that must act: " + _NO_LEGAL_FIX + "; in a multi-agent response such an agent "
        "waits: its action is None and it has no policy outputs (no value, log_prob or "
        "buffer_action), as PettingZoo passes None for an agent that cannot act and "
        "turn_based_aec_to_parallel reads only agent_selection's action"
    ),
    "scalar-field": (
        "value and log_prob, when present, each hold one real number (a Python or numpy "
        "number, or an array/tensor of one element, as SB3's collect_rollouts gives per env); "
        "value is finite and log_prob is not NaN"
    ),
    "buffer-action": (
        "buffer_action, when present for a Box action space, has the space's shape, as SB3's "
        "collect_rollouts stores the policy's raw action"
    ),
    "timestamp": (
        "the timing stamps ts_env_sent_ns, ts_policy_recv_ns, ts_infer_start_ns and "
        "ts_policy_sent_ns (STAMP_FIELDS; the second and third are rlightning_ray's), when "
        "present and not None, are integers (a Python int or numpy integer, not a bool) of "
        "nanoseconds since the epoch (time.time_ns()), not negative and at most 2**64 - 1 "
        "(they fit in 64 bits)"
    ),
    "boolean": (
        "a flag (dones, episode_start, a mask entry) is a bool, or a number that is exactly 0 "
        "or 1 (SB3's dones may be 0/1 floats); 0.5, 2, NaN, strings and objects are refused, "
        "never read by truthiness"
    ),
    "flag": (
        "a boolean argument that picks a branch (update_model, deterministic, explore, "
        "use_masking, pipeline) is a bool: a Python bool or a numpy.bool_ (what numpy "
        "comparisons return); an int 0/1, a str ('False' is truthy), None and other objects "
        "are refused before anything is stepped or mutated, never read by truthiness"
    ),
    "count": (
        "a count given as an argument (runners, envs per runner, max_batch rows, max_wait_us "
        "microseconds) is an int (a Python int or numpy integer), never a bool, a float (4.0 "
        "is refused, not truncated) or a str, and at least its minimum; an amount Ray takes "
        "fractional (num_cpus, num_gpus) is a real number, not a bool, NaN or infinite"
    ),
    "known-agent": "every agent with an action has an action space",
    "live-agents": (
        "every live agent has an action (PettingZoo parallel API: step() takes an action for "
        "each agent in env.agents); an agent whose mask allows no action waits, with the "
        "action None (no-legal-action; PettingZoo's turn_based_aec_to_parallel reads only the "
        "action of agent_selection)"
    ),
    "no-inactive-action": (
        "no action for an agent that is not live (PettingZoo parallel API: an agent removed "
        "from env.agents, terminated or truncated, takes no further actions)"
    ),
    "per-agent-keys": (
        "a dict field keyed by agent ids is keyed by exactly the agents of action "
        "(rlightning: a field is per-agent when its keys equal action's keys; agent ids are "
        "action's keys and, where known, the env's other agents): a non-empty dict of agent "
        "ids that is not would be read as shared, handing every agent the whole dict"
    ),
    "framework-version": (
        "the framework an adapter drives (stable-baselines3, sb3-contrib, pettingzoo, ray) "
        "is a PEP 440 version its declared range admits, upper cap aside: older than the "
        "lowest release, a pre-release of it or an excluded release is refused (ImportError); "
        "one newer than the highest tested release, a new major beyond the cap included, "
        "imports with an UntestedVersionWarning; a local build counts as its release"
    ),
}


# ---------------------------------------------------------------------------- errors
def describe(value: object) -> str:
    """Return a bounded one-line repr of ``value``, the ``got ...`` part of every rule's error.

    Arrays and CPU tensors of at most 8 elements show their values; larger ones, and tensors on
    other devices, only shape, dtype and device (a repr never syncs a GPU or prints megabytes).
    Containers show their first 8 items; a container inside itself shows as ``[...]``/``{...}``.

    Args:
        value: Anything: a leaf or nested dicts, lists, tuples and namedtuples.

    Returns:
        The summary, one line.

    Examples:
        >>> import numpy as np
        >>> describe(np.zeros(2, np.int8))
        'array([0, 0], dtype=int8)'
        >>> describe(np.zeros((100, 3)))
        'array(shape=(100, 3), dtype=float64)'
    """
    return tree_repr(value)


def rule_error(
    error_type: type[_E],
    rule: str,
    subject: str,
    problem: str,
    value: object,
    *,
    expected: str | None = None,
    fix: str | None = None,
) -> _E:
    """Build (not raise) the error of a broken rule, in the one message format of rlightning.

    The message is ``"<subject> <problem>; got <describe(value)>[; expected <expected>]
    [; fix: <fix>] [rule <rule>]"``: what is wrong, the value given (bounded), what was
    expected and how to fix it when that is not obvious, and the rule's id.

    Args:
        error_type: ``TypeError`` for the wrong kind of value, ``ValueError`` for a bad value.
        rule: A key of :data:`RULES`.
        subject: What is wrong, named as the caller sees it (``"response.action"``,
            ``"action mask of agent 'a'"``).
        problem: What is wrong with it, without a trailing period.
        value: The value given; shown with :func:`describe`.
        expected: What was expected, when ``problem`` does not say it.
        fix: How to fix it, when that is not obvious.

    Returns:
        The exception, for the caller to ``raise`` (so tracebacks point at the caller).

    Raises:
        ValueError: ``rule`` is not a rule id (a bug in the caller).

    Examples:
        >>> rule_error(ValueError, "timestamp", "ts_env_sent_ns", "must not be negative", -5)
        ValueError('ts_env_sent_ns must not be negative; got -5 [rule timestamp]')
    """
    return error_type(rule_message(rule, subject, problem, value, expected=expected, fix=fix))


def rule_message(
    rule: str,
    subject: str,
    problem: str,
    value: object,
    *,
    expected: str | None = None,
    fix: str | None = None,
) -> str:
    """Return the text of a broken rule's error or warning (the format of :func:`rule_error`).

    Args:
        rule: A key of :data:`RULES`.
        subject: What is wrong, named as the caller sees it.
        problem: What is wrong with it, without a trailing period.
        value: The value given; shown with :func:`describe`.
        expected: What was expected, when ``problem`` does not say it.
        fix: How to fix it, when that is not obvious.

    Returns:
        ``"<subject> <problem>; got <describe(value)>[; expected ...][; fix: ...] [rule <rule>]"``.

    Raises:
        ValueError: ``rule`` is not a rule id (a bug in the caller).

    Examples:
        >>> rule_message("timestamp", "ts_env_sent_ns", "must not be negative", -5)
        'ts_env_sent_ns must not be negative; got -5 [rule timestamp]'
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule id {rule!r}; the ids are {sorted(RULES)}")
    message = f"{subject} {problem}; got {describe(value)}"
    if expected is not None:
        message += f"; expected {expected}"
    if fix is not None:
        message += f"; fix: {fix}"
    return f"{message} [rule {rule}]"
