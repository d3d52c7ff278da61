"""rlightning-sb3: Stable-Baselines3 models answering with one PolicyResponse per env.

Public names:

* :class:`SB3PolicyAdapter` -- ``predict`` (wraps ``model.predict``), ``act`` (SB3's rollout
  semantics: actions, buffer actions, values, log-probabilities, LSTM states, action masks),
  ``predict_values`` (the critic's values, as SB3's truncation bootstrap) and ``env_actions``
  (responses back to a ``VecEnv.step`` array);
* :func:`observation_space_mismatch` -- why observations of one space cannot go to a model of
  another, by SB3's ``obs_to_tensor`` rules;
* :func:`start_training`, :func:`add_rollout_step`, :func:`finish_rollout`,
  :func:`add_replay_step`, :func:`finish_training`, :func:`check_training` -- fill SB3's
  rollout and replay buffers from responses, exactly as SB3's ``collect_rollouts`` does,
  calling SB3 callbacks and dumping SB3's logger where ``learn()`` does (:class:`StopTraining`
  when a callback stops the loop; ``check_training`` applies their refusals before any step);
* :class:`ActingReplica`, :class:`ActingState`, :func:`acting_state`, :func:`policy_weights`,
  :func:`rollout_steps`, :func:`set_acting_seed`, :func:`training_run_id`,
  :func:`training_reset_run_id` -- the acting side
  of ``collect_rollouts`` for a replica of the model that acts away from its learner
  (:mod:`rlightning_sb3.acting`);
* :func:`transposes_images`, :class:`ImageTranspose`, :func:`image_transpose` -- SB3's
  automatic ``VecTransposeImage`` (channel-last images), for envs stepped outside the model's
  VecEnv, and :func:`unapplied_wrappers` -- the model's VecEnv wrappers such envs do not apply
  (:mod:`rlightning_sb3.vec_env`);
* :data:`SB3_SUPPORTED` -- the supported stable-baselines3 range, checked at import.

Importing this package with a stable-baselines3 older than :data:`SB3_SUPPORTED` raises
ImportError; one newer than :data:`SB3_HIGHEST_TESTED` imports with an
:class:`UntestedVersionWarning` naming the tested range.
"""

from importlib.metadata import PackageNotFoundError, version

import stable_baselines3 as _sb3

from rlightning_sb3._versions import (
    SB3_CONTRIB_SUPPORTED,
    SB3_HIGHEST_TESTED,
    SB3_SUPPORTED,
    UntestedVersionWarning,
    check_version,
    installed_version,
)

check_version(
    "stable-baselines3",
    installed_version("stable-baselines3", getattr(_sb3, "__version__", None)),
    SB3_SUPPORTED,
)

from rlightning_sb3._noise import bind_env_ids  # noqa: E402
from rlightning_sb3._spaces import observation_space_mismatch  # noqa: E402
from rlightning_sb3.acting import (  # noqa: E402
    ActingReplica,
    ActingState,
    acting_state,
    policy_weights,
    rollout_steps,
    set_acting_seed,
    training_reset_run_id,
    training_run_id,
)
from rlightning_sb3.adapter import SB3PolicyAdapter  # noqa: E402  # only after the version check
from rlightning_sb3.buffers import (  # noqa: E402
    StopTraining,
    add_replay_step,
    add_rollout_step,
    check_training,
    finish_rollout,
    finish_training,
    start_training,
)
from rlightning_sb3.vec_env import (  # noqa: E402
    ImageTranspose,
    image_transpose,
    transposes_images,
    unapplied_wrappers,
)

try:
    __version__ = version("rlightning-sb3")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "SB3_CONTRIB_SUPPORTED",
    "SB3_HIGHEST_TESTED",
    "SB3_SUPPORTED",
    "ActingReplica",
    "ActingState",
    "ImageTranspose",
    "SB3PolicyAdapter",
    "StopTraining",
    "UntestedVersionWarning",
    "__version__",
    "acting_state",
    "add_replay_step",
    "add_rollout_step",
    "bind_env_ids",
    "check_training",
    "check_version",
    "finish_rollout",
    "finish_training",
    "image_transpose",
    "observation_space_mismatch",
    "policy_weights",
    "rollout_steps",
    "set_acting_seed",
    "start_training",
    "training_reset_run_id",
    "training_run_id",
    "transposes_images",
    "unapplied_wrappers",
]
