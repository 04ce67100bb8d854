"""The cyclic collector held off within a block, and as it was after it (on, off, after an error)."""

from __future__ import annotations

import gc

import pytest

from sb_fleet.gc_pause import collector_paused


def test_off_within_and_on_again_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_turns_it_on_again():
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("x")
    assert gc.isenabled()


def test_left_off_when_it_was_off_before():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
