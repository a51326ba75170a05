//! The agent process of a conversation: how it is launched (new, resumed or forked), and restarted
//! with a back-off after it exits unexpectedly.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::publish::Out;
use super::{Actor, NO_TURN};
use crate::agent::{Launch, SpawnSpec};
use crate::config::SessionConfig;
use crate::session::spend::Terms;
use crate::store::{NewMessage, NextLaunch};

impl Actor {
    /// How the next agent starts: as a rewind or fork decided, else resuming the id the agent
    /// reported, else new under our own id.
    fn launch(&self) -> Launch {
        let new_session_id = || uuid::Uuid::new_v4().to_string();
        match (&self.next_launch, &self.sdk_session_id) {
            (Some(NextLaunch::ForkAt { from, at }), _) => Launch::ResumeAt {
                sdk_session_id: from.clone(),
                at_message_uuid: at.clone(),
                new_session_id: new_session_id(),
            },
            (Some(NextLaunch::Fork { from }), _) => Launch::Fork {
                sdk_session_id: from.clone(),
                new_session_id: new_session_id(),
            },
            (Some(NextLaunch::Fresh), _) => Launch::New {
                session_id: new_session_id(),
            },
            (None, Some(id)) => Launch::Resume {
                sdk_session_id: id.clone(),
            },
            (None, None) => Launch::New {
                session_id: self.conversation.session_id.to_string(),
            },
        }
    }

    pub(super) async fn spawn_agent(&mut self, user_seq: i64, terms: Terms) -> Result<(), String> {
        let shared = self.shared.clone();
        let launch = self.launch();
        // A fork after a rewind resumes the agent's own history too.
        let resumed = !matches!(launch, Launch::New { .. });
        self.publish_agent_status(
            if resumed { "resuming" } else { "creating" },
            if resumed {
                "resuming the agent"
            } else {
                "starting the agent"
            },
        );
        let prior_prompts = shared
            .store
            .prompts_before(self.conversation.row, user_seq)
            .await
            .map_err(|e| e.to_string())?;
        // A project directory (or an added one) may have left the principal's roots, or been
        // replaced by a symbolic link, since the conversation was created.
        crate::session::checks::check_stored_dirs(
            &shared.config,
            &self.conversation.principal,
            &self.conversation.session_id,
            &self.cwd.to_string_lossy(),
            self.conversation.worktree.as_ref(),
            &self.launch_options.add_dirs,
        )
        .await?;
        // The server's own workspace is made on demand; a project directory must exist. On a
        // store that nodes share, a conversation that ran before ran in a workspace that every
        // node must see: a node that can't see it refuses rather than start over in an empty one.
        let present = tokio::fs::metadata(&self.cwd)
            .await
            .is_ok_and(|m| m.is_dir());
        if !present {
            if shared.store.is_shared() && self.sdk_session_id.is_some() {
                return Err(format!(
                    "this node can't see the conversation's working directory {}: the nodes \
                     sharing a store must share their data directories and project roots, at \
                     the same paths",
                    self.cwd.display()
                ));
            }
            if !self.cwd.starts_with(shared.config.workspaces_dir()) {
                return Err(format!(
                    "the project directory {} is gone",
                    self.cwd.display()
                ));
            }
            tokio::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.cwd)
                .await
                .map_err(|e| format!("cannot create the workspace: {e}"))?;
        }
        let spec = SpawnSpec {
            agent_id: self.conversation.agent_id.clone(),
            session_id: self.conversation.session_id.clone(),
            cwd: self.cwd.clone(),
            launch,
            model: self.model.clone(),
            permission_mode: self.permission_mode.clone(),
            options: self.launch_options.clone(),
            prior_prompts,
            background: user_seq == NO_TURN,
            watched: {
                let events = self.events.clone();
                crate::agent::Watched::new(move || events.receiver_count() > 0)
            },
            credentials: terms.credentials.clone(),
            max_budget_usd: terms.max_budget_usd,
        };
        let backend = self.backend.as_ref().ok_or_else(|| {
            format!(
                "the agent `{}` is not configured on this server any more",
                self.conversation.agent
            )
        })?;
        // Grants stored while the operator allowed more, or before a rule was tightened, are
        // checked again as the directories are.
        crate::session::checks::check_stored_grants(
            &shared.config,
            |mode| backend.unattended_mode(mode),
            spec.permission_mode.as_deref(),
            &spec.options.allowed_tools,
        )?;
        self.restore_transcript(backend.as_ref(), &spec.launch)
            .await;
        let conn = backend.spawn(spec).await.map_err(|e| e.to_string())?;
        shared.metrics.agent_spawned(resumed);
        self.process_cost = 0.0;
        self.terms = Some(terms);
        self.agent = Some(conn);
        self.publish_agent_status("active", "the agent is running");
        Ok(())
    }

    /// After an unexpected exit: plans to start the agent again in the background (at once the
    /// first time, then after a doubling delay), unless a turn already started one, or gives
    /// up with a `respawn_failed` status after too many exits in the window.
    pub(super) fn schedule_respawn(&mut self, detail: &str) {
        let config = &self.shared.config.session;
        let may_restart = !self.stopping && self.agent.is_none();
        match self.respawns.exited(Instant::now(), config, may_restart) {
            AfterExit::Nothing | AfterExit::GaveUp => {}
            AfterExit::GiveUp { exits } => {
                tracing::warn!(agent_id = %self.conversation.agent_id, exits, detail, "agent keeps exiting; not restarting it");
                self.publish_status(
                    "respawn_failed",
                    &format!(
                        "the agent exited unexpectedly {exits} times in {} s ({detail}); it is no longer restarted in the background, the next message starts it",
                        config.respawn_window_secs
                    ),
                );
            }
            AfterExit::Restart { exits, delay } => {
                tracing::info!(agent_id = %self.conversation.agent_id, exits, ?delay, detail, "agent exited unexpectedly; restarting it");
                self.publish_status(
                    "respawning",
                    &format!(
                        "the agent exited unexpectedly ({detail}); starting it again in {} ms",
                        delay.as_millis()
                    ),
                );
            }
        }
    }

    /// Starts the agent with no turn for it, unless one is running or a turn is on its way;
    /// the idle timer starts over.
    pub(super) async fn warm(&mut self) {
        if !self.turns.is_busy() {
            self.idle_since = Instant::now();
        }
        if self.stopping
            || self.agent.is_some()
            || self.turns.is_running()
            || self.backend.is_none()
        {
            return;
        }
        self.respawns.at = None;
        self.start_idle_agent().await;
    }

    /// Starts the agent again in the background, if nothing else has started it meanwhile.
    pub(super) async fn respawn(&mut self) {
        self.respawns.at = None;
        if self.stopping
            || self.agent.is_some()
            || self.turns.is_running()
            || self.backend.is_none()
        {
            return;
        }
        self.start_idle_agent().await;
    }

    /// Starts the agent with no turn for it (a respawn or a warm-up); a failure to start
    /// counts as an unexpected exit.
    async fn start_idle_agent(&mut self) {
        // No turn could start now (a cap is reached, credentials are missing): neither does
        // an agent with nothing to do.
        let terms = match self.launch_terms().await {
            Ok(terms) => terms,
            Err(refusal) => {
                let err = crate::session::SessionError::from(refusal);
                tracing::debug!(agent_id = %self.conversation.agent_id, reason = %err.message, "not starting the agent in the background");
                return;
            }
        };
        if let Err(detail) = self.spawn_agent(NO_TURN, terms).await {
            tracing::warn!(agent_id = %self.conversation.agent_id, detail, "cannot start the agent in the background");
            self.schedule_respawn(&detail);
        }
    }

    pub(super) fn on_exit(&mut self, detail: &str, outs: &mut Vec<Out>, turn_ended: &mut bool) {
        self.agent = None;
        if self.turns.is_running() {
            tracing::warn!(agent_id = %self.conversation.agent_id, detail, "agent died mid-turn");
            self.shared.metrics.agent_crashed();
            outs.push(Out::Status(
                "crashed",
                format!("the agent stopped mid-turn: {detail}"),
            ));
            outs.push(Out::Stored(NewMessage::error_result(
                &self.conversation.session_id,
                "crashed",
                self.turn_ends(),
            )));
            *turn_ended = true;
        }
    }
}

/// An actor's record of its agent's unexpected exits, and when to start it again.
#[derive(Debug, Default)]
pub(super) struct Respawns {
    /// When the agent that exited unexpectedly is started again in the background.
    pub(super) at: Option<Instant>,
    /// Unexpected exits within the respawn window, oldest first.
    crashes: VecDeque<Instant>,
    /// Set once restarting was given up (and said); cleared by a turn that ends well.
    gave_up: bool,
}

/// What an actor does after its agent exited unexpectedly.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterExit {
    /// Nothing now: the agent runs again already, the actor is stopping, or restarts are off.
    Nothing,
    /// Start it again after `delay`: the `exits`-th exit within the window.
    Restart { exits: usize, delay: Duration },
    /// Too many exits within the window: no more restarts in the background (said once).
    GiveUp { exits: usize },
    /// Given up already.
    GaveUp,
}

impl Respawns {
    /// Records an unexpected exit at `now` and says what follows; `may_restart` is false when
    /// the actor is stopping or a turn has already started another agent.
    pub(super) fn exited(
        &mut self,
        now: Instant,
        config: &SessionConfig,
        may_restart: bool,
    ) -> AfterExit {
        let window = Duration::from_secs(config.respawn_window_secs);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            self.crashes.pop_front();
        }
        self.crashes.push_back(now);
        if !may_restart || config.max_respawns == 0 {
            return AfterExit::Nothing;
        }
        let exits = self.crashes.len();
        if exits > config.max_respawns as usize {
            self.at = None;
            if std::mem::replace(&mut self.gave_up, true) {
                return AfterExit::GaveUp;
            }
            return AfterExit::GiveUp { exits };
        }
        let delay = respawn_delay(
            exits,
            config.respawn_backoff_ms,
            config.respawn_backoff_max_secs,
        );
        self.at = Some(now + delay);
        AfterExit::Restart { exits, delay }
    }

    /// The agent proved healthy (a turn ended well): a later exit starts the back-off over.
    pub(super) fn healthy(&mut self) {
        self.crashes.clear();
        self.gave_up = false;
    }
}

/// How long to wait before restarting an agent after its `exits`-th unexpected exit in the
/// window: nothing after the first, then `base_ms`, doubling, at most `max_secs`.
fn respawn_delay(exits: usize, base_ms: u64, max_secs: u64) -> std::time::Duration {
    let max = std::time::Duration::from_secs(max_secs);
    if exits <= 1 {
        return std::time::Duration::ZERO;
    }
    let doublings = u32::try_from(exits - 2).unwrap_or(u32::MAX).min(32);
    let ms = base_ms.saturating_mul(1u64 << doublings);
    std::time::Duration::from_millis(ms).min(max)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{AfterExit, Respawns, respawn_delay};
    use crate::config::SessionConfig;

    fn config(max_respawns: u32) -> SessionConfig {
        SessionConfig {
            max_respawns,
            respawn_backoff_ms: 1000,
            respawn_backoff_max_secs: 30,
            respawn_window_secs: 300,
            ..SessionConfig::default()
        }
    }

    /// Exits close together restart the agent after a doubling delay, until too many in the
    /// window give up (said once); exits that have left the window no longer count, and a
    /// healthy turn starts the count over.
    #[tokio::test(start_paused = true)]
    async fn unexpected_exits_back_off_then_give_up_within_the_window() {
        let config = config(3);
        let mut respawns = Respawns::default();
        let restart = |exits, secs| AfterExit::Restart {
            exits,
            delay: Duration::from_secs(secs),
        };
        let exit = |r: &mut Respawns| r.exited(Instant::now(), &config, true);
        assert_eq!(exit(&mut respawns), restart(1, 0));
        assert_eq!(respawns.at, Some(Instant::now()));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(exit(&mut respawns), restart(2, 1));
        assert_eq!(respawns.at, Some(Instant::now() + Duration::from_secs(1)));
        assert_eq!(exit(&mut respawns), restart(3, 2));
        assert_eq!(exit(&mut respawns), AfterExit::GiveUp { exits: 4 });
        assert_eq!(respawns.at, None);
        assert_eq!(exit(&mut respawns), AfterExit::GaveUp);
        // The first exit leaves the window: four remain, still over the limit.
        tokio::time::advance(Duration::from_secs(295)).await;
        assert_eq!(exit(&mut respawns), AfterExit::GaveUp);
        // All of them leave it: the count starts over, and so does the back-off.
        tokio::time::advance(Duration::from_secs(300)).await;
        assert_eq!(exit(&mut respawns), restart(1, 0));
        assert_eq!(exit(&mut respawns), restart(2, 1));
        respawns.healthy();
        assert_eq!(exit(&mut respawns), restart(1, 0));
    }

    /// An exit while the actor stops, or after a turn already started another agent, is
    /// counted but restarts nothing; with restarts off nothing ever restarts.
    #[tokio::test(start_paused = true)]
    async fn an_exit_restarts_nothing_when_it_may_not() {
        let mut respawns = Respawns::default();
        let now = Instant::now();
        assert_eq!(respawns.exited(now, &config(3), false), AfterExit::Nothing);
        assert_eq!(respawns.at, None);
        assert_eq!(
            respawns.exited(now, &config(3), true),
            AfterExit::Restart {
                exits: 2,
                delay: Duration::from_secs(1)
            }
        );
        let mut off = Respawns::default();
        for _ in 0..10 {
            assert_eq!(off.exited(now, &config(0), true), AfterExit::Nothing);
        }
    }

    #[test]
    fn respawn_backs_off_doubling_up_to_the_cap() {
        let delays: Vec<Duration> = (1..=8).map(|n| respawn_delay(n, 1000, 30)).collect();
        let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [0, 1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(respawn_delay(1000, 1000, 30), Duration::from_secs(30));
    }
}
