//! The statements both engines take word for word (numbered parameters, booleans tested as
//! such, `returning`), written once as macros that each store expands over its own pool and
//! connection types; each engine adds the calls whose SQL is its own.

/// The columns of a [`super::SessionRecord`].
pub(super) const SESSION_COLUMNS: &str = "id, principal, agent_id, session_id, sdk_session_id, unified, backend, title, cwd, \
     model, permission_mode, created_at, last_active_at, message_count, last_seq, prompt_count, \
     result_count, total_cost_usd, input_tokens, output_tokens, duration_ms, next_launch, memory_from_seq, \
     launch_options, worktree, auto_continue, limit_wait_until_ms, limit_tries";

/// Rows an unfinished import loses per transaction while it is discarded.
pub(super) const DISCARD_ROWS: i64 = 2000;

/// An update of one conversation's row that changed `rows` rows: none means it is gone.
pub(super) fn found(rows: u64) -> super::Result<()> {
    match rows {
        0 => Err(super::StoreError::UnknownSession),
        _ => Ok(()),
    }
}

/// `impl Store for $store` (a struct with a `pool` and a `writer` of [`super::batch`]): the
/// shared calls, plus the engine's own given as `{ ... }`.
macro_rules! store_impl {
    ($store:ty, { $($own:tt)* }) => {
        impl $store {
            /// Inserts the row of conversation `new` unless its key or its `session_id` is
            /// taken (then None); a `pending` one (an import being stored) is invisible until
            /// finished.
            async fn insert_session(&self, new: &NewSession, pending: bool) -> Result<Option<RowId>> {
                let now = crate::protocol::now_rfc3339();
                Ok(sqlx::query_scalar(
                    "insert into session_info (principal, agent_id, session_id, backend, cwd, model,
                        permission_mode, launch_options, created_at, last_active_at, pending, worktree)
                     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11)
                     on conflict do nothing returning id",
                )
                .bind(new.principal.as_str())
                .bind(new.agent_id.as_str())
                .bind(new.session_id.as_str())
                .bind(&new.backend)
                .bind(&new.cwd)
                .bind(&new.model)
                .bind(&new.permission_mode)
                .bind(super::edits::launch_json(&new.launch_options))
                .bind(&now)
                .bind(pending)
                .bind(super::records::worktree_json(new.worktree.as_ref()))
                // Read to the end: SQLite commits a statement that returns rows when it is
                // done, and a commit that fails (a full disk) is reported only there; a read
                // of the first row alone would miss it.
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .next())
            }
        }

        #[async_trait]
        impl Store for $store {
            $($own)*

            async fn find_session(
                &self,
                principal: &crate::protocol::Principal,
                agent_id: &crate::protocol::AgentId,
            ) -> Result<Option<SessionRecord>> {
                let sql = format!(
                    "select {} from session_info where principal = $1 and agent_id = $2 and not pending",
                    super::shared::SESSION_COLUMNS
                );
                Ok(sqlx::query_as(&sql)
                    .bind(principal.as_str())
                    .bind(agent_id.as_str())
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn create_session(&self, new: NewSession) -> Result<SessionRecord> {
                self.insert_session(&new, false).await?;
                // Not found: the key is taken by an import that is not finished.
                self.find_session(&new.principal, &new.agent_id)
                    .await?
                    .ok_or(StoreError::Importing)
            }

            async fn append(&self, row: RowId, messages: Vec<NewMessage>) -> Result<i64> {
                super::batch::append(&self.writer, row, messages).await
            }

            async fn record_agent_session(
                &self,
                row: RowId,
                sdk_session_id: &str,
                unified: bool,
            ) -> Result<()> {
                sqlx::query(
                    "update session_info set sdk_session_id = $1, unified = $2, next_launch = null
                     where id = $3",
                )
                .bind(super::text(sdk_session_id))
                .bind(unified)
                .bind(row)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn next_result_after(&self, row: RowId, seq: i64) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "select seq from messages where session_pk = $1 and seq > $2
                       and message_type = 'result' order by seq limit 1",
                )
                .bind(row)
                .bind(seq)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn prompts_before(&self, row: RowId, seq: i64) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "select count(*) from messages where session_pk = $1 and seq < $2 and prompt
                       and seq > (select memory_from_seq from session_info where id = $1)",
                )
                .bind(row)
                .bind(seq)
                .fetch_one(&self.pool)
                .await?)
            }

            async fn project_activity(&self, principal: &crate::protocol::Principal) -> Result<Vec<(String, i64, String)>> {
                Ok(sqlx::query_as(
                    "select cwd, count(*), max(last_active_at) from session_info
                     where principal = $1 and not pending group by cwd",
                )
                .bind(principal.as_str())
                .fetch_all(&self.pool)
                .await?)
            }

            async fn find_by_session_id(&self, session_id: &str) -> Result<Option<SessionRecord>> {
                let sql = format!(
                    "select {} from session_info where session_id = $1",
                    super::shared::SESSION_COLUMNS
                );
                Ok(sqlx::query_as(&sql)
                    .bind(session_id)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn stored_uuids(&self, row: RowId) -> Result<std::collections::HashSet<String>> {
                let uuids: Vec<String> = sqlx::query_scalar(
                    "select sdk_uuid from messages where session_pk = $1 and sdk_uuid is not null",
                )
                .bind(row)
                .fetch_all(&self.pool)
                .await?;
                Ok(uuids.into_iter().collect())
            }

            async fn delete_session(&self, row: RowId) -> Result<()> {
                sqlx::query("delete from session_info where id = $1")
                    .bind(row)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn set_options(
                &self,
                row: RowId,
                model: Option<&str>,
                permission_mode: Option<&str>,
                launch: &crate::protocol::LaunchOptions,
            ) -> Result<()> {
                sqlx::query(
                    "update session_info set model = $1, permission_mode = $2, launch_options = $3
                     where id = $4",
                )
                .bind(model)
                .bind(permission_mode)
                .bind(super::edits::launch_json(launch))
                .bind(row)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn begin_import(&self, new: NewSession) -> Result<SessionRecord> {
                let row = self
                    .insert_session(&new, true)
                    .await?
                    .ok_or(StoreError::AgentExists)?;
                // Its appends come before any actor's: the import owns the conversation.
                self.take_lease(row).await?;
                let sql = format!(
                    "select {} from session_info where id = $1",
                    super::shared::SESSION_COLUMNS
                );
                Ok(sqlx::query_as(&sql).bind(row).fetch_one(&self.pool).await?)
            }

            async fn finish_import(&self, row: RowId, remembered: bool) -> Result<()> {
                let done = sqlx::query(
                    "update session_info set pending = false,
                        memory_from_seq = case when $1 then memory_from_seq else last_seq end
                     where id = $2 and pending",
                )
                .bind(remembered)
                .bind(row)
                .execute(&self.pool)
                .await?;
                self.release_lease(row).await;
                super::shared::found(done.rows_affected())
            }

            async fn discard_import(&self, row: RowId) -> Result<()> {
                loop {
                    let gone = sqlx::query(
                        "delete from messages where session_pk = $1 and seq in
                           (select seq from messages where session_pk = $1 order by seq limit $2)",
                    )
                    .bind(row)
                    .bind(super::shared::DISCARD_ROWS)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                    if gone == 0 {
                        break;
                    }
                }
                sqlx::query("delete from session_info where id = $1 and pending")
                    .bind(row)
                    .execute(&self.pool)
                    .await?;
                self.release_lease(row).await;
                Ok(())
            }

            async fn discard_unfinished_imports(&self) -> Result<u64> {
                let pending: Vec<RowId> =
                    sqlx::query_scalar("select id from session_info where pending")
                        .fetch_all(&self.pool)
                        .await?;
                let mut discarded = 0;
                for &row in &pending {
                    // One another node is storing right now is its own to finish.
                    if self.take_lease(row).await.is_ok() {
                        self.discard_import(row).await?;
                        discarded += 1;
                    }
                }
                Ok(discarded)
            }

        }
    };
}

/// `impl EditTx for $tx` (a tuple struct around a `&mut` connection): the shared statements,
/// plus the engine's own given as `{ ... }`.
macro_rules! edit_tx_impl {
    ($tx:ty, { $($own:tt)* }) => {
        #[async_trait]
        impl EditTx for $tx {
            $($own)*

            async fn message_type(&mut self, row: RowId, seq: i64) -> Result<Option<String>> {
                Ok(sqlx::query_scalar(
                    "select message_type from messages where session_pk = $1 and seq = $2",
                )
                .bind(row)
                .bind(seq)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn agent_row(
                &mut self,
                row: RowId,
            ) -> Result<Option<(Option<String>, Option<String>, i64)>> {
                Ok(sqlx::query_as(
                    "select sdk_session_id, next_launch, memory_from_seq from session_info
                     where id = $1",
                )
                .bind(row)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn anchor_at(&mut self, row: RowId, seq: i64) -> Result<Option<String>> {
                Ok(sqlx::query_scalar(
                    "select turn_anchor from messages where session_pk = $1 and seq <= $2
                       and message_type = 'result' and turn_anchor is not null
                     order by seq desc limit 1",
                )
                .bind(row)
                .bind(seq)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn delete_after(&mut self, row: RowId, seq: i64) -> Result<u64> {
                Ok(sqlx::query("delete from messages where session_pk = $1 and seq > $2")
                    .bind(row)
                    .bind(seq)
                    .execute(&mut *self.0)
                    .await?
                    .rows_affected())
            }

            async fn set_next_launch(
                &mut self,
                row: RowId,
                launch: &str,
                memory_from: i64,
            ) -> Result<()> {
                sqlx::query(
                    "update session_info set next_launch = $1, memory_from_seq = $2 where id = $3",
                )
                .bind(launch)
                .bind(memory_from)
                .bind(row)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn recount(&mut self, row: RowId) -> Result<()> {
                sqlx::query(
                    "update session_info set
                        message_count = (select count(*) from messages where session_pk = $1),
                        prompt_count = (select count(*) from messages
                                        where session_pk = $1 and prompt),
                        result_count = (select count(*) from messages
                                        where session_pk = $1 and message_type = 'result')
                     where id = $1",
                )
                .bind(row)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn last_result(&mut self, row: RowId) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "select max(seq) from messages where session_pk = $1 and message_type = 'result'",
                )
                .bind(row)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn agent_messages_after(&mut self, row: RowId, seq: i64) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "select count(*) from messages where session_pk = $1 and seq > $2
                       and message_type in ('user', 'assistant', 'system', 'result')",
                )
                .bind(row)
                .bind(seq)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn insert_fork(
                &mut self,
                source: RowId,
                fork: &super::edits::ForkRow<'_>,
            ) -> Result<Option<RowId>> {
                let new = fork.new;
                Ok(sqlx::query_scalar(
                    "insert into session_info (principal, agent_id, session_id, backend, cwd, model,
                        permission_mode, launch_options, title, title_words, created_at,
                        last_active_at, last_seq, next_launch, memory_from_seq, worktree)
                     select $1, $2, $3, $4, $5, $6, $7, $8, title, title_words, $9, $9, $10, $11,
                        $12, $14
                     from session_info where id = $13
                     on conflict (principal, agent_id) do nothing
                     returning id",
                )
                .bind(new.principal.as_str())
                .bind(new.agent_id.as_str())
                .bind(new.session_id.as_str())
                .bind(&new.backend)
                .bind(&new.cwd)
                .bind(&new.model)
                .bind(&new.permission_mode)
                .bind(super::edits::launch_json(&new.launch_options))
                .bind(&fork.created_at)
                .bind(fork.last_seq)
                .bind(&fork.next_launch)
                .bind(fork.memory_from_seq)
                .bind(source)
                .bind(super::records::worktree_json(new.worktree.as_ref()))
                .fetch_optional(&mut *self.0)
                .await?)
            }
        }
    };
}

pub(super) use edit_tx_impl;
pub(super) use store_impl;
