//! The CLI's command line and its allow-listed environment.

use super::ClaudeSettings;
use crate::agent::Launch;
use crate::protocol::LaunchOptions;

impl ClaudeSettings {
    /// The CLI's command line for a launch, every value (ids, the system prompt, tool
    /// patterns, directories) in `--flag=value` form, so no value can ever be read as a flag
    /// of its own. Tool patterns are joined with commas (a pattern never holds one).
    pub fn args(
        &self,
        launch: &Launch,
        model: Option<&str>,
        permission_mode: Option<&str>,
        options: &LaunchOptions,
    ) -> Vec<String> {
        let mut args: Vec<String> = [
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-prompt-tool",
            "stdio",
        ]
        .map(String::from)
        .into();
        match launch {
            Launch::New { session_id } => args.push(format!("--session-id={session_id}")),
            Launch::Resume { sdk_session_id } => args.push(format!("--resume={sdk_session_id}")),
            Launch::ResumeAt {
                sdk_session_id,
                at_message_uuid,
                new_session_id,
            } => args.extend([
                format!("--resume={sdk_session_id}"),
                format!("--resume-session-at={at_message_uuid}"),
                "--fork-session".into(),
                format!("--session-id={new_session_id}"),
            ]),
            Launch::Fork {
                sdk_session_id,
                new_session_id,
            } => args.extend([
                format!("--resume={sdk_session_id}"),
                "--fork-session".into(),
                format!("--session-id={new_session_id}"),
            ]),
        }
        if let Some(model) = model.or(self.config.model.as_deref()) {
            args.push(format!("--model={model}"));
        }
        if let Some(mode) = permission_mode.or(self.config.permission_mode.as_deref()) {
            args.push(format!("--permission-mode={mode}"));
        }
        if let Some(prompt) = &options.system_prompt {
            args.push(format!("--append-system-prompt={prompt}"));
        }
        if !options.allowed_tools.is_empty() {
            args.push(format!(
                "--allowedTools={}",
                options.allowed_tools.join(",")
            ));
        }
        if !options.disallowed_tools.is_empty() {
            args.push(format!(
                "--disallowedTools={}",
                options.disallowed_tools.join(",")
            ));
        }
        if let Some(turns) = options.max_turns {
            args.push(format!("--max-turns={turns}"));
        }
        for dir in &options.add_dirs {
            args.push(format!("--add-dir={dir}"));
        }
        args.extend(self.config.extra_args.iter().cloned());
        args
    }

    /// The CLI's environment: an allow-list of the server's, never its own secrets.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = self.env_from(std::env::vars());
        env.retain(|(name, _)| !self.extra_env.iter().any(|(extra, _)| extra == name));
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// The allow-listed part of `vars`, plus `CLAUDE_CONFIG_DIR` when one is configured.
    fn env_from(&self, vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, _)| {
                matches!(
                    name.as_str(),
                    "PATH" | "HOME" | "LANG" | "CLAUDE_CONFIG_DIR"
                ) || name.starts_with("ANTHROPIC_")
                    || (name.starts_with("CLAUDE_CODE_") && name != "CLAUDE_CODE_CHILD_SESSION")
                    || self.config.env_allow.iter().any(|allowed| allowed == name)
            })
            .collect();
        if let Some(dir) = &self.config.config_dir {
            env.retain(|(name, _)| name != "CLAUDE_CONFIG_DIR");
            env.push((
                "CLAUDE_CONFIG_DIR".into(),
                dir.to_string_lossy().into_owned(),
            ));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::ClaudeConfig;

    fn settings(config: ClaudeConfig) -> ClaudeSettings {
        ClaudeSettings {
            config,
            bin: PathBuf::from("/bin/claude"),
            workspaces: PathBuf::from("/data/workspaces"),
            extra_env: Vec::new(),
        }
    }

    const BASE: [&str; 9] = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
    ];

    /// The arguments after the fixed ones.
    fn tail(args: &[String]) -> Vec<&str> {
        assert_eq!(args[..BASE.len()], BASE.map(String::from));
        args[BASE.len()..].iter().map(String::as_str).collect()
    }

    #[test]
    fn every_launch_passes_its_ids_as_flag_equals_value() {
        let s = settings(ClaudeConfig::default());
        let none = LaunchOptions::default();
        let args = |launch: Launch| s.args(&launch, None, None, &none);
        assert_eq!(
            tail(&args(Launch::New {
                session_id: "s-1".into()
            })),
            ["--session-id=s-1"]
        );
        assert_eq!(
            tail(&args(Launch::Resume {
                sdk_session_id: "r-1".into()
            })),
            ["--resume=r-1"]
        );
        assert_eq!(
            tail(&args(Launch::ResumeAt {
                sdk_session_id: "r-1".into(),
                at_message_uuid: "m-1".into(),
                new_session_id: "n-1".into(),
            })),
            [
                "--resume=r-1",
                "--resume-session-at=m-1",
                "--fork-session",
                "--session-id=n-1"
            ]
        );
        assert_eq!(
            tail(&args(Launch::Fork {
                sdk_session_id: "r-1".into(),
                new_session_id: "n-1".into(),
            })),
            ["--resume=r-1", "--fork-session", "--session-id=n-1"]
        );
    }

    /// A value that looks like a flag stays inside its own argument.
    #[test]
    fn values_never_become_arguments_of_their_own() {
        let s = settings(ClaudeConfig::default());
        let args = s.args(
            &Launch::Resume {
                sdk_session_id: "--dangerously-skip-permissions".into(),
            },
            Some("--evil model"),
            Some("-p"),
            &LaunchOptions {
                system_prompt: Some("--dangerously-skip-permissions\n-p".into()),
                allowed_tools: vec!["Bash(rm -rf:*)".into(), "Read".into()],
                disallowed_tools: vec!["WebFetch".into()],
                max_turns: Some(4),
                add_dirs: vec!["/srv/-x".into()],
            },
        );
        assert_eq!(
            tail(&args),
            [
                "--resume=--dangerously-skip-permissions",
                "--model=--evil model",
                "--permission-mode=-p",
                "--append-system-prompt=--dangerously-skip-permissions\n-p",
                "--allowedTools=Bash(rm -rf:*),Read",
                "--disallowedTools=WebFetch",
                "--max-turns=4",
                "--add-dir=/srv/-x",
            ]
        );
    }

    /// A chat's model and mode win over the configured ones; extra arguments come last.
    #[test]
    fn model_and_mode_default_to_the_configuration() {
        let s = settings(ClaudeConfig {
            model: Some("configured".into()),
            permission_mode: Some("acceptEdits".into()),
            extra_args: vec!["--max-turns=3".into()],
            ..ClaudeConfig::default()
        });
        let new = Launch::New {
            session_id: "s".into(),
        };
        assert_eq!(
            tail(&s.args(&new, None, None, &LaunchOptions::default())),
            [
                "--session-id=s",
                "--model=configured",
                "--permission-mode=acceptEdits",
                "--max-turns=3"
            ]
        );
        assert_eq!(
            tail(&s.args(
                &new,
                Some("chosen"),
                Some("plan"),
                &LaunchOptions::default()
            )),
            [
                "--session-id=s",
                "--model=chosen",
                "--permission-mode=plan",
                "--max-turns=3"
            ]
        );
    }

    fn vars(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), format!("value of {n}")))
            .collect()
    }

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn the_environment_is_an_allow_list() {
        let s = settings(ClaudeConfig {
            env_allow: vec!["EXTRA_ONE".into()],
            ..ClaudeConfig::default()
        });
        let env = s.env_from(vars(&[
            "PATH",
            "HOME",
            "LANG",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "CLAUDE_CODE_MAX_RETRIES",
            "CLAUDE_CONFIG_DIR",
            "EXTRA_ONE",
            "CLAUDE_CODE_CHILD_SESSION",
            "AGENTMUX_TOKENS",
            "AGENTMUX_JWT_HS256_SECRET",
            "AWS_SECRET_ACCESS_KEY",
            "LC_ALL",
            "EXTRA_ONE_MORE",
            "XANTHROPIC_API_KEY",
        ]));
        assert_eq!(
            names(&env),
            [
                "PATH",
                "HOME",
                "LANG",
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL",
                "CLAUDE_CODE_MAX_RETRIES",
                "CLAUDE_CONFIG_DIR",
                "EXTRA_ONE"
            ]
        );
        assert!(env.iter().all(|(n, v)| *v == format!("value of {n}")));
    }

    /// A configured `config_dir` replaces the inherited `CLAUDE_CONFIG_DIR`.
    #[test]
    fn a_configured_config_dir_wins() {
        let s = settings(ClaudeConfig {
            config_dir: Some(PathBuf::from("/data/claude-home")),
            ..ClaudeConfig::default()
        });
        let env = s.env_from(vars(&["CLAUDE_CONFIG_DIR", "HOME"]));
        assert_eq!(
            env,
            [
                ("HOME".to_owned(), "value of HOME".to_owned()),
                (
                    "CLAUDE_CONFIG_DIR".to_owned(),
                    "/data/claude-home".to_owned()
                )
            ]
        );
    }
}
