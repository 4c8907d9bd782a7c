// The dashboard in a real browser (dashboard.bats): headless Chromium driven over the DevTools
// protocol (a minimal WebSocket client below: Node before 22 has none). Loads the page, fails
// on any console error or uncaught exception, waits until every provider of the profile has a row,
// checks the pause button holds the feed, kills one provider (SIGKILL to its pid) while sending
// traffic through the sidecar, measures how long until its row shows the open breaker, and keeps a
// screenshot. Prints one JSON line with what it saw; exits 1 when a check fails.
//
// Usage: node dashboard_browser.js SIDECAR_URL PROVIDERS KILL_ID KILL_PID
//          SCREENSHOT PROFILE_DIR      (PROVIDERS: comma-separated ids)
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");

const [sidecar, providerList, killId, killPid, screenshot, profileDir] = process.argv.slice(2);
const providers = providerList.split(",");
const chromium = process.env.CHROMIUM || "chromium";
const result = { providers: [], errors: [], open_after_ms: null, paused_held: null };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let browser = null;  // the chromium process: killed on every way out
function killBrowser() {
  try { if (browser) process.kill(-browser.pid, "SIGKILL"); } catch (e) { /* gone already */ }
}

function fail(why) {
  killBrowser();
  result.failure = why;
  console.log(JSON.stringify(result));
  process.exit(1);
}

async function launch() {
  const args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--remote-debugging-port=0", "--user-data-dir=" + profileDir, "--window-size=1400,1000",
    "about:blank"];
  // Its own process group: the zygote and renderers go with it (killBrowser).
  const proc = spawn(chromium, args, { stdio: ["ignore", "ignore", "pipe"], detached: true });
  browser = proc;
  let text = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("chromium gave no DevTools URL")), 30000);
    proc.stderr.on("data", (d) => {
      text += d;
      const m = text.match(/DevTools listening on (ws:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on("exit", (code) => reject(new Error("chromium exited " + code + ": " + text.slice(-500))));
  });
  return { proc, url };
}

/// A WebSocket client for the DevTools socket: text frames out (masked), text frames in.
function miniWebSocket(url) {
  const http = require("http"), crypto = require("crypto");
  const u = new URL(url);
  const ws = { onopen: null, onmessage: null, onerror: null };
  const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, headers: {
    Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": crypto.randomBytes(16).toString("base64") } });
  req.on("upgrade", (res, socket) => {
    let buf = Buffer.alloc(0), parts = [];
    socket.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 2) {
        const fin = buf[0] & 0x80, op = buf[0] & 0x0f;
        let len = buf[1] & 0x7f, off = 2;
        if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
        else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); off = 10; }
        if (buf.length < off + len) return;
        const payload = buf.subarray(off, off + len);
        buf = buf.subarray(off + len);
        if (op !== 0x0 && op !== 0x1) continue;  // ping, pong, close: not needed here
        parts.push(payload);
        if (fin) { const data = Buffer.concat(parts).toString(); parts = []; ws.onmessage({ data }); }
      }
    });
    ws.send = (text) => {
      const p = Buffer.from(text), mask = crypto.randomBytes(4);
      let head;
      if (p.length < 126) head = Buffer.from([0x81, 0x80 | p.length]);
      else if (p.length < 65536) { head = Buffer.from([0x81, 0x80 | 126, 0, 0]); head.writeUInt16BE(p.length, 2); }
      else { head = Buffer.alloc(10); head[0] = 0x81; head[1] = 0x80 | 127; head.writeBigUInt64BE(BigInt(p.length), 2); }
      for (let i = 0; i < p.length; ++i) p[i] ^= mask[i & 3];
      socket.write(Buffer.concat([head, mask, p]));
    };
    ws.close = () => socket.destroy();
    ws.onopen();
  });
  req.on("error", (e) => ws.onerror && ws.onerror(e));
  req.end();
  return ws;
}

function connect(url) {
  const ws = miniWebSocket(url);
  let next = 1;
  const pending = new Map(), listeners = [];
  ws.onmessage = (ev) => {
    const msg = JSON.parse(ev.data);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error))); else resolve(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg);
    }
  };
  const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
    const id = next++;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, method, params, sessionId }));
  });
  return new Promise((resolve, reject) => {
    ws.onopen = () => resolve({ ws, send, on: (l) => listeners.push(l) });
    ws.onerror = () => reject(new Error("DevTools socket failed"));
  });
}

async function rpc(method) {
  try {
    await fetch(sidecar + "/rpc/local", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: [] }) });
  } catch (e) { /* a 503 or a reset while a provider dies is fine here */ }
}

async function main() {
  const { proc, url } = await launch();
  const cdp = await connect(url);
  const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: true });
  const page = (m, p) => cdp.send(m, p, sessionId);
  cdp.on((msg) => {
    if (msg.sessionId !== sessionId) return;
    const p = msg.params;
    if (msg.method === "Runtime.consoleAPICalled" && (p.type === "error" || p.type === "assert"))
      result.errors.push("console." + p.type + ": " + p.args.map((a) => a.value ?? a.description).join(" "));
    if (msg.method === "Runtime.exceptionThrown")
      result.errors.push("exception: " + (p.exceptionDetails.exception?.description ?? p.exceptionDetails.text));
    if (msg.method === "Log.entryAdded" && p.entry.level === "error")
      result.errors.push("log: " + p.entry.text + " " + (p.entry.url ?? ""));
  });
  await page("Runtime.enable");
  await page("Log.enable");
  await page("Page.enable");
  await page("Page.navigate", { url: sidecar + "/" });
  const evaluate = async (expr) => (await page("Runtime.evaluate", { expression: expr, returnByValue: true })).result.value;
  const rows = () => evaluate(`[...document.querySelectorAll("tr[data-breaker]")].map((r) => [r.dataset.provider, r.dataset.breaker])`);

  // Every provider listed.
  let deadline = Date.now() + 15000, seen = [];
  while (Date.now() < deadline) {
    seen = (await rows()) || [];
    if (providers.every((p) => seen.some((r) => r[0] === p))) break;
    await sleep(100);
  }
  result.providers = seen.map((r) => r[0]);
  if (!providers.every((p) => result.providers.includes(p))) fail("not every provider is listed");

  // Pause holds the feed; resume shows what was held.
  const feedRows = () => evaluate(`document.querySelector("#feed tbody").rows.length`);
  await evaluate(`document.getElementById("pause").click()`);
  const before = await feedRows();
  for (let i = 0; i < 5; ++i) await rpc("eth_blockNumber");
  await sleep(800);
  const during = await feedRows();
  await evaluate(`document.getElementById("pause").click()`);
  await sleep(100);
  const after = await feedRows();
  result.paused_held = { before, during, after };
  if (during !== before || after <= before) fail("the pause button did not hold the feed");

  // Kill one provider under traffic: its row must show the open breaker within 2 s.
  const t0 = Date.now();
  process.kill(Number(killPid), "SIGKILL");
  let open = false;
  while (Date.now() - t0 < 10000 && !open) {
    await Promise.all([rpc("eth_blockNumber"), rpc("eth_gasPrice")]);
    open = ((await rows()) || []).some((r) => r[0] === killId && r[1] === "open");
    if (!open) await sleep(20);
  }
  result.open_after_ms = open ? Date.now() - t0 : null;
  await sleep(300);  // let the feed and the charts settle for the picture
  const shot = await page("Page.captureScreenshot", { format: "png", captureBeyondViewport: true });
  fs.writeFileSync(screenshot, Buffer.from(shot.data, "base64"));
  result.screenshot_bytes = fs.statSync(screenshot).size;
  cdp.ws.close();
  killBrowser();
  if (!open) fail("the killed provider's row never showed an open breaker");
  if (result.open_after_ms > 2000) fail("the open breaker showed after more than 2 s");
  if (result.errors.length) fail("the page logged errors");
  console.log(JSON.stringify(result));
}

main().catch((e) => fail(String(e && e.stack || e)));
