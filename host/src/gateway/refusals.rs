//! The audit budget of calls refused before they ran: denied by a policy or a rule of the
//! gateway, over a rate limit, an unknown tool, a malformed instance id, a job's
//! door over its limits.
//!
//! Such a call takes nothing from the tenant's rate limits (it ran nothing), but it is
//! recorded all the same, so without a budget a tenant refused at any rate could fill the
//! audit disk that every tenant shares, and a full disk refuses everyone's calls. Each tenant
//! may have `[audit] refusals_per_minute` of them recorded one by one: a bucket that holds a
//! minute's worth and refills at that rate, a record counting once per 4 KiB started (at most
//! 16 times: a record is at most 64 KiB). Beyond it a call is refused all the same, and
//! counted into one `refusals.summarised` record of the tenant: how many, between when, and
//! per principal (so that one principal's flood cannot hide another's refusals) which tool
//! and why. The gateway's chores write the summaries once a minute, and the gateway when it
//! stops. Calls that get past the policies and the rate limits are recorded one by one, so
//! with a rate limit on every tool (`"*"`) all of a tenant's records are bounded.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde_json::{Value, json};

use super::Failure;
use crate::audit::{Entry, Event};
use crate::time::Timestamp;

/// How many principals a summary tells apart; the rest are counted together.
const MAX_PRINCIPALS: usize = 16;
/// How many (tool, why, policy) a summary tells apart for one principal.
const MAX_KINDS: usize = 8;
/// The longest principal, tool or policy name a summary keeps, in bytes.
const MAX_NAME_BYTES: usize = 64;
/// A record counts once against the budget per this many bytes started.
const UNIT_BYTES: usize = 4 << 10;
/// What the largest record counts (the audit log cuts every record to 64 KiB).
const MAX_UNITS: f64 = 16.0;

/// Each tenant's budget, and what it held back.
#[derive(Default)]
pub(super) struct Refusals {
    tenants: Mutex<HashMap<String, Budget>>,
}

struct Budget {
    tokens: f64,
    refilled: Instant,
    held: Option<Held>,
}

/// The refusals of one tenant not recorded one by one: what their summary says.
pub(super) struct Held {
    tenant: String,
    first: Timestamp,
    last: Timestamp,
    count: u64,
    principals: BTreeMap<String, Principal>,
    /// Refusals of principals beyond [`MAX_PRINCIPALS`].
    others: u64,
}

/// One principal's refusals held back.
#[derive(Default)]
struct Principal {
    count: u64,
    kinds: BTreeMap<Kind, u64>,
    /// Refusals of kinds beyond [`MAX_KINDS`].
    others: u64,
}

/// What was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Kind {
    tool: String,
    why: &'static str,
    /// The policy that denied it.
    policy: Option<String>,
}

impl Refusals {
    /// The records to write for a call refused before it ran, whose records are `records`
    /// (the last is the call's own) and whose failure was `failure`: all of them within the
    /// tenant's budget of `per_minute`; `None` beyond it (the call is counted instead).
    pub(super) fn admit(
        &self,
        records: Vec<Entry>,
        failure: Failure,
        per_minute: u32,
    ) -> Option<Vec<Entry>> {
        let Some(call) = records.last() else {
            return Some(records);
        };
        let Some(tenant) = &call.tenant else {
            return Some(records);
        };
        // Measured before the lock: every tenant's refusals take it.
        let units = units(&records);
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let budget = match tenants.get_mut(tenant) {
            Some(budget) => budget,
            None => tenants.entry(tenant.clone()).or_insert(Budget {
                tokens: f64::from(per_minute),
                refilled: Instant::now(),
                held: None,
            }),
        };
        if budget.take(per_minute, units) {
            return Some(records);
        }
        let held = budget.held.get_or_insert_with(|| Held::new(tenant));
        held.add(call, failure);
        None
    }

    /// What was held back since the last call, one summary per tenant; tenants whose budget
    /// is whole again are forgotten. Give back what could not be written
    /// ([`Refusals::put_back`]).
    pub(super) fn take_held(&self, per_minute: u32) -> Vec<Held> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let held = (tenants.values_mut())
            .filter_map(|budget| budget.held.take())
            .collect();
        tenants.retain(|_, budget| !budget.whole(per_minute));
        held
    }

    /// Holds `held` again (its summaries could not be written), merged with what was held
    /// since: told by the next summary.
    pub(super) fn put_back(&self, held: Vec<Held>) {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        for mut earlier in held {
            let budget = tenants.entry(earlier.tenant.clone()).or_insert(Budget {
                tokens: 0.0,
                refilled: Instant::now(),
                held: None,
            });
            if let Some(later) = budget.held.take() {
                earlier.merge(later);
            }
            budget.held = Some(earlier);
        }
    }
}

/// What `records` count against a budget.
fn units(records: &[Entry]) -> f64 {
    let bytes: usize = (records.iter())
        .map(|r| serde_json::to_vec(r).map_or(UNIT_BYTES, |b| b.len()))
        .sum();
    (1.0 + (bytes / UNIT_BYTES) as f64).min(MAX_UNITS)
}

impl Budget {
    /// Refills the bucket for the time since it was last refilled, then takes `units` from
    /// it if it holds that much (a record larger than a full bucket needs a full bucket).
    fn take(&mut self, per_minute: u32, units: f64) -> bool {
        self.refill(per_minute);
        let units = units.min(f64::from(per_minute));
        if self.tokens < units {
            return false;
        }
        self.tokens -= units;
        true
    }

    /// Whether the bucket is whole again and holds nothing back, so that it need not be kept.
    fn whole(&mut self, per_minute: u32) -> bool {
        self.refill(per_minute);
        self.held.is_none() && self.tokens >= f64::from(per_minute)
    }

    fn refill(&mut self, per_minute: u32) {
        let full = f64::from(per_minute);
        let now = Instant::now();
        let seconds = now.duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + seconds * full / 60.0).min(full);
        self.refilled = now;
    }
}

impl Held {
    fn new(tenant: &str) -> Held {
        Held {
            tenant: tenant.to_owned(),
            first: Timestamp::now(),
            last: Timestamp::now(),
            count: 0,
            principals: BTreeMap::new(),
            others: 0,
        }
    }

    /// Counts the refused `call` (its record), which failed as `failure`.
    fn add(&mut self, call: &Entry, failure: Failure) {
        let why = match failure {
            Failure::Denied => "denied",
            Failure::RateLimited { .. } => "rate_limited",
            _ => "refused",
        };
        let policy = (call.decision.as_ref())
            .filter(|_| why == "denied")
            .and_then(|d| d.policy.as_deref())
            .map(short);
        let kind = Kind {
            tool: short(call.tool.as_deref().unwrap_or_default()),
            why,
            policy,
        };
        let principal = short(call.principal.as_deref().unwrap_or_default());
        self.count += 1;
        self.last = Timestamp::now();
        if !self.principals.contains_key(&principal) && self.principals.len() >= MAX_PRINCIPALS {
            self.others += 1;
            return;
        }
        self.principals.entry(principal).or_default().add(kind, 1);
    }

    /// Adds the counts of `later` (of the same tenant, held after these).
    fn merge(&mut self, later: Held) {
        self.count += later.count;
        self.last = later.last;
        self.others += later.others;
        for (name, theirs) in later.principals {
            if !self.principals.contains_key(&name) && self.principals.len() >= MAX_PRINCIPALS {
                self.others += theirs.count;
                continue;
            }
            self.principals.entry(name).or_default().merge(theirs);
        }
    }

    /// The summary record, with the budget that applied.
    pub(super) fn entry(&self, per_minute: u32) -> Entry {
        let principals: Vec<Value> = (self.principals.iter())
            .map(|(name, one)| {
                let kinds: Vec<Value> = (one.kinds.iter())
                    .map(|(kind, count)| {
                        let mut said = json!({"tool": kind.tool, "why": kind.why, "count": count});
                        if let Some(policy) = &kind.policy {
                            said["policy"] = Value::String(policy.clone());
                        }
                        said
                    })
                    .collect();
                json!({"principal": name, "count": one.count, "kinds": kinds, "others": one.others})
            })
            .collect();
        Entry::new(Event::RefusalsSummarised)
            .who(&self.tenant, "hpcgate")
            .detail("refused", self.count)
            .detail("first", self.first.to_string())
            .detail("last", self.last.to_string())
            .detail("principals", principals)
            .detail("others", self.others)
            .detail("refusals_per_minute", per_minute)
    }
}

impl Principal {
    fn add(&mut self, kind: Kind, count: u64) {
        self.count += count;
        if let Some(n) = self.kinds.get_mut(&kind) {
            *n += count;
        } else if self.kinds.len() < MAX_KINDS {
            self.kinds.insert(kind, count);
        } else {
            self.others += count;
        }
    }

    fn merge(&mut self, later: Principal) {
        self.others += later.others;
        self.count += later.others;
        for (kind, count) in later.kinds {
            self.add(kind, count);
        }
    }
}

/// `name`'s start, at most [`MAX_NAME_BYTES`] bytes at a character boundary.
fn short(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(principal: &str, tool: &str) -> Vec<Entry> {
        vec![Entry::new(Event::Call).who("chem", principal).tool(tool)]
    }

    fn detail(held: &Held) -> serde_json::Map<String, Value> {
        held.entry(1).detail.unwrap()
    }

    #[test]
    fn a_tenant_over_its_budget_is_summarised_and_others_are_not_held_back() {
        let refusals = Refusals::default();
        let kept = (0..10)
            .filter(|_| (refusals.admit(refused("alice", "nope"), Failure::Other, 3)).is_some())
            .count();
        assert_eq!(kept, 3, "a minute's worth, recorded one by one");
        let bio = vec![Entry::new(Event::Call).who("bio", "bob").tool("nope")];
        assert!(
            refusals.admit(bio, Failure::Other, 3).is_some(),
            "another tenant's budget is its own"
        );
        let held = refusals.take_held(3);
        assert_eq!(held.len(), 1);
        let summary = held[0].entry(3);
        assert_eq!(summary.tenant.as_deref(), Some("chem"));
        let detail = summary.detail.unwrap();
        assert_eq!(detail["refused"], 7);
        let alice = &detail["principals"][0];
        assert_eq!(
            (
                &alice["principal"],
                &alice["kinds"][0]["why"],
                &alice["kinds"][0]["count"]
            ),
            (&json!("alice"), &json!("refused"), &json!(7))
        );
        assert!(refusals.take_held(3).is_empty(), "handed out once");
    }

    /// A summary that could not be written is told by the next one, with what came since.
    #[test]
    fn what_is_put_back_is_told_next_time() {
        let refusals = Refusals::default();
        let refuse = |n| {
            for _ in 0..n {
                refusals.admit(refused("alice", "nope"), Failure::Other, 1);
            }
        };
        refuse(4);
        let unwritten = refusals.take_held(1);
        refuse(2);
        refusals.put_back(unwritten);
        let held = refusals.take_held(1);
        assert_eq!(held.len(), 1);
        let detail = detail(&held[0]);
        assert_eq!(detail["refused"], 3 + 2);
        assert_eq!(detail["principals"][0]["count"], 5);
        assert_eq!(detail["principals"][0]["kinds"][0]["count"], 5);
    }

    /// One principal's many kinds of refusal cannot crowd another's out of the summary, and
    /// the summary stays small whatever the names.
    #[test]
    fn a_summary_tells_principals_apart_and_stays_small() {
        let refusals = Refusals::default();
        refusals.admit(refused("alice", "x"), Failure::Other, 1);
        for i in 0..1000 {
            let tool = format!("{i}{}", "é".repeat(10_000));
            refusals.admit(refused("job:1", &tool), Failure::Denied, 1);
        }
        refusals.admit(refused("alice", "write_file"), Failure::Denied, 1);
        for i in 0..100 {
            refusals.admit(refused(&format!("p{i}"), "x"), Failure::Other, 1);
        }
        let held = refusals.take_held(1);
        let detail = detail(&held[0]);
        assert_eq!(detail["refused"], 1000 + 1 + 100);
        let principals = detail["principals"].as_array().unwrap();
        assert_eq!(principals.len(), MAX_PRINCIPALS);
        let alice = principals
            .iter()
            .find(|p| p["principal"] == "alice")
            .unwrap();
        assert_eq!(alice["kinds"][0]["tool"], "write_file", "{alice}");
        let job = principals
            .iter()
            .find(|p| p["principal"] == "job:1")
            .unwrap();
        assert_eq!(job["kinds"].as_array().unwrap().len(), MAX_KINDS);
        assert_eq!(job["others"], 1000 - MAX_KINDS as u64);
        assert_eq!(detail["others"], 100 - (MAX_PRINCIPALS as u64 - 2));
        let bytes = serde_json::to_vec(&detail).unwrap().len();
        assert!(bytes < 32 << 10, "{bytes} bytes");
    }

    #[test]
    fn the_budget_refills_at_its_rate_and_large_records_count_more() {
        let mut budget = Budget {
            tokens: 0.0,
            refilled: Instant::now() - std::time::Duration::from_secs(30),
            held: None,
        };
        assert!(budget.take(4, 1.0), "half a minute of 4 a minute is 2");
        assert!(budget.take(4, 1.0));
        assert!(!budget.take(4, 1.0));
        let large = vec![Entry::new(Event::Call).detail("x", "y".repeat(10 << 10))];
        assert_eq!(units(&large), 3.0, "10 KiB: three 4 KiB started");
        let huge = vec![Entry::new(Event::Call).detail("x", "y".repeat(4 << 20))];
        assert_eq!(units(&huge), MAX_UNITS);
        let mut full = Budget {
            tokens: 2.0,
            refilled: Instant::now(),
            held: None,
        };
        assert!(!full.take(600, 3.0), "not three units' worth");
        assert!(full.take(2, 16.0), "a full bucket takes any record");
    }
}
