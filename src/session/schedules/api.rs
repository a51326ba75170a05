//! Schedules as the REST API sees them: their definitions, checked as a chat would be, created, listed, changed, deleted and run now.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::errors::store_failure;
use super::ticks::parse_cron;
use super::{LastRun, Scheduler, invalid, now_ms, rfc3339_ms, unknown_schedule};
use crate::protocol::{self, AgentId, ErrorCode, Principal};
use crate::session::{Audit, SessionError};
use crate::store::schedules::ScheduleRow;

/// Longest schedule name, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest interval: a year.
const MAX_EVERY_SECS: i64 = 366 * 24 * 3600;
/// What `mode: "new"` appends to the agent_id: `-YYYYMMDDTHHMMSS.mmmZ`.
const NEW_SUFFIX_CHARS: usize = 21;

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
    #[schema(value_type = String)]
    pub principal: Principal,
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

impl Scheduler {
    /// The chat a run of `row` sends to `agent_id`, its fields checked as a client's `chat`
    /// frame's are.
    pub(super) fn chat(
        &self,
        row: &ScheduleRow,
        agent_id: &str,
    ) -> Result<protocol::Chat, SessionError> {
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

    async fn find(&self, principal: &Principal, id: &str) -> Result<ScheduleRow, SessionError> {
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
        principal: &Principal,
        body: ScheduleBody,
    ) -> Result<Schedule, SessionError> {
        let created = self.create_unrecorded(principal, body).await;
        self.recorded(principal, "schedule_create", None, created)
            .await
    }

    /// Records a change of `principal`'s schedule `id` (or of the one made) in the audit log.
    async fn recorded(
        &self,
        principal: &Principal,
        action: &'static str,
        id: Option<&str>,
        result: Result<Schedule, SessionError>,
    ) -> Result<Schedule, SessionError> {
        let mut entry = Audit::new(principal, action);
        if let Ok(schedule) = &result {
            entry = entry.detail(json!({ "schedule": schedule.id, "name": schedule.name }));
            if let Ok(agent_id) = AgentId::parse(schedule.agent_id.clone()) {
                entry = entry.on(principal, &agent_id);
            }
        } else if let Some(id) = id {
            entry = entry.detail(json!({ "schedule": protocol::truncate_chars(id, 64) }));
        }
        self.inner.manager.audited(entry, result).await
    }

    async fn create_unrecorded(
        &self,
        principal: &Principal,
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
    pub async fn list(&self, principal: &Principal) -> Result<Vec<Schedule>, SessionError> {
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
    pub async fn list_all(&self, principal: &Principal) -> Result<Vec<Schedule>, SessionError> {
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
    pub async fn get(&self, principal: &Principal, id: &str) -> Result<Schedule, SessionError> {
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
        principal: &Principal,
        id: &str,
        body: ScheduleBody,
    ) -> Result<Schedule, SessionError> {
        let updated = self.update_unrecorded(principal, id, body).await;
        self.recorded(principal, "schedule_update", Some(id), updated)
            .await
    }

    async fn update_unrecorded(
        &self,
        principal: &Principal,
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
    pub async fn delete(&self, principal: &Principal, id: &str) -> Result<(), SessionError> {
        let entry = Audit::new(principal, "schedule_delete")
            .detail(json!({ "schedule": protocol::truncate_chars(id, 64) }));
        let deleted = self.delete_unrecorded(principal, id).await;
        self.inner.manager.audited(entry, deleted).await
    }

    async fn delete_unrecorded(&self, principal: &Principal, id: &str) -> Result<(), SessionError> {
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
    pub async fn run_now(&self, principal: &Principal, id: &str) -> Result<LastRun, SessionError> {
        let row = self.find(principal, id).await?;
        Ok(self.run(&row, "manual").await)
    }
}
