"""A client's share of the server (issue 43), on the app's own parts: its key (an IPv6
client by its /64), its places in the queue, its runs' progress, which no other client
can push out."""

from __future__ import annotations

import contextvars

import pytest

from attnviz.app.edge.clients import Clients
from attnviz.app.errors import Busy, OverClientLimit
from attnviz.app.request import CLIENT
from attnviz.app.runs.progress import KEPT_A_CLIENT, ProgressBoard
from attnviz.app.runs.scheduling import RunLimiter


def scope(peer: str, forwarded: str | None = None) -> dict:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    return {"type": "http", "client": (peer, 5000), "headers": headers}


def test_an_ipv6_client_is_keyed_by_its_64_and_a_mapped_ipv4_by_its_address():
    clients = Clients(8, 1200, trusted_proxies=["10.0.0.1"])
    one = clients.key(scope("2001:db8:1:2::1"))
    assert one == "2001:db8:1:2::/64"
    assert clients.key(scope("2001:db8:1:2:ffff:ffff:ffff:ffff")) == one
    assert clients.key(scope("2001:db8:1:3::1")) != one
    assert clients.key(scope("::ffff:192.0.2.7")) == "192.0.2.7"
    assert clients.key(scope("192.0.2.7")) == "192.0.2.7"
    # behind a trusted proxy, the client it was told by, keyed the same way
    assert clients.key(scope("10.0.0.1", "2001:db8:1:2::99")) == one
    assert clients.key(scope("10.0.0.1", "[2001:db8:1:2::5]:443")) == one


def test_x_forwarded_for_from_an_untrusted_peer_is_not_believed_and_is_warned_of_once(caplog):
    clients = Clients(8, 1200, trusted_proxies=[])
    with caplog.at_level("WARNING", logger="attnviz"):
        assert clients.key(scope("192.0.2.9", "198.51.100.1")) == "192.0.2.9"
        assert clients.key(scope("192.0.2.9", "198.51.100.2")) == "192.0.2.9"
    warned = [r for r in caplog.records if "ATTNVIZ_TRUSTED_PROXIES" in r.getMessage()]
    assert len(warned) == 1


def in_context(client: str, fn, *args):
    context = contextvars.copy_context()
    context.run(CLIENT.set, client)
    return context.run(fn, *args)


def test_one_client_holds_a_quarter_of_the_queue_and_the_others_still_get_places():
    limiter = RunLimiter(1, 16, shares=True)  # 17 places: a client's share is 4
    held = []

    def admit() -> None:
        manager = limiter.admission()
        manager.__enter__()
        held.append(manager)

    for _ in range(4):
        in_context("greedy", admit)
    with pytest.raises(OverClientLimit) as refused:
        in_context("greedy", admit)
    assert refused.value.headers == {"Retry-After": "1"}
    assert "its share" in refused.value.detail
    for client in ("b", "c", "d"):
        for _ in range(4):
            in_context(client, admit)
    in_context("e", admit)  # the seventeenth place
    with pytest.raises(Busy):
        in_context("f", admit)
    for manager in held:
        manager.__exit__(None, None, None)
    in_context("greedy", admit)  # its places given back


def test_a_clients_progress_is_its_own_and_cannot_be_pushed_out_by_another():
    board = ProgressBoard()
    in_context("patient", board._start, "long-run", 30)
    for i in range(300):  # another client's tiny requests, each with an id of its own
        in_context("noisy", board._start, f"r{i}", 6)
    assert in_context("patient", board.get, "long-run") is not None
    assert in_context("noisy", board.get, "long-run") is None  # (not another's to read)
    kept = [i for i in range(300) if in_context("noisy", board.get, f"r{i}") is not None]
    assert kept == list(range(300 - KEPT_A_CLIENT, 300))


def test_a_long_pass_takes_one_short_task_a_client_in_turn_and_puts_back_what_waits():
    """`FairQueue.take_between`: each client's first waiting task where it may run in a long
    pass's turn (`Between`), clients in turn; a client's other tasks keep their order. A
    task that ran (`lent`) was its client's turn; one put back keeps its client's place
    (it does not jump the queue), and one found too long is not taken again."""
    from concurrent.futures import Future
    from concurrent.futures.thread import _WorkItem

    from attnviz.app.runs.scheduling import Between, FairQueue

    queue = FairQueue()

    def task(name: str, between: bool) -> _WorkItem:
        call = (lambda: name) if not between else Between(lambda: name)
        return _WorkItem(Future(), call, (), {})

    sent = {
        "a": [task("a1", True), task("a2", True)],
        "b": [task("b1", False), task("b2", True)],  # (b2 stays behind b1)
        "c": [task("c1", True)],
        "d": [task("d1", False)],
    }
    for client, items in sent.items():
        for item in items:
            in_context(client, queue.put, item)
    taken = queue.take_between(8)
    assert [(client, item.fn()) for client, item in taken] == [("a", "a1"), ("c", "c1")]
    queue.lent("a")  # a1 ran: a to the back of the turn
    taken[1][1].fn.too_long = True
    queue.put_back(*taken[1])  # c1 did not: c keeps its place, before d
    again = queue.take_between(8)  # (c1 is too long now)
    assert [(client, item.fn()) for client, item in again] == [("a", "a2")]
    queue.put_back(*again[0])
    order = [queue.get_nowait().fn() for _ in range(5)]
    assert order == ["b1", "c1", "d1", "a2", "b2"]
    in_context("e", queue.put, task("e1", True))
    in_context("f", queue.put, task("f1", True))
    assert len(queue.take_between(1)) == 1  # (at most `most`)
