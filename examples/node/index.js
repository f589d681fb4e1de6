// bucketd example for Node.js, with ioredis: a burst of 12 TB.ACQUIRE calls
// on a bucket of capacity 10 refilling at 1 token per second (10 allowed,
// 2 denied), one TB.ACQUIRE ... WITHINFO to see how long to wait, then
// TB.RESET.
//
//   cd examples/node && npm ci && BUCKETD_ADDR=127.0.0.1:6380 node index.js
import { randomUUID } from "node:crypto";
import Redis from "ioredis";

const CAPACITY = 10; // the bucket holds at most 10 tokens
const RATE = 1; // and refills at 1 token per second

const addr = process.env.BUCKETD_ADDR || "127.0.0.1:6380";
const sep = addr.lastIndexOf(":");
const redis = new Redis({
  host: addr.slice(0, sep).replace(/^\[|\]$/g, ""),
  port: Number(addr.slice(sep + 1)),
  lazyConnect: true, // connect below, so that a missing server fails at once
});

// A key of its own per run, so runs don't share a bucket.
const key = `example:node:${randomUUID()}`;

try {
  await redis.connect();

  // TB.ACQUIRE key capacity rate [cost] answers 1 (allowed) or 0 (denied).
  for (let i = 1; i <= 12; i++) {
    const allowed = await redis.call("TB.ACQUIRE", key, CAPACITY, RATE);
    console.log(`acquire ${i}: ${allowed === 1 ? "allowed" : "denied"}`);
  }

  // With WITHINFO: [allowed, remaining, retry_after_ms, reset_after_ms].
  const [allowed, remaining, retryAfterMs, resetAfterMs] = await redis.call(
    "TB.ACQUIRE", key, CAPACITY, RATE, 1, "WITHINFO",
  );
  console.log(
    `withinfo: allowed=${allowed} remaining=${remaining} ` +
      `retry_after_ms=${retryAfterMs} reset_after_ms=${resetAfterMs}`,
  );

  // TB.RESET key [key ...] answers how many buckets it removed.
  console.log(`reset: ${await redis.call("TB.RESET", key)}`);
} finally {
  redis.disconnect();
}
