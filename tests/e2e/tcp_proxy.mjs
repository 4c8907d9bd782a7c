// A TCP forwarder for ws_failover.bats: a provider endpoint (HTTP and WebSocket alike) in front of
// one node, that a test can kill (every connection through it drops) or stop with SIGSTOP (its
// connections stay open and nothing moves: a stalled provider).
//   node tcp_proxy.mjs TARGET_PORT PORT_FILE   listens on a free port of 127.0.0.1, written to
//                                              PORT_FILE once listening
// SIGUSR2: refuse — every connection through it drops, and each new one is closed as soon as it
// is accepted (a provider that is down, on the same port); SIGHUP: forward again. (SIGUSR1 is
// Node's, for its inspector.)
import fs from "node:fs";
import net from "node:net";

const [target, portFile] = [Number(process.argv[2]), process.argv[3]];
const open = new Set();
let refusing = false;
const server = net.createServer((client) => {
  if (refusing) {
    client.destroy();
    return;
  }
  const up = net.connect(target, "127.0.0.1");
  client.pipe(up);
  up.pipe(client);
  const pair = { client, up };
  open.add(pair);
  const end = () => {
    open.delete(pair);
    client.destroy();
    up.destroy();
  };
  for (const s of [client, up]) {
    s.on("error", end);
    s.on("close", end);
  }
});
process.on("SIGUSR2", () => {
  refusing = true;
  for (const { client, up } of [...open]) {
    client.destroy();
    up.destroy();
  }
});
process.on("SIGHUP", () => {
  refusing = false;
});
server.listen(0, "127.0.0.1", () => {
  fs.writeFileSync(`${portFile}.tmp`, String(server.address().port));
  fs.renameSync(`${portFile}.tmp`, portFile);
});
