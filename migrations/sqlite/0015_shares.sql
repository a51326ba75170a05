-- Conversations shared with other principals. `alias` is the `agent_id` the principal it is
-- shared with uses for it (`~` and 16 letters and digits, never one of their own ids); `role`
-- is `viewer` or `editor`. A share goes with its conversation.
create table shares (
    session_pk integer not null references session_info (id) on delete cascade,
    principal  text    not null,
    alias      text    not null unique,
    role       text    not null check (role in ('viewer', 'editor')),
    created_at text    not null,
    primary key (session_pk, principal)
);
create index shares_by_principal on shares (principal);
