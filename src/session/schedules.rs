//! Scheduled prompts: the [`Scheduler`] keeps each principal's schedules in the store, wakes at
//! their ticks and sends each run through the [`Manager`] as an ordinary chat, marked by a
//! stored `status` `scheduled_run` just before the prompt.
//!
//! A tick that finds the schedule's previous run still running or queued is skipped (and
//! recorded as such); ticks missed while the server was down are run once, at start-up. A
//! schedule whose principal can no longer sign in is paused at its tick, and runs that start
//! conversations (`mode: "new"`) are limited per principal per hour.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::errors::store_failure;
use super::{Activity, ChatAccepted, Command, Manager, Outcome};
use crate::config::SchedulesConfig;
use crate::protocol::{self, AgentId, ErrorCode};
use crate::session::SessionError;
use crate::store::NewMessage;
use crate::store::schedules::{ScheduleRow, ScheduleStore};

/// Longest schedule name, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest cron expression, in bytes.
const MAX_CRON_BYTES: usize = 128;
/// Longest interval: a year.
const MAX_EVERY_SECS: i64 = 366 * 24 * 3600;
/// What `mode: "new"` appends to the agent_id: `-YYYYMMDDTHHMMSS.mmmZ`.
const NEW_SUFFIX_CHARS: usize = 21;
/// The longest the loop sleeps without looking at the store again.
const MAX_SLEEP_MS: i64 = 60_000;
/// The pause after the store failed the loop.
const RETRY_MS: i64 = 1_000;
/// The window of `schedules.max_new_runs_per_hour`.
const HOUR: Duration = Duration::from_secs(3600);

/// The body of `POST /api/schedules` (`name`, `agent_id`, `content` and one of `cron` or
/// `every_secs` required) and of `PATCH /api/schedules/{id}` (every field optional; a field
/// left out or `null` keeps its value, and giving `cron` or `every_secs` replaces the other).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleBody {
    /// Shown in lists; the title of the conversations a run starts. 1-100 characters.
    pub name: Option<String>,
    /// The conversation each run is sent to (`mode: "same"`), or the prefix of the
    /// conversations runs start (`mode: "new"`, at most 107 characters then).
    pub agent_id: Option<String>,
    /// The prompt each run sends (text, at most `socket.max_content_bytes`).
    pub content: Option<String>,
    /// A standard 5-field cron expression (minute hour day-of-month month day-of-week), read
    /// in the server's `schedules.time_zone`.
    pub cron: Option<String>,
    /// An interval in seconds, at least 1.
    pub every_secs: Option<i64>,
    /// `same` (default): every run is a turn of `agent_id`. `new`: every run starts
    /// conversation `<agent_id>-<UTC timestamp>`.
    pub mode: Option<String>,
    /// The chat options each run carries, as in a `chat` frame (model, permission_mode, cwd,
    /// system_prompt, ...), checked the same way.
    #[schema(value_type = Option<crate::protocol::ChatOptions>)]
    pub options: Option<Value>,
    /// Whether it runs at its ticks (default true); false pauses it.
    pub enabled: Option<bool>,
}

/// A schedule, as the REST API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Schedule {
    /// Its id.
    pub id: String,
    /// Whose schedule it is.
    pub principal: String,
    /// Its name.
    pub name: String,
    /// The conversation (or prefix of conversations) it sends to.
    pub agent_id: String,
    /// The prompt it sends.
    pub content: String,
    /// Its cron expression, if it runs on one.
    pub cron: Option<String>,
    /// Its interval in seconds, if it runs on one.
    pub every_secs: Option<i64>,
    /// `same` or `new`.
    pub mode: String,
    /// The chat options each run carries (paths in their canonical form).
    #[schema(value_type = crate::protocol::ChatOptions)]
    pub options: Value,
    /// Whether it runs at its ticks.
    pub enabled: bool,
    /// Its next tick (RFC 3339); null while paused.
    pub next_run_at: Option<String>,
    /// Its latest run, if any.
    pub last_run: Option<LastRun>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it was last changed (RFC 3339).
    pub updated_at: String,
}

/// What became of a schedule's latest tick or run-now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LastRun {
    /// The conversation of the run (for a skipped one: of the run still going on).
    pub agent_id: String,
    /// `seq` of the run's user message, once stored.
    pub seq: Option<i64>,
    /// `started` (its turn runs or is queued), `completed` or `failed` (its turn ended, with
    /// an error for `failed`), `skipped` (the previous run was still running or queued),
    /// `limited` (a `mode: "new"` run beyond `schedules.max_new_runs_per_hour`), `paused`
    /// (its principal can no longer sign in, so the schedule was paused) or `refused` (the
    /// chat was refused; `detail` says why).
    pub outcome: String,
    /// When the run was decided (RFC 3339).
    pub at: String,
    /// Why it was skipped, refused or failed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
    /// `tick` (its schedule) or `manual` (run now).
    pub trigger: String,
}

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
    new_runs: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
}

/// A principal's turn to count and start a `mode: "new"` run: its lock is forgotten when the
/// turn ends and nobody else waits for it.
struct NewRunTurn<'a> {
    locks: &'a DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    principal: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for NewRunTurn<'_> {
    fn drop(&mut self) {
        // The guard holds the lock too: released first, the map's is then the only one left
        // unless another run waits (it took its copy under the map's shard lock).
        drop(self.guard.take());
        self.locks
            .remove_if(&self.principal, |_, lock| Arc::strong_count(lock) == 1);
    }
}

/// Runs schedules; cheap to clone.
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

fn rfc3339_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Parses a standard 5-field cron expression.
fn parse_cron(expr: &str) -> Result<croner::Cron, SessionError> {
    if expr.len() > MAX_CRON_BYTES || expr.split_whitespace().count() != 5 {
        return Err(invalid(format!(
            "`cron` must be a 5-field cron expression (minute hour day-of-month month \
             day-of-week) of at most {MAX_CRON_BYTES} bytes"
        )));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| invalid(format!("`cron`: {e}")))
}

/// The first tick of `cron`, read in `time_zone`, strictly after `after_ms` (milliseconds since
/// the epoch).
fn cron_tick(cron: &str, time_zone: chrono_tz::Tz, after_ms: i64) -> Result<i64, SessionError> {
    let cron = parse_cron(cron)?;
    // Ticks are on whole minutes; the search would keep the start's milliseconds.
    let after = DateTime::<Utc>::from_timestamp_millis(after_ms - after_ms.rem_euclid(1000))
        .unwrap_or_default()
        .with_timezone(&time_zone);
    cron.find_next_occurrence(&after, false)
        .map(|t| t.with_timezone(&Utc).timestamp_millis())
        .map_err(|e| invalid(format!("`cron` has no next occurrence: {e}")))
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

    /// Runs due schedules until `stop` fires. Ticks missed while the server was down are due
    /// at once, and run once.
    pub fn spawn(&self, stop: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let now = now_ms();
                let mut failed = false;
                match this.inner.store.due_schedules(now).await {
                    Ok(due) => {
                        for row in due {
                            failed |= !this.tick(row, now).await;
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot read due schedules");
                        failed = true;
                    }
                }
                let earliest = this.inner.store.earliest_tick().await.ok().flatten();
                let mut wait =
                    earliest.map_or(MAX_SLEEP_MS, |at| (at - now_ms()).clamp(0, MAX_SLEEP_MS));
                if failed {
                    // A store that fails now is not asked again at once.
                    wait = wait.max(RETRY_MS);
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = this.inner.wake.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
                }
            }
        });
    }

    /// Claims a due tick (moving the schedule's next tick on) and runs it; false when the store
    /// failed.
    async fn tick(&self, row: ScheduleRow, now: i64) -> bool {
        let next = match (row.every_secs, row.cron.as_deref()) {
            (Some(every), _) => {
                let step = every.saturating_mul(1000);
                let next = row.next_run_ms.saturating_add(step);
                if next <= now { now + step } else { next }
            }
            (None, Some(cron)) => self.next_cron_tick(cron, now).unwrap_or(i64::MAX),
            (None, None) => i64::MAX,
        };
        match self
            .inner
            .store
            .claim_tick(&row.id, row.next_run_ms, next)
            .await
        {
            Ok(true) => {
                let this = self.clone();
                tokio::spawn(async move {
                    // Paused, changed or deleted since it was read: it runs as it is now, or not.
                    let fresh = this
                        .inner
                        .store
                        .find_schedule(&row.principal, &row.id)
                        .await;
                    match fresh {
                        Ok(Some(fresh))
                            if fresh.enabled && !this.principal_exists(&fresh.principal) =>
                        {
                            this.pause_orphan(fresh).await;
                        }
                        Ok(Some(fresh)) if fresh.enabled => {
                            this.run(&fresh, "tick").await;
                        }
                        _ => {}
                    }
                });
                true
            }
            Ok(false) => true,
            Err(err) => {
                tracing::warn!(error = %err, schedule = %row.id, "cannot claim a tick");
                false
            }
        }
    }

    /// Whether the principal of a schedule can still sign in (see
    /// [`crate::config::AuthConfig::principal_exists`]).
    fn principal_exists(&self, principal: &str) -> bool {
        self.inner
            .manager
            .shared
            .config
            .auth
            .principal_exists(principal)
    }

    /// Pauses a schedule whose principal can no longer sign in, recording why: nobody could
    /// see or stop its runs. Its owner may resume it once it can sign in again; an admin sees
    /// it in every principal's schedules.
    async fn pause_orphan(&self, row: ScheduleRow) {
        let last = LastRun {
            agent_id: row.agent_id.clone(),
            seq: None,
            outcome: "paused".into(),
            at: protocol::now_rfc3339(),
            detail: Some(format!(
                "principal `{}` can no longer sign in (it is not among the server's tokens); \
                 the schedule is paused",
                row.principal
            )),
            trigger: "tick".into(),
        };
        let text = serde_json::to_string(&last).expect("runs serialize");
        // Only its state and latest run: a change made since it was read stays.
        match self
            .inner
            .store
            .pause_schedule(&row.id, &protocol::now_rfc3339(), &text)
            .await
        {
            Ok(true) => {
                tracing::warn!(schedule = %row.id, principal = %row.principal,
                    "paused a schedule whose principal can no longer sign in");
                self.inner.manager.shared.metrics.scheduled_run("paused");
            }
            Ok(false) => {}
            Err(err) => tracing::warn!(error = %err, schedule = %row.id, "cannot pause a schedule"),
        }
    }

    /// Takes one of `principal`'s `mode: "new"` runs of the last hour, counted from the
    /// conversations its schedules started (in the store, so that a restart or another node
    /// does not start the count again): the turn to start one, held until it is stored, or
    /// the detail of why not. Without a limit (0) there is nothing to count or wait for.
    async fn take_new_run(&self, principal: &str) -> Result<Option<NewRunTurn<'_>>, String> {
        let max = self.inner.max_new_runs_per_hour;
        if max == 0 {
            return Ok(None);
        }
        let lock = self
            .inner
            .new_runs
            .entry(principal.to_owned())
            .or_default()
            .clone();
        let turn = NewRunTurn {
            locks: &self.inner.new_runs,
            principal: principal.to_owned(),
            guard: Some(lock.lock_owned().await),
        };
        let hour = chrono::TimeDelta::from_std(HOUR).expect("an hour");
        let since = (Utc::now() - hour).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let started = self
            .inner
            .store
            .scheduled_conversations_since(principal, &since)
            .await
            .map_err(|err| format!("store_unavailable: {err}"))?;
        if started >= max as i64 {
            return Err(format!(
                "at most {max} runs that start a conversation per principal per hour \
                 (schedules.max_new_runs_per_hour)"
            ));
        }
        Ok(Some(turn))
    }

    fn next_cron_tick(&self, cron: &str, after_ms: i64) -> Result<i64, SessionError> {
        cron_tick(cron, self.inner.time_zone, after_ms)
    }

    /// The first tick of a new or changed definition after `after_ms`. A cron expression
    /// that rarely or never matches takes a while to search: that runs off the async workers.
    async fn next_tick(&self, row: &ScheduleRow, after_ms: i64) -> Result<i64, SessionError> {
        match (row.every_secs, row.cron.clone()) {
            (Some(every), _) => Ok(after_ms.saturating_add(every.saturating_mul(1000))),
            (None, Some(cron)) => {
                let time_zone = self.inner.time_zone;
                tokio::task::spawn_blocking(move || cron_tick(&cron, time_zone, after_ms))
                    .await
                    .map_err(|_| invalid("`cron` could not be evaluated"))?
            }
            (None, None) => Err(invalid("give one of `cron` or `every_secs`")),
        }
    }

    /// The chat a run of `row` sends to `agent_id`, its fields checked as a client's `chat`
    /// frame's are.
    fn chat(&self, row: &ScheduleRow, agent_id: &str) -> Result<protocol::Chat, SessionError> {
        let options: Value = serde_json::from_str(&row.options).unwrap_or(Value::Null);
        let fields = serde_json::Map::from_iter([
            ("content".to_owned(), Value::String(row.content.clone())),
            ("options".to_owned(), options),
        ]);
        let limits = self.inner.manager.shared.config.decode_limits();
        Ok(protocol::decode_chat(
            AgentId::parse(agent_id)?,
            &fields,
            limits,
        )?)
    }

    /// Checks a schedule's definition as a chat would be checked, and returns it with its
    /// options in their canonical form.
    async fn checked(&self, mut row: ScheduleRow) -> Result<ScheduleRow, SessionError> {
        let name = row.name.trim();
        if name.is_empty()
            || name.chars().count() > MAX_NAME_CHARS
            || name.chars().any(char::is_control)
        {
            return Err(invalid(format!(
                "`name` must be 1-{MAX_NAME_CHARS} characters without control characters"
            )));
        }
        row.name = name.to_owned();
        match row.mode.as_str() {
            "same" => {}
            "new" => {
                if row.agent_id.len() > protocol::MAX_AGENT_ID_CHARS - NEW_SUFFIX_CHARS {
                    return Err(SessionError::new(
                        ErrorCode::InvalidAgentId,
                        format!(
                            "with `mode: \"new\"`, `agent_id` is at most {} characters (a timestamp is appended)",
                            protocol::MAX_AGENT_ID_CHARS - NEW_SUFFIX_CHARS
                        ),
                    ));
                }
            }
            _ => return Err(invalid("`mode` must be \"same\" or \"new\"")),
        }
        match (&row.cron, row.every_secs) {
            (Some(_), Some(_)) => {
                return Err(invalid("give either `cron` or `every_secs`, not both"));
            }
            (None, None) => return Err(invalid("give one of `cron` or `every_secs`")),
            (Some(cron), None) => {
                parse_cron(cron)?;
            }
            (None, Some(every)) if !(1..=MAX_EVERY_SECS).contains(&every) => {
                return Err(invalid(format!(
                    "`every_secs` must be an integer from 1 to {MAX_EVERY_SECS}"
                )));
            }
            (None, Some(_)) => {}
        }
        // The same decoder and the same path rules as a chat: agent_id, content, options.
        let agent_id = row.agent_id.clone();
        let chat = self.chat(&row, &agent_id)?;
        let chat = self
            .inner
            .manager
            .resolve_paths(&row.principal, chat)
            .await?;
        // With `mode: "new"` each run makes a new conversation, whose agent the options pick.
        self.inner
            .manager
            .check_options(&row.principal, &chat, row.mode == "new")
            .await?;
        row.options = serde_json::to_string(&chat.options).expect("options serialize");
        Ok(row)
    }

    fn view(&self, row: ScheduleRow) -> Schedule {
        Schedule {
            principal: row.principal,
            next_run_at: row.enabled.then(|| rfc3339_ms(row.next_run_ms)),
            last_run: row
                .last_run
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok()),
            options: serde_json::from_str(&row.options).unwrap_or_else(|_| json!({})),
            id: row.id,
            name: row.name,
            agent_id: row.agent_id,
            content: row.content,
            cron: row.cron,
            every_secs: row.every_secs,
            mode: row.mode,
            enabled: row.enabled,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }

    async fn find(&self, principal: &str, id: &str) -> Result<ScheduleRow, SessionError> {
        self.inner
            .store
            .find_schedule(principal, id)
            .await
            .map_err(store_failure)?
            .ok_or_else(|| unknown_schedule(id))
    }

    /// Creates a schedule of `principal`'s.
    ///
    /// # Errors
    /// `invalid_schedule`, `invalid_agent_id`, `invalid_content`, `invalid_options`,
    /// `limit_exceeded` (too many schedules) or `store_unavailable`.
    pub async fn create(
        &self,
        principal: &str,
        body: ScheduleBody,
    ) -> Result<Schedule, SessionError> {
        let missing = |field: &str| invalid(format!("`{field}` is missing"));
        let now = protocol::now_rfc3339();
        let row = ScheduleRow {
            id: uuid::Uuid::new_v4().to_string(),
            principal: principal.to_owned(),
            name: body.name.ok_or_else(|| missing("name"))?,
            agent_id: body.agent_id.ok_or_else(|| {
                SessionError::new(ErrorCode::InvalidAgentId, "`agent_id` is missing")
            })?,
            content: body.content.ok_or_else(|| {
                SessionError::new(ErrorCode::InvalidContent, "`content` is missing")
            })?,
            cron: body.cron,
            every_secs: body.every_secs,
            mode: body.mode.unwrap_or_else(|| "same".into()),
            options: body.options.unwrap_or(Value::Null).to_string(),
            enabled: body.enabled.unwrap_or(true),
            next_run_ms: 0,
            last_run: None,
            created_at: now.clone(),
            updated_at: now,
        };
        let mut row = self.checked(row).await?;
        row.next_run_ms = self.next_tick(&row, now_ms()).await?;
        let max = self.inner.max_per_principal;
        if max > 0 {
            let count = self
                .inner
                .store
                .count_schedules(principal)
                .await
                .map_err(store_failure)?;
            if count >= max as i64 {
                return Err(SessionError::new(
                    ErrorCode::LimitExceeded,
                    format!("at most {max} schedules per principal"),
                ));
            }
        }
        self.inner
            .store
            .insert_schedule(&row)
            .await
            .map_err(store_failure)?;
        self.inner.wake.notify_one();
        Ok(self.view(row))
    }

    /// `principal`'s schedules, oldest first.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn list(&self, principal: &str) -> Result<Vec<Schedule>, SessionError> {
        let rows = self
            .inner
            .store
            .list_schedules(principal)
            .await
            .map_err(store_failure)?;
        Ok(rows.into_iter().map(|r| self.view(r)).collect())
    }

    /// Every principal's schedules, oldest first, for one of the server's admins
    /// (`auth.admins`): among them, those paused because their principal can no longer sign in.
    ///
    /// # Errors
    /// `forbidden` for anyone else, `store_unavailable`.
    pub async fn list_all(&self, principal: &str) -> Result<Vec<Schedule>, SessionError> {
        if !self.inner.manager.shared.config.auth.is_admin(principal) {
            return Err(SessionError::new(
                ErrorCode::Forbidden,
                "only the server's admins (auth.admins) see every principal's schedules",
            ));
        }
        let rows = self
            .inner
            .store
            .all_schedules()
            .await
            .map_err(store_failure)?;
        Ok(rows.into_iter().map(|r| self.view(r)).collect())
    }

    /// One of `principal`'s schedules.
    ///
    /// # Errors
    /// `unknown_schedule` (also for another principal's) or `store_unavailable`.
    pub async fn get(&self, principal: &str, id: &str) -> Result<Schedule, SessionError> {
        Ok(self.view(self.find(principal, id).await?))
    }

    /// Changes a schedule: the fields `body` gives replace the stored ones, and the whole is
    /// checked again. A new timing, or resuming a paused schedule, counts its next tick from
    /// now.
    ///
    /// # Errors
    /// As [`Self::create`], and `unknown_schedule`.
    pub async fn update(
        &self,
        principal: &str,
        id: &str,
        body: ScheduleBody,
    ) -> Result<Schedule, SessionError> {
        let old = self.find(principal, id).await?;
        if body.cron.is_some() && body.every_secs.is_some() {
            return Err(invalid("give either `cron` or `every_secs`, not both"));
        }
        let mut row = old.clone();
        if let Some(name) = body.name {
            row.name = name;
        }
        if let Some(agent_id) = body.agent_id {
            row.agent_id = agent_id;
        }
        if let Some(content) = body.content {
            row.content = content;
        }
        if let Some(cron) = body.cron {
            row.cron = Some(cron);
            row.every_secs = None;
        }
        if let Some(every) = body.every_secs {
            row.every_secs = Some(every);
            row.cron = None;
        }
        if let Some(mode) = body.mode {
            row.mode = mode;
        }
        if let Some(options) = body.options {
            row.options = options.to_string();
        }
        if let Some(enabled) = body.enabled {
            row.enabled = enabled;
        }
        let mut row = self.checked(row).await?;
        let retimed = row.cron != old.cron || row.every_secs != old.every_secs;
        if retimed || (row.enabled && !old.enabled) {
            row.next_run_ms = self.next_tick(&row, now_ms()).await?;
        }
        row.updated_at = protocol::now_rfc3339();
        let found = self
            .inner
            .store
            .update_schedule(&row)
            .await
            .map_err(store_failure)?;
        if !found {
            return Err(unknown_schedule(id));
        }
        self.inner.wake.notify_one();
        Ok(self.view(row))
    }

    /// Deletes a schedule; a run of it in progress goes on, no other starts.
    ///
    /// # Errors
    /// `unknown_schedule` or `store_unavailable`.
    pub async fn delete(&self, principal: &str, id: &str) -> Result<(), SessionError> {
        let found = self
            .inner
            .store
            .delete_schedule(principal, id)
            .await
            .map_err(store_failure)?;
        if !found {
            return Err(unknown_schedule(id));
        }
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Runs a schedule now, paused or not, without moving its next tick. Skipped like a tick
    /// when its previous run is still running or queued.
    ///
    /// # Errors
    /// `unknown_schedule` or `store_unavailable`.
    pub async fn run_now(&self, principal: &str, id: &str) -> Result<LastRun, SessionError> {
        let row = self.find(principal, id).await?;
        Ok(self.run(&row, "manual").await)
    }

    /// Sends one run of `row`, unless its previous run is still going on; records and
    /// returns what became of it.
    async fn run(&self, row: &ScheduleRow, trigger: &str) -> LastRun {
        let at = protocol::now_rfc3339();
        let agent_id = if row.mode == "new" {
            format!(
                "{}-{}",
                row.agent_id,
                Utc::now().format("%Y%m%dT%H%M%S%.3fZ")
            )
        } else {
            row.agent_id.clone()
        };
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed);
        let skipped = {
            let mut running = self.inner.running.lock().expect("not poisoned");
            match running.get(&row.id) {
                Some(previous) => Some(LastRun {
                    agent_id: previous.agent_id.clone(),
                    seq: previous.seq,
                    outcome: "skipped".into(),
                    at: at.clone(),
                    detail: Some(format!(
                        "the previous run (conversation `{}`) is still running or queued",
                        previous.agent_id
                    )),
                    trigger: trigger.into(),
                }),
                None => {
                    running.insert(
                        row.id.clone(),
                        Running {
                            agent_id: agent_id.clone(),
                            seq: None,
                            generation,
                        },
                    );
                    None
                }
            }
        };
        let metrics = &self.inner.manager.shared.metrics;
        if let Some(last) = skipped {
            tracing::info!(schedule = %row.id, "skipped a run: the previous one is still going on");
            metrics.scheduled_run("skipped");
            self.record(&row.id, &last).await;
            return last;
        }
        let new_run = match row.mode.as_str() {
            "new" => match self.take_new_run(&row.principal).await {
                Ok(turn) => turn,
                Err(detail) => {
                    self.forget(&row.id, generation);
                    let last = LastRun {
                        agent_id,
                        seq: None,
                        outcome: "limited".into(),
                        at,
                        detail: Some(detail),
                        trigger: trigger.into(),
                    };
                    metrics.scheduled_run("limited");
                    self.record(&row.id, &last).await;
                    return last;
                }
            },
            _ => None,
        };
        let accepted = self.send(row, &agent_id, trigger).await;
        drop(new_run);
        let last = match accepted {
            Ok(accepted) => {
                let seq = accepted.seq;
                if let Some(r) = self
                    .inner
                    .running
                    .lock()
                    .expect("not poisoned")
                    .get_mut(&row.id)
                    .filter(|r| r.generation == generation)
                {
                    r.seq = Some(seq);
                }
                metrics.scheduled_run("started");
                let last = LastRun {
                    agent_id,
                    seq: Some(seq),
                    outcome: "started".into(),
                    at,
                    detail: None,
                    trigger: trigger.into(),
                };
                // Recorded before the watcher may record the end of the turn.
                self.record(&row.id, &last).await;
                let this = self.clone();
                let (id, principal) = (row.id.clone(), row.principal.clone());
                tokio::spawn(async move {
                    this.watch(id, principal, generation, accepted).await;
                });
                return last;
            }
            Err(err) => {
                self.forget(&row.id, generation);
                tracing::warn!(schedule = %row.id, error = %err.message, "a scheduled run was refused");
                metrics.scheduled_run("refused");
                LastRun {
                    agent_id,
                    seq: None,
                    outcome: "refused".into(),
                    at,
                    detail: Some(format!("{}: {}", err.code.as_str(), err.message)),
                    trigger: trigger.into(),
                }
            }
        };
        self.record(&row.id, &last).await;
        last
    }

    /// Hands the run's chat, marked by its `scheduled_run` status, to the manager.
    async fn send(
        &self,
        row: &ScheduleRow,
        agent_id: &str,
        trigger: &str,
    ) -> Result<ChatAccepted, SessionError> {
        let chat = self.chat(row, agent_id)?;
        let payload = json!({
            "status": "scheduled_run",
            "detail": format!("run of schedule `{}`", row.name),
            "schedule_id": row.id,
            "schedule_name": row.name,
            "trigger": trigger,
        });
        let mut marker = NewMessage::new("status", payload.to_string());
        marker.title = Some(row.name.clone());
        // Counted against the hourly limit: the conversation is this run's own.
        marker.schedule_id = (row.mode == "new").then(|| row.id.clone());
        let agent_id = chat.agent_id.clone();
        let command = Command::Chat {
            chat,
            marker: Some(Box::new(marker)),
        };
        let manager = &self.inner.manager;
        let Outcome::Chat(pending) = manager.run(&row.principal, &agent_id, command).await? else {
            unreachable!("a chat's outcome")
        };
        pending.stored().await
    }

    fn forget(&self, id: &str, generation: u64) {
        let mut running = self.inner.running.lock().expect("not poisoned");
        if running.get(id).is_some_and(|r| r.generation == generation) {
            running.remove(id);
        }
    }

    async fn record(&self, id: &str, last: &LastRun) {
        let text = serde_json::to_string(last).expect("runs serialize");
        if let Err(err) = self.inner.store.set_last_run(id, &text).await {
            tracing::warn!(error = %err, schedule = %id, "cannot record a scheduled run");
        }
    }

    /// Follows a run's conversation until its turn ends (the `result`s of the turns queued
    /// ahead of it, then its own), then lets the schedule run again and records the outcome
    /// unless a later decision was recorded meanwhile.
    async fn watch(&self, id: String, principal: String, generation: u64, accepted: ChatAccepted) {
        let ChatAccepted {
            conversation,
            seq,
            queue_position,
            mut events,
        } = accepted;
        let mut results_left = queue_position + 1;
        let mut ended: Option<(&str, Option<String>)> = None;
        loop {
            match events.recv().await {
                Ok(frame) if frame.kind == "result" && frame.seq.is_some_and(|s| s > seq) => {
                    results_left -= 1;
                    if results_left == 0 {
                        let v: Value =
                            serde_json::from_str(frame.text.as_str()).unwrap_or_default();
                        let message = &v["message"];
                        ended = Some(if message["is_error"] == true {
                            let why = message["result"]
                                .as_str()
                                .or(message["subtype"].as_str())
                                .map(|s| protocol::truncate_chars(s, 200).to_owned());
                            ("failed", why)
                        } else {
                            ("completed", None)
                        });
                        break;
                    }
                }
                Ok(frame)
                    if frame.kind == "status"
                        && frame.text.as_str().contains("\"status\":\"deleted\"") =>
                {
                    ended = Some(("failed", Some("the conversation was deleted".into())));
                    break;
                }
                Ok(_) => {}
                Err(super::events::RecvError::Lagged(_)) => {
                    // Too far behind to count results: wait until the conversation is idle.
                    drop(events);
                    while self
                        .inner
                        .manager
                        .activity(&principal, &conversation.agent_id)
                        == Activity::Busy
                    {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    break;
                }
                Err(super::events::RecvError::Closed) => break,
            }
        }
        self.forget(&id, generation);
        let Some((outcome, detail)) = ended else {
            return;
        };
        // Record the end only if the latest decision is still this run's start.
        let Ok(Some(row)) = self.inner.store.find_schedule(&principal, &id).await else {
            return;
        };
        let Some(mut last) = row
            .last_run
            .as_deref()
            .and_then(|s| serde_json::from_str::<LastRun>(s).ok())
        else {
            return;
        };
        if last.outcome == "started"
            && last.seq == Some(seq)
            && conversation.agent_id == last.agent_id.as_str()
        {
            last.outcome = outcome.into();
            last.detail = detail;
            self.record(&id, &last).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_standard_five_field_expressions_parse() {
        for good in [
            "* * * * *",
            "*/15 9-17 * * 1-5",
            "0 8 1 jan,jul mon",
            "5 4 * * sun",
        ] {
            assert!(parse_cron(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "@hourly",
            "* * * *",
            "0 * * * * *",
            "0 0 * * * 2030",
            "60 * * * *",
            "* 24 * * *",
            "* * 32 * *",
            "* * * 13 *",
            "-1 * * * *",
            "* * * * * * *",
        ] {
            let err = parse_cron(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSchedule, "{bad}");
        }
        let long = format!("{} * * * *", "0,".repeat(100));
        assert!(parse_cron(&long).is_err(), "too long");
        let never = cron_tick("0 0 30 2 *", chrono_tz::Tz::UTC, 0).unwrap_err();
        assert_eq!(
            never.code,
            ErrorCode::InvalidSchedule,
            "February 30th never comes"
        );
    }

    #[test]
    fn a_cron_tick_is_the_next_match_in_the_time_zone_on_a_whole_minute() {
        let next = |zone: &str, expr: &str, after: &str| {
            let after = DateTime::parse_from_rfc3339(after)
                .unwrap()
                .timestamp_millis();
            let at = cron_tick(expr, zone.parse().unwrap(), after).unwrap();
            rfc3339_ms(at)
        };
        assert_eq!(
            next("UTC", "0 9 * * *", "2026-11-23T08:59:59.999Z"),
            "2026-11-23T09:00:00.000Z"
        );
        assert_eq!(
            next("UTC", "0 9 * * *", "2026-11-23T09:00:00.000Z"),
            "2026-11-24T09:00:00.000Z",
            "a tick is strictly after its start"
        );
        // Paris is UTC+1 in winter and UTC+2 in summer.
        assert_eq!(
            next("Europe/Paris", "0 8 * * *", "2026-01-10T00:00:00Z"),
            "2026-01-10T07:00:00.000Z"
        );
        assert_eq!(
            next("Europe/Paris", "0 8 * * *", "2026-07-10T00:00:00Z"),
            "2026-07-10T06:00:00.000Z"
        );
    }
}
