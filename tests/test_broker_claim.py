"""Test runs on one machine never share a Redis database: each claims its own (SET NX of a lock
key), a database holding keys of something else is passed over and left as it is, and a
released database can be claimed again."""

from __future__ import annotations

from tests.helpers import LOCK_KEY, OWNED_KEY, RedisClaim, database_of, with_database


def test_two_runs_claim_two_databases_and_a_released_one_is_claimed_again(redis_claim) -> None:  # type: ignore[no-untyped-def]
    ours = database_of(redis_claim.url)
    other = RedisClaim.claim(redis_claim.url)
    try:
        assert database_of(other.url) != ours  # held by this run: passed over
        third = RedisClaim.claim(redis_claim.url)
        assert database_of(third.url) not in (ours, database_of(other.url))
        third.release()
        again = RedisClaim.claim(redis_claim.url)
        assert again.url == third.url
        again.release()
    finally:
        other.release()


def test_a_database_with_keys_of_something_else_is_never_claimed_nor_emptied(redis_claim) -> None:  # type: ignore[no-untyped-def]
    first = RedisClaim.claim(redis_claim.url)
    client = first.client
    # make it look like another program's database: its own key, none of ours
    client.delete(OWNED_KEY)
    client.set("someone-else:queue", "job")
    client.delete(LOCK_KEY)
    try:
        second = RedisClaim.claim(redis_claim.url)
        assert second.url != first.url
        second.release()
        assert client.get("someone-else:queue") == b"job"
    finally:
        client.delete("someone-else:queue")  # the database as it was before the test: empty
        client.close()


def test_emptying_keeps_the_lock_and_the_marker(broker_url, redis_claim) -> None:  # type: ignore[no-untyped-def]
    client = redis_claim.client
    client.set("celery", "task")
    redis_claim.empty()
    assert sorted(client.keys()) == sorted([LOCK_KEY.encode(), OWNED_KEY.encode()])
    assert client.get(LOCK_KEY) == redis_claim.run_id.encode()
    assert broker_url == with_database(broker_url, database_of(broker_url))
