// Drives hpcgate with the official TypeScript SDK 1.x (`@modelcontextprotocol/sdk`), over stdio
// (it starts `hpcgate run` itself) or streamable HTTP (a gateway the test started, with a
// tenant's bearer token), and prints one JSON report of what it saw (see exercise.mjs).
//
// Usage: node sdk1.mjs stdio HPCGATE_BINARY CONFIG_FILE HOME_DIR
//        node sdk1.mjs http URL BEARER_TOKEN

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

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
const client = new Client({ name: 'hpcgate-test-sdk1', version: '0' });
await client.connect(transport);
const report = await exercise(
  {
    listTools: () => client.listTools(),
    call: (name, args, onprogress) =>
      client.callTool({ name, arguments: args }, CallToolResultSchema, onprogress ? { onprogress } : {}),
  },
  'ts1',
  `from sdk 1.x over ${to.transport}`,
);
report.server = client.getServerVersion()?.name ?? null;
report.protocolVersion = transport.protocolVersion ?? null;
await client.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
