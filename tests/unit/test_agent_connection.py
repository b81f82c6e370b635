"""The agent's per-connection state machine (agent/connection.py): its legal moves, stated once,
and the deadline each state gets.  No root, no selector, no fork: a socketpair stands in for a
client."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest

from cnichain.agent import connection
from cnichain.agent.config import GO_TIMEOUT, KILL_GRACE, READ_TIMEOUT
from cnichain.agent.connection import CNI, GO, LEGAL, METRICS, READ, RUN, WAIT, Conn, IllegalTransition

LIMIT = 60.0


@pytest.fixture
def pair() -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair()
    yield ours
    ours.close()
    theirs.close()


def test_the_table_is_the_handshake_forward_only() -> None:
    """read -> go -> (wait ->) run and nothing else: a shim told GO must never also run cold once a
    worker has its request; a queued one (wait) either gets a worker or is closed before anything ran."""
    assert LEGAL == {READ: {GO}, GO: {WAIT, RUN}, WAIT: {RUN}, RUN: set()}


def test_a_queued_connection_waits_its_bound_then_runs_with_its_go_time_kept(pair: socket.socket) -> None:
    conn = Conn(pair, CNI, 100.0)
    conn.acked(101.0)
    conn.wait(102.0, 6.0)
    assert (conn.state, conn.deadline, conn.started) == (WAIT, 108.0, 102.0)
    assert conn.waiting and not conn.running and not conn.handshaking
    conn.run(105.0, LIMIT)
    assert conn.running and conn.started == 102.0  # its time counts from GO, the queue included
    with pytest.raises(IllegalTransition):
        conn.wait(106.0, 6.0)


def test_a_cni_connection_moves_read_go_run_with_each_states_deadline(pair: socket.socket) -> None:
    conn = Conn(pair, CNI, 100.0)
    assert (conn.state, conn.deadline) == (READ, 100.0 + READ_TIMEOUT)
    assert conn.handshaking and not conn.running
    conn.acked(101.0)
    assert (conn.state, conn.deadline) == (GO, 101.0 + GO_TIMEOUT)
    assert conn.handshaking and not conn.running
    conn.run(102.0, LIMIT)
    assert (conn.state, conn.deadline, conn.started) == (RUN, 102.0 + LIMIT + KILL_GRACE, 102.0)
    assert conn.running and not conn.handshaking
    conn.disarm()
    assert conn.deadline == 0.0 and conn.state == RUN


@pytest.mark.parametrize("path", [(RUN,), (GO, GO), (GO, READ), (GO, RUN, GO), (GO, RUN, RUN), (GO, RUN, READ)])
def test_an_illegal_transition_raises_and_leaves_the_connection_as_it_was(
    pair: socket.socket, path: tuple[str, ...]
) -> None:
    conn = Conn(pair, CNI, 100.0)
    *legal, illegal = path
    for state in legal:
        conn._move(state, 101.0, LIMIT)
    before = (conn.state, conn.deadline)
    with pytest.raises(IllegalTransition):
        conn._move(illegal, 200.0, LIMIT)
    assert (conn.state, conn.deadline) == before


def test_the_named_transitions_refuse_out_of_order_use(pair: socket.socket) -> None:
    conn = Conn(pair, CNI, 100.0)
    with pytest.raises(IllegalTransition):
        conn.run(101.0, LIMIT)  # GO was never received: no worker may start
    conn.acked(101.0)
    with pytest.raises(IllegalTransition):
        conn.acked(102.0)  # one ACK per connection
    conn.run(103.0, LIMIT)
    with pytest.raises(IllegalTransition):
        conn.acked(104.0)


def test_a_metrics_connection_is_never_handshaking(pair: socket.socket) -> None:
    """Drain refuses only CNI connections before GO; a metrics one just gets its answer."""
    conn = Conn(pair, METRICS, 100.0)
    assert conn.state == READ and conn.deadline == 100.0 + READ_TIMEOUT
    assert not conn.handshaking and not conn.running


def test_every_state_has_a_deadline_and_an_unknown_one_is_a_bug() -> None:
    for state in LEGAL:
        assert connection.deadline_for(state, 10.0, LIMIT) > 10.0
    with pytest.raises(IllegalTransition):
        connection.deadline_for("done", 10.0, LIMIT)


def test_closing_the_namespace_fds_is_idempotent(pair: socket.socket) -> None:
    import os

    conn = Conn(pair, CNI, 0.0)
    conn.net_fd, conn.mnt_fd = os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_RDONLY)
    fds = (conn.net_fd, conn.mnt_fd)
    conn.close_ns_fds()
    conn.close_ns_fds()
    assert (conn.net_fd, conn.mnt_fd) == (-1, -1)
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
