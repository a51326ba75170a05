-- One row per conversation, keyed by (principal, agent_id).
create table session_info (
    id              integer primary key,
    principal       text    not null,
    agent_id        text    not null,
    -- our id: storage, display, workspace name, and (unified) the agent's own id
    session_id      text    not null unique,
    -- the id the agent reported in its init message; the only id ever passed to --resume
    sdk_session_id  text,
    unified         integer not null default 0,
    backend         text    not null,
    title           text,
    cwd             text    not null,
    model           text,
    permission_mode text,
    status          text    not null default 'idle',
    created_at      text    not null,
    last_active_at  text    not null,
    message_count   integer not null default 0,
    -- highest seq ever assigned; seqs are never reused, even after a rewind
    last_seq        integer not null default 0,
    -- user turns sent and result messages stored: a difference means unfinished turns
    prompt_count    integer not null default 0,
    result_count    integer not null default 0,
    total_cost_usd  real    not null default 0,
    input_tokens    integer not null default 0,
    output_tokens   integer not null default 0,
    duration_ms     integer not null default 0,
    unique (principal, agent_id)
);

create index session_info_by_activity on session_info (principal, last_active_at desc);

-- Every stored frame of a conversation, in seq order.
create table messages (
    session_pk   integer not null references session_info (id) on delete cascade,
    seq          integer not null,
    message_type text    not null,
    -- the agent's uuid for the message, when it has one
    sdk_uuid     text,
    -- 1 for the user's own chat messages (the start of a turn)
    prompt       integer not null default 0,
    -- on result rows: uuid of the turn's last assistant message (the rewind anchor)
    turn_anchor  text,
    payload      text    not null,
    created_at   text    not null,
    primary key (session_pk, seq)
) without rowid;
