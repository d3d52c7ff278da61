"""Train a MaskablePPO on PettingZoo's connect_four_v3 (self-play and a random opponent).

One shared policy plays both seats (parameter sharing, self-play): ``AECRolloutCollector``
steps copies of the turn-based env, acts every turn in one batched forward pass with the mask
of ``observe(agent)["action_mask"]``, and fills the model's own ``MaskableRolloutBuffer`` with
each seat's own trajectory (a transition runs from one of the seat's turns to its next; the
-1 of a game lost on the other seat's turn closes the loser's last transition). Then
``model.train()``, as in ``learn()``. The model's VecEnv (``AgentSlot``) only sizes the buffer.

Opponents: by default two of each four rollouts are played against a uniformly random legal
move (``opponents={seat: "random"}``, the model's seat alternating between ``player_0`` and
``player_1``; only the model's turns are stored) and the other two by self-play. Self-play
alone plateaus at 86% against random (``docs/pettingzoo.md``): the positions a random player
makes are never seen. Each collector keeps its own env copies; the buffer is filled by one of
them per rollout. Features: ``BoardCNN``, two 3x3 convolutions over the 6x7x2 board
(``--net mlp``: SB3's MLP over the flattened observation).

Evaluation: the trained policy (deterministic, masked) against a uniformly random legal move,
half the games as ``player_0`` (moves first) and half as ``player_1``, counting wins (per
seat), draws, losses and illegal moves (a move its mask forbids). The full run's target: at
least 90% wins of 200 games and no illegal move; it exits with status 1 otherwise.

    python examples/pettingzoo_connect_four.py           # minutes (examples/README.md)
    python examples/pettingzoo_connect_four.py --smoke   # seconds (used by the tests)
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pettingzoo.classic import connect_four_v3
from sb3_contrib import MaskablePPO
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

from rlightning_pettingzoo import AECRolloutCollector, find_action_mask
from rlightning_sb3 import finish_training, start_training


class AgentSlot(gym.Env[Any, Any]):
    """One seat's spaces, for the shared model's VecEnv: it sizes the buffer, never stepped."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot only sizes the shared model's buffer; it is never stepped")


class BoardCNN(BaseFeaturesExtractor):
    """A small CNN over connect four's 6x7 board (NatureCNN's 8x8 stride-4 kernel is too big).

    Input: the ``Dict`` observation SB3 preprocesses to float32 tensors, ``observation``
    ``(batch, 6, 7, 2)`` (the acting seat's pieces, then the opponent's: PettingZoo's
    ``connect_four_v3.observe``) and ``action_mask`` ``(batch, 7)``. Two 3x3 convolutions
    (``channels`` each, padding 1, ReLU) over the board as ``(batch, 2, 6, 7)``, flattened,
    concatenated with the mask and projected by a linear layer and ReLU to ``features_dim``.
    Output: ``(batch, features_dim)`` float32 on the input's device.
    """

    def __init__(
        self, observation_space: gym.spaces.Dict, features_dim: int = 256, channels: int = 32
    ) -> None:
        super().__init__(observation_space, features_dim)
        board_shape = observation_space["observation"].shape
        mask_shape = observation_space["action_mask"].shape
        assert board_shape is not None  # connect_four_v3's Boxes have shapes
        assert mask_shape is not None
        rows, cols, planes = board_shape
        n_mask = int(np.prod(mask_shape))
        self.conv = nn.Sequential(
            nn.Conv2d(planes, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.linear = nn.Sequential(
            nn.Linear(channels * rows * cols + n_mask, features_dim), nn.ReLU()
        )

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """Features of a batch of boards: ``(batch, features_dim)``."""
        board = observations["observation"].permute(0, 3, 1, 2)
        mask = observations["action_mask"].flatten(1)
        features: torch.Tensor = self.linear(torch.cat([self.conv(board), mask], dim=1))
        return features


def evaluate(model: MaskablePPO, games: int, seed: int) -> dict[str, int]:
    """Play ``games`` games of the model (deterministic) against random legal moves."""
    env = connect_four_v3.env()
    rng = np.random.default_rng(seed)
    counts = {"wins": 0, "draws": 0, "losses": 0, "illegal": 0, "games": games}
    counts.update({"wins_first": 0, "wins_second": 0})
    for game in range(games):
        env.reset(seed=seed + game)
        trained = env.possible_agents[game % 2]  # alternate who moves first
        result = 0.0
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, info = env.last()
            if agent == trained:
                result += float(reward)
            if terminated or truncated:
                env.step(None)
                continue
            mask = np.asarray(find_action_mask(agent, {agent: observation}, {agent: info}))
            if agent == trained:
                action, _ = model.predict(
                    {k: v[None] for k, v in observation.items()},
                    action_masks=mask[None].astype(bool),
                    deterministic=True,
                )
                move = int(action[0])
                counts["illegal"] += int(not mask[move])
            else:
                move = int(rng.choice(np.flatnonzero(mask)))
            env.step(move)
        counts["wins" if result > 0 else "losses" if result < 0 else "draws"] += 1
        if result > 0:
            counts["wins_first" if game % 2 == 0 else "wins_second"] += 1
    env.close()
    return counts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=1_000_000, help="stored turns")
    parser.add_argument("--copies", type=int, default=8, help="env copies (= buffer columns)")
    parser.add_argument("--games", type=int, default=200, help="evaluation games vs random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--vs-random",
        type=int,
        default=2,
        help="of each 4 rollouts, how many are played against a random opponent (alternating "
        "the trained seat); the others are self-play (0: self-play only)",
    )
    parser.add_argument("--net", choices=["cnn", "mlp"], default="cnn", help="features")
    parser.add_argument("--epochs", type=int, default=4, help="PPO's n_epochs")
    parser.add_argument("--smoke", action="store_true", help="a tiny run to check the wiring")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (SB3's, needs tqdm and rich)"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.vs_random <= 4:
        parser.error(f"--vs-random must be 0 to 4 (of each 4 rollouts), got {args.vs_random}")
    n_steps = 128
    if args.smoke:
        args.timesteps, args.copies, args.games, n_steps = 512, 2, 10, 64
    torch.set_num_threads(1)  # small networks: one thread is fastest on a small shared CPU

    spaces = connect_four_v3.env()
    first, second = spaces.possible_agents
    obs_space, act_space = spaces.observation_space(first), spaces.action_space(first)
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * args.copies)
    policy_kwargs: dict[str, Any] = {"net_arch": [256, 256]}
    if args.net == "cnn":
        policy_kwargs = {"features_extractor_class": BoardCNN, "net_arch": [128]}
    model = MaskablePPO(
        "MultiInputPolicy",
        slots,
        n_steps=n_steps,
        batch_size=256,
        n_epochs=args.epochs,
        learning_rate=3e-4,
        gamma=0.99,
        ent_coef=0.01,
        policy_kwargs=policy_kwargs,
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    env_fns = [connect_four_v3.env] * args.copies
    # self-play (both seats stored), and the trained model against a uniformly random legal
    # move in either seat (only the model's seat stored): each collector keeps its own copies
    self_play = AECRolloutCollector(
        model, env_fns, seeds=[args.seed + c for c in range(args.copies)]
    )
    as_first, as_second = (
        AECRolloutCollector(
            model,
            env_fns,
            opponents={opponent: "random"},
            seeds=[args.seed + (k + 1) * args.copies + c for c in range(args.copies)],
        )
        for k, opponent in enumerate([second, first])
    )
    vs_random = [as_first, as_second]
    schedule = [vs_random[k % 2] for k in range(args.vs_random)]
    schedule += [self_play] * (4 - args.vs_random)
    start = time.perf_counter()
    start_training(model, args.timesteps, progress_bar=not args.no_progress)
    rollout = 0
    while model.num_timesteps < args.timesteps:  # learn()'s loop
        schedule[rollout % len(schedule)].collect()
        model.train()
        rollout += 1
    finish_training(model)
    train_s = time.perf_counter() - start

    counts = evaluate(model, args.games, seed=10_000)
    rate = counts["wins"] / counts["games"]
    print(
        f"trained {model.num_timesteps} stored turns ({args.vs_random} of each 4 rollouts vs "
        f"random, the others self-play; {args.net}) in {train_s:.1f} s"
    )
    print(
        f"vs random over {counts['games']} games: {counts['wins']} wins ({rate:.1%}; "
        f"{counts['wins_first']} moving first, {counts['wins_second']} second), "
        f"{counts['draws']} draws, {counts['losses']} losses, {counts['illegal']} illegal moves"
    )
    return {**counts, "win_rate": rate, "timesteps": model.num_timesteps, "train_s": train_s}


if __name__ == "__main__":
    figures = main()
    target = figures["win_rate"] >= 0.9 and figures["illegal"] == 0
    if not target and "--smoke" not in sys.argv:
        sys.exit(1)  # the target: >= 90% wins against random, no illegal move
