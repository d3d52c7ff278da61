"""The shared off-policy PettingZoo collector on Ray runners (agents that die, join and wait).

:class:`RaySharedReplayCollector` is :class:`rlightning_pettingzoo.SharedReplayCollector` with
its env copies spread over Ray actors (local mode: each runner acts with a replica of the
model in its own process), as :class:`rlightning_ray.pettingzoo.RaySharedRolloutCollector` is
for on-policy models. Nothing of PettingZoo's or SB3's rules is written here again:

* each runner holds a :class:`rlightning_pettingzoo.ReplayRecorder` (the in-process collector,
  its hand-over of a complete row replaced by keeping it) over its copies and a replica of the
  model with the runner's share ``m`` of the learner's buffer columns (SB3's own ``save``/
  ``load`` of the learner's model, ``n_envs`` set to ``m`` and its own buffer one row: the
  same class, hyper-parameters, spaces and weights);
* each :meth:`RaySharedReplayCollector.collect` publishes the learner's
  :func:`rlightning_sb3.acting_state` (its weights and the counters exploration reads:
  ``num_timesteps``, DQN's ``exploration_rate``, ``total_timesteps``; one ``ray.put``) to every
  runner, which records one rollout of ``train_freq`` rows (``SharedReplayCollector.collect``'s
  acting, stepping, transition rules and rows, unchanged; the replica's counters advanced by the
  learner's ``n_envs`` per row, as the learner's will be) and returns it
  (:class:`rlightning_pettingzoo.RecordedReplay`);
* the learner adds the runners' rows side by side (:func:`rlightning_pettingzoo
  .fill_recorded_replay`: ``SharedReplayCollector``'s own row hand-over, through
  ``rlightning_sb3.add_replay_step``), so callbacks, the logger, ``num_timesteps``, DQN's
  target updates and ``ep_info_buffer`` are the learner's.

The learner's side (:class:`_ReplayRecordingCollector`) and the runner (:class:`SharedReplayRunner`,
its recorder a hook) are shared with :class:`rlightning_ray.pz_aec_replay.RayAECReplayCollector`,
whose runner records with the AEC replay collector instead.

With one runner its buffer and counters equal the in-process collector's over the same copies,
seeds and acting seed, array for array; with several, runner ``r``'s columns equal the
in-process collector's over runner ``r``'s copies exploring on the learner's clock
(tests/ray/test_pz_replay.py; docs/ray.md, "PettingZoo"). With action noise (TD3, DDPG, SAC)
too: a copy of the learner's base noise travels to each runner, whose recorder keeps its copies'
per-slot noise processes across rollouts and resets them on the learner's new run
(tests/ray/test_pz_replay_noise.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlightning.rules import check_count
from rlightning_ray._pz_runners import (
    PooledCollector,
    RunnerPool,
    load_replay_replica,
    merge_returns,
    plan_runners,
    replay_replica_spec,
    replica_counters,
    runner_columns,
)

try:
    from rlightning_pettingzoo.remote_replay import (
        RecordedReplay,
        ReplayRecorder,
        check_replay_model,
        fill_recorded_replay,
    )
    from rlightning_sb3 import ActingState, acting_state, check_training
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rlightning_ray.pettingzoo needs the [pettingzoo] extra: "
        f'pip install "rlightning-ray[pettingzoo]" ({exc})'
    ) from exc

if TYPE_CHECKING:
    from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

__all__ = ["RaySharedReplayCollector", "SharedReplayRunner"]


class SharedReplayRunner:
    """A Ray actor's state: a replica of the learner's off-policy model and a ReplayRecorder.

    Built in the actor's process by :class:`RaySharedReplayCollector` (not meant to be built by
    hand). The replica is SB3's ``model_class.load`` of the learner's saved model over a
    never-stepped ``DummyVecEnv`` of ``n_columns`` slots of the learner's raw spaces
    (:func:`rlightning_pettingzoo.replica_slots`; SB3 wraps it in ``VecTransposeImage`` where it
    wrapped the learner's), with ``n_envs=n_columns``, a buffer of one row
    (``buffer_size=n_columns``: never written), no tensorboard log and ``verbose=0``; it is
    given :func:`rlightning_sb3.start_training` (the in-process collector runs only on a started
    model; the budget and counters it sets are replaced by each :meth:`record`'s state). Its
    ``action_noise`` is the learner's base noise (``noise``; the recorder builds its per-slot
    processes from it).

    Args:
        model_class: The learner's model class (``DQN``, ``SAC``, ``TD3``).
        saved: The learner's model as SB3's ``model.save`` wrote it (bytes).
        n_columns: The runner's share of the learner's buffer columns (the replica's
            ``n_envs``).
        row_width: The learner's ``n_envs`` (:class:`rlightning_pettingzoo.ReplayRecorder`'s
            ``row_width``).
        env_fns: One function per env copy of this runner.
        seeds: Each copy's first-reset seed (None: no seed).
        acting_seed: When given, SB3's ``replica.set_random_seed(acting_seed)`` after the
            replica is built: Python's, numpy's and torch's global generators (DQN's epsilon
            test, SAC/TD3's sampling) *and* the action space (the ``learning_starts`` warm-up
            and the epsilon actions sample it; every replica was loaded with the learner's
            seed, so without this all runners would draw the same random actions).
        device: The replica's torch device.
        runner_id: For messages.
        spaces: The learner's raw observation space (before ``VecTransposeImage``) and action
            space.
        noise: The learner's base action noise (a copy: Ray pickles it), or None: set as the
            replica's ``action_noise`` before ``start_training`` (which wraps it in
            ``VectorizedActionNoise`` and resets it, as ``_setup_learn`` does). SB3's ``save``
            pickles the noise too, but its ``load`` drops, with only a warning, an object it
            cannot unpickle; sent apart, a noise the runner cannot unpickle fails its build,
            named.
        options: What the runner's kind builds its recorder with (:meth:`recorder_options`;
            None here).

    Raises:
        What ``model_class.load``, ``start_training`` and :class:`ReplayRecorder` raise.
    """

    #: The in-process recorder the runner records with (a subclass's own: an AEC recorder).
    recorder_class: Any = ReplayRecorder

    def __init__(
        self,
        model_class: Any,
        saved: bytes,
        n_columns: int,
        row_width: int,
        env_fns: Sequence[Callable[[], Any]],
        seeds: Sequence[int | None],
        acting_seed: int | None,
        device: str,
        runner_id: str,
        spaces: tuple[Any, Any],
        noise: ActionNoise | None = None,
        options: Any = None,
    ) -> None:
        self.model = load_replay_replica(model_class, saved, n_columns, spaces, device, noise)
        # before the acting seed: SB3's load (an opponent's) seeds the global generators
        kwargs = self.recorder_options(options, device)
        if acting_seed is not None:
            self.model.set_random_seed(acting_seed)
        self.recorder = self.recorder_class(
            self.model, env_fns, seeds=seeds, row_width=row_width, **kwargs
        )
        self.runner_id = runner_id

    def recorder_options(self, options: Any, device: str) -> dict[str, Any]:
        """The recorder's keyword arguments beyond ``seeds`` and ``row_width``, from ``options``.

        Called once in the runner's process, after the replica is loaded and before the acting
        seed is set. Here: none (a subclass builds its own, e.g. loaded opponents).

        Args:
            options: The runner's ``options`` (None here).
            device: The replica's torch device.

        Returns:
            ``{}``.

        Raises:
            Nothing here.
        """
        return {}

    def ready(self) -> str:
        """The runner's id, once built (surfaces a failed construction to the caller)."""
        return self.runner_id

    def record(self, state: ActingState) -> RecordedReplay:
        """Load the learner's ``state`` and record one rollout (:meth:`ReplayRecorder.record`).

        Raises:
            What the recorder's ``record`` raises (:meth:`ReplayRecorder.record`).
        """
        recording: RecordedReplay = self.recorder.record(state)
        return recording

    def counters(self) -> tuple[int, float | None]:
        """The replica's ``num_timesteps`` and ``exploration_rate`` (None without one) now."""
        return replica_counters(self.model)

    def noise_processes(self) -> VectorizedActionNoise | None:
        """The recorder's per-slot action-noise processes now (None without ``action_noise``).

        :attr:`rlightning_pettingzoo.SharedReplayCollector.noise_processes` (slot ``k``: copy,
        then ``possible_agents`` order, of this runner's copies); Ray returns a copy. A
        :class:`ReplayRecorder`'s only (an AEC recorder has no action noise).
        """
        noises: VectorizedActionNoise | None = self.recorder.noise_processes
        return noises


class _ReplayRecordingCollector(PooledCollector):
    """What the off-policy collectors on Ray runners that record one model's rows share.

    Splits the copies, checks the seeds and the timeout, builds one ``runner_class`` actor per
    block of copies (a :class:`SharedReplayRunner` or a subclass: a replica of the learner's
    model with the runner's share of its columns, :func:`rlightning_ray._pz_runners
    .load_replay_replica`), and at each :meth:`collect` publishes the learner's acting state,
    gathers the runners' :class:`RecordedReplay` and adds them with
    :func:`fill_recorded_replay`. The public subclasses
    (:class:`RaySharedReplayCollector`, ``pz_aec_replay.RayAECReplayCollector``) check their
    model (and their own arguments) and call :meth:`_start`.
    """

    def _start(
        self,
        name: str,
        runner_class: type,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]] | None,
        env_fn: Callable[[], Any] | None,
        n_runners: int,
        copies_per_runner: int | None,
        seeds: Sequence[int | None] | None,
        acting_seeds: Sequence[int | None] | None,
        num_cpus: float,
        device: str,
        timeout_s: float | None,
        options: Any = None,
    ) -> None:
        """Check the arguments and build the runners (see the subclasses' docstrings).

        ``options`` goes to every runner (:meth:`SharedReplayRunner.recorder_options`).
        """
        import ray

        plan = plan_runners(
            name,
            env_fns=env_fns,
            env_fn=env_fn,
            n_runners=n_runners,
            copies_per_runner=copies_per_runner,
            seeds=seeds,
            acting_seeds=acting_seeds,
            seed_model=model,
            num_cpus=num_cpus,
            timeout_s=timeout_s,
        )
        columns = runner_columns(name, model, n_runners)
        n_envs = int(model.n_envs)
        if not ray.is_initialized():
            raise RuntimeError(f"{name} needs Ray: call ray.init(...) first")
        self.model = model
        self.n_runners = n_runners
        self.copies_per_runner = plan.copies_per_runner
        #: Per agent id, the returns of its last 100 finished episodes, per runner (see
        #: :meth:`collect`).
        self.agent_returns: dict[Any, deque[float]] = {}
        model_class, saved, spaces, noise = replay_replica_spec(model)
        blob = ray.put(saved)
        self._pool = RunnerPool(
            name,
            runner_class,
            [
                (
                    model_class,
                    blob,
                    columns,
                    n_envs,
                    *plan.block(r),
                    plan.runner_seeds[r],
                    device,
                    f"pz-runner-{r}",
                    spaces,
                    noise,
                    options,
                )
                for r in range(n_runners)
            ],
            num_cpus=num_cpus,
            timeout_s=plan.timeout_s,
        )

    def collect(self) -> int:
        """Publish the acting state, record one rollout on every runner, add the learner's rows.

        Returns:
            The agent-steps stored (``n_envs`` per row), as
            :meth:`rlightning_pettingzoo.SharedReplayCollector.collect` returns.
            ``model.replay_buffer`` and the model's counters are mutated as that method says
            (through :func:`rlightning_pettingzoo.fill_recorded_replay`); the runners' envs are
            stepped. :attr:`agent_returns`: each runner's last 100 episodes of each agent
            together (with one runner: its last 100, as in process).

        Raises:
            ValueError: the model was not given :func:`rlightning_sb3.start_training` (before
                any runner steps).
            rlightning_sb3.StopTraining: a callback stopped the run (before any runner steps),
                or stops it while the rows are added.
            RuntimeError: a runner failed (named; its error in the message) or timed out; or
                what :func:`rlightning_pettingzoo.fill_recorded_replay` raises.
        """
        import ray

        check_training(self.model)  # before any runner steps (as the in-process collector)
        state = ray.put(acting_state(self.model))
        recordings: list[RecordedReplay] = self._pool.call("record", state, what="record a rollout")
        self.agent_returns = merge_returns(recording.agent_returns for recording in recordings)
        return fill_recorded_replay(self.model, recordings)

    def runner_counters(self) -> list[tuple[int, float | None]]:
        """Each runner's replica ``num_timesteps`` and ``exploration_rate`` now, in runner order.

        After a :meth:`collect` they are the learner's (the runners advance them as the learner
        does; a diagnostic, and what tests/ray/test_pz_replay.py checks).

        Raises:
            RuntimeError: a runner failed or timed out (named).
        """
        return self._pool.call("counters", what="report its counters")


class RaySharedReplayCollector(_ReplayRecordingCollector):
    """Fill one shared off-policy model's replay buffer from env copies stepped on Ray runners.

    The copies (``env_fns``, or ``env_fn`` called once per copy) are split into ``n_runners``
    consecutive blocks of ``copies_per_runner``; runner ``r`` holds copies ``r *
    copies_per_runner ...`` and fills cells ``r * m ... (r + 1) * m - 1`` of each row the
    learner adds (its buffer columns), with ``m = model.n_envs // n_runners`` (its replica's
    ``n_envs``). Each :meth:`collect` is one rollout of ``model.train_freq``, as
    :meth:`rlightning_pettingzoo.SharedReplayCollector.collect` (see the module docstring and
    ``docs/ray.md``, "PettingZoo"): every runner records ``train_freq`` rows, the learner adds
    row ``k`` of every runner as its row ``k``. Exploration follows the learner's clock: each
    runner starts a rollout from the learner's ``num_timesteps`` and ``exploration_rate`` and
    advances them by the learner's ``n_envs`` per row it completes, so after ``k`` rows its
    ``learning_starts`` warm-up test and DQN epsilon are the learner's after ``k`` rows (with
    one runner: exactly the in-process collector's). A model's ``action_noise`` (TD3, DDPG,
    SAC) travels to each replica (a copy of its base noise); each runner's recorder keeps the
    in-process collector's per-slot processes over its copies from one :meth:`collect` to the
    next (drawn from the runner process's numpy generator, which its acting seed seeds; reset
    where an agent's episode ends, and all of them when the learner begins a new run:
    ``ActingState.run_id``, see :meth:`runner_noise`). Call :func:`rlightning_sb3.start_training`
    before, train after each :meth:`collect` as ``learn()`` does (``if model.num_timesteps >
    model.learning_starts: model.train(...)``), and :meth:`close` at the end.

    Needs ``ray.init`` first. Builds the runners at once (each imports torch and SB3: seconds)
    and waits until they are built.

    Args:
        model: The learner's DQN, SAC, TD3 or other ``OffPolicyAlgorithm``, built over a VecEnv
            of ``n_envs`` slots of one agent's spaces (it sizes the buffer; never stepped);
            ``n_envs`` a multiple of ``n_runners``.
        env_fns: One function per copy (``n_runners * copies_per_runner``), each returning a
            PettingZoo ``ParallelEnv`` (called in the runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        n_runners: The Ray actors.
        copies_per_runner: Copies per runner (with ``env_fns`` it defaults to
            ``len(env_fns) // n_runners``; with ``env_fn`` to 1).
        seeds: Each copy's first-reset seed, in copy order (None: no seeds).
        acting_seeds: Each runner's acting seed (SB3's ``replica.set_random_seed``: the global
            generators and the action space, see :class:`SharedReplayRunner`). None:
            ``model.seed + r`` for runner ``r`` where the model has a seed, else no seeding
            (every replica then starts from its load's ``set_random_seed(model.seed)``, the
            same for all: give seeds).
        num_cpus: CPUs each runner reserves.
        device: The replicas' torch device.
        timeout_s: Seconds to wait for all the runners' rollouts of one call together (one
            deadline, not one per runner; None: no limit).

    Raises:
        TypeError: ``model`` is not an off-policy SB3 model; an ``env_fns`` entry or
            ``env_fn`` is not callable; ``seeds`` or ``acting_seeds`` is not a sequence, or one
            of its seeds is not None or an int (named by index); ``timeout_s`` is not None or a
            number.
        ValueError: what :func:`rlightning_pettingzoo.check_replay_model` raises
            (``optimize_memory_usage``, gSDE, ``train_freq`` counted in episodes over several
            runners, unapplied VecEnv wrappers); neither or both of
            ``env_fns`` and ``env_fn``; the copies are not ``n_runners * copies_per_runner``;
            ``model.n_envs`` is not a multiple of ``n_runners``; ``seeds`` or
            ``acting_seeds`` has the wrong length or a negative seed; ``timeout_s`` is not
            > 0; bad counts.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained).
    """

    def __init__(
        self,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]] | None = None,
        *,
        env_fn: Callable[[], Any] | None = None,
        n_runners: int = 1,
        copies_per_runner: int | None = None,
        seeds: Sequence[int | None] | None = None,
        acting_seeds: Sequence[int | None] | None = None,
        num_cpus: float = 1,
        device: str = "cpu",
        timeout_s: float | None = None,
    ) -> None:
        name = "RaySharedReplayCollector"
        check_count(n_runners, f"{name} n_runners", minimum=1)
        check_replay_model(model, name, n_runners)
        self._start(
            name,
            SharedReplayRunner,
            model,
            env_fns,
            env_fn,
            n_runners,
            copies_per_runner,
            seeds,
            acting_seeds,
            num_cpus,
            device,
            timeout_s,
        )

    def runner_noise(self) -> list[VectorizedActionNoise | None]:
        """Each runner's per-slot action-noise processes now (copies), in runner order.

        Runner ``r``'s ``noises[k]`` is slot ``k`` of its copies (copy, then
        ``possible_agents`` order): what the in-process collector over those copies keeps
        (:attr:`rlightning_pettingzoo.SharedReplayCollector.noise_processes`; an
        Ornstein-Uhlenbeck process's state is its ``noise_prev``). None for a model without
        ``action_noise``. A diagnostic, what tests/ray/test_pz_replay_noise.py checks.

        Raises:
            RuntimeError: a runner failed or timed out (named).
        """
        return self._pool.call("noise_processes", what="report its action noise")
