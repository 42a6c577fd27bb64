//! `hpcgate clean --days N [--dry-run]`: delete the local tenant's instances archived more
//! than N days ago, with their job records ([`crate::state::State::clean`]).
//!
//! There is no tool for it (agents never delete instances), so it is audited here as the
//! local user: a record before, one `instance.cleaned` per deleted instance, and one with the
//! count or the error after. Only archived instances are candidates: a live instance is
//! archived first (`hpcgate instance archive`, refused while jobs run), so `clean` never
//! races a running job.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::local::{ConfigArg, Failed, Local, exit};
use super::out;
use crate::audit::{Event, Outcome};
use crate::state::{MAX_LIMIT, PageRequest, StateError, Timestamp};

#[derive(Debug, Args)]
pub(crate) struct CleanArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Delete instances archived more than this many days ago (0: every archived instance).
    #[arg(long, short)]
    days: u64,
    /// Only list what would be deleted.
    #[arg(long)]
    dry_run: bool,
}

const ACTION: &str = "clean";

pub(crate) fn run(args: CleanArgs) -> anyhow::Result<ExitCode> {
    exit(Local::open(&args.config).and_then(|local| clean(&local, args.days, args.dry_run)))
}

fn clean(local: &Local, days: u64, dry_run: bool) -> anyhow::Result<ExitCode> {
    let state = local.state()?;
    let tenant = &local.caller.tenant;
    if dry_run {
        let cutoff = Timestamp::now().minus(Duration::from_secs(days.saturating_mul(86_400)));
        let mut offset = 0;
        let mut found = 0;
        loop {
            let page = state.list_archived(tenant, PageRequest::new(MAX_LIMIT, offset)?)?;
            for instance in &page.items {
                if let Some(at) = instance.archived_at.filter(|at| *at < cutoff) {
                    out(format!("would delete `{}` (archived {at})", instance.id));
                    found += 1;
                }
            }
            offset += page.items.len();
            if page.items.is_empty() || offset >= page.total {
                break;
            }
        }
        if found == 0 {
            out(format!("No instances archived more than {days} days ago."));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let started = local.begin(ACTION, None, Some(("days", json!(days))))?;
    let result = state.clean(tenant, days);
    let outcome = match &result {
        Ok(removed) => {
            for id in removed {
                local.event(Event::InstanceCleaned, ACTION, id.as_str())?;
            }
            Outcome::default()
        }
        Err(e) => Outcome {
            error: Some(e.to_string()),
            ..Outcome::default()
        },
    };
    local.end(ACTION, None, &started, outcome)?;
    let removed = result.map_err(|e: StateError| Failed(e.to_string()))?;
    if removed.is_empty() {
        out(format!("No instances archived more than {days} days ago."));
    }
    for id in &removed {
        out(format!("Deleted `{id}`"));
    }
    Ok(ExitCode::SUCCESS)
}
