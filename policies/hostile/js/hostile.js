// A JavaScript policy that misbehaves on request (built by the e2e tests with
// scripts/componentize.sh, as `hpcgate policy new --lang js` builds one). Its config's
// `behaviour` picks what `evaluate` does with a call of the tool named `on` (default
// `submit_job`; any other call, and the list phase, is allowed, so a test can see the engine keep
// serving):
//
// | `behaviour` | what it does                                                               |
// |-------------|----------------------------------------------------------------------------|
// | `allow`     | behaves                                                                    |
// | `spin`      | `while (true) {}`                                                          |
// | `grow`      | keeps allocating until something stops it                                  |
// | `clock`     | denies with `Date.now()` and `performance.now()`                           |
// | `random`    | denies with `Math.random()`                                                |
// | `globals`   | denies with the type of every global that could reach files, environment or network |
//
// A probe that cannot run (a trap where WASI was stubbed out) faults, which denies the call.

let behaviour = "allow";
let trigger = "submit_job";

export function configure(settings) {
  const config = JSON.parse(settings);
  behaviour = config.behaviour ?? "allow";
  trigger = config.on ?? "submit_job";
}

export function evaluate(call) {
  if (call.tool !== trigger || call.phase !== "call") {
    return { tag: "allow" };
  }
  switch (behaviour) {
    case "spin":
      while (true) {}
    case "grow": {
      const hoard = [];
      while (true) {
        hoard.push(new Array(1 << 16).fill(hoard.length));
      }
    }
    case "clock":
      return deny({ date: Date.now(), performance: globalThis.performance?.now() ?? null });
    case "random":
      return deny({ random: Math.random() });
    case "globals": {
      const names = ["process", "require", "fetch", "XMLHttpRequest", "WebSocket", "Deno",
        "std", "os", "navigator"];
      return deny(Object.fromEntries(names.map((n) => [n, typeof globalThis[n]])));
    }
    default:
      return { tag: "allow" };
  }
}

function deny(report) {
  return { tag: "deny", val: JSON.stringify(report) };
}
