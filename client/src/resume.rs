//! Which conversation `/resume` (or `--resume`) means: the argument, and resolving an id or a
//! prefix against the server's list.

use anyhow::bail;

use crate::rest::Summary;

/// Which conversation to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Pick from a numbered list.
    Pick,
    /// The conversation with the most recent activity.
    Last,
    /// An `agent_id`, `session_id` or a unique prefix of either.
    Id(String),
}

impl Resume {
    /// Parses the argument of `/resume`.
    pub fn parse(arg: &str) -> Self {
        match arg.trim() {
            "" => Resume::Pick,
            "--last" => Resume::Last,
            id => Resume::Id(id.to_owned()),
        }
    }
}

/// The one conversation of `all` that `id` names: an exact `agent_id` or `session_id`, else a
/// unique prefix of either.
pub fn resolve(all: &[Summary], id: &str) -> anyhow::Result<Summary> {
    if let Some(exact) = all.iter().find(|s| s.agent_id == id || s.session_id == id) {
        return Ok(exact.clone());
    }
    let matches: Vec<&Summary> = all
        .iter()
        .filter(|s| s.agent_id.starts_with(id) || s.session_id.starts_with(id))
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => bail!("no session matches `{id}`"),
        many => bail!(
            "`{id}` matches {} sessions ({}); type more of it",
            many.len(),
            many.iter()
                .map(|s| s.agent_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What the user picked from a numbered list: a number in range, else an id to resolve.
pub fn pick<'a>(list: &'a [Summary], line: &str) -> Option<&'a Summary> {
    match line.parse::<usize>() {
        Ok(n) if (1..=list.len()).contains(&n) => Some(&list[n - 1]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(agent_id: &str, session_id: &str) -> Summary {
        Summary {
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            title: None,
            message_count: 0,
            last_active_at: String::new(),
            worktree: None,
            owner: None,
            role: None,
        }
    }

    #[test]
    fn resume_arguments() {
        assert_eq!(Resume::parse(""), Resume::Pick);
        assert_eq!(Resume::parse(" --last "), Resume::Last);
        assert_eq!(Resume::parse("abc"), Resume::Id("abc".into()));
    }

    #[test]
    fn ids_resolve_exactly_then_by_unique_prefix() {
        let all = [
            summary("cli-1", "5b0c-aaaa"),
            summary("cli-10", "77ee-bbbb"),
        ];
        assert_eq!(resolve(&all, "cli-1").unwrap().agent_id, "cli-1");
        assert_eq!(resolve(&all, "77ee").unwrap().agent_id, "cli-10");
        assert_eq!(resolve(&all, "5b0c-aaaa").unwrap().agent_id, "cli-1");
        let err = resolve(&all, "cli").unwrap_err().to_string();
        assert!(err.contains("matches 2 sessions"), "{err}");
        assert!(resolve(&all, "zz").is_err());
    }

    #[test]
    fn picks_by_number_in_range() {
        let all = [summary("a", "1"), summary("b", "2")];
        assert_eq!(pick(&all, "2").unwrap().agent_id, "b");
        assert!(pick(&all, "0").is_none());
        assert!(pick(&all, "3").is_none());
        assert!(pick(&all, "a").is_none());
    }
}
