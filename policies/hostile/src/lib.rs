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
//! | `rewrite`      | rewrites: the arguments with the `set` object merged in              |
//! | `usage-cap`    | denies with every usage counter, as JSON, when `counter` > `max`     |
//! | `huge-reason`  | denies with an 8 MiB reason                                          |
//! | `huge-rewrite` | rewrites with a 2 MiB arguments object                               |
//! | `bad-json`     | rewrites with arguments that are not JSON                            |
//! | `not-object`   | rewrites with a JSON array                                           |
//! | `log-flood`    | logs 10,000 lines, then allows                                       |
//! | `reject`       | refuses its settings in `configure`                                  |
//!
//! `"in": "configure"` runs `spin`, `grow` or `trap` in `configure` instead of `evaluate`.
//! It implements the raw WIT exports (not the SDK's `Policy` trait) so that it can return what
//! a well-behaved policy never would.

#[cfg(target_arch = "wasm32")]
mod guest {
    use std::sync::Mutex;

    use hpcgate_policy_sdk::bindings::Guest;
    use hpcgate_policy_sdk::bindings::hpcgate::policy::log::{Level, log};
    use hpcgate_policy_sdk::bindings::hpcgate::policy::types::{Call, Decision, Rewrite};
    use serde_json::{Map, Value};

    struct Settings {
        behaviour: String,
        in_configure: bool,
        set: Map<String, Value>,
        counter: String,
        max: u64,
    }

    static SETTINGS: Mutex<Option<Settings>> = Mutex::new(None);
    static COUNT: Mutex<u64> = Mutex::new(0);
    static HOARD: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

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
            let set = value["set"].as_object().cloned().unwrap_or_default();
            *SETTINGS.lock().unwrap() = Some(Settings {
                behaviour,
                in_configure,
                set,
                counter: value["counter"].as_str().unwrap_or_default().to_owned(),
                max: value["max"].as_u64().unwrap_or(u64::MAX),
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

    hpcgate_policy_sdk::bindings::export!(Hostile);
}
