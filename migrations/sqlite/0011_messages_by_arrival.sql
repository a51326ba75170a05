-- Messages are kept in the order they were stored, with an index by (conversation, seq),
-- instead of clustered by conversation. A commit holding the rows of many conversations then
-- fills the table's last pages together, rather than splitting one page in the middle of the
-- table for each conversation it touches (rows of 0.5 to 1 KiB fit only a few to a page).
create table messages_by_arrival (
    id           integer primary key,
    session_pk   integer not null references session_info (id) on delete cascade,
    seq          integer not null,
    message_type text    not null,
    sdk_uuid     text,
    prompt       integer not null default 0,
    turn_anchor  text,
    payload      text    not null,
    created_at   text    not null,
    turn_cost_usd real
);

insert into messages_by_arrival
    (session_pk, seq, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at,
     turn_cost_usd)
select session_pk, seq, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at,
       turn_cost_usd
from messages order by session_pk, seq;

drop table messages;
alter table messages_by_arrival rename to messages;
create unique index messages_by_seq on messages (session_pk, seq);
