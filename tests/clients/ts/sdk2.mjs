// Drives hpcgate with the official TypeScript SDK 2.x (`@modelcontextprotocol/client`), over
// stdio (it starts `hpcgate run` itself) or streamable HTTP (a gateway the test started, with a
// tenant's bearer token), and prints one JSON report of what it saw (see exercise.mjs). Over
// HTTP it negotiates the protocol era (`auto`: the 2026-07-28 `server/discover` probe first),
// over stdio it keeps the SDK's default legacy handshake, so both eras are covered.
//
// Usage: node sdk2.mjs stdio HPCGATE_BINARY CONFIG_FILE HOME_DIR
//        node sdk2.mjs http URL BEARER_TOKEN

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import { exercise, gatewayEnv, target } from './exercise.mjs';

const to = target(process.argv.slice(2));
const transport =
  to.transport === 'stdio'
    ? new StdioClientTransport({
        command: to.binary,
        args: ['run', '--config', to.config],
        env: gatewayEnv(to.home),
      })
    : new StreamableHTTPClientTransport(new URL(to.url), {
        requestInit: { headers: { Authorization: `Bearer ${to.token}` } },
      });
const client = new Client(
  { name: 'hpcgate-test-sdk2', version: '0' },
  to.transport === 'http' ? { versionNegotiation: { mode: 'auto' } } : {},
);
await client.connect(transport);
const report = await exercise(
  {
    listTools: () => client.listTools(),
    call: (name, args, onprogress) =>
      client.callTool({ name, arguments: args }, onprogress ? { onprogress } : {}),
  },
  'ts2',
  `from sdk 2.x over ${to.transport}`,
);
report.server = client.getServerVersion()?.name ?? null;
report.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
await client.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
