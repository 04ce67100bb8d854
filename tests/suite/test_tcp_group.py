"""tcp-bw's group over plain TCP (sb_bench.core.tcp_group): ranks as threads on 127.0.0.1, real sockets.
The hub (rank 0) must form the group from the real ranks whatever else connects, and every failure
is a GroupError naming what is missing, within the group's timeout."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from sb_bench.core.tcp_group import MAX_LINE, GroupError, TcpGroup  # noqa: E402

ADDR = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((ADDR, 0))
        return s.getsockname()[1]


def run_ranks(world: int, port: int, body, ranks=None, timeout: float = 10.0) -> dict:  # noqa: ANN001
    """Each rank in a thread: join, then body(group); returns rank -> result or the exception."""
    out: dict = {}

    def one(r: int) -> None:
        try:
            g = TcpGroup.join(r, world, ADDR, port, timeout, op_timeout=timeout)
            try:
                out[r] = body(g)
            finally:
                g.close()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[r] = exc

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in ranks or range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 3)
    return out


def test_all_gather_is_in_rank_order_on_every_rank_and_barrier_holds():
    port = free_port()

    def body(g: TcpGroup) -> list:
        got = g.all_gather({"rank": g.rank, "addr": [ADDR, 1000 + g.rank]})
        g.barrier()
        return [got, g.all_gather(0.5 * g.rank)]

    out = run_ranks(3, port, body)
    expect = [{"rank": r, "addr": [ADDR, 1000 + r]} for r in range(3)]
    assert all(out[r] == [expect, [0.0, 0.5, 1.0]] for r in range(3)), out


def _stray(port: int, payload: bytes) -> None:
    """Connect to the hub and send ``payload`` (or nothing), then hang up."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection((ADDR, port), timeout=5) as s:
                if payload:
                    s.sendall(payload)
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # connects and hangs up
        b"not json\n",
        b"x" * (MAX_LINE + 10),  # a line too long, no newline
        json.dumps({"rank": 1, "world": 3}).encode() + b"\n",  # a world the group is not
        json.dumps({"rank": 0, "world": 2}).encode() + b"\n",  # the hub's own rank
        json.dumps({"rank": "1", "world": 2}).encode() + b"\n",
        json.dumps([1, 2]).encode() + b"\n",
    ],
    ids=["hangup", "garbage", "huge", "wrong-world", "rank-0", "rank-str", "not-object"],
)
def test_a_stray_connection_does_not_break_the_group(payload):
    port = free_port()
    done: dict = {}

    def hub() -> None:
        try:
            g = TcpGroup.join(0, 2, ADDR, port, 10)
            done[0] = g.all_gather("hub")
            g.close()
        except Exception as exc:  # noqa: BLE001
            done[0] = exc

    t = threading.Thread(target=hub, daemon=True)
    t.start()
    _stray(port, payload)  # first in line: before the real rank
    g1 = TcpGroup.join(1, 2, ADDR, port, 10)
    assert g1.all_gather("one") == ["hub", "one"]
    g1.close()
    t.join(20)
    assert done[0] == ["hub", "one"], done


def test_a_rank_that_never_comes_is_named_within_the_timeout():
    port = free_port()
    t0 = time.monotonic()
    out = run_ranks(3, port, lambda g: g.all_gather(1), ranks=[0, 1], timeout=1.5)
    took = time.monotonic() - t0
    assert isinstance(out[0], GroupError) and "rank(s) [2] did not join within 2 s" in str(out[0]), out
    assert isinstance(out[1], GroupError), out  # the hub closed on it: no answer, no hang
    assert took < 10, took


def test_no_hub_is_a_clear_error_within_the_timeout():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(GroupError, match=rf"rank 0 at 127\.0\.0\.1:{port} did not answer within 1 s"):
        TcpGroup.join(1, 2, ADDR, port, 1.0)
    assert time.monotonic() - t0 < 10


def test_a_collective_waits_for_a_silent_rank_no_longer_than_its_timeout():
    port = free_port()
    joined = threading.Event()
    out = run_ranks(2, port, lambda g: g.all_gather(1) if g.rank == 0 else joined.wait(5), timeout=1.0)
    assert isinstance(out[0], GroupError) and str(out[0]).startswith("rank 1: "), out


def test_a_rank_that_sends_a_huge_line_mid_group_fails_the_hub_clearly():
    port = free_port()
    result: dict = {}

    def hub() -> None:
        try:
            g = TcpGroup.join(0, 2, ADDR, port, 5)
            result[0] = g.all_gather(1)
        except Exception as exc:  # noqa: BLE001
            result[0] = exc

    t = threading.Thread(target=hub, daemon=True)
    t.start()
    g1 = TcpGroup.join(1, 2, ADDR, port, 5)
    g1.peers[0].sock.sendall(b"[" + b"1," * MAX_LINE)  # no end, more than a line may hold
    t.join(20)
    g1.close()
    assert isinstance(result[0], GroupError) and f"more than {MAX_LINE} bytes" in str(result[0]), result


def test_the_hub_cannot_listen_on_a_port_held_by_another_process():
    with socket.create_server((ADDR, 0)) as held:
        port = held.getsockname()[1]
        with pytest.raises(GroupError, match=r"rank 0 cannot listen at .*MASTER_ADDR:MASTER_PORT"):
            TcpGroup.join(0, 2, ADDR, port, 1.0)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(GroupError, match="rank 3 is not in a group of 2"):
        TcpGroup.join(3, 2, ADDR, free_port(), 1.0)
