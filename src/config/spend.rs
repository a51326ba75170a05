//! The `[credentials]` and `[budgets]` settings: where the key that seals principals' own agent
//! credentials comes from, which variable names an agent takes as a credential, and the
//! spending caps every principal gets unless an admin set others.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

/// Settings of principals' own agent credentials (see `docs/credentials.md`).
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialsConfig {
    /// A file holding the secret key(s), one a line, base64 of 32 bytes: the first seals, the
    /// others only open what they sealed (a key being rotated out). `AGENTMUX_SECRET_KEY`
    /// gives the one key instead. Neither: principals can't store credentials.
    pub key_file: Option<PathBuf>,
    /// The key itself (`AGENTMUX_SECRET_KEY`); never shown.
    pub secret_key: Option<String>,
    /// Longest value of one variable, in bytes.
    pub max_value_bytes: usize,
}

/// Shows whether a key is set, never the key.
impl fmt::Debug for CredentialsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialsConfig")
            .field("key_file", &self.key_file)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<set>"))
            .field("max_value_bytes", &self.max_value_bytes)
            .finish()
    }
}

impl Default for CredentialsConfig {
    fn default() -> Self {
        CredentialsConfig {
            key_file: None,
            secret_key: None,
            max_value_bytes: 16 << 10,
        }
    }
}

/// The credential variables of the Claude CLI unless `claude.credential_env` says otherwise.
pub const CLAUDE_CREDENTIAL_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// Names no agent may take as a credential, whatever the configuration says: they change how
/// programs are found, loaded or run, not whose account they use.
const NEVER_CREDENTIALS: &[&str] = &[
    "PATH",
    "HOME",
    "SHELL",
    "ENV",
    "BASH_ENV",
    "IFS",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PERL5LIB",
    "RUBYOPT",
    "CLAUDE_CONFIG_DIR",
];

/// Why `name` can't be a credential variable, if it can't: it must be upper-case letters,
/// digits and `_` (not starting with a digit), at most 128 of them, and none of the names that
/// change how programs run (`PATH`, `LD_*`, `NODE_OPTIONS`, …).
pub fn credential_name_problem(name: &str) -> Option<String> {
    let well_formed = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !well_formed {
        return Some(format!(
            "`{}` is not a variable name (upper-case letters, digits and `_`)",
            crate::protocol::truncate_chars(name, 64)
        ));
    }
    if NEVER_CREDENTIALS.contains(&name)
        || name.starts_with("LD_")
        || name.starts_with("DYLD_")
        || name.starts_with("AGENTMUX_")
    {
        return Some(format!(
            "`{name}` changes how programs run; it can't be a credential"
        ));
    }
    None
}

/// Spending caps in US dollars every principal has unless an admin set others (see
/// `docs/budgets.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetsConfig {
    /// What one principal may spend per day (UTC); unset: no cap.
    pub daily_usd: Option<f64>,
    /// What one principal may spend per calendar month (UTC); unset: no cap.
    pub monthly_usd: Option<f64>,
}

impl BudgetsConfig {
    /// Checks the configured caps.
    ///
    /// # Errors
    /// When a cap is negative, not a number or absurdly high.
    pub fn check(&self) -> anyhow::Result<()> {
        for (what, cap) in [
            ("budgets.daily_usd", self.daily_usd),
            ("budgets.monthly_usd", self.monthly_usd),
        ] {
            if let Some(cap) = cap {
                crate::protocol::check_cap(what, cap).map_err(anyhow::Error::msg)?;
            }
        }
        Ok(())
    }
}

impl super::Config {
    /// The variables a principal may set as their own credentials for agent `agent` (none for
    /// the demo agent or an agent that is not configured).
    pub fn credential_names(&self, agent: &str) -> &[String] {
        match self.agents.get(agent) {
            Some(def) => match (&def.credential_env, def.kind) {
                (Some(names), _) => names,
                (None, super::AgentKind::Claude) => &self.claude.credential_env,
                (None, _) => &[],
            },
            None if agent == "claude" => &self.claude.credential_env,
            None => &[],
        }
    }

    /// Checks the credential settings: every listed name is one a credential may have, and
    /// the default caps are in range.
    ///
    /// # Errors
    /// Names the setting and what is wrong with it.
    pub fn check_spend(&self) -> anyhow::Result<()> {
        let lists = std::iter::once((
            "claude.credential_env".to_owned(),
            &self.claude.credential_env,
        ))
        .chain(self.agents.iter().filter_map(|(name, def)| {
            def.credential_env
                .as_ref()
                .map(|names| (format!("agents.{name}.credential_env"), names))
        }));
        for (setting, names) in lists {
            for name in names {
                if let Some(problem) = credential_name_problem(name) {
                    anyhow::bail!("{setting}: {problem}");
                }
            }
        }
        self.budgets.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_that_change_no_program_are_credentials() {
        for ok in ["ANTHROPIC_API_KEY", "GEMINI_API_KEY", "AWS_REGION", "X1"] {
            assert_eq!(credential_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "PATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "NODE_OPTIONS",
            "BASH_ENV",
            "AGENTMUX_SECRET_KEY",
            "lower",
            "A-B",
            "A=B",
            "1ABC",
            "",
            "A\0B",
            "-X",
        ] {
            assert!(credential_name_problem(bad).is_some(), "{bad:?}");
        }
        assert!(credential_name_problem(&"A".repeat(129)).is_some());
    }

    #[test]
    fn configured_caps_are_numbers_within_reason() {
        for (daily, ok) in [
            (Some(0.0), true),
            (Some(12.5), true),
            (None, true),
            (Some(-1.0), false),
            (Some(1e12), false),
        ] {
            let budgets = BudgetsConfig {
                daily_usd: daily,
                monthly_usd: None,
            };
            assert_eq!(budgets.check().is_ok(), ok, "{daily:?}");
        }
    }
}
