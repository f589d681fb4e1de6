#!/usr/bin/python3
"""bucketd example for Python, with redis-py.

A burst of 12 TB.ACQUIRE calls on a bucket of capacity 10 refilling at
1 token per second (10 allowed, 2 denied), one TB.ACQUIRE ... WITHINFO to see
how long to wait, then TB.RESET.

    BUCKETD_ADDR=127.0.0.1:6380 /usr/bin/python3 examples/python/bucketd_example.py
"""
import os
import uuid

import redis

CAPACITY = 10  # the bucket holds at most 10 tokens
RATE = 1  # and refills at 1 token per second


def main():
    addr = os.environ.get("BUCKETD_ADDR") or "127.0.0.1:6380"
    host, _, port = addr.rpartition(":")
    r = redis.Redis(host=host.strip("[]"), port=int(port))

    # A key of its own per run, so runs don't share a bucket.
    key = f"example:python:{uuid.uuid4().hex}"

    # TB.ACQUIRE key capacity rate [cost] answers 1 (allowed) or 0 (denied).
    for i in range(1, 13):
        allowed = r.execute_command("TB.ACQUIRE", key, CAPACITY, RATE)
        print(f"acquire {i}: {'allowed' if allowed == 1 else 'denied'}")

    # With WITHINFO: [allowed, remaining, retry_after_ms, reset_after_ms].
    allowed, remaining, retry_after_ms, reset_after_ms = r.execute_command(
        "TB.ACQUIRE", key, CAPACITY, RATE, 1, "WITHINFO"
    )
    print(
        f"withinfo: allowed={allowed} remaining={remaining} "
        f"retry_after_ms={retry_after_ms} reset_after_ms={reset_after_ms}"
    )

    # TB.RESET key [key ...] answers how many buckets it removed.
    print(f"reset: {r.execute_command('TB.RESET', key)}")
    r.close()


if __name__ == "__main__":
    main()
