//! `hpcgate tenant list|add|token`: tenant administration, every run audited.
//!
//! `add` and `token --config FILE` edit one config file with `toml_edit` (comments and layout
//! stay), check the result as the gateway would load it (every layer, resolved), and replace
//! the file atomically (temp file in the same directory with the same permissions, then
//! rename). The audit record is appended first (write-ahead, like a tool call); it names the
//! action, tenant, label and file, never a token or a hash. A new token is printed once, last,
//! and only after everything else succeeded.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use serde_json::json;
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

use super::out;
use crate::audit::{AuditLog, Entry, Event};
use crate::auth::bearer::{generate_token, hash_token};
use crate::auth::local_principal;
use crate::config::{
    Config, DEFAULT_CONFIG, Environment, Settings, load, load_settings, merge_texts,
};
use crate::state::TenantName;

#[derive(Debug, Subcommand)]
pub(crate) enum TenantCommand {
    /// List tenants with their token labels (never hashes), uids, quotas and rate limits.
    List {
        /// The top layer (default `$HPCGATE_CONFIG`).
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Add `[tenants.<name>]` to a config file (refused if it exists).
    Add {
        name: String,
        /// A Unix uid whose socket connections are this tenant (repeatable).
        #[arg(long = "uid")]
        uids: Vec<u32>,
        #[arg(long)]
        max_instances: Option<usize>,
        #[arg(long)]
        max_running_jobs: Option<usize>,
        /// The file to edit (also the top configuration layer).
        #[arg(long)]
        config: PathBuf,
    },
    /// Create a bearer token for a tenant and print it once; with `--config`, add its hash to
    /// that file's `[tenants.<tenant>] tokens`.
    Token {
        tenant: String,
        /// Names the token in the audit log, e.g. who holds it (unique per tenant).
        #[arg(long)]
        label: String,
        /// The file to edit; without it, the entry to add is printed.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// `path` made absolute (against the working directory) for messages and audit records.
fn shown(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_owned())
        .display()
        .to_string()
}

pub(crate) fn run(command: TenantCommand) -> anyhow::Result<ExitCode> {
    match command {
        TenantCommand::List { config, json } => list(config, json),
        TenantCommand::Add {
            name,
            uids,
            max_instances,
            max_running_jobs,
            config,
        } => add(&name, &uids, max_instances, max_running_jobs, &config),
        TenantCommand::Token {
            tenant,
            label,
            config,
        } => token(&tenant, &label, config.as_deref()),
    }
}

fn list(config: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&Environment::from_process(config))?;
    audit(
        &settings,
        Entry::new(Event::TenantAdmin).detail("action", "list"),
    )?;
    let tenants: Vec<_> = settings
        .tenants
        .iter()
        .map(|(name, t)| {
            let limits: serde_json::Map<_, _> = t
                .rate_limits
                .iter()
                .map(|(tool, limit)| (tool.clone(), json!(limit.to_string())))
                .collect();
            json!({
                "name": name.as_str(),
                "tokens": t.tokens.iter().map(|k| k.label.as_str()).collect::<Vec<_>>(),
                "unix_uids": t.unix_uids,
                "quotas": {
                    "max_instances": t.quotas.max_instances,
                    "max_running_jobs": t.quotas.max_running_jobs,
                    "max_workspace_bytes": t.quotas.max_workspace_bytes,
                    "max_output_bytes": t.quotas.max_output_bytes,
                },
                "rate_limits": limits,
            })
        })
        .collect();
    if json {
        out(json!({
            "single_tenant": settings.single_tenant(),
            "stdio_tenant": settings.stdio_tenant.as_str(),
            "tenants": tenants,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    if settings.single_tenant() {
        out(format!(
            "single-tenant: no [tenants]; every caller is `{}`",
            settings.stdio_tenant
        ));
        return Ok(ExitCode::SUCCESS);
    }
    for (name, t) in &settings.tenants {
        let labels: Vec<_> = t.tokens.iter().map(|k| k.label.as_str()).collect();
        let q = &t.quotas;
        let quota = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
        out(format!(
            "{name}: tokens [{}], uids [{}], max_instances {}, max_running_jobs {}, max_workspace_bytes {}, max_output_bytes {}{}",
            labels.join(", "),
            t.unix_uids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            quota(q.max_instances.map(|v| v.to_string())),
            quota(q.max_running_jobs.map(|v| v.to_string())),
            quota(q.max_workspace_bytes.map(|v| v.to_string())),
            quota(q.max_output_bytes.map(|v| v.to_string())),
            if t.rate_limits.is_empty() {
                String::new()
            } else {
                let limits: Vec<_> = t
                    .rate_limits
                    .iter()
                    .map(|(tool, l)| format!("{tool}: {l}"))
                    .collect();
                format!(", rate limits [{}]", limits.join("; "))
            }
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn add(
    name: &str,
    uids: &[u32],
    max_instances: Option<usize>,
    max_running_jobs: Option<usize>,
    path: &Path,
) -> anyhow::Result<ExitCode> {
    TenantName::parse(name).with_context(|| format!("cannot add tenant `{name}`"))?;
    let env = Environment::from_process(Some(path.to_owned()));
    let settings = load(&env)?.settings()?;
    let mut doc = read_document(path)?;
    let tenants = doc
        .entry("tenants")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .with_context(|| format!("`tenants` in `{}` is not a table", path.display()))?;
    if tenants.contains_key(name) {
        bail!(
            "tenant `{name}` already exists in `{}`; edit it there, or add tokens with `hpcgate tenant token {name} --label <label> --config {}`",
            path.display(),
            path.display()
        );
    }
    let mut table = Table::new();
    table.insert("tokens", toml_edit::value(Array::new()));
    table.insert(
        "unix_uids",
        toml_edit::value(uids.iter().map(|u| i64::from(*u)).collect::<Array>()),
    );
    let mut quotas = InlineTable::new();
    for (key, value) in [
        ("max_instances", max_instances),
        ("max_running_jobs", max_running_jobs),
    ] {
        if let Some(v) = value {
            quotas.insert(key, Value::from(i64::try_from(v).context("too large")?));
        }
    }
    if !quotas.is_empty() {
        table.insert("quotas", toml_edit::value(quotas));
    }
    tenants.insert(name, Item::Table(table));
    let text = doc.to_string();
    check_layered(&env, path, &text)?;
    audit(
        &settings,
        Entry::new(Event::TenantAdmin)
            .detail("action", "add")
            .detail("tenant", name)
            .detail("config", shown(path)),
    )?;
    replace_file(path, &text)?;
    out(format!("added [tenants.{name}] to `{}`", path.display()));
    Ok(ExitCode::SUCCESS)
}

fn token(tenant: &str, label: &str, path: Option<&Path>) -> anyhow::Result<ExitCode> {
    let name =
        TenantName::parse(tenant).with_context(|| format!("cannot make a token for `{tenant}`"))?;
    if label.trim().is_empty() {
        bail!("the label must not be empty; name the token (e.g. who holds it)");
    }
    let env = Environment::from_process(path.map(Path::to_owned));
    let settings = load(&env)?.settings()?;
    let configured = settings.tenants.get(&name);
    if configured.is_some_and(|t| t.tokens.iter().any(|k| k.label == label)) {
        bail!(
            "tenant `{tenant}` already has a token labelled `{label}`; choose another label (or remove the old entry to replace it)"
        );
    }
    let token = generate_token().context("cannot read random bytes from the OS")?;
    let sha256 = hex::encode(hash_token(&token));
    let mut entry = InlineTable::new();
    entry.insert("label", Value::from(label));
    entry.insert("sha256", Value::from(sha256.as_str()));
    let mut record = Entry::new(Event::TenantAdmin)
        .detail("action", "token")
        .detail("tenant", tenant)
        .detail("label", label);
    let edited = match path {
        Some(path) => {
            let mut doc = read_document(path)?;
            add_token(&mut doc, tenant, label, entry.clone(), path)?;
            let text = doc.to_string();
            check_layered(&env, path, &text)?;
            record = record.detail("config", shown(path));
            Some((path, text))
        }
        None => None,
    };
    audit(&settings, record)?;
    if let Some((path, text)) = &edited {
        replace_file(path, text)?;
    }
    out(&token);
    out(
        "# the token above is shown only this once; clients send it as `Authorization: Bearer <token>`",
    );
    match edited {
        Some((path, _)) => out(format!(
            "# added to [tenants.{tenant}] tokens in `{}`: {entry}",
            path.display()
        )),
        None => {
            out(format!("# add to [tenants.{tenant}] tokens: {entry}"));
            if configured.is_none() {
                out(format!(
                    "# tenant `{tenant}` is not configured yet: add [tenants.{tenant}] too"
                ));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Appends `{ label, sha256 }` to `[tenants.<tenant>] tokens` (a plain array, or
/// `[[tenants.<tenant>.tokens]]`), refusing a label the tenant already has.
fn add_token(
    doc: &mut DocumentMut,
    tenant: &str,
    label: &str,
    entry: InlineTable,
    path: &Path,
) -> anyhow::Result<()> {
    let missing = || {
        anyhow::anyhow!(
            "`{}` has no [tenants.{tenant}]; add it first with `hpcgate tenant add {tenant} --config {}`",
            path.display(),
            path.display()
        )
    };
    let table = doc
        .get_mut("tenants")
        .and_then(Item::as_table_like_mut)
        .and_then(|t| t.get_mut(tenant))
        .and_then(Item::as_table_like_mut)
        .ok_or_else(missing)?;
    let duplicate = || {
        anyhow::anyhow!(
            "tenant `{tenant}` already has a token labelled `{label}`; choose another label (or remove the old entry to replace it)"
        )
    };
    let labelled = |t: Option<&Item>| t.and_then(Item::as_str) == Some(label);
    match table
        .entry("tokens")
        .or_insert(toml_edit::value(Array::new()))
    {
        Item::Value(Value::Array(array)) => {
            let taken = array.iter().any(|v| {
                v.as_inline_table()
                    .and_then(|t| t.get("label"))
                    .and_then(Value::as_str)
                    == Some(label)
            });
            if taken {
                return Err(duplicate());
            }
            array.push(entry);
            // One entry per line once there are several, like a hand-written list.
            if array.len() > 1 {
                for v in array.iter_mut() {
                    v.decor_mut().set_prefix("\n    ");
                }
                array.set_trailing("\n");
                array.set_trailing_comma(true);
            }
        }
        Item::ArrayOfTables(tables) => {
            if tables.iter().any(|t| labelled(t.get("label"))) {
                return Err(duplicate());
            }
            tables.push(entry.into_table());
        }
        _ => bail!(
            "`tenants.{tenant}.tokens` in `{}` is not a list",
            path.display()
        ),
    }
    Ok(())
}

fn read_document(path: &Path) -> anyhow::Result<DocumentMut> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file `{}`", path.display()))?;
    text.parse::<DocumentMut>()
        .with_context(|| format!("`{}` is not valid TOML", path.display()))
}

/// Resolves every layer with `text` in place of `path`, as the gateway would load it.
fn check_layered(env: &Environment, path: &Path, text: &str) -> anyhow::Result<Settings> {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut texts = vec![(None, DEFAULT_CONFIG.to_owned())];
    if let Some(user) = env.user_config_file()
        && user != path
        && let Ok(user_text) = std::fs::read_to_string(&user)
    {
        texts.push((Some(user), user_text));
    }
    texts.push((Some(path.clone()), text.to_owned()));
    let invalid = || {
        format!(
            "the edit would make `{}` invalid; nothing was changed",
            path.display()
        )
    };
    let (merged, origins) = merge_texts(&texts, env).with_context(invalid)?;
    let config = Config::from_merged(merged, &origins).with_context(invalid)?;
    Settings::resolve(&config, env, &origins).with_context(invalid)
}

/// Writes `text` to a temp file next to the file `path` names (through any link) with its
/// permissions (and, as root, its owner and group: a root-run command must not take the
/// gateway's user's configuration from it), syncs it, and renames it over that file.
fn replace_file(path: &Path, text: &str) -> anyhow::Result<()> {
    // A link to the configuration stays a link: the file it names is the one replaced.
    let real = std::fs::canonicalize(path)
        .with_context(|| format!("cannot resolve `{}`", path.display()))?;
    let path = real.as_path();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("`{}` is not a file path", path.display()))?;
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let mode = meta.permissions().mode();
    let owner = rustix::process::geteuid()
        .is_root()
        .then(|| (meta.uid(), meta.gid()));
    let suffix = getrandom::u64().context("cannot read random bytes from the OS")?;
    let temp = dir.join(format!(".{}.{suffix:016x}.tmp", name.to_string_lossy()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result.with_context(|| format!("cannot replace `{}`", path.display()))
}

/// Appends `entry` (gateway-wide: no tenant, so tenant-scoped queries never show it) with the
/// local user as principal.
fn audit(settings: &Settings, mut entry: Entry) -> anyhow::Result<()> {
    entry.principal = Some(local_principal());
    // As the state directory's owner, even where root made the audit directory before.
    let _owner = super::owner::as_owner_of(&settings.fixed.state_dir)?;
    let log = AuditLog::open(&settings.fixed.audit_dir, settings.fixed.audit.clone())
        .with_context(|| {
            format!(
                "cannot open the audit log `{}`; nothing was changed",
                settings.fixed.audit_dir.display()
            )
        })?;
    log.append(entry)
        .context("the audit log cannot record this command; nothing was changed")?;
    Ok(())
}
