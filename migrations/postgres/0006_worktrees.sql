-- A conversation's own git worktree (JSON: its path, repository, branch and base), when it has one.
alter table session_info add column worktree text;
