//! Tool-name patterns (`allowed_tools`, `disallowed_tools`): their form, and which ones approve more than they name.

use super::MAX_TOOL_PATTERN_CHARS;

/// Checks a tool-name pattern: a name of `[A-Za-z0-9_.*-]` starting with a letter, optionally
/// followed by `(specifier)` (no parentheses, commas or control characters inside), at most
/// [`MAX_TOOL_PATTERN_CHARS`] characters in all.
pub fn valid_tool_pattern(pattern: &str) -> bool {
    if pattern.is_empty() || pattern.chars().count() > MAX_TOOL_PATTERN_CHARS {
        return false;
    }
    let (name, specifier) = match pattern.split_once('(') {
        Some((name, rest)) => match rest.strip_suffix(')') {
            Some(inner) => (name, Some(inner)),
            None => return false,
        },
        None => (pattern, None),
    };
    let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'*' | b'-'));
    let specifier_ok = specifier.is_none_or(|inner| {
        !inner.trim().is_empty()
            && !inner
                .chars()
                .any(|c| c.is_control() || matches!(c, '(' | ')' | ','))
    });
    name_ok && specifier_ok
}

/// Programs that run whatever text they are given (shells, interpreters, editors and pagers
/// with a shell escape, and the commands that run their arguments or options as a command):
/// a `Bash` pattern whose command is one of them approves every command.
const RUNS_ANY_COMMAND: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "mksh",
    "csh",
    "tcsh",
    "fish",
    "busybox",
    "env",
    "exec",
    "eval",
    "command",
    "builtin",
    "source",
    ".",
    "xargs",
    "sudo",
    "su",
    "doas",
    "runuser",
    "nohup",
    "setsid",
    "time",
    "timeout",
    "nice",
    "ionice",
    "stdbuf",
    "chroot",
    "unshare",
    "nsenter",
    "strace",
    "ltrace",
    "watch",
    "script",
    "parallel",
    "node",
    "nodejs",
    "deno",
    "bun",
    "npx",
    "perl",
    "ruby",
    "irb",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "pwsh",
    "powershell",
    "osascript",
    "find",
    "ipython",
    "ssh",
    "tar",
    "sed",
    "vi",
    "vim",
    "nvim",
    "emacs",
    "ed",
    "ex",
    "less",
    "more",
    "man",
    "gdb",
];

/// Whether tool-name pattern `pattern` (of a valid form, see [`valid_tool_pattern`]) may
/// approve more than it names, so that it needs `agent.allow_bypass_permissions`. Only these
/// shapes name what they approve:
///
/// - `Bash(command)` or `Bash(prefix:*)`: one exact command, or the commands starting with a
///   literal prefix; `:*` at the end is the only wildcard. The command's program (its first
///   word, without quotes, backslashes or a directory, in any case) must not be a shell, an
///   interpreter, an editor or pager, or a command that runs its arguments or options as a
///   command (`sh`, `python3`, `env`, `xargs`, `sudo`, `vim`, `tar`, …); `git` needs a
///   subcommand first (`git -c alias.x=!sh x` runs anything); the command must not start with
///   `NAME=value` (`LD_PRELOAD=…`) nor hold `;`, `&`, `|`, `<`, `>`, `$` or a backquote.
/// - A file tool's path (`Read`, `Edit`, `Write`, …): relative to the working directory, each
///   component literal and not hidden (no `.`, `..`, `.claude`, `.git`, `~`), optionally ending
///   in `/**` or `/**/*.ext` (`Edit(src/**)`, `Read(docs/**/*.md)`).
/// - Any other tool: a literal argument without wildcards (`WebFetch(domain:example.com)`).
///
/// The argument must not be empty or start or end with a space. Everything else is such a
/// pattern: a bare name (`Bash`), any other wildcard (`Bash(*)`, `Bash(*a*)`, `Read(/**)`,
/// `WebFetch(domain:*)`, `mcp__*`), `Bash(sh:*)`, `Bash(/usr/bin/env:*)`, an absolute or
/// hidden path (`Write(/home/u/.bashrc)`, `Edit(.claude/settings.json)`).
pub fn grants_whole_tool(pattern: &str) -> bool {
    let Some((name, rest)) = pattern.split_once('(') else {
        return true;
    };
    let Some(argument) = rest.strip_suffix(')') else {
        return true;
    };
    if name.contains('*') || argument.is_empty() || argument.trim() != argument {
        return true;
    }
    if name.eq_ignore_ascii_case("Bash") {
        let command = argument.strip_suffix(":*").unwrap_or(argument);
        return command.is_empty()
            || command.trim() != command
            || command.contains('*')
            || runs_any_command(command);
    }
    if FILE_TOOLS
        .iter()
        .any(|tool| name.eq_ignore_ascii_case(tool))
    {
        return !names_visible_files_below(argument);
    }
    argument.contains('*')
}

/// The Claude CLI's tools whose pattern argument is a path.
const FILE_TOOLS: &[&str] = &[
    "Read",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "LS",
];

/// Whether path pattern `path` names only files below the working directory that are not
/// hidden: relative, every component literal (no wildcard, not empty, not starting with `.` or
/// `~`), optionally ending in `/**` or `/**/*.ext` after at least one such component. Hidden
/// files hold what an agent must not change unasked: the agent's own settings (`.claude/`),
/// a repository's hooks and config (`.git/`), a shell's start-up files.
fn names_visible_files_below(path: &str) -> bool {
    let literal = |component: &str| {
        !component.is_empty()
            && !component.starts_with(['.', '~'])
            && !component.contains(['*', '?', '[', '{', '\\'])
    };
    let mut components: Vec<&str> = path.split('/').collect();
    if let [.., "**", last] = components.as_slice()
        && let Some(extension) = last.strip_prefix("*.")
        && extension.bytes().all(|b| b.is_ascii_alphanumeric())
        && !extension.is_empty()
    {
        components.truncate(components.len() - 2);
    } else if components.last() == Some(&"**") {
        components.pop();
    }
    !components.is_empty() && components.into_iter().all(literal)
}

/// Whether shell command (or command prefix) `command` runs a program that runs any text, or
/// holds shell syntax that could add a command of its own.
fn runs_any_command(command: &str) -> bool {
    if command.contains([';', '&', '|', '<', '>', '$', '`']) {
        return true;
    }
    let mut words = command.split_whitespace();
    let Some(program) = words.next() else {
        return true;
    };
    if program.contains('=') {
        return true;
    }
    let program: String = program
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect::<String>()
        .to_ascii_lowercase();
    let program = program.rsplit('/').next().unwrap_or_default();
    program.is_empty()
        || program.starts_with("python")
        || program.starts_with("pypy")
        || RUNS_ANY_COMMAND.contains(&program)
        || (program == "git" && words.next().is_none_or(|word| word.starts_with('-')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_that_grant_a_whole_tool_are_told_apart() {
        for whole in [
            "Bash",
            "Bash(*)",
            "Bash(**)",
            "Bash(:*)",
            "Bash( :*)",
            "Bash( *:* )",
            "Bash( * )",
            "Bash(* *)",
            "Bash(*a*)",
            "Bash(git*)",
            "Bash(git *:*)",
            "Bash(git log :*)",
            "Bash( git log:*)",
            "Bash(sh:*)",
            "Bash(sh -c:*)",
            "Bash(SH -c:*)",
            "bash(Bash -c:*)",
            "Bash(/bin/sh:*)",
            "Bash(/usr/bin/env:*)",
            "Bash(./bash:*)",
            "Bash(\\sh:*)",
            "Bash('sh' -c:*)",
            "Bash(\"bash\":*)",
            "Bash(FOO=1 sh:*)",
            "Bash(env FOO=1 git:*)",
            "Bash(zsh:*)",
            "Bash(python:*)",
            "Bash(python3 -c:*)",
            "Bash(Python3.12:*)",
            "Bash(node -e:*)",
            "Bash(perl -e:*)",
            "Bash(eval:*)",
            "Bash(exec git:*)",
            "Bash(xargs:*)",
            "Bash(sudo git log:*)",
            "Bash(find . -exec:*)",
            "Bash(awk:*)",
            "Bash($SHELL:*)",
            "Bash(git log; sh:*)",
            "Bash(git log && sh:*)",
            "Bash(git log | sh:*)",
            "Bash(`sh`:*)",
            "Bash(git log > /etc/passwd)",
            "Read(/**)",
            "Read(//**)",
            "Read(/srv/docs/*.md)",
            "Read(/srv/docs/notes.md)",
            "Read(//srv/docs/notes.md)",
            "Edit(~/**)",
            "Edit(./**)",
            "Edit(src:*)",
            "Edit(src/*.rs)",
            "Edit(src/**/*)",
            "Glob(**)",
            "Read(**/*.md)",
            "Write(/home/u/.bashrc)",
            "Write(.git/hooks/pre-commit)",
            "Edit(~/.claude/settings.json)",
            "Edit(.claude/settings.local.json)",
            "edit(src/../.claude/settings.json)",
            "Write(src/.env)",
            "Read(src//main.rs)",
            "Bash(LD_PRELOAD=/tmp/x.so git log:*)",
            "Bash(FOO=1 git log:*)",
            "Bash(git:*)",
            "Bash(git -c alias.x=!sh x:*)",
            "Bash(tar:*)",
            "Bash(sed -n:*)",
            "Bash(vim:*)",
            "Bash(ssh host:*)",
            "Bash(ipython:*)",
            "WebFetch(domain:*)",
            "WebFetch",
            "mcp__server__tool",
            "mcp__*(x)",
            "mcp__*",
        ] {
            assert!(valid_tool_pattern(whole), "{whole}");
            assert!(grants_whole_tool(whole), "{whole}");
        }
        for scoped in [
            "Bash(git log:*)",
            "Bash(npm run test:*)",
            "Bash(git status)",
            "bash(cargo test:*)",
            "Read(docs/notes.md)",
            "Edit(src/main.rs)",
            "Edit(src/**)",
            "read(docs/**/*.md)",
            "Write(src/generated/out.json)",
            "WebFetch(domain:example.com)",
        ] {
            assert!(!grants_whole_tool(scoped), "{scoped}");
        }
    }
}
