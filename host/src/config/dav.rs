//! `[dav]`, resolved: the WebDAV door and the read-only host directories it serves beside the
//! instances.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::error::ConfigError;
use super::raw::Config;
use super::settings::{Bad, absolute, positive};
use crate::state::TenantName;

/// `[dav]`, resolved.
#[derive(Debug, Clone)]
pub struct DavSettings {
    pub enabled: bool,
    /// Most bytes one PUT may bring.
    pub max_upload_bytes: u64,
    /// `[dav.extras.<name>]`, by name.
    pub extras: BTreeMap<String, DavExtra>,
}

/// One read-only host directory served at `/dav/<name>/`.
#[derive(Debug, Clone)]
pub struct DavExtra {
    /// Absolute host path (opened as a capability per request; never shown).
    pub path: PathBuf,
    /// Which tenants see it.
    pub tenants: hpcgate_policy_sdk::glob::GlobSet,
}

impl DavExtra {
    pub fn visible_to(&self, tenant: &TenantName) -> bool {
        self.tenants.is_match(tenant.as_ref())
    }
}

/// `[dav]`.
pub(super) fn resolve_dav(config: &Config, bad: &Bad) -> Result<DavSettings, ConfigError> {
    Ok(DavSettings {
        enabled: config.dav.enabled.unwrap_or(false),
        max_upload_bytes: positive(
            "dav.max_upload_bytes",
            config.dav.max_upload_bytes,
            64 << 30,
            bad,
        )?,
        extras: resolve_dav_extras(config, bad)?,
    })
}

/// `[dav.extras]`: names that are plain URL segments other than `instances`, absolute paths,
/// read-only.
fn resolve_dav_extras(
    config: &Config,
    bad: &Bad,
) -> Result<BTreeMap<String, DavExtra>, ConfigError> {
    let mut extras = BTreeMap::new();
    for (name, raw) in &config.dav.extras {
        let key = |field: &str| format!("dav.extras.{name}.{field}");
        let plain = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !name.starts_with('.');
        if !plain || name == "instances" {
            return Err(bad(
                &format!("dav.extras.{name}"),
                "an extra's name is its URL segment: letters, digits, `-`, `_`, `.` (not first), and not `instances`".to_owned(),
            ));
        }
        let Some(path) = &raw.path else {
            return Err(bad(
                &key("path"),
                "give the host directory to serve".to_owned(),
            ));
        };
        if raw.ro == Some(false) {
            return Err(bad(
                &key("ro"),
                "writable extras are not supported yet (their writes would bypass the policies); serve the directory read-only".to_owned(),
            ));
        }
        let globs = raw.tenants.clone().unwrap_or_else(|| vec!["*".to_owned()]);
        let tenants = hpcgate_policy_sdk::glob::GlobSet::new(&globs)
            .map_err(|e| bad(&key("tenants"), e.to_string()))?;
        let extra = DavExtra {
            path: absolute(&key("path"), path, bad)?,
            tenants,
        };
        extras.insert(name.clone(), extra);
    }
    Ok(extras)
}
