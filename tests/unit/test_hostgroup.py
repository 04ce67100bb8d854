"""The host-only benchmarks' rank group (sb_bench.core.hostgroup): real sockets on loopback, one thread
per rank; strays, impostors and silent peers cost only their own connection."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

SUITE = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(SUITE))
from sb_bench.core.hostgroup import MAX_FRAME, GroupError, HostGroup, send_frame  # noqa: E402

ADDR = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((ADDR, 0))
        return s.getsockname()[1]


def join_all(  # noqa: ANN001
    world: int, port: int, work, timeout_s: float = 20.0, job: str = "r/0/1", addr: str = ADDR
) -> dict[int, Any]:
    """Every rank in its own thread: join, then ``work(group)``; rank -> what work returned (or raised)."""
    out: dict[int, Any] = {}

    def rank(r: int) -> None:
        try:
            g = HostGroup.join(r, world, addr, port, timeout_s, job=job)
            try:
                out[r] = work(g)
            finally:
                g.close()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[r] = exc

    # the other ranks first: they must wait for rank 0, as ranks started together do
    threads = [threading.Thread(target=rank, args=(r,)) for r in (*range(1, world), 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 10)
    return out


def test_every_rank_gets_every_value_in_rank_order() -> None:
    port = free_port()

    def work(g: HostGroup) -> list:
        first = g.all_gather([f"10.0.0.{g.rank}", 4000 + g.rank])
        g.barrier()
        return [first, g.all_gather(g.rank * 1.5)]

    got = join_all(4, port, work)
    want = [[[f"10.0.0.{r}", 4000 + r] for r in range(4)], [0.0, 1.5, 3.0, 4.5]]
    assert got == {r: want for r in range(4)}, got


def test_a_world_of_one_needs_no_peer() -> None:
    g = HostGroup.join(0, 1, ADDR, free_port(), 5.0)
    assert g.all_gather({"a": 1}) == [{"a": 1}]
    g.close()


def test_a_rank_that_never_joins_is_named_at_the_deadline() -> None:
    port, out = free_port(), {}
    t0 = time.monotonic()

    def rank(r: int) -> None:
        try:
            out[r] = HostGroup.join(r, 3, ADDR, port, 1.5)
        except GroupError as exc:
            out[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 0)]  # rank 2 never starts
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert isinstance(out[0], GroupError) and "rank(s) 2 never joined" in str(out[0]), out
    assert isinstance(out[1], GroupError), out  # its welcome never came
    assert time.monotonic() - t0 < 10


def test_rank_0_never_listening_is_a_clear_error() -> None:
    with pytest.raises(GroupError, match=r"rank 0 never listened on 127\.0\.0\.1:\d+"):
        HostGroup.join(1, 2, ADDR, free_port(), 0.5)


def test_a_port_in_use_says_so() -> None:
    with socket.create_server((ADDR, 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(GroupError, match="the port is in use"):
            HostGroup.join(0, 2, ADDR, port, 1.0)


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_rank_0_on_an_ipv6_address() -> None:
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback address here")
        port = s.getsockname()[1]
    out = join_all(2, port, lambda g: g.all_gather(f"r{g.rank}"), addr="::1")
    assert out == {0: ["r0", "r1"], 1: ["r0", "r1"]}, out


def test_rank_0_listens_everywhere_when_master_addr_is_not_its_own() -> None:
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine: rank 0 listens on every address
    # and a rank reaches it on loopback (on a cluster: MASTER_ADDR behind NAT)
    port = free_port()
    out: dict[int, Any] = {}

    def zero() -> None:
        g = HostGroup.join(0, 2, "192.0.2.1", port, 20.0)
        out[0] = g.all_gather(0)
        g.close()

    t = threading.Thread(target=zero)
    t.start()
    g = HostGroup.join(1, 2, ADDR, port, 20.0)
    out[1] = g.all_gather(1)
    g.close()
    t.join(30)
    assert out == {0: [0, 1], 1: [0, 1]}, out


def _stray(
    port: int, payload: bytes, stop: threading.Event
) -> tuple[list[bytes], threading.Event, threading.Thread]:
    """Connect, send ``payload``, read until rank 0 closes the connection (or ``stop``): (what came back,
    sent, the thread)."""
    answers: list[bytes] = []
    sent = threading.Event()

    def run() -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                s = socket.create_connection((ADDR, port), timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    sent.set()
                    return
                time.sleep(0.01)
        with s:
            s.sendall(payload)
            sent.set()
            s.settimeout(0.2)
            while not stop.is_set():
                try:
                    data = s.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                answers.append(data)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return answers, sent, t


def _frame(value: Any) -> bytes:
    data = json.dumps(value).encode()
    return struct.pack("!I", len(data)) + data


HOSTILE = {
    "garbage": b"GET / HTTP/1.1\r\n\r\n",
    "huge length": struct.pack("!I", MAX_FRAME + 1) + b"x" * 64,
    "not json": struct.pack("!I", 5) + b"\xff\xfe{[(",
    "deep json": struct.pack("!I", 200_000) + b"[" * 100_000 + b"]" * 100_000,
    "not a hello": _frame(["rank", 1]),
    "another job": _frame({"rank": 1, "world": 3, "job": "other/0/0"}),
    "another world": _frame({"rank": 1, "world": 4, "job": "r/0/1"}),
    "rank out of range": _frame({"rank": 7, "world": 3, "job": "r/0/1"}),
    "rank 0 again": _frame({"rank": 0, "world": 3, "job": "r/0/1"}),
    "a bool rank": _frame({"rank": True, "world": 3, "job": "r/0/1"}),
    "half a header": b"\x00\x00",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_stray_or_impostor_connection_costs_only_itself(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 0 listens, the stray connects and speaks before the ranks start, and the group still forms
    from sb_bench.core import hostgroup

    monkeypatch.setattr(hostgroup, "HELLO_S", 0.5)  # a silent stray is dropped after this
    port, stop = free_port(), threading.Event()
    out: dict[int, Any] = {}

    def rank(r: int) -> None:
        try:
            g = HostGroup.join(r, 3, ADDR, port, 20.0, job="r/0/1")
            out[r] = g.all_gather(r)
            g.close()
        except Exception as exc:  # noqa: BLE001
            out[r] = exc

    t0 = threading.Thread(target=rank, args=(0,))
    t0.start()
    answers, sent, stray = _stray(port, HOSTILE[kind], stop)
    assert sent.wait(15), "the stray never connected"
    others = [threading.Thread(target=rank, args=(r,)) for r in (1, 2)]
    for t in others:
        t.start()
    for t in (t0, *others):
        t.join(40)
    stray.join(15)  # rank 0 closed its connection: refused, or dropped
    stop.set()
    assert not stray.is_alive(), f"rank 0 kept the stray's connection open ({kind})"
    assert out == {0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 1, 2]}, (kind, out)
    if kind in ("another job", "another world", "rank out of range", "rank 0 again", "a bool rank"):
        said = b"".join(answers)
        assert b"refused" in said and b"welcome" not in said, said


def test_a_second_claim_to_a_rank_is_refused_and_told_why() -> None:
    # A client on the fabric that says rank 1's hello first takes rank 1's place (as with torch's own
    # store: the group has no secret); the real rank 1 is then refused in words that say what happened.
    port, out = free_port(), {}

    def rank(r: int) -> None:
        g = HostGroup.join(r, 3, ADDR, port, 20.0)
        out[r] = g.all_gather(r)
        g.close()

    zero = threading.Thread(target=rank, args=(0,))
    zero.start()
    deadline = time.monotonic() + 15
    while True:
        try:
            first = socket.create_connection((ADDR, port), timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline, "rank 0 never listened"
            time.sleep(0.02)
    with first:
        first.sendall(_frame({"rank": 1, "world": 3, "job": ""}))
        with pytest.raises(GroupError, match="refused rank 1: rank 1 has already joined"):
            HostGroup.join(1, 3, ADDR, port, 10.0)
        two = threading.Thread(target=rank, args=(2,))
        two.start()
        first.settimeout(20)
        assert first.recv(4096).endswith(b'{"welcome":3}')
        first.sendall(_frame("one"))
        zero.join(30)
        two.join(30)
    assert out == {0: [0, "one", 2], 2: [0, "one", 2]}, out


def test_a_value_over_the_frame_limit_is_refused_before_it_is_sent() -> None:
    a, b = socket.socketpair()
    with a, b, pytest.raises(GroupError, match="over the group's frame limit"):
        send_frame(a, "x" * (MAX_FRAME + 10))


def fake_rank_0(*answers: Any) -> socket.socket:
    """A listener that accepts one rank and answers each frame it reads with the next of ``answers``,
    then waits for the rank to close (the caller closes the listener)."""
    srv = socket.create_server((ADDR, 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            for answer in answers:
                conn.recv(4096)
                conn.sendall(_frame(answer))
            conn.recv(1)

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_rank_0_sending_something_else_than_the_list_is_an_error() -> None:
    with fake_rank_0({"welcome": 2}, {"not": "a list"}) as srv:
        g = HostGroup.join(1, 2, ADDR, srv.getsockname()[1], 5.0)
        with pytest.raises(GroupError, match="sent dict where a list of 2 was due"):
            g.all_gather(1)
        g.close()


def test_a_refusal_is_said_to_the_refused_rank() -> None:
    with (
        fake_rank_0({"refused": "another group's rank"}) as srv,
        pytest.raises(GroupError, match="refused rank 1: another group's rank"),
    ):
        HostGroup.join(1, 2, ADDR, srv.getsockname()[1], 5.0)


TWO_RANKS = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from sb_bench.core.context import RankContext
ctx = RankContext.from_env("host")
ctx.init_distributed(timeout_s=30)
got = ctx.all_gather([ctx.rank, os.environ["SB_LOCAL_ADDR"]])
ctx.barrier()
backend = ctx.backend
ctx.close()
print(json.dumps({"got": got, "backend": backend, "torch": "torch" in sys.modules}))
"""


def test_a_host_benchmarks_ranks_meet_without_torch_outside_torchrun() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
    env |= {"MASTER_ADDR": ADDR, "MASTER_PORT": str(port), "WORLD_SIZE": "2", "SB_RUN_ID": "r1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_RANKS, str(SUITE)],
            env=env | {"RANK": str(r), "SB_LOCAL_ADDR": f"127.0.0.{r + 1}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (1, 0)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    docs = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    for d in docs:
        assert d == {"got": [[0, "127.0.0.1"], [1, "127.0.0.2"]], "backend": "tcp", "torch": False}, d


def test_without_master_variables_the_group_says_what_is_missing() -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")
    }
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from sb_bench.core.context import RankContext\n"
        "ctx = RankContext.from_env('host')\n"
        "try:\n    ctx.init_distributed(timeout_s=5)\nexcept ConnectionError as e:\n    print(e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(SUITE)],
        env=env | {"RANK": "1", "WORLD_SIZE": "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "MASTER_ADDR and MASTER_PORT must name rank 0" in r.stdout, (r.stdout, r.stderr)
