"""Docstring examples are part of the contract: they must run as written."""

import doctest

import pytest

import worldsim.envs.vector_env


@pytest.mark.parametrize("module", [worldsim.envs.vector_env], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_warp_docstring_example(warp_compiled):
    import worldsim.envs.warp.vector_env

    result = doctest.testmod(worldsim.envs.warp.vector_env, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
