//! Reading records back: oldest-first iteration and newest-first tails, with filters.
//!
//! Every query takes a [`Scope`] and there is no default: the gateway passes
//! `Scope::Tenant(<the caller's tenant>)`, which only ever matches records of that tenant
//! (gateway-wide records have no tenant and are never shown); only the admin CLI uses
//! `Scope::AllTenants`. Reading checks each line against its own hash but not the chain
//! (`verify` does); a last line still being written is skipped.

use std::path::Path;

use hpcgate_policy_sdk::glob::Glob;

use super::canonical::check_line;
use super::error::AuditError;
use super::record::{Event, Record};
use super::segment::Segment;
use super::verify::{read_prefix, snapshot};
use crate::time::Timestamp;
use hpcgate_policy_sdk::outcome::DecisionKind;

/// Whose records a query may return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only records whose tenant (and whose call's tenant) is this one.
    Tenant(String),
    /// Every record (admins only).
    AllTenants,
}

impl Scope {
    fn allows(&self, record: &Record) -> bool {
        match self {
            Scope::AllTenants => true,
            Scope::Tenant(tenant) => {
                record.entry.tenant.as_deref() == Some(tenant.as_str())
                    && record
                        .entry
                        .call
                        .as_ref()
                        .is_none_or(|call| &call.tenant == tenant)
            }
        }
    }
}

/// Which records to return; every field set must match. `since` is inclusive, `until`
/// exclusive.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub instance: Option<String>,
    /// Glob over the exposed tool name (`submit_job`, `fs__*`).
    pub tool: Option<Glob>,
    pub decision: Option<DecisionKind>,
    pub event: Option<Event>,
    pub principal: Option<String>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
}

impl Filter {
    pub fn matches(&self, record: &Record) -> bool {
        let e = &record.entry;
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        eq(&self.instance, &e.instance)
            && eq(&self.principal, &e.principal)
            && self
                .tool
                .as_ref()
                .is_none_or(|g| e.tool.as_deref().is_some_and(|t| g.matches(t)))
            && self
                .decision
                .is_none_or(|d| e.decision.as_ref().is_some_and(|f| f.decision == d))
            && self.event.is_none_or(|ev| e.event == ev)
            && self.since.is_none_or(|t| record.ts >= t)
            && self.until.is_none_or(|t| record.ts < t)
    }
}

/// The matching records, oldest first.
pub fn records(dir: &Path, scope: Scope, filter: Filter) -> Result<Records, AuditError> {
    let mut files = snapshot(dir)?;
    files.reverse();
    Ok(Records {
        files,
        current: None,
        scope,
        filter,
    })
}

/// The `limit` newest matching records, newest first.
pub fn tail(
    dir: &Path,
    scope: &Scope,
    filter: &Filter,
    limit: usize,
) -> Result<Vec<Record>, AuditError> {
    let mut found = Vec::new();
    for (segment, len) in snapshot(dir)?.into_iter().rev() {
        let lines = FileLines::read(segment, len)?;
        for (number, line) in lines.lines.iter().enumerate().rev() {
            if found.len() >= limit {
                return Ok(found);
            }
            let record = lines.parse(number, line)?;
            if scope.allows(&record) && filter.matches(&record) {
                found.push(record);
            }
        }
    }
    Ok(found)
}

/// Iterator over matching records; an unreadable file or line ends it with an `Err`.
pub struct Records {
    /// Files still to read, newest first (popped from the end).
    files: Vec<(Segment, u64)>,
    current: Option<(FileLines, usize)>,
    scope: Scope,
    filter: Filter,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("scope", &self.scope)
            .finish()
    }
}

impl Iterator for Records {
    type Item = Result<Record, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((lines, next)) = &mut self.current {
                while let Some(line) = lines.lines.get(*next) {
                    let number = *next;
                    *next += 1;
                    match lines.parse(number, line) {
                        Ok(r) if self.scope.allows(&r) && self.filter.matches(&r) => {
                            return Some(Ok(r));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.files.clear();
                            self.current = None;
                            return Some(Err(e));
                        }
                    }
                }
            }
            let (segment, len) = self.files.pop()?;
            match FileLines::read(segment, len) {
                Ok(lines) => self.current = Some((lines, 0)),
                Err(e) => {
                    self.files.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// The complete lines of one file (a torn or in-progress last line left out).
struct FileLines {
    segment: Segment,
    lines: Vec<Vec<u8>>,
}

impl FileLines {
    fn read(segment: Segment, len: u64) -> Result<FileLines, AuditError> {
        let bytes = read_prefix(&segment, len)?;
        let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
        lines.pop();
        Ok(FileLines { segment, lines })
    }

    fn parse(&self, index: usize, line: &[u8]) -> Result<Record, AuditError> {
        check_line(line).map_err(|problem| AuditError::Unreadable {
            path: self.segment.path.clone(),
            line: index as u64 + 1,
            problem: problem.to_string(),
        })
    }
}
