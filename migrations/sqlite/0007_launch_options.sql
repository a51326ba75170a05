-- Options the agent takes only when it starts (system prompt, tool-name patterns, most turns,
-- extra directories), as JSON of `protocol::LaunchOptions`; NULL: none. `cwd` (already a
-- column) is a project directory or the conversation's own workspace.
alter table session_info add column launch_options text;
