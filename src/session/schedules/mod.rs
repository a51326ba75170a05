//! Scheduled prompts and the one timer of the server: the [`Scheduler`], its state shared by the ticker, the runs, the limits, the REST API and the "continue" turns after a rate limit, in its folder.

mod api;
mod continues;
mod limits;
mod runs;
mod ticks;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use chrono::Utc;
use dashmap::DashMap;
use tokio::sync::Notify;

pub use self::api::{Schedule, ScheduleBody};
pub use self::runs::LastRun;
use super::{Manager, rfc3339_ms};
use crate::config::SchedulesConfig;
use crate::protocol::{self, ErrorCode, Principal};
use crate::session::SessionError;
use crate::store::schedules::ScheduleStore;

/// A run whose turn is still running or queued.
struct Running {
    agent_id: String,
    seq: Option<i64>,
    generation: u64,
}

struct Inner {
    manager: Manager,
    store: Arc<dyn ScheduleStore>,
    time_zone: chrono_tz::Tz,
    max_per_principal: usize,
    wake: Notify,
    running: std::sync::Mutex<HashMap<String, Running>>,
    generation: AtomicU64,
    max_new_runs_per_hour: usize,
    /// Per principal, held from counting a `mode: "new"` run against the limit until its
    /// conversation is stored, so that a principal's runs at once on this node are counted
    /// one after the other (other principals' runs go on meanwhile).
    new_runs: DashMap<Principal, Arc<tokio::sync::Mutex<()>>>,
}

/// Runs schedules; cheap to clone. It keeps each principal's schedules in the store, wakes at
/// their ticks and sends each run through the [`Manager`] as an ordinary chat, marked by a
/// stored `status` `scheduled_run` just before the prompt.
///
/// A tick that finds the schedule's previous run still running or queued is skipped (and
/// recorded as such); ticks missed while the server was down are run once, at start-up. A
/// schedule whose principal can no longer sign in is paused at its tick, and runs that start
/// conversations (`mode: "new"`) are limited per principal per hour.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

fn invalid(message: impl Into<String>) -> SessionError {
    SessionError::new(ErrorCode::InvalidSchedule, message)
}

fn unknown_schedule(id: &str) -> SessionError {
    SessionError::new(
        ErrorCode::UnknownSchedule,
        format!("no schedule with id `{}`", protocol::truncate_chars(id, 64)),
    )
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

impl Scheduler {
    /// A scheduler of `store`'s schedules, running them through `manager`.
    ///
    /// # Errors
    /// When `schedules.time_zone` is not a known time zone.
    pub fn new(
        manager: Manager,
        store: Arc<dyn ScheduleStore>,
        config: &SchedulesConfig,
    ) -> anyhow::Result<Self> {
        let time_zone: chrono_tz::Tz = config.time_zone.parse().map_err(|_| {
            anyhow::anyhow!(
                "schedules.time_zone: unknown time zone `{}` (an IANA name such as Europe/Paris, or UTC)",
                config.time_zone
            )
        })?;
        Ok(Scheduler {
            inner: Arc::new(Inner {
                manager,
                store,
                time_zone,
                max_per_principal: config.max_per_principal,
                wake: Notify::new(),
                running: std::sync::Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
                max_new_runs_per_hour: config.max_new_runs_per_hour,
                new_runs: DashMap::new(),
            }),
        })
    }
}
