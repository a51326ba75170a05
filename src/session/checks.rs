//! Option and access checks made before anything starts: a chat's options against its
//! conversation's agent and the server's settings, and the directories a conversation names against
//! the project roots its principal may use.

use super::errors::store_error;
use super::{Manager, SessionRecord};
use crate::agent::registry::Agents;
use crate::config::Config;
use crate::protocol::{self, Chat, ErrorCode, Principal, SessionId};
use crate::session::SessionError;

impl Manager {
    /// [`chat_options`] under this server's agents and settings.
    pub(super) fn check_chat_options(
        &self,
        conversation_agent: &str,
        chat: &Chat,
    ) -> Result<(), SessionError> {
        chat_options(
            &self.shared.agents,
            self.shared.config.agent.allow_bypass_permissions,
            conversation_agent,
            chat,
        )
    }

    /// Checks a chat's options as sending it ([`Manager::chat`]) would
    /// before creating or starting anything, against the conversation's agent, or for a new
    /// conversation (always when `new`) the agent it would get.
    ///
    /// # Errors
    /// `invalid_options`, `store_unavailable`.
    pub(crate) async fn check_options(
        &self,
        principal: &Principal,
        chat: &Chat,
        new: bool,
    ) -> Result<(), SessionError> {
        let existing = if new {
            None
        } else {
            self.shared
                .store
                .find_session(principal, &chat.agent_id)
                .await
                .map_err(|e| store_error(e, &chat.agent_id))?
        };
        let agent = match existing {
            Some(record) => record.backend,
            None => self.pick_agent(chat)?,
        };
        self.check_chat_options(&agent, chat)
    }

    /// The agent a new conversation gets: the chat's `options.agent`, else the default.
    pub(super) fn pick_agent(&self, chat: &Chat) -> Result<String, SessionError> {
        let agents = &self.shared.agents;
        let name = chat
            .options
            .agent
            .clone()
            .unwrap_or_else(|| agents.default_name().to_owned());
        if agents.get(&name).is_none() {
            let known: Vec<String> = agents.names();
            return Err(SessionError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "no agent named `{name}` on this server (agents: {})",
                    known.join(", ")
                ),
            ));
        }
        Ok(name)
    }

    /// Refuses an operation the conversation's agent can't do with `unsupported`.
    pub(super) fn require(
        &self,
        agent: &str,
        what: &str,
        can: impl Fn(&crate::agent::Supports) -> bool,
    ) -> Result<(), SessionError> {
        let supported = self
            .shared
            .agents
            .get(agent)
            .is_some_and(|b| can(&b.supports()));
        if supported {
            return Ok(());
        }
        Err(SessionError::new(
            ErrorCode::Unsupported,
            format!("this conversation's agent `{agent}` can't {what}"),
        ))
    }

    /// Replaces the paths a chat names (`options.cwd`, `options.add_dirs`) by their canonical
    /// form, each checked by [`crate::projects::resolve_dir`] against the roots `principal`
    /// may use; anything else is `invalid_options`, before anything is created.
    ///
    /// # Errors
    /// `invalid_options`, naming the first path refused.
    pub async fn resolve_paths(
        &self,
        principal: &Principal,
        mut chat: Chat,
    ) -> Result<Chat, SessionError> {
        let roots = &self.shared.config.projects.roots;
        let refuse = |field: &str, why: String| {
            SessionError::new(
                ErrorCode::InvalidOptions,
                format!("`options.{field}`: {why}"),
            )
        };
        if let Some(raw) = chat.options.cwd.clone() {
            match crate::projects::resolve_dir(roots, principal, &raw).await {
                Ok(dir) => chat.options.cwd = Some(dir.to_string_lossy().into_owned()),
                Err(why) => return Err(refuse("cwd", why)),
            }
        }
        if let Some(dirs) = chat.options.add_dirs.clone() {
            let mut resolved = Vec::with_capacity(dirs.len());
            for raw in dirs {
                match crate::projects::resolve_dir(roots, principal, &raw).await {
                    Ok(dir) => resolved.push(dir.to_string_lossy().into_owned()),
                    Err(why) => return Err(refuse("add_dirs", why)),
                }
            }
            resolved.dedup();
            chat.options.add_dirs = Some(resolved);
        }
        Ok(chat)
    }

    /// [`check_stored_dirs`] for a stored conversation whose agent would start with
    /// `add_dirs`, as a typed error: `forbidden`.
    pub(super) async fn check_dirs(
        &self,
        record: &SessionRecord,
        add_dirs: &[String],
    ) -> Result<(), SessionError> {
        check_stored_dirs(
            &self.shared.config,
            &record.principal,
            &record.session_id,
            &record.cwd,
            record.worktree().as_ref(),
            add_dirs,
        )
        .await
        .map_err(|why| SessionError::new(ErrorCode::Forbidden, why))
    }

    /// [`check_stored_grants`] for a stored conversation whose agent would start with
    /// `permission_mode` and `allowed_tools`, as a typed error: `forbidden`.
    pub(super) fn check_grants(
        &self,
        record: &SessionRecord,
        permission_mode: Option<&str>,
        allowed_tools: &[String],
    ) -> Result<(), SessionError> {
        let agent = self.shared.agents.get(&record.backend);
        check_stored_grants(
            &self.shared.config,
            |mode| agent.as_ref().is_some_and(|a| a.unattended_mode(mode)),
            permission_mode,
            allowed_tools,
        )
        .map_err(|why| SessionError::new(ErrorCode::Forbidden, why))
    }

    /// Whether `cwd` is the workspace the server made for conversation `session_id`.
    pub(super) fn is_own_workspace(&self, session_id: &SessionId, cwd: &str) -> bool {
        own_workspace(&self.shared.config, session_id, cwd)
    }
}

/// Whether `cwd` is the workspace the server made for conversation `session_id`
/// (`<data-dir>/workspaces/<session_id>`), rather than a project directory. A [`SessionId`] is
/// a UUID, so that is always one directory right under the workspaces.
fn own_workspace(config: &Config, session_id: &SessionId, cwd: &str) -> bool {
    std::path::Path::new(cwd) == config.workspaces_dir().join(session_id)
}

/// Checks, before an agent starts in them, that a stored conversation's directories are still
/// ones `principal` may use: its working directory (unless it is the conversation's own
/// workspace) and each of `add_dirs` must still resolve ([`crate::projects::resolve_dir`]) to
/// themselves, inside a root the principal may use now. A root removed from the settings or
/// limited to other principals since, or a directory replaced by a symbolic link (which would
/// start the agent wherever the link leads), fails with a message saying so. For a conversation
/// in its own `worktree`, that is the repository's directory it was made from, and the working
/// directory must be a real directory of the worktree (no link out of it).
pub(crate) async fn check_stored_dirs(
    config: &Config,
    principal: &Principal,
    session_id: &SessionId,
    cwd: &str,
    worktree: Option<&crate::worktrees::Worktree>,
    add_dirs: &[String],
) -> Result<(), String> {
    let origin = worktree.map(|w| w.repo.join(&w.subdir).to_string_lossy().into_owned());
    if worktree.is_some() {
        let own = tokio::fs::canonicalize(config.worktrees_dir())
            .await
            .map(|dir| dir.join(session_id));
        let real = tokio::fs::canonicalize(cwd).await;
        let inside = matches!((&real, &own), (Ok(real), Ok(own)) if real.starts_with(own));
        if !inside || !real.is_ok_and(|real| real == std::path::Path::new(cwd)) {
            return Err(format!(
                "the conversation's working directory `{cwd}` is no longer a directory of its \
                 worktree (it is missing or was replaced by a symbolic link); nothing was started"
            ));
        }
    }
    let project = match &origin {
        Some(origin) => Some(("project directory", origin.as_str())),
        None => (!own_workspace(config, session_id, cwd)).then_some(("working directory", cwd)),
    };
    let added = add_dirs.iter().map(|dir| ("added directory", dir.as_str()));
    for (what, dir) in project.into_iter().chain(added) {
        let resolved = crate::projects::resolve_dir(&config.projects.roots, principal, dir).await;
        if resolved.is_ok_and(|canonical| canonical == std::path::Path::new(dir)) {
            continue;
        }
        return Err(format!(
            "the conversation's {what} `{dir}` is no longer a directory inside a project root \
             you may use (the root was removed or limited to others, or the directory was \
             replaced by a symbolic link); nothing was started"
        ));
    }
    Ok(())
}

/// Checks, before an agent starts with them, that a stored conversation's grants are still
/// ones this server allows: without `agent.allow_bypass_permissions`, a permission mode that
/// runs tools without asking (by `unattended_mode`) or an `allowed_tools` pattern that grants a
/// whole tool ([`protocol::grants_whole_tool`]) stored while the setting was on, or before a
/// pattern's rule was tightened, fails with a message saying so.
pub(crate) fn check_stored_grants(
    config: &Config,
    unattended_mode: impl Fn(&str) -> bool,
    permission_mode: Option<&str>,
    allowed_tools: &[String],
) -> Result<(), String> {
    if config.agent.allow_bypass_permissions {
        return Ok(());
    }
    if let Some(mode) = permission_mode.filter(|mode| unattended_mode(mode)) {
        return Err(format!(
            "the conversation's permission mode `{mode}` lets the agent run tools without \
             asking, which this server no longer allows (agent.allow_bypass_permissions); \
             choose another mode in a chat's options; nothing was started"
        ));
    }
    if let Some(pattern) = allowed_tools
        .iter()
        .find(|p| protocol::grants_whole_tool(p))
    {
        return Err(format!(
            "the conversation's allowed_tools pattern `{pattern}` grants more than it names, \
             which this server no longer allows (agent.allow_bypass_permissions); set \
             `options.allowed_tools` in a chat to replace it; nothing was started"
        ));
    }
    Ok(())
}

/// Checks a chat's options against the conversation's agent (by name): `options.agent`
/// must be that agent, the model and permission mode must be ones it offers (for an ACP
/// agent, once that is known), and a mode that runs tools without asking, or an
/// `allowed_tools` pattern that grants a whole tool, needs `agent.allow_bypass_permissions`.
/// Images to an agent known not to take them, and launch options an agent does not take,
/// are `unsupported`.
/// `unattended_allowed` is `agent.allow_bypass_permissions`.
fn chat_options(
    agents: &Agents,
    unattended_allowed: bool,
    conversation_agent: &str,
    chat: &Chat,
) -> Result<(), SessionError> {
    let invalid = |message: String| SessionError::new(ErrorCode::InvalidOptions, message);
    if let Some(agent) = &chat.options.agent
        && agent != conversation_agent
    {
        return Err(invalid(format!(
            "this conversation's agent is `{conversation_agent}`; it can't change to `{agent}`"
        )));
    }
    let Some(backend) = agents.get(conversation_agent) else {
        return Ok(());
    };
    if !chat.content.images().is_empty() && !backend.supports().images {
        return Err(SessionError::new(
            ErrorCode::Unsupported,
            format!(
                "this conversation's agent `{conversation_agent}` does not take images; \
                 send the message without them"
            ),
        ));
    }
    let takes = backend.supports().launch_options;
    if let Some(field) = (chat.options.launch_options().into_iter()).find(|o| !takes.contains(o)) {
        return Err(SessionError::new(
            ErrorCode::Unsupported,
            format!(
                "this conversation's agent `{conversation_agent}` does not take \
                 `options.{field}` (its launch_options: [{}]); send the chat without it",
                takes
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if let Some(mode) = &chat.options.permission_mode
        && backend.unattended_mode(mode)
        && !unattended_allowed
    {
        return Err(invalid(format!(
            "`options.permission_mode` `{mode}` lets the agent run tools without asking; \
             this server does not allow it (agent.allow_bypass_permissions)"
        )));
    }
    if !unattended_allowed
        && let Some(pattern) =
            (chat.options.allowed_tools.iter().flatten()).find(|p| protocol::grants_whole_tool(p))
    {
        return Err(invalid(format!(
            "`options.allowed_tools` `{pattern}` lets the agent use a whole tool without \
             asking; this server allows only exact arguments, a literal command prefix \
             that is not a shell or interpreter, or files below the working directory \
             that are not hidden, such as `Bash(git log:*)` or `Edit(src/**)` \
             (agent.allow_bypass_permissions)"
        )));
    }
    backend
        .check_options(
            chat.options.model.as_deref(),
            chat.options.permission_mode.as_deref(),
        )
        .map_err(invalid)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{chat_options, check_stored_dirs, check_stored_grants};
    use crate::agent::demo::DemoBackend;
    use crate::agent::registry::Agents;
    use crate::config::{AgentKind, Config, ProjectRoot};
    use crate::protocol::Principal;
    use crate::protocol::{Chat, ChatOptions, Content, ErrorCode, SessionId};

    fn agents() -> Agents {
        let demo = DemoBackend {
            word_delay: Duration::ZERO,
            gate_dir: None,
        };
        Agents::single("demo", AgentKind::Demo, Arc::new(demo))
    }

    fn chat(options: ChatOptions) -> Chat {
        Chat {
            agent_id: "x".into(),
            content: Content::Text("hi".into()),
            client_msg_id: None,
            options,
            sender: None,
        }
    }

    /// A chat may not change its conversation's agent, nor, unless the server allows it, ask
    /// for a mode that runs tools without asking or a pattern that grants a whole tool; a
    /// pattern that names what it allows, and the agent's own name, are fine.
    #[test]
    fn a_chat_s_options_are_checked_against_its_agent_and_the_settings() {
        let agents = agents();
        let code = |allowed: bool, options: ChatOptions| {
            chat_options(&agents, allowed, "demo", &chat(options)).map_err(|e| e.code)
        };
        assert_eq!(code(false, ChatOptions::default()), Ok(()));
        let named = ChatOptions {
            agent: Some("demo".into()),
            ..ChatOptions::default()
        };
        assert_eq!(code(false, named), Ok(()));
        let other = ChatOptions {
            agent: Some("claude".into()),
            ..ChatOptions::default()
        };
        assert_eq!(code(true, other), Err(ErrorCode::InvalidOptions));
        let bypass = ChatOptions {
            permission_mode: Some("bypassPermissions".into()),
            ..ChatOptions::default()
        };
        assert_eq!(code(false, bypass.clone()), Err(ErrorCode::InvalidOptions));
        assert_eq!(code(true, bypass), Ok(()));
        let tools = |pattern: &str| ChatOptions {
            allowed_tools: Some(vec![pattern.into()]),
            ..ChatOptions::default()
        };
        assert_eq!(code(false, tools("Bash")), Err(ErrorCode::InvalidOptions));
        assert_eq!(
            code(false, tools("Bash(*)")),
            Err(ErrorCode::InvalidOptions)
        );
        assert_eq!(code(true, tools("Bash")), Ok(()));
        assert_eq!(code(false, tools("Bash(git log:*)")), Ok(()));
        // A conversation whose agent is no longer configured is checked for its agent only.
        let gone = chat_options(&agents, false, "retired", &chat(tools("Bash")));
        assert_eq!(gone, Ok(()));
    }

    /// A stored conversation's grants are checked again before its agent starts: without
    /// `agent.allow_bypass_permissions`, a mode that runs tools without asking, or a pattern
    /// that grants a whole tool, stops it with a message naming what is refused; with the
    /// setting on, or with grants that name what they allow, it starts.
    #[test]
    fn stored_grants_the_settings_no_longer_allow_stop_the_start() {
        let mut config = Config::default();
        let unattended = |mode: &str| mode == "bypassPermissions";
        let check = |config: &Config, mode: Option<&str>, tools: &[&str]| {
            let tools: Vec<String> = tools.iter().map(|t| (*t).to_owned()).collect();
            check_stored_grants(config, unattended, mode, &tools)
        };
        assert_eq!(
            check(&config, Some("default"), &["Bash(git log:*)"]),
            Ok(())
        );
        let mode = check(&config, Some("bypassPermissions"), &[]).unwrap_err();
        assert!(
            mode.contains("permission mode `bypassPermissions`"),
            "{mode}"
        );
        let tool = check(&config, None, &["Bash(git log:*)", "Bash(*)"]).unwrap_err();
        assert!(tool.contains("pattern `Bash(*)`"), "{tool}");
        config.agent.allow_bypass_permissions = true;
        assert_eq!(check(&config, Some("bypassPermissions"), &["Bash"]), Ok(()));
    }

    /// A stored conversation's directories must still be ones its principal may use: its own
    /// workspace always is; a project directory is while its root allows the principal and
    /// the path is still the directory itself, not a symbolic link put in its place.
    #[tokio::test]
    async fn stored_directories_must_still_be_usable_by_their_principal() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let project = root.join("project");
        std::fs::create_dir(&project).unwrap();
        let mut config = Config {
            data_dir: root.join("data"),
            ..Config::default()
        };
        config.projects.roots = vec![ProjectRoot::open(root.clone())];
        let session = SessionId::new();
        let own = config.workspaces_dir().join(&session);
        let (own, project) = (own.to_str().unwrap(), project.to_str().unwrap());
        let check = |config: &Config, cwd: &str, add: &[&str]| {
            let add: Vec<String> = add.iter().map(|d| (*d).to_owned()).collect();
            let config = config.clone();
            let session = session.clone();
            let cwd = cwd.to_owned();
            async move {
                check_stored_dirs(
                    &config,
                    &Principal::new("alice"),
                    &session,
                    &cwd,
                    None,
                    &add,
                )
                .await
            }
        };
        assert_eq!(check(&config, own, &[]).await, Ok(()));
        assert_eq!(check(&config, project, &[project]).await, Ok(()));
        // Another conversation's workspace is not this one's own: it is checked as a project.
        let other = config.workspaces_dir().join(SessionId::new());
        let other = check(&config, other.to_str().unwrap(), &[])
            .await
            .unwrap_err();
        assert!(other.contains("working directory"), "{other}");
        let link = root.join("link");
        std::os::unix::fs::symlink(project, &link).unwrap();
        let linked = check(&config, own, &[link.to_str().unwrap()])
            .await
            .unwrap_err();
        assert!(linked.contains("added directory"), "{linked}");
        config.projects.roots[0].principals = vec!["bob".into()];
        let limited = check(&config, project, &[]).await.unwrap_err();
        assert!(
            limited.contains(&format!("working directory `{project}`")),
            "{limited}"
        );
        assert_eq!(check(&config, own, &[]).await, Ok(()));
    }
}
