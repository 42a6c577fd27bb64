//! Per-tenant, per-tool rate limits: token buckets from `[tenants.<name>.rate_limits]`.
//!
//! A tenant's `"*"` bucket counts all its calls together; a bucket named after a tool counts
//! only that tool. A call must find a token in every bucket that applies and then takes one
//! from each — or takes none: a refused call consumes nothing, so retrying clients are not
//! punished twice.
//!
//! Locking: the map of tenants is built once and never changes, so finding a tenant takes no
//! lock; each tenant's buckets sit behind their own `std::sync::Mutex`, held for a few
//! arithmetic operations. Tenants never contend with each other, and a tenant without limits
//! costs one hash lookup. On reload, [`RateLimiter::reloaded`] builds the new limiter and keeps
//! the fill of every bucket whose limit is unchanged.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{ALL_TOOLS, RateLimit, Settings};
use crate::state::TenantName;

/// The rate limits of every tenant.
#[derive(Debug, Default)]
pub struct RateLimiter {
    tenants: HashMap<String, Slot>,
}

/// One tenant's lock and buckets on cache lines of their own: the map stores its values side
/// by side, and without the padding two tenants' locks would share a line and bounce it
/// between cores (measured: 2 threads on 2 tenants were slower than 1).
#[derive(Debug)]
#[repr(align(128))]
struct Slot(Mutex<Buckets>);

#[derive(Debug)]
struct Buckets {
    all: Option<Bucket>,
    tools: HashMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    limit: RateLimit,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(limit: RateLimit, now: Instant) -> Bucket {
        Bucket {
            limit,
            tokens: f64::from(limit.burst),
            last: now,
        }
    }

    /// Tokens per second.
    fn rate(&self) -> f64 {
        f64::from(self.limit.count) / self.limit.per.as_secs_f64()
    }

    /// Adds what accrued since `last`; `None` if a token is there, else how long until one is.
    fn refill(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate()).min(f64::from(self.limit.burst));
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate()))
        }
    }
}

/// A refused call: which limit, and how long until a call would pass.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryAfter {
    /// The `rate_limits` key that refused: a tool name or `"*"`.
    pub limit_key: String,
    pub limit: RateLimit,
    /// Until the bucket holds a token again (for every limit that refused, the longest).
    pub after: Duration,
}

impl RetryAfter {
    /// Whole seconds, rounded up and at least 1: the HTTP `Retry-After` value.
    pub fn seconds(&self) -> u64 {
        round_up(self.after.as_secs_f64()).max(1.0) as u64
    }
}

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.limit_key == ALL_TOOLS {
            "all tools together".to_owned()
        } else {
            format!("`{}`", self.limit_key)
        };
        // Rounded up, so a client retrying after the printed time is never early.
        let secs = round_up(self.after.as_secs_f64() * 10.0).max(1.0) / 10.0;
        write!(
            f,
            "rate limit for {what} reached ({}); retry in {secs:.1} s",
            self.limit
        )
    }
}

/// Rounds up, ignoring floating-point noise below a microsecond (6.000000000000001 is 6).
fn round_up(x: f64) -> f64 {
    (x - 1e-6).ceil()
}

impl RateLimiter {
    /// Buckets for every tenant with `rate_limits`, all full.
    pub fn from_settings(settings: &Settings) -> RateLimiter {
        let now = Instant::now();
        let tenants = settings
            .tenants
            .iter()
            .filter(|(_, t)| !t.rate_limits.is_empty())
            .map(|(name, t)| {
                let mut buckets = Buckets {
                    all: None,
                    tools: HashMap::new(),
                };
                for (key, limit) in &t.rate_limits {
                    let bucket = Bucket::new(*limit, now);
                    if key == ALL_TOOLS {
                        buckets.all = Some(bucket);
                    } else {
                        buckets.tools.insert(key.clone(), bucket);
                    }
                }
                (name.as_str().to_owned(), Slot(Mutex::new(buckets)))
            })
            .collect();
        RateLimiter { tenants }
    }

    /// A limiter for reloaded `settings` that keeps the fill level of every bucket whose limit
    /// did not change (so a reload does not hand every tenant a fresh burst); changed and new
    /// limits start full.
    pub fn reloaded(&self, settings: &Settings) -> RateLimiter {
        let fresh = RateLimiter::from_settings(settings);
        for (tenant, slot) in &fresh.tenants {
            let Some(old) = self.tenants.get(tenant) else {
                continue;
            };
            let old = old.0.lock().unwrap_or_else(|e| e.into_inner());
            let mut new = slot.0.lock().unwrap_or_else(|e| e.into_inner());
            let keep = |new: &mut Bucket, old: Option<&Bucket>| {
                if let Some(old) = old.filter(|o| o.limit == new.limit) {
                    *new = *old;
                }
            };
            if let Some(bucket) = new.all.as_mut() {
                keep(bucket, old.all.as_ref());
            }
            for (tool, bucket) in &mut new.tools {
                keep(bucket, old.tools.get(tool));
            }
        }
        fresh
    }

    /// Takes a token for one call of `tool` by `tenant`, or says when to retry.
    ///
    /// Call it only for calls that will run: **after** the policy chain allowed the call (a
    /// denied call must not consume quota) and before the executor. A refusal consumes nothing.
    /// Tenants without limits (and single-tenant gateways) always pass.
    pub fn check(&self, tenant: &TenantName, tool: &str) -> Result<(), RetryAfter> {
        self.check_at(tenant, tool, Instant::now())
    }

    /// [`Self::check`] at a given instant (tests and benchmarks).
    pub fn check_at(
        &self,
        tenant: &TenantName,
        tool: &str,
        now: Instant,
    ) -> Result<(), RetryAfter> {
        let Some(buckets) = self.tenants.get(tenant.as_str()) else {
            return Ok(());
        };
        // A poisoned lock only means another call panicked mid-arithmetic; the numbers are
        // still numbers.
        let mut guard = buckets.0.lock().unwrap_or_else(|e| e.into_inner());
        let Buckets { all, tools } = &mut *guard;
        let mut refused: Option<RetryAfter> = None;
        let applicable = [
            tools.get_mut(tool).map(|b| (tool, b)),
            all.as_mut().map(|b| (ALL_TOOLS, b)),
        ];
        let mut taken = Vec::with_capacity(2);
        for (key, bucket) in applicable.into_iter().flatten() {
            if let Some(wait) = bucket.refill(now)
                && refused.as_ref().is_none_or(|r| wait > r.after)
            {
                refused = Some(RetryAfter {
                    limit_key: key.to_owned(),
                    limit: bucket.limit,
                    after: wait,
                });
            }
            taken.push(bucket);
        }
        match refused {
            Some(retry) => Err(retry),
            None => {
                for bucket in taken {
                    bucket.tokens -= 1.0;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn limiter(text: &str) -> RateLimiter {
        let config = crate::config::Config::parse(text, "t.toml").unwrap();
        let env = crate::config::Environment {
            home: Some("/home/u".into()),
            ..Default::default()
        };
        let settings =
            Settings::resolve(&config, &env, &crate::config::Origins::single("t.toml")).unwrap();
        RateLimiter::from_settings(&settings)
    }

    fn t(name: &str) -> TenantName {
        TenantName::parse(name).unwrap()
    }

    const TWO_TENANTS: &str = "[tenants.chem.rate_limits]\n\
        \"*\" = { per_second = 20, burst = 40 }\n\
        submit_job = { per_minute = 10 }\n\
        [tenants.bio.rate_limits]\n\
        submit_job = { per_second = 1, burst = 2 }\n\
        [tenants.free]\n";

    #[test]
    fn a_burst_passes_then_the_bucket_refuses_with_the_time_to_the_next_token() {
        let limiter = limiter(TWO_TENANTS);
        let now = Instant::now();
        for _ in 0..10 {
            limiter.check_at(&t("chem"), "submit_job", now).unwrap();
        }
        let refused = limiter.check_at(&t("chem"), "submit_job", now).unwrap_err();
        assert_eq!(refused.limit_key, "submit_job");
        assert!(refused.after.abs_diff(Duration::from_secs(6)) < Duration::from_micros(1));
        assert_eq!(refused.seconds(), 6);
        assert_eq!(
            refused.to_string(),
            "rate limit for `submit_job` reached (10 per minute); retry in 6.0 s"
        );
        // 4.2 s later one token is 1.8 s away.
        let later = now + Duration::from_millis(4200);
        let refused = limiter
            .check_at(&t("chem"), "submit_job", later)
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "rate limit for `submit_job` reached (10 per minute); retry in 1.8 s"
        );
        assert_eq!(refused.seconds(), 2);
    }

    #[test]
    fn buckets_refill_at_their_rate_up_to_the_burst() {
        let limiter = limiter(TWO_TENANTS);
        let now = Instant::now();
        limiter.check_at(&t("bio"), "submit_job", now).unwrap();
        limiter.check_at(&t("bio"), "submit_job", now).unwrap();
        limiter.check_at(&t("bio"), "submit_job", now).unwrap_err();
        let later = now + Duration::from_secs(1);
        limiter.check_at(&t("bio"), "submit_job", later).unwrap();
        limiter
            .check_at(&t("bio"), "submit_job", later)
            .unwrap_err();
        // A long pause refills to the burst (2), not beyond.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..2 {
            limiter
                .check_at(&t("bio"), "submit_job", much_later)
                .unwrap();
        }
        limiter
            .check_at(&t("bio"), "submit_job", much_later)
            .unwrap_err();
    }

    #[test]
    fn star_counts_all_tools_together_and_a_tool_limit_only_that_tool() {
        let limiter = limiter(TWO_TENANTS);
        let now = Instant::now();
        // bio limits only submit_job: other tools are free.
        for _ in 0..1000 {
            limiter.check_at(&t("bio"), "read_file", now).unwrap();
        }
        // chem: 40 calls of any tool at once, then "*" refuses every tool.
        for i in 0..40 {
            let tool = if i % 2 == 0 {
                "read_file"
            } else {
                "list_instances"
            };
            limiter.check_at(&t("chem"), tool, now).unwrap();
        }
        let refused = limiter.check_at(&t("chem"), "read_file", now).unwrap_err();
        assert_eq!(refused.limit_key, "*");
        assert!(refused.after.abs_diff(Duration::from_millis(50)) < Duration::from_micros(1));
        assert_eq!(
            refused.to_string(),
            "rate limit for all tools together reached (20 per second, burst 40); retry in 0.1 s"
        );
        let refused = limiter.check_at(&t("chem"), "submit_job", now).unwrap_err();
        assert_eq!(refused.limit_key, "*");
    }

    #[test]
    fn a_refused_call_consumes_from_no_bucket() {
        let limiter = limiter(
            "[tenants.chem.rate_limits]\n\"*\" = { per_second = 1, burst = 3 }\n\
             submit_job = { per_minute = 1 }\n",
        );
        let now = Instant::now();
        limiter.check_at(&t("chem"), "submit_job", now).unwrap();
        // submit_job is empty now; its refusals must not drain "*".
        for _ in 0..10 {
            let refused = limiter.check_at(&t("chem"), "submit_job", now).unwrap_err();
            assert_eq!(refused.limit_key, "submit_job");
        }
        limiter.check_at(&t("chem"), "read_file", now).unwrap();
        limiter.check_at(&t("chem"), "read_file", now).unwrap();
        limiter.check_at(&t("chem"), "read_file", now).unwrap_err();
    }

    #[test]
    fn tenants_are_independent_and_unknown_or_unlimited_tenants_pass() {
        let limiter = limiter(TWO_TENANTS);
        let now = Instant::now();
        limiter.check_at(&t("bio"), "submit_job", now).unwrap();
        limiter.check_at(&t("bio"), "submit_job", now).unwrap();
        limiter.check_at(&t("bio"), "submit_job", now).unwrap_err();
        for _ in 0..10 {
            limiter.check_at(&t("chem"), "submit_job", now).unwrap();
        }
        for _ in 0..100 {
            limiter.check_at(&t("free"), "submit_job", now).unwrap();
            limiter.check_at(&t("nobody"), "submit_job", now).unwrap();
        }
        let single = super::tests::limiter("");
        single.check(&t("default"), "submit_job").unwrap();
    }

    #[test]
    fn a_reload_keeps_unchanged_buckets_and_refills_changed_ones() {
        let before = limiter(TWO_TENANTS);
        let now = Instant::now();
        for _ in 0..2 {
            before.check_at(&t("bio"), "submit_job", now).unwrap();
        }
        for _ in 0..10 {
            before.check_at(&t("chem"), "submit_job", now).unwrap();
        }
        let text = TWO_TENANTS.replace("per_minute = 10", "per_minute = 11");
        let config = crate::config::Config::parse(&text, "t.toml").unwrap();
        let env = crate::config::Environment {
            home: Some("/home/u".into()),
            ..Default::default()
        };
        let settings =
            Settings::resolve(&config, &env, &crate::config::Origins::single("t.toml")).unwrap();
        let after = before.reloaded(&settings);
        // bio's limit is unchanged: still empty. chem's submit_job changed: full again.
        after.check_at(&t("bio"), "submit_job", now).unwrap_err();
        after.check_at(&t("chem"), "submit_job", now).unwrap();
    }

    #[test]
    fn the_limiter_and_the_authenticator_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<RateLimiter>();
        shared::<crate::auth::Authenticator>();
    }

    /// `check` from 1 thread, then from 16 threads over 8 tenants (2 per tenant), with buckets
    /// big enough never to refuse, so every call takes its tenant's lock and does the
    /// arithmetic: no call is refused. Prints the throughput of both (`--nocapture`;
    /// `--release` for the real figures, recorded in BENCHMARKS.md); with per-tenant locks the
    /// 16-thread total should be at least the 1-thread figure times the cores, not a fraction
    /// of it. Nothing is asserted about time: that is for reading, on a quiet machine.
    #[test]
    fn sixteen_threads_over_eight_tenants_do_not_serialise() {
        let mut text = String::new();
        for i in 0..8 {
            text.push_str(&format!(
                "[tenants.t{i}.rate_limits]\n\"*\" = {{ per_second = 1000000000, burst = 1000000000 }}\n\
                 submit_job = {{ per_second = 1000000000, burst = 1000000000 }}\n"
            ));
        }
        let limiter = Arc::new(limiter(&text));
        let per_thread = 100_000;
        let run = |threads: usize| {
            let started = Instant::now();
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let limiter = Arc::clone(&limiter);
                    std::thread::spawn(move || {
                        let tenant = t(&format!("t{}", i % 8));
                        for n in 0..per_thread {
                            let tool = if n % 2 == 0 {
                                "submit_job"
                            } else {
                                "read_file"
                            };
                            limiter.check(&tenant, tool).unwrap();
                        }
                    })
                })
                .collect();
            for handle in handles {
                handle.join().unwrap();
            }
            (threads * per_thread) as f64 / started.elapsed().as_secs_f64()
        };
        let one = run(1);
        let sixteen = run(16);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!(
                "rate limiter: 1 thread {one:.0} checks/s; 16 threads over 8 tenants {sixteen:.0} checks/s ({:.2}x, {cores} cores)\n",
                sixteen / one
            ),
        );
    }
}
