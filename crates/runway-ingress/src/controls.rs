//! A route's traffic controls, the service's own (`spec.workload.rate_limit` and
//! `client_addresses`) and the operator's (`runway maintenance`): who may call it, how fast,
//! and whether it answers at all. Checked after the route and its revision are known and
//! before anything else is done for the request; a refusal is counted as the revision's client
//! error, never against it.
//!
//! Rate limits are GCRA token buckets ("theoretical arrival time"): one `u64` per bucket, so
//! a client's bucket that has refilled is the same as none, and may be dropped. The service's
//! bucket is one atomic; the clients' live in a map bounded by the operator
//! ([`crate::Options::max_rate_limited_clients`], shared equally by the routes with a
//! per-client limit, so that a flood at one service takes nothing of another's): when it is
//! full, refilled buckets are dropped (at most once a second), and a client that finds it
//! full still shares one overflow bucket with the others like it, so a flood of addresses is
//! limited all the same and costs no memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cloudflare::Cidr;
use crate::error::ProxyError;

/// The most address rules (allow and deny together, and maintenance's) one route takes.
pub const MAX_ADDRESS_RULES: usize = 1024;
/// The highest rate a bucket takes, and its largest burst.
pub const MAX_RATE: f64 = 10_000_000.0;
/// The longest maintenance message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// A token bucket: `requests_per_second` on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    pub requests_per_second: f64,
    pub burst: u32,
}

/// The service answers 503 with `message` and `Retry-After`, but to clients in `allow`; its
/// instances keep running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceConfig {
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default = "default_retry_after")]
    pub retry_after_seconds: u32,
}

fn default_retry_after() -> u32 {
    300
}

/// What a route's controls are, as the table carries them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlsConfig {
    /// Every client together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitConfig>,
    /// Each client (an address; an IPv6 client's /64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_rate_limit: Option<RateLimitConfig>,
    /// Networks whose clients may call the public names; empty, every client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Networks whose clients may not, even when `allow` names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceConfig>,
}

impl ControlsConfig {
    /// Whether it controls nothing (the usual route's).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Every field checked; the message names the field (`controls.allow[2]`).
    pub fn check(&self) -> Result<(), String> {
        for (field, limit) in [
            ("rate_limit", &self.rate_limit),
            ("client_rate_limit", &self.client_rate_limit),
        ] {
            if let Some(limit) = limit {
                let rate = limit.requests_per_second;
                if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
                    return Err(format!(
                        "controls.{field}.requests_per_second is {rate}: expected more than 0 \
                         and at most {MAX_RATE}"
                    ));
                }
                if limit.burst == 0 || f64::from(limit.burst) > MAX_RATE {
                    return Err(format!(
                        "controls.{field}.burst is {}: expected 1 to {MAX_RATE}",
                        limit.burst
                    ));
                }
            }
        }
        let maintenance_allow = self.maintenance.iter().flat_map(|m| &m.allow);
        let rules = self.allow.len() + self.deny.len() + maintenance_allow.clone().count();
        if rules > MAX_ADDRESS_RULES {
            return Err(format!(
                "controls: {rules} address rules, more than {MAX_ADDRESS_RULES}"
            ));
        }
        parse_all("controls.allow", &self.allow)?;
        parse_all("controls.deny", &self.deny)?;
        if let Some(maintenance) = &self.maintenance {
            parse_all("controls.maintenance.allow", &maintenance.allow)?;
            if maintenance.message.len() > MAX_MESSAGE_BYTES {
                return Err(format!(
                    "controls.maintenance.message is {} bytes, more than {MAX_MESSAGE_BYTES}",
                    maintenance.message.len()
                ));
            }
        }
        Ok(())
    }
}

fn parse_all(field: &str, rules: &[String]) -> Result<Vec<Cidr>, String> {
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| rule.parse().map_err(|why| format!("{field}[{i}]: {why}")))
        .collect()
}

/// A GCRA bucket's rule: the time one request earns, and how far ahead of now a bucket may
/// have spent (the burst less one request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rate {
    interval: u64,
    tolerance: u64,
}

impl Rate {
    fn new(config: RateLimitConfig) -> Self {
        let interval = (1e9 / config.requests_per_second).round().max(1.0) as u64;
        Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(config.burst.max(1) - 1)),
        }
    }

    /// One request against a bucket whose theoretical arrival time is `tat`: the new one, or
    /// how long until a request would conform.
    fn take(self, tat: u64, now: u64) -> Result<u64, Duration> {
        let tat = tat.max(now);
        let ahead = tat - now;
        if ahead > self.tolerance {
            return Err(Duration::from_nanos(ahead - self.tolerance));
        }
        Ok(tat + self.interval)
    }
}

/// A bucket shared by every request that reaches it: one atomic, no lock.
#[derive(Debug)]
struct Bucket {
    rate: Rate,
    tat: AtomicU64,
}

impl Bucket {
    fn new(rate: Rate) -> Self {
        Self {
            rate,
            tat: AtomicU64::new(0),
        }
    }

    fn take(&self, now: u64) -> Result<(), Duration> {
        let mut current = self.tat.load(Ordering::Relaxed);
        loop {
            let next = self.rate.take(current, now)?;
            match self.tat.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => current = seen,
            }
        }
    }
}

/// Each client's bucket, at most `capacity` of them, and the one the rest share.
#[derive(Debug)]
struct ClientBuckets {
    rate: Rate,
    capacity: usize,
    state: Mutex<ClientState>,
}

#[derive(Debug, Default)]
struct ClientState {
    buckets: HashMap<IpAddr, u64>,
    overflow: u64,
    last_sweep: u64,
}

/// The clients a route with a per-client limit always keeps a bucket for, however many
/// routes share [`crate::Options::max_rate_limited_clients`].
pub const MIN_CLIENTS_PER_ROUTE: usize = 1024;

/// Each route's share of `total` client buckets among `routes` routes with a per-client
/// limit: equal, and at least [`MIN_CLIENTS_PER_ROUTE`]. Fixed when a table is set, so no
/// route's clients can take another's.
pub(crate) fn client_share(total: usize, routes: usize) -> usize {
    (total / routes.max(1)).max(MIN_CLIENTS_PER_ROUTE)
}

/// How often a full map is swept of refilled buckets, at most.
const SWEEP_EVERY: u64 = 1_000_000_000;

impl ClientBuckets {
    fn take(&self, client: IpAddr, now: u64) -> Result<(), Duration> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        if let Some(tat) = state.buckets.get_mut(&client) {
            *tat = self.rate.take(*tat, now)?;
            return Ok(());
        }
        if state.buckets.len() >= self.capacity && now >= state.last_sweep + SWEEP_EVERY {
            state.last_sweep = now;
            // A bucket that has refilled is the same as none.
            state.buckets.retain(|_, tat| *tat > now);
        }
        if state.buckets.len() < self.capacity {
            // A new bucket, full: its first request always passes.
            state.buckets.insert(client, self.rate.take(0, now)?);
        } else {
            state.overflow = self.rate.take(state.overflow, now)?;
        }
        Ok(())
    }
}

/// The live controls of a route; its buckets outlive tables that keep their rates
/// ([`Controls::new`] takes the last table's, when their rate is the same).
#[derive(Debug)]
pub(crate) struct Controls {
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
    maintenance: Option<Maintenance>,
    service: Option<Bucket>,
    clients: Option<ClientBuckets>,
    /// Where bucket times count from.
    epoch: Instant,
}

#[derive(Debug)]
struct Maintenance {
    message: std::sync::Arc<str>,
    allow: Vec<Cidr>,
    retry_after: u32,
}

impl Controls {
    /// The controls `config` describes (checked with the table). Buckets of `previous` whose
    /// rate is unchanged are kept, with what they have spent.
    pub(crate) fn new(
        config: &ControlsConfig,
        previous: Option<&Controls>,
        max_clients: usize,
    ) -> Self {
        let parse = |rules: &[String]| parse_all("", rules).unwrap_or_default();
        let epoch = previous.map_or_else(Instant::now, |p| p.epoch);
        let service = config.rate_limit.map(|limit| {
            let bucket = Bucket::new(Rate::new(limit));
            if let Some(old) = previous.and_then(|p| p.service.as_ref())
                && old.rate == bucket.rate
            {
                bucket
                    .tat
                    .store(old.tat.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            bucket
        });
        let clients = config.client_rate_limit.map(|limit| {
            let rate = Rate::new(limit);
            let state = match previous.and_then(|p| p.clients.as_ref()) {
                Some(old) if old.rate == rate => {
                    std::mem::take(&mut *old.state.lock().unwrap_or_else(|e| e.into_inner()))
                }
                _ => ClientState::default(),
            };
            ClientBuckets {
                rate,
                capacity: max_clients.max(1),
                state: Mutex::new(state),
            }
        });
        Self {
            allow: parse(&config.allow),
            deny: parse(&config.deny),
            maintenance: config.maintenance.as_ref().map(|m| Maintenance {
                message: std::sync::Arc::from(m.message.as_str()),
                allow: parse(&m.allow),
                retry_after: m.retry_after_seconds,
            }),
            service,
            clients,
            epoch,
        }
    }

    /// Whether a request from `client` goes on: maintenance first (its allowed clients pass
    /// it), then the address lists (public listeners only: the private one has callers), the
    /// client's bucket and the service's. A request its client's bucket refuses spends
    /// nothing of the service's.
    pub(crate) fn admit(&self, client: IpAddr, public: bool) -> Result<(), ProxyError> {
        let client = client.to_canonical();
        if let Some(maintenance) = &self.maintenance
            && !maintenance.allow.iter().any(|c| c.contains(client))
        {
            return Err(ProxyError::Maintenance {
                message: std::sync::Arc::clone(&maintenance.message),
                retry_after: maintenance.retry_after,
            });
        }
        if public
            && (self.deny.iter().any(|c| c.contains(client))
                || (!self.allow.is_empty() && !self.allow.iter().any(|c| c.contains(client))))
        {
            return Err(ProxyError::AddressRefused { address: client });
        }
        if self.service.is_none() && self.clients.is_none() {
            return Ok(());
        }
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        let limited = |scope, wait: Duration| ProxyError::RateLimited {
            scope,
            retry_after: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
        };
        if let Some(clients) = &self.clients {
            clients
                .take(crate::connection::client_key(client), now)
                .map_err(|wait| limited(Scope::Client, wait))?;
        }
        if let Some(service) = &self.service {
            service
                .take(now)
                .map_err(|wait| limited(Scope::Service, wait))?;
        }
        Ok(())
    }

    /// Clients with a bucket now.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.clients.as_ref().map_or(0, |clients| {
            let state = clients.state.lock().unwrap_or_else(|e| e.into_inner());
            state.buckets.len()
        })
    }
}

/// Which bucket refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The service's, every client together.
    Service,
    /// The client's own.
    Client,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(requests_per_second: f64, burst: u32) -> Option<RateLimitConfig> {
        Some(RateLimitConfig {
            requests_per_second,
            burst,
        })
    }

    fn at(controls: &Controls, client: &str, public: bool) -> Result<(), ProxyError> {
        controls.admit(client.parse().expect("address"), public)
    }

    #[test]
    fn a_bucket_lets_its_burst_through_then_one_per_interval() {
        let rate = Rate::new(RateLimitConfig {
            requests_per_second: 10.0,
            burst: 3,
        });
        let second = 1_000_000_000;
        let mut tat = 0;
        for _ in 0..3 {
            tat = rate.take(tat, second).expect("within the burst");
        }
        let wait = rate.take(tat, second).expect_err("past the burst");
        assert_eq!(wait, Duration::from_millis(100));
        // 100 ms later one more fits, and only one.
        tat = rate.take(tat, second + 100_000_000).expect("refilled one");
        assert!(rate.take(tat, second + 100_000_000).is_err());
        // Idle long enough, the whole burst again.
        let later = second + 10 * second;
        for _ in 0..3 {
            tat = rate.take(tat, later).expect("refilled");
        }
    }

    #[test]
    fn clients_are_limited_apart_and_the_service_together() {
        let config = ControlsConfig {
            rate_limit: limit(0.001, 5),
            client_rate_limit: limit(0.001, 2),
            ..ControlsConfig::default()
        };
        let controls = Controls::new(&config, None, 100);
        for _ in 0..2 {
            at(&controls, "192.0.2.1", true).expect("client's burst");
        }
        let refused = at(&controls, "192.0.2.1", true).expect_err("client's bucket is empty");
        assert!(matches!(
            refused,
            ProxyError::RateLimited {
                scope: Scope::Client,
                ..
            }
        ));
        // An IPv6 client's /64 is one client.
        at(&controls, "2001:db8::1", true).expect("another client");
        at(&controls, "2001:db8::2", true).expect("same /64, its second");
        let refused = at(&controls, "2001:db8::3", true).expect_err("the /64 is spent");
        assert!(matches!(
            refused,
            ProxyError::RateLimited {
                scope: Scope::Client,
                ..
            }
        ));
        // Four went through; the service's fifth and last.
        at(&controls, "192.0.2.9", true).expect("the service's fifth");
        let refused = at(&controls, "192.0.2.10", true).expect_err("the service's bucket");
        let ProxyError::RateLimited { scope, retry_after } = refused else {
            panic!("expected a rate limit, got {refused:?}");
        };
        assert_eq!(scope, Scope::Service);
        assert!(
            retry_after > 900,
            "a bucket of one per 1000 s: {retry_after}"
        );
    }

    #[test]
    fn a_flood_of_addresses_is_bounded_and_shares_the_overflow_bucket() {
        let config = ControlsConfig {
            client_rate_limit: limit(0.001, 3),
            ..ControlsConfig::default()
        };
        let controls = Controls::new(&config, None, 10);
        for i in 0..10 {
            at(&controls, &format!("198.51.100.{i}"), true).expect("tracked");
        }
        // The map is full of buckets that have not refilled: the rest share one.
        for i in 10..13 {
            at(&controls, &format!("198.51.100.{i}"), true).expect("the overflow's burst");
        }
        assert!(at(&controls, "198.51.100.200", true).is_err());
        assert_eq!(controls.tracked(), 10);
        // Those tracked keep their own buckets.
        at(&controls, "198.51.100.1", true).expect("its own second");
    }

    #[test]
    fn refilled_buckets_are_swept_when_the_map_is_full() {
        let config = ControlsConfig {
            client_rate_limit: limit(1000.0, 1),
            ..ControlsConfig::default()
        };
        let controls = Controls::new(&config, None, 4);
        for i in 0..4 {
            at(&controls, &format!("203.0.113.{i}"), true).expect("tracked");
        }
        std::thread::sleep(Duration::from_millis(1100));
        at(&controls, "203.0.113.50", true).expect("after the sweep");
        assert_eq!(controls.tracked(), 1, "refilled buckets are dropped");
    }

    #[test]
    fn address_lists_deny_first_and_hold_on_public_listeners_only() {
        let config = ControlsConfig {
            allow: vec!["192.0.2.0/24".into(), "2001:db8::/32".into()],
            deny: vec!["192.0.2.66".into()],
            ..ControlsConfig::default()
        };
        config.check().expect("valid");
        let controls = Controls::new(&config, None, 10);
        at(&controls, "192.0.2.1", true).expect("allowed");
        at(&controls, "::ffff:192.0.2.1", true).expect("allowed, mapped");
        at(&controls, "2001:db8::5", true).expect("allowed v6");
        for refused in ["192.0.2.66", "198.51.100.1", "2001:db9::1"] {
            assert!(matches!(
                at(&controls, refused, true),
                Err(ProxyError::AddressRefused { .. })
            ));
        }
        at(&controls, "198.51.100.1", false).expect("the private listener has callers");
    }

    #[test]
    fn maintenance_answers_all_but_its_allowed_clients() {
        let config = ControlsConfig {
            maintenance: Some(MaintenanceConfig {
                message: "back at noon".into(),
                allow: vec!["10.0.0.0/8".into()],
                retry_after_seconds: 120,
            }),
            deny: vec!["10.9.0.0/16".into()],
            ..ControlsConfig::default()
        };
        let controls = Controls::new(&config, None, 10);
        let Err(ProxyError::Maintenance {
            message,
            retry_after,
        }) = at(&controls, "192.0.2.1", true)
        else {
            panic!("expected maintenance");
        };
        assert_eq!((&*message, retry_after), ("back at noon", 120));
        at(&controls, "10.1.2.3", true).expect("let through");
        // Let through maintenance is not let through the service's own lists.
        assert!(matches!(
            at(&controls, "10.9.1.1", true),
            Err(ProxyError::AddressRefused { .. })
        ));
    }

    #[test]
    fn buckets_outlive_a_table_that_keeps_their_rate() {
        let config = ControlsConfig {
            rate_limit: limit(0.001, 1),
            ..ControlsConfig::default()
        };
        let first = Controls::new(&config, None, 10);
        at(&first, "192.0.2.1", true).expect("the one");
        let same = Controls::new(&config, Some(&first), 10);
        assert!(at(&same, "192.0.2.1", true).is_err(), "spent stays spent");
        let changed = ControlsConfig {
            rate_limit: limit(0.001, 2),
            ..ControlsConfig::default()
        };
        let other = Controls::new(&changed, Some(&same), 10);
        at(&other, "192.0.2.1", true).expect("a new rate starts full");
    }

    #[test]
    fn bad_controls_name_their_field() {
        let bad = [
            (
                ControlsConfig {
                    rate_limit: limit(0.0, 1),
                    ..ControlsConfig::default()
                },
                "controls.rate_limit.requests_per_second",
            ),
            (
                ControlsConfig {
                    client_rate_limit: limit(f64::NAN, 1),
                    ..ControlsConfig::default()
                },
                "controls.client_rate_limit.requests_per_second",
            ),
            (
                ControlsConfig {
                    rate_limit: limit(1.0, 0),
                    ..ControlsConfig::default()
                },
                "controls.rate_limit.burst",
            ),
            (
                ControlsConfig {
                    deny: vec!["10.0.0.0/8".into(), "10.0.0.1/8".into()],
                    ..ControlsConfig::default()
                },
                "controls.deny[1]",
            ),
            (
                ControlsConfig {
                    allow: vec!["10.0.0.0/8".into(); MAX_ADDRESS_RULES + 1],
                    ..ControlsConfig::default()
                },
                "address rules",
            ),
            (
                ControlsConfig {
                    maintenance: Some(MaintenanceConfig {
                        message: "x".repeat(MAX_MESSAGE_BYTES + 1),
                        allow: Vec::new(),
                        retry_after_seconds: 1,
                    }),
                    ..ControlsConfig::default()
                },
                "controls.maintenance.message",
            ),
        ];
        for (config, field) in bad {
            let error = config.check().expect_err("invalid");
            assert!(error.contains(field), "{error} names {field}");
        }
    }
}
