// viem over WebSocket (its webSocket() transport, as apps use it) against the sidecar, for
// websocket.bats: chain id, block number, and 20 balance reads in flight at once on one socket.
// Prints one JSON line. viem is pinned in scripts/setup under .tools/ws-client.
//
//   node viem_client.mjs URL ADDRESS
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const repo = process.env.REPO ?? path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const { createPublicClient, webSocket } = require(path.join(repo, ".tools/ws-client/node_modules/viem"));

const [url, address] = process.argv.slice(2);
const limit = setTimeout(() => {
  console.log(JSON.stringify({ timeout: true }));
  process.exit(3);
}, 30000);
const client = createPublicClient({ transport: webSocket(url, { retryCount: 0 }) });
try {
  const chainId = await client.getChainId();
  const block = await client.getBlockNumber();
  const balances = await Promise.all(Array.from({ length: 20 }, () => client.getBalance({ address })));
  console.log(JSON.stringify({
    chainId,
    block: Number(block),
    balances: [...new Set(balances.map(String))],
    count: balances.length,
  }));
  clearTimeout(limit);
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ error: String(e.shortMessage ?? e.message) }));
  process.exit(1);
}
