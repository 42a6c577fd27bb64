// What every official TypeScript client must be able to do with hpcgate, whichever SDK
// generation drives it: list the tools, create an instance, write, stat and read a file, get a
// policy denial back as a tool error, and run a job while progress notifications arrive. Returns
// the report (plain JSON) that host/tests/it/mcp_typescript.rs asserts on.

/** Tools whose definition the report carries in full (name, inputSchema). */
const SHOWN = ['create_instance', 'stat_path', 'write_file', 'read_file', 'submit_job'];

/**
 * The parts of a tool result the tests look at: whether it is an error, its text blocks joined,
 * and its structured content.
 */
function seen(result) {
  if (result.clientError !== undefined) return { clientError: result.clientError };
  const text = (result.content ?? [])
    .filter((block) => block.type === 'text')
    .map((block) => block.text)
    .join('\n');
  return { isError: result.isError === true, text, structured: result.structuredContent ?? null };
}

/**
 * Runs the exercise. `listTools()` and `call(name, args, onprogress)` wrap the SDK at hand (the
 * two generations' `callTool` differ in their parameters); `instance` names the instance to use
 * and `content` what to write into it.
 */
export async function exercise({ listTools, call: sdkCall }, instance, content) {
  // A result the SDK itself refuses (its checks of a result against the tool's outputSchema
  // throw) is recorded as `clientError`, and the exercise goes on, so one report names every
  // call a client rejects.
  const call = async (name, args, onprogress) => {
    try {
      return await sdkCall(name, args, onprogress);
    } catch (error) {
      return { clientError: String(error?.message ?? error) };
    }
  };
  const tools = (await listTools()).tools;
  const shown = {};
  for (const tool of tools.filter((t) => SHOWN.includes(t.name))) {
    shown[tool.name] = { inputSchema: tool.inputSchema };
  }
  const report = {
    tools: tools.map((t) => t.name).sort(),
    shown,
  };
  report.created = seen(await call('create_instance', { instance_id: instance }));
  report.written = seen(
    await call('write_file', { instance_id: instance, path: 'hello.txt', content }),
  );
  report.stat = seen(await call('stat_path', { instance_id: instance, path: 'hello.txt' }));
  report.read = seen(await call('read_file', { instance_id: instance, path: 'hello.txt' }));
  // The embedded default policies refuse writes into .git.
  report.denied = seen(
    await call('write_file', { instance_id: instance, path: '.git/config', content: 'x' }),
  );
  // A job that runs for a few seconds: the gateway reports progress about once a second while
  // the call waits for it, with the progress token the SDK put on the request.
  const progress = [];
  const job = await call(
    'submit_job',
    { instance_id: instance, command: `sleep 2.5; echo finished ${instance}`, timeout: 30 },
    (update) => progress.push({ progress: update.progress, total: update.total ?? null }),
  );
  report.job = { ...seen(job), progress };
  return report;
}

/** The command line every client program takes, parsed. */
export function target(argv) {
  const [transport, ...rest] = argv;
  if (transport === 'stdio' && rest.length === 3) {
    const [binary, config, home] = rest;
    return { transport, binary, config, home };
  }
  if (transport === 'http' && rest.length === 2) {
    const [url, token] = rest;
    return { transport, url, token };
  }
  throw new Error(
    'usage: stdio HPCGATE_BINARY CONFIG_FILE HOME_DIR | http URL BEARER_TOKEN',
  );
}

/** The environment of a gateway the client starts over stdio: a private HOME, nothing else. */
export function gatewayEnv(home) {
  const env = { HOME: home, PATH: '/usr/bin:/bin' };
  // The shared compiled-policy cache of the test run, when the test names one.
  if (process.env.XDG_CACHE_HOME) env.XDG_CACHE_HOME = process.env.XDG_CACHE_HOME;
  return env;
}
