//! A policy guest that misbehaves on request. Its config picks the behaviour and when it
//! happens, so one small component covers every hostile case the engine must survive:
//!
//! | `behaviour`    | what it does                                                         |
//! |----------------|----------------------------------------------------------------------|
//! | `allow`/`deny` | behaves                                                              |
//! | `spin`         | loops forever                                                        |
//! | `grow`         | allocates (and touches) memory until something stops it             |
//! | `trap`         | panics (a trap, since guests abort on panic)                         |
//! | `count`        | denies with `count=N`, N = evaluations this instance has seen        |
//! | `echo`         | denies with the arguments it received, as JSON                       |
//! | `via`          | denies with `via=<via> job=<job or ->`: how the call came in         |
//! | `deny-via`     | denies calls that came in `via` = the `via` setting, allows the rest |
//! | `rewrite`      | rewrites: the arguments with the `set` object merged in              |
//! | `usage-cap`    | denies with every usage counter, as JSON, when `counter` > `max`     |
//! | `huge-reason`  | denies with an 8 MiB reason                                          |
//! | `huge-rewrite` | rewrites with a 2 MiB arguments object                               |
//! | `bad-json`     | rewrites with arguments that are not JSON                            |
//! | `not-object`   | rewrites with a JSON array                                           |
//! | `log-flood`    | logs 10,000 lines, then allows                                       |
//! | `reject`       | refuses its settings in `configure`                                  |
//! | `ballast`      | denies with `ballast=N`, N = the sum of the ballast's bytes          |
//!
//! Built for `wasm32-wasip2` (as `hostile-wasi`), it also probes the WASI context the host
//! links (built for `wasm32-unknown-unknown`, these deny with "not built for WASI"):
//!
//! | `behaviour`       | what it does                                                      |
//! |-------------------|-------------------------------------------------------------------|
//! | `wasi-probe`      | denies with a JSON report of what WASI gave it (see `wasi_probe`) |
//! | `sleep`           | sleeps a minute on a monotonic-clock pollable, then allows        |
//! | `hoard-pollables` | subscribes to the clock forever, keeping every pollable           |
//! | `exit`            | calls `exit(3)`                                                   |
//! | `random-flood`    | asks for 1 MiB of random bytes in one call                        |
//! | `print-flood`     | prints 1,000 lines of 1 KB to stderr (250× what is kept); allows  |
//!
//! `"in": "configure"` runs `spin`, `grow` or `trap` in `configure` instead of `evaluate`.
//! `"ballast_kib": N` makes `configure` slow and stateful: it fills N KiB with a pattern that
//! evaluations can check (`ballast`), whatever the behaviour.
//! It implements the raw WIT exports (not the SDK's `Policy` trait) so that it can return what
//! a well-behaved policy never would.

#[cfg(target_arch = "wasm32")]
mod guest {
    use std::sync::Mutex;

    use hpcgate_policy_sdk::bindings::Guest;
    use hpcgate_policy_sdk::bindings::hpcgate::policy::log::{Level, log};
    use hpcgate_policy_sdk::bindings::hpcgate::policy::types::{Call, Decision, Rewrite, Via};
    use serde_json::{Map, Value};

    struct Settings {
        behaviour: String,
        in_configure: bool,
        set: Map<String, Value>,
        counter: String,
        max: u64,
        via: String,
        /// For `busy`: how many rounds of arithmetic an evaluation does.
        rounds: u64,
    }

    static SETTINGS: Mutex<Option<Settings>> = Mutex::new(None);
    static COUNT: Mutex<u64> = Mutex::new(0);
    static HOARD: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    static BALLAST: Mutex<Vec<u8>> = Mutex::new(Vec::new());

    fn misbehave(behaviour: &str) {
        match behaviour {
            "spin" => {
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "grow" => loop {
                let chunk = vec![1u8; 1 << 20];
                HOARD.lock().unwrap().push(std::hint::black_box(chunk));
            },
            "trap" => panic!("hostile guest traps on purpose"),
            _ => {}
        }
    }

    struct Hostile;

    impl Guest for Hostile {
        fn configure(settings: String) -> Result<(), String> {
            let value: Value = serde_json::from_str(&settings).map_err(|e| e.to_string())?;
            let behaviour = value["behaviour"].as_str().unwrap_or("allow").to_owned();
            let in_configure = value["in"].as_str() == Some("configure");
            if behaviour == "reject" {
                return Err("hostile guest rejects its settings".into());
            }
            if in_configure {
                misbehave(&behaviour);
            }
            let ballast = value["ballast_kib"].as_u64().unwrap_or(0) as usize * 1024;
            *BALLAST.lock().unwrap() = (0..ballast).map(|i| (i % 251) as u8).collect();
            let set = value["set"].as_object().cloned().unwrap_or_default();
            *SETTINGS.lock().unwrap() = Some(Settings {
                behaviour,
                in_configure,
                set,
                counter: value["counter"].as_str().unwrap_or_default().to_owned(),
                max: value["max"].as_u64().unwrap_or(u64::MAX),
                via: value["via"].as_str().unwrap_or_default().to_owned(),
                rounds: value["rounds"].as_u64().unwrap_or(0),
            });
            Ok(())
        }

        fn evaluate(call: Call) -> Decision {
            let guard = SETTINGS.lock().unwrap();
            let settings = guard.as_ref().expect("configured");
            if !settings.in_configure {
                misbehave(&settings.behaviour);
            }
            match settings.behaviour.as_str() {
                "deny" => Decision::Deny("hostile guest says no".into()),
                "count" => {
                    let mut count = COUNT.lock().unwrap();
                    *count += 1;
                    Decision::Deny(format!("count={count}"))
                }
                "echo" => Decision::Deny(call.arguments),
                "busy" => {
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
                    for _ in 0..settings.rounds {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x = std::hint::black_box(x ^ (x << 17));
                    }
                    Decision::Deny(format!("busy={x}"))
                }
                "ballast" => {
                    let sum: u64 = BALLAST.lock().unwrap().iter().map(|b| u64::from(*b)).sum();
                    Decision::Deny(format!("ballast={sum}"))
                }
                "via" => {
                    let job = call.job.as_deref().unwrap_or("-");
                    Decision::Deny(format!("via={} job={job}", via_name(call.via)))
                }
                "deny-job" if call.job.is_some() => {
                    Decision::Deny(format!("`{}` is refused to a job's code", call.tool))
                }
                "deny-via" if via_name(call.via) == settings.via => Decision::Deny(format!(
                    "`{}` is refused to calls via `{}`",
                    call.tool, settings.via
                )),
                "usage-cap" => {
                    let usage: Map<String, Value> = call
                        .usage
                        .iter()
                        .map(|c| (c.name.clone(), Value::from(c.value)))
                        .collect();
                    match usage.get(&settings.counter).and_then(Value::as_u64) {
                        Some(value) if value > settings.max => {
                            Decision::Deny(format!("over quota: {}", Value::Object(usage)))
                        }
                        _ => Decision::Allow,
                    }
                }
                "rewrite" => {
                    let mut arguments: Map<String, Value> =
                        serde_json::from_str(&call.arguments).unwrap_or_default();
                    arguments.extend(settings.set.clone());
                    Decision::Rewrite(Rewrite {
                        arguments: Value::Object(arguments).to_string(),
                        note: "hostile guest rewrote".into(),
                    })
                }
                "huge-reason" => Decision::Deny("x".repeat(8 << 20)),
                "huge-rewrite" => Decision::Rewrite(Rewrite {
                    arguments: format!("{{\"blob\": \"{}\"}}", "y".repeat(2 << 20)),
                    note: String::new(),
                }),
                "bad-json" => Decision::Rewrite(Rewrite {
                    arguments: "{not json".into(),
                    note: String::new(),
                }),
                "not-object" => Decision::Rewrite(Rewrite {
                    arguments: "[1, 2]".into(),
                    note: String::new(),
                }),
                "wasi-probe" | "sleep" | "hoard-pollables" | "exit" | "random-flood"
                | "print-flood" => super::wasi::probe(&settings.behaviour),
                "log-flood" => {
                    for i in 0..10_000 {
                        log(Level::Info, &format!("line {i} {}", "z".repeat(1000)));
                    }
                    Decision::Allow
                }
                _ => Decision::Allow,
            }
        }
    }

    fn via_name(via: Via) -> &'static str {
        match via {
            Via::Mcp => "mcp",
            Via::Cli => "cli",
            Via::Dav => "dav",
            Via::Job => "job",
        }
    }

    hpcgate_policy_sdk::bindings::export!(Hostile);
}

#[cfg(all(target_arch = "wasm32", not(target_os = "wasi")))]
mod wasi {
    use hpcgate_policy_sdk::bindings::hpcgate::policy::types::Decision;

    pub fn probe(_behaviour: &str) -> Decision {
        Decision::Deny("not built for WASI".into())
    }
}

// Writing to stdout and stderr is what these probes test the host against.
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
#[allow(clippy::print_stdout, clippy::print_stderr)]
mod wasi {
    use std::collections::HashMap;
    use std::hash::BuildHasher;
    use std::io::Read;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use hpcgate_policy_sdk::bindings::hpcgate::policy::types::Decision;
    use serde_json::json;
    use wasip2::clocks::monotonic_clock;

    /// Long enough that a sleep the host let happen would show; short enough not to hang a test.
    const SLEEP: Duration = Duration::from_secs(60);

    pub fn probe(behaviour: &str) -> Decision {
        match behaviour {
            "sleep" => {
                monotonic_clock::subscribe_duration(SLEEP.as_nanos() as u64).block();
                Decision::Allow
            }
            "hoard-pollables" => {
                let mut hoard = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(monotonic_clock::subscribe_duration(1)));
                }
            }
            "exit" => std::process::exit(3),
            "print-flood" => {
                for i in 0..1_000 {
                    eprintln!("line {i} {}", "z".repeat(1000));
                }
                Decision::Allow
            }
            "random-flood" => {
                let bytes = wasip2::random::random::get_random_bytes(1 << 20);
                Decision::Deny(format!("got {} random bytes", bytes.len()))
            }
            _ => Decision::Deny(wasi_probe().to_string()),
        }
    }

    /// What the WASI context gives: each entry is what a policy would see.
    fn wasi_probe() -> serde_json::Value {
        let error = |e: std::io::Error| format!("error: {}", e.kind());
        let started = Instant::now();
        std::thread::sleep(SLEEP);
        let mut stdin = String::new();
        let random = std::collections::hash_map::RandomState::new().hash_one(42u64);
        let mut map: HashMap<u32, u32> = (0..64).map(|i| (i, i)).collect();
        map.insert(64, 64);
        println!("a policy writes to stdout");
        eprintln!("a policy writes to stderr");
        json!({
            "env": std::env::vars().count(),
            "args": std::env::args().count(),
            "read_passwd": std::fs::read("/etc/passwd").map(|b| b.len().to_string()).unwrap_or_else(error),
            "list_root": std::fs::read_dir("/").map(|d| d.count().to_string()).unwrap_or_else(error),
            "list_cwd": std::fs::read_dir(".").map(|d| d.count().to_string()).unwrap_or_else(error),
            "write_tmp": std::fs::write("/tmp/hpcgate-policy-probe", b"x").map(|()| "written".to_owned()).unwrap_or_else(error),
            "stdin": std::io::stdin().read_to_string(&mut stdin).map(|n| n.to_string()).unwrap_or_else(error),
            "wall_ns": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(u64::MAX),
            "slept_ns": started.elapsed().as_nanos() as u64,
            "monotonic_ns": monotonic_clock::now(),
            "random": random.to_string(),
            "random_bytes": wasip2::random::random::get_random_bytes(8),
            "insecure_bytes": wasip2::random::insecure::get_insecure_random_bytes(8),
            "map_order": map.keys().take(8).copied().collect::<Vec<_>>(),
        })
    }
}
