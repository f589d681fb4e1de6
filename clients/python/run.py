"""run.py: run a list of commands and transactions against bucketd with
redis-py in its default configuration, and print the replies.

    BUCKETD_ADDR=127.0.0.1:6380 [BUCKETD_PASSWORD=pw] python3 run.py < steps.json

steps.json is a JSON array of {"cmd": ["TB.ACQUIRE", "k", "10", "1"]} (one
command) or {"tx": [[...], [...]]} (a transaction: redis-py's default
pipeline(), which is MULTI/EXEC). The output is one JSON object
{"client", "version", "results"} with one result per step: a number, a
string, null, a list, or {"error": "message"} for an error reply. clients/go
runs this script (python_test.go) and checks the results; this script checks
nothing. It is clients/node/run.mjs for Python.

The client is redis.Redis(host, port), plus the password when
BUCKETD_PASSWORD is set: redis-py 4.x (Debian's python3-redis) speaks RESP2
by default and sends nothing at connect without a password.
"""

import json
import os
import sys

import redis


def norm(v):
    """Turn a redis-py reply into plain JSON: bytes become strings, errors
    {"error": message}."""
    if isinstance(v, Exception):
        return {"error": str(v)}
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {str(norm(k)): norm(x) for k, x in v.items()}
    return v


def run_tx(r, cmds):
    """One transaction through the default pipeline() (MULTI ... EXEC).
    raise_on_error=False returns an error inside EXEC's array in its place,
    as the other clients' results show it, instead of raising the first."""
    pipe = r.pipeline()
    for args in cmds:
        pipe.execute_command(*args)
    return pipe.execute(raise_on_error=False)


def main():
    host, _, port = os.environ["BUCKETD_ADDR"].rpartition(":")
    password = os.environ.get("BUCKETD_PASSWORD") or None
    steps = json.load(sys.stdin)
    r = redis.Redis(host=host, port=int(port), password=password)
    results = []
    for step in steps:
        try:
            if "tx" in step:
                results.append(norm(run_tx(r, step["tx"])))
            else:
                results.append(norm(r.execute_command(*step["cmd"])))
        except redis.RedisError as e:
            results.append({"error": str(e)})
    r.close()
    print(json.dumps({"client": "redis-py", "version": redis.__version__, "results": results}))


if __name__ == "__main__":
    main()
