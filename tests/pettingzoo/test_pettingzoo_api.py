"""PettingZoo's own API conformance tests on every env the adapter's tests drive.

The adapter's rules (live agents are ``env.agents``; ``None`` for finished AEC agents; masks in
observations or infos) are PettingZoo's; these checks confirm that the envs we test against obey
them too, on the installed PettingZoo version, so a passing adapter test means what it says.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from pettingzoo.butterfly import pistonball_v6
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3
from pettingzoo.test import api_test, parallel_api_test


@pytest.mark.parametrize("game", [tictactoe_v3, connect_four_v3, rps_v2], ids=lambda m: m.__name__)
def test_classic_games_pass_api_test(game: ModuleType) -> None:
    api_test(game.env(), num_cycles=200)


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_simple_spread_passes_both_api_tests(simple_spread: ModuleType, continuous: bool) -> None:
    parallel_api_test(simple_spread.parallel_env(continuous_actions=continuous), num_cycles=100)
    api_test(simple_spread.env(continuous_actions=continuous), num_cycles=100)


def test_pistonball_passes_parallel_api_test() -> None:
    parallel_api_test(pistonball_v6.parallel_env(max_cycles=20), num_cycles=20)


def test_knights_archers_zombies_passes_parallel_api_test(kaz: ModuleType) -> None:
    parallel_api_test(kaz.parallel_env(max_cycles=300), num_cycles=300)
