-- The search index: the words of each user and assistant message's text and of each title, as
-- `src/store/words.rs` makes them, in an FTS5 table that keeps no text of its own. A row's id is
-- its conversation's id times 2^32 plus the message's seq, or 0 for the title, so that a match
-- names its conversation without a lookup. The server writes a row in the transaction that
-- stores what it indexes (a message, a new title); these triggers delete it with what it
-- indexes, whatever deletes that (a rewind, a deleted conversation, a discarded import).
create virtual table message_words using fts5(
    words, content = '', contentless_delete = 1, detail = none, tokenize = 'ascii'
);

create trigger message_words_of_messages after delete on messages
when old.message_type in ('user', 'assistant')
begin
    delete from message_words where rowid = (old.session_pk << 32) + old.seq;
end;

create trigger message_words_of_titles after delete on session_info
begin
    delete from message_words where rowid = old.id << 32;
end;

-- A store written before this migration: at its next start the server indexes its messages up
-- to id `up_to` (from `next_id`, a chunk per transaction, logging its progress) and its titles,
-- then deletes this row. Nothing is written meanwhile: the start waits for it.
create table search_backfill (
    next_id     integer not null,
    up_to       integer not null,
    titles_done integer not null default 0
);
insert into search_backfill (next_id, up_to)
select 1, coalesce((select max(id) from messages), 0)
where exists (select 1 from session_info);
