-- How the agent's next launch starts, set by a rewind, a fork or an import and cleared once
-- the agent reports its id: JSON of `store::NextLaunch` (fork at an anchor, fork whole, or
-- start fresh). NULL: resume `sdk_session_id` (or start new when there is none).
alter table session_info add column next_launch text;

-- Stored messages up to this seq are not in the agent's own memory (an imported transcript,
-- or a rewind to before anything the agent said); the demo agent counts turns after it.
alter table session_info add column memory_from_seq integer not null default 0;
