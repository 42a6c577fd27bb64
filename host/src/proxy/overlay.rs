//! What running servers announce after discovery (`notifications/tools/list_changed`), each
//! for its own (tenant, instance) only.
//!
//! **The model.** The discovery catalogue ([`Catalog`]) is the baseline every tenant sees: it
//! was listed by a throwaway server the admin configured, with empty directories, before any
//! tenant could touch it. A server running for a call lives in one tenant's instance, where the
//! tenant's files can steer it, so what it announces later is that tenant's business alone:
//! - its new list replaces the baseline for calls on *that* (tenant, instance) — an added tool
//!   becomes callable there, a removed one is refused there, a changed schema applies there;
//! - a tenant's `tools/list` (which names no instance) shows the baseline plus the tools its
//!   own running servers added, never another tenant's;
//! - the list lives as long as the server: when it stops (idle, archive, crash, shutdown), its
//!   instance is back on the baseline;
//! - only that tenant's MCP sessions are told the list changed ([`Change::Tenant`]).
//!
//! A server's claim to be read-only counts only where discovery vetted it: a tool it adds is
//! judged as not read-only by the policies, and a tool it changes stays read-only only if the
//! baseline's was too. (Otherwise a tenant's server could relax `deny_write` path rules for
//! itself by announcing a "read-only" tool.)

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};

use rmcp::model::Tool;

use super::Key;
use super::catalog::{Catalog, ProxiedTool};
use super::changes::Change;
use crate::state::TenantName;

/// One running server's announced tools.
struct Announced {
    /// Which server announced them, so that a stopped server never erases its successor's.
    server: u64,
    tools: Vec<Arc<ProxiedTool>>,
}

/// Every running server's announced tools, by (tenant, instance, proxy).
pub struct Overlays {
    baseline: Arc<Catalog>,
    map: RwLock<BTreeMap<Key, Announced>>,
}

impl Overlays {
    pub fn new(baseline: Arc<Catalog>) -> Overlays {
        Overlays {
            baseline,
            map: RwLock::default(),
        }
    }

    /// Records `remote` as what server `server` (running for `key`) now offers, and tells
    /// `key.tenant`'s sessions. Returns how many tools are exposed.
    pub fn announce(&self, key: &Key, server: u64, remote: &[Tool]) -> usize {
        let tools: Vec<_> = super::catalog::expose_all(&key.proxy, remote)
            .into_iter()
            .map(|mut tool| {
                let vetted = self.baseline.find(&tool.exposed_name);
                tool.read_only = tool.read_only && vetted.is_some_and(|b| b.read_only);
                Arc::new(tool)
            })
            .collect();
        let n = tools.len();
        write(&self.map).insert(key.clone(), Announced { server, tools });
        self.baseline.notify(&Change::Tenant(key.tenant.clone()));
        n
    }

    /// Forgets what server `server` announced for `key` (it stopped), if it announced anything.
    pub fn forget(&self, key: &Key, server: u64) {
        let mut map = write(&self.map);
        if map.get(key).is_some_and(|a| a.server == server) {
            map.remove(key);
            drop(map);
            self.baseline.notify(&Change::Tenant(key.tenant.clone()));
        }
    }

    /// What `tenant` may list (before policy): the baseline, then each tool its running servers
    /// added (by name; first instance in name order wins).
    pub fn listed(&self, tenant: &TenantName) -> Vec<Arc<ProxiedTool>> {
        let mut tools = self.baseline.tools();
        let mut seen: HashSet<String> = tools.iter().map(|t| t.exposed_name.clone()).collect();
        let map = read(&self.map);
        for (_, announced) in map.iter().filter(|(k, _)| &k.tenant == tenant) {
            for tool in &announced.tools {
                if seen.insert(tool.exposed_name.clone()) {
                    tools.push(tool.clone());
                }
            }
        }
        tools
    }

    /// The tool `exposed` as a call by `tenant` on `instance` sees it: the list of the
    /// instance's running server if it announced one, else the baseline. Without an instance
    /// (the call will be refused for that), the baseline, then any of the tenant's servers.
    pub fn find(
        &self,
        tenant: &TenantName,
        instance: Option<&str>,
        exposed: &str,
    ) -> Option<Arc<ProxiedTool>> {
        let (proxy, _) = exposed.split_once("__")?;
        let map = read(&self.map);
        let by_name = |a: &Announced| a.tools.iter().find(|t| t.exposed_name == exposed).cloned();
        match instance {
            Some(instance) => {
                let key = Key {
                    tenant: tenant.clone(),
                    instance: instance.to_owned(),
                    proxy: proxy.to_owned(),
                };
                match map.get(&key) {
                    Some(announced) => by_name(announced),
                    None => self.baseline.find(exposed),
                }
            }
            None => self.baseline.find(exposed).or_else(|| {
                map.iter()
                    .filter(|(k, _)| &k.tenant == tenant)
                    .find_map(|(_, a)| by_name(a))
            }),
        }
    }

    /// The instances of `tenant` whose running server announced `exposed` (for the message of
    /// a call that names another instance); never another tenant's.
    pub fn offered_in(&self, tenant: &TenantName, exposed: &str) -> Vec<String> {
        let map = read(&self.map);
        let offering = map.iter().filter(|(k, a)| {
            &k.tenant == tenant && a.tools.iter().any(|t| t.exposed_name == exposed)
        });
        offering.map(|(k, _)| k.instance.clone()).collect()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// What a call server's client needs to announce its list, and to forget it when it stops.
#[derive(Clone)]
pub struct Announcer {
    pub overlays: Arc<Overlays>,
    pub key: Key,
    /// Unique per started server.
    pub server: u64,
}
