// A WebSocket client for websocket.bats, on the `ws` package (what viem and ethers use in Node),
// pinned in scripts/setup under .tools/ws-client. Prints one JSON line per event.
//
//   node ws_client.mjs call URL MESSAGE...   send each message, print each answer, exit when every
//                                            message with an id was answered (or the socket closed)
//   node ws_client.mjs open URL [HEADER=VALUE...]   the handshake alone: {"open":true} or the
//                                            refusal's status and body, then close with 1000
//   node ws_client.mjs hold URL              stay open; print the close (code, reason) when it comes
//   node ws_client.mjs slow URL BATCHES      one client floods batches without reading, another
//                                            calls meanwhile: print what each saw
//   node ws_client.mjs subs URL CLIENTS EVENTS PARAMS METRICS_URL   CLIENTS subscriptions with the
//                                            same PARAMS, EVENTS newHeads each, then unsubscribed
//   node ws_client.mjs listen URL PARAMS SECONDS   one subscription: its id, then one line per
//                                            event (the head's number and the subscription; an
//                                            error notification as {"ended": ERROR}) for
//                                            SECONDS, then close with 1000 (or the server's close)
//   node ws_client.mjs logs URL FILTER       a logs subscription (FILTER: its filter object): its
//                                            id, then one line per log ({"log":[blockNumber,
//                                            logIndex, blockHash, removed]}, numbers as numbers);
//                                            an error notification as {"ended": ERROR}; runs until
//                                            killed or the server closes ({"close":…})
//   node ws_client.mjs follow URL HEADS LOG_FILTER NODE_URL   newHeads and logs (LOG_FILTER: the
//                                            logs subscription's filter object) on one socket
//                                            until HEADS heads came ({"head":N} for each), then a
//                                            summary: the heads' order, gaps and duplicates, and
//                                            the logs against eth_getLogs asked of NODE_URL
//   node ws_client.mjs heads URL HEADS        newHeads until HEADS heads came ({"head":N} for
//                                            each), then a summary: gaps, duplicates, breaks (a
//                                            head whose parentHash is not the hash of the head
//                                            before), errors; a close before that: {"close":…}
//   node ws_client.mjs chain URL SECONDS NODE_URL   newHeads for SECONDS ({"head":N} for each),
//                                            then a summary: reorgs seen (a head not above the
//                                            one before), breaks (a head whose parent is not the
//                                            last head delivered at the height below), and heads
//                                            whose last hash delivered is not NODE_URL's now
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const repo = process.env.REPO ?? path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const WebSocket = require(path.join(repo, ".tools/ws-client/node_modules/ws"));

const [mode, url, ...rest] = process.argv.slice(2);
const print = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const limit = setTimeout(() => {
  print({ timeout: true });
  process.exit(3);
}, Number(process.env.WS_CLIENT_LIMIT_MS ?? 30000));

function expectedAnswers(text) {
  try {
    const body = JSON.parse(text);
    if (Array.isArray(body)) return body.some((c) => c && c.id !== undefined) ? 1 : 0;
    return body && body.id === undefined ? 0 : 1;
  } catch {
    return 1; // a parse error is answered too
  }
}

function done(code = 0) {
  clearTimeout(limit);
  process.exit(code);
}

if (mode === "call") {
  const ws = new WebSocket(url);
  let waiting = rest.reduce((n, m) => n + expectedAnswers(m), 0);
  ws.on("open", () => {
    for (const m of rest) ws.send(m);
    if (waiting === 0) setTimeout(() => ws.close(1000), 300);
  });
  ws.on("message", (data) => {
    print({ answer: JSON.parse(data.toString()) });
    if (--waiting === 0) ws.close(1000);
  });
  ws.on("unexpected-response", (_req, res) => {
    print({ refused: res.statusCode });
    done(2);
  });
  ws.on("close", (code, reason) => {
    print({ close: code, reason: reason.toString() });
    done(waiting > 0 ? 1 : 0);
  });
  ws.on("error", (e) => print({ error: e.message }));
} else if (mode === "open") {
  const headers = Object.fromEntries(rest.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
  const ws = new WebSocket(url, { headers });
  ws.on("open", () => {
    print({ open: true });
    ws.close(1000);
  });
  ws.on("unexpected-response", (_req, res) => {
    let body = "";
    res.on("data", (d) => (body += d));
    res.on("end", () => {
      print({ refused: res.statusCode, body });
      done(0);
    });
  });
  ws.on("close", () => done(0));
  ws.on("error", (e) => print({ error: e.message }));
} else if (mode === "hold") {
  const ws = new WebSocket(url);
  ws.on("open", () => print({ open: true }));
  ws.on("close", (code, reason) => {
    print({ close: code, reason: reason.toString() });
    done(0);
  });
  ws.on("error", (e) => print({ error: e.message }));
} else if (mode === "slow") {
  // A stops reading (its socket paused) and sends BATCHES batches of 1000 eth_chainId (answered
  // without a provider, ~40 KB each); B calls eth_chainId every 50 ms meanwhile. After B's calls,
  // A reads again and should find its close frame (1008) behind what the kernel held.
  const batches = Number(rest[0] ?? 400);
  const batch = JSON.stringify(Array.from({ length: 1000 }, (_, i) => ({ jsonrpc: "2.0", id: i, method: "eth_chainId" })));
  const a = new WebSocket(url);
  const b = new WebSocket(url);
  const summary = { a_answers: 0, b_answers: 0, b_max_ms: 0 };
  let opened = 0;
  const start = () => {
    if (++opened < 2) return;
    a._socket.pause();
    for (let i = 0; i < batches; ++i) a.send(batch);
    let n = 0;
    const tick = setInterval(() => {
      const sent = Date.now();
      b.send(JSON.stringify({ jsonrpc: "2.0", id: n, method: "eth_chainId" }));
      b.once("message", () => {
        summary.b_answers++;
        summary.b_max_ms = Math.max(summary.b_max_ms, Date.now() - sent);
      });
      if (++n === 40) {
        clearInterval(tick);
        setTimeout(() => a._socket.resume(), 500);
      }
    }, 50);
  };
  a.on("open", start);
  b.on("open", start);
  a.on("message", () => summary.a_answers++);
  a.on("close", (code, reason) => {
    summary.a_close = code;
    summary.a_reason = reason.toString();
    // B's last answers may still be on their way on a loaded machine: up to 5 s more for them.
    const until = Date.now() + 5000;
    const finish = () => {
      if (summary.b_answers < 40 && Date.now() < until) return void setTimeout(finish, 50);
      summary.b_open = b.readyState === WebSocket.OPEN;
      print(summary);
      b.close(1000);
      done(0);
    };
    finish();
  });
  a.on("error", (e) => (summary.a_error = e.message));
  b.on("error", (e) => (summary.b_error = e.message));
} else if (mode === "subs") {
  // CLIENTS sockets each subscribe with PARAMS (JSON) and take EVENTS events; /metrics (METRICS
  // URL) is read while they are all subscribed and again after they unsubscribed.
  const [clients, events, params, metrics] = [Number(rest[0]), Number(rest[1]), rest[2], rest[3]];
  const gauge = async () => {
    const text = await (await fetch(metrics)).text();
    const m = text.match(/^rpcroute_websocket_upstream_subscriptions (\d+)$/m);
    return m ? Number(m[1]) : null;
  };
  const one = () =>
    new Promise((resolve) => {
      const ws = new WebSocket(url);
      const got = { id: null, numbers: [], stray: 0 };
      ws.on("open", () => ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: JSON.parse(params) })));
      ws.on("message", (data) => {
        const m = JSON.parse(data.toString());
        if (m.id === 1) {
          got.id = m.result ?? null;
          got.error = m.error;
          if (!m.result) resolve({ got, ws });
        } else if (m.id === 2) {
          got.unsubscribed = m.result;
          ws.close(1000);
        } else if (m.method === "eth_subscription" && m.params.subscription === got.id) {
          // Past EVENTS (the others may still be waiting for theirs), events are not counted.
          if (got.numbers.length < events) got.numbers.push(Number(m.params.result.number));
          if (got.numbers.length === events) resolve({ got, ws });
        } else {
          got.stray++;
        }
      });
      ws.on("close", () => resolve({ got, ws }));
    });
  const all = await Promise.all(Array.from({ length: clients }, one));
  const during = await gauge();
  await Promise.all(
    all.map(({ got, ws }) =>
      new Promise((resolve) => {
        ws.on("close", resolve);
        if (ws.readyState !== WebSocket.OPEN) return resolve();
        ws.send(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "eth_unsubscribe", params: [got.id] }));
      }),
    ),
  );
  let after = await gauge();
  for (let i = 0; i < 50 && after !== 0; ++i) {
    await new Promise((r) => setTimeout(r, 100));
    after = await gauge();
  }
  const got = all.map((x) => x.got);
  print({
    ids: new Set(got.map((g) => g.id)).size,
    errors: got.filter((g) => g.error).map((g) => g.error.message),
    in_order: got.every((g) => g.numbers.every((n, i) => i === 0 || n === g.numbers[i - 1] + 1)),
    counts: [...new Set(got.map((g) => g.numbers.length))],
    unsubscribed: [...new Set(got.map((g) => g.unsubscribed))],
    stray: got.reduce((n, g) => n + g.stray, 0),
    upstream_during: during,
    upstream_after: after,
  });
  done(0);
} else if (mode === "listen") {
  const [params, seconds] = [rest[0], Number(rest[1])];
  const ws = new WebSocket(url);
  ws.on("open", () => ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: JSON.parse(params) })));
  ws.on("message", (data) => {
    const m = JSON.parse(data.toString());
    if (m.id === 1) print({ id: m.result ?? null, error: m.error ?? null });
    else if (m.method === "eth_subscription" && m.params.error) print({ ended: m.params.error, subscription: m.params.subscription });
    else if (m.method === "eth_subscription") print({ number: Number(m.params.result.number), subscription: m.params.subscription });
  });
  ws.on("close", (code, reason) => {
    print({ close: code, reason: reason.toString() });
    done(0);
  });
  setTimeout(() => ws.close(1000), seconds * 1000);
} else if (mode === "logs") {
  clearTimeout(limit); // ends when the test kills it
  const ws = new WebSocket(url);
  ws.on("open", () => ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["logs", JSON.parse(rest[0])] })));
  ws.on("message", (data) => {
    const m = JSON.parse(data.toString());
    if (m.id === 1) print({ id: m.result ?? null, error: m.error ?? null });
    else if (m.method === "eth_subscription" && m.params.error) print({ ended: m.params.error });
    else if (m.method === "eth_subscription") {
      const l = m.params.result;
      print({ log: [Number(l.blockNumber), Number(l.logIndex), l.blockHash, l.removed === true] });
    }
  });
  ws.on("close", (code, reason) => {
    print({ close: code, reason: reason.toString() });
    done(0);
  });
  ws.on("error", (e) => print({ error: e.message }));
} else if (mode === "follow") {
  const [heads, filter, nodeUrl] = [Number(rest[0]), JSON.parse(rest[1]), rest[2]];
  const ws = new WebSocket(url);
  const ids = {};
  const numbers = [];
  const logs = [];
  const errors = [];
  let finished = false;
  ws.on("open", () => {
    ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] }));
    ws.send(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "eth_subscribe", params: ["logs", filter] }));
  });
  const finish = async () => {
    finished = true;
    ws.close(1000);
    const first = numbers[0];
    const last = numbers[numbers.length - 1];
    const gaps = [];
    let dups = 0;
    for (let i = 1; i < numbers.length; ++i) {
      if (numbers[i] === numbers[i - 1]) dups++;
      else if (numbers[i] !== numbers[i - 1] + 1) gaps.push([numbers[i - 1], numbers[i]]);
    }
    // The logs of the blocks both subscriptions surely covered, against the node's own answer.
    const lo = first + 1;
    const hi = last - 1;
    const hex = (n) => "0x" + n.toString(16);
    const res = await fetch(nodeUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_getLogs", params: [{ ...filter, fromBlock: hex(lo), toBlock: hex(hi) }] }),
    });
    const expected = (await res.json()).result.map((l) => `${l.blockHash}/${l.logIndex}`);
    const inRange = logs.filter((l) => Number(l.blockNumber) >= lo && Number(l.blockNumber) <= hi);
    const live = new Map();
    let logDups = 0;
    for (const l of inRange) {
      const key = `${l.blockHash}/${l.logIndex}`;
      if (l.removed) live.delete(key);
      else if (live.has(key)) logDups++;
      else live.set(key, l);
    }
    const want = new Set(expected);
    print({
      heads: numbers.length,
      first,
      last,
      gaps,
      dups,
      in_order: gaps.length === 0 && dups === 0,
      logs_expected: expected.length,
      logs_missing: expected.filter((k) => !live.has(k)).length,
      logs_extra: [...live.keys()].filter((k) => !want.has(k)).length,
      logs_dups: logDups,
      removed: logs.filter((l) => l.removed).length,
      errors,
    });
    done(0);
  };
  ws.on("message", (data) => {
    const m = JSON.parse(data.toString());
    if (m.id === 1 || m.id === 2) {
      if (m.error) errors.push(m.error.message);
      ids[m.id === 1 ? "heads" : "logs"] = m.result;
    } else if (m.method === "eth_subscription" && m.params.subscription === ids.heads) {
      if (finished) return;
      numbers.push(Number(m.params.result.number));
      print({ head: numbers[numbers.length - 1] });
      if (numbers.length === heads) finish();
    } else if (m.method === "eth_subscription" && m.params.subscription === ids.logs) {
      logs.push(m.params.result);
    }
  });
  ws.on("close", (code, reason) => {
    if (!finished) {
      print({ close: code, reason: reason.toString(), heads: numbers.length });
      done(1);
    }
  });
  ws.on("error", (e) => errors.push(e.message));
} else if (mode === "heads") {
  const want = Number(rest[0]);
  const ws = new WebSocket(url);
  const heads = [];
  const errors = [];
  let id = null;
  let finished = false;
  ws.on("open", () => ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] })));
  ws.on("message", (data) => {
    const m = JSON.parse(data.toString());
    if (m.id === 1) {
      if (m.error) errors.push(m.error.message);
      id = m.result ?? null;
    } else if (m.method === "eth_subscription" && m.params.subscription === id && !finished) {
      const h = m.params.result;
      heads.push({ number: Number(h.number), hash: h.hash, parent: h.parentHash });
      print({ head: Number(h.number) });
      if (heads.length < want) return;
      finished = true;
      ws.close(1000);
      const gaps = [];
      let dups = 0;
      let breaks = 0;
      for (let i = 1; i < heads.length; ++i) {
        const [a, b] = [heads[i - 1], heads[i]];
        if (b.number === a.number) dups++;
        else if (b.number !== a.number + 1) gaps.push([a.number, b.number]);
        if (b.number === a.number + 1 && b.parent !== a.hash) breaks++;
      }
      print({
        heads: heads.length,
        first: heads[0].number,
        last: heads[heads.length - 1].number,
        gaps,
        dups,
        breaks,
        in_order: gaps.length === 0 && dups === 0 && breaks === 0,
        errors,
      });
      done(0);
    }
  });
  ws.on("close", (code, reason) => {
    if (!finished) {
      print({ close: code, reason: reason.toString(), heads: heads.length });
      done(1);
    }
  });
  ws.on("error", (e) => errors.push(e.message));
} else if (mode === "chain") {
  const [seconds, nodeUrl] = [Number(rest[0]), rest[1]];
  const ws = new WebSocket(url);
  const heads = [];
  ws.on("open", () => ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] })));
  ws.on("message", (data) => {
    const m = JSON.parse(data.toString());
    if (m.method !== "eth_subscription") return;
    const h = m.params.result;
    heads.push({ n: Number(h.number), hash: h.hash, parent: h.parentHash });
    print({ head: Number(h.number) });
  });
  setTimeout(async () => {
    ws.close(1000);
    const latest = new Map(); // number → the last hash delivered at it
    let reorgs = 0;
    let breaks = 0;
    let dups = 0;
    for (let i = 0; i < heads.length; ++i) {
      const h = heads[i];
      if (i > 0 && h.n <= heads[i - 1].n) reorgs++;
      if (latest.get(h.n) === h.hash) dups++;
      if (latest.has(h.n - 1) && latest.get(h.n - 1) !== h.parent) breaks++;
      // A head replaces what was delivered at its height and above.
      for (const n of [...latest.keys()]) if (n >= h.n) latest.delete(n);
      latest.set(h.n, h.hash);
    }
    let stale = 0;
    for (const [n, hash] of latest) {
      const res = await fetch(nodeUrl, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_getBlockByNumber", params: ["0x" + n.toString(16), false] }),
      });
      const b = (await res.json()).result;
      if (!b || b.hash !== hash) stale++;
    }
    print({ heads: heads.length, reorgs, breaks, dups, stale });
    done(0);
  }, seconds * 1000);
} else {
  print({ usage: "call|open|hold|slow|subs|listen|follow|heads|chain URL ..." });
  done(2);
}
