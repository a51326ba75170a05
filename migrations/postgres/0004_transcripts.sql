-- What an agent keeps of a conversation beyond our rows (the Claude CLI's transcript file), kept
-- here too so that any node can resume the conversation: mirrored after each turn and when the
-- node stops it, written back before a resume on a node that lacks it.
create table transcripts (
    agent_session text primary key,
    session_pk    bigint not null references session_info (id) on delete cascade,
    content       bytea not null,
    updated_at    timestamptz not null
);
create index transcripts_session on transcripts (session_pk);
