"""SB3 callbacks, logger dumps and the progress bar in the response-driven loop, against learn().

Each test trains one model with SB3's ``learn(callback=...)`` and a twin (same seed) with the
adapter loop (``start_training(callback=...)``, ``act``, the buffer helpers, ``finish_training``),
and compares what the callbacks saw and what the logger wrote. Everything is computed the same way
on both sides (same batched forward passes, same RNG), so values are compared exactly; only the
wall-clock entries ``time/fps`` and ``time/time_elapsed`` are compared by key.
"""

from __future__ import annotations

import copy
import csv
import importlib.util
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO, RecurrentPPO
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    ProgressBarCallback,
    StopTrainingOnRewardThreshold,
)
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger, configure
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from rlightning_sb3 import (
    SB3PolicyAdapter,
    StopTraining,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    finish_training,
    start_training,
)

pytestmark = pytest.mark.torch

#: Loop temporaries SB3's collect_rollouts leaves in locals() (the bootstrap and episode loops'
#: variables, left from the previous step); the helpers do not reproduce them.
LOOP_TEMPORARIES = {"idx", "done", "done_", "kwargs", "terminal_obs", "terminal_value"}
#: Wall-clock logger entries: their keys are compared, not their values.
WALL_CLOCK = {"time/fps", "time/time_elapsed"}


class MemoryWriter(KVWriter):
    """An SB3 logger output that keeps every dump in memory."""

    def __init__(self) -> None:
        self.dumps: list[dict[str, Any]] = []

    def write(
        self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0
    ) -> None:
        self.dumps.append({**key_values, "_step": step})

    def close(self) -> None:
        pass


class Recorder(BaseCallback):
    """Counts every hook and records what SB3 gives it at each step."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.start_keys: set[str] = set()
        self.step_keys: list[set[str]] = []
        self.end_keys: list[set[str]] = []
        self.steps: list[dict[str, Any]] = []

    def _on_training_start(self) -> None:
        self.calls["on_training_start"] += 1
        self.start_keys = set(self.locals)
        self.total = self.locals["total_timesteps"]

    def _on_rollout_start(self) -> None:
        self.calls["on_rollout_start"] += 1

    def _on_step(self) -> bool:
        self.calls["on_step"] += 1
        self.step_keys.append(set(self.locals) - LOOP_TEMPORARIES)
        watched = ("n_steps", "num_collected_steps", "num_collected_episodes", "actions")
        watched += ("clipped_actions", "buffer_actions", "values", "log_probs", "rewards")
        watched += ("dones", "new_obs")
        record = {k: copy.deepcopy(self.locals[k]) for k in watched if k in self.locals}
        record["num_timesteps"] = self.model.num_timesteps
        record["n_episodes"] = len(self.model.ep_info_buffer or [])
        self.steps.append(record)
        return True

    def _on_rollout_end(self) -> None:
        self.calls["on_rollout_end"] += 1
        self.end_keys.append(set(self.locals) - LOOP_TEMPORARIES)

    def _on_training_end(self) -> None:
        self.calls["on_training_end"] += 1


def _with_memory_logger(model: BaseAlgorithm) -> MemoryWriter:
    writer = MemoryWriter()
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    return writer


def run_loop(
    model: BaseAlgorithm, total: int, callback: Any = None, **start: Any
) -> BaseCallback | None:
    """The adapter loop, shaped as learn(): one rollout per n_steps (on-policy) or train_freq."""
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    assert env is not None
    ids = [f"env-{i}" for i in range(env.num_envs)]
    obs = start_training(model, total, callback=callback, **start)
    starts = np.ones(env.num_envs, dtype=bool)
    masked = isinstance(model, MaskablePPO)
    try:
        while model.num_timesteps < total:
            if isinstance(model, OffPolicyAlgorithm):
                # one rollout: until add_replay_step says train_freq's steps or episodes are
                # collected (an episodic rollout runs past the budget, as in collect_rollouts)
                rollout_steps, ended = 0, False
                while not ended:
                    responses = adapter.act(obs, ids)
                    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
                    ended = add_replay_step(
                        model, obs, responses, new_obs, rewards, dones, infos, env_ids=ids
                    )
                    obs = new_obs
                    rollout_steps += env.num_envs
                if model.num_timesteps > model.learning_starts:
                    # gradient_steps=-1: as many as env steps in the rollout, as learn() does
                    gradient_steps = model.gradient_steps
                    model.train(
                        gradient_steps=rollout_steps if gradient_steps < 0 else gradient_steps,
                        batch_size=model.batch_size,
                    )
                continue
            for _ in range(model.n_steps):
                masks = get_action_masks(env) if masked else None
                responses = adapter.act(obs, ids, episode_start=starts, action_masks=masks)
                new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
                add_rollout_step(
                    model, obs, responses, rewards, dones, infos,
                    env_ids=ids, new_observation=new_obs,
                )  # fmt: skip
                obs, starts = new_obs, dones
            finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
            model.train()
    except StopTraining:
        pass
    return finish_training(model)


def _assert_same_steps(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    assert len(expected) == len(got)
    for i, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert a.keys() == b.keys(), i
        for key in a:
            x, y = a[key], b[key]
            if isinstance(x, th.Tensor):
                assert isinstance(y, th.Tensor), (i, key)
                assert x.shape == y.shape, (i, key)
                assert th.equal(x, y), (i, key)
            else:
                assert np.asarray(x).shape == np.asarray(y).shape, (i, key)
                np.testing.assert_array_equal(x, y, err_msg=f"step {i}, {key}")


def _assert_same_dumps(expected: MemoryWriter, got: MemoryWriter) -> None:
    assert len(expected.dumps) == len(got.dumps) > 0
    for a, b in zip(expected.dumps, got.dumps, strict=True):
        assert a.keys() == b.keys()
        assert {k: v for k, v in a.items() if k not in WALL_CLOCK} == {
            k: v for k, v in b.items() if k not in WALL_CLOCK
        }


def _assert_same_params(a: BaseAlgorithm, b: BaseAlgorithm) -> None:
    expected, got = a.policy.state_dict(), b.policy.state_dict()
    assert expected.keys() == got.keys()
    assert all(th.equal(expected[k], got[k]) for k in expected)


MODELS: dict[str, tuple[Callable[[], BaseAlgorithm], int, dict[str, Any]]] = {
    "ppo": (
        lambda: PPO(
            "MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0),
            n_steps=32, batch_size=32, n_epochs=2, seed=0, device="cpu",
        ),
        200,
        {},
    ),
    # A2C dumps every 100 rollouts by default (learn's log_interval=100).
    "a2c": (
        lambda: A2C("MlpPolicy", "CartPole-v1", n_steps=5, seed=0, device="cpu"),
        1000,
        {},
    ),
    "dqn": (
        lambda: DQN(
            "MlpPolicy", "CartPole-v1", learning_starts=50, buffer_size=1000, seed=0, device="cpu"
        ),
        300,
        {},
    ),
    "dqn-episodes": (
        lambda: DQN(
            "MlpPolicy", "CartPole-v1", learning_starts=50, buffer_size=1000,
            train_freq=(1, "episode"), gradient_steps=-1, seed=0, device="cpu",
        ),
        300,
        {"log_interval": 2},
    ),
    "sac": (
        lambda: SAC(
            # 50-step episodes: learn() dumps once per finished episode (log_interval=1),
            # and Pendulum's own 200-step episodes would not end within the budget
            "MlpPolicy",
            make_vec_env("Pendulum-v1", n_envs=2, seed=0, env_kwargs={"max_episode_steps": 50}),
            learning_starts=40, buffer_size=1000, batch_size=32, seed=0, device="cpu",
        ),
        160,
        {"log_interval": 1},
    ),
    "recurrent-ppo": (
        lambda: RecurrentPPO(
            "MlpLstmPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), n_steps=16,
            batch_size=16, n_epochs=1, policy_kwargs={"lstm_hidden_size": 8}, seed=0, device="cpu",
        ),
        64,
        {},
    ),
    "maskable-ppo": (
        lambda: MaskablePPO(
            "MlpPolicy", make_vec_env("RLTiny-flat-discrete-v0", n_envs=2, seed=0),
            n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu",
        ),
        64,
        {},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(MODELS))
def test_loop_calls_callbacks_and_logs_as_learn(name: str) -> None:
    """Hooks, their locals (keys and values), logger dumps and parameters equal learn()'s."""
    make, total, kwargs = MODELS[name]
    reference = make()
    reference_log = _with_memory_logger(reference)
    expected = Recorder()
    reference.learn(total, callback=expected, **kwargs)

    model = make()
    log = _with_memory_logger(model)
    got = Recorder()
    returned = run_loop(model, total, callback=got, **kwargs)

    assert isinstance(returned, BaseCallback)
    assert got.calls == expected.calls
    assert expected.calls["on_training_start"] == expected.calls["on_training_end"] == 1
    assert expected.calls["on_rollout_end"] > 1
    assert got.start_keys == expected.start_keys
    assert got.total == expected.total == total
    assert got.step_keys == expected.step_keys
    assert got.end_keys == expected.end_keys
    _assert_same_steps(expected.steps, got.steps)
    _assert_same_dumps(reference_log, log)
    assert model.num_timesteps == reference.num_timesteps
    _assert_same_params(reference, model)


def test_logger_records_what_learn_records() -> None:
    """The episode statistics and counters SB3's dump_logs writes are there after each rollout."""
    make, total, _ = MODELS["ppo"]
    model = make()
    log = _with_memory_logger(model)
    run_loop(model, total)
    assert [d["time/iterations"] for d in log.dumps] == [1, 2, 3, 4]
    assert [d["time/total_timesteps"] for d in log.dumps] == [64, 128, 192, 256]
    for key in ("rollout/ep_rew_mean", "rollout/ep_len_mean", "time/fps", "time/time_elapsed"):
        assert all(key in d for d in log.dumps), key
    assert "train/loss" in log.dumps[-1]  # what model.train() recorded, dumped as learn() does


def _eval_and_checkpoint(tmp_path: Path, threshold: float) -> tuple[CallbackList, EvalCallback]:
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=123)
    evaluation = EvalCallback(
        eval_env,
        callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=threshold),
        eval_freq=48,
        n_eval_episodes=2,
        best_model_save_path=str(tmp_path / "best"),
        log_path=str(tmp_path / "eval"),
    )
    checkpoints = CheckpointCallback(save_freq=32, save_path=str(tmp_path / "checkpoints"))
    return CallbackList([checkpoints, evaluation]), evaluation


def test_eval_checkpoint_and_stop_callbacks_work_unchanged(tmp_path: Path) -> None:
    """EvalCallback, CheckpointCallback and StopTrainingOnRewardThreshold act as under learn()."""
    make, _, _ = MODELS["ppo"]
    reference = make()
    callbacks, evaluation = _eval_and_checkpoint(tmp_path / "learn", threshold=5.0)
    reference.learn(1_000, callback=callbacks)

    model = make()
    callbacks, got = _eval_and_checkpoint(tmp_path / "loop", threshold=5.0)
    run_loop(model, 1_000, callback=callbacks)

    # the first evaluation (step 48 of each env: 96 steps) beats 5 and stops training
    assert reference.num_timesteps == model.num_timesteps == 96
    assert got.n_calls == evaluation.n_calls == 48
    assert got.last_mean_reward == evaluation.last_mean_reward > 5.0
    saved = sorted(p.name for p in (tmp_path / "loop" / "checkpoints").iterdir())
    assert saved == sorted(p.name for p in (tmp_path / "learn" / "checkpoints").iterdir())
    assert saved == ["rl_model_64_steps.zip"]
    assert (tmp_path / "loop" / "best" / "best_model.zip").is_file()
    evaluations = np.load(tmp_path / "loop" / "eval" / "evaluations.npz")
    expected = np.load(tmp_path / "learn" / "eval" / "evaluations.npz")
    np.testing.assert_array_equal(evaluations["timesteps"], expected["timesteps"])
    np.testing.assert_array_equal(evaluations["results"], expected["results"])
    _assert_same_params(reference, model)


class StopAt(BaseCallback):
    """Returns False once the model has made ``steps`` env steps."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        return self.model.num_timesteps < self.steps


def _step_until_stopped(model: BaseAlgorithm, obs: Any, steps: list[tuple[Any, ...]]) -> None:
    """Step a one-env model with the adapter until a callback stops it; ``steps`` gets each."""
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    assert env is not None
    starts = np.ones(1, dtype=bool)
    while True:
        responses = adapter.act(obs, ["e"], episode_start=starts)
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
        steps.append((obs, responses, new_obs, rewards, dones, infos))
        if isinstance(model, OffPolicyAlgorithm):
            add_replay_step(model, obs, responses, new_obs, rewards, dones, infos)
        else:
            add_rollout_step(model, obs, responses, rewards, dones, infos, new_observation=new_obs)
        obs, starts = new_obs, dones


STOPPED: dict[str, Callable[[], BaseAlgorithm]] = {
    "ppo": lambda: PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, device="cpu"),
    "dqn": lambda: DQN(
        "MlpPolicy", "CartPole-v1", learning_starts=10, buffer_size=100, seed=0, device="cpu"
    ),
}


@pytest.mark.parametrize("name", list(STOPPED))
def test_a_stopped_run_stores_what_learn_stores_and_nothing_after(name: str) -> None:
    """on_step returning False raises StopTraining; the step is counted, not stored, as in SB3."""
    reference = STOPPED[name]()
    stopper = StopAt(3)
    reference.learn(100, callback=stopper)
    buffer_of = (lambda m: m.replay_buffer) if name == "dqn" else (lambda m: m.rollout_buffer)

    model = STOPPED[name]()
    obs = start_training(model, 100, callback=StopAt(3))
    steps: list[tuple[Any, ...]] = []
    with pytest.raises(StopTraining, match=re.escape("on_step() returned False")):
        _step_until_stopped(model, obs, steps)
    # collect_rollouts counts the step before on_step and returns before storing it
    assert model.num_timesteps == reference.num_timesteps == 3
    assert buffer_of(model).pos == buffer_of(reference).pos == 2
    with pytest.raises(StopTraining, match="stopped this training run"):
        _step_until_stopped(model, steps[-1][2], steps)  # the next step is refused
    assert model.num_timesteps == 3
    assert buffer_of(model).pos == 2
    finish_training(model)


def test_a_callback_needs_the_new_observation() -> None:
    """A stale locals['new_obs'] would be a wrong value: refused before anything changes."""
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, device="cpu")
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    assert env is not None
    recorder = Recorder()
    obs = start_training(model, 100, callback=recorder)
    responses = adapter.act(obs, ["e"], episode_start=np.ones(1, dtype=bool))
    _, rewards, dones, infos = env.step(adapter.env_actions(responses))
    with pytest.raises(ValueError, match=r"new_observation=new_obs\) is needed"):
        add_rollout_step(model, obs, responses, rewards, dones, infos)
    with pytest.raises(ValueError, match="new_observation must have shape"):
        add_rollout_step(model, obs, responses, rewards, dones, infos, new_observation=obs[0])
    assert model.num_timesteps == 0
    assert model.rollout_buffer.pos == 0
    assert recorder.calls["on_step"] == 0
    finish_training(model)


def test_finish_training_is_called_once_per_start() -> None:
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, device="cpu")
    with pytest.raises(ValueError, match="no training of this PPO to finish"):
        finish_training(model)
    recorder = Recorder()
    start_training(model, 100, callback=recorder)
    assert finish_training(model) is recorder
    assert recorder.calls["on_training_end"] == 1
    with pytest.raises(ValueError, match="finish_training once"):
        finish_training(model)
    start_training(model, 100)
    assert finish_training(model) is None  # no callback: SB3's no-op callback is never called


def test_callbacks_do_not_change_what_is_stored(tmp_path: Path) -> None:
    """A loop with callbacks (evaluation included) fills the buffer as one without them."""
    make, _, _ = MODELS["ppo"]
    # Each model is built right before its run: building one reseeds torch's global RNG
    # (set_random_seed), which the runs' action sampling draws from.
    plain = make()
    run_loop(plain, 96)
    watched = make()
    callbacks, evaluation = _eval_and_checkpoint(tmp_path / "loop", threshold=1e9)  # never stops
    run_loop(watched, 96, callback=callbacks)
    reference = make()
    callbacks, _ = _eval_and_checkpoint(tmp_path / "learn", threshold=1e9)
    reference.learn(96, callback=callbacks)
    assert evaluation.n_calls == 64 and len(evaluation.evaluations_timesteps) == 1  # it evaluated
    for field in ("observations", "actions", "rewards", "values", "log_probs", "advantages"):
        stored = getattr(plain.rollout_buffer, field)
        np.testing.assert_array_equal(stored, getattr(watched.rollout_buffer, field))
        np.testing.assert_array_equal(stored, getattr(reference.rollout_buffer, field))
    _assert_same_params(plain, watched)
    _assert_same_params(plain, reference)


class WatchBar(BaseCallback):
    """Reads SB3's progress bar at each step (it follows this callback in learn's CallbackList)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def _on_step(self) -> bool:
        callbacks = self.locals["callback"].callbacks
        bar = next(c for c in callbacks if isinstance(c, ProgressBarCallback))
        self.seen.append(int(bar.pbar.n))
        return True


def test_progress_bar_advances_with_every_step() -> None:
    """progress_bar=True adds SB3's ProgressBarCallback, which counts every env step."""
    make, _, _ = MODELS["ppo"]
    expected = WatchBar()
    make().learn(128, callback=expected, progress_bar=True)
    got = WatchBar()
    ended = run_loop(make(), 128, callback=got, progress_bar=True)
    assert got.seen == expected.seen == list(range(0, 128, 2))  # 2 envs, read before the bar
    assert isinstance(ended, CallbackList)
    bar = next(c for c in ended.callbacks if isinstance(c, ProgressBarCallback))
    assert bar.pbar.n == 128


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def custom_loop(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``examples/sb3_custom_loop.py`` as a module (it imports ``_cartpole_ppo`` beside it)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(
        "sb3_custom_loop", EXAMPLES / "sb3_custom_loop.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _logged_rows(path: Path) -> list[dict[str, str]]:
    """SB3's progress.csv without the wall-clock columns."""
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in csv.DictReader(f)]


@pytest.mark.parametrize("threshold", [1e9, 10.0], ids=["full-budget", "stopped-at-threshold"])
def test_example_runs_sb3_callbacks_as_learn(
    custom_loop: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: float
) -> None:
    """The example's EvalCallback, CheckpointCallback, StopTrainingOnRewardThreshold and its own
    BaseCallback write what the same callbacks write under learn(); its logger, learn()'s rows."""
    monkeypatch.setattr(custom_loop, "THRESHOLD", threshold)
    total, seed = 768, 0
    reference = custom_loop.make_model(seed)
    reference.set_logger(configure(str(tmp_path / "learn" / "sb3_log"), ["csv"]))
    found, curve = custom_loop.callbacks(reference, seed, 1, 2, tmp_path / "learn")
    reference.learn(total, callback=found)

    model, rows = custom_loop.train(seed, total, 1, 2, out=tmp_path / "loop")

    # 8 envs x 32 steps a rollout; the first evaluation (256 steps) returns 290.5 > 10
    assert model.num_timesteps == reference.num_timesteps == (total if threshold > 1e3 else 256)
    assert rows == curve.rows
    assert len(rows) == model.num_timesteps // 256
    for folder in ("checkpoints", "best_model"):
        saved = sorted(p.name for p in (tmp_path / "loop" / folder).iterdir())
        assert saved == sorted(p.name for p in (tmp_path / "learn" / folder).iterdir())
        assert saved
    evaluations = np.load(tmp_path / "loop" / "eval" / "evaluations.npz")
    expected = np.load(tmp_path / "learn" / "eval" / "evaluations.npz")
    assert evaluations.files == expected.files
    for key in expected.files:
        np.testing.assert_array_equal(evaluations[key], expected[key], err_msg=key)
    logged = _logged_rows(tmp_path / "loop" / "sb3_log" / "progress.csv")
    assert logged == _logged_rows(tmp_path / "learn" / "sb3_log" / "progress.csv")
    # rollout dumps (rollout/ep_rew_mean, ...) after every full rollout; stopped in the first,
    # only EvalCallback's dump of eval/mean_reward
    assert any(row.get("rollout/ep_rew_mean") for row in logged) == (threshold > 1e3)
    assert any(row.get("eval/mean_reward") for row in logged)
    _assert_same_params(reference, model)


def test_a_new_run_starts_with_an_empty_rollout_buffer() -> None:
    """Rows of a run stopped mid-rollout are not finished with the next run's (learn() resets)."""
    model = STOPPED["ppo"]()
    obs = start_training(model, 100, callback=StopAt(3))
    steps: list[tuple[Any, ...]] = []
    with pytest.raises(StopTraining):
        _step_until_stopped(model, obs, steps)
    assert model.rollout_buffer.pos == 2
    finish_training(model)
    start_training(model, 100)
    assert model.rollout_buffer.pos == 0 and not model.rollout_buffer.full
    finish_training(model)


def test_a_run_with_a_callback_must_be_finished_before_the_next() -> None:
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, device="cpu")
    recorder = Recorder()
    start_training(model, 100, callback=recorder)
    with pytest.raises(ValueError, match=re.escape("call finish_training(model) first")):
        start_training(model, 100, callback=Recorder())
    assert recorder.calls["on_training_end"] == 0
    assert finish_training(model) is recorder
    assert recorder.calls["on_training_end"] == 1
    start_training(model, 100)  # a run without a callback has nothing to end
    start_training(model, 100)
    assert finish_training(model) is None
