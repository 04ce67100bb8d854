"""The process channels collect reads a host through (ssh over the host's master, srun): real processes
standing in for ssh, no host needed. Budgets, stall timeouts, ssh's own failures, and a node's close."""

from __future__ import annotations

import time

import pytest

from sb_fleet.fleet.channels import HostRefused, MasterChannel, MasterGone, MasterNode, ProcessNode


def _channel(script: str, stall: float = 5, limit: int = 1 << 20) -> MasterChannel:
    return MasterChannel(["/bin/sh", "-c", script], stall, limit, "the listing")


def test_master_channel_reads_a_command_and_its_status():
    ch = _channel("printf 'a\\0b'; echo oops >&2; exit 3")
    assert b"".join(ch.chunks()) == b"a\0b"
    assert ch.exit_status() == (3, "oops")


def test_ssh_exit_255_with_nothing_sent_is_a_master_gone():
    ch = _channel("echo 'Control socket connect(x): No such file or directory' >&2; exit 255")
    with pytest.raises(MasterGone, match="No such file"):
        b"".join(ch.chunks())


def test_ssh_exit_255_after_output_is_a_lost_connection_not_a_master_gone():
    ch = _channel("printf abc; exit 255")
    assert b"".join(ch.chunks()) == b"abc"
    with pytest.raises(ConnectionError) as exc:
        ch.exit_status()
    assert not isinstance(exc.value, MasterGone)


def test_master_channel_keeps_the_byte_budget_and_the_stall_timeout():
    ch = _channel("head -c 100000 /dev/zero", limit=1000)
    with pytest.raises(HostRefused, match="more than 1000 bytes"):
        b"".join(ch.chunks())
    ch.kill()
    slow = _channel("sleep 30", stall=0.3)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        slow.read()
    assert time.monotonic() - t0 < 5
    slow.kill()


def test_a_node_closes_every_read_at_once_and_opens_none_after():
    node = MasterNode(lambda command: ["/bin/sh", "-c", command])
    chans = [node.channel("sleep 30", 60, 1 << 20, "the tar stream") for _ in range(3)]
    t0 = time.monotonic()
    node.close()
    for ch in chans:
        assert ch.read() == b""  # the read ends now, not at the stall timeout
        assert ch.proc.poll() is not None
    assert time.monotonic() - t0 < 5
    with pytest.raises(ConnectionError):
        node.channel("true", 5, 10, "the listing")
    assert isinstance(node, ProcessNode)
