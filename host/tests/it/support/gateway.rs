//! Helpers shared by the in-process gateway tests: a gateway on a temp state directory with a
//! test config layered over the embedded defaults, callers, and result checks.

use std::path::Path;

use hpcgate::config::{Environment, Settings, load};
use hpcgate::gateway::{CallResult, Caller, Gateway};
use hpcgate::jobs::SUPERVISE_SUBCOMMAND;
use hpcgate::state::TenantName;
use hpcgate_executors::sandbox::SupervisorCommand;
use serde_json::{Map, Value, json};

/// A gateway whose state lives under `dir/state`, configured by `config` over the defaults.
/// Local jobs are supervised by the real `hpcgate` binary (the test binary cannot).
pub fn open(dir: &Path, config: &str) -> Gateway {
    let supervisor = SupervisorCommand::reexec(env!("CARGO_BIN_EXE_hpcgate"), SUPERVISE_SUBCOMMAND);
    Gateway::open_with_supervisor(settings(dir, config).unwrap(), supervisor).unwrap()
}

/// [`open`], with tenant chem's instance `run1` created; and chem.
pub fn open_with_chems_run1(dir: &Path, config: &str) -> (Gateway, Caller) {
    let gw = open(dir, config);
    let chem = caller("chem");
    ok(gw.call(
        &chem,
        "create_instance",
        args(json!({"instance_id": "run1"})),
    ));
    (gw, chem)
}

/// The settings [`open`] uses: `config` written to `dir/gateway.toml` and layered.
pub fn settings(dir: &Path, config: &str) -> anyhow::Result<Settings> {
    let file = dir.join("gateway.toml");
    let toml = format!(
        "state_dir = {:?}\n{config}",
        dir.join("state").display().to_string()
    );
    std::fs::write(&file, toml).unwrap();
    let env = Environment {
        home: Some(dir.join("home")),
        config_home: None,
        data_home: None,
        explicit: Some(file),
    };
    let mut settings = load(&env)?.settings()?;
    settings.fixed.engine.cache_dir = Some(super::shared::policy_cache());
    Ok(settings)
}

pub fn caller(tenant: &str) -> Caller {
    Caller {
        tenant: TenantName::parse(tenant).unwrap(),
        principal: format!("{tenant}-user"),
    }
}

pub fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("arguments are objects"),
    }
}

/// The structured result of a call that must succeed.
pub fn ok(result: CallResult) -> Value {
    assert!(!result.is_error, "{}", result.text);
    result.structured
}

/// The message of a call that must fail.
pub fn err(result: CallResult) -> String {
    assert!(
        result.is_error,
        "expected an error, got {}",
        result.structured
    );
    result.text
}
