// run.mjs: run a list of commands and transactions against bucketd with one
// Node.js Redis client in its default configuration, and print the replies.
//
//   BUCKETD_ADDR=127.0.0.1:6380 [BUCKETD_PASSWORD=pw] node run.mjs CLIENT < steps.json
//
// CLIENT is node-redis, ioredis or glide. steps.json is a JSON array of
// {"cmd": ["TB.ACQUIRE", "k", "10", "1"]} (one command) or
// {"tx": [[...], [...]]} (a transaction: the client's own MULTI/EXEC API).
// The output is one JSON object: {"client", "version", "results"}, with one
// result per step: a number, a string, null, an array, an object (a map
// reply), or {"error": "message"} for an error reply. clients/go runs this
// script (node_test.go) and checks the results; this script checks nothing.
//
// Each client is created as its README shows, with only the host and port
// (and the password when BUCKETD_PASSWORD is set; glide also gets a longer
// request timeout): whatever the client sends at connect by default
// (HELLO 3, CLIENT SETINFO, ...) goes to bucketd.
import { readFileSync } from 'node:fs';

const name = process.argv[2];
const [host, portText] = (process.env.BUCKETD_ADDR || '').split(/:(?=\d+$)/);
const port = Number(portText);
const password = process.env.BUCKETD_PASSWORD || undefined;

// A client that cannot connect retries forever by default (node-redis,
// ioredis, glide until its timeout): give up after 30 s with the last error
// it reported, so that the test fails with a reason instead of hanging.
let lastError = 'none';
setTimeout(() => {
  console.error(`${name}: gave up after 30 s; last error: ${lastError}`);
  process.exit(1);
}, 30_000).unref();

// version reads the installed package's version from node_modules (not
// every package exports its package.json).
function version(pkg) {
  return JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))).version;
}

// norm turns a client's reply into plain JSON: errors become {error},
// Maps and glide's [{key, value}] records become objects, bigints numbers,
// Buffers strings.
function norm(v) {
  if (v instanceof Error) return { error: v.message };
  if (typeof v === 'bigint') return Number(v);
  if (Buffer.isBuffer(v)) return v.toString();
  if (v instanceof Map) return Object.fromEntries([...v].map(([k, x]) => [String(k), norm(x)]));
  if (Array.isArray(v)) {
    if (v.length > 0 && v.every((e) => e && typeof e === 'object' && !Array.isArray(e) && 'key' in e && 'value' in e)) {
      return Object.fromEntries(v.map((e) => [String(e.key), norm(e.value)]));
    }
    return v.map(norm);
  }
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, norm(x)]));
  return v === undefined ? null : v;
}

// Each adapter: connect() resolves to {version, cmd(args), tx(cmds), close()};
// tx resolves to EXEC's array (errors in place) or rejects with the error
// the client raised for the whole transaction.
const adapters = {
  async 'node-redis'() {
    const { createClient } = await import('redis');
    const c = createClient({ socket: { host, port }, password });
    c.on('error', (e) => { lastError = e.message; });
    await c.connect();
    return {
      version: version('redis'),
      cmd: (args) => c.sendCommand(args),
      async tx(cmds) {
        const m = c.multi();
        for (const args of cmds) m.addCommand(args);
        try {
          return await m.exec();
        } catch (e) {
          if (e.replies) return e.replies; // MultiErrorReply: errors in place
          throw e;
        }
      },
      close: () => c.close(),
    };
  },

  async ioredis() {
    const { default: Redis } = await import('ioredis');
    const r = new Redis({ host, port, password });
    r.on('error', (e) => { lastError = e.message; });
    await new Promise((resolve) => r.once('ready', resolve));
    return {
      version: version('ioredis'),
      cmd: (args) => r.call(...args),
      async tx(cmds) {
        const m = r.multi();
        for (const args of cmds) m.call(...args);
        const res = await m.exec();
        return res === null ? null : res.map(([err, val]) => err || val);
      },
      close: () => r.quit(),
    };
  },

  async glide() {
    const { default: glide } = await import('@valkey/valkey-glide');
    const { GlideClient, Batch } = glide;
    // Only the request timeout differs from the default (250 ms, for the
    // round trip and any reconnection): a busy test machine must not fail
    // the test. It changes nothing glide sends.
    const config = { addresses: [{ host, port }], requestTimeout: 10_000 };
    if (password) config.credentials = { password };
    const c = await GlideClient.createClient(config);
    return {
      version: version('@valkey/valkey-glide'),
      cmd: (args) => c.customCommand(args),
      tx(cmds) {
        const b = new Batch(true); // atomic: MULTI/EXEC
        for (const args of cmds) b.customCommand(args);
        return c.exec(b, false); // errors in place, as the other clients
      },
      close: async () => c.close(),
    };
  },
};

async function main() {
  if (!adapters[name]) throw new Error(`unknown client ${name}; want one of ${Object.keys(adapters).join(', ')}`);
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const steps = JSON.parse(Buffer.concat(chunks).toString());
  const client = await adapters[name]();
  const results = [];
  for (const step of steps) {
    try {
      results.push(norm(step.tx ? await client.tx(step.tx) : await client.cmd(step.cmd)));
    } catch (e) {
      results.push({ error: e.message });
    }
  }
  await client.close();
  process.stdout.write(JSON.stringify({ client: name, version: client.version, results }) + '\n');
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`${name}: ${e.stack || e}; last error event: ${lastError}`);
    process.exit(1);
  },
);
